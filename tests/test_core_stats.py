"""jaxlab.core.stats against rliable, scipy, statsmodels and NumPy transcriptions of the formulas.

The data are asymmetric (x and y differ in mean and spread, tasks differ in scale) so that a
swapped argument, sign or index changes the numbers the tests compare.
"""

import json
import math

import numpy as np
import pytest
import scipy.stats

from jaxlab.core import stats
from jaxlab.core.errors import ConfigError

REPS = 300  # bootstrap replications: enough to compare against rliable draw for draw, and fast


def _xy(n=12, shift=0.3, seed=0):
  r = np.random.default_rng(seed)
  y = r.normal(1.0, 0.5, n)
  x = y + shift + r.normal(0.0, 0.4, n)  # paired: x shares y's seed effect
  return x, y


# ------------------------------------------------------------------------------------------------
# Estimates


def test_estimate_text_has_three_significant_digits_shared_by_the_bounds():
  assert str(stats.Estimate(0.9684, 0.9641, 0.9712)) == "0.968 [0.964, 0.971]"
  assert stats.Estimate(0.1, 0.03, 0.17).format(signed=True) == "+0.100 [0.030, 0.170]"
  assert stats.Estimate(-0.01, -0.03, 0.01).format(signed=True) == "-0.0100 [-0.0300, 0.0100]"
  assert str(stats.Estimate(12.345, 10.0, 15.0)) == "12.3 [10.0, 15.0]"
  assert str(stats.Estimate(0.5, math.nan, math.nan)) == "0.500 [nan, nan]"


# ------------------------------------------------------------------------------------------------
# rliable: IQM, aggregates, probability of improvement, profiles


def test_iqm_is_the_mean_of_the_middle_half():
  x = np.array([100.0, -50.0, 1.0, 2.0, 3.0, 4.0, 7.0, 9.0])
  # sorted: -50 1 | 2 3 4 7 | 9 100
  assert stats.iqm(x) == pytest.approx(4.0, abs=1e-12)
  r = np.random.default_rng(1)
  for a in (r.exponential(size=12), r.exponential(size=(8, 3)) * [1.0, 10.0, 100.0]):
    flat = np.sort(a.reshape(-1))
    cut = flat.size // 4
    transcription = flat[cut : flat.size - cut].mean()
    assert stats.iqm(a) == pytest.approx(transcription, rel=1e-12)
    assert stats.iqm(a) == pytest.approx(scipy.stats.trim_mean(a, 0.25, axis=None), rel=1e-12)
    from rliable import metrics

    assert stats.iqm(a) == metrics.aggregate_iqm(a if a.ndim == 2 else a[:, None])


def _rliable_interval(scores, fn, seed, reps, confidence=0.95):
  from rliable import library

  np.random.seed(seed)  # rliable draws from the global stream
  points, cis = library.get_interval_estimates(
    {"k": scores}, lambda s: np.array([fn(s)]), reps=reps, confidence_interval_size=confidence
  )
  return points["k"][0], cis["k"][0, 0], cis["k"][1, 0]


def test_aggregate_equals_rliable_draw_for_draw():
  from rliable import metrics

  r = np.random.default_rng(2)
  scores = {"a": r.normal(size=(6, 2)) * [1.0, 3.0] + [0.2, 0.9], "b": r.exponential(size=9)}
  fns = {
    "iqm": metrics.aggregate_iqm,
    "mean": metrics.aggregate_mean,
    "median": metrics.aggregate_median,
    "optimality_gap": metrics.aggregate_optimality_gap,
  }
  for metric, fn in fns.items():
    got = stats.aggregate(scores, metric, reps=REPS, seed=3, confidence=0.9)
    assert list(got) == ["a", "b"]
    for arm, s in scores.items():
      s2 = s if s.ndim == 2 else s[:, None]
      point, lo, hi = _rliable_interval(s2, fn, seed=3, reps=REPS, confidence=0.9)
      e = got[arm]
      assert (e.point, e.lo, e.hi) == (point, lo, hi), (metric, arm)
      assert e.lo <= e.point <= e.hi
  # an arm's interval does not depend on the arms beside it
  assert (
    stats.aggregate({"b": scores["b"]}, reps=REPS, seed=3)["b"]
    == stats.aggregate(scores, reps=REPS, seed=3)["b"]
  )


