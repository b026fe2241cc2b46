"""Strategy (I) vs (II) on one (graph, λ) and the verdicts a comparison reports (arXiv 2511.19513;
docs/decentralized.md, "Experiment").

The runs of ``python -m experiments.decentralized`` are `run_single` (one (graph, λ): plots,
metrics.csv, diagnostic.md, rates.md, summary.json) and `run_sweep` (topologies × λ: sweep.md);
``validate_config`` checks the config and returns the cells. Below them, pure functions on
`RunResult`s and arrays, so a notebook reaches the same verdicts::

    from jaxlab.optim import decentralized as dec
    from jaxlab.optim.decentralized import compare
    g = graphs.make_graph("ring", 8)
    prob = problems.make_problem("least_squares", 8)
    c = compare.compare(g, problems.make_lambda("degree", g), prob, 500, key=jax.random.key(0))
    compare.winner(c.results, "gap", tie_tol=0.05, tail=0.1)   # "I", "II", "tie", ...

Rules: numbers are means over the last ``tail`` fraction of steps; a relative difference within
``tie_tol`` is a tie; a strategy whose iterates reached NaN/inf never wins; uniform λ with A = W is
"identical (A = W)" (the two strategies are then the same algorithm, not a tie) and a sweep lists
such cells instead of comparing them.

Step policies (``lr_policy``): "same" runs both strategies at one γ (by default
`driver.default_lr`, inside (I)'s stability limit: that measures constant-step bias, not speed);
"own" runs each at ``own_fraction`` × its own largest stable step (`stability.largest_stable_lr`,
exact for full-gradient least squares). Rates are reported as the gap after `RATE_STEPS` steps and
the linear rate ρ of the full-gradient iteration at the step used.
"""

from __future__ import annotations

import dataclasses
import pathlib
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import numpy as np

from jaxlab.core import metrics, plots, runtime
from jaxlab.core import seeds as seeds_lib
from jaxlab.core.errors import check_choice
from jaxlab.optim.decentralized import algorithms, driver, geometry, graphs, problems, stability
from jaxlab.optim.decentralized import config as config_lib
from jaxlab.optim.decentralized.config import LR_POLICIES
from jaxlab.optim.report import fmt, md_table, tail_mean

METRICS = ("gap", "consensus", "gap_tracked")
RATE_STEPS = (10, 100, 1000)
IDENTICAL = "identical (A = W)"
DIAG_COLS = (
  "n_max_lam",
  "gap_W",
  "rho_lam_W",
  "asym_W",
  "gap_lam_A",
  "rho_lam_A",
  "asym_A",
  "loewner_min",
  "loewner_max",
  "rayleigh_min",
  "rayleigh_max",
  "predict_II",
)
SWEEP_DIAG = ("n_max_lam", "gap_W", "gap_lam_A", "rho_lam_W", "rho_lam_A", "predict_II")
SWEEP_COLS = (
  "topology",
  "lam",
  "n_max_lam",
  "gap_W",
  "gap_lam_A",
  "rho_lam_W",
  "rho_lam_A",
  "lr_I",
  "lr_II",
  "gap_I@100",
  "gap_II@100",
  "gap_I",
  "gap_II",
  "cons_I",
  "cons_II",
  "winner_gap",
  "winner_cons",
  "predict_II",
)


@dataclasses.dataclass
class Comparison:
  """Both strategies on one (graph, λ): results by strategy ("II" absent on a directed graph),
  the `diagnose` dict, the common step γ (NaN under lr_policy "own"), λ, and per strategy the
  step used (``lrs``) and, for least squares, its largest stable step and the full-gradient linear
  rate ρ at the step used (``limits``: {strategy: {"lr_max", "rho"}})."""

  results: dict[str, driver.RunResult]
  diagnostic: dict[str, Any]
  lr: float
  lam: np.ndarray
  lrs: dict[str, float] = dataclasses.field(default_factory=dict)
  limits: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)
  # several seeds (`combine`): each seed's own comparison and problem; the fields above are then
  # the means over seeds
  per_seed: dict[int, Comparison] = dataclasses.field(default_factory=dict)
  problems: dict[int, Any] = dataclasses.field(default_factory=dict)


