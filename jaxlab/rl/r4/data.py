"""Trajectories and ratings for R4 (arXiv 2601.09236): rollouts, simulated raters, rating files.

* :func:`chain_trajectories`: a 10-state chain MDP with reward ``s / 9`` (the cheap synthetic check
  of docs/r4.md).
* :func:`collect`: fixed-length rollouts of gymnax tasks (``jaxlab.envs.gymnax``), each from a
  fresh reset and masked after its first episode ends, under diverse behaviour policies (random
  linear policies mixed with uniform actions, each environment its own) or a given actor.
* Simulated raters (:func:`simulate_ratings`): true returns binned into ordinal classes by fixed
  edges or quantiles, as the authors' ``configs/bins.json``; options: Gaussian noise on the return
  before binning (``noise`` x the returns' standard deviation) and imbalance (class ``c`` kept with
  probability ``(1 - imbalance)^c``, so high ratings are rare).
* Human ratings (:func:`read_ratings`): a CSV file with header ``trajectory_id,rating``, one
  integer id (an index into the trajectory pool the experiment generated from its seed and
  exports as ``trajectories.npz``) and one integer rating per line. Any problem is one
  ``ConfigError`` naming the file and line.
"""

from __future__ import annotations

import dataclasses
import pathlib

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.core.errors import ConfigError, require
from jaxlab.core.resources import INT32_MAX

Array = jax.Array


@dataclasses.dataclass
class Trajectories:
  """``M`` trajectories of ``T`` steps (host arrays); ``mask[m, t]`` = step t is in the episode."""

  obs: np.ndarray  # [M, T, *obs_shape]
  action: np.ndarray  # [M, T] int or [M, T, d] float
  reward: np.ndarray  # [M, T] true rewards (masked)
  mask: np.ndarray  # [M, T] float32

  @property
  def true_return(self) -> np.ndarray:
    return np.sum(self.reward * self.mask, axis=1)

  def take(self, idx) -> Trajectories:
    return Trajectories(self.obs[idx], self.action[idx], self.reward[idx], self.mask[idx])


def chain_trajectories(
  key: Array, num: int, length: int = 20, states: int = 10, scale=1.0, shift=0.0
):
  """Random-policy walks on a chain (move left/right, clipped at the ends), uniform start;
  reward ``scale * s / (states - 1) + shift`` for the state the step starts in. Observations are
  one-hot states; actions 0 (left) / 1 (right)."""
  k0, ka = jax.random.split(key)
  s0 = jax.random.randint(k0, (num,), 0, states)
  acts = jax.random.randint(ka, (num, length), 0, 2)
  moves = 2 * acts - 1

  def step(s, mv):
    return jnp.clip(s + mv, 0, states - 1), s

  _, seq = jax.lax.scan(step, s0, moves.T)
  seq = np.asarray(seq.T)
  obs = np.eye(states, dtype=np.float32)[seq]
  reward = (scale * seq / (states - 1) + shift).astype(np.float32)
  return Trajectories(obs, np.asarray(acts), reward, np.ones((num, length), np.float32))


def _behaviour(key: Array, env, obs_dim: int):
  """Per-environment random linear policies: logits or mean ``= scale * W obs``, mixed with
  uniform actions at a per-environment rate; a spread of returns for the raters."""
  n = env.num_envs
  kw, ks, ke = jax.random.split(key, 3)
  out = env.num_actions or env.action_dim
  w = jax.random.normal(kw, (n, obs_dim, out)) / np.sqrt(obs_dim)
  scale = jnp.exp(jax.random.uniform(ks, (n, 1), minval=np.log(0.3), maxval=np.log(30.0)))
  explore = jax.random.uniform(ke, (n,))

  def act(obs, key):
    k1, k2, k3 = jax.random.split(key, 3)
    h = scale * jnp.einsum("nd,nda->na", obs.reshape(n, -1), w)
    if env.num_actions:
      a = jax.random.categorical(k1, h)
      rand = jax.random.randint(k2, (n,), 0, env.num_actions)
    else:
      a = 2.0 * jnp.tanh(h)
      rand = jax.random.uniform(k2, (n, out), minval=-2.0, maxval=2.0)
    use = jax.random.uniform(k3, (n,)) < explore
    return jnp.where(use.reshape((n,) + (1,) * (a.ndim - 1)), rand, a)

  return act


def collect(env, length: int, key: Array, actor=None) -> Trajectories:
  """``env.num_envs`` trajectories of ``length`` steps from fresh resets (first episode only).

  ``actor(obs[N, ...], key) -> action[N]``; default: :func:`_behaviour`'s diverse policies."""
  k_reset, k_pol, k_run = jax.random.split(key, 3)
  if actor is None:
    actor = _behaviour(k_pol, env, int(np.prod(env.obs_shape)))

  from jaxlab.rl.ppo import rollouts  # the shared rollout step (docs/ppo.md)

  act = lambda pcarry, obs, reset, k: (pcarry, actor(obs, k), {})

  @jax.jit
  def run(k_reset, k_run):
    obs, state = env.reset(k_reset)
    carry = (state, obs, jnp.ones((env.num_envs,), bool), ())
    _, tr = rollouts.rollout(env.step, act, carry, k_run, length)
    alive = rollouts.alive(tr["done"])  # masks every step after the first episode
    o, a, r, m = tr["obs"], tr["action"], tr["reward"] * alive, alive
    return [jnp.swapaxes(x, 0, 1) for x in (o, a, r, m)]

  o, a, r, m = (np.asarray(x) for x in run(k_reset, k_run))
  return Trajectories(o, a, r.astype(np.float32), m.astype(np.float32))


