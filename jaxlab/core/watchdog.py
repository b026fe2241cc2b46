"""Detects the XLA CPU runtime stall (docs/reliability.md) and restarts the program when it happens.

On the CPU backend, jaxlib 0.10 rarely loses the wake-up that signals a finished computation: the
main thread waits inside jax forever while every XLA worker is idle (0 % CPU). jaxlab cannot fix
that inside jaxlib, so it makes the run finish anyway. A daemon thread samples the process's CPU
time every second; when the main thread has been inside jax (a wait for a computation) for
`JAXLAB_STALL_SECONDS` (default 60) while no thread of the process ran or waited to run (CPU time
and the kernel's run-queue delay from /proc/self/task/*/schedstat both flat), the run is stalled,
not slow: a running computation or compilation on CPU always burns CPU, and a process starved by a
loaded machine or a high `nice` accumulates run-queue delay instead (a CPU-only test misread a
nice-19 run on a load-30 machine as stalled). The watchdog then prints one
line and re-executes the same command (`os.execv`), which resumes from the last checkpoint as after
a kill (open files, hence the workdir lock, close on exec). After `JAXLAB_STALL_RESTARTS` (default
3) restarts in a row it gives up with one line and exit code 4.

Armed only where the signal means a stall: a single-process run on the CPU backend, on Linux
(where schedstat exists) (a GPU/TPU
run's host thread idles while the device works; a multi-process run idles at collectives waiting
for peers, which `jaxlab.core.distributed`'s heartbeat covers). `JAXLAB_STALL_SECONDS=0` disables
it.
"""

from __future__ import annotations

import os
import sys
import threading
import time

_ENV_SECONDS = "JAXLAB_STALL_SECONDS"
_ENV_RESTARTS = "JAXLAB_STALL_RESTARTS"
_ENV_COUNT = "_JAXLAB_STALL_RESTART_COUNT"  # restarts so far in this chain of executions
_CPU_EPSILON = 0.05  # seconds of CPU per window still counted as idle (the sampler itself)


def _main_thread_in_jax() -> bool:
  frame = sys._current_frames().get(threading.main_thread().ident)
  if frame is None:
    return False
  name = frame.f_code.co_filename.replace("\\", "/")
  return "/jax/" in name or "/jaxlib/" in name


def _run_delay() -> float | None:
  """Seconds the process's threads have waited on a run queue so far (None where unknown)."""
  total = 0
  try:
    tids = os.listdir("/proc/self/task")
  except OSError:
    return None
  for tid in tids:
    try:
      with open(f"/proc/self/task/{tid}/schedstat") as f:
        total += int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
      continue  # a thread that just exited
  return total / 1e9


def _armed(seconds: float) -> bool:
  if seconds <= 0:
    return False
  import jax

  return jax.process_count() == 1 and jax.default_backend() == "cpu"


def _restart(seconds: float, limit: int) -> None:
  count = int(os.environ.get(_ENV_COUNT, "0"))
  if count >= limit:
    print(
      f"error: the XLA CPU runtime stalled {count + 1} times in a row (no CPU for {seconds:g} s "
      "while waiting for a computation; docs/reliability.md); giving up",
      file=sys.stderr,
      flush=True,
    )
    os._exit(4)
  print(
    f"warning: the XLA CPU runtime stalled (no CPU for {seconds:g} s while waiting for a "
    f"computation; a known jaxlib issue, docs/reliability.md); restarting the command "
    f"({count + 1}/{limit}), it resumes from its last checkpoint",
    file=sys.stderr,
    flush=True,
  )
  sys.stdout.flush()
  os.environ[_ENV_COUNT] = str(count + 1)
  os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])


def _watch(seconds: float, limit: int, poll: float) -> None:
  idle_since = None
  last_cpu, last_wait = time.process_time(), _run_delay()
  if last_wait is None:
    return  # cannot tell a stalled process from a starved one
  while True:
    time.sleep(poll)
    cpu, wait = time.process_time(), _run_delay()
    busy = cpu - last_cpu > _CPU_EPSILON * poll or wait - last_wait > _CPU_EPSILON * poll
    last_cpu, last_wait = cpu, wait
    if busy or not _main_thread_in_jax():
      idle_since = None
      continue
    now = time.monotonic()
    idle_since = idle_since or now
    if now - idle_since >= seconds and _armed(seconds):
      _restart(seconds, limit)


def start() -> threading.Thread | None:
  """Starts the watchdog thread (once per process); returns it, or None when disabled."""
  try:
    seconds = float(os.environ.get(_ENV_SECONDS, "60"))
    limit = int(os.environ.get(_ENV_RESTARTS, "3"))
  except ValueError:
    print(f"error: {_ENV_SECONDS} and {_ENV_RESTARTS} must be numbers", file=sys.stderr)
    sys.exit(2)
  if not seconds > 0:
    return None
  poll = min(1.0, seconds / 4)
  thread = threading.Thread(
    target=_watch, args=(seconds, limit, poll), name="jaxlab-stall-watchdog", daemon=True
  )
  thread.start()
  return thread