def compare(
  graph: graphs.Graph,
  lam,
  problem: problems.Problem,
  steps: int,
  *,
  key,
  lr: float | None = None,
  lr_factor: float | None = None,
  order: str | None = None,
  row_kind: str | None = None,
  mesh=None,
  comm: str | None = None,
  lr_policy: str | None = None,
  own_fraction: float | None = None,
) -> Comparison:
  """Runs (I) and (II) with the same key and f*: at one γ (``lr``, or `driver.default_lr` when
  None/0) under ``lr_policy="same"``, at ``own_fraction`` × each one's largest stable step under
  "own" (least squares only). An option left None is the `get_config()` field of that name."""
  opts = _options(lr_factor, order, row_kind, comm, lr_policy, own_fraction)
  plan = _plan(graph, lam, problem, lr, opts)
  results = {
    s: driver.run(
      s,
      graph,
      plan["lam"],
      problem,
      steps,
      plan["lrs"][s],
      key=key,
      order=opts["order"],
      row_kind=opts["row_kind"],
      mesh=mesh,
      comm=opts["comm"],
      f_star=plan["f_star"],
    )
    for s in plan["strategies"]
  }
  return Comparison(results, plan["diag"], plan["common"], plan["lam"], plan["lrs"], plan["limits"])


def compare_seeds(
  graph: graphs.Graph,
  lams: Sequence,
  problems: Sequence[problems.Problem],
  steps: int,
  *,
  keys,
  lr: float | None = None,
  lr_factor: float | None = None,
  order: str | None = None,
  row_kind: str | None = None,
  lr_policy: str | None = None,
  own_fraction: float | None = None,
) -> list[Comparison]:
  """`compare` for several seeds at once (one device): seed i has its own λ ``lams[i]``, problem
  ``problems[i]`` and key ``keys[i]`` (a key array), so its own steps and optimum; each strategy
  runs every seed in ONE vmapped scan (`driver.run_seeds`). Returns each seed's `Comparison`, equal
  to `compare` of that seed alone up to the floating-point order of batched kernels."""
  opts = _options(lr_factor, order, row_kind, None, lr_policy, own_fraction)
  plans = [_plan(graph, lam, prob, lr, opts) for lam, prob in zip(lams, problems, strict=True)]
  runs = {
    s: driver.run_seeds(
      s,
      graph,
      [p["lam"] for p in plans],
      list(problems),
      steps,
      [p["lrs"][s] for p in plans],
      keys=keys,
      order=opts["order"],
      row_kind=opts["row_kind"],
      f_stars=[p["f_star"] for p in plans],
    )
    for s in plans[0]["strategies"]
  }
  return [
    Comparison(
      {s: r[i] for s, r in runs.items()}, p["diag"], p["common"], p["lam"], p["lrs"], p["limits"]
    )
    for i, p in enumerate(plans)
  ]


def combine(comps: Sequence[Comparison], graph: graphs.Graph, row_kind: str = "auto") -> Comparison:
  """The comparison of several seeds' runs as one: per-step means over seeds of every curve (a
  strategy counts as diverged from the first step any seed diverged, where its mean turns NaN),
  the mean steps, limits and λ. The diagnostic is the seeds' when they share λ, else that of
  the mean λ (λ differs between seeds only when it follows each seed's data, ``--lam=data``).
  The runs' iterates (``x``) are not combined: score each seed's own (`final_metrics`)."""
  first = comps[0]
  mean = lambda xs: float(np.mean(xs))

  def run(s):
    rs = [c.results[s] for c in comps]
    gone = [r.diverged_at for r in rs if r.diverged_at is not None]
    return driver.RunResult(
      **{m: np.mean([getattr(r, m) for r in rs], axis=0) for m in METRICS},
      x=None,
      mixing=np.mean([r.mixing for r in rs], axis=0),
      f_star=mean([r.f_star for r in rs]),
      comm=rs[0].comm,
      diverged_at=min(gone) if gone else None,
    )

  same_lam = all(np.array_equal(c.lam, first.lam) for c in comps)
  lam = first.lam if same_lam else np.mean([c.lam for c in comps], axis=0)
  lam = lam / lam.sum()
  diag = first.diagnostic if same_lam else geometry.diagnose(graph, lam, row_kind=row_kind)
  limits = {
    s: {k: mean([c.limits[s][k] for c in comps]) for k in first.limits[s]} for s in first.limits
  }
  return Comparison(
    {s: run(s) for s in first.results},
    diag,
    mean([c.lr for c in comps]),
    first.lam if same_lam else lam,
    {s: mean([c.lrs[s] for c in comps]) for s in first.lrs},
    limits,
  )


