"""Defaults and validation of the Strategy I vs II comparison (`python -m
experiments.decentralized`, `jaxlab.optim.decentralized.compare.run_single` / `run_sweep`): one
`get_config()`, one `validate_config()`."""

from __future__ import annotations

import ml_collections
import numpy as np

from jaxlab.core import resources
from jaxlab.core.errors import ConfigError, check_choice, check_config, require
from jaxlab.optim.decentralized import algorithms, graphs, problems

LR_POLICIES = ("same", "own")  # one step for both strategies, or each its own


def row_kind_error(row_kind: str, graph: graphs.Graph, lam_name: str) -> str | None:
  """degree_average is λ-reversible only for λ ∝ degree+1 (or uniform λ on a regular graph)."""
  if row_kind != "degree_average":
    return None
  regular = bool(np.all(graph.degrees == graph.degrees[0]))
  if lam_name == "degree" or (lam_name == "uniform" and regular):
    return None
  return f"degree_average needs λ ∝ degree+1; --lam={lam_name} on {graph.name} is not (use auto)"


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
  "order": algorithms.ORDERS,
  "row_kind": graphs.ROW_MIXINGS,
  "comm": algorithms.COMMS,
  "tail": lambda v: None if 0 < v <= 1 else f"must be in (0, 1], got {v}",
  "tie_tol": "nonneg",
  "lr_policy": LR_POLICIES,
  "own_fraction": lambda v: None if 0 < v < 1 else f"must be in (0, 1), got {v}",
  "sgd_batch": "positive",
}


def sweep_lams(config) -> list[tuple[str, float]]:
  """config.sweep_lams as (kind, α) pairs."""
  specs = [s for s in config.sweep_lams.split(",") if s.strip()]
  allowed = ", ".join(problems.LAMBDAS)
  require(bool(specs), "config.sweep_lams", f"empty; allowed: {allowed}")
  return [problems.parse_lambda(s, config.lam_alpha, "config.sweep_lams") for s in specs]


def sweep_topologies(config) -> list[str]:
  """config.sweep_topologies as a list of topology names."""
  items = [t.strip() for t in config.sweep_topologies.split(",") if t.strip()]
  bad = [t for t in items if t not in graphs.TOPOLOGIES]
  if bad or not items:
    allowed = ", ".join(graphs.TOPOLOGIES)
    raise ConfigError(
      "config.sweep_topologies", f"got {','.join(bad) or 'nothing'}; allowed: {allowed}"
    )
  return items


def check_sizes(config, steps: int | None = None, seeds: int = 1) -> None:
  """Refuses sizes whose arrays cannot fit, before any graph or data set is built: the n x n
  mixing matrices, the least-squares data (n x rows x dim) and the per-step curves; ``seeds``
  problems and runs held at once (refused naming ``seeds``)."""
  n = config.n
  for field in ("n", "rows", "dim", "batch_size", "sgd_batch"):
    resources.check_int32(f"config.{field}", config[field])
  resources.check_fits(4 * 8 * n * n, "config.n", f"the {n} x {n} mixing matrices")
  data = 4 * 4 * n * config.rows * (config.dim + 1)
  resources.check_fits(data, "config.rows", f"{n} nodes x {config.rows} rows x {config.dim} dims")
  resources.check_fits(4 * 4 * n * config.dim * 4, "config.dim", f"{n} iterates of {config.dim}")
  for field in ("batch_size", "sgd_batch"):  # minibatches are drawn with replacement
    b = config[field]
    resources.check_fits(4 * 4 * n * b * (config.dim + 1), f"config.{field}", f"{n} minibatches")
  if steps is not None:
    resources.check_int32("steps", steps, "the step count")
    resources.check_fits(4 * 8 * 2 * steps * (n + 4), "steps", f"the curves of {steps} steps")
  if seeds > 1:  # every seed's problem, iterates and curves, at once (one vmapped scan)
    one = 4 * 8 * n * n + data + 4 * 4 * n * config.dim * 4 + 4 * 8 * 2 * (steps or 0) * (n + 4)
    resources.check_fits(seeds * one, "seeds", f"{seeds} seeds' problems, iterates and curves")


def validate_config(
  config,
  *,
  problem: str,
  topology: str | None = None,
  lam: tuple[str, float] | None = None,
  mesh=None,
  steps: int | None = None,
  seeds: int = 1,
) -> ml_collections.FrozenConfigDict:
  """Every check before anything runs; returns the checked config, frozen (the cells to compare:
  :func:`cells`). ConfigError names the field or flag (``config.lr``, ``problem``, ``topology``,
  ``mesh``, ``seeds``: several run vmapped on one device)."""
  check_choice("problem", problem, problems.PROBLEMS)
  check_config(config, CHECKS)
  msg = "several seeds run vmapped on one device; drop --mesh"
  require(seeds == 1 or mesh is None, "seeds", msg)
  check_sizes(config, steps, seeds)
  if config.lr_policy == "own":
    msg = "needs least_squares (its stability limit is exact); use lr_policy=same"
    require(problem == "least_squares", "config.lr_policy", msg)
    require(config.lr == 0, "config.lr", "is set by lr_policy=own; leave it 0")
  if topology is not None:
    check_choice("topology", topology, graphs.TOPOLOGIES)
  topos, lams = cells(config, topology, lam)
  field = "config.sweep_topologies" if topology is None else "topology"
  for t in topos:  # hypercube needs 2^k nodes, torus a composite n, ER a connected sample
    msg = graphs.topology_error(t, config.n, p=config.er_p, seed=config.graph_seed)
    # n >= 2 was checked, so what can fail for Erdős–Rényi is its edge probability
    require(msg is None, "config.er_p" if t == "erdos_renyi" else field, msg)
  for t in topos:
    graph = graphs.make_graph(t, config.n, p=config.er_p, seed=config.graph_seed)
    for name, _ in lams:
      msg = row_kind_error(config.row_kind, graph, name)
      require(msg is None, "config.row_kind", msg)
  got = None if mesh is None else dict(mesh.shape)
  msg = f"distributed mode puts one node per device: needs nodes:{config.n} (config.n), got {got}"
  require(got is None or got.get("nodes") == config.n, "mesh", msg)
  return ml_collections.FrozenConfigDict(config)


def cells(config, topology: str | None = None, lam: tuple[str, float] | None = None):
  """The (topologies, λ specs) to compare: the sweep's (``topology=None``) or the one cell."""
  if topology is not None:
    return [topology], [lam]
  return sweep_topologies(config), sweep_lams(config)
