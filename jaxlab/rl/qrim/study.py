"""QRIM's evidence study: robust vs nominal PPO over seeds, and the backup's queries.

    tables = study.run(qrim.get_config(), env="cartpole", set_size=64, updates=200,
                       seeds=range(5), root="docs/results/qrim_study")

Cells, each its own workdir with config.json and summary.json (``jaxlab.core.workdir.session``:
a finished cell is skipped and never rewritten; another setting in it is refused naming
``workdir``), run seed by seed so that a stopped study leaves whole seeds:

* ``<root>/cells/backup/s<seed>``: the oracle queries of one inner minimum for |U| = 2^4 ..
  2^max_log2 (``protocol.query_scaling``, its seed) with the fitted log-log slope, and tabular
  robust value iteration at each of ``backup_sizes`` (queries per robust backup, the fraction of
  backups worse than the exhaustive minimum, max |V - V_exhaustive|): the accuracy that makes the
  comparison with the classical |U| one at equal accuracy;
* ``<root>/cells/<arm>/s<seed>``: ``robust.train_arm`` for arm nominal | random | robust with the
  key of ``protocol.run``'s part 3 (so the arms of one seed share the initial policy and the PPO
  keys: the differences are paired), evaluated on the held-out cell midpoints of the grid.

Tables (:func:`write_tables`, from the finished cells only, with their count): per arm the
held-out mean and worst-case (minimum over the held-out points) return, each a mean over seeds
with a 95 % Student-t interval, and the paired differences; per |U| the queries against |U|, and
the slopes fitted per seed with their interval. See docs/qrim.md.
"""

from __future__ import annotations

import csv
import io
import pathlib
from collections.abc import Callable, Iterable, Sequence

import jax
import numpy as np

from jaxlab.core import plots, runtime
from jaxlab.core import workdir as workdir_lib
from jaxlab.core.errors import require
from jaxlab.core.metrics import t_interval
from jaxlab.rl.qrim import config as qrim_config
from jaxlab.rl.qrim import protocol, robust
from jaxlab.rl.qrim import search as qrim_search

BACKUP_SIZES = (16, 64, 256, 1024)


def cell_dir(root, kind: str, seed: int) -> pathlib.Path:
  """``kind``: ``"backup"`` or an arm of :data:`jaxlab.rl.qrim.robust.ARMS`."""
  return pathlib.Path(root) / "cells" / kind / f"s{seed}"


def run_cell(wd: pathlib.Path, recorded: dict, compute: Callable[[], dict]) -> tuple[dict, bool]:
  """``(summary, computed)``: a finished cell's record untouched, else ``compute()`` written as
  its summary.json (with ``recorded``, the cell's config and seed)."""
  with workdir_lib.session(wd, recorded) as d:
    record = workdir_lib.finished(d)
    if record is not None:
      return record, False
    summary = {"config": recorded, "seed": recorded["seed"], **compute()}
    runtime.write_summary(d, summary)
  return summary, True


def backup_cell(search, config, seed: int, sizes: Sequence[int]) -> dict:
  """Queries of one inner minimum vs |U| (slope) and of the tabular robust backup at ``sizes``."""
  key = jax.random.key(seed)
  rows = protocol.query_scaling(search, config, jax.random.fold_in(key, 0))
  slope, slope_total = protocol.query_slopes(rows)
  tab = [
    {
      "n": n,
      **protocol.tabular(search, config, n, jax.random.fold_in(jax.random.fold_in(key, 1), n)),
    }
    for n in sizes
  ]
  return {
    "query_scaling": rows,
    "slope_oracle_queries": slope,
    "slope_with_checks": slope_total,
    "tabular": tab,
    "slope_backup_queries": qrim_search.fit_slope(
      sizes, [t["queries_per_backup_quantum"] for t in tab]
    ),
  }