def _options(lr_factor, order, row_kind, comm, lr_policy, own_fraction) -> dict:
  """`compare`'s options, each None replaced by the `config_lib.get_config()` field of that name."""
  defaults = config_lib.get_config()
  given = dict(lr_factor=lr_factor, order=order, row_kind=row_kind, comm=comm)
  given.update(lr_policy=lr_policy, own_fraction=own_fraction)
  opts = {k: defaults[k] if v is None else v for k, v in given.items()}
  check_choice("lr_policy", opts["lr_policy"], LR_POLICIES)
  return opts


def _plan(graph, lam, problem, lr, opts) -> dict:
  """Everything a comparison fixes before running: λ, the strategies, each one's step (and, for
  least squares, stability limit and linear rate), the diagnostic and f*."""
  order, row_kind = opts["order"], opts["row_kind"]
  lam = np.asarray(lam, np.float64)
  strategies = [s for s in algorithms.STRATEGIES if not (s == "II" and graph.directed)]
  limits = stability_limits(graph, lam, problem, strategies, order, row_kind)
  if opts["lr_policy"] == "own":
    lrs = {s: opts["own_fraction"] * limits[s]["lr_max"] for s in strategies}
    common = float("nan")
  else:
    common = float(lr or driver.default_lr(problem, lam, opts["lr_factor"]))
    lrs = dict.fromkeys(strategies, common)
  for s in limits:
    limits[s]["rho"] = stability.spectral_radius(
      s, graph, lam, problem, lrs[s], order=order, row_kind=row_kind
    )
  diag = geometry.diagnose(graph, lam, row_kind=row_kind)
  plan = dict(lam=lam, strategies=strategies, limits=limits, lrs=lrs, common=common, diag=diag)
  return plan | {"f_star": problem.f_star(lam)}


def stability_limits(graph, lam, problem, strategies, order, row_kind) -> dict[str, dict]:
  """{strategy: {"lr_max": largest stable step}} for least squares, {} otherwise."""
  if problem.name != "least_squares":
    return {}
  return {
    s: {
      "lr_max": stability.largest_stable_lr(s, graph, lam, problem, order=order, row_kind=row_kind)
    }
    for s in strategies
  }


def gap_at(result: driver.RunResult, step: int) -> float | str:
  """f(x̄_λ) − f* after ``step`` steps ("diverged" once non-finite, "n/a" past the run)."""
  if step > len(result.gap):
    return "n/a"
  if result.diverged_at is not None and result.diverged_at <= step:
    return "diverged"
  return float(result.gap[step - 1])


def rate_rows(comp: Comparison, label: str, *, tail: float) -> list[dict[str, Any]]:
  """Per strategy: the step used, its stability limit and linear rate ρ (least squares), the gap
  after each of `RATE_STEPS` steps and the tail gap: error against iterations."""
  rows = []
  for s, r in comp.results.items():
    lim = comp.limits.get(s, {})
    row = {"run": label, "strategy": s, "lr": comp.lrs.get(s, comp.lr)}
    row |= {"lr_max": lim.get("lr_max", "n/a"), "rho": lim.get("rho", "n/a")}
    row |= {f"gap@{k}": gap_at(r, k) for k in RATE_STEPS}
    row["gap_tail"] = "diverged" if r.diverged_at is not None else tail_mean(r.gap, tail)
    rows.append(row)
  return rows


RATE_COLS = ("run", "strategy", "lr", "lr_max", "rho") + tuple(f"gap@{k}" for k in RATE_STEPS)
RATE_COLS += ("gap_tail",)


def identical(results: Mapping[str, driver.RunResult], lam) -> bool:
  """Uniform λ (n λ_i = 1) and A = W: the two strategies are the same algorithm."""
  if "II" not in results:
    return False
  same = np.array_equal(results["I"].mixing, results["II"].mixing)
  return bool(same and np.allclose(lam, 1.0 / len(lam), rtol=1e-12, atol=0))


def identical_cell(graph: graphs.Graph, lam, row_kind: str = "auto") -> bool:
  """Whether (graph, λ) makes the strategies the same algorithm before running them: uniform λ
  (then n λ_i = 1) and A = W (uniform λ-MH is Metropolis; degree λ on a regular graph is
  uniform)."""
  lam = np.asarray(lam, np.float64)
  if graph.directed or not np.allclose(lam, 1.0 / len(lam), rtol=1e-12, atol=0):
    return False
  a = graphs.row_stochastic(graph, lam, row_kind)
  return bool(np.allclose(a, graphs.metropolis(graph), rtol=0, atol=1e-12))


def diverged(results: Mapping[str, driver.RunResult]) -> dict[str, bool]:
  return {s: r.diverged_at is not None for s, r in results.items()}


