"""Strategy I vs II verdicts (jaxlab.optim.decentralized.compare) and the shared table helpers
(jaxlab.optim.report): the rules the decentralized experiment reports by."""

import jax
import numpy as np
import pytest

from jaxlab.core import metrics
from jaxlab.core.errors import ConfigError
from jaxlab.optim import decentralized as dec
from jaxlab.optim import report
from jaxlab.optim.decentralized import compare
from jaxlab.optim.decentralized import config as dec_config

W = np.array([[0.5, 0.5], [0.5, 0.5]])
A = np.array([[0.6, 0.4], [0.4, 0.6]])


def _res(gap, consensus=None, diverged_at=None, mixing=W):
  gap = np.asarray(gap, np.float64)
  consensus = gap / 10 if consensus is None else np.asarray(consensus, np.float64)
  return dec.RunResult(
    gap=gap,
    consensus=consensus,
    gap_tracked=gap,
    x=np.zeros((2, 1)),
    mixing=mixing,
    f_star=0.0,
    comm="dense",
    diverged_at=diverged_at,
  )


def _win(results, metric="gap", **kw):
  return compare.winner(results, metric, tie_tol=kw.pop("tie_tol", 0.05), tail=0.5, **kw)


# ---------------------------------------------------------------------------------------------
# report


def test_tail_mean_averages_the_last_fraction():
  x = np.arange(10.0)
  assert report.tail_mean(x, 0.3) == np.mean([7, 8, 9])
  assert report.tail_mean(x, 0.01) == 9.0  # at least one entry
  assert report.tail_mean(x, 1.0) == 4.5
  with pytest.raises(ConfigError):
    report.tail_mean(x, 0.0)


def test_md_table_and_fmt():
  rows = [{"a": 0.123456, "b": True, "c": "x"}, {"a": 2}]
  table = report.md_table(rows, ["a", "b"])
  assert table == "| a | b |\n|---|---|\n| 0.123 | True |\n| 2 |  |\n"
  assert report.fmt(np.bool_(False)) == "False" and report.fmt(np.float32(1e-5)) == "1e-05"


def test_log_points():
  pts = report.log_points(1000, 4)
  np.testing.assert_array_equal(pts, [0, 1, 10, 100, 1000])
  assert pts.dtype == np.int64
  assert report.log_points(3, 400).tolist() == [0, 1, 2, 3]  # duplicates removed


# ---------------------------------------------------------------------------------------------
# winner / identical


def test_winner_smaller_tail_gap_wins_and_ties_within_tolerance():
  i, ii = _res([9.0, 9.0, 2.0, 2.0]), _res([9.0, 9.0, 1.0, 1.0], mixing=A)
  assert _win({"I": i, "II": ii}) == "II"
  assert _win({"I": ii, "II": i}) == "I"
  # only the tail counts: the first half is identical, the last half differs by 4%
  close = _res([100.0, 100.0, 1.04, 1.04], mixing=A)
  assert _win({"I": _res([0.0, 0.0, 1.0, 1.0]), "II": close}) == "tie"
  assert _win({"I": _res([0.0, 0.0, 1.0, 1.0]), "II": close}, tie_tol=0.01) == "I"


def test_a_diverged_strategy_never_wins():
  # the diverged run's recorded numbers are smaller, yet it must not win
  ok, bad = _res([1.0, 1.0]), _res([0.0, 0.0], diverged_at=2, mixing=A)
  assert _win({"I": ok, "II": bad}) == "I (II diverged)"
  assert _win({"I": bad, "II": ok}) == "II (I diverged)"
  assert _win({"I": bad, "II": bad}) == "none (both diverged)"
  assert _win({"I": ok}) == "I (II n/a)"
  assert _win({"I": bad}) == "none (I diverged, II n/a)"
  assert compare.all_diverged({"I": bad, "II": bad})
  assert not compare.all_diverged({"I": bad, "II": ok})


def test_identical_needs_uniform_lambda_and_the_same_matrix():
  uniform, skewed = np.full(2, 0.5), np.array([0.3, 0.7])
  same = {"I": _res([1.0]), "II": _res([1.0])}
  assert compare.identical(same, uniform)
  assert not compare.identical(same, skewed)
  assert not compare.identical({"I": _res([1.0]), "II": _res([1.0], mixing=A)}, uniform)
  assert not compare.identical({"I": _res([1.0])}, uniform)
  # identical cells are reported as such, even where the numbers would say otherwise
  differ = {"I": _res([2.0]), "II": _res([1.0])}
  assert _win(differ, same=True) == compare.IDENTICAL
  comp = compare.Comparison(same, {}, 0.1, uniform)
  assert compare.winners(comp, tie_tol=0.05, tail=0.5) == {
    "gap": compare.IDENTICAL,
    "consensus": compare.IDENTICAL,
  }


# ---------------------------------------------------------------------------------------------
# rows, tables, summaries


def _diag():
  keys = compare.DIAG_COLS
  return {k: (k == "predict_II") if k == "predict_II" else 0.5 for k in keys}