def test_aggregate_leaves_the_global_numpy_stream_alone_and_intervals_shrink():
  np.random.seed(123)
  expected = np.random.rand(3)
  np.random.seed(123)
  r = np.random.default_rng(4)
  small, large = r.normal(size=10), r.normal(size=160)
  got = stats.aggregate({"small": small, "large": large}, "mean", reps=REPS, seed=0)
  np.testing.assert_array_equal(np.random.rand(3), expected)
  assert got["large"].hi - got["large"].lo < 0.5 * (got["small"].hi - got["small"].lo)
  narrow = stats.aggregate({"small": small}, "mean", reps=REPS, seed=0, confidence=0.5)["small"]
  assert got["small"].lo < narrow.lo <= narrow.hi < got["small"].hi


def test_aggregate_resamples_runs_within_each_task():
  # task 1 is constant at 1000, task 0 lies in [0, 1]: a stratified resample keeps every task's
  # cells in its own task, so every bootstrap mean of task means lies in [500, 500.5]. Resampling
  # cells across tasks, or resampling tasks, would move it by hundreds.
  r = np.random.default_rng(5)
  scores = np.stack([r.uniform(0.0, 1.0, 8), np.full(8, 1000.0)], axis=1)
  e = stats.aggregate({"a": scores}, "mean", reps=REPS, seed=1)["a"]
  t0 = scores[:, 0]
  assert e.point == pytest.approx(500.0 + t0.mean() / 2)
  assert 500.0 + t0.min() / 2 <= e.lo < e.point < e.hi <= 500.0 + t0.max() / 2
  # and the interval is task 0's interval halved: the constant task adds no width
  e0 = stats.aggregate({"a": scores[:, :1]}, "mean", reps=REPS, seed=1)["a"]
  assert e.hi - e.lo < e0.hi - e0.lo


def test_aggregate_rejects_bad_input():
  with pytest.raises(ConfigError) as e:
    stats.aggregate({"a": np.arange(4.0)}, "max")
  assert e.value.field == "metric"
  with pytest.raises(ConfigError):
    stats.aggregate({"a": np.array([1.0, np.nan])})


def test_probability_of_improvement():
  x, y = np.array([1.0, 2.0, 3.0]), np.array([0.0, 2.0, 2.5])
  # pairs with x > y: 1>0; 2>0; 3>0, 3>2, 3>2.5; and 2 = 2 counts one half: 5.5 of 9
  assert stats.probability_of_improvement(x, y, reps=50).point == pytest.approx(5.5 / 9)
  assert stats.probability_of_improvement(y, x, reps=50).point == pytest.approx(3.5 / 9)
  assert stats.probability_of_improvement(x + 10, y, reps=50).point == 1.0
  assert stats.probability_of_improvement(x, x, reps=50).point == 0.5

  from rliable import library, metrics

  r = np.random.default_rng(6)
  a, b = r.normal(0.3, 1.0, (7, 2)), r.normal(0.0, 1.0, (5, 2))
  got = stats.probability_of_improvement(a, b, reps=100, seed=7)
  np.random.seed(7)
  points, cis = library.get_interval_estimates(
    {"p": [a, b]}, lambda sx, sy: np.array([metrics.probability_of_improvement(sx, sy)]), reps=100
  )
  assert (got.point, got.lo, got.hi) == (points["p"][0], cis["p"][0, 0], cis["p"][1, 0])
  with pytest.raises(ConfigError):
    stats.probability_of_improvement(a, b[:, :1])


