"""Decoding a world model's next-frame logits into tokens: sample, argmax, ITC, ITC-Hungarian.

ITC (Identifiable Token Correspondence, Kim et al., arXiv 2605.16457) explains each next-frame
token either as a COPY of a nearby previous-frame token or as a newly GENERATED token, each
previous token being usable at most once, and picks the MAP correspondence as an assignment
problem. The cost matrix, the entropic OT solve and the greedy rounding below follow the
authors' released JAX code (``snu-mllab/Identifiable-Token-Correspondence``,
``crafter_and_craftax/train.py``: ``solve_optimal_transport``, ``single_sinkhorn``,
``greedy_argmax``, ``get_distance_costs``); see docs/itc.md for the derivation as MAP
inference and the hyperparameters.

With ``L`` next-frame positions, ``D`` dummy ("generate") rows and ``D`` trash columns the
``(L + D) x (L + D)`` cost matrix is (rows: sources, columns: targets)::

    C[i, j]         = alpha_d * d(i, j) - p_j[c_i] - tau_trash   copy prev token i to position j
    C[L + d, j]     = -p_j[t_j] if d == j else 100                generate the proposal t_j at j
    C[i, L + d]     = 0                                           previous token i disappears
    C[L + d, L + e] = 0

where ``p_j = softmax(logits_j + gumbel)``, ``t_j = argmax(logits_j + gumbel)`` (the independent
sample), ``c_i`` the previous tokens and ``d(i, j)`` the squared grid distance, 100 beyond
``max_sq_dist`` (4.1: moves of at most 2 cells). The final token at ``j`` is ``c_src(j)`` when the
rounded plan copies a previous token to ``j``, ``j`` is an interior map cell and the episode is
not done; otherwise ``t_j``.

``itc`` solves the entropic OT with ott-jax (uniform marginals, ``epsilon`` relative to the cost's
std) then rounds greedily, all inside jit. ``itc_hungarian`` solves the exact assignment with
scipy's ``linear_sum_assignment`` through ``jax.pure_callback`` (host round trip per call; it
works under jit and vmap but is CPU-bound and not differentiable). The authors' Hungarian option
is ott's ``unreg.hungarian``; both give an optimal assignment (ties aside).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.core.errors import check_choice, require
from jaxlab.rl.itc import fields

Array = jax.Array
METHODS = ("sample", "argmax", "itc", "itc_hungarian")
_BIG = 100.0  # the code's "forbidden" cost (a move too far, a dummy row feeding another cell)


@dataclasses.dataclass(frozen=True)
class ITCConfig:
  """ITC's decoding hyperparameters (values: ``jaxlab.rl.itc.get_config().itc``)."""

  grid: tuple[int, int]  # (rows, cols) of the token grid, row-major positions
  inventory_rows: int  # bottom rows that show the inventory (never copied)
  num_dummy: int  # "generate" rows = "trash" columns; must equal rows * cols
  distance_coef: float  # alpha_d
  trash_cost: float  # tau_trash (the copy bonus)
  max_sq_dist: float  # squared moves beyond this cost 100
  epsilon: float  # entropic regularisation, relative to the cost matrix's std
  greedy_passes: int  # rounding passes (the code uses tokens_per_block = L + 1)

  @classmethod
  def from_config(cls, config, **overrides) -> ITCConfig:
    """From ``config.itc`` (``jaxlab.rl.itc.get_config()``) and ``overrides``."""
    return fields.from_config(cls, config, **overrides)

  def validate(self, prefix: str = "config.itc") -> ITCConfig:
    rows, cols = self.grid
    require(rows >= 1 and cols >= 1, f"{prefix}.grid", f"must be positive, got {self.grid}")
    require(
      self.num_dummy == rows * cols,
      f"{prefix}.num_dummy",
      f"must equal the number of tokens {rows * cols} (one generate row per position), "
      f"got {self.num_dummy}",
    )
    for name in ("distance_coef", "trash_cost", "max_sq_dist", "epsilon"):
      require(getattr(self, name) >= 0, f"{prefix}.{name}", "must be >= 0")
    require(self.epsilon > 0, f"{prefix}.epsilon", "must be > 0")
    require(self.greedy_passes >= 1, f"{prefix}.greedy_passes", "must be >= 1")
    return self


