"""Per-unit episode counters over a session's scoring window (DiCode, arXiv 2602.08194).

:func:`counted` wraps a session's vectorised environment so that its state also counts, per unit
(``info["task"]``: a task, a level, or the plain game), the episodes that finish inside the last
``score_window`` updates: finished, successes, summed return and achievements (:func:`counts`,
what the curriculum scores). It also records each environment's first episode up to a step limit
(:func:`first_episodes`, what the held-out evaluation reports). The counters have a fixed size
(``num_units``), so a new task set is new data for the same compiled step.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxlab.core.sharding import to_device as _host
from jaxlab.envs import vec

Array = jax.Array

NEVER = 2**31 - 1  # a step count no session reaches


@struct.dataclass
class Counted:
  """An environment state plus per-unit counts of the episodes finished in the window, and each
  environment's first episode up to step ``stop`` (the evaluation's record)."""

  inner: Any
  t: Array  # int32: environment steps of this session so far
  start: Array  # int32: steps before the scoring window opens
  finished: Array  # float32[K]
  success: Array  # float32[K]
  ret: Array  # float32[K]: sum of the finished episodes' returns
  achievements: Array  # float32[K, A]: finished episodes unlocking each achievement
  stop: Array  # int32: the first episodes are recorded for this many steps
  first_done: Array  # bool[N]: the environment's first episode has ended
  first_ret: Array  # float32[N]: its return (so far, while it runs)
  first_len: Array  # int32[N]
  first_ach: Array  # float32[N, A]: its achievements, once it has ended


@functools.lru_cache(maxsize=16)
def _counted_step(step: Callable, k: int, a: int) -> Callable:
  """One wrapped step per inner step function: sessions over the same environment code share
  it, so the PPO program built on it is traced once per run (the task set is state)."""

  def counted_step(state: Counted, action, key):
    obs, inner, reward, done, info = step(state.inner, action, key)
    n = done.shape[0]
    task = info.get("task", jnp.zeros((n,), jnp.int32))
    success = info.get("success", jnp.zeros((n,), bool)).astype(jnp.float32)
    on = (info["returned_episode"] & (state.t >= state.start)).astype(jnp.float32)
    hot = jax.nn.one_hot(task, k, dtype=jnp.float32) * on[:, None]  # [N, K]
    ach = info.get("achievements", jnp.zeros((n, a), jnp.float32))
    live = ~state.first_done & (state.t < state.stop)
    ends = done & live
    new = Counted(
      inner=inner,
      t=state.t + 1,
      start=state.start,
      finished=state.finished + hot.sum(0),
      success=state.success + hot.T @ success,
      ret=state.ret + hot.T @ info["episode_return"],
      achievements=state.achievements + hot.T @ ach,
      stop=state.stop,
      first_done=state.first_done | ends,
      first_ret=state.first_ret + jnp.where(live, reward.astype(jnp.float32), 0.0),
      first_len=state.first_len + live.astype(jnp.int32),
      first_ach=jnp.where(ends[:, None], ach, state.first_ach),
    )
    return obs, new, reward, done, info

  return counted_step


def counted(env: vec.VecEnv, num_units: int, window_start: int, stop: int = NEVER) -> vec.VecEnv:
  """``env`` whose state also counts, per unit ``info["task"]`` (0 when absent), the episodes
  that end at or after environment step ``window_start`` of the session, and records each
  environment's first episode over the first ``stop`` steps (:func:`first_episodes`)."""
  a = len(env.achievement_names)
  k = num_units

  def reset(key):
    obs, inner = env.reset(key)
    n = obs.shape[0]
    z = _zeros((k,), np.float32)
    return obs, Counted(
      inner,
      _host(np.int32(0)),
      _host(np.int32(window_start)),
      z,
      z,
      z,
      _zeros((k, a), np.float32),
      _host(np.int32(stop)),
      _zeros((n,), bool),
      _zeros((n,), np.float32),
      _zeros((n,), np.int32),
      _zeros((n, a), np.float32),
    )

  return dataclasses.replace(env, reset=reset, step=_counted_step(env.step, k, a))


def _zeros(shape, dtype):
  return _host(np.zeros(shape, dtype))


def counts(state: Counted) -> dict[str, np.ndarray]:
  s = jax.device_get(state)
  return {
    "finished": np.asarray(s.finished),
    "success": np.asarray(s.success),
    "return": np.asarray(s.ret),
    "achievements": np.asarray(s.achievements),
  }


def first_episodes(state: Counted) -> dict[str, np.ndarray]:
  """Each environment's first episode, as ``jaxlab.rl.ppo.evaluation.summarize`` reads it."""
  s = jax.device_get(state)
  return {
    "return": np.asarray(s.first_ret),
    "length": np.asarray(s.first_len),
    "finished": np.asarray(s.first_done),
    "achievements": np.asarray(s.first_ach),
  }
