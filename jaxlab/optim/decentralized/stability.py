"""Exact linear analysis of full-gradient decentralized SGD on least squares (NumPy, float64).

With full local gradients g_i(x) = H_i x − c_i (H_i = B_iᵀB_i/m_i, c_i = B_iᵀb_i/m_i), one step of
either strategy is affine in the stacked iterate X (n×d), with gradient scale s (n λ_i for (I), 1
for (II)) and mixing B::

    ATC: X⁺ = B (X − γ s⊙(H X − c))       CTA: X⁺ = B X − γ s⊙(H X − c)

so its stability limit and its fixed point are exact linear algebra:

* `largest_stable_lr`: the largest γ with spectral radius ρ(T(γ)) < 1, T the linear part (bisection
  on γ; ρ is continuous in γ). Each strategy can then be compared at its *own* limit instead of at
  (I)'s, which is where `decentralized.default_lr` puts both.
* `fixed_point`: the X with X = step(X). With a constant γ decentralized SGD stops at this X, not at
  consensus on x* = argmin Σ λ_i f_i; the bias is O(γ) and vanishes as γ → 0 (tested).

Usage::

    from jaxlab.optim.decentralized import stability
    g_max = stability.largest_stable_lr("II", graph, lam, problem)
    X = stability.fixed_point("II", graph, lam, problem, 0.5 * g_max)
"""

from __future__ import annotations

import contextlib

import numpy as np

from jaxlab.core.errors import check_choice, require
from jaxlab.optim.decentralized import algorithms, graphs


def _one_thread():
  """Small dense eigenproblems run far faster on one BLAS thread than on an oversubscribed pool."""
  try:
    import threadpoolctl
  except ImportError:  # optional (installed with scikit-learn)
    return contextlib.nullcontext()
  return threadpoolctl.threadpool_limits(1)


def _rho(t) -> float:
  with _one_thread():
    return float(np.abs(np.linalg.eigvals(t)).max())


def quadratic_parts(problem) -> tuple[np.ndarray, np.ndarray]:
  """(H (n, d, d), c (n, d)) with ∇f_i(x) = H_i x − c_i; least squares only."""
  require(
    problem.name == "least_squares",
    "problem",
    f"the exact stability analysis needs least_squares (affine gradients), got {problem.name}",
  )
  a = np.asarray(problem.inputs, np.float64)
  y = np.asarray(problem.targets, np.float64)
  m = np.asarray(problem.counts, np.float64)
  mask = (np.arange(a.shape[1])[None] < m[:, None]).astype(np.float64)
  h = np.einsum("nr,nrd,nre->nde", mask, a, a) / m[:, None, None]
  c = np.einsum("nr,nrd,nr->nd", mask, a, y) / m[:, None]
  return h, c


def minimizer(problem, lam) -> np.ndarray:
  """x* = argmin Σ λ_i f_i (weighted normal equations)."""
  h, c = quadratic_parts(problem)
  lam = np.asarray(lam, np.float64)
  return np.linalg.solve(np.einsum("n,nde->de", lam, h), lam @ c)


def _affine(b, s, h, c, gamma, order):
  """(T, u) with vec(X⁺) = T vec(X) + u (row-major vec of the n×d iterate)."""
  n, d = c.shape
  big_h = np.zeros((n * d, n * d))
  for i in range(n):
    big_h[i * d : (i + 1) * d, i * d : (i + 1) * d] = s[i] * h[i]
  mix = np.kron(b, np.eye(d))
  sc = (s[:, None] * c).ravel()
  if order == "atc":
    return mix @ (np.eye(n * d) - gamma * big_h), gamma * mix @ sc
  return mix - gamma * big_h, gamma * sc


def _parts(strategy, graph, lam, problem, order, row_kind):
  check_choice("order", order, algorithms.ORDERS)
  b, s = algorithms.mixing_and_scale(strategy, graph, lam, row_kind)
  h, c = quadratic_parts(problem)
  return b, np.asarray(s, np.float64), h, c


def spectral_radius(
  strategy, graph: graphs.Graph, lam, problem, gamma, *, order="atc", row_kind="auto"
) -> float:
  b, s, h, c = _parts(strategy, graph, lam, problem, order, row_kind)
  return _rho(_affine(b, s, h, c, gamma, order)[0])


def largest_stable_lr(
  strategy, graph: graphs.Graph, lam, problem, *, order="atc", row_kind="auto", rel_tol=1e-2
) -> float:
  """The largest γ with ρ(T(γ)) < 1 (to ``rel_tol``), by doubling then bisection.

  ρ(T(0)) = 1 (the consensus directions of B); it must first drop below 1 for small γ, which holds
  when Σ λ_i H_i is positive definite.
  """
  b, s, h, c = _parts(strategy, graph, lam, problem, order, row_kind)
  rho = lambda g: _rho(_affine(b, s, h, c, g, order)[0])
  scale = max(float(np.linalg.eigvalsh(s[i] * h[i]).max()) for i in range(len(s)))
  lo = 1e-3 / scale
  require(rho(lo) < 1, "problem", "the iteration is not stable even for a tiny step")
  hi = 2 * lo
  while rho(hi) < 1:
    lo, hi = hi, 2 * hi
  while hi - lo > rel_tol * lo:
    mid = 0.5 * (lo + hi)
    lo, hi = (mid, hi) if rho(mid) < 1 else (lo, mid)
  return float(lo)


def fixed_point(
  strategy, graph: graphs.Graph, lam, problem, gamma, *, order="atc", row_kind="auto"
) -> np.ndarray:
  """The n×d iterate X with X = step(X) at step γ (full gradients)."""
  b, s, h, c = _parts(strategy, graph, lam, problem, order, row_kind)
  t, u = _affine(b, s, h, c, gamma, order)
  return np.linalg.solve(np.eye(len(u)) - t, u).reshape(c.shape)