def distance_costs(grid: tuple[int, int], max_sq_dist: float) -> np.ndarray:
  """``d(i, j)``: squared grid distance between positions, ``100`` where it exceeds the limit."""
  rows, cols = grid
  y, x = np.divmod(np.arange(rows * cols), cols)
  d = (x[:, None] - x[None, :]) ** 2 + (y[:, None] - y[None, :]) ** 2
  return np.where(d > max_sq_dist, _BIG, d).astype(np.float32)


def interior_mask(grid: tuple[int, int], inventory_rows: int) -> np.ndarray:
  """Positions that may copy: not on the map's outer ring, not in the inventory rows."""
  rows, cols = grid
  y, x = np.divmod(np.arange(rows * cols), cols)
  return (x > 0) & (x < cols - 1) & (y > 0) & (y < rows - 1 - inventory_rows)


def cost_matrix(probs: Array, proposal: Array, prev: Array, cfg: ITCConfig) -> Array:
  """The ``(L + D) x (L + D)`` ITC cost (module docstring) for one frame.

  ``probs``: ``[L, V]`` softmax of the perturbed logits; ``proposal``: ``[L]`` sampled tokens;
  ``prev``: ``[L]`` previous-frame tokens.
  """
  n = probs.shape[0]
  dist = jnp.asarray(distance_costs(cfg.grid, cfg.max_sq_dist))
  copy = cfg.distance_coef * dist - probs[:, prev].T - cfg.trash_cost  # [i, j]: p_j[c_i]
  p_prop = jnp.take_along_axis(probs, proposal[:, None], axis=-1)[:, 0]  # p_j[t_j]
  eye = jnp.eye(n, cfg.num_dummy, dtype=probs.dtype)
  generate = (1.0 - eye.T) * _BIG - eye.T * p_prop[None, :]  # [d, j]
  zeros_lr, zeros_dd = jnp.zeros((n, cfg.num_dummy)), jnp.zeros((cfg.num_dummy,) * 2)
  top = jnp.concatenate([copy, zeros_lr], axis=1)
  bottom = jnp.concatenate([generate, zeros_dd], axis=1)
  return jnp.concatenate([top, bottom], axis=0)


def greedy_round(plan: Array, passes: int) -> Array:
  """Rounds a (fractional) plan to a source per column; a source is claimed at most once.

  Each pass, every column claims its best row; when several columns claim the same row, all but
  the one with the largest entry lose that entry (set to -inf). Returns ``argmax`` over rows.
  """

  def one(_, m):
    target = jnp.argmax(m, axis=0)  # [cols]: the row each column claims
    claim = jax.nn.one_hot(target, m.shape[0], dtype=bool).T  # [rows, cols]
    conflict = jnp.where(claim, m, -jnp.inf)
    winner = jax.nn.one_hot(jnp.argmax(conflict, axis=1), m.shape[1], dtype=bool)
    lose = claim & ~winner
    return jnp.where(lose, -jnp.inf, m)

  return jnp.argmax(jax.lax.fori_loop(0, passes, one, plan), axis=0)


def sinkhorn_plan(cost: Array, epsilon: float) -> Array:
  """Entropic OT plan with uniform marginals (ott-jax, ``relative_epsilon="std"``)."""
  from ott.geometry import geometry
  from ott.solvers import linear

  geom = geometry.Geometry(cost_matrix=cost, epsilon=epsilon, relative_epsilon="std")
  return linear.solve(geom).matrix