def test_performance_profile_equals_rliable():
  from rliable import library

  r = np.random.default_rng(8)
  scores = {"a": r.normal(size=(9, 2)), "b": r.normal(1.0, 1.0, 11)}
  taus = np.array([-1.0, 0.0, 0.5, 2.0])
  got = stats.performance_profile(scores, taus, reps=100, seed=2)
  for arm, s in scores.items():
    s2 = s if s.ndim == 2 else s[:, None]
    profile, lo, hi = got[arm]
    np.testing.assert_array_equal(profile, [(s2 > t).mean() for t in taus])
    np.random.seed(2)
    ref, cis = library.create_performance_profile({arm: s2}, taus, reps=100)
    np.testing.assert_array_equal(profile, ref[arm])
    np.testing.assert_array_equal(lo, cis[arm][0])
    np.testing.assert_array_equal(hi, cis[arm][1])


# ------------------------------------------------------------------------------------------------
# scipy: t tests, Wilcoxon, TOST, non-inferiority


def test_paired_t_equals_scipy_and_the_t_interval():
  x, y = _xy()
  res = stats.paired_t(x, y)
  ref = scipy.stats.ttest_rel(x, y)
  assert res.name == "paired t"
  assert res.statistic == pytest.approx(ref.statistic, rel=1e-12) and res.statistic > 0
  assert res.p == pytest.approx(ref.pvalue, rel=1e-12)
  for confidence in (0.95, 0.8):
    d = x - y
    n = d.size
    half = scipy.stats.t.ppf((1 + confidence) / 2, n - 1) * d.std(ddof=1) / np.sqrt(n)
    e = stats.paired_t(x, y, confidence).diff
    assert e.point == pytest.approx(d.mean(), rel=1e-12) and e.point > 0
    assert (e.lo, e.hi) == pytest.approx((d.mean() - half, d.mean() + half), rel=1e-10)
  with pytest.raises(ConfigError):
    stats.paired_t(x, y[:-1])


def test_welch_t_equals_scipy_and_the_welch_interval():
  r = np.random.default_rng(9)
  x, y = r.normal(1.0, 0.3, 8), r.normal(0.5, 1.2, 13)
  res = stats.welch_t(x, y)
  ref = scipy.stats.ttest_ind(x, y, equal_var=False)
  assert (res.statistic, res.p) == pytest.approx((ref.statistic, ref.pvalue), rel=1e-12)
  vx, vy = x.var(ddof=1) / x.size, y.var(ddof=1) / y.size
  df = (vx + vy) ** 2 / (vx**2 / (x.size - 1) + vy**2 / (y.size - 1))
  half = scipy.stats.t.ppf(0.975, df) * np.sqrt(vx + vy)
  diff = x.mean() - y.mean()
  assert (res.diff.point, res.diff.lo, res.diff.hi) == pytest.approx(
    (diff, diff - half, diff + half), rel=1e-10
  )


def test_wilcoxon_equals_scipy_with_an_order_statistic_interval():
  x, y = _xy(n=10, seed=3)
  res = stats.wilcoxon(x, y)
  ref = scipy.stats.wilcoxon(x, y)
  assert (res.statistic, res.p) == (pytest.approx(ref.statistic), pytest.approx(ref.pvalue))
  d = np.sort(x - y)
  assert res.diff.point == pytest.approx(np.median(d))
  # n = 10 at 95 %: P(Bin(10, 1/2) <= 1) = 0.0107 <= 0.025 < P(<= 2), so [d_(2), d_(9)]
  assert (res.diff.lo, res.diff.hi) == (d[1], d[8])
  if hasattr(scipy.stats, "quantile_test"):
    ci = scipy.stats.quantile_test(x - y, q=0, p=0.5).confidence_interval(0.95)
    assert (res.diff.lo, res.diff.hi) == (ci.low, ci.high)
  # too few pairs for a 95 % interval: P(Bin(5, 1/2) = 0) = 1/32 > 0.025
  short = stats.wilcoxon(x[:5], y[:5])
  assert math.isnan(short.diff.lo) and math.isnan(short.diff.hi)
  same = stats.wilcoxon(x, x)
  assert (same.statistic, same.p, same.diff.point) == (0.0, 1.0, 0.0)


