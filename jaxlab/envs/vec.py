"""One small vectorised-environment interface for the online RL code (gymnax and Craftax).

A :class:`VecEnv` is static information plus two pure, jittable functions over a batch of N
environments:

  obs, state = env.reset(key)                                    # obs: float32[N, *obs_shape]
  obs, state, reward, done, info = env.step(state, action, key)  # action: [N] or [N, action_dim]

`step` resets finished environments itself, so the returned `obs` of an environment whose episode
ended at this step is the FIRST observation of its next episode; the final observation of the
finished episode is never handed back as a current state. `reward` is float32[N] (the reward of
the transition just taken), `done` is bool[N] (the episode ended at this step: terminated or
truncated). `info` holds arrays of leading size N:

  returned_episode  bool     an episode finished at this step
  episode_return    float32  its undiscounted return (valid where returned_episode, else 0)
  episode_length    int32    its length in steps (valid where returned_episode, else 0)
  achievements      float32[N, A]  Craftax only: 1 where the finished episode unlocked achievement a

The running return and length live in :class:`VecState` next to the batched environment state, so
the statistics are part of the carried state and survive checkpoints. The bookkeeping is shared by
`jaxlab.envs.gymnax` and `jaxlab.envs.craftax` through :func:`init_state` and :func:`track`.
:func:`make` picks the module by name; :func:`versions` gives the package versions for a run's
summary. See docs/online_envs.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxlab.core.errors import ConfigError

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class VecEnv:
  """A batch of `num_envs` environments: static facts plus pure `reset` and `step` (see module)."""

  name: str
  num_envs: int
  obs_shape: tuple[int, ...]
  num_actions: int
  action_dim: int
  achievement_names: tuple[str, ...]
  max_return: float | None
  reset: Callable[[Array], tuple[Array, Any]]
  step: Callable[[Any, Array, Array], tuple[Array, Any, Array, Array, dict]]
  # VecState -> uint8[N, H, W, 3] in jnp (jaxlab.envs.render), for evaluation videos; None: the
  # environment has no renderer
  render: Callable[[Any], Array] | None = None

  @property
  def discrete(self) -> bool:
    return self.num_actions > 0


@struct.dataclass
class VecState:
  """The batched environment state plus the running statistics of the current episodes."""

  env: Any
  episode_return: Array  # float32[N], return so far of the running episode
  episode_length: Array  # int32[N], steps so far of the running episode


def strong(tree: Any) -> Any:
  """`tree` without weak types. craftax's reset leaves some fields weakly typed where its step
  does not; a state whose types change between calls makes `jit` retrace and `scan` reject it."""
  return jax.tree.map(lambda x: jax.lax.convert_element_type(x, jnp.asarray(x).dtype), tree)


def init_state(env_state: Any, num_envs: int) -> VecState:
  return VecState(
    env=strong(env_state),
    episode_return=jnp.zeros((num_envs,), jnp.float32),
    episode_length=jnp.zeros((num_envs,), jnp.int32),
  )


def track(state: VecState, env_state: Any, reward: Array, done: Array) -> tuple[VecState, dict]:
  """Adds one step to the running statistics; returns the new state and the episode info.

  `env_state` is the already-reset batched state that goes with the new `VecState`. The counters
  of an environment whose episode ended restart at zero, and its finished episode is reported in
  `info` (zeros elsewhere, so sums over the batch count finished episodes only).
  """
  ret = state.episode_return + reward.astype(jnp.float32)
  length = state.episode_length + 1
  info = {
    "returned_episode": done,
    "episode_return": jnp.where(done, ret, 0.0).astype(jnp.float32),
    "episode_length": jnp.where(done, length, 0).astype(jnp.int32),
  }
  new = VecState(
    env=strong(env_state),
    episode_return=jnp.where(done, 0.0, ret).astype(jnp.float32),
    episode_length=jnp.where(done, 0, length).astype(jnp.int32),
  )
  return new, info


def select(done: Array, new: Any, old: Any) -> Any:
  """Per-environment `where` over two batched pytrees: `new[i]` where `done[i]`, else `old[i]`."""

  def pick(a, b):
    mask = done.reshape(done.shape + (1,) * (a.ndim - 1))
    return jnp.where(mask, a, b)

  return jax.tree.map(pick, new, old)


def names() -> tuple[str, ...]:
  """Every environment name `make` accepts (gymnax first, then Craftax)."""
  from jaxlab.envs import craftax, gymnax

  return tuple(gymnax.ENVS) + tuple(craftax.ENVS)


def make(name: str, num_envs: int, *, reset_ratio: int | None = None, field: str = "env") -> VecEnv:
  """`jaxlab.envs.craftax.make` or `jaxlab.envs.gymnax.make` by name (`reset_ratio` is for Craftax
  only; None: `jaxlab.envs.craftax.RESET_RATIO`).

  An unknown name is a ConfigError on `field` that lists every allowed name.
  """
  from jaxlab.envs import craftax, gymnax

  ratio = craftax.RESET_RATIO if reset_ratio is None else reset_ratio
  for module, kw in ((craftax, {"reset_ratio": ratio}), (gymnax, {})):
    try:
      module.resolve(name, field)
    except ConfigError:
      continue
    return module.make(name, num_envs, field=field, **kw)
  raise ConfigError(field, f"unknown environment {name!r}; allowed: {', '.join(names())}")


_VERSIONED = ("gymnax", "craftax", "jax", "jaxlib", "flax")


def versions() -> dict[str, str | None]:
  """Installed versions of the environment packages, for every run's summary.json."""
  from jaxlab.core.provenance import package_versions

  return package_versions(_VERSIONED)
