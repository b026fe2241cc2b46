"""GOMA and the monotone-VI baselines: last-iterate ||F(z_k)||^2 against oracle calls.

Test problems T1-T3 and the reconstruction of GOMA (arXiv 2606.21528) are described in
docs/goma.md.

  python -m experiments.goma --problem=bilinear --methods=eg,popov,eag_v,feg,apv,goma --steps=10000
      T1 (n = 40 bilinear, s log-spaced in [1e-3, 1]), 5 seeds; ~20-40 s on 2 CPU cores.
  python -m experiments.goma --problem=stochastic_bilinear --noise=multiplicative
      T2 (DSEG bilinear d = 50, additive sigma = 0.5 + matrix noise sigma_C = 0.1, i.e.
      variance growing with ||z - z*||^2); default methods goma_stochastic, dseg,
      popov_anchored_1step (single decaying step size), apv; ~30 s.
  python -m experiments.goma --problem=quadratic | --problem=rotation

--steps is the number of iterations of every method. Writes into --workdir (default
runs/goma/<problem>): curves.png (log-log; the curve is the geometric mean over seeds for
deterministic problems and the arithmetic mean, i.e. E||F(z_k)||^2, for stochastic ones; the band is
min..max over seeds), metrics.csv (log-spaced iterations) and summary.json (per method: slope of the
curve over iterations config.fit_lo..fit_hi, for deterministic problems the constant
k^2 ||F(z_k)||^2 / (L^2 R^2) at the last iteration, final residual and oracle calls). ||F|| is
measured at the update sequence z_k with the exact operator. GOMA here is a reconstruction: see
`jaxlab.optim.goma.vi.run`. Deterministic GOMA is anchored Popov with a constant 0.4/L step: on
deterministic problems a step-size sweep (config.step_sweep, step_sweep.csv) runs that update at
eta = c/L for each c and reports each as stable or diverged, so GOMA's lead over APV (whose step
tends to 0.215/L) shows as what it is, a larger stable step.
"""

from __future__ import annotations

import math
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import flags

from jaxlab.core import experiment, metrics, plots, runtime
from jaxlab.optim import report
from jaxlab.optim.goma import compare as vi_compare
from jaxlab.optim.goma import problems, vi

PROBLEMS = ("bilinear", "stochastic_bilinear", "quadratic", "rotation")
NOISES = ("additive", "multiplicative")
# Experiment-level variants (a vi method plus fixed hparams, step sizes in units of 1/L).
VARIANTS = {
  # Anchored Popov with one decaying step size eta_k = 0.4/(L sqrt(k+1)), gamma_k = (1-b_k) eta_k:
  # the single-time-scale baseline that stalls at a noise floor (docs/goma.md, problem T2).
  "popov_anchored_1step": ("goma", {"eta_schedule": "power", "eta": 0.4, "r_eta": 0.5}),
}
DEFAULT_METHODS = {
  "bilinear": "eg,popov,eag_v,feg,apv,goma",
  "quadratic": "eg,popov,eag_c,eag_v,feg,apv,goma",
  "rotation": "gda,eg,popov,eag_v,feg,apv,goma",
  "stochastic_bilinear": "goma_stochastic,dseg,popov_anchored_1step,apv",
}
# Shared flags this experiment has no use for: one vmapped solve per method, no checkpoints.
UNUSED_FLAGS = ("ckpt_every", "keep", "mesh", "log_every", "profile")

_PROBLEM = flags.DEFINE_string("problem", "bilinear", f"Test problem: {', '.join(PROBLEMS)}.")
_METHODS = flags.DEFINE_string(
  "methods",
  None,
  f"Comma-separated methods: {', '.join(vi.METHODS + tuple(VARIANTS))} (default: per problem).",
)
_NOISE = flags.DEFINE_string(
  "noise", "multiplicative", f"Oracle noise for stochastic_bilinear: {', '.join(NOISES)}."
)


def get_config() -> ml_collections.ConfigDict:
  """Problem sizes, noise and fit range. ~20-40 s per command on 2 CPU cores (5 seeds, 10^4 iters).

  python -m experiments.goma --problem=bilinear --methods=eg,popov,eag_v,feg,apv,goma --steps=10000
  """
  c = ml_collections.ConfigDict()
  c.num_seeds = 5  # independent instances + starts (+ noise streams), vmapped in one jit
  c.n = 40  # bilinear/quadratic: size of each player (T1: 40)
  c.smin = 1e-3  # bilinear: smallest singular value (log-spaced spectrum)
  c.smax = 1.0  # bilinear: largest singular value (= L)
  c.rank = 0  # bilinear: >0 zeroes all but the `rank` largest singular values
  c.d = 50  # stochastic_bilinear: size of each player (DSEG: 50, s ~ U[1, 2])
  c.sigma = 0.5  # stochastic_bilinear: additive Gaussian noise std (DSEG noise_std)
  c.sigma_mult = 0.1  # stochastic_bilinear, --noise=multiplicative: matrix noise std sigma_C
  c.omega = 0.5  # quadratic: ||A|| = ||B|| = omega
  c.fit_lo = 100  # slope fit range start (iterations)
  c.fit_hi = 10000  # slope fit range end (clipped to --steps)
  c.plot_points = 400  # log-spaced iterations kept in the plot and the CSV
  # Deterministic problems: deterministic GOMA (anchored Popov, constant eta = c/L) at each c, to
  # show where its lead over APV comes from (a larger stable step); "" skips the sweep.
  c.step_sweep = "0.1,0.2,0.3,0.4,0.5,0.6"
  return c


