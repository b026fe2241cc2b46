"""The statistics of a study: aggregates with intervals, declared tests, verdicts in words.

A study runs every arm on several seeds and states one test in advance (superiority,
non-inferiority with a margin, or equivalence within a margin). :func:`compare_all` takes the
per-seed results, runs that test of every arm against the control, corrects for the number of
comparisons and returns one table row per arm with its verdict as a sentence::

  from jaxlab.core import stats

  per_seed = stats.read_per_seed(summary_paths, "heldout/kendall_tau")  # {arm: {seed: value}}
  test = stats.Test("superiority", "heldout/kendall_tau", comparisons=3)
  rows = stats.compare_all(per_seed, control="rbrl", test=test)
  print(stats.markdown(rows))  # ... | r4 beats rbrl: +0.100 [0.030, 0.170], paired t p=0.004 ...

No statistic is implemented here; the module chooses and words them. rliable does the aggregates
over runs and tasks: the interquartile mean, stratified bootstrap intervals, the probability of
improvement and performance profiles (Agarwal et al. 2021, "Deep Reinforcement Learning at the
Edge of the Statistical Precipice", arXiv 2108.13264). scipy does the tests: paired and Welch t,
Wilcoxon signed-rank, and the two one-sided tests of equivalence (TOST, Schuirmann 1987) and of
non-inferiority, which are t tests against a shifted null. rliable and scipy.stats are imported
inside the functions that use them (together 1 to 2 s), so reading results and writing tables
stays fast.

Conventions: a difference is always ``arm - control`` (``x - y``) in the metric's units; an
interval is at ``confidence`` (``1 - alpha`` in :func:`compare`), except the TOST and
non-inferiority differences, which are at ``1 - 2 alpha`` so that the test passes exactly when the
interval lies inside the margin(s).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import pathlib
import threading
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from jaxlab.core.errors import ConfigError, check_choice, check_finite_array, require

AGGREGATES = ("iqm", "mean", "median", "optimality_gap")
KINDS = ("superiority", "non_inferiority", "equivalence")
METHODS = ("t", "wilcoxon")


def _sps():
  import scipy.stats

  return scipy.stats


# ------------------------------------------------------------------------------------------------
# Estimates and their text


def _decimals(values: Iterable[float]) -> int | None:
  """Decimals that give the largest of ``values`` 3 significant digits (None: use ``.3g``)."""
  mags = [abs(v) for v in values if math.isfinite(v) and v != 0]
  if not mags:
    return 3
  top = max(mags)
  if top >= 1e6 or top < 1e-4:
    return None
  return max(0, 2 - math.floor(math.log10(top)))


def _num(v: float, decimals: int | None, signed: bool = False) -> str:
  if not math.isfinite(v):
    return str(v)
  sign = "+" if signed else ""
  return f"{v:{sign}.{decimals}f}" if decimals is not None else f"{v:{sign}.3g}"


@dataclasses.dataclass(frozen=True)
class Estimate:
  """A point estimate and its interval ``[lo, hi]`` (NaN bounds where none could be computed)."""

  point: float
  lo: float
  hi: float

  def format(self, signed: bool = False) -> str:
    """``"0.968 [0.964, 0.971]"``; ``signed`` puts a ``+`` on a positive point (differences)."""
    # one number of decimals for all three, so the bounds read against the point
    d = _decimals((self.point, self.lo, self.hi))
    return f"{_num(self.point, d, signed)} [{_num(self.lo, d)}, {_num(self.hi, d)}]"

  def __str__(self) -> str:
    return self.format()


def _estimate(point, lo, hi) -> Estimate:
  return Estimate(float(point), float(lo), float(hi))


def _fmt_p(p: float) -> str:
  return f"{p:.2g}" if math.isfinite(p) else "n/a"


# ------------------------------------------------------------------------------------------------
# rliable: aggregates over runs and tasks

_RNG_LOCK = threading.Lock()


@contextlib.contextmanager
def _numpy_global_seed(seed: int):
  # rliable 1.2 draws its bootstrap indices with np.random.choice, the global stream, whatever
  # random_state it is given; so a reproducible interval needs the global seed. The caller's global
  # stream is put back, and the lock keeps two threads from interleaving their draws.
  with _RNG_LOCK:
    state = np.random.get_state()
    np.random.seed(seed)
    try:
      yield
    finally:
      np.random.set_state(state)


def _runs_by_tasks(field: str, x: Any) -> np.ndarray:
  a = np.asarray(x, dtype=np.float64)
  require(a.ndim in (1, 2), field, f"must have shape (runs,) or (runs, tasks), got {a.shape}")
  require(a.shape[0] >= 1 and a.size >= 1, field, "holds no runs")
  check_finite_array(field, a)
  return a[:, None] if a.ndim == 1 else a


def iqm(x: Any) -> float:
  """Interquartile mean (the mean of the middle 50 %) over all runs and tasks of ``x``."""
  from rliable import metrics

  return float(metrics.aggregate_iqm(_runs_by_tasks("x", x)))


def _aggregate_fn(metric: str):
  from rliable import metrics

  fn = {
    "iqm": metrics.aggregate_iqm,
    "mean": metrics.aggregate_mean,
    "median": metrics.aggregate_median,
    "optimality_gap": metrics.aggregate_optimality_gap,
  }[metric]
  # arch's bootstrap wants a 1-D statistic
  return lambda scores: np.array([fn(scores)])


def aggregate(
  scores: Mapping[str, Any],
  metric: str = "iqm",
  reps: int = 2000,
  seed: int = 0,
  confidence: float = 0.95,
) -> dict[str, Estimate]:
  """Aggregate of each arm's ``(runs,)`` or ``(runs, tasks)`` scores with its bootstrap interval.

  The interval is rliable's stratified percentile bootstrap: runs are resampled within each task,
  tasks are kept. Each arm is bootstrapped from the same ``seed``, so an arm's interval does not
  depend on which other arms are in ``scores``.
  """
  from rliable import library

  check_choice("metric", metric, AGGREGATES)
  require(reps >= 1, "reps", f"must be >= 1, got {reps}")
  require(0 < confidence < 1, "confidence", f"must be in (0, 1), got {confidence}")
  fn = _aggregate_fn(metric)
  out = {}
  for arm, x in scores.items():
    a = _runs_by_tasks(f"scores[{arm}]", x)
    with _numpy_global_seed(seed):
      points, cis = library.get_interval_estimates(
        {arm: a}, fn, reps=reps, confidence_interval_size=confidence
      )
    out[arm] = _estimate(points[arm][0], cis[arm][0, 0], cis[arm][1, 0])
  return out


def probability_of_improvement(x: Any, y: Any, reps: int = 2000, seed: int = 0) -> Estimate:
  """P(X > Y) (ties count one half), averaged over tasks, with a 95 % bootstrap interval.

  rliable's estimate (the Mann-Whitney U over ``runs_x * runs_y``); the interval resamples the
  runs of ``x`` and of ``y`` independently within each task.
  """
  from rliable import library, metrics

  a, b = _runs_by_tasks("x", x), _runs_by_tasks("y", y)
  require(
    a.shape[1] == b.shape[1], "y", f"has {b.shape[1]} task(s), x has {a.shape[1]}; must be equal"
  )
  fn = lambda sx, sy: np.array([metrics.probability_of_improvement(sx, sy)])
  with _numpy_global_seed(seed):
    points, cis = library.get_interval_estimates({"p": [a, b]}, fn, reps=reps)
  return _estimate(points["p"][0], cis["p"][0, 0], cis["p"][1, 0])


def performance_profile(
  scores: Mapping[str, Any], taus: Any, reps: int = 2000, seed: int = 0
) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
  """Score distribution (fraction of runs above each tau) per arm: ``(profile, lo, hi)``."""
  from rliable import library

  taus = np.asarray(taus, dtype=np.float64).reshape(-1)
  out = {}
  for arm, x in scores.items():
    a = _runs_by_tasks(f"scores[{arm}]", x)
    with _numpy_global_seed(seed):
      profiles, cis = library.create_performance_profile({arm: a}, taus, reps=reps)
    out[arm] = (np.asarray(profiles[arm]), np.asarray(cis[arm][0]), np.asarray(cis[arm][1]))
  return out


# ------------------------------------------------------------------------------------------------
# scipy: tests of two arms


@dataclasses.dataclass(frozen=True)
class TestResult:
  """A test's name (``"paired t"``), statistic, p-value, and the difference ``x - y``."""

  __test__ = False  # not a pytest test class

  name: str
  statistic: float
  p: float
  diff: Estimate


