"""JAX's persistent compilation cache as every jaxlab program uses it: where it lives
(``--compile_cache``, ``$JAXLAB_COMPILE_CACHE``, default ``~/.cache/jaxlab/xla``), repairing
entries a killed process left half-written, and turning it on."""

from __future__ import annotations

import os
import pathlib
import warnings

from jaxlab.core import runtime
from jaxlab.core.errors import require

_CACHE_OFF = ("off", "none", "false", "0", "")
_CACHE_MAX_BYTES = 4 << 30


def compile_cache_dir(flag_value: str | None = None) -> pathlib.Path | None:
  """Where compiled programs are kept between runs (``None``: not kept)."""
  value = flag_value if flag_value is not None else os.environ.get("JAXLAB_COMPILE_CACHE")
  if value is None:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    value = os.path.join(base, "jaxlab", "xla")
  if value.strip().lower() in _CACHE_OFF:
    return None
  path = pathlib.Path(value).expanduser()
  require(not path.exists() or path.is_dir(), "compile_cache", f"{path} is not a directory")
  return path


def repair_compile_cache(path: pathlib.Path) -> int:
  """Makes every entry of the cache folder whole again; returns how many were repaired.

  JAX's size-bounded cache writes an entry as two files, ``<key>-cache`` then ``<key>-atime``,
  and before every write reads the ``-atime`` of every entry to find the least recently used.
  A process killed between the two writes (out of memory, SIGKILL) leaves a ``-cache`` without
  its ``-atime``, after which every later write into the folder fails (silently: a warning we
  filter) and every run compiles from scratch. An orphaned ``-cache`` gets the oldest access
  time (it is evicted first); an ``-atime`` without its ``-cache`` is removed.
  """
  if not path.is_dir():
    return 0
  names = set(os.listdir(path))
  repaired = 0
  for name in names:
    try:
      if name.endswith("-cache") and name[: -len("-cache")] + "-atime" not in names:
        (path / (name[: -len("-cache")] + "-atime")).write_bytes((0).to_bytes(8, "little"))
        repaired += 1
      elif name.endswith("-atime") and name[: -len("-atime")] + "-cache" not in names:
        (path / name).unlink()
        repaired += 1
    except OSError:  # another process evicted or repaired it meanwhile: nothing to do
      pass
  return repaired


def enable_compile_cache(flag_value: str | None = None) -> pathlib.Path | None:
  """Turns on JAX's persistent compilation cache (every program does; a notebook may call it)."""
  path = compile_cache_dir(flag_value)
  runtime.watch_compiles()  # only with $JAXLAB_COMPILE_LOG (benchmarks/compile.py)
  if path is not None:
    import jax

    repair_compile_cache(path)

    jax.config.update("jax_compilation_cache_dir", str(path))
    # Cache every compiled program, not only those that took a second (the chunks of short
    # runs and the evaluation functions add up to most of a CPU run's start-up).
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    # A size bound turns on JAX's LRU eviction and, with it, a file lock around reads and
    # writes, so two runs started side by side never read each other's half-written entries.
    jax.config.update("jax_compilation_cache_max_size", _CACHE_MAX_BYTES)
    # The cache is best effort: an entry another process evicted while this one wrote or read it
    # only costs a compilation, not a warning on the user's console.
    for verb in ("writing", "reading"):
      warnings.filterwarnings("ignore", f"Error {verb} persistent compilation cache entry")
  return path
