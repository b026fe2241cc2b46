"""Decentralized SGD with node weights λ: Strategy (I) vs (II) (arXiv 2511.19513; see
docs/decentralized.md for what is the paper's and what is a standard substitute).

Commands (CPU):
  python -m experiments.decentralized --topology=erdos_renyi --lam=degree --problem=least_squares
      # ~15 s: gap.png, consensus.png, diagnostic.md, metrics.csv, summary.json in
      # runs/decentralized/erdos_renyi/least_squares
  python -m experiments.decentralized --sweep            # topologies × λ table (sweep.md), ~2 min
  python -m experiments.decentralized --sweep --config.lr_policy=own  # each at its own step
  python -m experiments.decentralized --problem=logistic --lam=data  # non-IID digits, λ ∝ data
  python -m experiments.decentralized --mesh=nodes:8 --config.n=8     # one node per device

A strategy whose iterates reach NaN/inf is reported as diverged (never as a winner); a single run
in which every strategy diverged exits with status 3 after writing its summary.

Least squares also reports rates (rates.md): each strategy at the common γ and at its own largest
stable step (exact, `jaxlab.optim.decentralized.stability`) with full and with minibatch gradients, as the gap
after 10, 100, 1000 steps, the tail gap and the linear rate ρ. The sweep compares only cells where
the strategies differ: uniform λ (A = W) is listed as identical, not run.
"""

from __future__ import annotations

import sys
import time

import jax
import ml_collections
import numpy as np
from absl import flags

from jaxlab.core import experiment, metrics, runtime
from jaxlab.optim import decentralized as dec
from jaxlab.optim.decentralized import compare

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
  c.lr_policy = "same"  # same: one γ for both; own: own_fraction × each one's largest stable step
  c.own_fraction = 0.5  # fraction of a strategy's own stability limit (lr_policy=own, rates.md)
  c.sgd_batch = 5  # rates.md: per-node minibatch of the stochastic-gradient runs
  # --sweep rows: graphs with unequal degrees, where (I) and (II) differ for degree-based λ too
  # (on regular graphs degree λ is uniform and A = W: such cells are listed, not compared)
  c.sweep_topologies = "path,grid,star,erdos_renyi,barabasi_albert"
  c.sweep_lams = "degree,dirichlet:5,dirichlet:1,dirichlet:0.5"  # --sweep λ columns
  return c


_CONFIG = experiment.define_config(get_config())


# ------------------------------------------------------------------------------------------------
# Flags -> validated run description (nothing is written before this returns).

CHECKS = {
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
  "lr_policy": compare.LR_POLICIES,
  "own_fraction": lambda v: None if 0 < v < 1 else f"must be in (0, 1), got {v}",
  "sgd_batch": "positive",
}


def _graph(config, topology):
  return dec.make_graph(topology, config.n, p=config.er_p, seed=config.graph_seed)


def _check_cells(config, run, topos, lams):
  field = "config.sweep_topologies" if _SWEEP.value else "topology"
  for t in topos:  # hypercube needs 2^k nodes, torus a composite n, ER a connected sample
    msg = dec.topology_error(t, config.n, p=config.er_p, seed=config.graph_seed)
    # n >= 2 was checked, so what can fail for Erdős–Rényi is its edge probability
    experiment.require(msg is None, "config.er_p" if t == "erdos_renyi" else field, msg)
  for t in topos:
    graph = _graph(config, t)
    for name, _ in lams:
      msg = compare.row_kind_error(config.row_kind, graph, name)
      experiment.require(msg is None, "config.row_kind", msg)
  got = None if run.mesh is None else dict(run.mesh.shape)
  msg = f"distributed mode puts one node per device: needs nodes:{config.n} (config.n), got {got}"
  experiment.require(got is None or got.get("nodes") == config.n, "mesh", msg)


def _validate(config):
  topology = experiment.check_choice("topology", _TOPOLOGY.value, dec.TOPOLOGIES)
  problem = experiment.check_choice("problem", _PROBLEM.value, dec.PROBLEMS)
  lam = dec.parse_lambda(_LAM.value, config.lam_alpha, "lam")
  run = experiment.common(
    "decentralized",
    default_steps=4000,
    default_log_every=10,
    mesh_axes=("nodes",),
    variant=("sweep" if _SWEEP.value else topology, problem),
    unused=UNUSED_FLAGS,
  )
  experiment.check_config(config, CHECKS)
  if config.lr_policy == "own":
    msg = "needs least_squares (its stability limit is exact); use lr_policy=same"
    experiment.require(problem == "least_squares", "config.lr_policy", msg)
    experiment.require(config.lr == 0, "config.lr", "is set by lr_policy=own; leave it 0")
  topos = experiment.check_list("config.sweep_topologies", config.sweep_topologies, dec.TOPOLOGIES)
  specs = [s for s in config.sweep_lams.split(",") if s.strip()]
  experiment.require(bool(specs), "config.sweep_lams", f"empty; allowed: {', '.join(dec.LAMBDAS)}")
  lams = [dec.parse_lambda(s, config.lam_alpha, "config.sweep_lams") for s in specs]
  if not _SWEEP.value:
    topos, lams = [topology], [lam]
  _check_cells(config, run, topos, lams)
  return run, topos, lams


# ------------------------------------------------------------------------------------------------
# Data and one (graph, λ) comparison.


def _problem(config, seed):
  kw = {"batch_size": config.batch_size, "seed": seed}
  if _PROBLEM.value == "least_squares":
    return dec.make_problem("least_squares", config.n, d=config.dim, m=config.rows, **kw)
  return dec.make_problem(_PROBLEM.value, config.n, alpha=config.split_alpha, **kw)


