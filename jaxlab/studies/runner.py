"""Runs a :class:`~jaxlab.studies.spec.Study` (resumable) and builds its table from raw files only.

    from jaxlab.studies import get, runner
    runner.run(get("r4/cartpole"))                 # every unfinished cell, then the table
    runner.run(get("r4/cartpole"), only_table=True)  # the table from the committed raw files

Each arm is one cell, run in ``<root>/<method>/<study>/<arm>`` (locked while it runs) for the
seeds whose raw result is missing; a seed's result is written once, as
``<results>/raw/<arm>/seed<k>.json`` (``arm``, ``seed``, ``config``, the metrics), and never
rewritten, so an interrupted study is continued by running it again and a finished one runs
nothing. :func:`table` reads those files and writes ``table.md`` and ``table.csv`` through
:mod:`jaxlab.core.stats`: per arm and metric the interquartile mean and the mean over seeds, each
with a stratified-bootstrap 95 % interval, then every declared test of every ``(arm, control)``
pair with its verdict, the p-values Holm-adjusted over all of the study's comparisons.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import pathlib
from collections.abc import Callable

from jaxlab.core import metrics, runtime, stats
from jaxlab.core import workdir as workdir_lib
from jaxlab.core.errors import ConfigError, require
from jaxlab.studies.spec import Study

REPS, BOOT_SEED = 2000, 0  # the bootstrap of every table: fixed, so a rebuild is byte-identical
SUMMARY_KEYS = ("arm", "seed", "config")


def raw_path(results, arm: str, seed: int) -> pathlib.Path:
  return pathlib.Path(results) / "raw" / arm / f"seed{seed}.json"


def cell_dir(study: Study, root, arm: str) -> pathlib.Path:
  return pathlib.Path(root) / study.method / study.study / arm


def run(
  study: Study,
  root="runs/study",
  results=None,
  only_table: bool = False,
  log: Callable[[str], None] = print,
) -> str:
  """Runs every arm whose seeds lack a raw result (unless ``only_table``), then :func:`table`.

  ``results``: default ``study.results``. Returns the markdown table."""
  results = pathlib.Path(results) if results is not None else study.results
  if not only_table:
    for i, arm in enumerate(study.arms):
      todo = tuple(s for s in study.seeds if not raw_path(results, arm, s).exists())
      head = f"[{study.name} {i + 1}/{len(study.arms)}] {arm}"
      if not todo:
        log(f"{head}: every seed finished, skipped")
        continue
      wd = cell_dir(study, root, arm)
      log(f"{head}: seeds {', '.join(map(str, todo))} in {wd}")
      with workdir_lib.session(wd):  # one process per cell: a second one is refused, not doubled
        out = study.cell(arm, todo, wd)
      write_raw(study, results, arm, todo, out)
  return table(study, results)


def once(wd, recorded: dict, compute: Callable[[], dict]) -> dict:
  """For cells that run seed by seed: ``compute()`` with ``recorded`` (its config and seed) as
  ``wd/summary.json``, or the record already there (a finished seed is never rerun; another setting
  in ``wd`` is refused naming ``workdir``)."""
  with workdir_lib.session(pathlib.Path(wd), recorded) as d:
    record = workdir_lib.finished(d)
    if record is not None:
      return record
    summary = {"config": recorded, **compute()}
    runtime.write_summary(d, summary)  # with the provenance record
  return metrics.read_json(d / "summary.json")


def write_raw(study: Study, results, arm: str, seeds: tuple[int, ...], out: dict) -> None:
  """Checks a cell's per-seed summaries (every seed, a config, the budget), then writes each seed's
  raw file unless it exists."""
  got = {int(k) for k in out}
  require(
    got == set(seeds),
    "study.cell",
    f"{study.name} {arm}: returned seeds {sorted(got)}, expected {sorted(seeds)}",
  )
  records = {}
  for seed in seeds:
    summary = dict(out[seed] if seed in out else out[str(seed)])
    require("config" in summary, "study.cell", f"{study.name} {arm} seed {seed}: no config")
    for key, want in study.budget.items():
      if key in summary and summary[key] != want:
        raise ConfigError(
          "study.budget",
          f"{study.name} {arm} seed {seed}: {key} = {summary[key]}, the budget is {want}",
        )
    rest = {k: v for k, v in summary.items() if k not in SUMMARY_KEYS}
    records[seed] = {"arm": arm, "seed": seed, "config": summary["config"], **rest}
  for seed, record in records.items():
    path = raw_path(results, arm, seed)
    if path.exists():  # another process finished it meanwhile: its record stands
      continue
    path.parent.mkdir(parents=True, exist_ok=True)
    metrics.write_json(path, record)


def read_raw(study: Study, results=None) -> list[dict]:
  """Every raw record of the study's arms and seeds found under ``results``."""
  results = pathlib.Path(results) if results is not None else study.results
  out = []
  for arm in study.arms:
    for seed in study.seeds:
      path = raw_path(results, arm, seed)
      if path.exists():
        rec = json.loads(path.read_text())
        require(
          rec.get("arm") == arm and rec.get("seed") == seed,
          "results",
          f"{path} records arm {rec.get('arm')!r} seed {rec.get('seed')!r}",
        )
        out.append(rec)
  return out