def all_diverged(results: Mapping[str, driver.RunResult]) -> bool:
  return all(diverged(results).values())


def winner(
  results: Mapping[str, driver.RunResult],
  metric: str,
  *,
  tie_tol: float,
  tail: float,
  same: bool = False,
) -> str:
  """ "I", "II", "tie", `IDENTICAL`, or a verdict naming the diverged / missing strategy.

  ``same``: the runs are the same algorithm (see `identical`); a diverged strategy never wins.
  """
  if same:
    return IDENTICAL
  div = diverged(results)
  if "II" not in results:
    return "I (II n/a)" if not div["I"] else "none (I diverged, II n/a)"
  if div["I"] and div["II"]:
    return "none (both diverged)"
  if div["I"] or div["II"]:
    return "II (I diverged)" if div["I"] else "I (II diverged)"
  i, ii = (tail_mean(getattr(results[s], metric), tail) for s in ("I", "II"))
  if abs(i - ii) <= tie_tol * max(abs(i), abs(ii)):
    return "tie"
  return "II" if ii < i else "I"


def winners(comp: Comparison, *, tie_tol: float, tail: float) -> dict[str, str]:
  """{"gap": verdict, "consensus": verdict} for one comparison."""
  same = identical(comp.results, comp.lam)
  return {
    m: winner(comp.results, m, tie_tol=tie_tol, tail=tail, same=same) for m in ("gap", "consensus")
  }


def verdicts(
  comp: Comparison, problem: problems.Problem, *, tie_tol: float, tail: float
) -> dict[str, Any]:
  """The summary of one comparison: per-strategy `final_metrics`, the diagnostic and the winners
  on the gap and on the consensus error."""
  win = winners(comp, tie_tol=tie_tol, tail=tail)
  return {
    "final": final_metrics(comp, problem, tail),
    "diagnostic": comp.diagnostic,
    "winner_gap": win["gap"],
    "winner_consensus": win["consensus"],
  }


def final_metrics(comp: Comparison, problem: problems.Problem, tail: float) -> dict[str, dict]:
  """Per strategy: tail means of `METRICS`, comm, diverged_at and (classification problems that
  stayed finite) the test accuracy of x̄_λ; for a `combine`d comparison, the mean over seeds of
  each seed's accuracy on its own held-out set."""
  final = {}
  for s, r in comp.results.items():
    final[s] = {m: tail_mean(getattr(r, m), tail) for m in METRICS}
    final[s].update(comm=r.comm, diverged_at=r.diverged_at)
    if problem.test is None or r.diverged_at is not None:
      continue
    if comp.per_seed:
      each = [final_metrics(c, comp.problems[k], tail)[s] for k, c in comp.per_seed.items()]
      final[s]["test_accuracy"] = float(np.mean([f["test_accuracy"] for f in each]))
    else:
      xbar = jax.tree.map(lambda v: np.tensordot(comp.lam, np.asarray(v), 1), r.x)
      final[s]["test_accuracy"] = problem.accuracy(xbar)
  return final


def metric_rows(results: Mapping[str, driver.RunResult], every: int) -> list[dict[str, Any]]:
  """Rows of metrics.csv: step (1-based) and ``<metric>_<strategy>`` every ``every`` steps."""
  steps = len(next(iter(results.values())).gap)
  return [
    {"step": k + 1, **{f"{m}_{s}": getattr(r, m)[k] for s, r in results.items() for m in METRICS}}
    for k in range(0, steps, every)
  ]


def lambda_label(name: str, alpha: float) -> str:
  return name + (f":{alpha:g}" if name == "dirichlet" else "")


def sweep_row(
  topology: str, lam_label: str, comp: Comparison, *, tie_tol: float, tail: float
) -> dict[str, Any]:
  """One cell of the topology × λ table: tail numbers ("diverged" / "n/a"), verdicts, diagnostic."""

  def tail_or(s, metric):
    r = comp.results.get(s)
    if r is None:
      return "n/a"
    return "diverged" if r.diverged_at is not None else tail_mean(getattr(r, metric), tail)

  def at_100(s):
    r = comp.results.get(s)
    return "n/a" if r is None else gap_at(r, 100)

  win = winners(comp, tie_tol=tie_tol, tail=tail)
  return {
    "topology": topology,
    "lam": lam_label,
    "lr_I": comp.lrs.get("I", comp.lr),
    "lr_II": comp.lrs.get("II", "n/a"),
    "gap_I@100": at_100("I"),
    "gap_II@100": at_100("II"),
    "gap_I": tail_or("I", "gap"),
    "gap_II": tail_or("II", "gap"),
    "cons_I": tail_or("I", "consensus"),
    "cons_II": tail_or("II", "consensus"),
    "winner_gap": win["gap"],
    "winner_cons": win["consensus"],
    **{k: comp.diagnostic[k] for k in SWEEP_DIAG},
  }


