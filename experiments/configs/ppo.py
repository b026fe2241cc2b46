r"""Config of `experiments.ppo` (big_vision-style file: ``--config=<this file>:<preset>``).

Every preset starts from ``jaxlab.rl.ppo.get_config()`` (Craftax_Baselines' PPO, the one
declaration of the defaults and their meaning) and changes fields:

  (none)         the default run: ``ppo.gymnax_config()``, a CartPole-sized PureJaxRL setting
                 (16 environments x 128 steps, 1e6 steps, lr 1e-3, a 64-64 MLP); solves
                 CartPole-v1 in under a minute on a CPU.
  craftax        Craftax_Baselines' PPO as declared (1024 environments x 64 steps, 1e9 steps, a
                 3 x 512 MLP): the preset for every Craftax run.
  craftax_gtrxl  craftax with DiCode's PPO-GTrXL settings (arXiv 2602.08194, Table 6): 128-step
                 rollouts, gamma 0.999, entropy 0.002.
  cpu            a seconds-long smoke run of the whole program (runlocal): the default at 8
                 iterations of 8 environments x 32 steps, tiny policies, a short evaluation.

Commands (from the repository root):
  python -m experiments.ppo --env=cartpole
  python -m experiments.ppo --env=cartpole --config=experiments/configs/ppo.py:cpu
  python -m experiments.ppo --env=craftax-classic-symbolic \
      --config=experiments/configs/ppo.py:craftax --steps=60 --config.num_envs=64 \
      --config.mlp.hidden='(256,256,256)' --config.eval_envs=64
  python -m experiments.ppo --env=craftax-symbolic --policy=gtrxl \
      --config=experiments/configs/ppo.py:craftax_gtrxl

Any field is overridden with ``--config.<field>=<value>`` after the preset, e.g.
``--config.lr=3e-4``.
"""

from __future__ import annotations

import ml_collections

from jaxlab.rl import ppo

PRESETS = ("craftax", "craftax_gtrxl", "cpu")


def get_config(preset: str | None = None) -> ml_collections.ConfigDict:
  """The config of ``preset`` (None: the gymnax-sized default run; see the module docstring)."""
  if preset not in (None, "", *PRESETS):
    raise ValueError(f"unknown preset {preset!r}; allowed: {', '.join(PRESETS)}")
  c = ppo.get_config()
  if preset in ("craftax", "craftax_gtrxl"):
    if preset == "craftax_gtrxl":
      c.num_steps = 128
      c.gamma = 0.999
      c.ent_coef = 0.002
    return c
  c = ppo.gymnax_config()
  if preset == "cpu":
    c.num_envs = 8
    c.num_steps = 32
    c.total_timesteps = 8 * c.num_envs * c.num_steps  # 8 iterations
    c.eval_envs = 8
    c.eval_steps = 200
    c.mlp.hidden = (16, 16)
    c.gru.embed = c.gru.hidden = 16
    c.gru.head_hidden = (16,)
    c.gtrxl.embed = c.gtrxl.ffn = 16
    c.gtrxl.window = 8
    c.gtrxl.head_hidden = (16,)
  return c