def run(
  config,
  *,
  env: str,
  set_size: int,
  updates: int,
  seeds: Iterable[int],
  root,
  arms: Sequence[str] = robust.ARMS,
  backup_sizes: Sequence[int] = BACKUP_SIZES,
) -> dict:
  """Every unfinished cell of the study (seed by seed), then :func:`write_tables` into ``root``.

  ``config``: :func:`jaxlab.rl.qrim.get_config`; ``set_size``: the training grid U of the PPO
  arms; ``updates``: PPO updates per arm (equal across arms). Validated first (ConfigError)."""
  robust.check_env(env)
  search, _ = qrim_config.validate_config(config, max(set_size, *backup_sizes))
  for n in (set_size, *backup_sizes):
    qrim_config.check_memory(config, env, n)
  bad = [a for a in arms if a not in robust.ARMS]
  require(not bad, "arms", f"must be among {', '.join(robust.ARMS)}, got {bad}")
  root = workdir_lib.check_writable(root, "workdir")
  base = {**config.to_dict(), "env": env}
  for seed in seeds:
    rec = {**base, "backup_sizes": list(backup_sizes), "seed": seed}
    _, new = run_cell(
      cell_dir(root, "backup", seed), rec, lambda: backup_cell(search, config, seed, backup_sizes)
    )
    print(f"backup s{seed}: {'done' if new else 'finished before, skipped'}", flush=True)
    for arm in arms:
      rec = {**base, "set_size": set_size, "steps": updates, "arm": arm, "seed": seed}
      key = jax.random.fold_in(jax.random.key(seed), 2)  # protocol.run's part-3 key
      _, new = run_cell(
        cell_dir(root, arm, seed),
        rec,
        lambda: robust.train_arm(env, search, config, set_size, updates, key, arm),
      )
      print(f"{arm} s{seed}: {'done' if new else 'finished before, skipped'}", flush=True)
  return write_tables(root)


# --- aggregation ---


def _finished(root: pathlib.Path, kind: str) -> list[dict]:
  base = root / "cells" / kind
  out = []
  for d in sorted(base.glob("s*"), key=lambda p: int(p.name[1:])) if base.exists() else []:
    if (d / "summary.json").exists():
      out.append(workdir_lib.finished(d))
  return out


def slope_interval(xs, per_seed_ys) -> dict:
  """Log-log slope fitted per seed (rows of ``per_seed_ys`` against ``xs``), its mean and 95 %
  t-interval over seeds."""
  slopes = [qrim_search.fit_slope(xs, ys) for ys in per_seed_ys]
  m, lo, hi = t_interval(slopes)
  return {"slopes": slopes, "mean": m, "lo": lo, "hi": hi, "n": len(slopes)}


def arm_table(cells: dict[str, list[dict]]) -> dict:
  """Per arm: mean and worst-case held-out return (t-intervals over seeds); per other arm: the
  paired (same seed) difference robust - arm. ``cells``: arm -> finished summaries."""
  rows = {}
  for arm, cs in cells.items():
    means = [c["heldout_mean_return"] for c in cs]
    worsts = [min(c["heldout_returns"]) for c in cs]  # worst case over the held-out grid
    rows[arm] = {
      "n": len(cs),
      "seeds": [c["seed"] for c in cs],
      "mean": t_interval(means),
      "worst": t_interval(worsts),
      "worst_over_seeds": min(worsts) if worsts else float("nan"),
    }
  diffs = {}
  by_seed = {arm: {c["seed"]: c for c in cs} for arm, cs in cells.items()}
  for arm in cells:
    if arm == "robust" or "robust" not in cells:
      continue
    common = sorted(set(by_seed["robust"]) & set(by_seed[arm]))
    rob, other = by_seed["robust"], by_seed[arm]
    diffs[arm] = {
      "n": len(common),
      "mean": t_interval(
        [rob[s]["heldout_mean_return"] - other[s]["heldout_mean_return"] for s in common]
      ),
      "worst": t_interval(
        [min(rob[s]["heldout_returns"]) - min(other[s]["heldout_returns"]) for s in common]
      ),
    }
  return {"arms": rows, "robust_minus": diffs}


