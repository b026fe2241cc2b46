r"""Presets of `experiments.dicode`, chosen big_vision style:
``--config=experiments/configs/dicode.py:<preset>``.

The defaults are ``jaxlab.rl.dicode.get_config()``; a preset changes fields of it.

Presets:
  cpu    (default; also no ``:<preset>``) the library defaults: the smallest run that exercises the
         whole loop on a CPU: a tiny GTrXL, 16 environments, 3 sessions of 4 PPO updates
         (3 x 4 x 16 x 32 = 6,144 environment steps), two evolution rounds (4 proposals each
         through the sandbox), so the archive ends with the 4 seed tasks plus the admitted
         proposals, each with its score (mostly 0 at this budget:
         64-step scoring windows; the `learn` preset scores whole sessions). The agent learns
         next to nothing. One compiled program trains, evaluates and scores (docs/dicode.md,
         "Compile time"); a cold run compiles ~126 CPU-s before its first step (the craftax world
         generator 26 s, the PPO-GTrXL chunk 69 s, 4 task programs 16 s, the reset 4 s), where
         it compiled the generator into the reset, the step and the evaluation before
         (docs/dicode.md, "Compile time"). Later runs load it from the persistent cache.
  learn  the curricula study of docs/dicode.md: an MLP agent (64, 64) instead of the GTrXL,
         3 sessions of 4 PPO updates x 16 environments x 64 steps (12,288 environment steps),
         the whole session scored (256 steps per environment, so task episodes finish), one
         evolution round of 4 proposals after session 1 (scored in session 2), evaluation on 16
         held-out worlds x 256 steps. Sized to what the shared 2-core CPU could finish for 3
         curricula x 3 seeds under a load average of ~40, not to make the agent good.
  paper  the paper's settings (arXiv 2602.08194 and its reference code): 1024 environments x 128
         steps, 100 updates per session, 16 tasks, 40-update scoring window, evolution every 2
         sessions, 10 proposals, GTrXL 256 wide, ~2e9 environment steps: a GPU run.

Commands (from the repository root):
  python -m experiments.dicode --proposer=offline
  python -m experiments.dicode --curriculum=none
  python -m experiments.dicode --config=experiments/configs/dicode.py:paper --proposer=llm \
      --llm_url=http://localhost:8000/v1 --llm_model=Qwen/Qwen3-235B-A22B-Thinking-2507-FP8

Any field is overridden with ``--config.<field>=<value>``, e.g. ``--config.sessions=20``.
"""

from __future__ import annotations

import ml_collections

from jaxlab.rl import dicode, ppo

PRESETS = ("cpu", "learn", "paper")


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """The preset ``arg`` (``cpu``, the default, or ``paper``) of `experiments.dicode`."""
  preset = arg or "cpu"
  if preset not in PRESETS:
    raise ValueError(f"unknown preset {preset!r}; allowed: {', '.join(PRESETS)}")
  c = dicode.get_config()
  if preset == "learn":
    c.policy = "mlp"  # compiles and steps far faster than the GTrXL on a CPU
    c.ppo.mlp.hidden, c.ppo.mlp.activation = (64, 64), "tanh"
    c.ppo.num_steps, c.ppo.epochs, c.ppo.minibatches, c.ppo.lr = 64, 2, 2, 5e-4
    c.updates_per_session, c.score_window, c.sessions = 4, 4, 3  # 3 x 4 x 16 x 64 = 12,288 steps
    c.evolve_every, c.proposals = 2, 4  # one evolution round (after session 1) of 4 proposals
    c.ppo.eval_envs, c.ppo.eval_steps = 16, 256  # one pass of the 16 environments
  if preset == "paper":
    base = ppo.get_config()  # the paper's PPO sizes and GTrXL are PPO's Craftax defaults
    c.ppo.num_envs, c.ppo.epochs, c.ppo.minibatches = base.num_envs, base.epochs, base.minibatches
    c.ppo.gtrxl = base.gtrxl  # 256 wide, 8 heads, 2 layers, 128-step window
    c.ppo.num_steps = 128
    c.ppo.eval_envs, c.ppo.eval_steps = 1024, 8192
    c.updates_per_session, c.score_window, c.tasks_per_session = 100, 40, 16
    steps_per_session = c.ppo.num_envs * c.ppo.num_steps * c.updates_per_session
    c.sessions = 2_005_401_600 // steps_per_session  # ~2e9 environment steps
    c.evolve_every = 2
    c.capacity, c.num_slots, c.proposals = 100, 128, 10
    c.plr_capacity, c.sfl_candidates, c.sfl_buffer, c.sfl_rollout_steps = 4000, 4000, 256, 1500
    c.levels_per_session = 256
  return c
