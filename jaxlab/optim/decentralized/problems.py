"""Decentralized problems f(x) = Σ_i λ_i f_i(x) and the node-weight distributions λ.

Every problem stores node i's local data padded to a common length with a sample count, so one
vmapped/shard_mapped loss serves every node:
  f_i(x) = (1/m_i) Σ_{r < m_i} ℓ(x; a_r, y_r) + (reg/2)‖x‖²,
and a stochastic gradient uses ``batch_size`` indices drawn uniformly (with replacement) from node
i's own m_i samples (``batch_size=0``: full local gradient).

* `least_squares` — the paper's synthetic task as described in its summary
  (f_i = 1/(2m)‖B_i x − b_i‖²); the heterogeneity model (per-node row scales and per-node
  solutions) is this codebase's choice.
* `digits_logistic`, `digits_mlp` — multinomial logistic regression / a 64-32-10 tanh MLP on
  scikit-learn's bundled ``load_digits`` (1797 8×8 images, no network), split non-IID by a
  per-class Dirichlet(α) partition (the standard recipe of Hsu et al. 2019, arXiv 1909.06335).
  Needs scikit-learn.

f* is exact for least squares (weighted normal equations, float64), the lowest value of a long
full-batch L-BFGS run for the (strongly convex, L2-regularised) logistic regression, and 0 for the
MLP (non-convex: the "gap" reported there is f(x̄_λ) itself).

Bad arguments raise :class:`jaxlab.core.errors.ConfigError` naming the argument.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from jaxlab.core.errors import ConfigError, check_choice, require
from jaxlab.core.train_state import TrainState
from jaxlab.optim.decentralized import graphs

PROBLEMS = ("least_squares", "logistic", "mlp")
LAMBDAS = ("uniform", "dirichlet", "degree", "data")


class Problem(struct.PyTreeNode):
  """Local data for n nodes plus the per-example loss.

  ``inputs_NxMx...``, ``targets_NxM`` padded to M = max_i m_i; ``counts_N`` holds m_i.
  """

  inputs: jax.Array
  targets: jax.Array
  counts: jax.Array
  x0: Any  # initial parameters (one node's pytree)
  example_loss: Callable = struct.field(pytree_node=False)  # (params, a, y) -> scalar
  name: str = struct.field(pytree_node=False, default="problem")
  reg: float = struct.field(pytree_node=False, default=0.0)
  batch_size: int = struct.field(pytree_node=False, default=0)
  smoothness: float = struct.field(pytree_node=False, default=1.0)  # max_i L_i (step-size scale)
  convex: bool = struct.field(pytree_node=False, default=True)
  test: Any = None  # optional (inputs, targets) held out for accuracy

  @property
  def n(self) -> int:
    return int(self.counts.shape[0])

  # ---- one node: data_i = (inputs_i, targets_i, count_i) --------------------------------------
  def node_data(self):
    return (self.inputs, self.targets, self.counts)

  def local_loss(self, params, data_i) -> jax.Array:
    """Full-batch f_i(params) on node i's (padded) data."""
    a, y, m = data_i
    per = jax.vmap(self.example_loss, in_axes=(None, 0, 0))(params, a, y)
    mask = jnp.arange(per.shape[0]) < m
    return jnp.sum(jnp.where(mask, per, 0.0)) / m + self._reg(params)

  def local_grad(self, params, data_i, key) -> jax.Array:
    """Stochastic gradient of f_i: ``batch_size`` samples of node i's own data (0 = full)."""
    if self.batch_size <= 0:
      return jax.grad(self.local_loss)(params, data_i)
    a, y, m = data_i
    idx = jnp.floor(jax.random.uniform(key, (self.batch_size,)) * m).astype(jnp.int32)

    def batch_loss(p):
      per = jax.vmap(self.example_loss, in_axes=(None, 0, 0))(p, a[idx], y[idx])
      return jnp.mean(per) + self._reg(p)

    return jax.grad(batch_loss)(params)

  def _reg(self, params):
    if not self.reg:
      return 0.0
    return 0.5 * self.reg * sum(jnp.sum(p**2) for p in jax.tree.leaves(params))

  # ---- global ---------------------------------------------------------------------------------
  def global_loss(self, params, lam) -> jax.Array:
    """f(params) = Σ_i λ_i f_i(params) (dense: vmapped over nodes)."""
    per = jax.vmap(self.local_loss, in_axes=(None, 0))(params, self.node_data())
    return jnp.sum(jnp.asarray(lam, per.dtype) * per)

  def f_star(self, lam) -> float:
    if self.name == "least_squares":
      return _least_squares_fstar(self, np.asarray(lam, np.float64))
    if not self.convex:
      return 0.0
    return _lbfgs_fstar(self, lam)

  def accuracy(self, params) -> float | None:
    """Held-out accuracy of a classifier's params (None for regression)."""
    if self.test is None:
      return None
    a, y = self.test
    logits = jax.vmap(self.example_logits, in_axes=(None, 0))(params, a)
    return float(jnp.mean(jnp.argmax(logits, -1) == y))

  @property
  def example_logits(self):
    return self.example_loss.logits  # set on classification losses


