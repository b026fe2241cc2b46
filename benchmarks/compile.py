"""Time to first step of every program's default command, cold and warm, and its HLO size.

  python -m benchmarks.compile                          # every program below, --timeout=180 each
  python -m benchmarks.compile --programs=example,ppo,lm --timeout=120

For each program, its default command (the one its docstring starts with) runs twice in a fresh
temporary folder with its own persistent compilation cache: cold (empty cache), then warm (the
cache the cold run filled, a new workdir). A run stops at its first training step: the first chunk
of ``jaxlab.core.runtime.train`` (one step in a fresh run, ``Loop.log_first_step``) has run, as
``$JAXLAB_COMPILE_LOG`` records (``runtime.watch_compiles``); programs that do not train through
the runtime (goma, decentralized, dasbs_exact) run to the end, marked ``end``. A run past
``--timeout`` is killed and reported as ``> T``. Printed per program: seconds from launch to the
first step cold and warm and their ratio (both measured here, one after the other, with the load
beside them), the warm run's persistent-cache hits and its fresh compilations (0 when the cache
served everything: compile requests - hits), the compilations of the cold run, the warm run's
seconds in jax, apart: tracing and lowering to StableHLO (``trace s``), and reading the cache
(``read s``: loading the compiled executables, see ``benchmarks.cache_read``), and the StableHLO
text of every program the cold run compiled (``JAX_DUMP_IR_TO``, without location info: total
and largest module).

Not covered: experiments.uhm_eval (re-evaluates a saved run) and experiments.study (its cells
call the library functions that the method programs above run).
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time

from absl import flags

from jaxlab.core import experiment
from jaxlab.core.runtime import COMPILE_LOG_ENV

REPO = pathlib.Path(__file__).resolve().parents[1]

# program -> the arguments of its default command (its docstring's first command).
PROGRAMS = {
  "example": [],
  "uhm": ["--env=ogbench"],
  "ppo": ["--env=cartpole"],
  "r4": ["--env=cartpole", "--method=r4", "--ratings=simulated"],
  "qrim": [],
  "lm": [],
  "goma": [],
  "decentralized": [],
  "dasbs": [],  # L = 24: a GPU preset, refused where it cannot fit (see dasbs_cpu)
  "dasbs_cpu": ["--config=experiments/configs/dasbs.py:ising_critical_cpu"],
  "dasbs_exact": [],
  "dicode": ["--proposer=offline"],
  "itc": [],
  "itc_cpu": ["--config=experiments/configs/itc.py:cpu"],  # target: <= 3 min cold
}
NO_WORKDIR = ("dasbs_exact",)  # its --workdir is an input (a trained run), not an output
MODULES = {"dasbs_cpu": "dasbs", "itc_cpu": "itc"}  # a second command of one program

_PROGRAMS = flags.DEFINE_list(
  "programs",
  list(PROGRAMS),
  "Programs to time (experiments.<name>; dasbs_cpu, itc_cpu: their CPU presets).",
)
_TIMEOUT = flags.DEFINE_integer("timeout", 180, "Seconds per run; a longer run is cut, '> T'.")
UNUSED_FLAGS = ("workdir", "mesh", "steps", "log_every", "ckpt_every", "keep", "profile")


def read_log(path: pathlib.Path) -> dict:
  """Counts and summed seconds of each event of a compile log before the first step, and its time.

  Events after ``first_step`` are left out: the program keeps compiling (its next chunk, an
  evaluation) until the kill reaches it, and how far it gets depends on the poll, not the cache.
  """
  out = {"count": {}, "seconds": {}, "first_step": None}
  if not path.exists():
    return out
  for line in path.read_text().splitlines():
    parts = line.split()
    if len(parts) != 2:
      continue  # a line cut by the kill
    event, value = parts[0], float(parts[1])
    if event == "first_step":
      out["first_step"] = value
      break
    else:
      out["count"][event] = out["count"].get(event, 0) + 1
      out["seconds"][event] = out["seconds"].get(event, 0.0) + value
  return out


def timed_run(name: str, folder: pathlib.Path, tag: str, timeout: float, dump_ir: bool) -> dict:
  """Runs ``experiments.<name>`` until its first step (or its end, or ``timeout``)."""
  log = folder / f"{tag}.log"
  env = {
    **os.environ,
    "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu"),
    "JAXLAB_COMPILE_CACHE": str(folder / "xla"),
    COMPILE_LOG_ENV: str(log),
    "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
  }
  if dump_ir:
    env.update(JAX_DUMP_IR_TO=str(folder / "ir"), JAX_INCLUDE_DEBUG_INFO_IN_DUMPS="false")
  args = [a.replace("experiments/", f"{REPO}/experiments/") for a in PROGRAMS[name]]
  if name not in NO_WORKDIR:
    args.append(f"--workdir={folder / tag}")
  load = os.getloadavg()[0]
  t0 = time.time()
  with open(folder / f"{tag}.out", "w") as out:
    proc = subprocess.Popen(
      [sys.executable, "-m", f"experiments.{MODULES.get(name, name)}", *args],
      cwd=folder,
      env=env,
      stdout=out,
      stderr=subprocess.STDOUT,
      start_new_session=True,  # its own process group: a kill reaches the workers it started
    )
    end = "timeout"
    while time.time() - t0 < timeout:
      if proc.poll() is not None:
        end = "exit" if proc.returncode == 0 else f"exit {proc.returncode}"
        break
      if read_log(log)["first_step"] is not None:
        end = "first step"
        break
      time.sleep(0.2)
    wall = time.time() - t0
    if proc.poll() is None:
      os.killpg(proc.pid, signal.SIGKILL)
      proc.wait()
  result = read_log(log)
  first = None if result["first_step"] is None else result["first_step"] - t0
  if first is None and end == "exit":  # no runtime.train: the whole run is what a user waits for
    first = wall
  text = (folder / f"{tag}.out").read_text(errors="replace")
  cache_line = f"compile cache {folder / 'xla'}" in text
  return dict(first=first, wall=wall, end=end, load=load, cache_line=cache_line, **result)


def hlo_size(folder: pathlib.Path) -> tuple[int, int, int]:
  """(modules, total bytes, largest bytes) of the dumped StableHLO."""
  sizes = [p.stat().st_size for p in (folder / "ir").glob("*.mlir")]
  return len(sizes), sum(sizes), max(sizes, default=0)


def _seconds(run: dict, timeout: float) -> str:
  if run is None:
    return "-"
  if run["first"] is None:
    return f"> {timeout:.0f}" if run["end"] == "timeout" else run["end"]
  return f"{run['first']:.1f}" + (" end" if run["end"] == "exit" else "")


def measure(name: str, timeout: float) -> dict:
  with tempfile.TemporaryDirectory(prefix=f"jaxlab-compile-{name}-") as d:
    folder = pathlib.Path(d)
    cold = timed_run(name, folder, "cold", timeout, dump_ir=True)
    modules, total, largest = hlo_size(folder)
    warm = timed_run(name, folder, "warm", timeout, dump_ir=False) if cold["first"] else None
    if cold["end"].startswith("exit ") or (warm and warm["end"].startswith("exit ")):
      bad = "cold" if cold["end"].startswith("exit ") else "warm"
      tail = (folder / f"{bad}.out").read_text(errors="replace").strip().splitlines()[-3:]
      print(f"  {name} {bad} run failed: " + " | ".join(tail), flush=True)
  return dict(cold=cold, warm=warm, modules=modules, hlo=total, largest=largest)


def row(name: str, m: dict, timeout: float) -> str:
  cold, warm = m["cold"], m["warm"]
  ratio = "-"
  if warm and cold["first"] and warm["first"]:
    ratio = f"{cold['first'] / warm['first']:.1f}"
  compiles = cold["count"].get("compile", 0)
  hits = warm["count"].get("hit", 0) if warm else "-"
  fresh = warm["count"].get("compile", 0) - warm["count"].get("hit", 0) if warm else "-"
  traced = read = "-"
  if warm:
    traced = f"{sum(warm['seconds'].get(k, 0.0) for k in ('trace', 'lower')):.1f}"
    read = f"{warm['seconds'].get('compile', 0.0):.1f}"
  load = f"{cold['load']:.1f}" + (f"/{warm['load']:.1f}" if warm else "")
  return (
    f"{name:<14}{_seconds(cold, timeout):>11}{_seconds(warm, timeout):>11}{ratio:>7}"
    f"{compiles:>9}{hits!s:>6}{fresh!s:>6}{traced:>8}{read:>7}{m['modules']:>8}"
    f"{m['hlo'] / 1e6:>9.2f}{m['largest'] / 1e6:>9.2f}  {load}"
  )


HEADER = (
  f"{'program':<14}{'cold s':>11}{'warm s':>11}{'ratio':>7}{'compiles':>9}{'hits':>6}"
  f"{'fresh':>6}{'trace s':>8}{'read s':>7}{'modules':>8}{'HLO MB':>9}{'max MB':>9}"
  "  load (cold/warm)"
)


def main(argv):
  del argv
  experiment.common("compile_benchmark", unused=UNUSED_FLAGS)
  names = experiment.check_list("programs", _PROGRAMS.value, PROGRAMS)
  experiment.check_positive("timeout", _TIMEOUT.value)
  timeout = float(_TIMEOUT.value)
  print(f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; per run --timeout={timeout:.0f}")
  print(
    "seconds from launch to the first training step ('end': the program has no training loop, "
    "its whole run)"
  )
  print(HEADER, flush=True)
  missing = []
  for name in names:
    m = measure(name, timeout)
    print(row(name, m, timeout), flush=True)
    if not m["cold"]["cache_line"] and m["cold"]["first"] and m["cold"]["end"] != "exit":
      missing.append(name)
  print(f"load {os.getloadavg()[0]:.1f} at the end")
  if missing:
    print(f"no 'compile cache <folder>' start-up line: {', '.join(missing)}")


if __name__ == "__main__":
  experiment.run(main)
