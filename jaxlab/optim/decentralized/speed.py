"""Speed of Strategy (I) and (II) with stochastic gradients, and the L²(λ) quantities of a cell.

The paper's claim (arXiv 2511.19513, abstract) is about convergence speed. A comparison at one
constant step measures the constant-step bias (the tail gap is the same after 1,000 and 20,000
steps), so this module measures speed instead (docs/decentralized.md, "Speed study"):

* `run_grid`: one strategy, many (step, schedule, seed) runs as ONE vmapped `lax.scan`, minibatch
  gradients, each seed its own problem instance and key (paired across strategies by seed: the same
  instance and the same minibatch draws). Steps are fractions of the strategy's own full-gradient
  stability limit on that instance (`stability.largest_stable_lr`); the schedule is constant or
  decaying, γ_k = γ₀ / (1 + k / k₀).
* `log_gap_auc`: the mean of log₁₀(f(x̄_λ) − f*) over the run (the area under the log-gap curve per
  step; lower is faster); `steps_to_target`: the first step whose gap is at most the target
  (censored at steps + 1 when never reached).
* `cell_quantities`: gap(W), gap_λ(A), ρ_λ of each matrix, ‖B − B*_λ‖_λ of each, the penalty
  π_W = ρ_λ(W) − (1 − gap(W)) ≥ 0, and the reconstructed sufficient condition `condition_II`.

**Reconstruction** (the paper's bounds are not public). The λ-consensus error e = (I − J_λ)X,
J_λ = 1λᵀ, obeys e⁺ = B̃(e − γ(I − J_λ)SG) for both strategies, B̃ = (I − J_λ)B(I − J_λ), so it
contracts per step by β_B = ρ_λ(B) = ‖B̃‖_λ. The λ-average of (I) obeys
x̄_λ⁺ = x̄_λ − γλᵀWSG + λᵀ(W − W*_λ)e (ATC; `lambda_average_drift`): a term that couples it to the
consensus error and vanishes iff λᵀ(W − W*_λ) = 0, which holds for the λ-self-adjoint A. A
DSGD bound carried out in L²(λ) (the shape of Koloskova et al. 2020, arXiv 2003.10422, Thm. 2:
consensus terms β²/(1 − β)² and 1/(1 − β), step limit ∝ 1 − β) is increasing in β and valid for
β < 1; with the problem constants held equal, (II)'s bound is then at most (I)'s when

    ρ_λ(A) ≤ ρ_λ(W) < 1,   i.e.  gap_λ(A) ≥ gap(W) − π_W  and  ρ_λ(W) < 1,

because ρ_λ(A) = 1 − gap_λ(A) (A is λ-self-adjoint) and ρ_λ(W) = 1 − gap(W) + π_W with π_W ≥ 0
(W̃ has the spectrum {0, μ₂, …, μₙ} of W and a norm at least its spectral radius). π_W is zero for
uniform λ and at most ½‖W − W*_λ‖_λ + (ρ of W̃'s self-adjoint part) − (1 − gap(W)). When ρ_λ(W) ≥ 1
the one-step bound for (I) is vacuous and the condition is reported as not holding.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxlab.optim.decentralized import algorithms, driver, geometry, graphs, stability

# the step grid: fractions of the strategy's own full-gradient stability limit
FRACTIONS = (0.9 / 81, 0.9 / 27, 0.9 / 9, 0.3, 0.9)
SCHEDULES = ("constant", "decay")
GAP_FLOOR, GAP_CAP = 1e-12, 1e6  # log₁₀ of a gap is taken within these (NaN/inf: the cap)


# ------------------------------------------------------------------------------------------------
# The quantities of a cell (NumPy, float64).


def self_adjoint_part_factor(b: np.ndarray, lam) -> float:
  """‖½(B̃ + B̃*)‖_λ on 1^⊥_λ: the consensus factor of B's λ-self-adjoint part."""
  m = geometry._on_complement(np.asarray(b, np.float64), lam)
  return float(np.abs(np.linalg.eigvalsh(0.5 * (m + m.T))).max())


def lambda_average_drift(w: np.ndarray, lam) -> np.ndarray:
  """λᵀ(W − W*_λ): the row vector through which the consensus error moves (I)'s λ-average."""
  lam = np.asarray(lam, np.float64)
  return lam @ (w - geometry.adjoint(w, lam))


def condition_II(rho_a: float, rho_w: float) -> bool:
  """The reconstructed sufficient condition for (II) to be faster: ρ_λ(A) ≤ ρ_λ(W) < 1."""
  return bool(rho_a <= rho_w < 1.0)


