"""What a process pays before its first line of work: the CPU seconds of importing each module.

  python -m benchmarks.imports                 # jax's stack, jaxlab.core, every program module
  python -m benchmarks.imports --repeats=5 --modules=jax,jaxlab.core

Each module is imported in a fresh ``python -c "import <module>"`` (``--repeats`` times,
alternating modules, so the load changes alike for all); printed per module: the median CPU
seconds of the child (user + system, from ``os.wait4``: less sensitive to other jobs than wall
time), the median wall seconds, and the CPU ratio to ``import jax`` measured in the same run (the
reference: every program imports it). The versions of jax, numpy and ml_dtypes are printed with
them, since ``import ml_dtypes`` alone was 1.6 s of CPU in ml_dtypes 0.7.0 against 0.2 s in 0.6.0
(setup.cfg keeps ``ml_dtypes<0.7``).
"""

from __future__ import annotations

import importlib.metadata
import os
import pathlib
import statistics
import subprocess
import sys
import time

from absl import flags

from jaxlab.core import experiment

REPO = pathlib.Path(__file__).resolve().parents[1]
REFERENCE = "jax"
MODULES = [
  "numpy",
  "ml_dtypes",
  "jax",
  "flax.linen",
  "optax",
  "orbax.checkpoint",
  "matplotlib.pyplot",
  "jaxlab.core",
  *(f"experiments.{p}" for p in ("example", "uhm", "ppo", "lm", "dicode", "itc")),
]
UNUSED_FLAGS = ("workdir", "mesh", "steps", "log_every", "ckpt_every", "keep", "profile")

_MODULES = flags.DEFINE_list("modules", MODULES, "Modules to import, each in a fresh process.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Fresh processes per module.")


def import_cost(module: str) -> tuple[float, float]:
  """(CPU seconds, wall seconds) of ``python -c "import <module>"`` in a fresh process."""
  env = {**os.environ, "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu")}
  env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
  t0 = time.perf_counter()
  proc = subprocess.Popen([sys.executable, "-c", f"import {module}"], cwd=REPO, env=env)
  _, status, usage = os.wait4(proc.pid, 0)
  wall = time.perf_counter() - t0
  proc.returncode = os.waitstatus_to_exitcode(status)
  if proc.returncode:
    raise RuntimeError(f"import {module} failed (exit {proc.returncode})")
  return usage.ru_utime + usage.ru_stime, wall


def versions() -> str:
  names = ("jax", "jaxlib", "numpy", "ml_dtypes")
  out = []
  for n in names:
    try:
      out.append(f"{n} {importlib.metadata.version(n)}")
    except importlib.metadata.PackageNotFoundError:
      out.append(f"{n} -")
  return ", ".join(out)


def main(argv):
  del argv
  experiment.common("imports_benchmark", unused=UNUSED_FLAGS)
  modules = list(dict.fromkeys(_MODULES.value))
  experiment.check_positive("repeats", _REPEATS.value)
  if REFERENCE not in modules:
    modules.insert(0, REFERENCE)
  print(f"{versions()}; load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
  cost = {m: [] for m in modules}
  for _ in range(_REPEATS.value):
    for m in modules:
      cost[m].append(import_cost(m))
  ref = statistics.median(c for c, _ in cost[REFERENCE])
  print(f"{'module':<22}{'CPU s':>8}{'wall s':>8}{'CPU / import jax':>18}")
  for m in modules:
    cpu = statistics.median(c for c, _ in cost[m])
    wall = statistics.median(w for _, w in cost[m])
    print(f"{m:<22}{cpu:>8.2f}{wall:>8.2f}{cpu / ref:>18.2f}")
  print(f"load {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
  experiment.run(main)