def _values(per_seed: dict, arm: str) -> dict[int, float]:
  return {s: v for s, v in per_seed.get(arm, {}).items() if not math.isnan(v)}


def _estimates(arm: str, x: list[float]) -> dict[str, stats.Estimate]:
  """IQM and mean of ``x`` with their bootstrap intervals."""
  mean = stats.aggregate({arm: x}, "mean", reps=REPS, seed=BOOT_SEED)[arm]
  # Below 4 seeds the interquartile mean trims nothing (rliable trims int(n / 4) from each end),
  # so it is the mean on every resample: the same estimate, without bootstrapping it twice.
  if len(x) < 4:
    return {"iqm": mean, "mean": mean}
  return {"iqm": stats.aggregate({arm: x}, "iqm", reps=REPS, seed=BOOT_SEED)[arm], "mean": mean}


def _num(v: float) -> str:
  return f"{v:.4g}"


def _tested(study: Study, test: stats.Test, per_seed: dict) -> list[dict]:
  """The test on every pair; Holm over all of the study's comparisons (tests x pairs)."""
  total = max(test.comparisons, len(study.tests) * len(study.comparisons()))
  declared = dataclasses.replace(test, comparisons=total)
  rows = []
  for control in dict.fromkeys(c for _, c in study.comparisons()):
    arms = [a for a, c in study.comparisons() if c == control]
    group = {a: per_seed.get(a, {}) for a in (*arms, control)}
    # The rows' own IQM interval is not shown (the per-arm table has it): one resample keeps
    # compare_all from bootstrapping it again; the test, its p-value and the verdict do not use it.
    rows += stats.compare_all(group, control, declared, reps=1, seed=BOOT_SEED)
  order = {pair: i for i, pair in enumerate(study.comparisons())}
  return sorted(rows, key=lambda r: order[(r["arm"], r["control"])])


def table(study: Study, results=None) -> str:
  """``table.md`` and ``table.csv`` in ``results`` from its raw files; returns the markdown."""
  results = pathlib.Path(results) if results is not None else study.results
  require(results.is_dir(), "results", f"{results}/raw holds no result of {study.name}")
  # one writer of the folder's table at a time; a second is refused rather than interleaved
  with workdir_lib.output_lock(results, "results"):
    check_table_owner(study, results)
    md, rows = _table(study, results)
    workdir_lib.write_atomic(results / "table.md", md)
    workdir_lib.write_atomic(results / "table.csv", rows)
  return md


def check_table_owner(study: Study, results: pathlib.Path) -> None:
  """``ConfigError('results')`` when ``results/table.md`` is another study's table (it is rebuilt
  from the raw files only for the study it belongs to)."""
  path = results / "table.md"
  if not path.is_file():
    return
  head = (path.read_text().splitlines() or [""])[0]
  require(
    head == f"# {study.name}",
    "results",
    f"{path} holds another study's table ({head!r}); choose another --results",
  )