# ------------------------------------------------------------------------------------------------
# Least squares.


def _ls_loss(x, a, y):
  return 0.5 * (a @ x - y) ** 2


def least_squares(
  n: int = 16,
  d: int = 10,
  m: int = 20,
  *,
  seed: int = 0,
  hetero: float = 1.0,
  noise: float = 0.1,
  batch_size: int = 5,
) -> Problem:
  """Heterogeneous least squares: node i has B_i = s_i·N(0, 1) (m×d), s_i log-normal (spread of
  L_i), and b_i = B_i(x* + hetero·δ_i) + noise·ε, so local minimisers differ (data
  heterogeneity)."""
  rng = np.random.default_rng(seed)
  scale = np.exp(0.5 * rng.standard_normal(n))
  b_mat = scale[:, None, None] * rng.standard_normal((n, m, d))
  x_true = rng.standard_normal(d)
  x_loc = x_true[None] + hetero * rng.standard_normal((n, d))
  y = np.einsum("nmd,nd->nm", b_mat, x_loc) + noise * rng.standard_normal((n, m))
  smooth = max(np.linalg.eigvalsh(b_mat[i].T @ b_mat[i] / m).max() for i in range(n))
  return Problem(
    inputs=jnp.asarray(b_mat, jnp.float32),
    targets=jnp.asarray(y, jnp.float32),
    counts=jnp.full((n,), m, jnp.int32),
    x0=jnp.zeros((d,), jnp.float32),
    example_loss=_ls_loss,
    name="least_squares",
    batch_size=batch_size,
    smoothness=float(smooth),
  )


def _least_squares_fstar(p: Problem, lam: np.ndarray) -> float:
  a = np.asarray(p.inputs, np.float64)
  y = np.asarray(p.targets, np.float64)
  m = np.asarray(p.counts, np.float64)
  w = lam / m
  h = np.einsum("n,nmd,nme->de", w, a, a)
  g = np.einsum("n,nmd,nm->d", w, a, y)
  x = np.linalg.solve(h, g)
  r = np.einsum("nmd,d->nm", a, x) - y
  return float(0.5 * np.sum(w[:, None] * r**2))


# ------------------------------------------------------------------------------------------------
# Digits (scikit-learn's bundled data set).


def dirichlet_split(
  labels: np.ndarray, n: int, alpha: float, seed: int = 0, min_size: int = 2
) -> list[np.ndarray]:
  """Per-class Dirichlet(α) partition of sample indices over n nodes (smaller α = more non-IID).
  Resamples until every node has at least ``min_size`` samples."""
  require(math.isfinite(alpha) and alpha > 0, "alpha", f"must be finite and > 0, got {alpha}")
  rng = np.random.default_rng(seed)
  for _ in range(1000):
    parts = [[] for _ in range(n)]
    for c in np.unique(labels):
      idx = rng.permutation(np.flatnonzero(labels == c))
      cuts = (np.cumsum(rng.dirichlet(alpha * np.ones(n)))[:-1] * len(idx)).astype(int)
      for i, chunk in enumerate(np.split(idx, cuts)):
        parts[i].extend(chunk.tolist())
    if min(len(p) for p in parts) >= min_size:
      return [np.sort(np.asarray(p, np.int64)) for p in parts]
  raise ConfigError(
    "alpha", f"dirichlet_split: could not give every one of {n} nodes {min_size} samples; raise it"
  )


