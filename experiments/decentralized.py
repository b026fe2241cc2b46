"""Decentralized SGD with node weights λ: Strategy (I) vs (II) (arXiv 2511.19513; see
docs/decentralized.md for what is the paper's and what is a standard substitute).

Commands (CPU):
  python -m experiments.decentralized --topology=erdos_renyi --lam=degree --problem=least_squares
      # ~15 s: gap.png, consensus.png, diagnostic.md, metrics.csv, summary.json in
      # runs/decentralized/erdos_renyi/least_squares
  python -m experiments.decentralized --sweep            # topologies × λ table (sweep.md), ~1 min
  python -m experiments.decentralized --problem=logistic --lam=data  # non-IID digits, λ ∝ data
  python -m experiments.decentralized --mesh=nodes:8 --config.n=8     # one node per device

A strategy whose iterates reach NaN/inf is reported as diverged (never as a winner); a single run
in which every strategy diverged exits with status 3 after writing its summary.
"""

from __future__ import annotations

import csv
import sys
import time

import jax
import ml_collections
import numpy as np
from absl import flags

from jaxlab.core import experiment, plots
from jaxlab.optim import decentralized as dec

_TOPOLOGY = flags.DEFINE_string(
  "topology", "erdos_renyi", f"Communication graph: {', '.join(dec.TOPOLOGIES)}."
)
_LAM = flags.DEFINE_string(
  "lam",
  "degree",
  "Node weights λ: uniform, dirichlet (Dirichlet(config.lam_alpha); dirichlet:0.5 sets α), "
  "degree (∝ degree+1), data (∝ local data size).",
)
_PROBLEM = flags.DEFINE_string(
  "problem",
  "least_squares",
  f"Problem: {', '.join(dec.PROBLEMS)} (logistic/mlp need scikit-learn).",
)
_SWEEP = flags.DEFINE_bool(
  "sweep",
  False,
  "Run config.sweep_topologies × config.sweep_lams and "
  "write one table (sweep.md) saying where Strategy II wins.",
)
# Shared flags this experiment has no use for (each strategy is one in-memory jitted scan).
UNUSED_FLAGS = ("ckpt_every", "keep", "profile")


def get_config() -> ml_collections.ConfigDict:
  """Strategy I vs II. Default run (ER(16, 0.25), λ ∝ degree+1, least squares, 4000 steps): ~15 s on
  one CPU core; the sweep (6 topologies × 5 λ): ~1 min.

  python -m experiments.decentralized --topology=erdos_renyi --lam=degree --problem=least_squares
  """
  c = ml_collections.ConfigDict()
  c.n = 16  # number of nodes (= devices along `nodes` when --mesh=nodes:n)
  c.er_p = 0.25  # Erdős–Rényi edge probability (resampled until connected)
  c.graph_seed = 0  # seed of the random graph and of Dirichlet λ
  c.lam_alpha = 1.0  # Dirichlet concentration for --lam=dirichlet
  c.split_alpha = 0.5  # Dirichlet concentration of the non-IID digits split (smaller = more skewed)
  c.dim = 10  # least squares: parameter dimension d
  c.rows = 20  # least squares: rows m per node
  c.batch_size = 0  # per-node minibatch (0 = full local gradient; 5 = SGD)
  c.lr = 0.0  # step γ (0 = auto: lr_factor / (L_max · n · max λ), same for I and II)
  c.lr_factor = 0.3  # numerator of the auto step (docs/decentralized.md, "Step size")
  c.order = "atc"  # atc (adapt-then-combine) or cta (combine-then-adapt)
  c.row_kind = "auto"  # Strategy II matrix: auto, lambda_metropolis, degree_average, scaled_kernel
  c.comm = "auto"  # distributed mixing with --mesh=nodes:n: auto, ppermute, all_gather
  c.tail = 0.1  # fraction of final steps averaged for the reported numbers
  c.tie_tol = 0.05  # relative difference below which the sweep calls a tie
  c.sweep_topologies = "ring,torus,hypercube,exponential,erdos_renyi,star"  # --sweep rows
  c.sweep_lams = "uniform,degree,dirichlet:5,dirichlet:1,dirichlet:0.5"  # --sweep λ columns
  return c