def sinkhorn_sources(cost: Array, cfg: ITCConfig) -> Array:
  """Source row per target column: Sinkhorn, trash columns zeroed, greedy rounding."""
  n = cost.shape[0] - cfg.num_dummy
  plan = sinkhorn_plan(cost, cfg.epsilon).at[:, n:].set(0.0)
  return greedy_round(plan, cfg.greedy_passes)


def _hungarian_host(cost: np.ndarray) -> np.ndarray:
  from scipy.optimize import linear_sum_assignment

  cost = np.asarray(cost, np.float64)
  out = np.empty(cost.shape[:-2] + cost.shape[-1:], np.int32)
  for idx in np.ndindex(*cost.shape[:-2]):
    rows, cols = linear_sum_assignment(cost[idx])
    out[idx][cols] = rows
  return out


def hungarian_sources(cost: Array) -> Array:
  """Exact assignment (scipy, on the host via ``pure_callback``): source row per column."""
  shape = jax.ShapeDtypeStruct(cost.shape[:-2] + cost.shape[-1:], jnp.int32)
  return jax.pure_callback(_hungarian_host, shape, cost, vmap_method="expand_dims")


def itc_tokens(probs, proposal, prev, done, cfg: ITCConfig, exact: bool = False) -> Array:
  """ITC's tokens for one frame (``done``: the episode ended, nothing is copied)."""
  n = probs.shape[0]
  cost = cost_matrix(probs, proposal, prev, cfg)
  src = hungarian_sources(cost) if exact else sinkhorn_sources(cost, cfg)
  src = src[:n]
  interior = jnp.asarray(interior_mask(cfg.grid, cfg.inventory_rows))
  copy = (src < n) & interior & ~done
  return jnp.where(copy, prev[jnp.clip(src, 0, n - 1)], proposal)


def decode(
  logits: Array,
  prev: Array,
  done: Array,
  key: Array,
  method: str,
  cfg: ITCConfig,
  choices: tuple[str, ...] = METHODS,
):
  """Next-frame tokens ``[B, L]`` from logits ``[B, L, V]``, previous tokens ``[B, L]``, ``done``.

  ``sample``: independent Gumbel-max samples; ``argmax``: the mode per position; ``itc`` /
  ``itc_hungarian``: the ITC correspondence decoding (module docstring) on top of the samples.
  ``method`` may also be a traced index into ``choices`` (names from :data:`METHODS`): one
  program then holds those decoders (``lax.switch``; only the chosen one runs), for comparisons
  that compile once. Only choices with ``itc_hungarian`` put a host callback in the program, and
  JAX's persistent cache does not keep programs with host callbacks.
  """
  if not isinstance(method, str):
    for m in choices:
      check_choice("decode", m, METHODS)
    branches = [lambda lg, p, d, k, m=m: decode(lg, p, d, k, m, cfg) for m in choices]
    return jax.lax.switch(method, branches, logits, prev, done, key)
  check_choice("decode", method, METHODS)
  if method == "argmax":
    return jnp.argmax(logits, axis=-1).astype(jnp.int32)
  perturbed = logits + jax.random.gumbel(key, logits.shape, logits.dtype)
  proposal = jnp.argmax(perturbed, axis=-1).astype(jnp.int32)
  if method == "sample":
    return proposal
  probs = jax.nn.softmax(perturbed, axis=-1)
  if method == "itc_hungarian":
    cost = jax.vmap(lambda p, t, c: cost_matrix(p, t, c, cfg))(probs, proposal, prev)
    n = logits.shape[1]
    src = hungarian_sources(cost)[:, :n]
    interior = jnp.asarray(interior_mask(cfg.grid, cfg.inventory_rows))
    copy = (src < n) & interior[None] & ~done[:, None]
    prev_src = jnp.take_along_axis(prev, jnp.clip(src, 0, n - 1), axis=1)
    return jnp.where(copy, prev_src, proposal).astype(jnp.int32)
  fn = lambda p, t, c, d: itc_tokens(p, t, c, d, cfg)
  return jax.vmap(fn)(probs, proposal, prev, done).astype(jnp.int32)