def _compare(config, run, problem, graph, lam_name, alpha, lr_policy=None):
  counts = np.asarray(problem.counts)
  lam = dec.make_lambda(lam_name, graph, alpha=alpha, seed=config.graph_seed, counts=counts)
  opts = {k: config[k] for k in ("lr_factor", "order", "row_kind", "comm", "own_fraction")}
  opts["lr_policy"] = lr_policy or config.lr_policy
  key = jax.random.key(run.seed)
  lr = config.lr or None  # 0 = auto (dec.default_lr), the same γ for both strategies
  return compare.compare(graph, lam, problem, run.steps, key=key, lr=lr, mesh=run.mesh, **opts)


def rates(config, run, problem, graph, lam_spec, comp):
  """rates.md: the comparison just run, then both strategies at their own stable steps with full
  and with minibatch gradients (least squares)."""
  rows = compare.rate_rows(comp, f"{comp_label(config)}, full gradients", tail=config.tail)
  sgd = problem.replace(batch_size=config.sgd_batch)
  runs = [("own", problem, "full"), ("own", sgd, f"minibatch {config.sgd_batch}")]
  if config.lr_policy == "own":
    runs = runs[1:]
  for policy, prob, grads in runs:
    c = _compare(config, run, prob, graph, *lam_spec, lr_policy=policy)
    label = f"own step ({config.own_fraction:g} × limit), {grads}"
    rows += compare.rate_rows(c, label, tail=config.tail)
  title = f"Error against iterations: {problem.name}, {graph.name}, λ={_LAM.value}"
  md = f"# {title}\n\n{RATES_NOTE}\n\n" + compare.md_table(rows, compare.RATE_COLS)
  (run.workdir / "rates.md").write_text(md)
  return rows


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


def single(config, run, lam_spec):
  graph = _graph(config, _TOPOLOGY.value)
  problem = _problem(config, run.seed)
  experiment.prepare_workdir(run.workdir)
  t0 = time.time()
  comp = _compare(config, run, problem, graph, *lam_spec)
  wall = time.time() - t0
  compare.plot_curves(run.workdir, comp, f"{problem.name}, {graph.name}, λ={_LAM.value}")
  metrics.write_table(run.workdir / "metrics.csv", compare.metric_rows(comp.results, run.log_every))
  diag = comp.diagnostic
  (run.workdir / "diagnostic.md").write_text(compare.diagnostic_markdown(graph, _LAM.value, diag))
  verdicts = compare.verdicts(comp, problem, tie_tol=config.tie_tol, tail=config.tail)
  summary = {
    "problem": problem.name,
    "topology": graph.name,
    "lam": _LAM.value,
    "n": graph.n,
    "steps": run.steps,
    "lr": comp.lr,
    "f_star": comp.results["I"].f_star,
    "order": config.order,
    "distributed": run.mesh is not None,
    **verdicts,
    "wall_s": wall,
    "config": config.to_dict(),
  }
  runtime.write_summary(run.workdir, summary)
  if problem.name == "least_squares" and not compare.all_diverged(comp.results):
    summary["rates"] = rates(config, run, problem, graph, lam_spec, comp)
    runtime.write_summary(run.workdir, summary)
    print(compare.md_table(summary["rates"], compare.RATE_COLS), end="")
  print("\n".join(compare.final_lines(verdicts["final"])))
  print(
    f"winner (gap): {verdicts['winner_gap']}; diagnostic gap_W {diag['gap_W']:.3f} "
    f"gap_λ(A) {diag['gap_lam_A']:.3f}  -> {run.workdir}"
  )
  if compare.all_diverged(comp.results):
    msg = "error: every strategy diverged; lower --config.lr (or --config.lr_factor)"
    print(msg, file=sys.stderr, flush=True)
    sys.exit(3)


# ------------------------------------------------------------------------------------------------
# Topologies × λ.


def sweep(config, run, topos, lams):
  problem = _problem(config, run.seed)
  experiment.prepare_workdir(run.workdir)
  rows, same = [], []
  t0 = time.time()
  for t in topos:
    graph = _graph(config, t)
    for name, alpha in lams:
      label = compare.lambda_label(name, alpha)
      lam = dec.make_lambda(name, graph, alpha=alpha, seed=config.graph_seed, counts=problem.counts)
      if compare.identical_cell(graph, lam, config.row_kind):
        same.append(f"{t}/{label}")
        print(f"{t:>22s} {label:>14s}  identical (A = W): not compared")
        continue
      comp = _compare(config, run, problem, graph, name, alpha)
      rows.append(compare.sweep_row(t, label, comp, tie_tol=config.tie_tol, tail=config.tail))
      print(compare.sweep_line(rows[-1]))
  title = (
    f"Strategy I vs II: {problem.name}, n={config.n}, {run.steps} steps, order={config.order}, "
    f"batch {config.batch_size}, "
    + ("same γ per cell" if config.lr_policy == "same" else f"{config.own_fraction:g} × own limit")
  )
  md = compare.sweep_markdown(
    rows, title, tail=config.tail, tie_tol=config.tie_tol, identical_cells=same
  )
  (run.workdir / "sweep.md").write_text(md)
  metrics.write_table(run.workdir / "sweep.csv", rows)
  summary = {"problem": problem.name, "n": config.n, "steps": run.steps}
  summary |= compare.sweep_summary(rows, same) | {"wall_s": time.time() - t0}
  runtime.write_summary(run.workdir, summary | {"config": config.to_dict()})
  counts = f"{summary['II_wins_gap']}/{summary['cells']}"
  print(f"II wins f-gap in {counts} cells -> {run.workdir}/sweep.md")


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
