"""The whole ITC agent from a config, as ``python -m experiments.itc`` builds it: the environment,
the policy, the initial Dyna state, and the real vs imagined rollout picture of the end of a run.
"""

from __future__ import annotations

import functools
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

# Compiler options of a program that runs once per run (the picture): the backend's optimisation
# level only changes the machine code, not the XLA graph (as `ppo.init` does).
_RUN_ONCE = {"xla_backend_optimization_level": 0} if jax.default_backend() == "cpu" else None


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
  state of the agent ``cfg`` (``validate_config(config)``). ``key``: one raw key, or raw keys
  ``[seeds, 2]`` for the states of several seeds stacked on a leading axis (`dyna.init_seeds`)."""
  from jaxlab.envs import craftax

  env = craftax.make(config.env, config.ppo.num_envs, config.ppo.reset_ratio, field="config.env")
  require(
    env.num_actions == cfg.wm.num_actions,
    "config.env",
    f"has {env.num_actions} actions, the world model {cfg.wm.num_actions}",
  )
  policy = make_policy(config, env.num_actions)
  if jnp.ndim(key) == 2:
    return env, dyna.init_seeds(env, policy, cfg, key)
  state = dyna.init(env, policy, cfg, key)  # compiled programs, not eager work (dyna.init)
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
  choices = tuple(dict.fromkeys([cfg.decode, "sample"]))
  picture = _picture_fn(cfg, steps, choices)
  rows = {}
  for method in choices:
    index = jnp.int32(choices.index(method))  # traced: both decoders share one program
    real, tokenized, imagined = picture(state.wm, state.book, state.replay, key, index)
    rows.setdefault("real", real)
    rows.setdefault("real (tokenized)", tokenized)
    rows[f"imagined ({method})"] = imagined
  rows = {k: np.asarray(v) for k, v in rows.items()}
  title = "real vs imagined frames (same actions, world model from the first real frame)"
  return plots.frames(path, rows, title)


@functools.cache
def _picture_fn(cfg: dyna.DynaConfig, steps: int, choices: tuple[str, ...]):
  """The picture's frames as ONE jitted program of (world model, codebook, replay, key, index into
  ``choices``): the rows of every decoder come from the same compilation. Only the picture's own
  decoders are in it: with ``itc_hungarian``'s host callback the program would be compiled anew
  on every run (JAX's persistent cache skips such programs)."""

  def picture(wm, book, replay, key, index):
    seq = buffer_lib.sample(replay, key, 1, steps + 1)
    tokens = tok_lib.encode(book, seq["obs"], cfg.tokenizer)
    imagined = imagine.open_loop(
      wm,
      book,
      tokens[:, 0],
      seq["action"][:, :steps],
      jnp.zeros((1,), bool),
      jax.random.fold_in(key, 1),
      method=index,
      itc_cfg=cfg.itc,
      choices=choices,
    )
    decode = lambda t: tok_lib.decode(book, t, cfg.tokenizer)[0]
    return seq["obs"][0, 1:], decode(tokens)[1:], decode(imagined)

  return jax.jit(picture, compiler_options=_RUN_ONCE)
