"""R4: Ranked Return Regression, reward learning from ordinal trajectory ratings (arXiv 2601.09236).

A reward model ``r_theta(s, a)`` (an ensemble of MLPs) gives each trajectory a predicted return
``G(tau) = sum_t mask_t r_theta(s_t, a_t)`` (undiscounted, as the authors' code). R4's loss, as in
the authors' PyTorch code (IRLL/R4, ``ranking_mse.py``, ``bin_ranking``):

* a set holds ONE trajectory from each rating class ``c = 0..n-1`` (classes without data are left
  out); for each set ``g = (G(tau_0), ..., G(tau_{n-1}))``
* ``L_rMSE = mean_{set, c} (softrank_eps(g)_c - softrank_eps((0, 1, ..., n-1))_c)^2`` with the
  permutahedron soft rank of :mod:`jaxlab.rl.r4.softrank` (the target is the soft rank of the
  class indices through the same operator, not the raw ratings);
* ``L_OOD = beta * (mean r_theta(uniform box) - mean r_theta(data steps))`` (conservative term);
* optional ``l2 * |theta|^2``.

Baselines on the same trajectories: RbRL (White et al., AAAI 2024, arXiv 2307.16348; its loss as
reconstructed in :func:`rbrl_loss`) and Bradley-Terry preference learning on trajectory pairs (as
in PEBBLE / PrefPPO, arXiv 2106.05091). Every member of the ensemble draws its own sets. Data
(rollouts, simulated raters, the human-ratings file) is in :mod:`jaxlab.rl.r4.data`; the offline
and online protocols with PPO in :mod:`jaxlab.rl.r4.protocol`; the defaults in
:mod:`jaxlab.rl.r4.config`. See docs/r4.md.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxlab.core import runtime
from jaxlab.core.errors import check_choice, require
from jaxlab.core.train_state import TrainState
from jaxlab.rl.r4.softrank import soft_rank

Array = jax.Array
METHODS = ("r4", "rbrl", "bt")


@dataclasses.dataclass(frozen=True)
class RewardConfig:
  """The reward ensemble's settings; no defaults here: ``RewardConfig.from_config(
  r4.get_config().reward, method=...)`` (the fields are documented in :func:`r4.get_config`)."""

  method: str  # r4 | rbrl | bt
  hidden: tuple[int, ...]  # MLP reward model
  ensemble: int  # members
  lr: float  # Adam learning rate
  batch: int  # sets (r4), trajectories (rbrl) or pairs (bt) per step
  steps: int  # gradient steps
  eps: float  # soft-rank regularisation strength
  ood_beta: float  # weight of the OOD term (0: off)
  ood_samples: int  # uniform (s, a) draws per step for the OOD term
  l2: float  # L2 penalty on the parameters
  rbrl_k: float  # RbRL: sharpness of the class scores

  @classmethod
  def from_config(cls, config: Mapping[str, Any], **overrides) -> RewardConfig:
    """The fields of a (ml_collections) config that RewardConfig knows, then ``overrides``."""
    names = {f.name for f in dataclasses.fields(cls)}
    kw = {k: config[k] for k in config.keys() if k in names}
    kw.update(overrides)
    if "hidden" in kw:
      kw["hidden"] = tuple(int(h) for h in kw["hidden"])
    return cls(**kw)


def validate(c: RewardConfig, prefix: str = "config") -> None:
  check_choice(f"{prefix}.method", c.method, METHODS)
  for name in ("ensemble", "batch", "steps", "ood_samples"):
    v = getattr(c, name)
    require(isinstance(v, int) and v >= 1, f"{prefix}.{name}", f"must be an integer >= 1, got {v}")
  for name in ("lr", "eps", "rbrl_k"):
    v = getattr(c, name)
    require(math.isfinite(v) and v > 0, f"{prefix}.{name}", f"must be > 0, got {v}")
  for name in ("ood_beta", "l2"):
    v = getattr(c, name)
    require(math.isfinite(v) and v >= 0, f"{prefix}.{name}", f"must be >= 0, got {v}")
  require(
    len(c.hidden) >= 1 and all(int(h) >= 1 for h in c.hidden),
    f"{prefix}.hidden",
    f"must be positive layer widths, got {c.hidden}",
  )


class RewardMLP(nn.Module):
  """``r(features) -> scalar``; features are the flattened observation and the action."""

  hidden: Sequence[int]

  @nn.compact
  def __call__(self, x):
    for h in self.hidden:
      x = nn.tanh(nn.Dense(h)(x))
    return nn.Dense(1)(x)[..., 0]


def features(obs: Array, action: Array, num_actions: int) -> Array:
  """``[..., obs_dim + A]``: flattened observation and the one-hot (or raw continuous) action."""
  lead = action.shape if num_actions else action.shape[:-1]
  flat = obs.reshape(lead + (-1,)).astype(jnp.float32)
  act = jax.nn.one_hot(action, num_actions) if num_actions else action.astype(jnp.float32)
  return jnp.concatenate([flat, act], axis=-1)


def create(config: RewardConfig, feature_dim: int, key: Array) -> TrainState:
  """A TrainState over the stacked parameters of ``config.ensemble`` members."""
  model, apply, tx = _ensemble(tuple(int(h) for h in config.hidden), config.lr)
  keys = jax.random.split(key, config.ensemble)
  params = jax.vmap(lambda k: model.init(k, jnp.zeros((feature_dim,)))["params"])(keys)
  return TrainState.create(apply, params, tx)


@functools.lru_cache(maxsize=8)
def _ensemble(hidden: tuple[int, ...], lr: float):
  """The model, ensemble apply and optimizer of a reward state, one set per setting: the states
  of several fits (seeds, the online refits) then share one compiled training chunk."""
  model = RewardMLP(hidden)

  def apply(variables, x):  # -> [E, ...]: every member on the same inputs
    return jax.vmap(lambda p: model.apply({"params": p}, x))(variables["params"])

  return model, apply, optax.adam(lr)


def reward(state_or_apply, params, feats: Array) -> Array:
  """Ensemble-mean reward of ``feats[..., F]``."""
  return jnp.mean(state_or_apply(feats, params=params), axis=0)


def returns(per_step: Array, mask: Array) -> Array:
  """``G = sum_t mask_t r_t`` over the last axis (undiscounted)."""
  return jnp.sum(per_step * mask, axis=-1)


# --- losses (one member's predicted returns in, scalar out) ---


def rmse_loss(g: Array, eps: float) -> Array:
  """R4's rMSE: ``g[B, n]`` predicted returns of sets ordered by class (0 = lowest rating)."""
  n = g.shape[-1]
  target = jax.lax.stop_gradient(soft_rank(jnp.arange(n, dtype=g.dtype), eps))
  return jnp.mean((soft_rank(g, eps) - target) ** 2)


