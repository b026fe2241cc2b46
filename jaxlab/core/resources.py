"""Refuse what cannot fit before building it: a configuration's memory against the machine's.

Programs know the shapes their arrays will have from the config alone, so they estimate the bytes
the largest of them need and call :func:`check_fits` before allocating anything; an impossible size
is then bad input (``ConfigError`` naming the field, exit 2) instead of an XLA abort minutes later.
"""

from __future__ import annotations

import math
import os

from jaxlab.core.errors import ConfigError

INT32_MAX = 2**31 - 1


def human(nbytes: float) -> str:
  """``3.2 GiB``-style size."""
  for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
    if abs(nbytes) < 1024 or unit == "TiB":
      return f"{nbytes:.3g} {unit}" if unit != "B" else f"{int(nbytes)} B"
    nbytes /= 1024
  return f"{nbytes:.3g} TiB"


def host_memory() -> int:
  """Bytes of memory this process may still use on the host (MemAvailable; total if unknown)."""
  try:
    with open("/proc/meminfo") as f:
      for line in f:
        if line.startswith("MemAvailable:"):
          return int(line.split()[1]) * 1024
  except OSError:
    pass
  return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def device_memory() -> int:
  """Bytes one device may hold: the accelerator's limit, or the host's memory on a CPU."""
  import jax

  device = jax.devices()[0]
  if device.platform != "cpu":
    stats = device.memory_stats() or {}
    if stats.get("bytes_limit"):
      return int(stats["bytes_limit"])
  return host_memory()


def check_fits(nbytes: float, field: str, what: str, *, devices: int = 1) -> None:
  """``ConfigError(field)`` when ``nbytes`` (split over ``devices``) exceeds one device's memory."""
  limit = device_memory()
  per_device = nbytes / max(devices, 1)
  if not math.isfinite(per_device) or per_device > limit:
    raise ConfigError(
      field,
      f"needs about {human(per_device)} for {what}"
      + (f" per device ({devices} devices)" if devices > 1 else "")
      + f"; this machine has {human(limit)}",
    )


def check_int32(field: str, value: int, what: str = "an array dimension") -> None:
  """Shapes and indices are int32 in XLA: a count above 2**31 - 1 is bad input."""
  if value > INT32_MAX:
    raise ConfigError(field, f"{value} overflows {what} (at most {INT32_MAX})")