_CONFIG = experiment.define_config(get_config())


def _validate(cfg):
  """(problem, noise, methods, run); every check before anything is written."""
  problem = experiment.check_choice("problem", _PROBLEM.value, PROBLEMS)
  noise = experiment.check_choice("noise", _NOISE.value, NOISES)
  spec = DEFAULT_METHODS[problem] if _METHODS.value is None else _METHODS.value
  methods = experiment.check_list("methods", spec, vi.METHODS + tuple(VARIANTS))
  run = experiment.common("goma", default_steps=10_000, variant=(problem,), unused=UNUSED_FLAGS)
  experiment.require(run.steps >= 2, "steps", f"must be >= 2, got {run.steps}")
  experiment.check_config(
    cfg,
    {
      "num_seeds": "positive",
      "n": "positive",
      "d": "positive",
      "smin": "positive",
      "smax": lambda v: None if v >= cfg.smin else f"must be >= config.smin={cfg.smin}, got {v}",
      "rank": lambda v: None if 0 <= v <= cfg.n else f"must be in [0, config.n={cfg.n}], got {v}",
      "sigma": "nonneg",
      "sigma_mult": "nonneg",
      "omega": "nonneg",
      "fit_lo": "positive",
      "fit_hi": lambda v: None if v > cfg.fit_lo else f"must be > config.fit_lo={cfg.fit_lo}",
      "plot_points": "positive",
    },
  )
  return problem, noise, methods, run, _sweep_factors(cfg.step_sweep)


def _sweep_factors(spec: str) -> list[float]:
  """config.step_sweep "0.2,0.4" -> [0.2, 0.4]: finite numbers > 0."""
  out = []
  for item in (s.strip() for s in spec.split(",")):
    if not item:
      continue
    try:
      c = float(item)
    except ValueError:
      c = float("nan")
    ok = math.isfinite(c) and c > 0
    experiment.require(ok, "config.step_sweep", f"needs finite numbers > 0, got {item!r}")
    out.append(c)
  return out


def _build(problem, cfg, noise, key):
  """(operator or oracle, z0) for one seed."""
  k_game, k_z = jax.random.split(key)
  if problem == "bilinear":
    game = problems.bilinear(k_game, cfg.n, cfg.smin, cfg.smax, "log", cfg.rank or None)
    return game, problems.sample_start(k_z, game)
  if problem == "quadratic":
    game = problems.quadratic_game(k_game, cfg.n, omega=cfg.omega)
    return game, problems.sample_start(k_z, game)
  if problem == "rotation":
    game = problems.rotation()
    return game, problems.sample_start(k_z, game)
  game = problems.dseg_bilinear(k_game, cfg.d)
  oracle = problems.stochastic(
    game, cfg.sigma, cfg.sigma_mult if noise == "multiplicative" else 0.0
  )
  z0 = jnp.zeros(2 * cfg.d).at[0].set(1.0).at[cfg.d].set(1.0)  # DSEG start: e_1 for both
  return oracle, z0


def _solve(problem, cfg, noise, method, iters, keys):
  """Residuals, oracle calls, L and R^2 = ||z0 - P_Sol(z0)||^2 of every seed (one vmapped jit)."""
  base, hp = VARIANTS.get(method, (method, {}))
  stochastic = problem.startswith("stochastic")

  def one(key):
    k_build, k_noise = jax.random.split(key)
    op, z0 = _build(problem, cfg, noise, k_build)
    L = op.lipschitz
    hps = {k: (v / L if k in ("eta", "gamma") else v) for k, v in hp.items()}
    tr = vi.run(base, op, z0, iters, key=k_noise if stochastic else None, L=L, **hps)
    game = op.game if stochastic else op
    return tr.residual_sq, tr.oracle_calls, L, game.distance_to_solution(z0) ** 2

  return jax.jit(jax.vmap(one))(keys)


