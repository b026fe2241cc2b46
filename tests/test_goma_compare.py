"""Summaries of monotone-VI runs over seeds (jaxlab.optim.goma.compare): the curve, slopes and the
O(1/k²) constant that experiments/goma.py reports."""

import csv

import numpy as np
import pytest

from jaxlab.core import metrics
from jaxlab.optim.goma import compare as vi_compare
from jaxlab.optim.goma import vi


def _runs(seeds=3, iters=1000, power=2.0):
  """res[s, k] = c_s / max(k, 1)^power with per-seed constants c_s; calls = 1 + k."""
  c = np.array([1.0, 4.0, 16.0])[:seeds]
  k = np.arange(iters + 1)
  res = c[:, None] / np.maximum(k, 1.0) ** power
  calls = np.broadcast_to(k + 1, res.shape)
  return res, calls


def test_center_curve_geometric_vs_arithmetic():
  res, _ = _runs()
  np.testing.assert_allclose(vi_compare.center_curve(res, False), 4.0 * res[0], rtol=1e-12)
  np.testing.assert_allclose(vi_compare.center_curve(res, True), 7.0 * res[0], rtol=1e-12)
  zero = np.zeros((2, 3))
  assert np.all(np.isfinite(vi_compare.center_curve(zero, False)))  # floored, not -inf


def test_slopes():
  res, _ = _runs(power=2.0)
  slope, lsq = vi_compare.slopes(res[0], (10, 1000))
  assert slope == pytest.approx(-2.0, abs=1e-9) and lsq == pytest.approx(-2.0, abs=1e-9)
  assert vi_compare.slopes(res[0], (1000, 1000)) == (None, None)  # empty range
  bad = res[0].copy()
  bad[5] = np.nan
  assert vi_compare.slopes(bad, (10, 1000)) == (None, None)


def test_method_summary_deterministic_and_stochastic():
  res, calls = _runs(iters=1000)
  lips, r2 = np.array([1.0, 2.0, 1.0]), np.array([1.0, 1.0, 4.0])
  kw = {"fit": (10, 1000), "seconds": 1.234, "hparams": {"eta": 0.5}}
  entry, (c, center, lo, hi) = vi_compare.method_summary(
    res, calls, lips, r2, stochastic=False, **kw
  )
  const = 1000**2 * res[:, -1] / (lips**2 * r2)
  assert entry["constant"] == pytest.approx(np.exp(np.log(const).mean()))
  assert entry["constant_max"] == pytest.approx(const.max())
  assert entry["oracle_calls_final"] == 1001 and entry["oracle_calls_per_iter"] == 1.0
  assert entry["seconds"] == 1.23 and entry["hparams"] == {"eta": 0.5}
  assert entry["slope"] == pytest.approx(-2.0, abs=1e-9)
  assert entry["residual_sq_final"] == pytest.approx(center[-1])
  np.testing.assert_array_equal(lo, res[0])
  np.testing.assert_array_equal(hi, res[2])
  assert c.dtype == np.int64
  # under noise the deterministic-rate constant is not reported and the center is the mean
  noisy, _ = vi_compare.method_summary(res, calls, lips, r2, stochastic=True, **kw)
  assert "constant" not in noisy and "constant_max" not in noisy
  assert noisy["residual_sq_final"] == pytest.approx(res[:, -1].mean())


def test_curve_rows_write_the_metrics_csv(tmp_path):
  res, calls = _runs(seeds=2, iters=10)
  _, curve = vi_compare.method_summary(
    res, calls, np.ones(2), np.ones(2), stochastic=True, fit=(1, 10), seconds=0.0, hparams={}
  )
  rows = vi_compare.curve_rows({"eg": curve, "goma": curve}, [0, 1, 10])
  assert len(rows) == 6 and tuple(rows[0]) == vi_compare.CSV_COLUMNS
  assert (
    rows[2]["iteration"] == 10 and rows[2]["oracle_calls"] == 11 and rows[3]["method"] == "goma"
  )
  path = metrics.write_table(tmp_path / "metrics.csv", rows)
  assert path.read_text().startswith("method,iteration,oracle_calls,residual_sq_center")
  with open(path, newline="") as f:
    back = list(csv.DictReader(f))
  assert float(back[1]["residual_sq_center"]) == pytest.approx(res[:, 1].mean())


def test_method_hparams_and_summary_line():
  hp = vi_compare.method_hparams("goma", {"r_eta": 0.5})
  assert hp["r_eta"] == 0.5 and set(vi.default_hparams("goma")) <= set(hp)
  assert all(isinstance(v, (float, str)) for v in vi_compare.method_hparams("eg").values())
  entry = {
    "slope": -1.5,
    "constant": 3.0,
    "residual_sq_final": 1e-3,
    "oracle_calls_final": 10,
    "seconds": 0.5,
  }
  line = vi_compare.summary_line("eg", entry, (1, 9))
  assert "slope[1..9] -1.500" in line and "k^2|F|^2/(L^2R^2) 3" in line and "calls 10" in line
  entry = entry | {"slope": None}
  entry.pop("constant")
  line = vi_compare.summary_line("eg", entry, (1, 9))
  assert "slope" not in line and "k^2" not in line