class MLP(nn.Module):
  hidden: int = 32
  classes: int = 10

  @nn.compact
  def __call__(self, a):
    return nn.Dense(self.classes)(jnp.tanh(nn.Dense(self.hidden)(a)))


def _classification_loss(logits_fn):
  def loss(params, a, y):
    return optax.softmax_cross_entropy_with_integer_labels(logits_fn(params, a), y)

  loss.logits = logits_fn
  return loss


def _linear_logits(params, a):
  return a @ params["w"] + params["b"]


def _load_digits(n: int, alpha: float, seed: int, test_frac: float):
  try:
    from sklearn.datasets import load_digits
  except ImportError as e:  # scikit-learn is in the `test` extra
    raise ImportError("digits problems need scikit-learn: pip install scikit-learn") from e
  data = load_digits()
  a = (data.data / 16.0).astype(np.float32)
  y = data.target.astype(np.int32)
  perm = np.random.default_rng(seed).permutation(len(y))
  n_test = int(test_frac * len(y))
  test, train = perm[:n_test], perm[n_test:]
  parts = dirichlet_split(y[train], n, alpha, seed)
  mmax = max(len(p) for p in parts)
  inputs = np.zeros((n, mmax, a.shape[1]), np.float32)
  targets = np.zeros((n, mmax), np.int32)
  for i, p in enumerate(parts):
    inputs[i, : len(p)] = a[train][p]
    targets[i, : len(p)] = y[train][p]
  counts = np.asarray([len(p) for p in parts], np.int32)
  return (
    jnp.asarray(inputs),
    jnp.asarray(targets),
    jnp.asarray(counts),
    (jnp.asarray(a[test]), jnp.asarray(y[test])),
  )


def _softmax_smoothness(inputs, counts) -> float:
  """max_i L_i for softmax cross-entropy on linear logits: Hessian ⪯ ½ (1/m_i) Σ a aᵀ ⊗ I."""
  a, m = np.asarray(inputs, np.float64), np.asarray(counts)
  return max(
    0.5 * np.linalg.eigvalsh(a[i, : m[i]].T @ a[i, : m[i]] / m[i]).max() for i in range(len(m))
  )


def digits_logistic(
  n: int = 16,
  *,
  alpha: float = 0.5,
  seed: int = 0,
  reg: float = 1e-3,
  batch_size: int = 16,
  test_frac: float = 0.2,
) -> Problem:
  """Multinomial logistic regression (L2 ``reg``) on non-IID digits."""
  x0 = {"w": jnp.zeros((64, 10), jnp.float32), "b": jnp.zeros((10,), jnp.float32)}
  return _digits_problem(
    n, alpha, seed, test_frac, x0, _linear_logits, "logistic", batch_size, reg=reg
  )


def _digits_problem(n, alpha, seed, test_frac, x0, logits, name, batch_size, reg=0.0, **kw):
  """A non-IID digits classification problem; smoothness of the linear softmax model (+ reg)."""
  inputs, targets, counts, test = _load_digits(n, alpha, seed, test_frac)
  return Problem(
    inputs=inputs,
    targets=targets,
    counts=counts,
    x0=x0,
    example_loss=_classification_loss(logits),
    name=name,
    reg=reg,
    batch_size=batch_size,
    smoothness=_softmax_smoothness(inputs, counts) + reg,
    test=test,
    **kw,
  )


def digits_mlp(
  n: int = 16,
  *,
  alpha: float = 0.5,
  seed: int = 0,
  hidden: int = 32,
  batch_size: int = 16,
  test_frac: float = 0.2,
) -> Problem:
  """64-``hidden``-10 tanh MLP on non-IID digits (non-convex; f* := 0)."""
  model = MLP(hidden=hidden)
  x0 = model.init(jax.random.key(seed), jnp.zeros((64,)))["params"]
  logits = lambda params, a: model.apply({"params": params}, a)
  # smoothness is the linear model's: a scale for the step rule, not a bound for the MLP
  return _digits_problem(n, alpha, seed, test_frac, x0, logits, "mlp", batch_size, convex=False)