def step_sweep(problem, cfg, iters, keys, factors):
  """Deterministic GOMA (anchored Popov, constant eta = c/L, gamma_k = (1 - b_k) eta) at every c:
  ||F(z_k)||^2 of shape (len(factors), seeds, iters + 1), one vmapped jit."""

  def one(c, key):
    op, z0 = _build(problem, cfg, None, jax.random.split(key)[0])
    return vi.run("goma", op, z0, iters, L=op.lipschitz, eta=c / op.lipschitz).residual_sq

  cs = jnp.asarray(factors, jnp.float32)
  return jax.jit(jax.vmap(lambda c: jax.vmap(lambda k: one(c, k))(keys)))(cs)


def sweep_rows(factors, residual_sq, fit):
  """One row per step factor c: stable (finite and below ||F(z_0)||^2 on every seed), final
  geometric-mean residual and slope (None when unstable or the fit range is empty)."""
  rows = []
  for c, res in zip(factors, np.asarray(residual_sq, np.float64)):
    stable = bool(np.all(np.isfinite(res)) and np.all(res[:, -1] < res[:, 0]))
    center = vi_compare.center_curve(res, stochastic=False)
    slope = vi_compare.slopes(center, fit)[0] if stable else None
    final = float(center[-1]) if stable else None
    rows.append({"eta_times_L": c, "stable": stable, "residual_sq_final": final, "slope": slope})
  return rows


def sweep_line(row) -> str:
  if not row["stable"]:
    return f"  eta = {row['eta_times_L']:g}/L: diverged"
  slope = "" if row["slope"] is None else f"  slope {row['slope']:+.3f}"
  return f"  eta = {row['eta_times_L']:g}/L: |F(z_K)|^2 {row['residual_sq_final']:.3g}{slope}"


def _summarize(method, out, secs, stochastic, fit):
  base, extra = VARIANTS.get(method, (method, {}))
  hparams = vi_compare.method_hparams(base, extra)
  kw = {"stochastic": stochastic, "fit": fit, "seconds": secs, "hparams": hparams}
  return vi_compare.method_summary(*out, **kw)


def _plot(path, curves, points, stochastic, title):
  what = "E||F(z_k)||^2 (mean)" if stochastic else "||F(z_k)||^2 (geometric mean)"
  plots.lines(
    path,
    {m: tuple(c[points] for c in curve) for m, curve in curves.items()},
    xlabel="oracle calls",
    ylabel=f"{what}, band min..max",
    logx=True,
    logy=True,
    title=title,
  )


def main(argv):
  del argv
  cfg = _CONFIG.value
  problem, noise, methods, run, factors = _validate(cfg)
  workdir = experiment.prepare_workdir(run.workdir)

  stochastic = problem.startswith("stochastic")
  iters = run.steps
  keys = jax.random.split(jax.random.PRNGKey(run.seed), cfg.num_seeds)
  fit = (cfg.fit_lo, min(cfg.fit_hi, iters))
  if fit[0] >= fit[1]:
    print(f"(no slopes: --steps={iters} leaves no fit range above config.fit_lo={fit[0]})")
  per_method, curves = {}, {}
  for m in methods:
    t0 = time.perf_counter()
    out = jax.block_until_ready(_solve(problem, cfg, noise, m, iters, keys))
    per_method[m], curves[m] = _summarize(m, out, time.perf_counter() - t0, stochastic, fit)
    print(vi_compare.summary_line(m, per_method[m], fit), flush=True)

  sweep = None
  if factors and not stochastic:
    print(
      "step sweep: deterministic GOMA = anchored Popov with constant eta (APV: eta_k -> 0.215/L)"
    )
    sweep = sweep_rows(factors, step_sweep(problem, cfg, iters, keys, factors), fit)
    print("\n".join(sweep_line(r) for r in sweep), flush=True)
    metrics.write_table(workdir / "step_sweep.csv", sweep)

  pts = report.log_points(iters, cfg.plot_points)
  metrics.write_table(workdir / "metrics.csv", vi_compare.curve_rows(curves, pts))
  title = f"{problem}" + (f" ({noise} noise)" if stochastic else "") + f", {cfg.num_seeds} seeds"
  _plot(workdir / "curves.png", curves, pts[pts >= 1], stochastic, title)
  summary = {
    "problem": problem,
    "noise": noise if stochastic else None,
    "iters": iters,
    "num_seeds": cfg.num_seeds,
    "seed": run.seed,
    "fit_range": list(fit),
    "center": "mean" if stochastic else "geometric_mean",
    "slope_method": "endpoints (vi.fit_slope); slope_lsq: least squares on log-spaced points",
    "constant": None
    if stochastic
    else "k^2 ||F(z_k)||^2 / (L^2 ||z_0 - P_Sol(z_0)||^2), k = iters",
    "goma": "reconstruction (docs/goma.md); see jaxlab.optim.goma.vi.run docstring",
    "config": cfg.to_dict(),
    "methods": per_method,
    "step_sweep": sweep,
  }
  runtime.write_summary(workdir, summary)
  print(f"wrote {workdir}/curves.png, metrics.csv, summary.json")


if __name__ == "__main__":
  experiment.run(main)
