"""Decentralized SGD, Strategy (I) and (II), adapt-then-combine (ATC) and combine-then-adapt (CTA).

With mixing matrix B, per-node gradient scale s_i and step γ (stochastic gradients g_i of f_i):
  ATC:  X⁺ = B (X − γ s ⊙ G)            CTA:  X⁺ = B X − γ s ⊙ G
  (I)   B = W doubly stochastic,   s_i = n λ_i  (weights embedded in the losses n λ_i f_i)
  (II)  B = A λ-reversible row-stochastic (λᵀA = λᵀ),  s_i = 1
These are the standard plain-DSGD forms (no gradient tracking; CTA as in Lian et al. 2017,
arXiv 1705.09056) that the abstract of arXiv 2511.19513 implies; its exact experimental protocol is
not public (docs/decentralized.md, "Strategies"). In both cases the π-average (π = 1/n for W, λ for
A, the left Perron vector) obeys x̄_π⁺ = x̄_π − γ Σ_j λ_j g_j exactly: the strategies share the
expected descent direction.

Two executions of the same update:
* dense simulation — iterates stacked as (n, ...), gradients vmapped, mixing one n×n matmul;
* truly distributed — `jax.shard_map` over mesh axis ``nodes`` with one node per device; mixing is
  a sum of ``ppermute`` rounds (each a partial permutation of the directed edges) for sparse
  graphs, or an ``all_gather`` + row product for dense ones. Metrics are `psum`s, so nothing is
  gathered to one host.

Both keep their own jitted ``lax.scan`` instead of ``jaxlab.core.runtime.train``: a sweep runs
dozens of short simulations through one compiled scan (the runtime compiles its chunk per call),
and the distributed one scans inside ``shard_map`` so iterates never leave their device.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax import lax
from jax.sharding import PartitionSpec

from jaxlab.core.errors import ConfigError, check_choice, require
from jaxlab.optim.decentralized import graphs
from jaxlab.optim.decentralized.problems import Problem

STRATEGIES = ("I", "II")
ORDERS = ("atc", "cta")
COMMS = ("auto", "ppermute", "all_gather")
AXIS = "nodes"

_ALIASES = {
  "I": "I",
  "1": "I",
  "i": "I",
  "doubly": "I",
  "weighted_loss": "I",
  "II": "II",
  "2": "II",
  "ii": "II",
  "row": "II",
  "row_stochastic": "II",
}


def canonical_strategy(strategy: str) -> str:
  s = _ALIASES.get(str(strategy))
  if s is None:
    raise ConfigError(
      "strategy",
      f"unknown strategy {strategy!r}; allowed: I (weighted loss + doubly stochastic W) or II "
      "(row-stochastic λ-reversible A)",
    )
  return s


def mixing_and_scale(strategy: str, graph: graphs.Graph, lam, row_kind: str = "auto"):
  """(B, s): the mixing matrix and the per-node gradient scale of a strategy."""
  lam = np.asarray(lam, np.float64)
  if canonical_strategy(strategy) == "I":
    return graphs.metropolis(graph), graph.n * lam
  return graphs.row_stochastic(graph, lam, row_kind), np.ones(graph.n)


class DecState(struct.PyTreeNode):
  """Algorithm state: node iterates ``x`` (pytree, leading axis n) plus the constants of the run."""

  x: Any
  mix: jax.Array  # (n, n) B
  scale: jax.Array  # (n,) s
  lam: jax.Array  # (n,) λ (metrics)
  lr: jax.Array  # γ
  f_star: jax.Array
  step: jax.Array
  order: str = struct.field(pytree_node=False, default="atc")


def init_state(
  strategy: str,
  graph: graphs.Graph,
  lam,
  problem: Problem,
  lr: float,
  *,
  order: str = "atc",
  row_kind: str = "auto",
  mixing: np.ndarray | None = None,
  f_star: float | None = None,
) -> DecState:
  check_choice("order", order, ORDERS)
  require(graph.n == problem.n, "problem", f"has {problem.n} nodes but the graph has {graph.n}")
  b, s = mixing_and_scale(strategy, graph, lam, row_kind)
  if mixing is not None:
    b = np.asarray(mixing, np.float64)
  x = jax.tree.map(lambda v: jnp.broadcast_to(v, (graph.n,) + v.shape), problem.x0)
  fs = problem.f_star(lam) if f_star is None else f_star
  f32 = lambda a: jnp.asarray(a, jnp.float32)
  return DecState(
    x=x,
    mix=f32(b),
    scale=f32(s),
    lam=f32(np.asarray(lam) / np.sum(lam)),
    lr=f32(lr),
    f_star=f32(fs),
    step=jnp.zeros((), jnp.int32),
    order=order,
  )


# ------------------------------------------------------------------------------------------------
# Shared pieces (one node's view).


def _node_key(key, i):
  return jax.random.fold_in(key, i)


def _scaled(tree, s):
  """Multiplies every leaf (leading axis n or 1) by s along that axis."""
  return jax.tree.map(lambda v: v * s.reshape((-1,) + (1,) * (v.ndim - 1)).astype(v.dtype), tree)


def _apply_order(order, mix_fn, x, sg, lr):
  if order == "atc":
    return mix_fn(jax.tree.map(lambda a, g: a - lr * g, x, sg))
  return jax.tree.map(lambda a, g: a - lr * g, mix_fn(x), sg)


# ------------------------------------------------------------------------------------------------
# Dense simulation.


def _mix_dense(b, tree):
  return jax.tree.map(lambda v: jnp.tensordot(b, v, axes=1).astype(v.dtype), tree)


def node_grads(problem: Problem, x, key):
  """Per-node stochastic gradients G (leading axis n); node i uses fold_in(key, i)."""
  n = problem.n
  keys = jax.vmap(lambda i: _node_key(key, i))(jnp.arange(n))
  return jax.vmap(problem.local_grad)(x, problem.node_data(), keys)


def metrics(state: DecState, problem: Problem, x=None) -> dict[str, jax.Array]:
  """f(x̄_λ) − f*, Σλ_i‖x_i − x̄_λ‖², and f − f* at the strategy's tracked (Perron) average."""
  x = state.x if x is None else x
  lam = state.lam
  xbar = jax.tree.map(lambda v: jnp.tensordot(lam, v, axes=1), x)
  cons = sum(
    jnp.sum(lam * jnp.sum((v - vb[None]).reshape(v.shape[0], -1) ** 2, 1))
    for v, vb in zip(jax.tree.leaves(x), jax.tree.leaves(xbar))
  )
  # Perron vector π of B: λ for (II); for (I), 1ᵀW = 1ᵀ so π = 1/n. Recover it as B's column mean
  # weighted test: πᵀB = πᵀ holds for π = λ iff λᵀB = λᵀ; otherwise use uniform.
  lam_b = lam @ state.mix
  pi = jnp.where(jnp.max(jnp.abs(lam_b - lam)) < 1e-5, lam, jnp.full_like(lam, 1.0 / lam.shape[0]))
  xpi = jax.tree.map(lambda v: jnp.tensordot(pi, v, axes=1), x)
  return {
    "gap": problem.global_loss(xbar, lam) - state.f_star,
    "consensus": cons,
    "gap_tracked": problem.global_loss(xpi, lam) - state.f_star,
  }