def _tost_transcription(d, margin, alpha):
  n = d.size
  se = d.std(ddof=1) / np.sqrt(n)
  t1, t2 = (d.mean() + margin) / se, (d.mean() - margin) / se
  p1, p2 = scipy.stats.t.sf(t1, n - 1), scipy.stats.t.cdf(t2, n - 1)
  half = scipy.stats.t.ppf(1 - alpha, n - 1) * se
  return max(p1, p2), (t1 if p1 >= p2 else t2), (d.mean() - half, d.mean() + half)


def test_tost_equals_two_one_sided_t_tests():
  x, y = _xy(n=15, shift=0.1, seed=4)
  for margin, alpha in ((0.4, 0.05), (0.15, 0.05), (0.4, 0.1)):
    res = stats.tost(x, y, margin, alpha=alpha)
    p, t, (lo, hi) = _tost_transcription(x - y, margin, alpha)
    assert res.name == f"TOST ±{margin:g}"
    assert (res.p, res.statistic) == pytest.approx((p, t), rel=1e-9)
    assert (res.diff.lo, res.diff.hi) == pytest.approx((lo, hi), rel=1e-9)
    # the 1 - 2 alpha interval lies inside the margins exactly when TOST rejects
    assert (res.p < alpha) == (-margin < res.diff.lo and res.diff.hi < margin)
  # the mean difference is +0.1 or so: the upper test binds, and swapping x and y changes p
  assert stats.tost(x, y, 0.4).statistic < 0
  assert stats.tost(y, x, 0.4).statistic > 0


def test_tost_matches_statsmodels():
  weightstats = pytest.importorskip("statsmodels.stats.weightstats")
  x, y = _xy(n=15, shift=0.1, seed=4)
  p, lower, upper = weightstats.ttost_paired(x, y, -0.4, 0.4)
  res = stats.tost(x, y, 0.4)
  assert res.p == pytest.approx(p, rel=1e-9)
  r = np.random.default_rng(10)
  a, b = r.normal(1.0, 0.3, 9), r.normal(1.1, 0.8, 14)
  p, _, _ = weightstats.ttost_ind(a, b, -0.5, 0.5, usevar="unequal")
  assert stats.tost(a, b, 0.5, paired=False).p == pytest.approx(p, rel=1e-9)


@pytest.mark.filterwarnings("ignore:Precision loss:RuntimeWarning")  # y - y has no variance
def test_tost_on_identical_arms_depends_on_the_margin():
  r = np.random.default_rng(11)
  y = r.normal(1.0, 0.5, 12)
  x = y + r.normal(0.0, 0.02, 12)  # the same arm up to small seed noise
  assert stats.tost(x, y, 0.1).p < 0.01
  assert stats.tost(x, y, 1e-4).p > 0.4
  assert stats.tost(y, y, 0.01).p < 1e-6  # no difference at all is equivalence for any margin


def test_non_inferiority_is_a_shifted_one_sided_t_test():
  x, y = _xy(n=12, shift=-0.1, seed=5)  # x is a little worse when higher is better
  for margin in (0.05, 0.3, 0.6):
    hi = stats.non_inferiority(x, y, margin)
    ref = scipy.stats.ttest_rel(x + margin, y, alternative="greater")
    assert hi.name == f"non-inferiority -{margin:g}"
    assert (hi.statistic, hi.p) == pytest.approx((ref.statistic, ref.pvalue), rel=1e-10)
    assert (hi.p < 0.05) == (hi.diff.lo > -margin)
    lo = stats.non_inferiority(x, y, margin, higher_is_better=False)
    ref = scipy.stats.ttest_rel(x - margin, y, alternative="less")
    assert lo.name == f"non-inferiority +{margin:g}"
    assert (lo.statistic, lo.p) == pytest.approx((ref.statistic, ref.pvalue), rel=1e-10)
    assert (lo.p < 0.05) == (lo.diff.hi < margin)
  # x being worse: non-inferior with a wide margin only; with lower better it is better
  assert stats.non_inferiority(x, y, 0.6).p < 0.05 < stats.non_inferiority(x, y, 0.05).p
  assert stats.non_inferiority(x, y, 0.05, higher_is_better=False).p < 0.05
  r = np.random.default_rng(12)
  a, b = r.normal(1.0, 0.3, 9), r.normal(1.1, 0.8, 14)
  ref = scipy.stats.ttest_ind(a + 0.2, b, equal_var=False, alternative="greater")
  assert stats.non_inferiority(a, b, 0.2, paired=False).p == pytest.approx(ref.pvalue, rel=1e-10)