def backup_table(cells: list[dict]) -> dict:
  """Per |U| (t-intervals over seeds of the per-seed means) and the slopes' intervals."""
  if not cells:
    return {}
  ns = [r["n"] for r in cells[0]["query_scaling"]]
  q = np.asarray([[r["queries"][0] for r in c["query_scaling"]] for c in cells])
  chk = np.asarray([[r["measurements"][0] for r in c["query_scaling"]] for c in cells])
  succ = np.asarray([[r["success"] for r in c["query_scaling"]] for c in cells])
  tn = [t["n"] for t in cells[0]["tabular"]]
  tq = np.asarray([[t["queries_per_backup_quantum"] for t in c["tabular"]] for c in cells])
  tc = np.asarray([[t["classical_checks_per_backup_quantum"] for t in c["tabular"]] for c in cells])
  mis = np.asarray([[t["mismatch_rate"] for t in c["tabular"]] for c in cells])
  dv = np.asarray([[t["max_abs_value_error"] for t in c["tabular"]] for c in cells])
  return {
    "n_seeds": len(cells),
    "scaling": [
      {
        "n": n,
        "queries": t_interval(q[:, i]),
        "checks": t_interval(chk[:, i]),
        "success_min": float(succ[:, i].min()),
      }
      for i, n in enumerate(ns)
    ],
    "slope_queries": slope_interval(ns, q),
    "slope_with_checks": slope_interval(ns, q + chk),
    "tabular": [
      {
        "n": n,
        "queries": t_interval(tq[:, i]),
        "checks": t_interval(tc[:, i]),
        "mismatch_max": float(mis[:, i].max()),
        "value_error_max": float(dv[:, i].max()),
      }
      for i, n in enumerate(tn)
    ],
    "slope_backup": slope_interval(tn, tq),
  }


def _num(x: float, digits: int) -> str:
  return f"{x:.0f}" if abs(x) >= 10**digits else f"{x:.{digits}g}"  # no 1.09e+03


def _ci(t, digits: int = 3) -> str:
  m, lo, hi = t
  if np.isnan(lo):
    return _num(m, digits)
  return f"{_num(m, digits)} [{_num(lo, digits)}, {_num(hi, digits)}]"


def markdown(tables: dict) -> str:
  """The tables of docs/qrim.md (mean [95 % t-interval over seeds] (n))."""
  out = []
  ppo, bk = tables["ppo"], tables["backup"]
  if ppo["arms"]:
    out += [
      "| arm (trained on) | seeds | held-out mean return | held-out worst-case return | "
      "worst case, min over seeds |",
      "|---|---|---|---|---|",
    ]
    for arm, r in ppo["arms"].items():
      out.append(
        f"| {arm} | {r['n']} | {_ci(r['mean'], 4)} | {_ci(r['worst'], 4)} | "
        f"{r['worst_over_seeds']:.4g} |"
      )
    for arm, d in ppo["robust_minus"].items():
      out.append(
        f"| robust - {arm} (paired) | {d['n']} | {_ci(d['mean'], 3)} | {_ci(d['worst'], 3)} | |"
      )
    inner = tables.get("inner")
    if inner:
      out += [
        "",
        f"Robust arm's re-selections: {_ci(inner['queries'])} oracle queries + "
        f"{_ci(inner['checks'])} classical checks per inner minimum instead of |U| = "
        f"{inner['set_size']}; the minimiser's u* was as bad as the exhaustive argmin in "
        f"{inner['exact']:.1%} of {inner['selections']} re-selections.",
      ]
  if bk:
    sq, sc, sb = bk["slope_queries"], bk["slope_with_checks"], bk["slope_backup"]
    out += [
      "",
      f"One inner minimum (random permutations, {bk['n_seeds']} seeds):",
      "",
      "| \\|U\\| | oracle queries | + classical checks | classical \\|U\\| | "
      "success, min over seeds |",
      "|---|---|---|---|---|",
    ]
    for r in bk["scaling"]:
      total = r["queries"][0] + r["checks"][0]
      out.append(
        f"| {r['n']} | {_ci(r['queries'])} | {_num(total, 3)} | {r['n']} | {r['success_min']:.2f} |"
      )
    out += [
      "",
      f"Log-log slope fitted per seed: oracle queries {_ci((sq['mean'], sq['lo'], sq['hi']), 4)}, "
      f"with the classical checks {_ci((sc['mean'], sc['lo'], sc['hi']), 4)} (classical: 1).",
      "",
      "Tabular robust backup (value iteration; accuracy against exhaustive minimisation):",
      "",
      "| \\|U\\| | oracle queries per backup | classical checks | classical \\|U\\| | "
      "worse-than-exhaustive backups, max over seeds | max \\|V - V_exh\\| |",
      "|---|---|---|---|---|---|",
    ]
    for r in bk["tabular"]:
      out.append(
        f"| {r['n']} | {_ci(r['queries'])} | {_ci(r['checks'])} | {r['n']} | "
        f"{r['mismatch_max']:.3g} | {r['value_error_max']:.2g} |"
      )
    out += ["", f"Slope of queries per backup: {_ci((sb['mean'], sb['lo'], sb['hi']), 4)}."]
  return "\n".join(out) + "\n"


