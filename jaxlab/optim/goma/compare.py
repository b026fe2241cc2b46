"""The comparison `python -m experiments.goma` runs, and its summaries over seeds: the reported
curve, slopes, the O(1/k²) constant, the step-size sweep and the files (docs/goma.md, "Reported
quantities")::

    from jaxlab.optim import goma
    cfg = goma.get_config()
    result = goma.compare.run_comparison(
        cfg, "bilinear", None, "multiplicative", steps=10_000, seeds=(0, 1, 2, 3, 4))
    goma.compare.write_report("runs/goma/bilinear", result)  # curves.png, metrics.csv, summary.json

Seed ``k`` is one problem instance, start and noise stream, drawn from ``jax.random.key(k)``
(`jaxlab.core.seeds.seed_keys`): the same in any set of seeds, so seed k of a comparison over
several seeds equals the comparison over seed k alone (tests/test_goma_compare.py). Every method
solves all seeds in one vmapped jit.

Lower level, host-side NumPy on the arrays `jaxlab.optim.goma.vi.run` returns, stacked over seeds:
``method_summary(res, calls, lips, r2, stochastic=False, fit=(100, 10_000), seconds=1.0,
hparams={})`` -> (entry with "slope" and "constant" = k² ||F||² / (L² R²), curves).

Deterministic problems report the geometric mean over seeds (the per-seed rates are multiplicative),
stochastic ones the arithmetic mean, i.e. E||F(z_k)||²; the band is min..max over seeds.
"""

from __future__ import annotations

import pathlib
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.core import metrics, plots, resources, runtime
from jaxlab.core import seeds as seeds_lib
from jaxlab.core.errors import ConfigError, check_choice
from jaxlab.optim import report
from jaxlab.optim.goma import config as config_lib
from jaxlab.optim.goma import problems, vi
from jaxlab.optim.report import geometric_mean

PROBLEMS = ("bilinear", "stochastic_bilinear", "quadratic", "rotation")
NOISES = ("additive", "multiplicative")
# Comparison-level variants (a vi method plus fixed hparams, step sizes in units of 1/L).
VARIANTS = {
  # Anchored Popov with one decaying step size eta_k = 0.4/(L sqrt(k+1)), gamma_k = (1-b_k) eta_k:
  # the single-time-scale baseline that stalls at a noise floor (docs/goma.md, problem T2).
  "popov_anchored_1step": ("goma", {"eta_schedule": "power", "eta": 0.4, "r_eta": 0.5}),
}
METHODS = vi.METHODS + tuple(VARIANTS)
# Methods whose step sizes decay against oracle noise -> their constant-step deterministic twin.
STOCHASTIC_ONLY = {"dseg": "eg", "goma_stochastic": "goma", "popov_anchored_1step": "goma"}
DEFAULT_METHODS = {  # methods=None
  "bilinear": "eg,popov,eag_v,feg,apv,goma",
  "quadratic": "eg,popov,eag_c,eag_v,feg,apv,goma",
  "rotation": "gda,eg,popov,eag_v,feg,apv,goma",
  "stochastic_bilinear": "goma_stochastic,dseg,popov_anchored_1step,apv",
}

CSV_COLUMNS = (
  "method",
  "iteration",
  "oracle_calls",
  "residual_sq_center",
  "residual_sq_min",
  "residual_sq_max",
)


def center_curve(residual_sq, stochastic: bool) -> np.ndarray:
  """(seeds, iters+1) -> (iters+1,): arithmetic mean if ``stochastic`` else geometric mean."""
  res = np.asarray(residual_sq, np.float64)
  return res.mean(0) if stochastic else geometric_mean(res, 0)


def slopes(center, fit: tuple[int, int]) -> tuple[float | None, float | None]:
  """(endpoint slope, least-squares slope) of the curve over iterations fit[0]..fit[1]; (None,
  None) when the curve is not finite or the range is empty."""
  center = np.asarray(center, np.float64)
  if not (np.all(np.isfinite(center)) and fit[0] < fit[1]):
    return None, None
  ks = np.arange(len(center))
  return (
    float(vi.fit_slope(ks, center, *fit)),
    float(vi.fit_slope(ks, center, *fit, method="lsq")),
  )


