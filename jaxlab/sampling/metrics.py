"""Sample-quality metrics for lattice samplers (docs/dasbs.md, "Metrics").

* energy W2 against reference (MCMC) samples: 1-D Wasserstein-2 between energy distributions;
  `wasserstein1` against an exact (enumerated) law;
* Ising magnetisation, |m| and the +/- phase balance; Potts majority fraction and colour balance;
* ESS of the sampler's path log-RND (the DASBS code's quantity);
* log Z, F, U per spin estimated by path importance sampling against the discrete-time target path
  measure P*(path) = nu(x1) P^r(path | x1). With both paths started from the same source mu,
    log w = log nu~(x1) + log p_r(steps) - log p_u(steps) - log p^r_1(x1),
  and E_u[w] = Z exactly (any controller, any step count). This estimator is our choice: the
  authors' code has its own estimator (`ising_2d_empirical_observables`), not reproduced here.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.sampling import reference as ref_lib
from jaxlab.sampling import sampler


def energy_w2(e_model, e_ref) -> float:
  """W2 between two 1-D empirical distributions (quantile coupling on a common grid)."""
  a, b = np.sort(np.asarray(e_model, np.float64)), np.sort(np.asarray(e_ref, np.float64))
  n = max(a.size, b.size)
  u = (np.arange(n) + 0.5) / n
  qa = np.quantile(a, u, method="inverted_cdf")
  qb = np.quantile(b, u, method="inverted_cdf")
  return float(np.sqrt(np.mean((qa - qb) ** 2)))


def wasserstein1(values, ref_values, weights=None, ref_weights=None) -> float:
  """W1 between two distributions on the real line (empirical, or weighted atoms such as an
  enumerated law): the integral of |F - G| between their CDFs, as scipy's `wasserstein_distance`."""
  a, b = np.asarray(values, np.float64).ravel(), np.asarray(ref_values, np.float64).ravel()
  wa = np.ones_like(a) if weights is None else np.asarray(weights, np.float64).ravel()
  wb = np.ones_like(b) if ref_weights is None else np.asarray(ref_weights, np.float64).ravel()
  grid = np.union1d(a, b)
  cdf = lambda x, w: np.cumsum(np.bincount(np.searchsorted(grid, x), w, grid.size)) / w.sum()  # noqa: E731
  return float(np.sum(np.abs(cdf(a, wa) - cdf(b, wb))[:-1] * np.diff(grid)))


def lattice_stats(target, x_BxD) -> dict:
  x = jnp.asarray(x_BxD)
  e = np.asarray(target.energy(x), np.float64)
  out = {"u_per_spin_mean": float(e.mean() / target.D)}
  if target.kind == "ising":
    m = np.asarray(target.magnetisation(x), np.float64)
    out.update(
      mag=float(m.mean()),
      abs_mag=float(np.abs(m).mean()),
      phase_plus_frac=float((m > 0).mean()),
      phase_minus_frac=float((m < 0).mean()),
    )
  else:
    freq = np.bincount(np.asarray(x).ravel(), minlength=target.N) / x.size
    maj_col = np.asarray(jnp.argmax(jax.nn.one_hot(x, target.N).sum(-2), -1))
    out.update(
      majority_frac=float(np.asarray(target.majority_fraction(x)).mean()),
      colour_balance=float(np.max(np.abs(freq - 1.0 / target.N))),
      majority_colour_balance=float(
        np.max(np.abs(np.bincount(maj_col, minlength=target.N) / maj_col.size - 1.0 / target.N))
      ),
    )
  return out


def path_is_log_weights(target, sched, source: str, out: dict):
  """log w per path (see module docstring) from a `sampler.tau_leap` output dict."""
  x1 = out["x1"]
  return (
    target.log_prob_unnorm(x1)
    + out["log_p_r"]
    - out["log_p_u"]
    - ref_lib.log_marginal(sched, source, x1, target.N)
  )


def is_observables(target, log_w_B, x_BxD) -> dict:
  """log Z, F, U per spin by importance sampling, and the target-weight ESS."""
  lw = jnp.asarray(log_w_B, jnp.float32)
  log_z = float(jax.nn.logsumexp(lw) - jnp.log(lw.shape[0]))
  w = jax.nn.softmax(lw)
  e = target.energy(jnp.asarray(x_BxD))
  u = float(jnp.sum(w * e) / target.D)
  f = -log_z / (target.beta * target.D)
  return {
    "log_z_is": log_z,
    "f_per_spin_is": f,
    "u_per_spin_is": u,
    "ess_target": float(sampler.ess(lw)),
  }


def summarize(target, sched, source, out: dict, e_ref=None, exact_obs: dict | None = None) -> dict:
  """All metrics for one batch of sampler output (and optional MCMC energies / exact values)."""
  res = lattice_stats(target, out["x1"])
  res["ess"] = float(sampler.ess(out["log_rnd"]))
  res.update(is_observables(target, path_is_log_weights(target, sched, source, out), out["x1"]))
  for k in ("invalid_frac", "jumps_per_site"):
    if k in out:
      res[k] = float(out[k])
  if e_ref is not None:
    res["energy_w2"] = energy_w2(np.asarray(target.energy(jnp.asarray(out["x1"]))), e_ref)
  if exact_obs is not None:
    res["abs_err_f_per_spin"] = abs(res["f_per_spin_is"] - exact_obs["f_per_spin"])
    res["abs_err_u_per_spin"] = abs(res["u_per_spin_mean"] - exact_obs["u_per_spin"])
    res["abs_err_u_per_spin_is"] = abs(res["u_per_spin_is"] - exact_obs["u_per_spin"])
  return res


# Printed first: what the samples themselves show (unweighted energy error, energy W2, the ESS
# of the importance weights against the target); then the reweighted (path-IS) estimates, which
# can hide a biased sampler; last the ESS of the discretisation log-RND (continuous-time vs
# tau-leaping path measure: not a sample-quality number). (summary key, printed name)
PRINTED = (
  ("abs_err_u_per_spin", "err_u_unweighted"),
  ("energy_w2", "energy_w2"),
  ("ess_target", "ess_target"),
  ("mag", "mag"),
  ("phase_plus_frac", "phase_plus_frac"),
  ("majority_frac", "majority_frac"),
  ("colour_balance", "colour_balance"),
  ("abs_err_u_per_spin_is", "err_u_reweighted"),
  ("abs_err_f_per_spin", "err_f_reweighted"),
  ("ess", "ess_log_rnd"),
)


def result_line(res: dict) -> str:
  """The printed result, in the order of `PRINTED` (keys absent for this target are skipped)."""
  return " ".join(f"{name}={res[k]:.4g}" for k, name in PRINTED if k in res)
