"""goma's studies (docs/goma.md): each a claim of its paper, declared before it runs.

``goma/unbounded`` and ``goma/unbounded_tuned``: the single-call stochastic GOMA template (a
reconstruction, docs/goma.md) on problem T2 (DSEG's bilinear game, d = 50 per player,
s ~ U[1, 2]) under eight noise settings:
additive noise alone, and multiplicative matrix noise sigma_C in {0.1, 0.5, 1} (oracle variance
growing with ||z - z*||², the unbounded-variance regime), each from DSEG's start (e_1 for both
players) and from a start 10 times farther. Arms, at an equal budget of 10⁵ oracle calls:

* ``goma``: `vi.run("goma_stochastic")`, anchored, explore step gamma_k = c/(L (k+1)^{1/3}),
  update step eta_k = c/(L (k+1)^{2/3});
* ``no_anchor``: the same update and schedules with the anchor weight 0 (``anchor=0``), the
  control that isolates anchoring;
* ``dseg``: double-stepsize stochastic extragradient (Hsieh et al. 2020, arXiv 2003.10162), EG
  form, two calls per iteration, so half the iterations;
* ``popov_1scale``: anchored Popov with one decaying step eta_k = c/(L sqrt(k+1)),
  gamma_k = (1 - b_k) eta_k: optimistic, a single time scale.

The step constant c of each arm is chosen on the tuning seeds by :func:`tune` (recorded in
``docs/results/goma/<study>/tuning.json``): ``goma/unbounded`` takes one c per arm for every
setting (:data:`STEP`), ``goma/unbounded_tuned`` one c per arm and setting
(:data:`STEP_PER_SETTING`); ``no_anchor`` takes GOMA's, as its control must. Every arm's settings x
seeds run in one compiled program (`compare.noise_grid`).

Per seed and setting ``<s>``: ``slope/<s>``, the least-squares slope of log ||F(z_k)||² against log
(oracle calls) over calls in [sqrt(C), C] (`compare.late_slope`); ``log10_final/<s>``, log10
||F(z_K)||² (None when not finite); ``diverged/<s>``, 1 when ||F(z_K)||² is not finite or above
:data:`DIVERGED` times ||F(z_0)||², else 0; and 60 log-spaced points of the curve for the figure
(:func:`figure`).
"""

from __future__ import annotations

import math
import pathlib

import numpy as np

from jaxlab.core import stats
from jaxlab.studies import runner
from jaxlab.studies.spec import Study