def _samples(x: Any, y: Any, paired: bool) -> tuple[np.ndarray, np.ndarray]:
  a = np.asarray(x, dtype=np.float64).reshape(-1)
  b = np.asarray(y, dtype=np.float64).reshape(-1)
  check_finite_array("x", a)
  check_finite_array("y", b)
  if paired:
    require(a.size == b.size, "y", f"paired samples differ in length: {a.size} and {b.size}")
  require(a.size >= 2, "x", f"needs >= 2 values, got {a.size}")
  require(b.size >= 2, "y", f"needs >= 2 values, got {b.size}")
  return a, b


def _p(p: float) -> float:
  # scipy's t is 0/0 when every difference is the same and equal to the null value: no evidence
  return 1.0 if math.isnan(p) else float(p)


def _mean_diff(a: np.ndarray, b: np.ndarray, paired: bool, confidence: float) -> Estimate:
  sps = _sps()
  res = sps.ttest_rel(a, b) if paired else sps.ttest_ind(a, b, equal_var=False)
  ci = res.confidence_interval(confidence_level=confidence)
  point = np.mean(a - b) if paired else np.mean(a) - np.mean(b)
  return _estimate(point, ci.low, ci.high)


def paired_t(x: Any, y: Any, confidence: float = 0.95) -> TestResult:
  """Two-sided paired t test of mean(x - y) = 0; the difference's t interval at ``confidence``."""
  a, b = _samples(x, y, paired=True)
  res = _sps().ttest_rel(a, b)
  return TestResult(
    "paired t", float(res.statistic), _p(res.pvalue), _mean_diff(a, b, True, confidence)
  )