# ------------------------------------------------------------------------------------------------
# Multiple comparisons, the declared test, rows and verdicts


def _holm_transcription(p, m):
  order = sorted(range(len(p)), key=lambda i: p[i])
  out, running = [0.0] * len(p), 0.0
  for rank, i in enumerate(order):
    running = max(running, p[i] * (m - rank))
    out[i] = min(1.0, running)
  return out


def test_holm_equals_the_step_down_transcription_and_statsmodels():
  p = [0.04, 0.001, 0.03, 0.2, 0.012]
  np.testing.assert_allclose(stats.holm(p), _holm_transcription(p, 5), rtol=1e-12)
  np.testing.assert_allclose(stats.holm(p, 8), _holm_transcription(p, 8), rtol=1e-12)
  multitest = pytest.importorskip("statsmodels.stats.multitest")
  np.testing.assert_allclose(stats.holm(p), multitest.multipletests(p, method="holm")[1])
  got = stats.holm([0.01, math.nan, 0.02])
  assert math.isnan(got[1]) and list(got[[0, 2]]) == [0.02, 0.02]
  assert stats.bonferroni(0.01, 4) == pytest.approx(0.04) and stats.bonferroni(0.3, 4) == 1.0


def test_test_validation():
  cases = [
    (dict(kind="foo"), "test.kind"),
    (dict(kind="equivalence", margin=0.0), "test.margin"),
    (dict(kind="non_inferiority"), "test.margin"),
    (dict(kind="superiority", margin=-1.0), "test.margin"),
    (dict(kind="superiority", alpha=1.5), "test.alpha"),
    (dict(kind="superiority", alpha=0.0), "test.alpha"),
    (dict(kind="superiority", method="sign"), "test.method"),
    (dict(kind="equivalence", margin=0.1, method="wilcoxon"), "test.method"),
    (dict(kind="superiority", method="wilcoxon", paired=False), "test.method"),
    (dict(kind="superiority", comparisons=0), "test.comparisons"),
    (dict(kind="superiority", metric=""), "test.metric"),
  ]
  for kwargs, field in cases:
    kwargs = {"metric": "m", **kwargs}
    with pytest.raises(ConfigError) as e:
      stats.Test(**kwargs)
    assert e.value.field == field, kwargs
  stats.Test("equivalence", "m", margin=0.05)  # a valid one


def _per_seed():
  r = np.random.default_rng(13)
  base = r.normal(0.5, 0.1, 10)
  return {
    "rbrl": dict(enumerate(base)),
    "r4": dict(enumerate(base + 0.1 + r.normal(0.0, 0.03, 10))),
    "same": dict(enumerate(base + r.normal(0.0, 0.01, 10))),
    "noisy": dict(enumerate(base + r.normal(0.01, 0.1, 10))),
  }


def _arrays(per_seed, arm, control="rbrl"):
  seeds = sorted(set(per_seed[arm]) & set(per_seed[control]))
  return np.array([per_seed[arm][s] for s in seeds]), np.array(
    [per_seed[control][s] for s in seeds]
  )