CLAIM = (
  "A simplified single-call stochastic variant of the anchored optimistic method GOMA reaches "
  "last-iterate E||F(z_k)||^2 = O(1/sqrt(k)) under unbounded (state-dependent) noise variance, "
  "without variance reduction or growing batches (arXiv 2606.21528, abstract; update "
  "reconstructed)."
)
CALLS = 100_000  # oracle calls per arm, seed and setting
D = 50
DIVERGED = 100.0  # ||F(z_K)||² above this many times ||F(z_0)||² counts as diverged
CURVE_POINTS = 60
SEEDS = tuple(range(10))
TUNING_SEEDS = (100, 101, 102)
# name: (sigma, sigma_mult, start_scale); sigma: additive std, sigma_mult: matrix noise std sigma_C
SETTINGS = {
  "add": (0.5, 0.0, 1.0),
  "add_far": (0.5, 0.0, 10.0),
  "mult01": (0.1, 0.1, 1.0),
  "mult01_far": (0.1, 0.1, 10.0),
  "mult05": (0.1, 0.5, 1.0),
  "mult05_far": (0.1, 0.5, 10.0),
  "mult1": (0.1, 1.0, 1.0),
  "mult1_far": (0.1, 1.0, 10.0),
}
# The tuning (`tune`): step constants c (in units of 1/L) tried per arm on TUNING_SEEDS at
# TUNE_CALLS oracle calls; the choice minimises the mean over SETTINGS of the median over the
# tuning seeds of log10 ||F(z_K)||² (a non-finite one counts as 39).
STEP_GRID = (0.05, 0.1, 0.2, 0.3, 0.4, 0.6, 0.8)
TUNE_CALLS = 20_000
# goma/unbounded_tuned: the same tuning, one c per arm and setting, on a grid reaching EG's 1/L
STEP_GRID_PER_SETTING = (0.05, 0.1, 0.2, 0.3, 0.4, 0.6, 0.8, 1.0)
# What tune() chose (docs/results/goma/unbounded/tuning.json); fixed before the held-out seeds ran.
STEP = {"goma": 0.4, "dseg": 0.05, "popov_1scale": 0.2}
# What tune(grid=STEP_GRID_PER_SETTING) chose per setting (docs/results/goma/unbounded_tuned/
# tuning.json); fixed before its held-out seeds ran.
STEP_PER_SETTING = {
  "goma": {
    "add": 0.4,
    "add_far": 1,
    "mult01": 1,
    "mult01_far": 1,
    "mult05": 0.8,
    "mult05_far": 0.8,
    "mult1": 0.4,
    "mult1_far": 0.4,
  },
  "dseg": {
    "add": 1,
    "add_far": 1,
    "mult01": 1,
    "mult01_far": 1,
    "mult05": 0.05,
    "mult05_far": 0.05,
    "mult1": 0.05,
    "mult1_far": 0.05,
  },
  "popov_1scale": {
    "add": 0.1,
    "add_far": 0.3,
    "mult01": 0.2,
    "mult01_far": 0.6,
    "mult05": 0.2,
    "mult05_far": 0.4,
    "mult1": 0.2,
    "mult1_far": 0.2,
  },
}


def arm_method(arm: str, step: dict | None = None) -> tuple[str, dict]:
  """``(vi method, hparams)`` of ``arm`` with its step constant (``step``: default :data:`STEP`;
  a constant may be ``{setting: c}``, which gives one c per setting in :data:`SETTINGS` order)."""
  c = (STEP if step is None else step)["goma" if arm == "no_anchor" else arm]
  if isinstance(c, dict):
    c = [c[name] for name in SETTINGS]
  if arm == "goma":
    return "goma_stochastic", {"eta": c, "gamma": c}
  if arm == "no_anchor":
    return "goma_stochastic", {"eta": c, "gamma": c, "anchor": 0.0}
  if arm == "dseg":
    return "dseg", {"form": "eg", "eta": c, "gamma": c}
  if arm == "popov_1scale":
    return "goma", {"eta_schedule": "power", "eta": c, "r_eta": 0.5}
  raise ValueError(f"unknown arm {arm!r}")


ARMS = ("goma", "no_anchor", "dseg", "popov_1scale")


def _grid(arm, seeds, calls, step=None):
  from jaxlab.optim.goma import compare

  method, hp = arm_method(arm, step)
  res, oracle_calls = compare.noise_grid(method, hp, list(SETTINGS.values()), seeds, calls, D)
  return method, hp, res, oracle_calls