def sweep_stats(rows: Sequence[Mapping[str, Any]], identical_cells: Sequence[str] = ()) -> dict:
  """Cells where II wins the gap, identical cells (rows marked so plus the ``identical_cells`` a
  sweep skipped), and how often ``predict_II`` matches a decided (I or II) winner."""
  decided = [r for r in rows if r["winner_gap"] in ("I", "II")]
  marked = sum(r["winner_gap"].startswith("identical") for r in rows)
  return {
    "cells": len(rows),
    "II_wins": sum(r["winner_gap"] == "II" for r in rows),
    "identical": marked + len(identical_cells),
    "decided": len(decided),
    "agree": sum((r["winner_gap"] == "II") == r["predict_II"] for r in decided),
  }


def sweep_summary(rows: Sequence[Mapping[str, Any]], identical_cells: Sequence[str] = ()) -> dict:
  """The rows and their counts, as summary.json of a sweep stores them."""
  st = sweep_stats(rows, identical_cells)
  return {
    "rows": list(rows),
    "identical_not_compared": list(identical_cells),
    "II_wins_gap": st["II_wins"],
    "cells": st["cells"],
    "predict_agreement": [st["agree"], st["decided"]],
  }


def sweep_line(row: Mapping[str, Any]) -> str:
  """One progress line of a sweep: topology, λ, both tail gaps and the verdict."""
  return (
    f"{row['topology']:>22s} {row['lam']:>14s}  bias I {fmt(row['gap_I'])}  "
    f"II {fmt(row['gap_II'])}  -> lower: {row['winner_gap']}"
  )


# The tail of a constant-step run is its constant-step bias (on the default cell (I)'s gap is
# 7.36e-4 after 1,000 steps and 7.35e-4 after 4,000), not its speed: the sweep's table names the
# columns so (the speed study is jaxlab.studies.decentralized).
BIAS_HEADERS = {
  "gap_I": "bias_I",
  "gap_II": "bias_II",
  "cons_I": "cons_bias_I",
  "cons_II": "cons_bias_II",
  "winner_gap": "lower_bias",
  "winner_cons": "lower_cons_bias",
}