def update(state: DecState, problem: Problem, key) -> tuple[DecState, dict[str, jax.Array]]:
  """One decentralized SGD step (dense simulation); ``problem`` plays the role of the batch."""
  g = node_grads(problem, state.x, key)
  x = _apply_order(
    state.order, lambda t: _mix_dense(state.mix, t), state.x, _scaled(g, state.scale), state.lr
  )
  state = state.replace(x=x, step=state.step + 1)
  return state, metrics(state, problem)


def step_with_grads(state: DecState, problem: Problem, key):
  """Like `update` but returns the gradients G used (for the average-recursion identity)."""
  g = node_grads(problem, state.x, key)
  x = _apply_order(
    state.order, lambda t: _mix_dense(state.mix, t), state.x, _scaled(g, state.scale), state.lr
  )
  return state.replace(x=x, step=state.step + 1), g


def _scan_dense(state, problem, key, steps):
  def body(st, k):
    return update(st, problem, jax.random.fold_in(key, k))

  return lax.scan(body, state, jnp.arange(steps))


simulate = jax.jit(_scan_dense, static_argnames="steps")
simulate.__doc__ = (
  "simulate(state, problem, key, steps) -> (final state, per-step metrics); jitted scan."
)


# ------------------------------------------------------------------------------------------------
# Truly distributed: one node per device.


def ppermute_rounds(b: np.ndarray, tol: float = 0.0) -> tuple[tuple[tuple[int, int], ...], ...]:
  """Splits the off-diagonal support of B (edges j → i with b_ij ≠ 0) into rounds in which every
  node sends at most once and receives at most once, i.e. valid `ppermute` permutations. First-fit
  greedy over edges ordered by circular offset, so circulant graphs (ring, torus, exponential) get
  one round per offset."""
  n = b.shape[0]
  edges = [(j, i) for i in range(n) for j in range(n) if i != j and abs(b[i, j]) > tol]
  edges.sort(key=lambda e: ((e[1] - e[0]) % n, e[0]))
  rounds: list[list[tuple[int, int]]] = []
  senders: list[set] = []
  receivers: list[set] = []
  for src, dst in edges:
    for r in range(len(rounds)):
      if src not in senders[r] and dst not in receivers[r]:
        break
    else:
      rounds.append([])
      senders.append(set())
      receivers.append(set())
      r = len(rounds) - 1
    rounds[r].append((src, dst))
    senders[r].add(src)
    receivers[r].add(dst)
  return tuple(tuple(r) for r in rounds)