def summaries(arm: str, seeds, calls: int = CALLS, step=None) -> dict[int, dict]:
  """Every setting of ``arm`` for ``seeds`` in one program: per seed its record (module doc)."""
  from jaxlab.optim.goma import compare

  method, hp, res, oracle_calls = _grid(arm, tuple(seeds), calls, step)
  slope = compare.late_slope(oracle_calls, res)  # (settings, seeds)
  pts = np.unique(np.geomspace(1, len(oracle_calls) - 1, CURVE_POINTS).round().astype(int))
  config = {
    "arm": arm,
    "method": method,
    "hparams": hp,
    "step_units": "eta, gamma in units of 1/L",
    "problem": f"dseg_bilinear d={D}",
    "settings": {k: list(v) for k, v in SETTINGS.items()},
    "oracle_calls": calls,
    "iterations": len(oracle_calls) - 1,
    "slope_range": [math.sqrt(oracle_calls[-1]), float(oracle_calls[-1])],
    "diverged_above": f"{DIVERGED:g} x ||F(z_0)||^2",
  }
  out = {}
  for j, seed in enumerate(seeds):
    rec = {"config": config, "oracle_calls": int(oracle_calls[-1])}
    curve = {"calls": [int(c) for c in oracle_calls[pts]]}
    for i, name in enumerate(SETTINGS):
      r = res[i, j]
      final = float(r[-1])
      ok = math.isfinite(final)
      rec[f"slope/{name}"] = float(slope[i, j])
      rec[f"log10_final/{name}"] = math.log10(max(final, 1e-45)) if ok else None
      rec[f"diverged/{name}"] = int(not ok or final > DIVERGED * float(r[0]))
      curve[name] = [float(f"{v:.4g}") if math.isfinite(v) else None for v in r[pts]]
    rec["curve"] = curve
    out[seed] = rec
  return out


def cell(arm: str, seeds: tuple[int, ...], workdir: pathlib.Path) -> dict[int, dict]:
  """The cell of ``goma/unbounded``: every unfinished seed of ``arm`` in one compiled program."""
  del workdir  # nothing to checkpoint: one arm's program takes minutes and its raw files are kept
  return summaries(arm, seeds)


def cell_per_setting(arm: str, seeds: tuple[int, ...], workdir: pathlib.Path) -> dict[int, dict]:
  """The cell of ``goma/unbounded_tuned``: as :func:`cell` with :data:`STEP_PER_SETTING`."""
  del workdir
  return summaries(arm, seeds, step=STEP_PER_SETTING)


def tune(seeds=TUNING_SEEDS, calls: int = TUNE_CALLS, grid=STEP_GRID, log=print) -> dict:
  """The step constant of ``goma``, ``dseg`` and ``popov_1scale`` on the tuning seeds. Per arm, c
  and setting the score is the median over seeds of log10 ||F(z_K)||²; ``step`` is the c with the
  lowest mean score over the settings (goma/unbounded), ``step_per_setting`` the c with the lowest
  score in each setting (goma/unbounded_tuned)."""
  out = {"seeds": list(seeds), "oracle_calls": calls, "grid": list(grid)}
  out.update(scores={}, step={}, scores_per_setting={}, step_per_setting={})
  for arm in ("goma", "dseg", "popov_1scale"):
    per = {}
    for c in grid:
      _, _, res, _ = _grid(arm, tuple(seeds), calls, {arm: c})
      last = np.asarray(res[..., -1], np.float64)
      final = np.where(np.isfinite(last), last, 1e39)
      per[c] = np.median(np.log10(np.maximum(final, 1e-45)), axis=1)  # (settings,)
      log(f"tune {arm} c={c:g}: {float(np.mean(per[c])):+.3f}")
    out["scores"][arm] = {f"{c:g}": float(np.mean(v)) for c, v in per.items()}
    out["step"][arm] = min(grid, key=lambda c: float(np.mean(per[c])))
    out["scores_per_setting"][arm] = {
      name: {f"{c:g}": float(per[c][i]) for c in grid} for i, name in enumerate(SETTINGS)
    }
    out["step_per_setting"][arm] = {
      name: min(grid, key=lambda c, i=i: float(per[c][i])) for i, name in enumerate(SETTINGS)
    }
  return out


