"""R4's comparison study (docs/r4.md, Study): R4 against RbRL, Bradley-Terry and the true reward.

    records = study.run(config, env="cartpole", noises=(0.0, 0.5), seeds=range(5), updates=48,
                        root="runs/r4/study", results="docs/results/r4_study")

One cell = one :func:`jaxlab.rl.r4.protocol.run` (offline protocol, simulated raters) of one
(env, method, rater noise, seed) in its own workdir ``<root>/<env>/<arm>/seed<k>`` (arm:
``<method>_noise<noise>``, or ``true`` for PPO on the true reward, which sees no ratings and is
run once per seed). A cell whose workdir holds a summary.json is skipped, never rerun or
rewritten, so an interrupted study resumes where it stopped. The cells of a seed share the
behaviour pool, the held-out trajectories, the rater's noise draw and PPO's seed (all come from
the run's seed), so a per-seed difference between two methods isolates the reward-learning loss;
every arm trains PPO for the same ``updates`` (equal environment steps, checked in the table).

``results`` (small files only) receives per cell its summary (``cells/<env>_<arm>_seed<k>.json``,
config and seed included) and ``cells.csv`` (with wall-clock seconds and the 1-minute load at the
cell's start), and over all cells found there (any env): ``table.csv`` and ``table.md`` (mean and
95 % Student-t interval over seeds of held-out Kendall tau and of PPO's true return, plus the
per-seed paired differences R4 - baseline).
"""

from __future__ import annotations

import copy
import csv
import dataclasses
import json
import os
import pathlib
import time
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from jaxlab.core import metrics
from jaxlab.core.errors import ConfigError, require
from jaxlab.core.metrics import t_interval
from jaxlab.rl.r4 import config as r4_config

LEARNED = ("r4", "rbrl", "bt")  # reward learners; "true" is the upper control


@dataclasses.dataclass(frozen=True)
class Cell:
  env: str
  method: str
  noise: float | None  # rater noise (x the returns' std); None for the true-reward arm
  seed: int

  @property
  def arm(self) -> str:
    return "true" if self.method == "true" else f"{self.method}_noise{self.noise:g}"

  @property
  def name(self) -> str:
    return f"{self.env}_{self.arm}_seed{self.seed}"

  def workdir(self, root) -> pathlib.Path:
    return pathlib.Path(root) / self.env / self.arm / f"seed{self.seed}"


def cells(env: str, noises: Sequence[float], methods: Sequence[str], seeds: Iterable[int]):
  """The grid, seed by seed (a study stopped early holds whole seeds): for each seed the
  true-reward arm once (if asked), then every learner at every noise level."""
  out = []
  for seed in seeds:
    if "true" in methods:
      out.append(Cell(env, "true", None, int(seed)))
    out += [Cell(env, m, float(n), int(seed)) for n in noises for m in methods if m != "true"]
  return out


def cell_config(config, cell: Cell):
  """``config`` with the cell's rater noise (the true arm records noise 0: it rates nothing)."""
  c = copy.deepcopy(config)
  c.noise = 0.0 if cell.noise is None else float(cell.noise)
  return c