def welch_t(x: Any, y: Any, confidence: float = 0.95) -> TestResult:
  """Two-sided Welch t test (unequal variances) of mean(x) = mean(y), for unpaired seeds."""
  a, b = _samples(x, y, paired=False)
  res = _sps().ttest_ind(a, b, equal_var=False)
  return TestResult(
    "Welch t", float(res.statistic), _p(res.pvalue), _mean_diff(a, b, False, confidence)
  )


def median_interval(d: Any, confidence: float = 0.95) -> tuple[float, float]:
  """Distribution-free interval of a median from order statistics (binomial; NaN if n too small)."""
  d = np.sort(np.asarray(d, dtype=np.float64).reshape(-1))
  n = d.size
  # the largest k with P(Bin(n, 1/2) <= k - 1) <= (1 - confidence) / 2; then [d_(k), d_(n+1-k)]
  # covers the median with probability >= confidence
  cdf = _sps().binom.cdf(np.arange(n), n, 0.5)
  ks = np.flatnonzero(cdf <= (1 - confidence) / 2)
  if ks.size == 0:
    return math.nan, math.nan
  k = int(ks[-1]) + 1
  return float(d[k - 1]), float(d[n - k])


def wilcoxon(x: Any, y: Any, confidence: float = 0.95) -> TestResult:
  """Two-sided Wilcoxon signed-rank test of paired x, y (scipy's defaults: zero differences out).

  The difference is the median of ``x - y`` with its order-statistic interval, NaN when too few
  pairs give one at ``confidence`` (fewer than 6 at 95 %).
  """
  a, b = _samples(x, y, paired=True)
  d = a - b
  lo, hi = median_interval(d, confidence)
  diff = _estimate(np.median(d), lo, hi)
  # older scipy raises on all-zero differences, newer returns p = 1 with a warning; no difference is
  # no evidence either way
  if not np.any(d):
    return TestResult("Wilcoxon", 0.0, 1.0, diff)
  res = _sps().wilcoxon(a, b)
  return TestResult("Wilcoxon", float(res.statistic), _p(res.pvalue), diff)


def _shifted_t(a: np.ndarray, b: np.ndarray, shift: float, alternative: str, paired: bool):
  """One-sided t test of mean(a - b) against ``-shift`` (x shifted by ``shift``, y kept)."""
  sps = _sps()
  # shifting x moves the null without touching any variance, in the paired and the Welch test
  if paired:
    return sps.ttest_rel(a + shift, b, alternative=alternative)
  return sps.ttest_ind(a + shift, b, equal_var=False, alternative=alternative)


