"""One mesh vocabulary for jaxlab: named axes, ``-1`` for "the rest", Auto axis types.

Every parallel code path in jaxlab builds its mesh here, so that logical-axis rules
(`jaxlab.core.sharding`) and launch flags (``--mesh=data:2,fsdp:-1``) mean the same thing
everywhere.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

import jax
import numpy as np
from jax.sharding import AxisType, Mesh

# Standard axes, in the order they are laid out over devices (outermost first): data-parallel
# replicas talk least, tensor-parallel shards talk most, so tensor is innermost (neighbouring
# devices on one host / ICI ring).
STANDARD_AXES = ("data", "fsdp", "context", "tensor")

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class MeshError(ValueError):
  """A mesh request that cannot be satisfied (bad syntax, bad sizes, wrong device count)."""


def parse_mesh(spec: str | Mapping[str, int] | None) -> dict[str, int]:
  """Parses ``"data:2,fsdp:-1"`` into ``{"data": 2, "fsdp": -1}`` (dicts pass through)."""
  if spec is None or spec == "":
    return {"data": -1}
  if isinstance(spec, Mapping):
    shape = dict(spec)
  else:
    shape = {}
    for part in str(spec).split(","):
      part = part.strip()
      if not part:
        continue
      if ":" not in part:
        raise MeshError(f"mesh entry {part!r} is not of the form name:size (e.g. data:2,fsdp:-1)")
      name, size = part.split(":", 1)
      name = name.strip()
      if name in shape:
        raise MeshError(f"mesh axis {name!r} given twice")
      try:
        shape[name] = int(size)
      except ValueError:
        raise MeshError(f"mesh axis {name!r} has size {size!r}; sizes are integers or -1") from None
  for name, size in shape.items():
    if not _NAME_RE.match(name):
      raise MeshError(f"mesh axis name {name!r} is not an identifier")
    if size == 0 or size < -1:
      raise MeshError(f"mesh axis {name!r} has size {size}; sizes are positive or -1 (the rest)")
  if sum(1 for s in shape.values() if s == -1) > 1:
    raise MeshError("at most one mesh axis may be -1 (the rest)")
  if not shape:
    raise MeshError("empty mesh spec")
  return shape


def resolve_shape(shape: Mapping[str, int], num_devices: int) -> dict[str, int]:
  """Fills in a ``-1`` axis and checks the product equals ``num_devices``."""
  shape = dict(shape)
  known = math.prod(s for s in shape.values() if s != -1)
  if -1 in shape.values():
    if num_devices % known:
      raise MeshError(
        f"mesh {format_mesh(shape)}: fixed axes multiply to {known}, which does not divide "
        f"the {num_devices} available devices"
      )
    rest = num_devices // known
    shape = {k: (rest if v == -1 else v) for k, v in shape.items()}
  elif known != num_devices:
    raise MeshError(
      f"mesh {format_mesh(shape)} has {known} devices but {num_devices} are available; "
      f"use -1 on one axis for 'the rest'"
    )
  return shape


def format_mesh(shape: Mapping[str, int]) -> str:
  return ",".join(f"{k}:{v}" for k, v in shape.items())


def make_mesh(
  shape: str | Mapping[str, int] | None = None, devices: Sequence[jax.Device] | None = None
) -> Mesh:
  """Builds a `Mesh` with Auto axis types over ``devices`` (default: all devices).

  Args:
    shape: ``{"data": 2, "fsdp": -1}`` or ``"data:2,fsdp:-1"``; ``None`` means ``data:-1``.
    devices: devices to use; defaults to ``jax.devices()``.

  Auto axes (not the Explicit default of recent ``jax.make_mesh``) keep
  ``with_sharding_constraint`` and ``shard_map`` on unsharded inputs working.
  """
  devices = list(jax.devices() if devices is None else devices)
  resolved = resolve_shape(parse_mesh(shape), len(devices))
  names = tuple(resolved)
  sizes = tuple(resolved.values())
  try:
    from jax.experimental import mesh_utils

    arr = mesh_utils.create_device_mesh(sizes, devices=devices)
  except Exception:  # irregular device sets (e.g. a subset of a TPU slice): plain reshape
    arr = np.asarray(devices, dtype=object).reshape(sizes)
  return Mesh(arr, names, axis_types=(AxisType.Auto,) * len(names))


def axis_size(mesh: Mesh | None, axis: str | Sequence[str] | None) -> int:
  """Product of the sizes of ``axis`` in ``mesh`` (1 for absent axes or no mesh)."""
  if mesh is None or axis is None:
    return 1
  axes = (axis,) if isinstance(axis, str) else tuple(axis)
  return math.prod(mesh.shape.get(a, 1) for a in axes)
