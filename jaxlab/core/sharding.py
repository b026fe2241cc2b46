"""Logical-axis rules: arrays are annotated with logical names, the rules map them to mesh axes.

A model says "this dimension is ``embed``"; the table below says ``embed`` lives on ``fsdp``.
Changing parallelism is changing the table or the mesh, never the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

# logical name -> mesh axis (or tuple of axes, or None = replicated).
DEFAULT_RULES: tuple[tuple[str, Any], ...] = (
  ("batch", ("data", "fsdp")),  # examples: split over every data-like axis
  ("seq", "context"),  # sequence / context parallelism
  ("embed", "fsdp"),  # parameters' model dim: ZeRO-3 style sharding
  ("mlp", "tensor"),
  ("heads", "tensor"),
  ("kv_heads", "tensor"),
  ("head_dim", None),
  ("vocab", "tensor"),
  ("nodes", "nodes"),  # decentralized optimisation: one node per device
  ("ensemble", None),
  ("layers", None),
)

Rules = Sequence[tuple[str, Any]]


def to_device(x) -> jax.Array:
  """A host value (numpy array or scalar) on the default device, by a transfer: ``jnp.asarray``,
  ``jnp.zeros`` or ``jnp.int32`` of a host value each run a small XLA program, compiled (or read
  from the persistent cache) once per shape and dtype on every run; ``device_put`` runs none.
  Same values and dtype (64-bit host types are canonicalised the same way)."""
  return jax.device_put(np.asarray(x))


def _as_tuple(x) -> tuple:
  if x is None:
    return ()
  return (x,) if isinstance(x, str) else tuple(x)


def logical_to_spec(
  names: Sequence[str | None] | None,
  rules: Rules | None = None,
  mesh: Mesh | None = None,
  shape: Sequence[int] | None = None,
) -> P:
  """Maps logical dimension names to a `PartitionSpec`.

  Mesh axes absent from ``mesh`` (when given) are dropped, a mesh axis is used at most once per
  array (first dimension wins), and with ``shape`` an axis that does not divide its dimension is
  dropped (e.g. a width-1 output layer stays replicated), so one rule table serves every mesh.
  """
  if names is None:
    return P()
  table = dict(DEFAULT_RULES if rules is None else rules)
  used: set[str] = set()
  out = []
  for name in names:
    if name is None:
      out.append(None)
      continue
    if name not in table:
      raise KeyError(f"logical axis {name!r} has no rule; known: {sorted(table)}")
    axes = [
      a for a in _as_tuple(table[name]) if a not in used and (mesh is None or a in mesh.axis_names)
    ]
    if shape is not None and mesh is not None:
      dim, kept = shape[len(out)], []
      for a in axes:
        if dim % (mesh.shape[a] * _prod(mesh.shape[b] for b in kept)) == 0:
          kept.append(a)
      axes = kept
    used.update(axes)
    out.append(None if not axes else (axes[0] if len(axes) == 1 else tuple(axes)))
  return P(*out)


def _prod(xs) -> int:
  out = 1
  for x in xs:
    out *= x
  return out


def named_sharding(
  mesh: Mesh,
  names: Sequence[str | None] | None,
  rules: Rules | None = None,
  shape: Sequence[int] | None = None,
) -> NamedSharding:
  return NamedSharding(mesh, logical_to_spec(names, rules, mesh, shape))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def batch_sharding(mesh: Mesh, rules: Rules | None = None) -> NamedSharding:
  """Leading-axis ``batch`` sharding (the rest replicated)."""
  return named_sharding(mesh, ("batch",), rules)


def _is_names(x) -> bool:
  return x is None or (
    isinstance(x, (tuple, P)) and all(isinstance(n, (str, type(None))) for n in x)
  )


def tree_shardings(
  logical_tree: Any, mesh: Mesh, rules: Rules | None = None, like: Any = None
) -> Any:
  """Logical-name tuples (or flax ``LogicallyPartitioned`` boxes) -> NamedShardings.

  With ``like`` (a pytree of arrays of the same structure), axes that do not divide the
  corresponding dimension are dropped.
  """
  names = _unbox_names(logical_tree)
  if like is None:
    return jax.tree.map(lambda n: named_sharding(mesh, n, rules), names, is_leaf=_is_names)
  flat_names, treedef = jax.tree.flatten(names, is_leaf=_is_names)
  flat_like = treedef.flatten_up_to(like)
  return treedef.unflatten(
    [
      named_sharding(mesh, n, rules, getattr(x, "shape", None))
      for n, x in zip(flat_names, flat_like)
    ]
  )


def _unbox_names(tree):
  """Turns flax `nn.LogicallyPartitioned` leaves into their name tuples; other leaves -> None."""

  def f(x):
    if isinstance(x, nn.LogicallyPartitioned):
      return tuple(x.names)
    if _is_names(x):
      return x
    return None

  return jax.tree.map(
    f, tree, is_leaf=lambda x: isinstance(x, nn.LogicallyPartitioned) or _is_names(x)
  )


def shard_pytree(tree: Any, logical_tree: Any, mesh: Mesh, rules: Rules | None = None) -> Any:
  """Places ``tree`` on ``mesh`` following its logical annotations (``logical_tree``)."""
  return jax.device_put(tree, tree_shardings(logical_tree, mesh, rules, like=tree))


def shard_boxed(boxed_tree: Any, mesh: Mesh, rules: Rules | None = None) -> Any:
  """Unboxes flax-linen partitioned params and places them by their logical names."""
  params = nn.unbox(boxed_tree)
  return jax.device_put(params, tree_shardings(boxed_tree, mesh, rules, like=params))


def constrain(
  x: jax.Array, names: Sequence[str | None], mesh: Mesh | None = None, rules: Rules | None = None
) -> jax.Array:
  """``with_sharding_constraint`` by logical names; a no-op without a mesh."""
  if mesh is None:
    return x
  return jax.lax.with_sharding_constraint(x, named_sharding(mesh, names, rules))


def data_parallel(sample_fn, mesh: Mesh | None, rules: Rules | None = None):
  """Wraps ``sample_fn(data, key) -> batch`` so every batch leaf is split on its leading axis.

  The leading axis of each leaf is the logical ``batch`` axis; the rest stay replicated. Without a
  mesh the sampler is returned unchanged.
  """
  if mesh is None:
    return sample_fn

  def sharded(data, key):
    batch = sample_fn(data, key)
    return jax.tree.map(
      lambda v: constrain(v, ("batch",) + (None,) * (v.ndim - 1), mesh, rules), batch
    )

  return sharded