def tost(x: Any, y: Any, margin: float, paired: bool = True, alpha: float = 0.05) -> TestResult:
  """Equivalence by two one-sided t tests (Schuirmann 1987): is ``|mean(x - y)| < margin``?

  H0: the difference is <= -margin or >= +margin. p is the larger of the two one-sided p-values,
  the statistic that test's t; the difference's interval is at ``1 - 2 alpha``, inside
  ``(-margin, margin)`` exactly when p < alpha. ``paired=False`` uses Welch's t.
  """
  require(margin > 0 and math.isfinite(margin), "margin", f"must be > 0, got {margin}")
  require(0 < alpha < 0.5, "alpha", f"must be in (0, 0.5), got {alpha}")
  a, b = _samples(x, y, paired)
  lower = _shifted_t(a, b, margin, "greater", paired)  # H0: diff <= -margin
  upper = _shifted_t(a, b, -margin, "less", paired)  # H0: diff >= +margin
  worst = max((lower, upper), key=lambda r: _p(r.pvalue))
  return TestResult(
    f"TOST ±{margin:g}",
    float(worst.statistic),
    _p(worst.pvalue),
    _mean_diff(a, b, paired, 1 - 2 * alpha),
  )


def non_inferiority(
  x: Any,
  y: Any,
  margin: float,
  higher_is_better: bool = True,
  paired: bool = True,
  alpha: float = 0.05,
) -> TestResult:
  """One-sided t test that x is not worse than y by ``margin`` or more.

  Higher is better: H0 mean(x - y) <= -margin; lower is better: H0 mean(x - y) >= +margin. The
  difference's interval is at ``1 - 2 alpha``, so its relevant bound is the one-sided ``1 - alpha``
  bound and clears the margin exactly when p < alpha. ``paired=False`` uses Welch's t.
  """
  require(margin > 0 and math.isfinite(margin), "margin", f"must be > 0, got {margin}")
  require(0 < alpha < 0.5, "alpha", f"must be in (0, 0.5), got {alpha}")
  a, b = _samples(x, y, paired)
  if higher_is_better:
    res, name = _shifted_t(a, b, margin, "greater", paired), f"non-inferiority -{margin:g}"
  else:
    res, name = _shifted_t(a, b, -margin, "less", paired), f"non-inferiority +{margin:g}"
  return TestResult(
    name, float(res.statistic), _p(res.pvalue), _mean_diff(a, b, paired, 1 - 2 * alpha)
  )


# ------------------------------------------------------------------------------------------------
# Multiple comparisons


def bonferroni(p: float, m: int) -> float:
  """``min(1, m p)``; NaN stays NaN."""
  return float(min(1.0, p * m)) if math.isfinite(p) else math.nan


def holm(p: Any, m: int | None = None) -> np.ndarray:
  """Holm-Bonferroni adjusted p-values; NaN entries are left out and stay NaN.

  ``m`` is the number of hypotheses of the study when it exceeds the p-values given here; the
  missing ones are taken to rank after these (the conservative assumption).
  """
  p = np.asarray(p, dtype=np.float64).reshape(-1)
  out = np.full(p.shape, np.nan)
  ok = ~np.isnan(p)
  q = p[ok]
  k = q.size
  m = k if m is None else int(m)
  require(m >= k, "comparisons", f"must be >= the {k} p-values given, got {m}")
  order = np.argsort(q, kind="stable")
  adj = q[order] * (m - np.arange(k))
  # step-down: a hypothesis is not rejected at a smaller level than one ranked before it
  adj = np.minimum(np.maximum.accumulate(adj), 1.0)
  res = np.empty(k)
  res[order] = adj
  out[ok] = res
  return out


# ------------------------------------------------------------------------------------------------
# The declared test of a study and its verdicts


