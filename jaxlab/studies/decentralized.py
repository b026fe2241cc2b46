"""Decentralized SGD studies (docs/decentralized.md): each a claim of its paper, declared first.

``decentralized/speed``: on the 20 cells of the sweep (five irregular graphs × λ ∈ {degree,
Dir(5), Dir(1), Dir(0.5)}, n = 16, least squares d = 10, m = 20), Strategy (I) and (II) with
minibatch-5 stochastic gradients, each at its own best step: the fraction of its own full-gradient
stability limit chosen from `speed.FRACTIONS` (5 points) on the tuning seeds, once with a constant
step and once with the decaying step γ_k = γ₀ / (1 + k / 100). An arm is ``<topology>.<λ>.<I|II>``;
its held-out seeds run in one vmapped scan (seed k: problem instance k, SGD key k, the same for both
strategies, so the pairs are paired). Metrics: ``auc_<schedule>`` (the mean log₁₀ gap over the
2,000 steps) and ``steps_<schedule>`` (the first step whose gap is at most 1 % of the initial gap;
2,001 when never reached); lower is faster. Each record also carries the cell's L²(λ) quantities
(`speed.cell_quantities`) and the reconstructed condition. `write_conditions` turns the table into
``conditions.md``: the verdict per condition class and how well the condition predicts the winner.
"""

from __future__ import annotations

import csv
import json
import math
import pathlib

import numpy as np

from jaxlab.core import stats
from jaxlab.core.errors import require
from jaxlab.studies.spec import Study

CLAIM = (
  "Under stated conditions the λ-induced row-stochastic strategy (II) converges faster than the "
  "doubly stochastic strategy (I), even with a smaller spectral gap, because (I)'s matrix is not "
  "self-adjoint in L²(λ) (Liu, Kong, Lu, Yuan, Zhao, arXiv 2511.19513, abstract)."
)
TOPOLOGIES = ("path", "grid", "star", "erdos_renyi", "barabasi_albert")
LAMS = {"degree": ("degree", 1.0), "dir5": ("dirichlet", 5.0), "dir1": ("dirichlet", 1.0)}
LAMS["dir0.5"] = ("dirichlet", 0.5)
STRATEGIES = ("I", "II")
STEPS, BATCH, DECAY_K0, TARGET = 2000, 5, 100.0, 0.01
SCHEDULES = {"constant": 0.0, "decay": DECAY_K0}  # schedule -> k₀ (0: constant)
TUNING_SEEDS = (0, 1, 2, 3)
SEEDS = tuple(range(10, 22))
METRICS = ("auc_constant", "auc_decay", "steps_constant", "steps_decay")
CELLS = tuple(f"{t}.{lam}" for t in TOPOLOGIES for lam in LAMS)
ARMS = tuple(f"{c}.{s}" for c in CELLS for s in STRATEGIES)


def parse_arm(arm: str) -> tuple[str, str, str]:
  """``<topology>.<λ>.<strategy>`` -> (topology, λ label, strategy)."""
  topology, rest = arm.split(".", 1)
  lam, strategy = rest.rsplit(".", 1)
  return topology, lam, strategy


def cell_setup(topology: str, lam: str, seeds):
  """(graph, λ, {seed: problem}) of a cell: the sweep's graph and λ (`dec.get_config()`), each
  seed's least-squares instance with minibatch ``BATCH``."""
  from jaxlab.optim import decentralized as dec
  from jaxlab.optim.decentralized import compare

  config = dec.get_config()
  graph = compare.make_graph(config, topology)
  problems = {
    s: compare.make_problem(config, "least_squares", s).replace(batch_size=BATCH) for s in seeds
  }
  lam_vec = compare.cell_lambda(config, graph, LAMS[lam], problems[seeds[0]])
  return graph, lam_vec, problems


