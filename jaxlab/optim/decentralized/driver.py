"""The runs of decentralized SGD: one strategy on one graph (``run``, optionally sharded over a
``nodes`` mesh axis), several seeds as one vmapped scan (``run_seeds``), and the default step.

See :mod:`jaxlab.optim.decentralized` for the problem and the strategies.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.core.errors import ConfigError, require
from jaxlab.optim.decentralized import config as config_lib
from jaxlab.optim.decentralized.algorithms import (
  _scan_dense,
  canonical_strategy,
  init_state,
  simulate,
  simulate_sharded,
)
from jaxlab.optim.decentralized.graphs import (
  Graph,
  check_mixing,
)
from jaxlab.optim.decentralized.problems import (
  Problem,
)


@dataclasses.dataclass
class RunResult:
  """Per-step metrics (after each step) and the final node iterates. ``diverged_at``: the first
  step (1-based) whose gap or consensus is NaN/inf, None when the run stayed finite."""

  gap: np.ndarray  # (steps,) f(x̄_λ) − f*
  consensus: np.ndarray  # (steps,) Σ λ_i ‖x_i − x̄_λ‖²
  gap_tracked: np.ndarray  # (steps,) f − f* at the mixing's Perron average (1/n for W, λ for A)
  x: Any  # final node iterates, leading axis n
  mixing: np.ndarray  # the B used
  f_star: float
  comm: str  # "dense", "ppermute" or "all_gather"
  diverged_at: int | None = None


def default_lr(problem: Problem, lam, factor: float | None = None) -> float:
  """γ = factor / (L_max · n · max λ): stable for Strategy (I), whose node i is n λ_i L_i smooth;
  the same γ is then used for both strategies (docs/decentralized.md, "Step size")."""
  lam = np.asarray(lam, np.float64)
  if factor is None:  # the comparison's default, `get_config().lr_factor`
    factor = config_lib.get_config().lr_factor
  return float(factor / (problem.smoothness * problem.n * lam.max()))


def _check_run_args(graph, lam, steps, lr):
  """(lr as float, λ as float64); raises ConfigError naming the bad argument."""
  ok = isinstance(steps, (int, np.integer)) and not isinstance(steps, bool) and steps >= 1
  require(ok, "steps", f"must be an int >= 1, got {steps!r}")
  try:
    lr = float(lr)
  except (TypeError, ValueError):
    raise ConfigError("lr", f"must be a number, got {lr!r}") from None
  require(np.isfinite(lr) and lr > 0, "lr", f"must be a finite number > 0, got {lr}")
  require(isinstance(graph, Graph), "graph", f"must be a Graph (make_graph), got {graph!r}")
  lam = np.asarray(lam, np.float64)
  ok = lam.shape == (graph.n,) and np.all(np.isfinite(lam)) and np.all(lam > 0)
  ok = ok and np.isclose(lam.sum(), 1.0, atol=1e-6)
  require(bool(ok), "lam", f"must be {graph.n} finite positive weights summing to 1")
  return lr, lam


def run(
  strategy: str,
  graph: Graph,
  lam,
  problem: Problem,
  steps: int,
  lr: float,
  *,
  key,
  order: str = "atc",
  row_kind: str = "auto",
  mixing: np.ndarray | None = None,
  mesh=None,
  comm: str = "auto",
  f_star: float | None = None,
) -> RunResult:
  """Runs ``steps`` of decentralized SGD (one jitted `lax.scan`) and returns per-step metrics.

  Args:
    strategy: "I" (weighted losses + doubly stochastic W) or "II" (λ-reversible row-stochastic A).
    graph, lam: topology and node weights (λ > 0, Σλ = 1).
    problem: a `Problem` (its ``batch_size`` sets the stochastic-gradient minibatch; 0 = full).
    steps, lr: iterations and constant step γ.
    key: PRNG key; step k, node i draws from fold_in(fold_in(key, k), i) in both execution modes.
    order: "atc" (adapt-then-combine) or "cta" (combine-then-adapt).
    row_kind: λ-induced matrix for (II): "auto", "lambda_metropolis", "degree_average",
      "scaled_kernel".
    mixing: override B (checked for the strategy's properties).
    mesh: if given, run one node per device along its ``nodes`` axis via `jax.shard_map`.
    comm: distributed mixing: "auto", "ppermute" (neighbour exchange) or "all_gather".
    f_star: override the optimum (default: `problem.f_star(lam)`).
  """
  strategy = canonical_strategy(strategy)
  lr, lam = _check_run_args(graph, lam, steps, lr)
  state = init_state(
    strategy, graph, lam, problem, lr, order=order, row_kind=row_kind, mixing=mixing, f_star=f_star
  )
  b = np.asarray(state.mix, np.float64)
  if mixing is not None:
    check_mixing(np.asarray(mixing, np.float64), graph, None if strategy == "I" else lam, atol=1e-6)
  if mesh is None:
    final, ms = simulate(state, problem, key, steps=int(steps))
    used = "dense"
  else:
    final, ms, used = simulate_sharded(state, problem, key, int(steps), mesh, comm)
  ms = {k: np.asarray(v) for k, v in jax.device_get(ms).items()}
  return _result(ms, jax.device_get(final.x), b, float(state.f_star), used)


def _result(ms, x, mixing, f_star, comm) -> RunResult:
  bad = np.flatnonzero(~(np.isfinite(ms["gap"]) & np.isfinite(ms["consensus"])))
  return RunResult(
    gap=ms["gap"],
    consensus=ms["consensus"],
    gap_tracked=ms["gap_tracked"],
    x=x,
    mixing=mixing,
    f_star=f_star,
    comm=comm,
    diverged_at=int(bad[0]) + 1 if bad.size else None,
  )


def stack_problems(problems: list[Problem]) -> Problem:
  """Problems of one kind (one per seed) on a leading seed axis, each node's data padded to the
  longest (the padding is masked: ``counts`` holds each node's length). Host-side metadata
  (``smoothness``, the held-out ``test`` set) is not part of the stack: read it per seed."""
  longest = max(int(p.inputs.shape[1]) for p in problems)

  def pad(a):
    return jnp.pad(a, [(0, 0), (0, longest - a.shape[1])] + [(0, 0)] * (a.ndim - 2))

  first = problems[0]
  # the static fields must agree to stack: a digits problem's loss is a new closure per instance
  # (the same function), its smoothness a host-side number
  meta = {"example_loss": first.example_loss, "smoothness": first.smoothness, "test": None}
  same = [p.replace(inputs=pad(p.inputs), targets=pad(p.targets), **meta) for p in problems]
  return jax.tree.map(lambda *xs: jnp.stack(xs), *same)


@functools.partial(jax.jit, static_argnames="steps")
def _simulate_seeds(states, problems, keys, steps):
  return jax.vmap(lambda s, p, k: _scan_dense(s, p, k, steps))(states, problems, keys)


def run_seeds(
  strategy: str,
  graph: Graph,
  lams,
  problems: list[Problem],
  steps: int,
  lrs,
  *,
  keys,
  order: str = "atc",
  row_kind: str = "auto",
  f_stars=None,
) -> list[RunResult]:
  """`run` of one strategy for several seeds as ONE vmapped scan (dense, one device): seed i has
  its own λ ``lams[i]``, problem ``problems[i]``, step ``lrs[i]``, key ``keys[i]`` (a key array)
  and optimum ``f_stars[i]``; returns each seed's `RunResult`, equal to `run` of that seed alone
  up to the floating-point order of batched kernels (tests/test_decentralized_compare.py)."""
  strategy = canonical_strategy(strategy)
  f_stars = [None] * len(problems) if f_stars is None else f_stars
  states = []
  for lam, problem, lr, f_star in zip(lams, problems, lrs, f_stars, strict=True):
    lr, lam = _check_run_args(graph, lam, steps, lr)
    states.append(
      init_state(strategy, graph, lam, problem, lr, order=order, row_kind=row_kind, f_star=f_star)
    )
  stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *states)
  final, ms = _simulate_seeds(stacked, stack_problems(problems), keys, steps=int(steps))
  ms = {k: np.asarray(v) for k, v in jax.device_get(ms).items()}
  xs = jax.device_get(final.x)
  return [
    _result(
      {k: v[i] for k, v in ms.items()},
      jax.tree.map(lambda v: v[i], xs),
      np.asarray(st.mix, np.float64),
      float(st.f_star),
      "dense",
    )
    for i, st in enumerate(states)
  ]