@dataclasses.dataclass(frozen=True)
class Test:
  """The test a study declares before it runs (see the module docstring).

  ``margin`` is in the metric's units. ``comparisons`` is the number of comparisons the study makes
  in all: :func:`compare` Bonferroni-corrects over it, :func:`compare_all` Holm-corrects over it or
  over its number of arms less the control, whichever is larger.
  """

  __test__ = False  # not a pytest test class

  kind: str
  metric: str
  margin: float = 0.0
  higher_is_better: bool = True
  paired: bool = True
  method: str = "t"
  alpha: float = 0.05
  comparisons: int = 1

  def __post_init__(self):
    check_choice("test.kind", self.kind, KINDS)
    check_choice("test.method", self.method, METHODS)
    require(isinstance(self.metric, str) and bool(self.metric), "test.metric", "must name a metric")
    m = self.margin
    require(
      isinstance(m, (int, float)) and math.isfinite(m) and m >= 0,
      "test.margin",
      f"must be a finite number >= 0, got {m!r}",
    )
    if self.kind != "superiority":
      require(m > 0, "test.margin", f"must be > 0 for {self.kind}, got {m!r}")
    # 1 - 2 alpha is the TOST / non-inferiority interval
    a = self.alpha
    require(
      isinstance(a, (int, float)) and 0 < a < 0.5, "test.alpha", f"must be in (0, 0.5), got {a!r}"
    )
    if self.method == "wilcoxon":
      require(self.kind == "superiority", "test.method", "wilcoxon tests superiority only")
      require(self.paired, "test.method", "wilcoxon is a paired test; use 't' (Welch) unpaired")
    c = self.comparisons
    require(
      isinstance(c, (int, np.integer)) and not isinstance(c, bool) and c >= 1,
      "test.comparisons",
      f"must be an integer >= 1, got {c!r}",
    )


def _mean_estimate(v: np.ndarray, confidence: float) -> Estimate:
  if v.size < 2:
    return _estimate(np.mean(v) if v.size else math.nan, math.nan, math.nan)
  ci = _sps().ttest_1samp(v, 0.0).confidence_interval(confidence_level=confidence)
  return _estimate(np.mean(v), ci.low, ci.high)


def _iqm_estimate(v: np.ndarray, confidence: float, reps: int, seed: int) -> Estimate:
  if v.size < 2:
    return _estimate(iqm(v) if v.size else math.nan, math.nan, math.nan)
  return aggregate({"_": v}, "iqm", reps=reps, seed=seed, confidence=confidence)["_"]


@dataclasses.dataclass
class _Comparison:
  row: dict
  result: TestResult | None
  notes: str
  untested: str


def _run_test(a: np.ndarray, b: np.ndarray, test: Test) -> TestResult:
  conf = 1 - test.alpha
  if test.kind == "equivalence":
    return tost(a, b, test.margin, paired=test.paired, alpha=test.alpha)
  if test.kind == "non_inferiority":
    return non_inferiority(
      a, b, test.margin, test.higher_is_better, paired=test.paired, alpha=test.alpha
    )
  if test.method == "wilcoxon":
    return wilcoxon(a, b, confidence=conf)
  return paired_t(a, b, conf) if test.paired else welch_t(a, b, conf)


def _test_name(test: Test) -> str:
  if test.kind == "equivalence":
    return f"TOST ±{test.margin:g}"
  if test.kind == "non_inferiority":
    return f"non-inferiority {'-' if test.higher_is_better else '+'}{test.margin:g}"
  if test.method == "wilcoxon":
    return "Wilcoxon"
  return "paired t" if test.paired else "Welch t"


