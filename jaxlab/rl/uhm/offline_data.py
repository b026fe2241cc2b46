"""Offline dataset on device plus a jit-able batch sampler (and k-step trajectory windows).

Input: a dict of numpy arrays in the OGBench / FQL layout, N transitions: observations (N,O),
actions (N,A), rewards (N,), masks (N,) [0 = true terminal, no bootstrap], terminals (N,) [1 = last
transition of a trajectory, timeouts included], next_observations (N,O).

    data = make_offline_data(np_dict)
    batch = jax.jit(partial(sample, batch_size=256, k_max=8))(data, key)
    runtime.train(..., data=data, sample_fn=partial(sample, batch_size=256, k_max=8))

Batch keys (B = batch_size, K = k_max):
    observations BxO, actions BxA, rewards B, masks B, next_observations BxO,
    next_actions BxA (dataset action at s'; the transition's own action at a trajectory end),
    and when k_max > 0 the window along the trajectory starting at the sampled transition i:
    window_observations BxKxO  (next_observations[i+k], i.e. s_{k+1}),
    window_actions BxKxA       (actions[i+k+1], the dataset action at s_{k+1}),
    window_rewards BxK         (rewards[i+k]),
    window_masks BxK           (masks[i+k]),
    window_valid BxK           (1 while i+k is inside the trajectory; entries past the end
                                repeat the last transition and must be ignored).
"""

from __future__ import annotations

from collections.abc import Mapping

import flax.struct as struct
import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.core.errors import check_finite_array, require

REQUIRED = ("observations", "actions", "rewards", "masks", "terminals", "next_observations")


class OfflineData(struct.PyTreeNode):
  observations: jax.Array  # NxO
  actions: jax.Array  # NxA
  rewards: jax.Array  # N
  masks: jax.Array  # N
  next_observations: jax.Array  # NxO
  traj_end: jax.Array  # N int32: index of the last transition of i's trajectory

  @property
  def size(self) -> int:
    return self.rewards.shape[0]


def make_offline_data(
  d: Mapping[str, np.ndarray], action_clip_eps: float | None = None
) -> OfflineData:
  """Validate a numpy dataset dict and move it to device with trajectory-end indices.

  action_clip_eps: clip actions to [-1 + eps, 1 - eps], as FQL's `make_env_and_datasets` does with
  eps = 1e-5 (keeps a tanh actor's BC target inside its open range); None leaves them as they are.
  Bad data (missing keys, ragged or empty arrays, non-real dtypes, NaN/inf) raises
  ``ConfigError('data', ...)``.
  """
  missing = [k for k in REQUIRED if k not in d]
  require(not missing, "data", f"missing keys {missing}; required keys: {list(REQUIRED)}")
  N = len(d["rewards"])
  require(N > 0, "data", "the offline dataset is empty")
  for k in REQUIRED:
    require(
      len(d[k]) == N, "data", f"key {k!r} has {len(d[k])} rows, expected {N} (len of rewards)"
    )
  for k in REQUIRED:
    dtype = np.asarray(d[k]).dtype
    # a complex array would be cast to float32 silently, dropping its imaginary part
    require(
      dtype.kind in "biuf", f"data.{k}", f"has dtype {dtype}; expected real numbers (int or float)"
    )
  for k in ("observations", "next_observations", "actions"):
    require(np.ndim(d[k]) == 2, "data", f"key {k!r} must be 2-D (N, dim), got {np.shape(d[k])}")
  require(
    np.shape(d["observations"]) == np.shape(d["next_observations"]),
    "data",
    "observations and next_observations must have the same shape",
  )
  for k in REQUIRED:
    check_finite_array(f"data.{k}", d[k])
  term = np.asarray(d["terminals"]).reshape(N).astype(bool).copy()
  term[-1] = True  # the array end always closes a trajectory
  ends = np.nonzero(term)[0]
  traj_end = ends[np.searchsorted(ends, np.arange(N))]
  f32 = lambda x: jnp.asarray(np.asarray(x, np.float32))
  actions = np.asarray(d["actions"], np.float32)
  if action_clip_eps is not None:
    require(
      0 <= action_clip_eps < 1, "action_clip_eps", f"must be in [0, 1), got {action_clip_eps}"
    )
    actions = np.clip(actions, -1 + action_clip_eps, 1 - action_clip_eps)
  return OfflineData(
    observations=f32(d["observations"]),
    actions=f32(actions),
    rewards=f32(np.reshape(d["rewards"], N)),
    masks=f32(np.reshape(d["masks"], N)),
    next_observations=f32(d["next_observations"]),
    traj_end=jnp.asarray(traj_end.astype(np.int32)),
  )


def obs_stats(data: OfflineData, eps: float = 1e-3) -> dict:
  """Per-dimension statistics for model coordinates: observation mean / std and std of s' - s.

  Stds are floored at eps so constant dimensions do not blow up.
  """
  delta = data.next_observations - data.observations
  return dict(
    mean=jnp.mean(data.observations, 0),
    std=jnp.maximum(jnp.std(data.observations, 0), eps),
    delta_std=jnp.maximum(jnp.std(delta, 0), eps),
  )


def sample(data: OfflineData, key, batch_size: int, k_max: int = 0) -> dict:
  """Uniform batch of transitions; with k_max > 0 also the k_max-step window (see module doc)."""
  idx_B = jax.random.randint(key, (batch_size,), 0, data.size)
  end_B = data.traj_end[idx_B]
  nxt_B = jnp.minimum(idx_B + 1, end_B)
  batch = dict(
    observations=data.observations[idx_B],
    actions=data.actions[idx_B],
    rewards=data.rewards[idx_B],
    masks=data.masks[idx_B],
    next_observations=data.next_observations[idx_B],
    next_actions=data.actions[nxt_B],
  )
  if k_max > 0:
    raw_BxK = idx_B[:, None] + jnp.arange(k_max)[None]
    valid_BxK = raw_BxK <= end_B[:, None]
    w_BxK = jnp.minimum(raw_BxK, end_B[:, None])
    wa_BxK = jnp.minimum(raw_BxK + 1, end_B[:, None])
    batch.update(
      window_observations=data.next_observations[w_BxK],
      window_actions=data.actions[wa_BxK],
      window_rewards=data.rewards[w_BxK],
      window_masks=data.masks[w_BxK],
      window_valid=valid_BxK.astype(jnp.float32),
    )
  return batch