def choose_comm(b: np.ndarray, comm: str = "auto") -> str:
  """``auto``: ppermute when it needs fewer rounds than half the nodes (sparse), else all_gather."""
  check_choice("comm", comm, COMMS)
  if comm != "auto":
    return comm
  return "ppermute" if len(ppermute_rounds(b)) <= b.shape[0] // 2 else "all_gather"


def _sharded_scan(state: DecState, problem: Problem, key, steps: int, comm: str, rounds):
  """Runs inside shard_map: every array here is one node's slice (leading axis 1)."""
  i = lax.axis_index(AXIS)
  n = lax.psum(1, AXIS)
  lam_i = state.lam  # (1,)
  scale_i = state.scale  # (1,)
  row_i = state.mix  # (1, n) this node's row of B
  data_i = jax.tree.map(lambda v: v[0], problem.node_data())

  if comm == "all_gather":

    def mix_fn(tree):
      def one(v):
        v_all = lax.all_gather(v, AXIS, tiled=True)  # (n, ...)
        return jnp.tensordot(row_i, v_all, axes=1).astype(v.dtype)

      return jax.tree.map(one, tree)
  else:
    # Receive weights per round: node i gets b_i,src from the unique src sending to it in round r.
    recv_w = (
      jnp.stack(
        [sum(jnp.where(i == dst, row_i[0, src], 0.0) for src, dst in rnd) for rnd in rounds]
      )
      if rounds
      else jnp.zeros((0,))
    )
    self_w = row_i[0, i]

    def mix_fn(tree):
      def one(v):
        out = self_w * v
        for r, rnd in enumerate(rounds):
          out = out + recv_w[r] * lax.ppermute(v, AXIS, perm=list(rnd))
        return out.astype(v.dtype)

      return jax.tree.map(one, tree)

  def node_metrics(x):
    xbar = jax.tree.map(lambda v: lax.psum(lam_i[0] * v[0], AXIS), x)
    cons = lax.psum(
      lam_i[0]
      * sum(jnp.sum((v[0] - vb) ** 2) for v, vb in zip(jax.tree.leaves(x), jax.tree.leaves(xbar))),
      AXIS,
    )
    gap = lax.psum(lam_i[0] * problem.local_loss(xbar, data_i), AXIS) - state.f_star
    # tracked average: λ if λᵀB = λᵀ (column test via psum), else uniform.
    lam_b = lax.psum(lam_i[0] * row_i[0], AXIS)  # (n,) = λᵀB
    lam_all = lax.all_gather(lam_i, AXIS, tiled=True)
    pi_i = jnp.where(jnp.max(jnp.abs(lam_b - lam_all)) < 1e-5, lam_i[0], 1.0 / n)
    xpi = jax.tree.map(lambda v: lax.psum(pi_i * v[0], AXIS), x)
    gap_t = lax.psum(lam_i[0] * problem.local_loss(xpi, data_i), AXIS) - state.f_star
    return {"gap": gap, "consensus": cons, "gap_tracked": gap_t}

  def body(x, k):
    kk = _node_key(jax.random.fold_in(key, k), i)
    g = jax.tree.map(
      lambda v: v[None], problem.local_grad(jax.tree.map(lambda v: v[0], x), data_i, kk)
    )
    x = _apply_order(state.order, mix_fn, x, _scaled(g, scale_i), state.lr)
    return x, node_metrics(x)

  x, ms = lax.scan(body, state.x, jnp.arange(steps))
  return x, ms


def simulate_sharded(state: DecState, problem: Problem, key, steps: int, mesh, comm: str = "auto"):
  """Same as `simulate`, with node i on device i of ``mesh`` axis ``nodes`` (size must equal n)."""
  n = problem.n
  size = mesh.shape.get(AXIS) if AXIS in mesh.shape else None
  require(
    size == n,
    "mesh",
    f"distributed mode needs mesh axis {AXIS!r} of size n={n} (one node per device); mesh has "
    f"{dict(mesh.shape)}",
  )
  b = np.asarray(state.mix)
  comm = choose_comm(b, comm)
  rounds = ppermute_rounds(b) if comm == "ppermute" else ()
  node = PartitionSpec(AXIS)
  st_spec = DecState(
    x=jax.tree.map(lambda _: node, state.x),
    mix=node,
    scale=node,
    lam=node,
    lr=PartitionSpec(),
    f_star=PartitionSpec(),
    step=PartitionSpec(),
    order=state.order,
  )
  problem = problem.replace(test=None)  # held-out data is not per node
  pr_spec = problem.replace(
    inputs=node, targets=node, counts=node, x0=jax.tree.map(lambda _: PartitionSpec(), problem.x0)
  )
  fn = jax.shard_map(
    lambda s, p, k: _sharded_scan(s, p, k, steps, comm, rounds),
    mesh=mesh,
    in_specs=(st_spec, pr_spec, PartitionSpec()),
    out_specs=(jax.tree.map(lambda _: node, state.x), PartitionSpec()),
  )
  x, ms = jax.jit(fn)(state, problem, key)
  return state.replace(x=x, step=state.step + steps), ms, comm