def run(
  config,
  *,
  env: str,
  noises: Sequence[float],
  seeds: Iterable[int],
  updates: int,
  root,
  results=None,
  methods: Sequence[str] = r4_config.METHODS,
  log: Callable[[str], None] = print,
) -> list[dict]:
  """Runs every unfinished cell of the grid (see the module docstring) -> the cells' records.

  Every cell's config is validated (ConfigError naming the field) before the first one runs."""
  from jaxlab.rl.r4 import protocol

  seeds = list(seeds)
  require(len(seeds) >= 1, "study_seeds", "must name at least one seed")
  require(len(set(seeds)) == len(seeds), "study_seeds", f"repeats a seed: {seeds}")
  require(
    all(np.isfinite(n) and n >= 0 for n in noises) and len(noises) >= 1,
    "study_noises",
    f"must be one or more finite noise levels >= 0, got {list(noises)}",
  )
  for m in methods:
    require(m in r4_config.METHODS, "method", f"unknown {m!r}; allowed: {r4_config.METHODS}")
  grid = cells(env, noises, methods, seeds)
  for cell in grid:
    r4_config.validate_config(
      cell_config(config, cell),
      method=cell.method,
      ratings="simulated",
      protocol="offline",
      updates=updates,
    )
  records = []
  for i, cell in enumerate(grid):
    wd = cell.workdir(root)
    if (wd / "summary.json").exists():  # finished: read, never rerun or rewritten
      log(f"[{i + 1}/{len(grid)}] {cell.name}: finished, skipped")
    elif _busy(wd):  # another study process runs this cell (studies may split the seeds)
      log(f"[{i + 1}/{len(grid)}] {cell.name}: running in another process, skipped")
      continue
    else:
      load, t0 = os.getloadavg()[0], time.time()
      log(f"[{i + 1}/{len(grid)}] {cell.name}: running (load {load:.1f})")
      protocol.run(
        cell_config(config, cell),
        env=env,
        method=cell.method,
        ratings="simulated",
        protocol="offline",
        updates=updates,
        seed=cell.seed,
        workdir=wd,
      )
      timing = {"wall_s": round(time.time() - t0, 1), "load_1min_at_start": round(load, 2)}
      metrics.write_json(wd / "timing.json", timing)
    records.append(record(cell, wd))
    if results is not None:
      export(records[-1], results)
  if results is not None:
    write_tables(results)
  return records


def _busy(wd: pathlib.Path) -> bool:
  from jaxlab.core import workdir as workdir_lib

  try:
    workdir_lib.check_free(wd)
  except ConfigError:
    return True
  return False


def record(cell: Cell, wd: pathlib.Path) -> dict:
  """A finished cell's summary with its cell fields and timing (when recorded)."""
  s = json.loads((wd / "summary.json").read_text())
  timing = wd / "timing.json"
  t = json.loads(timing.read_text()) if timing.exists() else {}
  return {**s, **t, "cell": dataclasses.asdict(cell), "arm": cell.arm, "name": cell.name}


CSV_FIELDS = (
  "env",
  "arm",
  "method",
  "noise",
  "seed",
  "heldout/kendall_tau",
  "heldout/spearman_rho",
  "eval/true_return",
  "ppo_updates",
  "env_steps",
  "wall_s",
  "load_1min_at_start",
)


def export(rec: dict, results) -> None:
  """Copies a cell's record to ``results/cells/<name>.json`` (once: never overwritten)."""
  out = pathlib.Path(results) / "cells"
  out.mkdir(parents=True, exist_ok=True)
  path = out / f"{rec['name']}.json"
  if not path.exists():
    metrics.write_json(path, {k: v for k, v in rec.items() if k != "provenance"})


def load_records(results) -> list[dict]:
  return [
    json.loads(p.read_text()) for p in sorted((pathlib.Path(results) / "cells").glob("*.json"))
  ]


def _row(rec: dict) -> dict:
  c = rec["cell"]
  row = {k: rec.get(k, "") for k in CSV_FIELDS}
  row.update(env=c["env"], method=c["method"], noise=c["noise"], seed=c["seed"], arm=rec["arm"])
  return row


def aggregate(records: Sequence[dict]) -> list[dict]:
  """One row per (env, arm): seeds, mean and 95 % t-interval of tau, rho and true return."""
  groups: dict = {}
  for r in records:
    groups.setdefault((r["cell"]["env"], r["arm"]), []).append(r)
  rows = []
  for (env, arm), recs in sorted(groups.items(), key=lambda kv: _order(*kv[0])):
    steps = sorted({int(r["env_steps"]) for r in recs})
    row = {
      "env": env,
      "arm": arm,
      "n": len(recs),
      "env_steps": steps[0] if len(steps) == 1 else steps,
    }
    for key in ("heldout/kendall_tau", "heldout/spearman_rho", "eval/true_return"):
      xs = [r[key] for r in recs if key in r]
      row[key] = t_interval(xs) if xs else None
    rows.append(row)
  return rows