def rbrl_loss(g: Array, rating: Array, num_classes: int, k: float) -> Array:
  """RbRL's multi-class loss, reconstructed (White et al., arXiv 2307.16348, Section 4).

  Predicted returns are min-max normalised within the batch; class boundaries follow the batch's
  rating proportions (``b_0 = 0``, ``b_i`` = fraction rated below ``i``, ``b_n = 1``); class ``i``
  scores ``-k (g~ - b_i)(g~ - b_{i+1})`` (positive inside its interval); cross-entropy on ratings.
  """
  gn = (g - jnp.min(g)) / (jnp.max(g) - jnp.min(g) + 1e-8)
  below = jnp.mean(rating[None, :] < jnp.arange(1, num_classes)[:, None], axis=1)
  bounds = jnp.concatenate([jnp.zeros(1), below, jnp.ones(1)])
  scores = -k * (gn[:, None] - bounds[None, :-1]) * (gn[:, None] - bounds[None, 1:])
  logp = jax.nn.log_softmax(scores, axis=-1)
  return -jnp.mean(jnp.take_along_axis(logp, rating[:, None], axis=1))


def bt_loss(g_a: Array, g_b: Array, pref: Array) -> Array:
  """Bradley-Terry cross-entropy: ``pref`` = P(a preferred to b) in {0, 0.5, 1}."""
  logit = g_a - g_b
  return jnp.mean(pref * jax.nn.softplus(-logit) + (1 - pref) * jax.nn.softplus(logit))