def test_sweep_row_stats_and_summary():
  lam = np.array([0.3, 0.7])
  ok, bad = _res([2.0, 2.0]), _res([1.0, 1.0], diverged_at=1, mixing=A)
  row = compare.sweep_row(
    "ring",
    "dirichlet:1",
    compare.Comparison({"I": ok, "II": bad}, _diag(), 0.1, lam),
    tie_tol=0.05,
    tail=0.5,
  )
  assert row["gap_I"] == 2.0 and row["gap_II"] == "diverged" and row["cons_II"] == "diverged"
  assert row["winner_gap"] == "I (II diverged)" and row["predict_II"] is True
  na = compare.sweep_row(
    "exp", "uniform", compare.Comparison({"I": ok}, _diag(), 0.1, lam), tie_tol=0.05, tail=0.5
  )
  assert na["gap_II"] == "n/a"
  rows = [
    {"winner_gap": "II", "predict_II": True},
    {"winner_gap": "I", "predict_II": True},
    {"winner_gap": "tie", "predict_II": True},
    {"winner_gap": compare.IDENTICAL, "predict_II": False},
    {"winner_gap": "II", "predict_II": False},
  ]
  st = compare.sweep_stats(rows)
  assert st == {"cells": 5, "II_wins": 2, "identical": 1, "decided": 3, "agree": 1}
  summary = compare.sweep_summary(rows)
  assert summary["II_wins_gap"] == 2 and summary["predict_agreement"] == [1, 3]
  md = compare.sweep_markdown([row, na], "title", tail=0.1, tie_tol=0.05)
  assert md.startswith("# Constant-step bias: title\n") and "| ring | dirichlet:1 |" in md
  assert "within 5%" in md and "| bias_I | bias_II |" in md and "| lower_bias |" in md
  assert "gap_I |" not in md and "II has the lower bias in 0/2" in md
  assert compare.lambda_label("dirichlet", 0.5) == "dirichlet:0.5"
  assert compare.lambda_label("degree", 0.5) == "degree"


def test_metric_rows_write_as_csv(tmp_path):
  results = {"I": _res(np.arange(1.0, 6.0)), "II": _res(np.arange(6.0, 11.0))}
  rows = compare.metric_rows(results, every=2)
  assert [r["step"] for r in rows] == [1, 3, 5]
  assert list(rows[0]) == [
    "step",
    "gap_I",
    "consensus_I",
    "gap_tracked_I",
    "gap_II",
    "consensus_II",
    "gap_tracked_II",
  ]
  assert rows[1]["gap_II"] == 8.0
  table = metrics.read_csv(metrics.write_table(tmp_path / "m.csv", rows))
  np.testing.assert_array_equal(table["gap_I"], [1.0, 3.0, 5.0])


def test_final_lines():
  lines = compare.final_lines(
    {"I": {"diverged_at": 4}, "II": {"diverged_at": None, "gap": 1.0, "consensus": 2.0}}
  )
  assert lines[0] == "Strategy I: diverged (non-finite from step 4)"
  assert lines[1].startswith("Strategy II: f(x̄_λ)−f* 1.000e+00")


# ---------------------------------------------------------------------------------------------
# λ specs and the degree_average precondition


def test_parse_lambda():
  assert dec.parse_lambda("degree") == ("degree", 1.0)
  assert dec.parse_lambda(" dirichlet:0.5 ", 3.0) == ("dirichlet", 0.5)
  assert dec.parse_lambda("dirichlet", 3.0) == ("dirichlet", 3.0)
  for bad in ("dirichlet:nan", "dirichlet:-1", "dirichlet:x", "degree:2", "moebius"):
    with pytest.raises(ConfigError) as e:
      dec.parse_lambda(bad, field="config.sweep_lams")
    assert e.value.field == "config.sweep_lams"


def test_row_kind_error():
  ring, star = dec.ring(6), dec.star(6)
  assert dec_config.row_kind_error("auto", star, "dirichlet") is None
  assert dec_config.row_kind_error("degree_average", star, "degree") is None
  assert dec_config.row_kind_error("degree_average", ring, "uniform") is None  # regular graph
  assert "degree_average" in dec_config.row_kind_error("degree_average", star, "uniform")
  assert dec_config.row_kind_error("degree_average", ring, "dirichlet") is not None


# ---------------------------------------------------------------------------------------------
# A real (tiny) comparison


def test_compare_on_a_ring_with_uniform_lambda_is_identical():
  g = dec.ring(4)
  prob = dec.least_squares(4, d=3, m=5, seed=0)
  lam = dec.make_lambda("uniform", g)
  comp = compare.compare(g, lam, prob, 20, key=jax.random.key(0))
  assert comp.lr == pytest.approx(dec.default_lr(prob, lam))
  assert set(comp.results) == {"I", "II"} and comp.diagnostic["graph"] == g.name
  np.testing.assert_allclose(comp.results["I"].gap, comp.results["II"].gap, rtol=1e-6)
  verdicts = compare.verdicts(comp, prob, tie_tol=0.05, tail=0.1)
  assert verdicts["winner_gap"] == compare.IDENTICAL
  assert set(verdicts["final"]["I"]) >= {"gap", "consensus", "gap_tracked", "diverged_at"}
  skewed = compare.compare(g, [0.1, 0.2, 0.3, 0.4], prob, 20, key=jax.random.key(0), lr=0.01)
  assert skewed.lr == 0.01 and not compare.identical(skewed.results, skewed.lam)


