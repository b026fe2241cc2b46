"""Geometry of L²(λ; R^d) for mixing matrices, and the diagnostic behind the (I) vs (II) comparison.

Exact linear algebra (docs/decentralized.md, "Geometry"): ⟨U, V⟩_λ = Σ_i λ_i ⟨u_i, v_i⟩; the
adjoint of B is B* = Λ⁻¹BᵀΛ; B is self-adjoint iff ΛB is symmetric. With D = Λ^{1/2}, the L²(λ)
operator norm of B is ‖D B D⁻¹‖₂ and the λ-orthogonal complement of the consensus line 1 is the
Euclidean complement of u = √λ.

The consensus error Σλ_i‖x_i − x̄_λ‖² = ‖(I − J_λ)X‖²_λ, J_λ = 1λᵀ, contracts under any
row-stochastic B as (I − J_λ)B X = (I − J_λ)B(I − J_λ)X, so its one-step factor is
ρ_λ(B) = ‖(I − J_λ)B(I − J_λ)‖_λ. For a λ-self-adjoint A this is the spectral radius on 1^⊥
(1 − spectral gap); for the doubly stochastic W, which is not λ-self-adjoint unless λ is uniform,
the norm exceeds the spectral radius (the non-normal "penalty" of arXiv 2511.19513's abstract).

`diagnose` reports these together with two comparisons in the spirit of the paper's
Rayleigh-quotient and Loewner-order conditions. **Their exact form in the paper is not public**;
the quantities below are this codebase's reconstruction (all on the disagreement subspace 1^⊥ of
L²(λ)):
* ``loewner_min`` / ``loewner_max``: extreme eigenvalues of W̃*W̃ − Ã*Ã, B̃ = (I−J_λ)B(I−J_λ).
  loewner_min ≥ 0 iff Ã*Ã ⪯ W̃*W̃ (Loewner order): A shrinks every disagreement direction at least as
  much as W does in one step.
* ``rayleigh_min`` / ``rayleigh_max``: extreme Rayleigh quotients ⟨x,(I−W)x⟩_λ / ⟨x,(I−A)x⟩_λ
  (the denominator is positive definite on 1^⊥ for a connected λ-reversible A). rayleigh_max ≤ 1
  iff (I − A) ⪰ (I − W); rayleigh_min < 0 means W *expands* some disagreement direction in L²(λ).
"""

from __future__ import annotations

import numpy as np
import scipy.linalg

from jaxlab.core.errors import require
from jaxlab.optim.decentralized import graphs


def inner(u, v, lam) -> float:
  """⟨U, V⟩_λ for stacked iterates U, V of shape (n, ...)."""
  u, v = np.asarray(u), np.asarray(v)
  return float(np.sum(np.asarray(lam) * np.sum((u * v).reshape(u.shape[0], -1), axis=1)))


def adjoint(b: np.ndarray, lam) -> np.ndarray:
  """B* = Λ⁻¹BᵀΛ, the adjoint in L²(λ)."""
  lam = np.asarray(lam, dtype=np.float64)
  return (b.T * lam[None, :]) / lam[:, None]


def lam_norm(b: np.ndarray, lam) -> float:
  """Operator norm of B in L²(λ)."""
  s = np.sqrt(np.asarray(lam, dtype=np.float64))
  return float(np.linalg.norm(s[:, None] * b / s[None, :], 2))


def _complement(lam) -> tuple[np.ndarray, np.ndarray]:
  """(D, Q): D = diag(√λ) as a vector; Q (n, n−1) orthonormal basis of u^⊥, u = √λ."""
  s = np.sqrt(np.asarray(lam, dtype=np.float64))
  q, _ = np.linalg.qr(np.column_stack([s, np.eye(len(s))[:, :-1]]))
  return s, q[:, 1:]


def _on_complement(b: np.ndarray, lam) -> np.ndarray:
  """(I−J_λ)B(I−J_λ) in orthonormal coordinates of 1^⊥_λ: an (n−1)×(n−1) matrix."""
  s, q = _complement(lam)
  return q.T @ (s[:, None] * b / s[None, :]) @ q


def consensus_factor(b: np.ndarray, lam) -> float:
  """ρ_λ(B) = ‖(I−J_λ)B(I−J_λ)‖_λ: the one-step contraction of the λ-consensus error."""
  return float(np.linalg.norm(_on_complement(b, lam), 2))