def ood_term(r_box: Array, r_data: Array, data_mask: Array) -> Array:
  """``mean r(uniform box) - mean r(data steps)`` (to be multiplied by beta)."""
  return jnp.mean(r_box) - jnp.sum(r_data * data_mask) / jnp.maximum(jnp.sum(data_mask), 1.0)


# --- training (in memory, on the core runtime) ---


def member_apply(config: RewardConfig):
  module = RewardMLP(tuple(int(h) for h in config.hidden))
  return lambda p, x: module.apply({"params": p}, x)


def make_dataset(
  feats, mask, rating, prefer, box_lo, box_hi, num_actions: int, pairs=None, pair_label=None
) -> dict:
  """Training arrays: ``feats[M, T, F]``, ``mask[M, T]``, ``rating[M]`` (dense classes 0..n-1),
  ``prefer[M]`` (what Bradley-Terry's teacher compares), the observation box of the OOD term,
  and per class the member indices, each row repeated to ``M`` (``members[C, M]``, ``counts``:
  only the first ``counts[c]`` are drawn, so the width leaves the draws as they are and gives
  every pool of ``M`` rated trajectories the same shapes, hence one compiled fit).

  ``pairs[P, 2]`` and ``pair_label[P]`` (:func:`jaxlab.rl.r4.data.matched_pairs`): Bradley-Terry
  then draws its batches from these labelled pairs only, instead of a fresh pair each step."""
  rating = np.asarray(rating, np.int32)
  classes = int(rating.max()) + 1
  groups = [np.flatnonzero(rating == c) for c in range(classes)]
  require(all(len(g) for g in groups), "ratings", "every class 0..max must hold a trajectory")
  members = np.stack([np.resize(g, len(rating)) for g in groups]).astype(np.int32)
  return {
    "feats": jnp.asarray(feats, jnp.float32),
    "mask": jnp.asarray(mask, jnp.float32),
    "rating": jnp.asarray(rating),
    "prefer": jnp.asarray(prefer, jnp.float32),
    "members": jnp.asarray(members),
    "counts": jnp.asarray([len(g) for g in groups], jnp.int32),
    "box_lo": jnp.asarray(box_lo, jnp.float32),
    "box_hi": jnp.asarray(box_hi, jnp.float32),
    "num_actions": np.zeros((num_actions,), np.int8),  # its length carries A through jit
  } | (
    {}
    if pairs is None
    else {
      "pairs": jnp.asarray(np.asarray(pairs).T, jnp.int32),
      "pair_label": jnp.asarray(pair_label, jnp.float32),
    }
  )


def _box(data: dict, key: Array, size: int) -> Array:
  """Uniform draws from the observation box, with a uniform action (one-hot if discrete)."""
  lo, hi = data["box_lo"], data["box_hi"]
  num_actions = data["num_actions"].shape[0]
  k1, k2 = jax.random.split(key)
  x = lo + (hi - lo) * jax.random.uniform(k1, (size,) + lo.shape)
  if num_actions:
    act = jax.nn.one_hot(jax.random.randint(k2, (size,), 0, num_actions), num_actions)
    x = x.at[:, -num_actions:].set(act)
  return x