def cell_quantities(graph: graphs.Graph, lam, row_kind: str = "auto") -> dict[str, float | bool]:
  """The paper's quantities for one (graph, λ) (module docstring), flat for a summary."""
  lam = np.asarray(lam, np.float64)
  w = graphs.metropolis(graph)
  a = graphs.row_stochastic(graph, lam, row_kind)
  gap_w, gap_a = geometry.spectral_gap(w), geometry.spectral_gap(a, lam)
  rho_w, rho_a = geometry.consensus_factor(w, lam), geometry.consensus_factor(a, lam)
  return {
    "n_max_lam": float(graph.n * lam.max()),
    "gap_W": gap_w,
    "gap_lam_A": gap_a,
    "rho_lam_W": rho_w,
    "rho_lam_A": rho_a,
    "rho_sym_W": self_adjoint_part_factor(w, lam),
    "asym_W": geometry.lam_norm(w - geometry.adjoint(w, lam), lam),
    "asym_A": geometry.lam_norm(a - geometry.adjoint(a, lam), lam),
    "penalty_W": rho_w - (1.0 - gap_w),
    "drift_W": float(np.linalg.norm(lambda_average_drift(w, lam))),
    "condition_II": condition_II(rho_a, rho_w),
    "gap_predicts_II": bool(gap_a > gap_w),
  }


# ------------------------------------------------------------------------------------------------
# Speed metrics (NumPy, on per-step gap curves; leading axes allowed).


def log_gap(gap) -> np.ndarray:
  """log₁₀ of the gap within [GAP_FLOOR, GAP_CAP]; a NaN/inf gap (diverged) counts as the cap."""
  g = np.asarray(gap, np.float64)
  g = np.where(np.isfinite(g), g, GAP_CAP)
  return np.log10(np.clip(g, GAP_FLOOR, GAP_CAP))


def log_gap_auc(gap) -> np.ndarray:
  """Mean over the last axis (steps) of log₁₀ gap: the area under the log-gap curve per step."""
  return log_gap(gap).mean(axis=-1)


def steps_to_target(gap, target) -> np.ndarray:
  """First step (1-based) with gap ≤ target along the last axis; steps + 1 when never reached."""
  g = np.asarray(gap, np.float64)
  hit = np.isfinite(g) & (g <= np.asarray(target, np.float64)[..., None])
  first = np.argmax(hit, axis=-1) + 1
  return np.where(hit.any(axis=-1), first, g.shape[-1] + 1)


# ------------------------------------------------------------------------------------------------
# Runs.


def schedule(lr0, k, k0):
  """γ_k: lr0 for k0 = 0 (constant), else lr0 / (1 + k / k0)."""
  return jnp.where(k0 > 0, lr0 / (1.0 + k / jnp.maximum(k0, 1e-9)), lr0)


def _scan_gap(state, problem, key, k0, steps):
  lr0 = state.lr

  def body(st, k):
    st = st.replace(lr=schedule(lr0, k, k0))
    st, m = algorithms.update(st, problem, jax.random.fold_in(key, k))
    return st, m["gap"]

  return lax.scan(body, state, jnp.arange(steps))[1]


@functools.partial(jax.jit, static_argnames="steps")
def _gaps(states, problems, keys, k0s, steps):
  return jax.vmap(lambda s, p, k, k0: _scan_gap(s, p, k, k0, steps))(states, problems, keys, k0s)


def own_limits(strategy, graph, lam, problems, row_kind="auto") -> np.ndarray:
  """Each instance's largest stable full-gradient step for ``strategy`` (exact, least squares)."""
  return np.array(
    [stability.largest_stable_lr(strategy, graph, lam, p, row_kind=row_kind) for p in problems]
  )


def run_grid(
  strategy: str,
  graph: graphs.Graph,
  lam,
  problems: dict[int, object],
  runs: list[tuple[int, float, float]],
  steps: int,
  *,
  limits: dict[int, float],
  row_kind: str = "auto",
) -> np.ndarray:
  """Gap curves (len(runs), steps) of ``strategy``, one vmapped scan: run r = (seed, fraction,
  k0) uses ``problems[seed]``, key(seed), the step fraction × ``limits[seed]`` and the schedule
  with k₀ = k0 (0: constant)."""
  lam = np.asarray(lam, np.float64)
  states, probs, keys, k0s = [], [], [], []
  for seed, frac, k0 in runs:
    p = problems[seed]
    lr = float(frac * limits[seed])
    states.append(algorithms.init_state(strategy, graph, lam, p, lr, row_kind=row_kind))
    probs.append(p)
    keys.append(jax.random.key(seed))
    k0s.append(float(k0))
  stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *states)
  out = _gaps(stacked, driver.stack_problems(probs), jnp.stack(keys), jnp.asarray(k0s), steps=steps)
  return np.asarray(jax.device_get(out), np.float64)