def test_compare_words_a_win_a_loss_and_an_unshown_difference():
  ps = _per_seed()
  test = stats.Test("superiority", "heldout/kendall_tau", comparisons=4)
  row = stats.compare("r4", ps["r4"], "rbrl", ps["rbrl"], test, reps=100)
  x, y = _arrays(ps, "r4")
  ref = stats.paired_t(x, y, 0.95)
  assert row["p"] == ref.p and row["p_adjusted"] == pytest.approx(4 * ref.p)
  assert row["diff"] == ref.diff.format(signed=True) and row["diff"].startswith("+")
  assert row["test"] == "paired t" and row["n"] == 10 and row["metric"] == "heldout/kendall_tau"
  assert row["arm_mean"] == str(stats.Estimate(x.mean(), *ref_mean_ci(x)))
  assert row["verdict"].startswith(f"r4 beats rbrl: {row['diff']}, paired t p=")
  assert row["verdict"].endswith("(Bonferroni over 4)")

  lower = stats.Test("superiority", "loss", higher_is_better=False)
  row = stats.compare("r4", ps["r4"], "rbrl", ps["rbrl"], lower, reps=100)
  assert row["verdict"].startswith("r4 is worse than rbrl: +")
  row = stats.compare("rbrl", ps["rbrl"], "r4", ps["r4"], lower, reps=100)
  assert row["verdict"].startswith("rbrl beats r4: -")

  row = stats.compare("noisy", ps["noisy"], "rbrl", ps["rbrl"], test, reps=100)
  assert row["p_adjusted"] > 0.05
  assert row["verdict"].startswith(f"not shown: noisy - rbrl = {row['diff']}, paired t p=")


def test_the_verdict_reads_the_adjusted_p():
  y = np.linspace(0.2, 0.9, 8)
  x = y + [0.05, 0.1, -0.02, 0.08, 0.03, 0.06, -0.01, 0.04]
  arm, control = dict(enumerate(x)), dict(enumerate(y))
  one = stats.compare("a", arm, "c", control, stats.Test("superiority", "m"), reps=10)
  assert 0.01 < one["p"] < 0.05 and one["verdict"].startswith("a beats c: +")
  four = stats.compare("a", arm, "c", control, stats.Test("superiority", "m", comparisons=4))
  assert four["p"] == one["p"] and four["p_adjusted"] > 0.05
  assert four["verdict"].startswith("not shown: a - c = +")


def ref_mean_ci(v):
  half = scipy.stats.t.ppf(0.975, v.size - 1) * v.std(ddof=1) / np.sqrt(v.size)
  return v.mean() - half, v.mean() + half


def test_compare_words_equivalence_and_non_inferiority():
  ps = _per_seed()
  eq = stats.Test("equivalence", "m", margin=0.05)
  row = stats.compare("same", ps["same"], "rbrl", ps["rbrl"], eq, reps=100)
  x, y = _arrays(ps, "same")
  assert row["p"] == stats.tost(x, y, 0.05).p < 0.05
  assert row["test"] == "TOST ±0.05"
  assert row["verdict"] == f"same matches rbrl within ±0.05: {row['diff']} (TOST p={row['p']:.2g})"
  row = stats.compare("r4", ps["r4"], "rbrl", ps["rbrl"], eq, reps=100)
  assert row["verdict"].startswith("not shown within ±0.05: r4 - rbrl = +")

  ni = stats.Test("non_inferiority", "m", margin=0.05)
  row = stats.compare("same", ps["same"], "rbrl", ps["rbrl"], ni, reps=100)
  assert row["test"] == "non-inferiority -0.05"
  assert row["verdict"].startswith("same is non-inferior to rbrl (margin 0.05): ")
  row = stats.compare("rbrl", ps["rbrl"], "r4", ps["r4"], ni, reps=100)
  assert row["verdict"].startswith("not shown non-inferior to r4 (margin 0.05): rbrl - r4 = -")