def bias_rows(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
  """The sweep's rows with the tail columns named for what they are (`BIAS_HEADERS`)."""
  return [{BIAS_HEADERS.get(k, k): v for k, v in r.items()} for r in rows]


def sweep_markdown(
  rows: Sequence[Mapping[str, Any]],
  title: str,
  *,
  tail: float,
  tie_tol: float,
  identical_cells: Sequence[str] = (),
):
  """sweep.md: a heading, what the numbers mean, the counts, then the constant-step bias table."""
  st = sweep_stats(rows, identical_cells)
  same = (
    f" Not compared, because the two strategies are the same algorithm there (uniform λ and "
    f"A = W): {', '.join(identical_cells)}."
    if identical_cells
    else ""
  )
  cols = [BIAS_HEADERS.get(c, c) for c in SWEEP_COLS]
  return (
    f"# Constant-step bias: {title}\n\n"
    f"gap_I@100 / gap_II@100: f(x̄_λ) − f* after 100 steps; bias_I / bias_II and cons_bias_I / "
    f"cons_bias_II: f(x̄_λ) − f* and Σλ‖x_i − x̄_λ‖² averaged over the last {tail:.0%} of steps, "
    f"i.e. the constant-step bias (flat long before the run ends), not the speed; rho_*: "
    f"consensus contraction factors; 'tie' = within {tie_tol:.0%}; a diverged strategy never "
    f"wins. II has the lower bias in {st['II_wins']}/{st['cells']} compared cells.{same} "
    f"predict_II (gap_λ(A) > gap(W), a heuristic, not the paper's condition) matches the decided "
    f"winner in {st['agree']}/{st['decided']} cells. Speed: docs/decentralized.md, speed study.\n\n"
    + md_table(bias_rows(rows), cols)
  )


def diagnostic_markdown(graph: graphs.Graph, lam_label: str, diag: Mapping[str, Any]) -> str:
  return (
    f"Diagnostic for {graph.name} (n={graph.n}), λ={lam_label} "
    "(reconstructed quantities; see jaxlab/optim/decentralized/geometry.py)\n\n"
    + md_table([{"graph": graph.name, **diag}], ("graph",) + DIAG_COLS)
  )


def final_lines(final: Mapping[str, Mapping[str, Any]]) -> list[str]:
  """One human-readable line per strategy (diverged, or gap / consensus / test accuracy)."""
  lines = []
  for s, v in final.items():
    if v["diverged_at"] is not None:
      lines.append(f"Strategy {s}: diverged (non-finite from step {v['diverged_at']})")
      continue
    acc = f"  test acc {v['test_accuracy']:.3f}" if "test_accuracy" in v else ""
    lines.append(f"Strategy {s}: f(x̄_λ)−f* {v['gap']:.3e}  consensus {v['consensus']:.3e}{acc}")
  return lines


def plot_curves(workdir, comp: Comparison, title: str) -> None:
  """gap.png and consensus.png: both strategies' per-step curves on a log scale."""
  steps = np.arange(1, len(comp.results["I"].gap) + 1)
  label = {"I": "I: nλ_i f_i + doubly stochastic W", "II": "II: f_i + λ-reversible A"}
  for name, metric, ylabel, floor in (
    ("gap.png", "gap", "f(x̄_λ) − f*", 1e-12),
    ("consensus.png", "consensus", "Σ λ_i ‖x_i − x̄_λ‖²", 1e-16),
  ):
    curves = {
      label[s]: (steps, np.maximum(getattr(r, metric), floor)) for s, r in comp.results.items()
    }
    plots.lines(pathlib.Path(workdir) / name, curves, "step", ylabel, logy=True, title=title)


# ------------------------------------------------------------------------------------------------
# The runs of `python -m experiments.decentralized` (config: `config_lib.get_config()`).


def make_graph(config, topology: str) -> graphs.Graph:
  """The graph of ``topology`` with config.n nodes (config.er_p, config.graph_seed)."""
  return graphs.make_graph(topology, config.n, p=config.er_p, seed=config.graph_seed)


def make_problem(config, problem: str, seed: int) -> problems.Problem:
  """``problem`` on config.n nodes: least squares of config.dim x config.rows, else the digits
  split with config.split_alpha; config.batch_size per-node minibatch."""
  kw = {"batch_size": config.batch_size, "seed": seed}
  if problem == "least_squares":
    return problems.make_problem("least_squares", config.n, d=config.dim, m=config.rows, **kw)
  return problems.make_problem(problem, config.n, alpha=config.split_alpha, **kw)


def make_problems(config, problem: str, seeds: Sequence[int]) -> list[problems.Problem]:
  """`make_problem` of every seed: each seed its own instance (data, split, initial point)."""
  return [make_problem(config, problem, s) for s in seeds]


def cell_lambda(config, graph, lam_spec, problem: problems.Problem) -> np.ndarray:
  """λ = ``lam_spec`` (kind, α) on ``graph`` (``data``: ``problem``'s local data sizes)."""
  name, alpha = lam_spec
  counts = np.asarray(problem.counts)
  return problems.make_lambda(name, graph, alpha=alpha, seed=config.graph_seed, counts=counts)


def compare_cell(
  config, problem, graph, lam_spec, *, steps, seed, mesh=None, lr_policy=None, seeds=None
):
  """`compare` of (graph, λ = ``lam_spec`` (kind, α)) with the config's step options.

  ``seeds`` (more than one): ``problem`` is the list of each seed's problem (`make_problems`);
  every seed runs in one vmapped scan per strategy (`compare_seeds`, one device) and the result
  is their `combine`d comparison, each seed's own under ``per_seed``."""
  opts = {k: config[k] for k in ("lr_factor", "order", "row_kind", "comm", "own_fraction")}
  opts["lr_policy"] = lr_policy or config.lr_policy
  lr = config.lr or None  # 0 = auto (driver.default_lr), the same γ for both strategies
  if seeds is not None and len(seeds) > 1:
    del opts["comm"]
    lams = [cell_lambda(config, graph, lam_spec, p) for p in problem]
    keys = jax.random.wrap_key_data(seeds_lib.seed_keys(seeds))  # key(k) for seed k
    comps = compare_seeds(graph, lams, problem, steps, keys=keys, lr=lr, **opts)
    comp = combine(comps, graph, config.row_kind)
    comp.per_seed, comp.problems = dict(zip(seeds, comps)), dict(zip(seeds, problem))
    return comp
  lam = cell_lambda(config, graph, lam_spec, problem)
  key = jax.random.key(seed)
  return compare(graph, lam, problem, steps, key=key, lr=lr, mesh=mesh, **opts)


RATES_NOTE = (
  "lr_max: the largest step at which the full-gradient iteration is stable (spectral radius < 1, "
  "exact for least squares); rho: that spectral radius at the step used (the linear rate of the "
  "full-gradient run); gap@k: f(x̄_λ) − f* after k steps; gap_tail: the mean over the last "
  "config.tail of steps (the constant-step bias, plus noise for minibatch runs)."
)


def comp_label(config) -> str:
  if config.lr_policy == "own":
    return f"own step ({config.own_fraction:g} × limit)"
  return "same step" + (" (config.lr)" if config.lr else " (default_lr, inside I's limit)")


def rates(
  config, problem, graph, lam_spec, comp, *, steps, seed, mesh=None, seeds=None
) -> list[dict]:
  """rates.md rows: the comparison just run, then both strategies at their own stable steps with
  full and with minibatch gradients (least squares). ``seeds``: as `compare_cell` (the rows are
  then those of the mean curves over seeds)."""
  rows = rate_rows(comp, f"{comp_label(config)}, full gradients", tail=config.tail)
  sgd_one = lambda p: p.replace(batch_size=config.sgd_batch)
  sgd = [sgd_one(p) for p in problem] if isinstance(problem, list) else sgd_one(problem)
  runs = [("own", problem, "full"), ("own", sgd, f"minibatch {config.sgd_batch}")]
  if config.lr_policy == "own":
    runs = runs[1:]
  for policy, prob, grads in runs:
    c = compare_cell(
      config, prob, graph, lam_spec, steps=steps, seed=seed, mesh=mesh, lr_policy=policy,
      seeds=seeds,
    )  # fmt: skip
    rows += rate_rows(c, f"own step ({config.own_fraction:g} × limit), {grads}", tail=config.tail)
  return rows


def run_single(
  config,
  workdir,
  *,
  topology: str,
  lam: str,
  problem: str,
  steps: int,
  seed: int,
  log_every: int,
  mesh=None,
  log: Callable[[str], Any] = print,
  seeds: Sequence[int] | None = None,
) -> dict[str, Any]:
  """One (graph, λ): gap.png, consensus.png, metrics.csv (every ``log_every`` steps),
  diagnostic.md, rates.md (least squares) and summary.json in ``workdir``; returns the summary
  ("all_diverged": every strategy reached NaN/inf). ``lam`` as typed: kind or dirichlet:α.

  ``seeds`` (more than one, no mesh): every seed is its own problem instance and key, all run in
  one vmapped scan per strategy; the plots, verdicts and rates are those of the mean curves over
  seeds (a strategy diverged on any seed counts as diverged), metrics.csv has a ``seed`` column
  and summary.json each seed's own verdicts under ``per_seed``."""
  seeds = tuple(seeds) if seeds is not None and len(seeds) > 1 else None
  lam_spec = problems.parse_lambda(lam, config.lam_alpha, "lam")
  graph = make_graph(config, topology)
  probs = make_problems(config, problem, seeds) if seeds else make_problem(config, problem, seed)
  prob = probs[0] if seeds else probs
  workdir = pathlib.Path(workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  t0 = time.time()
  comp = compare_cell(
    config, probs, graph, lam_spec, steps=steps, seed=seed, mesh=mesh, seeds=seeds
  )
  wall = time.time() - t0
  over = f", mean over seeds {', '.join(map(str, seeds))}" if seeds else ""
  plot_curves(workdir, comp, f"{prob.name}, {graph.name}, λ={lam}{over}")
  if seeds:
    rows = [
      {"step": row["step"], "seed": s, **{k: v for k, v in row.items() if k != "step"}}
      for s, c in comp.per_seed.items()
      for row in metric_rows(c.results, log_every)
    ]
    rows.sort(key=lambda r: r["step"])  # one row per seed and step, as the runtime writes them
  else:
    rows = metric_rows(comp.results, log_every)
  metrics.write_table(workdir / "metrics.csv", rows)
  diag = comp.diagnostic
  (workdir / "diagnostic.md").write_text(diagnostic_markdown(graph, lam, diag))
  verdict = verdicts(comp, prob, tie_tol=config.tie_tol, tail=config.tail)
  summary = {
    "problem": prob.name,
    "topology": graph.name,
    "lam": lam,
    "n": graph.n,
    "steps": steps,
    "lr": comp.lr,
    "f_star": comp.results["I"].f_star,
    "order": config.order,
    "distributed": mesh is not None,
    **verdict,
    "wall_s": wall,
    "config": config.to_dict(),
  }
  if seeds:
    summary["seeds"] = list(seeds)
    summary["per_seed"] = {
      str(k): {
        "lr": c.lr,
        "f_star": c.results["I"].f_star,
        **verdicts(c, comp.problems[k], tie_tol=config.tie_tol, tail=config.tail),
      }
      for k, c in comp.per_seed.items()
    }
  gone = all_diverged(comp.results)
  summary["all_diverged"] = gone
  if prob.name == "least_squares" and not gone:
    summary["rates"] = rates(
      config, probs, graph, lam_spec, comp, steps=steps, seed=seed, mesh=mesh, seeds=seeds
    )
    title = f"Error against iterations: {prob.name}, {graph.name}, λ={lam}"
    md = f"# {title}\n\n{RATES_NOTE}\n\n" + md_table(summary["rates"], RATE_COLS)
    (workdir / "rates.md").write_text(md)
    log(md_table(summary["rates"], RATE_COLS).rstrip("\n"))
  runtime.write_summary(workdir, summary)  # last: a summary.json marks a finished run
  if seeds:
    for k, v in summary["per_seed"].items():
      log("\n".join(f"seed {k}: {line}" for line in final_lines(v["final"])))
    log(f"means over seeds {', '.join(map(str, seeds))}:")
  log("\n".join(final_lines(verdict["final"])))
  log(
    f"winner (gap): {verdict['winner_gap']}; diagnostic gap_W {diag['gap_W']:.3f} "
    f"gap_λ(A) {diag['gap_lam_A']:.3f}  -> {workdir}"
  )
  return summary


def run_sweep(
  config,
  workdir,
  *,
  problem: str,
  steps: int,
  seed: int,
  mesh=None,
  log: Callable[[str], Any] = print,
  seeds: Sequence[int] | None = None,
) -> dict[str, Any]:
  """config.sweep_topologies × config.sweep_lams: sweep.md, sweep.csv and summary.json in
  ``workdir``; cells with A = W are listed as identical, not run. Returns the summary.

  ``seeds`` (more than one): every cell runs every seed's instance in one vmapped scan per
  strategy and its row is that of the mean curves over seeds (`run_single`)."""
  seeds = tuple(seeds) if seeds is not None and len(seeds) > 1 else None
  n_seeds = len(seeds) if seeds else 1
  config = config_lib.validate_config(config, problem=problem, mesh=mesh, seeds=n_seeds)
  topos, lams = config_lib.cells(config)
  probs = make_problems(config, problem, seeds) if seeds else make_problem(config, problem, seed)
  prob = probs[0] if seeds else probs
  workdir = pathlib.Path(workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  rows, same = [], []
  t0 = time.time()
  for t in topos:
    graph = make_graph(config, t)
    for name, alpha in lams:
      label = lambda_label(name, alpha)
      cell = [cell_lambda(config, graph, (name, alpha), p) for p in (probs if seeds else [probs])]
      if all(identical_cell(graph, lam, config.row_kind) for lam in cell):
        same.append(f"{t}/{label}")
        log(f"{t:>22s} {label:>14s}  identical (A = W): not compared")
        continue
      comp = compare_cell(
        config, probs, graph, (name, alpha), steps=steps, seed=seed, mesh=mesh, seeds=seeds
      )
      rows.append(sweep_row(t, label, comp, tie_tol=config.tie_tol, tail=config.tail))
      log(sweep_line(rows[-1]))
  title = (
    f"Strategy I vs II: {prob.name}, n={config.n}, {steps} steps, order={config.order}, "
    f"batch {config.batch_size}, "
    + ("same γ per cell" if config.lr_policy == "same" else f"{config.own_fraction:g} × own limit")
    + (f", mean curves over seeds {', '.join(map(str, seeds))}" if seeds else "")
  )
  md = sweep_markdown(rows, title, tail=config.tail, tie_tol=config.tie_tol, identical_cells=same)
  (workdir / "sweep.md").write_text(md)
  metrics.write_table(workdir / "sweep.csv", bias_rows(rows))
  summary = {"problem": prob.name, "n": config.n, "steps": steps}
  summary |= {"seeds": list(seeds)} if seeds else {}
  summary |= sweep_summary(rows, same) | {"wall_s": time.time() - t0}
  runtime.write_summary(workdir, summary | {"config": config.to_dict()})
  n_ii, cells = summary["II_wins_gap"], summary["cells"]
  log(f"II has the lower constant-step bias in {n_ii}/{cells} cells -> {workdir}/sweep.md")
  return summary