def _table(study: Study, results: pathlib.Path) -> tuple[str, str]:
  """The markdown and CSV of :func:`table`."""
  records = read_raw(study, results)
  require(bool(records), "results", f"{results}/raw holds no result of {study.name}")
  per_metric = {m: stats.read_per_seed(records, m) for m in study.metrics}
  arm_rows, csv_rows = [], []
  for m in study.metrics:
    for arm in study.arms:
      vals = _values(per_metric[m], arm)
      if not vals:
        continue
      x = [vals[s] for s in sorted(vals)]
      est = _estimates(arm, x)
      per = ", ".join(_num(vals[s]) for s in sorted(vals))
      arm_rows.append(
        {
          "metric": m,
          "arm": arm,
          "n": len(x),
          "IQM [95 %]": str(est["iqm"]),
          "mean [95 %]": str(est["mean"]),
          f"per seed ({', '.join(map(str, sorted(vals)))})": per,
        }
      )
      csv_rows.append(
        {
          "section": "arm",
          "metric": m,
          "arm": arm,
          "n": len(x),
          "seeds": " ".join(map(str, sorted(vals))),
          "values": " ".join(repr(v) for v in x),
          **{
            f"{k}{s}": getattr(est[k], f)
            for k in est
            for s, f in (("", "point"), ("_lo", "lo"), ("_hi", "hi"))
          },
        }
      )
  test_rows = [r for t in study.tests for r in _tested(study, t, per_metric[t.metric])]
  for r in test_rows:
    csv_rows.append({"section": "test", **{k: r[k] for k in _TEST_CSV}})
  return _markdown(study, records, arm_rows, test_rows), _csv(csv_rows)


_TEST_CSV = ("metric", "arm", "control", "n", "diff", "test", "p", "p_adjusted", "verdict")
_CSV_FIELDS = (
  "section",
  "metric",
  "arm",
  "control",
  "n",
  "seeds",
  "values",
  "iqm",
  "iqm_lo",
  "iqm_hi",
  "mean",
  "mean_lo",
  "mean_hi",
  "diff",
  "test",
  "p",
  "p_adjusted",
  "verdict",
)


def _csv(rows: list[dict]) -> str:
  buf = io.StringIO()
  w = csv.DictWriter(buf, _CSV_FIELDS, lineterminator="\n")
  w.writeheader()
  for r in rows:
    w.writerow({k: (repr(v) if isinstance(v, float) else v) for k, v in r.items()})
  return buf.getvalue()


def _seeds(seeds) -> str:
  return ", ".join(map(str, seeds)) if seeds else "none"


def _markdown(
  study: Study, records: list[dict], arm_rows: list[dict], test_rows: list[dict]
) -> str:
  ns = sorted({r["n"] for r in arm_rows})
  n = " or ".join(map(str, ns)) if ns else "0"
  budget = ", ".join(f"{k} {v}" for k, v in study.budget.items())
  out = [
    f"# {study.name}",
    "",
    f"Claim: {study.claim}",
    "",
    f"Held-out seeds {_seeds(study.seeds)} (tuning seeds: {_seeds(study.tuning_seeds)}); "
    f"per arm {budget}; {len(records)} per-seed results in `raw/<arm>/seed<k>.json`. "
    f"Built from them by `python -m experiments.study {study.name} --table`: do not edit.",
    "",
  ]
  if study.note:
    out += [study.note, ""]
  out += [
    f"Per arm: interquartile mean (IQM) and mean over seeds, each with a 95 % stratified-bootstrap "
    f"interval over the n = {n} seeds (rliable, {REPS} resamples; with fewer than 4 seeds the IQM "
    "trims nothing and is the mean).",
    "",
    stats.markdown(arm_rows),
    "",
  ]
  if test_rows:
    k, pairs = len(study.tests), len(study.comparisons())
    m = k * pairs
    adjusted = (
      f"p adjusted by Holm over the study's {m} comparisons ({k} test{'s' * (k > 1)} x "
      f"{pairs} pair{'s' * (pairs > 1)})"
      if m > 1
      else "one comparison: p is not adjusted"
    )
    kinds = ", ".join(sorted({t.kind for t in study.tests}))
    out += [
      f"Declared tests ({kinds}; arm - control, paired by seed; diff: the mean difference with "
      f"its 95 % t interval), {adjusted}:",
      "",
      stats.markdown(test_rows, list(_TEST_CSV)),
      "",
    ]
  return "\n".join(out)