def _lbfgs_fstar(p: Problem, lam, iters: int = 500) -> float:
  """The lowest f seen in ``iters`` L-BFGS steps from x0 (unit step without line search: f is
  smooth and strongly convex, and the minimum over the run guards against a late blow-up)."""
  lam = jnp.asarray(lam, jnp.float32)
  f = lambda x: p.global_loss(x, lam)
  state = TrainState.create(lambda variables: None, p.x0, optax.lbfgs(linesearch=None))

  @jax.jit
  def solve(state):
    def body(carry, _):
      state, best = carry
      value, grads = jax.value_and_grad(f)(state.params)
      best = jnp.where(value < best, value, best)  # NaN never replaces a finite best
      return (state.apply_gradients(grads=grads), best), None

    (state, best), _ = jax.lax.scan(body, (state, jnp.float32(jnp.inf)), None, length=iters)
    last = f(state.params)
    return jnp.where(last < best, last, best)

  return float(solve(state))


def make_problem(
  name: str, n: int, *, seed: int = 0, alpha: float = 0.5, batch_size: int | None = None, **kw
) -> Problem:
  """Builds a problem by name (one of `PROBLEMS`); ``batch_size=None`` keeps the problem's
  default."""
  check_choice("problem", name, PROBLEMS)
  require(batch_size is None or batch_size >= 0, "batch_size", f"must be >= 0, got {batch_size}")
  extra = {} if batch_size is None else {"batch_size": batch_size}
  if name == "least_squares":
    return least_squares(n, seed=seed, **extra, **kw)
  if name == "logistic":
    return digits_logistic(n, alpha=alpha, seed=seed, **extra, **kw)
  return digits_mlp(n, alpha=alpha, seed=seed, **extra, **kw)


# ------------------------------------------------------------------------------------------------
# Node weights λ.


def make_lambda(
  kind: str, graph: graphs.Graph, *, alpha: float = 1.0, seed: int = 0, counts=None
) -> np.ndarray:
  """λ on the simplex: ``uniform``; ``dirichlet`` (Dirichlet(α·1)); ``degree`` (∝ degree+1, the
  setting of docs/decentralized.md); ``data`` (∝ local data sizes ``counts``)."""
  check_choice("lam", kind, LAMBDAS)
  n = graph.n
  if kind == "uniform":
    lam = np.ones(n)
  elif kind == "dirichlet":
    require(math.isfinite(alpha) and alpha > 0, "alpha", f"must be finite and > 0, got {alpha}")
    lam = np.random.default_rng(seed).dirichlet(alpha * np.ones(n))
    lam = np.maximum(lam, 1e-6)  # tiny weights make λ-MH nearly disconnect a node; keep λ > 0
  elif kind == "degree":
    lam = graphs.degree_lambda(graph)
  else:
    require(counts is not None, "counts", "λ = data needs the local data sizes (counts)")
    lam = np.asarray(counts, np.float64)
    require(lam.shape == (n,) and bool(np.all(lam > 0)), "counts", f"must be {n} positive sizes")
  return lam / lam.sum()


def parse_lambda(spec: str, alpha: float = 1.0, field: str = "lam") -> tuple[str, float]:
  """A λ spec as typed on the command line: ``kind`` or ``dirichlet:α`` -> (kind, α).

  ``alpha`` is returned unchanged unless the spec sets it; α must be a finite number > 0. Raises
  ConfigError naming ``field``.
  """
  name, sep, a = spec.strip().partition(":")
  check_choice(field, name, LAMBDAS)
  if sep:
    require(name == "dirichlet", field, f"{spec!r}: only dirichlet takes ':α'")
    try:
      alpha = float(a)
    except ValueError:
      alpha = float("nan")
    ok = bool(np.isfinite(alpha) and alpha > 0)
    require(ok, field, f"{spec!r}: Dirichlet α must be a finite number > 0")
  return name, alpha