def test_compare_drops_nan_seeds_and_pairs_by_seed():
  ps = _per_seed()
  arm = dict(ps["r4"])
  arm[3] = math.nan
  arm[42] = 0.9  # a seed the control lacks
  control = dict(ps["rbrl"])
  control[5] = math.nan
  row = stats.compare("r4", arm, "rbrl", control, stats.Test("superiority", "m"), reps=100)
  # seeds 3 and 5 lose their pair to a NaN, seed 42 never had one
  assert (row["n"], row["dropped"], row["unmatched"]) == (8, 2, 3)
  seeds = [s for s in range(10) if s not in (3, 5)]
  ref = stats.paired_t([arm[s] for s in seeds], [control[s] for s in seeds])
  assert row["p"] == ref.p
  assert "2 NaN value(s) dropped" in row["verdict"]
  one = stats.compare("r4", {0: 1.0}, "rbrl", ps["rbrl"], stats.Test("superiority", "m"), reps=10)
  assert math.isnan(one["p"]) and one["verdict"].startswith("not tested: r4 vs rbrl has 1 paired")
  welch = stats.compare(
    "r4", arm, "rbrl", ps["rbrl"], stats.Test("superiority", "m", paired=False), reps=10
  )
  assert (welch["n"], welch["n_control"], welch["test"]) == (10, 10, "Welch t")
  wil = stats.Test("superiority", "m", method="wilcoxon")
  row = stats.compare("r4", ps["r4"], "rbrl", ps["rbrl"], wil, reps=10)
  assert row["p"] == stats.wilcoxon(*_arrays(ps, "r4")).p and row["test"] == "Wilcoxon"


def test_compare_all_holm_corrects_every_arm_against_the_control():
  ps = _per_seed()
  for comparisons in (1, 6):
    test = stats.Test("superiority", "m", comparisons=comparisons)
    rows = stats.compare_all(ps, "rbrl", test, reps=50)
    assert [r["arm"] for r in rows] == ["r4", "same", "noisy"]
    raw = [stats.paired_t(*_arrays(ps, a)).p for a in ("r4", "same", "noisy")]
    m = max(3, comparisons)
    assert [r["p"] for r in rows] == raw
    np.testing.assert_allclose([r["p_adjusted"] for r in rows], _holm_transcription(raw, m))
    assert (
      rows[0]["verdict"].startswith("r4 beats rbrl") and f"(Holm over {m})" in rows[0]["verdict"]
    )
    assert rows[2]["verdict"].startswith("not shown: noisy - rbrl")
  with pytest.raises(ConfigError):
    stats.compare_all(ps, "true", test)


def test_markdown_table():
  rows = [{"arm": "a", "p": 0.0123456, "verdict": "x | y"}, {"arm": "b", "n": 3}]
  assert stats.markdown(rows) == (
    "| arm | p | verdict | n |\n|---|---|---|---|\n| a | 0.0123 | x \\| y |  |\n| b |  |  | 3 |"
  )
  assert stats.markdown(rows, ["n", "arm"]).splitlines()[0] == "| n | arm |"


def test_read_per_seed_from_records_and_files(tmp_path):
  (tmp_path / "a.json").write_text(
    json.dumps({"arm": "r4", "seed": 1, "heldout": {"kendall_tau": 0.7}})
  )
  (tmp_path / "b.json").write_text(
    json.dumps(
      [
        {"arm": "r4", "seed": 2, "heldout/kendall_tau": 0.8},
        {"arm": "rbrl", "seed": 1, "heldout/kendall_tau": None},
      ]
    )
  )
  records = [{"arm": "rbrl", "seed": "2", "heldout/kendall_tau": 0.5}, {"arm": "true", "seed": 1}]
  got = stats.read_per_seed(
    [tmp_path / "a.json", str(tmp_path / "b.json"), *records], "heldout/kendall_tau"
  )
  assert got["r4"] == {1: 0.7, 2: 0.8}
  assert got["rbrl"][2] == 0.5 and math.isnan(got["rbrl"][1]) and math.isnan(got["true"][1])
  with pytest.raises(ConfigError) as e:
    stats.read_per_seed(records, "heldout/missing")
  assert e.value.field == "metric"
  with pytest.raises(ConfigError):
    stats.read_per_seed(records + records, "heldout/kendall_tau")
  custom = stats.read_per_seed([{"m": "a", "s": 3, "v": 1}], "v", arm_key="m", seed_key="s")
  assert custom == {"a": {3: 1.0}}