def spectral_gap(b: np.ndarray, lam=None) -> float:
  """1 − max(|μ_2|, |μ_n|). With ``lam``: eigenvalues of the λ-self-adjoint B via Λ^{1/2}BΛ^{-1/2}
  (raises if B is not λ-self-adjoint). Without: eigenvalues of B itself (moduli, any B)."""
  if lam is None:
    mu = np.sort(np.abs(np.linalg.eigvals(b)))[::-1]
    return float(1.0 - mu[1])
  lam = np.asarray(lam, dtype=np.float64)
  la = lam[:, None] * b
  require(
    np.abs(la - la.T).max() <= 1e-8,
    "lam",
    "spectral_gap(lam=...): B is not self-adjoint in L²(λ); use consensus_factor",
  )
  mu = np.linalg.eigvalsh(_on_complement(b, lam))
  return float(1.0 - np.abs(mu).max())


def consensus_error(x, lam) -> float:
  """Σ_i λ_i ‖x_i − x̄_λ‖² for stacked iterates x of shape (n, ...)."""
  x = np.asarray(x, dtype=np.float64).reshape(len(lam), -1)
  lam = np.asarray(lam, dtype=np.float64)
  xbar = lam @ x
  return float(lam @ np.sum((x - xbar) ** 2, axis=1))


def comparison(a: np.ndarray, w: np.ndarray, lam) -> dict[str, float]:
  """Loewner / Rayleigh comparison of A and W on 1^⊥ in L²(λ) (see module docstring)."""
  lam = np.asarray(lam, dtype=np.float64)
  ma, mw = _on_complement(a, lam), _on_complement(w, lam)
  loew = np.linalg.eigvalsh(mw.T @ mw - ma.T @ ma)
  # Dirichlet forms: only the λ-symmetric parts enter ⟨x,(I−B)x⟩_λ.
  ident = np.eye(len(ma))
  da = ident - 0.5 * (ma + ma.T)
  dw = ident - 0.5 * (mw + mw.T)
  if np.linalg.eigvalsh(da).min() <= 1e-12:
    ray = np.array([np.nan])  # A does not connect the graph: no quotient
  else:
    ray = scipy.linalg.eigh(dw, da, eigvals_only=True)
  return {
    "loewner_min": float(loew.min()),
    "loewner_max": float(loew.max()),
    "rayleigh_min": float(ray.min()),
    "rayleigh_max": float(ray.max()),
  }


def diagnose(
  graph: graphs.Graph,
  lam,
  w: np.ndarray | None = None,
  a: np.ndarray | None = None,
  row_kind: str = "auto",
) -> dict[str, float | str | bool]:
  """The quantities the (I) vs (II) comparison rests on, for one graph and λ.

  Returns a flat dict: n·max λ (the factor that scales Strategy I's step-size limit), Euclidean
  gap of W, ρ_λ of W and A, ‖W − W*‖_λ (non-self-adjointness penalty), gap_λ(A), and the
  Loewner/Rayleigh comparison. ``predict_II`` is True when gap_λ(A) > gap(W), a gap-only
  heuristic for the lower constant-step bias of the sweep; the speed study's reconstructed
  condition is `speed.condition_II` (docs/decentralized.md). The paper's condition (II can win
  with a smaller gap) is not public.
  """
  lam = np.asarray(lam, dtype=np.float64)
  w = graphs.metropolis(graph) if w is None else w
  out = {
    "graph": graph.name,
    "n": graph.n,
    "n_max_lam": float(graph.n * lam.max()),
    "gap_W": spectral_gap(w),
    "rho_lam_W": consensus_factor(w, lam),
    "asym_W": lam_norm(w - adjoint(w, lam), lam),
  }
  if graph.directed:
    out.update(
      {
        "gap_lam_A": float("nan"),
        "rho_lam_A": float("nan"),
        "asym_A": float("nan"),
        "loewner_min": float("nan"),
        "loewner_max": float("nan"),
        "rayleigh_min": float("nan"),
        "rayleigh_max": float("nan"),
        "predict_II": False,
      }
    )
    return out
  a = graphs.row_stochastic(graph, lam, row_kind) if a is None else a
  out.update(
    {
      "gap_lam_A": spectral_gap(a, lam),
      "rho_lam_A": consensus_factor(a, lam),
      "asym_A": lam_norm(a - adjoint(a, lam), lam),
    }
  )
  out.update(comparison(a, w, lam))
  out["predict_II"] = bool(out["gap_lam_A"] > out["gap_W"])
  return out
