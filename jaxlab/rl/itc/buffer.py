"""Replay of real transitions per environment (a ring of ``capacity`` steps each), in the state.

Frames are stored as uint8 (Craftax pixels are multiples of 1/255, so the round trip is exact)
and re-tokenized when sampled, with the codebook of that moment, as in ITC's code.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

Array = jax.Array


@struct.dataclass
class Replay:
  obs: Array  # uint8 [N, C, H, W, ch]
  reset: Array  # bool [N, C]: obs starts an episode
  action: Array  # int32 [N, C]
  reward: Array  # float32 [N, C]
  done: Array  # bool [N, C]: the episode ended after this step
  count: Array  # int32: steps written per environment so far


def init(num_envs: int, capacity: int, obs_shape) -> Replay:
  z = lambda dt, *s: jnp.zeros((num_envs, capacity) + tuple(s), dt)
  return Replay(
    obs=z(jnp.uint8, *obs_shape),
    reset=z(bool),
    action=z(jnp.int32),
    reward=z(jnp.float32),
    done=z(bool),
    count=jnp.int32(0),
  )


def to_uint8(obs: Array) -> Array:
  return jnp.round(jnp.clip(obs, 0.0, 1.0) * 255.0).astype(jnp.uint8)


def add(replay: Replay, traj: dict) -> Replay:
  """Appends a ``[T, N]`` trajectory (``obs, reset, action, reward, done``)."""
  cap = replay.reset.shape[1]
  t_len = traj["action"].shape[0]
  idx = (replay.count + jnp.arange(t_len)) % cap

  def put(buf, x):
    return buf.at[:, idx].set(jnp.swapaxes(x, 0, 1).astype(buf.dtype))

  return Replay(
    obs=put(replay.obs, to_uint8(traj["obs"])),
    reset=put(replay.reset, traj["reset"]),
    action=put(replay.action, traj["action"]),
    reward=put(replay.reward, traj["reward"]),
    done=put(replay.done, traj["done"]),
    count=replay.count + t_len,
  )


def sample(replay: Replay, key: Array, batch: int, length: int) -> dict:
  """``batch`` sequences of ``length`` consecutive steps of one environment each, batch-major;
  ``obs`` as float32 in [0, 1]. Needs ``length <= min(count, capacity)``."""
  n, cap = replay.reset.shape
  filled = jnp.minimum(replay.count, cap)
  oldest = (replay.count - filled) % cap
  k_env, k_start = jax.random.split(key)
  env = jax.random.randint(k_env, (batch,), 0, n)
  start = jax.random.randint(k_start, (batch,), 0, jnp.maximum(filled - length + 1, 1))
  pos = (oldest + start[:, None] + jnp.arange(length)[None]) % cap
  take = lambda x: x[env[:, None], pos]
  out = {k: take(getattr(replay, k)) for k in ("reset", "action", "reward", "done")}
  out["obs"] = take(replay.obs).astype(jnp.float32) / 255.0
  return out