def _compare(
  arm: str,
  values: Mapping[int, float],
  control: str,
  control_values: Mapping[int, float],
  test: Test,
  reps: int,
  seed: int,
) -> _Comparison:
  xs = {int(s): float(v) for s, v in values.items()}
  ys = {int(s): float(v) for s, v in control_values.items()}
  dropped = sum(math.isnan(v) for v in xs.values()) + sum(math.isnan(v) for v in ys.values())
  # a NaN seed (a diverged or unfinished run) carries no value to test; it is counted, not hidden
  xs = {s: v for s, v in xs.items() if not math.isnan(v)}
  ys = {s: v for s, v in ys.items() if not math.isnan(v)}
  for name, d in ((arm, xs), (control, ys)):
    bad = [s for s, v in d.items() if not math.isfinite(v)]
    require(not bad, "values", f"{name} has infinite values at seeds {bad}")

  row: dict[str, Any] = {"arm": arm, "control": control, "metric": test.metric}
  if test.paired:
    common = sorted(set(xs) & set(ys))
    a = np.array([xs[s] for s in common])
    b = np.array([ys[s] for s in common])
    unmatched = len(set(xs) ^ set(ys))
    row.update(n=len(common), unmatched=unmatched, dropped=dropped)
    enough = len(common) >= 2
    short = f"{len(common)} paired seed(s)"
  else:
    a = np.array([xs[s] for s in sorted(xs)])
    b = np.array([ys[s] for s in sorted(ys)])
    unmatched = 0
    row.update(n=a.size, n_control=b.size, dropped=dropped)
    enough = a.size >= 2 and b.size >= 2
    short = f"{a.size} and {b.size} seed(s)"

  conf = 1 - test.alpha
  row["arm_iqm"] = str(_iqm_estimate(a, conf, reps, seed))
  row["arm_mean"] = str(_mean_estimate(a, conf))
  row["control_mean"] = str(_mean_estimate(b, conf))
  notes = []
  if dropped:
    notes.append(f"{dropped} NaN value(s) dropped")
  if unmatched:
    notes.append(f"{unmatched} seed(s) without a pair left out")
  result = _run_test(a, b, test) if enough else None
  if result is None:
    row["diff"] = str(Estimate(math.nan, math.nan, math.nan))
  else:
    row["diff"] = result.diff.format(signed=True)
  row["test"] = _test_name(test)
  row["p"] = result.p if result is not None else math.nan
  untested = f"not tested: {arm} vs {control} has {short}, needs >= 2"
  return _Comparison(row, result, "; ".join(notes), untested)


def _verdict(c: _Comparison, test: Test, p_adj: float, correction: str) -> str:
  arm, control = c.row["arm"], c.row["control"]
  tail = f"; {c.notes}" if c.notes else ""
  if c.result is None:
    return c.untested + tail
  r = c.result
  diff = r.diff.format(signed=True)
  p = _fmt_p(p_adj)
  corr = f", {correction}" if correction else ""
  shown = p_adj < test.alpha
  if test.kind == "equivalence":
    m = f"±{test.margin:g}"
    if shown:
      return f"{arm} matches {control} within {m}: {diff} (TOST p={p}{corr}){tail}"
    return f"not shown within {m}: {arm} - {control} = {diff} (TOST p={p}{corr}){tail}"
  if test.kind == "non_inferiority":
    m = f"margin {test.margin:g}"
    if shown:
      return f"{arm} is non-inferior to {control} ({m}): {diff} (p={p}{corr}){tail}"
    return (
      f"not shown non-inferior to {control} ({m}): {arm} - {control} = {diff} (p={p}{corr}){tail}"
    )
  better = r.diff.point > 0 if test.higher_is_better else r.diff.point < 0
  corr = f" ({correction})" if correction else ""
  if shown and better:
    return f"{arm} beats {control}: {diff}, {r.name} p={p}{corr}{tail}"
  if shown:
    return f"{arm} is worse than {control}: {diff}, {r.name} p={p}{corr}{tail}"
  return f"not shown: {arm} - {control} = {diff}, {r.name} p={p}{corr}{tail}"


def _finish(c: _Comparison, test: Test, p_adj: float, correction: str) -> dict:
  row = dict(c.row)
  row["p_adjusted"] = p_adj
  row["verdict"] = _verdict(c, test, p_adj, correction)
  return row


def compare(
  arm: str,
  values: Mapping[int, float],
  control: str,
  control_values: Mapping[int, float],
  test: Test,
  reps: int = 2000,
  seed: int = 0,
) -> dict:
  """One arm against the control under the declared ``test``: a table row with its verdict.

  ``values`` are ``{seed: value}``. NaN values are dropped (``row["dropped"]``); a paired test uses
  the seeds both arms have (``row["n"]``; ``row["unmatched"]`` counts the others). ``p_adjusted``
  is Bonferroni over ``test.comparisons``. Means carry t intervals and the IQM a bootstrap interval
  (``reps``, ``seed``), all at ``1 - alpha``.
  """
  c = _compare(arm, values, control, control_values, test, reps, seed)
  m = test.comparisons
  return _finish(c, test, bonferroni(c.row["p"], m), f"Bonferroni over {m}" if m > 1 else "")


