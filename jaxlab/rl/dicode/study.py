"""A curricula comparison at equal environment steps: ``run(root, config, curricula, seeds)``.

Every (curriculum, seed) is one ``runner.run`` under ``<root>/<curriculum>/seed<k>`` with the SAME
config (so the same environment steps, updates and evaluation worlds), seeds interleaved so that a
study stopped early holds balanced arms; a finished run is skipped (``runner.run`` reports its
record), so re-running the command resumes. ``table(root, curricula)`` reads the finished
``summary.json`` files: per curriculum the mean and 95 % Student-t interval over seeds of the
held-out return, its % of the maximum and the Crafter score, the difference to ``none`` paired by
seed, and for ``dicode`` what the archive learnt (proposals admitted, tasks with a non-zero
learnability). ``write(root, out, curricula)`` puts the table (``study.json``, ``study.csv``,
``study.md``), each run's summary and ``comparison.png`` under ``out``.
"""

from __future__ import annotations

import csv
import json
import pathlib
import shutil
from collections.abc import Callable, Sequence

import numpy as np

from jaxlab.core.metrics import t_interval

METRICS = ("return", "return_pct", "score")  # eval/<metric> of each summary.json


def run(
  root,
  config,
  curricula: Sequence[str] = ("none", "dr", "dicode"),
  seeds: Sequence[int] = (0, 1, 2),
  proposer: dict | None = None,
  log: Callable[[str], None] = print,
) -> dict:
  """Runs (or resumes) every arm; returns :func:`table` of what has finished."""
  from jaxlab.rl.dicode import runner

  root = pathlib.Path(root)
  proposer = proposer or runner.proposer_settings("offline")
  for seed in seeds:
    for curriculum in curricula:
      log(f"[dicode study] {curriculum} seed {seed}")
      runner.run(root / curriculum / f"seed{seed}", config, curriculum, proposer, seed)
  return table(root, curricula)


def _summaries(root: pathlib.Path, curriculum: str) -> dict[int, dict]:
  out = {}
  for path in sorted((root / curriculum).glob("seed*/summary.json")):
    out[int(path.parent.name[4:])] = json.loads(path.read_text())
  return out


def _archive_row(summary: dict) -> dict:
  archive = summary.get("archive") or {}
  top = archive.get("top") or []
  return {
    "admitted_proposals": archive.get("admitted_proposals", 0),
    "tasks": archive.get("tasks", 0),
    "scored_tasks": sum(1 for t in top if (t.get("score") or 0) > 0),
    "best_score": max([t.get("score") or 0.0 for t in top], default=0.0),
  }


def table(root, curricula: Sequence[str] = ("none", "dr", "dicode")) -> dict:
  """Per curriculum: seeds, mean and 95 % t-interval of each metric, and ``<metric>_vs_none``
  (mean and interval of the per-seed difference to ``none`` on the seeds both finished)."""
  root = pathlib.Path(root)
  runs = {c: _summaries(root, c) for c in curricula}
  rows = {}
  for c, by_seed in runs.items():
    if not by_seed:
      continue
    row: dict = {"seeds": sorted(by_seed), "env_steps": [s["env_steps"] for s in by_seed.values()]}
    for m in METRICS:
      row[m] = t_interval([s[f"eval/{m}"] for s in by_seed.values()])
      base = runs.get("none", {})
      common = sorted(set(base) & set(by_seed))
      if c != "none" and common:
        diff = [by_seed[k][f"eval/{m}"] - base[k][f"eval/{m}"] for k in common]
        row[f"{m}_vs_none"] = t_interval(diff)
    row["train_wall_s"] = float(np.mean([s["train_wall_s"] for s in by_seed.values()]))
    if c == "dicode":
      row["archive"] = [_archive_row(s) for s in by_seed.values()]
    rows[c] = row
  return rows


def _fmt(iv) -> str:
  m, lo, hi = iv
  return f"{m:.3g}" if not np.isfinite(lo) else f"{m:.3g} [{lo:.3g}, {hi:.3g}]"


def markdown(rows: dict) -> str:
  """The table as markdown: mean [95 % t-interval] over seeds."""
  lines = [
    "| curriculum | seeds | env steps | return | % of max | Crafter score | return - none |",
    "|---|---|---|---|---|---|---|",
  ]
  for c, r in rows.items():
    vs = _fmt(r["return_vs_none"]) if "return_vs_none" in r else "-"
    lines.append(
      f"| `{c}` | {len(r['seeds'])} | {int(np.mean(r['env_steps'])):,} | {_fmt(r['return'])} | "
      f"{_fmt(r['return_pct'])} | {_fmt(r['score'])} | {vs} |"
    )
  return "\n".join(lines) + "\n"


def write(root, out, curricula: Sequence[str] = ("none", "dr", "dicode")) -> dict:
  """study.json / study.csv / study.md, ``summary_<curriculum>_seed<k>.json`` per finished run
  and comparison.png (``loop.compare``) under ``out``; returns the table."""
  from jaxlab.rl.dicode import loop

  root, out = pathlib.Path(root), pathlib.Path(out)
  rows = table(root, curricula)
  dirs = [root / c for c in curricula if c in rows]
  if dirs:
    loop.compare(dirs, out)  # creates out
  out.mkdir(parents=True, exist_ok=True)
  (out / "study.json").write_text(json.dumps(rows, indent=1) + "\n")
  (out / "study.md").write_text(markdown(rows))
  with open(out / "study.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["curriculum", "seed", "env_steps", *METRICS, "train_wall_s", "eval_wall_s"])
    for c in curricula:
      for seed, s in _summaries(root, c).items():
        row = [c, seed, s["env_steps"], *(s[f"eval/{m}"] for m in METRICS)]
        w.writerow(row + [s["train_wall_s"], s["eval_wall_s"]])
        src = root / c / f"seed{seed}" / "summary.json"
        shutil.copyfile(src, out / f"summary_{c}_seed{seed}.json")
  return rows