def _write_if_changed(path: pathlib.Path, text: str) -> None:
  if not path.exists() or path.read_text() != text:
    path.write_text(text)


def write_tables(root) -> dict:
  """Aggregates the finished cells of ``root`` into table.md, ppo_cells.csv, backup_cells.csv
  and queries.png (files rewritten only when their content changes) -> the tables."""
  root = pathlib.Path(root)
  cells = {arm: _finished(root, arm) for arm in robust.ARMS}
  cells = {arm: cs for arm, cs in cells.items() if cs}
  backup = _finished(root, "backup")
  tables = {"ppo": arm_table(cells), "backup": backup_table(backup)}
  rob = cells.get("robust", [])
  if rob:
    tables["inner"] = {
      "queries": t_interval([c["inner_oracle_queries"] for c in rob]),
      "checks": t_interval([c["inner_classical_checks"] for c in rob]),
      "set_size": rob[0]["inner_queries_exhaustive"],
      "exact": float(np.mean([c["inner_exact_fraction"] for c in rob])),
      "selections": sum(c["selections"] for c in rob),
    }
  _write_if_changed(root / "table.md", markdown(tables))
  buf = io.StringIO()
  w = csv.writer(buf, lineterminator="\n")
  w.writerow(["arm", "seed", "heldout_mean_return", "heldout_worst_return", "train_env_steps"])
  for arm, cs in cells.items():
    for c in cs:
      w.writerow(
        [arm, c["seed"], c["heldout_mean_return"], min(c["heldout_returns"]), c["train_env_steps"]]
      )
  _write_if_changed(root / "ppo_cells.csv", buf.getvalue())
  buf = io.StringIO()
  w = csv.writer(buf, lineterminator="\n")
  w.writerow(["seed", "part", "n", "oracle_queries", "classical_checks", "accuracy"])
  for c in backup:
    for r in c["query_scaling"]:
      w.writerow(
        [c["seed"], "minimum", r["n"], r["queries"][0], r["measurements"][0], r["success"]]
      )
    for t in c["tabular"]:
      w.writerow(
        [
          c["seed"],
          "backup",
          t["n"],
          t["queries_per_backup_quantum"],
          t["classical_checks_per_backup_quantum"],
          1 - t["mismatch_rate"],
        ]
      )
  _write_if_changed(root / "backup_cells.csv", buf.getvalue())
  if backup and (not (root / "queries.png").exists() or _stale(root)):
    _plot(root / "queries.png", tables["backup"])
  return tables


def _stale(root: pathlib.Path) -> bool:
  """The plot is older than a backup cell (one finished after it was drawn)."""
  png = root / "queries.png"
  if not png.exists():
    return False
  cells = list((root / "cells" / "backup").glob("s*/summary.json"))
  return any(p.stat().st_mtime > png.stat().st_mtime for p in cells)


def _plot(path: pathlib.Path, bk: dict) -> None:
  ns = np.asarray([r["n"] for r in bk["scaling"]])
  tn = np.asarray([r["n"] for r in bk["tabular"]])
  band = lambda rows: tuple(np.asarray([[r["n"], *r["queries"]] for r in rows]).T)
  curves = {
    "classical (|U|)": (ns, ns.astype(float)),
    "quantum, one minimum: oracle queries": band(bk["scaling"]),
    "quantum, tabular robust backup": band(bk["tabular"]) if len(tn) else (tn, tn),
  }
  title = f"95% t-interval over {bk['n_seeds']} seeds"
  plots.lines(path, curves, "|U|", "queries per inner minimum", logx=True, logy=True, title=title)
