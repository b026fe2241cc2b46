"""What a warm start pays per persistent-cache entry: reading it and deserializing the executable.

  python -m benchmarks.cache_read                       # jaxlab's cache folder (--compile_cache)
  python -m benchmarks.cache_read --cache=/tmp/itc-xla --top=5

A warm run skips XLA's compile, not the load of what it compiled: for every program jax reads the
entry, decompresses it and deserializes the executable (``backend.deserialize_executable``), as
this script does for each entry of ``--cache``, largest first. Printed per entry: the seconds of
that load; the compile seconds the cold run recorded in the entry (jax stores whole seconds) and
the ratio load / compile; the optimized HLO's instruction count and its YNNPACK fusions.

XLA:CPU's deserializer looks each YNNPACK fusion up by a scan over every instruction of the module,
so the load grows with fusions x instructions. ITC's training chunk (about 75k instructions, 340
YNN fusions) loads in 5.6-7.2 s on 2 idle cores, and in 3.8 s when compiled with
``XLA_FLAGS=--xla_cpu_experimental_ynn_fusion_type=``. That flag costs PPO CartPole about a quarter
of its steady env steps/s, so jaxlab leaves it to the user (docs/itc.md).
"""

from __future__ import annotations

import os
import pathlib
import re
import time

from absl import flags

from jaxlab.core import compile_cache, experiment

UNUSED_FLAGS = ("workdir", "mesh", "steps", "log_every", "ckpt_every", "keep", "profile")

_CACHE = flags.DEFINE_string(
  "cache", None, "A persistent compilation cache folder to read (default: the programs' folder)."
)
_TOP = flags.DEFINE_integer("top", 10, "Entries to load, largest first.")


def entries(folder: pathlib.Path) -> list[pathlib.Path]:
  """The folder's cache entries (``<key>-cache`` files), largest first."""
  return sorted(folder.glob("*-cache"), key=lambda p: p.stat().st_size, reverse=True)


def load(path: pathlib.Path) -> dict:
  """Reads one entry as jax's persistent cache does; times the deserialization."""
  import jax
  from jax._src import compilation_cache, xla_bridge
  from jax._src.lib import xla_client

  raw = path.read_bytes()
  blob = compilation_cache.decompress_executable(raw)
  serialized, compile_s = compilation_cache.extract_executable_and_time(blob)
  devices = xla_client.DeviceList(tuple(jax.devices()[:1]))
  t0 = time.perf_counter()
  exe = xla_bridge.get_backend().deserialize_executable(
    serialized, devices, xla_client.CompileOptions()
  )
  seconds = time.perf_counter() - t0
  text = "\n".join(m.to_string() for m in exe.hlo_modules())
  return dict(
    name=path.name.split("-")[0],
    mb=len(raw) / 1e6,
    seconds=seconds,
    compile_s=compile_s,
    instructions=len(re.findall(r"^\s*(?:ROOT )?%\S+ = ", text, flags=re.M)),
    ynn=len(re.findall(r"^\s*(?:ROOT )?%\S+ = .*kind=kCustom.*__ynn_fusion", text, flags=re.M)),
  )


def row(e: dict) -> str:
  ratio = f"{e['seconds'] / e['compile_s']:.2f}" if e["compile_s"] >= 1 else "-"
  return (
    f"{e['name'][:28]:<28}{e['mb']:>8.2f}{e['seconds']:>9.2f}{e['compile_s']:>10}{ratio:>7}"
    f"{e['instructions']:>14}{e['ynn']:>6}"
  )


HEADER = (
  f"{'program':<28}{'MB':>8}{'load s':>9}{'compile s':>10}{'ratio':>7}{'instructions':>14}"
  f"{'YNN':>6}"
)


def main(argv):
  del argv
  experiment.common("cache_read_benchmark", unused=UNUSED_FLAGS)
  default = compile_cache.compile_cache_dir()  # where a program's run keeps them
  experiment.require(
    _CACHE.value is not None or default is not None, "cache", "the cache is off; name a folder"
  )
  folder = pathlib.Path(os.path.expanduser(_CACHE.value)) if _CACHE.value else default
  experiment.require(folder.is_dir(), "cache", f"{folder} is not a folder")
  experiment.check_positive("top", _TOP.value)
  found = entries(folder)
  experiment.require(bool(found), "cache", f"{folder} holds no cache entry (<key>-cache)")
  print(f"{len(found)} entries in {folder}; the {min(_TOP.value, len(found))} largest, loaded")
  print(HEADER, flush=True)
  total = 0.0
  for path in found[: _TOP.value]:
    e = load(path)
    total += e["seconds"]
    print(row(e), flush=True)
  print(f"load seconds of these entries: {total:.2f}")


if __name__ == "__main__":
  experiment.run(main)