def compare_all(
  per_seed: Mapping[str, Mapping[int, float]],
  control: str,
  test: Test,
  reps: int = 2000,
  seed: int = 0,
) -> list[dict]:
  """Every arm of ``per_seed`` against ``control``, Holm-corrected; one row per arm, in order.

  Holm runs over ``max(len(arms) - 1, test.comparisons)`` hypotheses; arms that could not be
  tested (fewer than 2 seeds) keep NaN p-values and take no part.
  """
  require(control in per_seed, "control", f"{control!r} is not an arm: {', '.join(per_seed)}")
  arms = [a for a in per_seed if a != control]
  comps = [_compare(a, per_seed[a], control, per_seed[control], test, reps, seed) for a in arms]
  m = max(len(arms), test.comparisons)
  adjusted = holm([c.row["p"] for c in comps], m) if comps else []
  correction = f"Holm over {m}" if m > 1 else ""
  return [_finish(c, test, float(p), correction) for c, p in zip(comps, adjusted)]


# ------------------------------------------------------------------------------------------------
# Tables and inputs


def _cell(v: Any) -> str:
  if v is None:
    return ""
  if isinstance(v, (float, np.floating)):
    s = f"{float(v):.3g}"
  else:
    s = str(v)
  return s.replace("|", "\\|").replace("\n", " ")


def markdown(rows: Iterable[Mapping[str, Any]], columns: list[str] | None = None) -> str:
  """A GitHub markdown table of ``rows``; ``columns`` defaults to every key, in first-seen order."""
  rows = list(rows)
  if columns is None:
    columns = list(dict.fromkeys(k for r in rows for k in r))
  lines = [
    "| " + " | ".join(_cell(c) for c in columns) + " |",
    "|" + "|".join("---" for _ in columns) + "|",
  ]
  lines += ["| " + " | ".join(_cell(r.get(c)) for c in columns) + " |" for r in rows]
  return "\n".join(lines)


_MISSING = object()


def _lookup(record: Mapping[str, Any], key: str) -> Any:
  """``record[key]``, or the value nested under ``key``'s ``/``-separated parts."""
  if key in record:
    return record[key]
  parts = key.split("/")
  for i in range(1, len(parts)):
    sub = record.get("/".join(parts[:i]))
    if isinstance(sub, Mapping):
      v = _lookup(sub, "/".join(parts[i:]))
      if v is not _MISSING:
        return v
  return _MISSING


def read_per_seed(
  paths_or_records: Any, metric: str, arm_key: str = "arm", seed_key: str = "seed"
) -> dict[str, dict[int, float]]:
  """``{arm: {seed: value}}`` of ``metric`` from summary dicts or JSON files (a dict or a list).

  ``metric`` may be a flat key (``"heldout/kendall_tau"``) or nested (``{"heldout":
  {"kendall_tau": ...}}``). A record without the metric (or with null) gives NaN, which
  :func:`compare` drops and counts; no record with it at all, or a seed twice, is a ConfigError.
  """
  if isinstance(paths_or_records, (str, pathlib.Path, Mapping)):
    paths_or_records = [paths_or_records]
  records: list[tuple[str, Mapping]] = []
  for i, item in enumerate(paths_or_records):
    if isinstance(item, Mapping):
      records.append((f"record {i}", item))
      continue
    data = json.loads(pathlib.Path(item).read_text())
    for j, r in enumerate(data if isinstance(data, list) else [data]):
      require(isinstance(r, Mapping), "paths_or_records", f"{item}: entry {j} is not an object")
      records.append((str(item), r))
  out: dict[str, dict[int, float]] = {}
  found = False
  for where, r in records:
    arm, seed = _lookup(r, arm_key), _lookup(r, seed_key)
    require(arm is not _MISSING, arm_key, f"{where} has no {arm_key!r}")
    require(seed is not _MISSING, seed_key, f"{where} has no {seed_key!r}")
    v = _lookup(r, metric)
    found |= v is not _MISSING
    try:
      value = math.nan if v is _MISSING or v is None else float(v)
    except (TypeError, ValueError):
      raise ConfigError("metric", f"{where}: {metric} is not a number: {v!r}") from None
    seeds = out.setdefault(str(arm), {})
    require(int(seed) not in seeds, seed_key, f"{where}: arm {arm!r} has seed {seed} twice")
    seeds[int(seed)] = value
  require(found or not records, "metric", f"{metric!r} is in none of the {len(records)} records")
  return out