def rate_constant(residual_sq_last, lipschitz, r2, iters: int) -> np.ndarray:
  """k² ||F(z_k)||² / (L² ||z_0 − P_Sol(z_0)||²) per seed at k = ``iters``."""
  res, lips, r2 = (np.asarray(x, np.float64) for x in (residual_sq_last, lipschitz, r2))
  return iters**2 * res / (lips**2 * r2)


def method_hparams(base: str, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
  """`vi.default_hparams` of ``base`` as plain floats/strings, overridden by ``extra``."""
  out = {k: (v if isinstance(v, str) else float(v)) for k, v in vi.default_hparams(base).items()}
  return out | dict(extra or {})


def method_summary(
  residual_sq,
  oracle_calls,
  lipschitz,
  r2,
  *,
  stochastic: bool,
  fit: tuple[int, int],
  seconds: float,
  hparams: Mapping[str, Any],
) -> tuple[dict[str, Any], tuple[np.ndarray, ...]]:
  """Summary entry and the (calls, center, lo, hi) curves of one method's runs over seeds.

  Args: ``residual_sq`` (seeds, iters+1); ``oracle_calls`` (seeds, iters+1), the same for every
  seed; ``lipschitz`` and ``r2`` (seeds,). The constant is omitted under noise (it is the
  deterministic O(1/k²) constant).
  """
  res = np.asarray(residual_sq, np.float64)
  calls = np.asarray(oracle_calls, np.float64)[0].astype(np.int64)
  iters = res.shape[1] - 1
  center = center_curve(res, stochastic)
  slope, lsq = slopes(center, fit)
  entry = {
    "slope": slope,
    "slope_lsq": lsq,
    "residual_sq_final": float(center[-1]),
    "oracle_calls_final": int(calls[-1]),
    "oracle_calls_per_iter": float((calls[-1] - calls[1]) / max(iters - 1, 1)),
    "seconds": round(seconds, 2),
    "hparams": dict(hparams),
  }
  if not stochastic:
    const = rate_constant(res[:, -1], lipschitz, r2, iters)
    entry["constant"] = float(geometric_mean(const))
    entry["constant_max"] = float(const.max())
  return entry, (calls, center, res.min(0), res.max(0))


def seed_rows(residual_sq, oracle_calls, lipschitz, r2, *, stochastic: bool) -> list[dict]:
  """Each seed's own figures (``residual_sq`` (seeds, iters+1), as `method_summary`): its final
  ||F(z_K)||² and, for deterministic problems, its k² ||F(z_k)||² / (L² R²)."""
  del oracle_calls
  res = np.asarray(residual_sq, np.float64)
  rows = [{"residual_sq_final": float(r)} for r in res[:, -1]]
  if not stochastic:
    const = rate_constant(res[:, -1], lipschitz, r2, res.shape[1] - 1)
    for row, c in zip(rows, const):
      row["constant"] = float(c)
  return rows


def curve_rows(
  curves: Mapping[str, tuple[np.ndarray, ...]], points: Sequence[int]
) -> list[dict[str, Any]]:
  """Rows of metrics.csv (`CSV_COLUMNS`): each method's curve at the given iterations."""
  rows = []
  for m, (calls, center, lo, hi) in curves.items():
    rows += [
      dict(zip(CSV_COLUMNS, (m, int(i), int(calls[i]), center[i], lo[i], hi[i]))) for i in points
    ]
  return rows


def summary_line(method: str, entry: Mapping[str, Any], fit: tuple[int, int]) -> str:
  """One progress line: slope, constant (deterministic), final residual, oracle calls, time."""
  parts = [f"{method:22s}"]
  if entry["slope"] is not None:
    parts.append(f"slope[{fit[0]}..{fit[1]}] {entry['slope']:+.3f}")
  if "constant" in entry:
    parts.append(f"k^2|F|^2/(L^2R^2) {entry['constant']:.3g}")
  parts.append(f"|F(z_K)|^2 {entry['residual_sq_final']:.3g}")
  parts.append(f"calls {entry['oracle_calls_final']}  ({entry['seconds']:.1f}s)")
  return "  ".join(parts)


# ------------------------------------------------------------------------------------------------
# The comparison of `python -m experiments.goma`.


def check_problem(problem: str, noise: str, methods: str | Sequence[str] | None) -> list[str]:
  """Validates ``problem`` / ``noise`` / ``methods`` (None: `DEFAULT_METHODS`); ConfigError names
  the argument (the program's flag)."""
  check_choice("problem", problem, PROBLEMS)
  check_choice("noise", noise, NOISES)
  spec = DEFAULT_METHODS[problem] if methods is None else methods
  items = [m.strip() for m in spec.split(",")] if isinstance(spec, str) else list(spec)
  items = [m for m in items if m]
  bad = [m for m in items if m not in METHODS]
  if bad or not items:
    raise ConfigError("methods", f"got {','.join(bad) or 'nothing'}; allowed: {', '.join(METHODS)}")
  twice = sorted({m for m in items if items.count(m) > 1})
  if twice:
    raise ConfigError("methods", f"lists {','.join(twice)} more than once")
  if not problem.startswith("stochastic"):
    for m in items:
      if m in STOCHASTIC_ONLY:
        raise ConfigError(
          "methods",
          f"{m} is for stochastic problems (its decaying steps only fight the noise); on the "
          f"exact problem {problem} use {STOCHASTIC_ONLY[m]}",
        )
  return items


def run_seeds(seeds: Sequence[int] | None = None, seed: int = 0) -> tuple[int, ...]:
  """The seeds of a comparison: ``seeds`` (checked as ``--seeds``), else `config.NUM_SEEDS` seeds
  from ``seed``."""
  if seeds is None:
    return seeds_lib.parse_seeds(config_lib.NUM_SEEDS, seed)
  return seeds_lib.parse_seeds(list(seeds))


def check_run(cfg, problem: str, noise: str, methods, steps: int, seeds=None) -> list[str]:
  """Everything `run_comparison` would refuse, checked before anything is built or written: the
  config, problem, noise, methods, --steps (>= 2, int32), --seeds and the memory of the stacked
  curves and problem matrices (`resources.check_fits`). Returns the methods."""
  config_lib.validate_config(cfg)
  methods = check_problem(problem, noise, methods)
  if steps < 2:
    raise ConfigError("steps", f"must be >= 2, got {steps}")
  resources.check_int32("steps", steps, "the iteration count")
  seeds = len(run_seeds(seeds))
  dim = 2 * (cfg.d if problem.startswith("stochastic") else cfg.n)
  # residuals + oracle calls per iteration (float32 and int32, several copies while scanning and
  # stacking), the sweep's curves, and each seed's problem matrix
  curves = 4 * 4 * seeds * (steps + 1) * (2 + len(config_lib.sweep_factors(cfg.step_sweep)))
  resources.check_fits(curves, "steps", f"the curves of {seeds} seeds x {steps + 1} iterations")
  resources.check_fits(4 * 4 * seeds * dim * dim, "config.n", f"{seeds} problems of size {dim}")
  return methods


def build(problem: str, cfg, noise: str | None, key):
  """(operator or oracle, z0) of one seed."""
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


def solve(problem: str, cfg, noise: str, method: str, iters: int, keys):
  """Residuals, oracle calls, L and R^2 = ||z0 - P_Sol(z0)||^2 of every seed (one vmapped jit)."""
  base, hp = VARIANTS.get(method, (method, {}))
  stochastic = problem.startswith("stochastic")

  def one(key):
    k_build, k_noise = jax.random.split(key)
    op, z0 = build(problem, cfg, noise, k_build)
    L = op.lipschitz
    hps = {k: (v / L if k in ("eta", "gamma") else v) for k, v in hp.items()}
    tr = vi.run(base, op, z0, iters, key=k_noise if stochastic else None, L=L, **hps)
    game = op.game if stochastic else op
    return tr.residual_sq, tr.oracle_calls, L, game.distance_to_solution(z0) ** 2

  return jax.jit(jax.vmap(one))(keys)


def step_sweep(problem: str, cfg, iters: int, keys, factors: Sequence[float]):
  """Deterministic GOMA (anchored Popov, constant eta = c/L, gamma_k = (1 - b_k) eta) at every c:
  ||F(z_k)||^2 of shape (len(factors), seeds, iters + 1), one vmapped jit."""

  def one(c, key):
    op, z0 = build(problem, cfg, None, jax.random.split(key)[0])
    return vi.run("goma", op, z0, iters, L=op.lipschitz, eta=c / op.lipschitz).residual_sq

  cs = jnp.asarray(factors, jnp.float32)
  return jax.jit(jax.vmap(lambda c: jax.vmap(lambda k: one(c, k))(keys)))(cs)


def sweep_rows(factors, residual_sq, fit) -> list[dict[str, Any]]:
  """One row per step factor c: stable (finite and below ||F(z_0)||^2 on every seed), final
  geometric-mean residual and slope (None when unstable or the fit range is empty)."""
  rows = []
  for c, res in zip(factors, np.asarray(residual_sq, np.float64)):
    stable = bool(np.all(np.isfinite(res)) and np.all(res[:, -1] < res[:, 0]))
    center = center_curve(res, stochastic=False)
    slope = slopes(center, fit)[0] if stable else None
    final = float(center[-1]) if stable else None
    rows.append({"eta_times_L": c, "stable": stable, "residual_sq_final": final, "slope": slope})
  return rows


def sweep_line(row: Mapping[str, Any]) -> str:
  if not row["stable"]:
    return f"  eta = {row['eta_times_L']:g}/L: diverged"
  slope = "" if row["slope"] is None else f"  slope {row['slope']:+.3f}"
  return f"  eta = {row['eta_times_L']:g}/L: |F(z_K)|^2 {row['residual_sq_final']:.3g}{slope}"


def run_comparison(
  cfg,
  problem: str,
  methods: str | Sequence[str] | None,
  noise: str,
  *,
  steps: int,
  seeds: Sequence[int] | None = None,
  seed: int = 0,
  log: Callable[[str], Any] = print,
) -> dict[str, Any]:
  """Every method on ``problem`` for ``steps`` iterations over ``seeds`` (default: `run_seeds`,
  5 seeds from ``seed``), then (for deterministic problems) the step sweep. Returns {"summary":
  what summary.json holds, "curves": per method (calls, center, lo, hi), "title"}; ``log`` gets
  the progress lines. The summary's ``per_seed`` holds each seed's final residual (and, for
  deterministic problems, its k² ||F||² / (L² R²)) per method."""
  seeds = run_seeds(seeds, seed)
  methods = check_run(cfg, problem, noise, methods, steps, seeds)
  factors = config_lib.sweep_factors(cfg.step_sweep)
  stochastic = problem.startswith("stochastic")
  keys = seeds_lib.seed_keys(seeds)
  fit = (cfg.fit_lo, min(cfg.fit_hi, steps))
  if fit[0] >= fit[1]:
    log(f"(no slopes: --steps={steps} leaves no fit range above config.fit_lo={fit[0]})")
  per_method, curves = {}, {}
  per_seed = {str(s): {} for s in seeds}
  for m in methods:
    t0 = time.perf_counter()
    out = jax.block_until_ready(solve(problem, cfg, noise, m, steps, keys))
    base, extra = VARIANTS.get(m, (m, {}))
    kw = {"stochastic": stochastic, "fit": fit, "hparams": method_hparams(base, extra)}
    per_method[m], curves[m] = method_summary(*out, seconds=time.perf_counter() - t0, **kw)
    for s, row in zip(seeds, seed_rows(*out, stochastic=stochastic)):
      per_seed[str(s)][m] = row
    log(summary_line(m, per_method[m], fit))
  sweep = None
  if factors and not stochastic:
    log("step sweep: deterministic GOMA = anchored Popov with constant eta (APV: eta_k -> 0.215/L)")
    sweep = sweep_rows(factors, step_sweep(problem, cfg, steps, keys, factors), fit)
    log("\n".join(sweep_line(r) for r in sweep))
  title = f"{problem}" + (f" ({noise} noise)" if stochastic else "") + f", {len(seeds)} seeds"
  summary = {
    "problem": problem,
    "noise": noise if stochastic else None,
    "iters": steps,
    "seeds": list(seeds),
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
    "per_seed": per_seed,
  }
  return {"summary": summary, "curves": curves, "title": title}


def write_report(workdir, result: Mapping[str, Any]) -> pathlib.Path:
  """curves.png, metrics.csv, step_sweep.csv (when swept) and summary.json in ``workdir``."""
  workdir = pathlib.Path(workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  summary, curves = result["summary"], result["curves"]
  stochastic = summary["noise"] is not None
  if summary["step_sweep"] is not None:
    metrics.write_table(workdir / "step_sweep.csv", summary["step_sweep"])
  pts = report.log_points(summary["iters"], summary["config"]["plot_points"])
  metrics.write_table(workdir / "metrics.csv", curve_rows(curves, pts))
  what = "E||F(z_k)||^2 (mean)" if stochastic else "||F(z_k)||^2 (geometric mean)"
  plots.lines(
    workdir / "curves.png",
    {m: tuple(c[pts[pts >= 1]] for c in curve) for m, curve in curves.items()},
    xlabel="oracle calls",
    ylabel=f"{what}, band min..max",
    logx=True,
    logy=True,
    title=result["title"],
  )
  runtime.write_summary(workdir, summary)
  return workdir


# ------------------------------------------------------------------------------------------------
# Problem T2 under several noise levels and starts at once (the study goma/unbounded).


def oracle_budget_iters(method: str, calls: int) -> int:
  """Iterations that spend exactly ``calls`` oracle calls: the single-call methods (Popov, APV,
  GOMA) spend one at z_0 and one per iteration, EG-type methods (``eg``, DSEG's EG form) two per
  iteration, so both get the same number of oracle calls."""
  per_iter = 2 if method in ("eg", "eag_c", "eag_v", "feg", "dseg") else 1
  return calls // 2 if per_iter == 2 else calls - 1


def noise_grid(
  method: str,
  hparams: Mapping[str, Any],
  settings: Sequence[tuple[float, float, float]],
  seeds: Sequence[int],
  calls: int,
  d: int = 50,
):
  """||F(z_k)||² of ``method`` on T2 (`problems.dseg_bilinear` of size ``d``) for every setting
  ``(sigma, sigma_mult, start_scale)`` and seed, in one compiled program (settings x seeds vmapped,
  iterations scanned). Seed k is the instance and the noise stream (``jax.random.key(k)``), the same
  for every method and setting; the start is ``start_scale`` times DSEG's (e_1 for both players).
  ``hparams``: step constants ``eta``/``gamma`` in units of 1/L, the rest as `vi.run` takes them;
  a number may also be a sequence with one value per setting (vmapped with the settings).

  Returns (residual_sq of shape (settings, seeds, iters + 1), oracle_calls (iters + 1,)), iters
  from :func:`oracle_budget_iters` so every method spends ``calls`` oracle calls."""
  iters = oracle_budget_iters(method, calls)
  keys = seeds_lib.seed_keys(seeds)
  grid = jnp.asarray(settings, jnp.float32)
  static = {k: v for k, v in hparams.items() if isinstance(v, str)}
  numbers = {
    k: jnp.broadcast_to(jnp.asarray(v, jnp.float32), (len(settings),))
    for k, v in hparams.items()
    if k not in static
  }

  def one(setting, numbers, key):
    sigma, sigma_mult, scale = setting
    k_game, k_noise = jax.random.split(key)
    game = problems.dseg_bilinear(k_game, d)
    oracle = problems.StochasticOracle(game, sigma, sigma_mult, multiplicative=True)
    z0 = scale * jnp.zeros(2 * d).at[0].set(1.0).at[d].set(1.0)
    L = game.lipschitz
    hp = {k: (v / L if k in ("eta", "gamma") else v) for k, v in numbers.items()}
    tr = vi.run(method, oracle, z0, iters, key=k_noise, L=L, **hp, **static)
    return tr.residual_sq, tr.oracle_calls

  out = jax.jit(jax.vmap(lambda s, h: jax.vmap(lambda k: one(s, h, k))(keys)))(grid, numbers)
  # wait inside jax, where jaxlab.core.watchdog recognises (and restarts) the rare jaxlib CPU stall
  res, calls_out = jax.block_until_ready(out)
  return np.asarray(res), np.asarray(calls_out)[0, 0]


def late_slope(oracle_calls, residual_sq, num: int = 200) -> np.ndarray:
  """Least-squares slope of log ||F||² against log(oracle calls) over the late half of the log
  axis, calls in [sqrt(C), C] (C the last count), on ``num`` log-spaced points; batched over the
  leading axes. A non-finite residual counts as the float32 maximum, so an overflowed run keeps a
  (positive) slope instead of dropping out of the comparison."""
  calls = np.asarray(oracle_calls, np.float64)
  res = np.asarray(residual_sq, np.float64)
  res = np.where(np.isfinite(res), res, float(np.finfo(np.float32).max))
  top = calls[-1]
  return vi.fit_slope(calls, res, lo=np.sqrt(top), hi=top, method="lsq", num=num)