_CONFIG = experiment.define_config(get_config())


# ------------------------------------------------------------------------------------------------
# Flags -> validated run description (nothing is written before this returns).


def _parse_lam(field: str, spec: str, alpha: float) -> tuple[str, float]:
  """``kind`` or ``dirichlet:α`` -> (kind, α); α must be a finite number > 0."""
  name, sep, a = spec.strip().partition(":")
  experiment.check_choice(field, name, dec.LAMBDAS)
  if sep:
    experiment.require(name == "dirichlet", field, f"{spec!r}: only dirichlet takes ':α'")
    try:
      alpha = float(a)
    except ValueError:
      alpha = float("nan")
    ok = np.isfinite(alpha) and alpha > 0
    experiment.require(ok, field, f"{spec!r}: Dirichlet α must be a finite number > 0")
  return name, alpha


def _row_kind_error(config, topos, lams):
  """degree_average is λ-reversible only for λ ∝ degree+1 (uniform λ on a regular graph)."""
  if config.row_kind != "degree_average":
    return None
  for t in topos:
    graph = dec.make_graph(t, config.n, p=config.er_p, seed=config.graph_seed)
    regular = np.all(graph.degrees == graph.degrees[0])
    for name, _ in lams:
      if name != "degree" and not (name == "uniform" and regular):
        return f"degree_average needs λ ∝ degree+1; --lam={name} on {t} is not (use auto)"
  return None


def _validate(config):
  topology = experiment.check_choice("topology", _TOPOLOGY.value, dec.TOPOLOGIES)
  problem = experiment.check_choice("problem", _PROBLEM.value, dec.PROBLEMS)
  lam = _parse_lam("lam", _LAM.value, config.lam_alpha)
  run = experiment.common(
    "decentralized",
    default_steps=4000,
    default_log_every=10,
    mesh_axes=("nodes",),
    variant=("sweep" if _SWEEP.value else topology, problem),
    unused=UNUSED_FLAGS,
  )
  experiment.check_config(
    config,
    {
      "n": lambda v: None if v >= 2 else f"must be >= 2, got {v}",
      "er_p": lambda v: None if 0 < v <= 1 else f"must be in (0, 1], got {v}",
      "lam_alpha": "positive",
      "split_alpha": "positive",
      "dim": "positive",
      "rows": "positive",
      "batch_size": "nonneg",
      "lr": "nonneg",
      "lr_factor": "positive",
      "order": dec.ORDERS,
      "row_kind": dec.ROW_MIXINGS,
      "comm": dec.COMMS,
      "tail": lambda v: None if 0 < v <= 1 else f"must be in (0, 1], got {v}",
      "tie_tol": "nonneg",
    },
  )
  topos = experiment.check_list("config.sweep_topologies", config.sweep_topologies, dec.TOPOLOGIES)
  specs = [s for s in config.sweep_lams.split(",") if s.strip()]
  experiment.require(bool(specs), "config.sweep_lams", f"empty; allowed: {', '.join(dec.LAMBDAS)}")
  lams = [_parse_lam("config.sweep_lams", s, config.lam_alpha) for s in specs]
  if not _SWEEP.value:
    topos, lams = [topology], [lam]
  field = "config.sweep_topologies" if _SWEEP.value else "topology"
  for t in topos:  # hypercube needs 2^k nodes, torus a composite n, ER a connected sample
    msg = dec.topology_error(t, config.n, p=config.er_p, seed=config.graph_seed)
    # n >= 2 was checked, so what can fail for Erdős–Rényi is its edge probability
    experiment.require(msg is None, "config.er_p" if t == "erdos_renyi" else field, msg)
  msg = _row_kind_error(config, topos, lams)
  experiment.require(msg is None, "config.row_kind", msg)
  if run.mesh is not None:
    got = dict(run.mesh.shape)
    experiment.require(
      got.get("nodes") == config.n,
      "mesh",
      f"distributed mode puts one node per device: needs nodes:{config.n} (config.n), got {got}",
    )
  return run, topos, lams