def _metrics(gaps: np.ndarray, d0: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  from jaxlab.optim.decentralized import speed

  return speed.log_gap_auc(gaps), speed.steps_to_target(gaps, TARGET * d0)


def speed_cell(arm: str, seeds: tuple[int, ...], workdir: pathlib.Path) -> dict[int, dict]:
  """Tunes the arm's step fraction per schedule on `TUNING_SEEDS` (lowest mean ``auc``), then runs
  ``seeds`` at those fractions (one vmapped scan); returns each seed's record."""
  from jaxlab.optim.decentralized import speed, stability

  topology, lam, strategy = parse_arm(arm)
  graph, lam_vec, problems = cell_setup(topology, lam, (*TUNING_SEEDS, *seeds))
  quantities = speed.cell_quantities(graph, lam_vec)
  limits = {
    s: stability.largest_stable_lr(strategy, graph, lam_vec, p, rel_tol=0.05)
    for s, p in problems.items()
  }
  d0 = {s: float(p.global_loss(p.x0, lam_vec) - p.f_star(lam_vec)) for s, p in problems.items()}
  tune = [(s, f, k0) for k0 in SCHEDULES.values() for f in speed.FRACTIONS for s in TUNING_SEEDS]
  gaps = speed.run_grid(strategy, graph, lam_vec, problems, tune, STEPS, limits=limits)
  auc = speed.log_gap_auc(gaps).reshape(len(SCHEDULES), len(speed.FRACTIONS), -1).mean(-1)
  chosen = {name: speed.FRACTIONS[int(np.argmin(auc[i]))] for i, name in enumerate(SCHEDULES)}
  runs = [(s, chosen[name], k0) for name, k0 in SCHEDULES.items() for s in seeds]
  gaps = speed.run_grid(strategy, graph, lam_vec, problems, runs, STEPS, limits=limits)
  a, hit = _metrics(gaps, np.array([d0[s] for s, _, _ in runs]))
  config = {
    "arm": arm,
    "topology": topology,
    "lam": lam,
    "strategy": strategy,
    "n": graph.n,
    "problem": "least_squares",
    "batch_size": BATCH,
    "fractions": list(speed.FRACTIONS),
    "decay_k0": DECAY_K0,
    "target": TARGET,
    "tuning_seeds": list(TUNING_SEEDS),
    "chosen_fraction": chosen,
    "tuning_auc": {name: auc[i].tolist() for i, name in enumerate(SCHEDULES)},
  }
  out = {}
  for j, s in enumerate(seeds):
    rec = {"config": config, "steps": STEPS, "grid_points": len(speed.FRACTIONS), **quantities}
    rec["lr_limit"] = limits[s]
    rec["initial_gap"] = d0[s]
    for i, name in enumerate(SCHEDULES):
      k = i * len(seeds) + j
      rec[f"auc_{name}"] = float(a[k])
      rec[f"steps_{name}"] = int(hit[k])
      rec[f"lr_{name}"] = chosen[name] * limits[s]
      rec[f"final_gap_{name}"] = float(gaps[k, -1])
    out[s] = rec
  return out


STUDY = Study(
  name="decentralized/speed",
  claim=CLAIM,
  arms=ARMS,
  control=ARMS[0],
  pairs=tuple((f"{c}.II", f"{c}.I") for c in CELLS),
  seeds=SEEDS,
  tuning_seeds=TUNING_SEEDS,
  budget={"steps": STEPS, "grid_points": 5},
  tests=tuple(stats.Test("superiority", m, higher_is_better=False) for m in METRICS),
  metrics=METRICS,
  cell=speed_cell,
  note=(
    "n = 16 nodes, least squares (d = 10, m = 20 rows per node, each seed its own instance), "
    "minibatch 5 per node, 2,000 steps, ATC; (I): Metropolis W with losses n λ_i f_i; (II): the "
    "λ-Metropolis-Hastings A (degree averaging for λ ∝ degree + 1). Each arm's step is a fraction "
    "of its own full-gradient stability limit, chosen from 0.9 x (1/81, 1/27, 1/9, 1/3, 1) on "
    "tuning seeds 0-3 by the lowest mean auc, separately for the constant and the decaying "
    "(γ₀ / (1 + k / 100)) schedule. auc_*: mean log10 of f(x̄_λ) − f* over the steps; steps_*: "
    "first step with f(x̄_λ) − f* ≤ 1 % of its initial value (2,001: not reached). Lower is faster "
    "for all four. Each pair is one cell (II against I); the runner adjusts each pair's p-value "
    "over the 80 comparisons (4 metrics x 20 cells) alone, which is Bonferroni; conditions.md "
    "applies Holm over the same 80 and groups the cells by the reconstructed condition."
  ),
)
STUDIES = (STUDY,)


# ------------------------------------------------------------------------------------------------
# conditions.md: the verdict per condition class (built from raw files and table.csv only).


def _cell_rows(study: Study, results: pathlib.Path) -> list[dict]:
  path = results / "table.csv"
  msg = f"{path} is missing: run python -m experiments.study {study.name} (or --table) first"
  require(path.is_file(), "results", msg)
  tests = {}
  with open(path) as f:
    for r in csv.DictReader(f):
      if r["section"] == "test":
        tests[(r["arm"], r["metric"])] = r
  keys = [k for k in tests if not math.isnan(float(tests[k]["p"]))]
  holm = dict(zip(keys, stats.holm([float(tests[k]["p"]) for k in keys], len(keys)), strict=True))
  rows = []
  for cell in CELLS:
    raw = results / "raw" / f"{cell}.II" / f"seed{study.seeds[0]}.json"
    if not raw.exists():
      continue
    q = json.loads(raw.read_text())
    row = {"cell": cell, **{k: q[k] for k in _QUANTITIES}}
    for m in METRICS:
      t = tests.get((f"{cell}.II", m))
      if t is None:
        continue
      diff = float(t["diff"].split()[0])
      p = holm.get((f"{cell}.II", m), math.nan)
      row[f"{m}: II − I"] = t["diff"]
      row[f"{m}: Holm p"] = p
      row[f"{m}: faster"] = "II" if diff < 0 else "I"
      row[f"{m}: II shown"] = bool(p < 0.05 and diff < 0)
      row[f"{m}: I shown"] = bool(p < 0.05 and diff > 0)
    rows.append(row)
  return rows


_QUANTITIES = (
  "gap_W",
  "gap_lam_A",
  "rho_lam_W",
  "rho_lam_A",
  "asym_W",
  "penalty_W",
  "condition_II",
  "gap_predicts_II",
)


def _fmt(v) -> str:
  if isinstance(v, bool):
    return "yes" if v else "no"
  if isinstance(v, float):
    return f"{v:.3g}"
  return str(v)


def conditions_markdown(study: Study = STUDY, results=None) -> str:
  """conditions.md of ``study`` from its raw files and table.csv."""
  results = pathlib.Path(results) if results is not None else study.results
  rows = _cell_rows(study, results)
  out = [
    f"# {study.name}: the verdict per condition class",
    "",
    "Built from `raw/` and `table.csv` by `python -m experiments.decentralized "
    "--study_conditions`: do not edit. Condition (reconstruction, docs/decentralized.md): "
    "ρ_λ(A) ≤ ρ_λ(W) < 1; gap-only prediction: gap_λ(A) > gap(W). Holm p: over all "
    f"{sum(f'{m}: Holm p' in r for r in rows for m in METRICS)} tested comparisons. "
    "'faster': the sign of the mean paired difference (II − I < 0: II).",
    "",
  ]
  for m in METRICS:
    have = [r for r in rows if f"{m}: faster" in r]
    if not have:
      continue
    out += [f"## {m}", ""]
    for holds in (True, False):
      cls = [r for r in have if r["condition_II"] == holds]
      shown = sum(r[f"{m}: II shown"] for r in cls)
      worse = sum(r[f"{m}: I shown"] for r in cls)
      faster = sum(r[f"{m}: faster"] == "II" for r in cls)
      label = "holds" if holds else "does not hold"
      out.append(
        f"- condition {label} ({len(cls)} cells): (II) shown faster (Holm p < 0.05) in {shown}, "
        f"faster on the mean in {faster}; (I) shown faster in {worse}"
      )
    for name, key in (("condition", "condition_II"), ("gap only", "gap_predicts_II")):
      tp = sum(r[key] and r[f"{m}: faster"] == "II" for r in have)
      fp = sum(r[key] and r[f"{m}: faster"] == "I" for r in have)
      fn = sum((not r[key]) and r[f"{m}: faster"] == "II" for r in have)
      tn = sum((not r[key]) and r[f"{m}: faster"] == "I" for r in have)
      out.append(
        f"- {name} predicts the faster strategy in {tp + tn}/{len(have)} cells "
        f"(predicts II: {tp} right, {fp} wrong; predicts I: {tn} right, {fn} wrong)"
      )
    out.append("")
  cols = ["cell", *_QUANTITIES]
  for m in METRICS:
    cols += [f"{m}: II − I", f"{m}: Holm p"]
  out += ["## Cells", "", stats.markdown([{k: _fmt(r.get(k, "")) for k in cols} for r in rows])]
  return "\n".join(out) + "\n"


def write_conditions(study: Study = STUDY, results=None) -> pathlib.Path:
  """Writes ``conditions.md`` next to the study's table; returns its path."""
  results = pathlib.Path(results) if results is not None else study.results
  path = results / "conditions.md"
  path.write_text(conditions_markdown(study, results))
  return path