def quantile_edges(returns: np.ndarray, num_classes: int) -> np.ndarray:
  """Interior bin edges putting ``returns`` into ``num_classes`` equally filled classes.

  The edges are returns that occur (no interpolation), so a monotone transform of the returns
  moves the edges with them and leaves every class unchanged, ties included."""
  q = np.linspace(0, 1, num_classes + 1)[1:-1]
  return np.quantile(np.asarray(returns, float), q, method="inverted_cdf")


def perceived_returns(returns, key: Array, noise: float) -> np.ndarray:
  """What a noisy rater perceives: the returns plus Gaussian noise of ``noise`` x their standard
  deviation (0: the returns). The same draw feeds the ratings and Bradley-Terry's teacher, so at
  a given noise level both see the same corrupted returns."""
  g = np.asarray(returns, np.float64)
  if noise > 0:
    g = g + noise * (np.std(g) + 1e-8) * np.asarray(jax.random.normal(key, g.shape))
  return g


def simulate_ratings(returns, edges, key: Array, noise: float) -> np.ndarray:
  """Class of each return (``searchsorted`` on ``edges``) after Gaussian noise of ``noise`` x the
  returns' standard deviation (0: none; :func:`perceived_returns`)."""
  g = perceived_returns(returns, key, noise)
  return np.searchsorted(np.asarray(edges, np.float64), g, side="right").astype(np.int32)


def matched_pairs(perceived, key: Array) -> tuple[np.ndarray, np.ndarray]:
  """Bradley-Terry's labels at R4's label count: ``len(perceived)`` pairs of distinct rated
  trajectories (``pairs[P, 2]``, indices into ``perceived``), drawn once, each labelled by the
  same rater: ``label = 1`` when it perceived the first as better, ``0.5`` on a tie, else ``0``.
  ``perceived`` are the returns the rater perceived when it rated them
  (:func:`perceived_returns`), so a pair is compared with the same noise draw as its ratings."""
  g = np.asarray(perceived, np.float64)
  n = len(g)
  require(n >= 2, "ratings", f"Bradley-Terry pairs need at least 2 rated trajectories, got {n}")
  k1, k2 = jax.random.split(key)
  a = np.asarray(jax.random.randint(k1, (n,), 0, n))
  b = (a + np.asarray(jax.random.randint(k2, (n,), 1, n))) % n  # b != a, uniform over the others
  pairs = np.stack([a, b], axis=1).astype(np.int32)
  label = np.where(g[a] > g[b], 1.0, np.where(g[a] == g[b], 0.5, 0.0)).astype(np.float32)
  return pairs, label


def imbalance_keep(ratings, key: Array, imbalance: float) -> np.ndarray:
  """Indices kept when class ``c`` survives with probability ``(1 - imbalance)^c``."""
  u = np.asarray(jax.random.uniform(key, (len(ratings),)))
  return np.flatnonzero(u < (1.0 - imbalance) ** np.asarray(ratings))


def dense_classes(ratings) -> np.ndarray:
  """Ratings relabelled 0..n-1 in order (classes nobody used disappear)."""
  _, dense = np.unique(np.asarray(ratings), return_inverse=True)
  return dense.astype(np.int32)


def read_ratings(path: str | pathlib.Path, num_trajectories: int, field: str = "ratings"):
  """``(ids, ratings)`` from a ``trajectory_id,rating`` CSV; ConfigError naming file and line."""
  path = pathlib.Path(path)
  require(path.is_file(), field, f"{str(path)!r} is not a file (want a CSV trajectory_id,rating)")
  try:
    lines = path.read_text().splitlines()
  except (OSError, UnicodeDecodeError) as e:
    raise ConfigError(field, f"cannot read {path}: {e}") from None
  require(
    bool(lines) and lines[0].replace(" ", "") == "trajectory_id,rating",
    field,
    f"{path} line 1: the header must be 'trajectory_id,rating'",
  )
  ids, ratings, seen = [], [], {}
  for i, line in enumerate(lines[1:], start=2):
    if not line.strip():
      continue
    parts = [p.strip() for p in line.split(",")]
    where = f"{path} line {i}"
    require(len(parts) == 2, field, f"{where}: want 2 fields 'id,rating', got {len(parts)}")
    try:
      tid, rating = int(parts[0]), int(parts[1])
    except ValueError:
      raise ConfigError(field, f"{where}: id and rating must be integers, got {line!r}") from None
    require(
      abs(rating) <= INT32_MAX and abs(tid) <= INT32_MAX,
      field,
      f"{where}: id and rating must be integers of at most 10 digits (<= {INT32_MAX}), "
      f"got {line.strip()[:60]!r}",
    )
    require(
      0 <= tid < num_trajectories,
      field,
      f"{where}: trajectory id {tid} is not in the pool 0..{num_trajectories - 1}",
    )
    require(rating >= 0, field, f"{where}: rating must be >= 0, got {rating}")
    require(
      tid not in seen, field, f"{where}: trajectory {tid} already rated on line {seen.get(tid)}"
    )
    seen[tid] = i
    ids.append(tid)
    ratings.append(rating)
  require(len(set(ratings)) >= 2, field, f"{path}: needs at least 2 distinct ratings")
  return np.asarray(ids, np.int64), np.asarray(ratings, np.int64)
