"""The whole ITC agent from a config, as ``python -m experiments.itc`` builds it: the environment,
the policy, the initial Dyna state, and the real vs imagined rollout picture of the end of a run.
"""

from __future__ import annotations

import pathlib

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.core import plots
from jaxlab.core.errors import require
from jaxlab.rl.itc import buffer as buffer_lib
from jaxlab.rl.itc import dyna, imagine
from jaxlab.rl.itc import tokenizer as tok_lib
from jaxlab.rl.ppo import policies


def make_policy(config, num_actions: int) -> policies.ImpalaRNNPolicy:
  """The IMPALA CNN + GRU agent of ``config.policy``."""
  p = config.policy
  return policies.ImpalaRNNPolicy(
    num_actions,
    action_dim=0,
    channels=tuple(p.channels),
    embed=p.embed,
    hidden=p.hidden,
    head_hidden=p.head_hidden,
  )


def create(config, cfg: dyna.DynaConfig, key):
  """``(env, state)``: ``config.env`` with ``ppo.num_envs`` environments and the initial Dyna
  state of the agent ``cfg`` (``validate_config(config)``)."""
  from jaxlab.envs import craftax

  env = craftax.make(config.env, config.ppo.num_envs, config.ppo.reset_ratio, field="config.env")
  require(
    env.num_actions == cfg.wm.num_actions,
    "config.env",
    f"has {env.num_actions} actions, the world model {cfg.wm.num_actions}",
  )
  state = dyna.init(env, make_policy(config, env.num_actions), cfg, key)
  return env, state


def recorded(workdir) -> bytes | None:
  """The bytes of ``workdir``'s summary.json (None without one): unchanged by a run, the run was
  a finished one re-run, and its rollout.png is kept as it is."""
  path = pathlib.Path(workdir) / "summary.json"
  return path.read_bytes() if path.exists() else None


def rollout_picture(state: dyna.DynaState, cfg: dyna.DynaConfig, steps: int, path, key):
  """A real replayed sequence, its tokenization and the world model's open-loop imagination
  under the same actions, decoded by ``cfg.decode`` and by independent sampling (a PNG)."""
  steps = min(steps, cfg.wm.max_blocks)
  seq = buffer_lib.sample(state.replay, key, 1, steps + 1)
  tokens = tok_lib.encode(state.book, seq["obs"], cfg.tokenizer)
  rows = {
    "real": seq["obs"][0, 1:],
    "real (tokenized)": tok_lib.decode(state.book, tokens, cfg.tokenizer)[0, 1:],
  }
  for method in dict.fromkeys([cfg.decode, "sample"]):
    imagined = imagine.open_loop(
      state.wm,
      state.book,
      tokens[:, 0],
      seq["action"][:, :steps],
      jnp.zeros((1,), bool),
      jax.random.fold_in(key, 1),
      method=method,
      itc_cfg=cfg.itc,
    )
    rows[f"imagined ({method})"] = tok_lib.decode(state.book, imagined, cfg.tokenizer)[0]
  rows = {k: np.asarray(v) for k, v in rows.items()}
  title = "real vs imagined frames (same actions, world model from the first real frame)"
  return plots.frames(path, rows, title)