# ------------------------------------------------------------------------------------------------
# Data, runs, verdicts.


def _problem(config, seed):
  kw = {"batch_size": config.batch_size, "seed": seed}
  if _PROBLEM.value == "least_squares":
    return dec.make_problem("least_squares", config.n, d=config.dim, m=config.rows, **kw)
  return dec.make_problem(_PROBLEM.value, config.n, alpha=config.split_alpha, **kw)


def _compare(config, run, problem, graph, lam_name, alpha):
  """Runs both strategies on one (graph, λ); returns (results by strategy, diagnostic, lr, λ)."""
  lam = dec.make_lambda(
    lam_name, graph, alpha=alpha, seed=config.graph_seed, counts=np.asarray(problem.counts)
  )
  lr = config.lr or dec.default_lr(problem, lam, config.lr_factor)
  diag = dec.diagnose(graph, lam, row_kind=config.row_kind)
  f_star = problem.f_star(lam)
  key = jax.random.key(run.seed)
  results = {}
  for s in dec.STRATEGIES:
    if s == "II" and graph.directed:
      continue  # no λ-reversible A on a directed graph
    results[s] = dec.run(
      s,
      graph,
      lam,
      problem,
      run.steps,
      lr,
      key=key,
      order=config.order,
      row_kind=config.row_kind,
      mesh=run.mesh,
      comm=config.comm,
      f_star=f_star,
    )
  return results, diag, lr, lam


def _tail(x, frac):
  k = max(1, int(round(frac * len(x))))
  return float(np.mean(x[-k:]))


def _identical(results, lam) -> bool:
  """Uniform λ (n λ_i = 1) and A = W: the two strategies are the same algorithm."""
  if "II" not in results:
    return False
  same = np.array_equal(results["I"].mixing, results["II"].mixing)
  return bool(same and np.allclose(lam, 1.0 / len(lam), rtol=1e-12, atol=0))


def _winner(results, metric, tol, identical=False):
  """ "I", "II", "tie" or "identical (A = W)"; a diverged strategy never wins."""
  if identical:
    return "identical (A = W)"
  if "II" not in results:
    return "I (II n/a)" if results["I"].diverged_at is None else "none (I diverged, II n/a)"
  div = {s: r.diverged_at is not None for s, r in results.items()}
  if div["I"] and div["II"]:
    return "none (both diverged)"
  if div["I"] or div["II"]:
    return "II (I diverged)" if div["I"] else "I (II diverged)"
  i, ii = (_tail(getattr(results[s], metric), tol[1]) for s in ("I", "II"))
  if abs(i - ii) <= tol[0] * max(abs(i), abs(ii)):
    return "tie"
  return "II" if ii < i else "I"


def _fmt(v):
  if isinstance(v, (bool, np.bool_)):
    return str(bool(v))
  if isinstance(v, (float, np.floating)):
    return f"{v:.3g}"
  return str(v)


def _md_table(rows, cols):
  lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
  lines += ["| " + " | ".join(_fmt(r.get(c, "")) for c in cols) + " |" for r in rows]
  return "\n".join(lines) + "\n"


DIAG_COLS = [
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
]
METRICS = ("gap", "consensus", "gap_tracked")


# ------------------------------------------------------------------------------------------------
# One (graph, λ): curves, diagnostic, summary.