def _member_loss(p, data: dict, key: Array, apply, config: RewardConfig):
  k_idx, k_b, k_box = jax.random.split(key, 3)
  b, m = config.batch, data["rating"].shape[0]
  if config.method == "r4":
    counts = data["counts"]
    pick = jax.random.randint(k_idx, (b, counts.shape[0]), 0, counts[None, :])
    idx = data["members"][jnp.arange(counts.shape[0])[None, :], pick]  # [B, n]: one per class
  elif config.method == "rbrl":
    idx = jax.random.randint(k_idx, (b,), 0, m)
  elif "pairs" in data:  # a fixed set of labelled pairs (as many as there are ratings)
    j = jax.random.randint(k_idx, (b,), 0, data["pair_label"].shape[0])
    idx = data["pairs"][:, j]
  else:
    idx = jax.random.randint(k_idx, (2, b), 0, m)
  r = apply(p, data["feats"][idx])
  mask = data["mask"][idx]
  g = returns(r, mask)
  if config.method == "r4":
    loss = rmse_loss(g, config.eps)
  elif config.method == "rbrl":
    loss = rbrl_loss(g, data["rating"][idx], data["counts"].shape[0], config.rbrl_k)
  elif "pairs" in data:
    loss = bt_loss(g[0], g[1], data["pair_label"][j])
  else:
    va, vb = data["prefer"][idx[0]], data["prefer"][idx[1]]
    loss = bt_loss(g[0], g[1], jnp.where(va > vb, 1.0, jnp.where(va == vb, 0.5, 0.0)))
  ood = ood_term(apply(p, _box(data, k_box, config.ood_samples)), r, mask)
  l2 = sum(jnp.sum(x**2) for x in jax.tree.leaves(p))
  total = loss + config.ood_beta * ood + config.l2 * l2
  return total, {"loss": loss, "ood": ood}


@functools.lru_cache(maxsize=8)
def make_update(config: RewardConfig):
  """``update(state, data, key) -> (state, metrics)``: one Adam step on every member (one
  function per config, so that fits of the same shapes share the runtime's compiled chunk)."""
  apply = member_apply(config)

  def loss_fn(params, data, key):
    keys = jax.random.split(key, config.ensemble)
    total, aux = jax.vmap(lambda p, k: _member_loss(p, data, k, apply, config))(params, keys)
    return jnp.sum(total), jax.tree.map(jnp.mean, aux)

  return lambda state, data, key: state.apply_loss(loss_fn, data, key)


def fit(config: RewardConfig, data: dict, key: Array, log_every: int = 100):
  """Trains the reward ensemble in memory -> ``(state, runtime result)``."""
  validate(config)
  state = create(config, data["feats"].shape[-1], jax.random.fold_in(key, 0))
  loop = runtime.Loop(
    config.steps,
    log_every=min(log_every, config.steps),
    ckpt_every=0,
    progress=False,
    tensorboard=False,
    plot=False,
  )
  return runtime.train(state, make_update(config), loop, key=jax.random.fold_in(key, 1), data=data)


def predict_returns(state: TrainState, feats: Array, mask: Array, chunk: int = 256) -> np.ndarray:
  """Ensemble-mean predicted returns of trajectories ``feats[M, T, F]`` (host array)."""
  f = _predict(state.apply_fn)
  out = [
    f(state.params, feats[i : i + chunk], mask[i : i + chunk]) for i in range(0, len(feats), chunk)
  ]
  return np.concatenate([np.asarray(o) for o in out])


@functools.lru_cache(maxsize=8)
def _predict(apply_fn):
  return jax.jit(lambda p, x, mk: returns(jnp.mean(apply_fn({"params": p}, x), 0), mk))


def alignment(pred, true) -> dict:
  """Kendall tau and Spearman rho between predicted and true returns."""
  from scipy import stats

  tau = stats.kendalltau(pred, true).statistic
  rho = stats.spearmanr(pred, true).statistic
  return {"kendall_tau": float(tau), "spearman_rho": float(rho)}