def paired(records: Sequence[dict], baseline: str) -> list[dict]:
  """Per (env, noise): R4 minus ``baseline`` on the same seed (same pool, ratings and PPO seed),
  mean and 95 % t-interval of the differences in tau and true return."""
  by = {(r["cell"]["env"], r["arm"], r["cell"]["seed"]): r for r in records}
  out = []
  keys = sorted({(r["cell"]["env"], r["cell"]["noise"]) for r in records if r["arm"] != "true"})
  for env, noise in keys:
    other = "true" if baseline == "true" else f"{baseline}_noise{noise:g}"
    seeds = sorted(s for (e, a, s) in by if e == env and a == f"r4_noise{noise:g}")
    seeds = [s for s in seeds if (env, other, s) in by]
    if not seeds:
      continue
    row = {"env": env, "noise": noise, "baseline": baseline, "n": len(seeds)}
    for key in ("heldout/kendall_tau", "eval/true_return"):
      a = [by[(env, f"r4_noise{noise:g}", s)].get(key) for s in seeds]
      b = [by[(env, other, s)].get(key) for s in seeds]
      ok = [(x, y) for x, y in zip(a, b) if x is not None and y is not None]
      row[key] = t_interval([x - y for x, y in ok]) if ok else None
    out.append(row)
  return out


def _order(env: str, arm: str):
  method = arm.split("_noise")[0]
  noise = float(arm.split("_noise")[1]) if "_noise" in arm else -1.0
  return env, noise, r4_config.METHODS.index(method)


def fmt(iv, digits: int = 3) -> str:
  """``mean [lo, hi]`` of a :func:`t_interval` (``–`` when absent)."""
  if iv is None:
    return "–"
  m, lo, hi = iv
  if not np.isfinite(lo):
    return f"{m:.{digits}g} (1 seed)"
  return f"{m:.{digits}g} [{lo:.{digits}g}, {hi:.{digits}g}]"


def markdown(records: Sequence[dict]) -> str:
  rows = aggregate(records)
  lines = [
    "| env | arm (method, rater noise) | seeds | PPO env steps | held-out Kendall tau | "
    "held-out Spearman rho | PPO true return |",
    "|---|---|---|---|---|---|---|",
  ]
  for r in rows:
    lines.append(
      f"| {r['env']} | {r['arm']} | {r['n']} | {r['env_steps']} | {fmt(r['heldout/kendall_tau'])}"
      f" | {fmt(r['heldout/spearman_rho'])} | {fmt(r['eval/true_return'], 4)} |"
    )
  lines += [
    "",
    "Paired differences, R4 minus baseline on the same seed (same pool, ratings, PPO seed):",
    "",
    "| env | rater noise | baseline | seeds | d Kendall tau | d PPO true return |",
    "|---|---|---|---|---|---|",
  ]
  for b in ("rbrl", "bt", "true"):
    for r in paired(records, b):
      lines.append(
        f"| {r['env']} | {r['noise']:g} | {b} | {r['n']} | {fmt(r['heldout/kendall_tau'])} | "
        f"{fmt(r['eval/true_return'], 4)} |"
      )
  return "\n".join(lines) + "\n"


def write_tables(results) -> str:
  """``cells.csv``, ``table.csv`` and ``table.md`` from every record in ``results/cells``."""
  results = pathlib.Path(results)
  records = load_records(results)
  with open(results / "cells.csv", "w", newline="") as f:
    w = csv.DictWriter(f, CSV_FIELDS)
    w.writeheader()
    for rec in sorted(
      records, key=lambda r: (_order(r["cell"]["env"], r["arm"]), r["cell"]["seed"])
    ):
      w.writerow(_row(rec))
  with open(results / "table.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["env", "arm", "n", "env_steps", "metric", "mean", "lo95", "hi95"])
    for r in aggregate(records):
      for key in ("heldout/kendall_tau", "heldout/spearman_rho", "eval/true_return"):
        if r[key] is not None:
          w.writerow([r["env"], r["arm"], r["n"], r["env_steps"], key, *r[key]])
  text = markdown(records)
  (results / "table.md").write_text(text)
  return text