def figure(results=None, path=None, name: str = "goma/unbounded") -> pathlib.Path:
  """figure.png in ``results`` (default: the study ``name``'s folder) from the raw files: per
  setting the median over seeds of ||F(z_k)||² against oracle calls for every arm, the band its
  25-75 %."""
  from jaxlab.core import plots

  study = next(s for s in STUDIES if s.name == name)
  results = pathlib.Path(results) if results is not None else study.results
  records = runner.read_raw(study, results)
  plt = plots._pyplot()
  fig, axes = plt.subplots(2, 4, figsize=(15, 7), squeeze=False)
  order = ("mult01", "mult05", "mult1", "add", "mult01_far", "mult05_far", "mult1_far", "add_far")
  for ax, name in zip(axes.flat, order):
    sigma, sigma_mult, scale = SETTINGS[name]
    for arm in study.arms:
      recs = [r for r in records if r["arm"] == arm]
      if not recs:
        continue
      calls = np.asarray(recs[0]["curve"]["calls"], np.float64)
      ys = np.asarray(
        [[np.inf if v is None else v for v in r["curve"][name]] for r in recs], np.float64
      )
      keep = calls >= 1
      lo, mid, hi = np.percentile(ys[:, keep], [25, 50, 75], axis=0)
      (line,) = ax.plot(calls[keep], mid, label=arm)
      ax.fill_between(calls[keep], lo, hi, color=line.get_color(), alpha=0.2)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_title(f"sigma={sigma:g}, sigma_C={sigma_mult:g}, start x{scale:g}", fontsize=9)
    ax.set_xlabel("oracle calls", fontsize=8)
    ax.set_ylabel("||F(z_k)||^2 (median, 25-75 %)", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(True, alpha=0.3)
  axes.flat[0].legend(fontsize=8)
  out = pathlib.Path(path) if path is not None else results / "figure.png"
  fig.tight_layout()
  fig.savefig(out, dpi=100)
  plt.close(fig)
  return out


_COMMON = dict(
  claim=CLAIM,
  arms=ARMS,
  control="no_anchor",
  pairs=(("goma", "no_anchor"), ("goma", "dseg")),
  seeds=SEEDS,
  tuning_seeds=TUNING_SEEDS,
  budget={"oracle_calls": CALLS},
  tests=tuple(stats.Test("superiority", f"slope/{s}", higher_is_better=False) for s in SETTINGS),
  metrics=tuple(f"{m}/{s}" for m in ("slope", "log10_final", "diverged") for s in SETTINGS),
)
_SETUP = (
  "Problem T2 of docs/goma.md (bilinear, d = 50 per player, s ~ U[1, 2]); settings <s>: add "
  "(sigma = 0.5, sigma_C = 0), mult01 / mult05 / mult1 (sigma = 0.1, sigma_C = 0.1 / 0.5 / 1), "
  "suffix _far: start 10 x DSEG's e_1 start. 10^5 oracle calls per arm (DSEG's EG form: 5 x 10^4 "
  "iterations of two calls). slope: least-squares slope of log ||F(z_k)||^2 on log(oracle calls) "
  "over [sqrt(10^5), 10^5]; log10_final: log10 ||F(z_K)||^2; diverged: 1 when ||F(z_K)||^2 is not "
  "finite or above 100 x ||F(z_0)||^2 (the arm's mean x 10 is the count over the 10 seeds)."
)

STUDIES = (
  Study(
    name="goma/unbounded",
    cell=cell,
    note=(
      f"{_SETUP} Step constants chosen on the tuning seeds at 2 x 10^4 calls, one per arm for all "
      "settings (tuning.json): goma and no_anchor 0.4/L, dseg 0.05/L (the grid's smallest: larger "
      "ones blow up under sigma_C = 1), popov_1scale 0.2/L."
    ),
    **_COMMON,
  ),
  Study(
    name="goma/unbounded_tuned",
    cell=cell_per_setting,
    note=(
      f"{_SETUP} Step constants chosen on the tuning seeds at 2 x 10^4 calls, one per arm and "
      "setting from 0.05/L..1/L (tuning.json; no_anchor takes goma's). Declared after "
      "goma/unbounded, whose one constant per arm leaves dseg at 0.05/L, where it barely moves."
    ),
    **_COMMON,
  ),
)
NAMES = tuple(s.name for s in STUDIES)