def test_run_single_and_sweep_reproduce_the_program(tmp_path):
  """The library path of `python -m experiments.decentralized` (and `--sweep`) at a tiny size."""
  config = dec.get_config()
  config.update(n=6, dim=3, rows=4, sweep_topologies="path,star", sweep_lams="degree,uniform")
  kw = dict(problem="least_squares", steps=30, seed=0)
  lines = []
  summary = dec.compare.run_single(
    config,
    tmp_path / "one",
    topology="ring",
    lam="dirichlet:2",
    log_every=10,
    log=lines.append,
    **kw,
  )
  assert summary["topology"] == "ring" and summary["steps"] == 30 and not summary["all_diverged"]
  for name in ("gap.png", "consensus.png", "metrics.csv", "diagnostic.md", "rates.md"):
    assert (tmp_path / "one" / name).exists(), name
  assert len(summary["rates"]) == 6 and lines[-1].startswith("winner (gap)")
  sweep = dec.compare.run_sweep(config, tmp_path / "sweep", log=lines.append, **kw)
  assert sweep["cells"] == 2 and len(sweep["identical_not_compared"]) == 2
  assert (tmp_path / "sweep" / "sweep.md").exists()


@pytest.mark.parametrize("problem, lam", [("least_squares", "dirichlet:2"), ("logistic", "data")])
def test_vmapped_seeds_equal_each_seed_alone(tmp_path, problem, lam):
  """--seeds: every seed is its own instance (data, split, so λ=data too) and key, all seeds in
  one vmapped scan per strategy; seed 5 among seeds 2 and 5 equals seed 5 alone, and the top-level
  verdicts are those of the mean curves."""
  config = dec.get_config()
  config.update(n=6, dim=3, rows=4)
  kw = dict(topology="ring", lam=lam, problem=problem, steps=30, log_every=10)
  many = dec.compare.run_single(
    config, tmp_path / "v", seed=0, seeds=(2, 5), log=lambda line: None, **kw
  )
  alone = dec.compare.run_single(config, tmp_path / "s", seed=5, log=lambda line: None, **kw)
  mine, theirs = many["per_seed"]["5"], many["per_seed"]["2"]
  assert many["seeds"] == [2, 5] and mine["lr"] == pytest.approx(alone["lr"], rel=1e-12)
  assert mine["winner_gap"] == alone["winner_gap"]
  for s in ("I", "II"):
    got, want = mine["final"][s], alone["final"][s]
    assert set(got) == set(want) and got["diverged_at"] is None
    for k in set(got) - {"comm", "diverged_at"}:
      assert got[k] == pytest.approx(want[k], rel=1e-4, abs=1e-7), (s, k)
    assert got["gap"] != pytest.approx(theirs["final"][s]["gap"], rel=1e-3)  # the seeds differ
    mean = (got["gap"] + theirs["final"][s]["gap"]) / 2  # the tail mean of the mean curve
    assert many["final"][s]["gap"] == pytest.approx(mean, rel=1e-6)
  rows = metrics.read_csv(tmp_path / "v" / "metrics.csv")
  assert list(rows)[:2] == ["step", "seed"] and list(rows["seed"][:2]) == [2, 5]
  if problem == "least_squares":
    assert len(many["rates"]) == len(alone["rates"]) == 6


def test_validate_config_returns_the_cells_and_names_the_field():
  config = dec.get_config()
  checked = dec.validate_config(config, problem="least_squares")
  topos, lams = dec_config.cells(checked)
  assert topos == config.sweep_topologies.split(",") and lams[0] == ("degree", 1.0)
  dec.validate_config(config, problem="mlp", topology="ring", lam=("uniform", 1.0))
  one = dec_config.cells(config, "ring", ("uniform", 1.0))
  assert one == (["ring"], [("uniform", 1.0)])
  for overrides, kw, field in [
    ({"lr_policy": "own"}, {"problem": "logistic"}, "config.lr_policy"),
    ({"tail": 0.0}, {"problem": "least_squares"}, "config.tail"),
    ({}, {"problem": "svm"}, "problem"),
    ({"sweep_topologies": "ring,moon"}, {"problem": "least_squares"}, "config.sweep_topologies"),
    ({"n": 6}, {"problem": "mlp", "topology": "hypercube", "lam": ("degree", 1.0)}, "topology"),
  ]:
    c = dec.get_config()
    c.update(**overrides)
    with pytest.raises(ConfigError) as e:
      dec.validate_config(c, **kw)
    assert e.value.field == field, (field, e.value.message)