def _write_single(run, problem, graph, results, diag):
  steps = np.arange(1, run.steps + 1)
  label = {"I": "I: nλ_i f_i + doubly stochastic W", "II": "II: f_i + λ-reversible A"}
  title = f"{problem.name}, {graph.name}, λ={_LAM.value}"
  for name, metric, ylabel, floor in (
    ("gap.png", "gap", "f(x̄_λ) − f*", 1e-12),
    ("consensus.png", "consensus", "Σ λ_i ‖x_i − x̄_λ‖²", 1e-16),
  ):
    curves = {label[s]: (steps, np.maximum(getattr(r, metric), floor)) for s, r in results.items()}
    plots.lines(run.workdir / name, curves, "step", ylabel, logy=True, title=title)
  with open(run.workdir / "metrics.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["step"] + [f"{m}_{s}" for s in results for m in METRICS])
    for k in range(0, run.steps, run.log_every):
      w.writerow([k + 1] + [getattr(results[s], m)[k] for s in results for m in METRICS])
  (run.workdir / "diagnostic.md").write_text(
    f"Diagnostic for {graph.name} (n={graph.n}), λ={_LAM.value} "
    "(reconstructed quantities; see jaxlab/optim/dec/geometry.py)\n\n"
    + _md_table([{"graph": graph.name, **diag}], ["graph"] + DIAG_COLS)
  )


def _final(config, problem, results, lam):
  final = {}
  for s, r in results.items():
    final[s] = {m: _tail(getattr(r, m), config.tail) for m in METRICS}
    final[s].update(comm=r.comm, diverged_at=r.diverged_at)
    if problem.test is not None and r.diverged_at is None:
      xbar = jax.tree.map(lambda v: np.tensordot(lam, np.asarray(v), 1), r.x)
      final[s]["test_accuracy"] = problem.accuracy(xbar)
  return final


def _print_single(final, summary, diag, workdir):
  for s, v in final.items():
    if v["diverged_at"] is not None:
      print(f"Strategy {s}: diverged (non-finite from step {v['diverged_at']})")
      continue
    acc = f"  test acc {v['test_accuracy']:.3f}" if "test_accuracy" in v else ""
    print(f"Strategy {s}: f(x̄_λ)−f* {v['gap']:.3e}  consensus {v['consensus']:.3e}{acc}")
  print(
    f"winner (gap): {summary['winner_gap']}; diagnostic gap_W {diag['gap_W']:.3f} "
    f"gap_λ(A) {diag['gap_lam_A']:.3f}  -> {workdir}"
  )


def single(config, run, lam_spec):
  graph = dec.make_graph(_TOPOLOGY.value, config.n, p=config.er_p, seed=config.graph_seed)
  problem = _problem(config, run.seed)
  experiment.prepare_workdir(run.workdir)
  t0 = time.time()
  results, diag, lr, lam = _compare(config, run, problem, graph, *lam_spec)
  wall = time.time() - t0
  _write_single(run, problem, graph, results, diag)
  final = _final(config, problem, results, lam)
  tol = (config.tie_tol, config.tail)
  identical = _identical(results, lam)
  summary = {
    "problem": problem.name,
    "topology": graph.name,
    "lam": _LAM.value,
    "n": graph.n,
    "steps": run.steps,
    "lr": lr,
    "f_star": results["I"].f_star,
    "order": config.order,
    "distributed": run.mesh is not None,
    "final": final,
    "diagnostic": diag,
    "winner_gap": _winner(results, "gap", tol, identical),
    "winner_consensus": _winner(results, "consensus", tol, identical),
    "wall_s": wall,
    "config": config.to_dict(),
  }
  experiment.write_summary(run.workdir, summary)
  _print_single(final, summary, diag, run.workdir)
  if all(r.diverged_at is not None for r in results.values()):
    print(
      "error: every strategy diverged; lower --config.lr (or --config.lr_factor)",
      file=sys.stderr,
      flush=True,
    )
    sys.exit(3)


# ------------------------------------------------------------------------------------------------
# Topologies × λ.


def _sweep_row(config, t, name, alpha, results, diag, lr, lam):
  def tail_or(s, metric):
    r = results.get(s)
    if r is None:
      return "n/a"
    return "diverged" if r.diverged_at is not None else _tail(getattr(r, metric), config.tail)

  identical = _identical(results, lam)
  tol = (config.tie_tol, config.tail)
  return {
    "topology": t,
    "lam": name + (f":{alpha:g}" if name == "dirichlet" else ""),
    "lr": lr,
    "gap_I": tail_or("I", "gap"),
    "gap_II": tail_or("II", "gap"),
    "cons_I": tail_or("I", "consensus"),
    "cons_II": tail_or("II", "consensus"),
    "winner_gap": _winner(results, "gap", tol, identical),
    "winner_cons": _winner(results, "consensus", tol, identical),
    **{
      k: diag[k]
      for k in ("n_max_lam", "gap_W", "gap_lam_A", "rho_lam_W", "rho_lam_A", "predict_II")
    },
  }


SWEEP_COLS = [
  "topology",
  "lam",
  "n_max_lam",
  "gap_W",
  "gap_lam_A",
  "rho_lam_W",
  "rho_lam_A",
  "gap_I",
  "gap_II",
  "cons_I",
  "cons_II",
  "winner_gap",
  "winner_cons",
  "predict_II",
]


def _sweep_header(config, run, problem, rows):
  wins = sum(r["winner_gap"] == "II" for r in rows)
  same = sum(r["winner_gap"].startswith("identical") for r in rows)
  decided = [r for r in rows if r["winner_gap"] in ("I", "II")]
  agree = sum((r["winner_gap"] == "II") == r["predict_II"] for r in decided)
  text = (
    f"# Strategy I vs II: {problem.name}, n={config.n}, {run.steps} steps, order="
    f"{config.order}, batch {config.batch_size}, same γ per cell\n\n"
    f"f(x̄_λ) − f* and Σλ‖x_i − x̄_λ‖² averaged over the last {config.tail:.0%} of steps; "
    f"'tie' = within {config.tie_tol:.0%}; 'identical' = uniform λ and A = W (the same "
    f"algorithm); a diverged strategy never wins. II wins f-gap in {wins}/{len(rows)} cells "
    f"({same} identical). predict_II (gap_λ(A) > gap(W), a heuristic, not the paper's "
    f"condition) matches the decided winner in {agree}/{len(decided)} cells.\n\n"
  )
  return text, wins, [agree, len(decided)]


def sweep(config, run, topos, lams):
  problem = _problem(config, run.seed)
  experiment.prepare_workdir(run.workdir)
  rows = []
  t0 = time.time()
  for t in topos:
    graph = dec.make_graph(t, config.n, p=config.er_p, seed=config.graph_seed)
    for name, alpha in lams:
      results, diag, lr, lam = _compare(config, run, problem, graph, name, alpha)
      rows.append(_sweep_row(config, t, name, alpha, results, diag, lr, lam))
      r = rows[-1]
      print(
        f"{t:>22s} {r['lam']:>14s}  I {_fmt(r['gap_I'])}  II {_fmt(r['gap_II'])}  -> "
        f"{r['winner_gap']}"
      )
  header, wins, agreement = _sweep_header(config, run, problem, rows)
  (run.workdir / "sweep.md").write_text(header + _md_table(rows, SWEEP_COLS))
  with open(run.workdir / "sweep.csv", "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
  experiment.write_summary(
    run.workdir,
    {
      "problem": problem.name,
      "n": config.n,
      "steps": run.steps,
      "rows": rows,
      "II_wins_gap": wins,
      "cells": len(rows),
      "predict_agreement": agreement,
      "wall_s": time.time() - t0,
      "config": config.to_dict(),
    },
  )
  print(f"II wins f-gap in {wins}/{len(rows)} cells -> {run.workdir}/sweep.md")


def main(argv):
  del argv
  config = _CONFIG.value
  run, topos, lams = _validate(config)
  if _SWEEP.value:
    sweep(config, run, topos, lams)
  else:
    single(config, run, lams[0])


if __name__ == "__main__":
  experiment.run(main)