def test_run_comparison_and_write_report_reproduce_the_program(tmp_path):
  """The library path of `python -m experiments.goma`: defaults from `goma.get_config()`, the
  comparison, the step sweep and the files."""
  import json

  from jaxlab.optim import goma

  cfg = goma.get_config()
  cfg.update(n=6, fit_lo=5, step_sweep="0.2,0.9")
  lines = []
  result = goma.compare.run_comparison(
    cfg, "bilinear", "eg,goma", "multiplicative", steps=40, seeds=(0, 1), log=lines.append
  )
  assert set(result["summary"]["methods"]) == {"eg", "goma"}
  assert [r["eta_times_L"] for r in result["summary"]["step_sweep"]] == [0.2, 0.9]
  assert len(lines) == 4 and lines[0].startswith("eg")
  goma.compare.write_report(tmp_path / "run", result)
  for name in ("curves.png", "metrics.csv", "step_sweep.csv", "summary.json"):
    assert (tmp_path / "run" / name).exists(), name
  summary = json.loads((tmp_path / "run" / "summary.json").read_text())
  assert summary["iters"] == 40 and summary["config"]["n"] == 6 and summary["noise"] is None
  stoch = goma.compare.run_comparison(
    cfg, "stochastic_bilinear", ["apv"], "additive", steps=20, seeds=(0, 1), log=lines.append
  )
  assert stoch["summary"]["noise"] == "additive" and stoch["summary"]["step_sweep"] is None


@pytest.mark.parametrize(
  "problem, methods", [("bilinear", "goma,eg"), ("stochastic_bilinear", "goma_stochastic")]
)
def test_seed_k_of_a_comparison_over_seeds_is_the_comparison_of_seed_k_alone(problem, methods):
  """--seeds: every seed is its own instance, start and noise stream (`seeds.seed_keys`), all
  solved in one vmapped jit; seed 5 among others gives what seed 5 alone gives."""
  from jaxlab.optim import goma

  cfg = goma.get_config()
  cfg.update(n=6, d=4, fit_lo=5, step_sweep="")
  run = lambda seeds: goma.compare.run_comparison(
    cfg, problem, methods, "multiplicative", steps=60, seeds=seeds,
    log=lambda line: None,
  )  # fmt: skip
  many, alone = run((2, 5, 9))["summary"], run((5,))["summary"]
  assert many["seeds"] == [2, 5, 9] and set(many["per_seed"]) == {"2", "5", "9"}
  # the O(1/k²) constant is a deterministic-rate figure: not reported under noise
  fields = {"residual_sq_final", "constant"} if problem == "bilinear" else {"residual_sq_final"}
  for m, row in many["per_seed"]["5"].items():
    solo = alone["per_seed"]["5"][m]
    assert set(row) == set(solo) == fields
    for k in row:
      np.testing.assert_allclose(row[k], solo[k], rtol=1e-5, err_msg=f"{m} {k}")
    finals = [many["per_seed"][s][m]["residual_sq_final"] for s in ("2", "5", "9")]
    assert len(set(finals)) == 3  # the instances differ
  # the default: 5 seeds from --seed
  assert goma.compare.run_seeds(None, 3) == (3, 4, 5, 6, 7)


@pytest.mark.parametrize(
  "args, field",
  [
    (("nope", "additive", None), "problem"),
    (("bilinear", "loud", None), "noise"),
    (("bilinear", "additive", "eg,sgd"), "methods"),
    (("bilinear", "additive", ""), "methods"),
  ],
)
def test_check_problem_names_the_flag(args, field):
  from jaxlab.core.errors import ConfigError
  from jaxlab.optim import goma

  with pytest.raises(ConfigError) as e:
    goma.compare.check_problem(*args)
  assert e.value.field == field
  assert goma.compare.check_problem("quadratic", "additive", None) == (
    goma.compare.DEFAULT_METHODS["quadratic"].split(",")
  )


@pytest.mark.parametrize(
  "overrides, field",
  [
    ({"smax": 1e-4}, "config.smax"),
    ({"rank": 99}, "config.rank"),
    ({"fit_hi": 10}, "config.fit_hi"),
    ({"step_sweep": "0.2,x"}, "config.step_sweep"),
    ({"sigma": float("inf")}, "config.sigma"),
  ],
)
def test_validate_config_names_the_field(overrides, field):
  from jaxlab.core.errors import ConfigError
  from jaxlab.optim import goma

  cfg = goma.get_config()
  cfg.update(**overrides)
  with pytest.raises(ConfigError) as e:
    goma.validate_config(cfg)
  assert e.value.field == field
