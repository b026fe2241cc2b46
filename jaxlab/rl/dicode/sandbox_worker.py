"""The sandbox's worker process: `python -m jaxlab.rl.dicode.sandbox_worker` (started by `sandbox`).

Reads ONE JSON request on stdin and sets its own rlimits BEFORE importing jax (so jax itself runs
under them). As root, it then drops to the uid the parent names (`nobody`) once its imports are
done. It compiles and checks each task program under a per-program CPU-time limit and writes one
JSON line per event to the stdout it was started with. The programs never see that stream: file
descriptor 1 is pointed at stderr before anything runs, and every protocol line carries a token
the parent chose, which the programs cannot read.

Request: {"sources": {key: source}, "order": [key, ...], "timeout_s", "cpu_grace_s",
"num_worlds", "seed", "classic", "probes": [...], "limits": {"memory_mb", "cpu_s", "nproc",
"nofile"}, "token", "drop_to"}. Events: {"event": "ready", "limits", "uid", "probes"} then
{"event": "result", "key", "ok", "reason", "name", "info"} per program. Probes ("env": the
environment's variable names; "fork": fork until the kernel refuses) let tests look at the sandbox
from inside; programs cannot trigger them.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import time


class TimeLimit(BaseException):
  """Raised by SIGPROF. A BaseException, so `except Exception` in library code cannot swallow it."""


def _on_alarm(signum, frame):
  raise TimeLimit()


def cpu_seconds() -> float:
  r = resource.getrusage(resource.RUSAGE_SELF)
  return r.ru_utime + r.ru_stime


def start_clock(timeout_s: float, grace_s: float) -> None:
  """A program's CPU-time limit: SIGPROF (-> TimeLimit) after `timeout_s` CPU seconds of this
  process; RLIMIT_CPU kills the process `grace_s` later if native code never returns to Python."""
  _, hard = resource.getrlimit(resource.RLIMIT_CPU)
  soft = int(cpu_seconds() + timeout_s + grace_s) + 1
  resource.setrlimit(resource.RLIMIT_CPU, (min(soft, hard), hard))
  signal.setitimer(signal.ITIMER_PROF, timeout_s)


def stop_clock() -> None:
  signal.setitimer(signal.ITIMER_PROF, 0)


def _peak_rss_mb() -> int:
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024  # Linux: KiB


def drop_privileges(uid: int) -> None:
  """From root to `uid` (all threads: glibc's setuid applies to every thread)."""
  os.setgroups([])
  os.setgid(uid)
  os.setuid(uid)


def set_limits(limits: dict) -> None:
  mb = int(limits["memory_mb"])
  cpu = int(limits["cpu_s"])
  resource.setrlimit(resource.RLIMIT_AS, (mb << 20, mb << 20))
  resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
  resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
  resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
  resource.setrlimit(resource.RLIMIT_NOFILE, (int(limits["nofile"]), int(limits["nofile"])))
  resource.setrlimit(resource.RLIMIT_NPROC, (int(limits["nproc"]), int(limits["nproc"])))


def current_limits() -> dict:
  names = {
    "as": resource.RLIMIT_AS,
    "cpu": resource.RLIMIT_CPU,
    "fsize": resource.RLIMIT_FSIZE,
    "nofile": resource.RLIMIT_NOFILE,
    "nproc": resource.RLIMIT_NPROC,
    "core": resource.RLIMIT_CORE,
  }
  return {k: resource.getrlimit(v)[0] for k, v in names.items()}


def fork_probe(max_forks: int = 5000) -> dict:
  """Forks children that wait, until the kernel refuses (RLIMIT_NPROC) or `max_forks` is reached.

  The kernel never applies RLIMIT_NPROC to uid 0, so as root the probe does not fork at all.
  """
  if os.getuid() == 0:
    return {"forked": 0, "refused": None, "skipped": "uid 0 is exempt from RLIMIT_NPROC"}
  # The same limit, 32 above what this user runs now: the probe shows the kernel enforces it
  # without taking the headroom other workers of this user may need for their threads.
  soft, hard = resource.getrlimit(resource.RLIMIT_NPROC)
  running = tasks_of(os.getuid())
  probe_limit = min(soft, running + 32)
  resource.setrlimit(resource.RLIMIT_NPROC, (probe_limit, hard))
  pids, error = [], None
  for _ in range(max_forks):
    try:
      pid = os.fork()
    except OSError as e:
      error = f"{type(e).__name__}: {e}"
      break
    if pid == 0:  # the child waits to be killed, holding its process slot
      time.sleep(120)
      os._exit(0)
    pids.append(pid)
  for pid in pids:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
  resource.setrlimit(resource.RLIMIT_NPROC, (soft, hard))
  return {"forked": len(pids), "refused": error, "limit": probe_limit, "running": running}


def tasks_of(uid: int) -> int:
  """Processes and threads `uid` runs now (what RLIMIT_NPROC counts)."""
  count = 0
  for pid in os.listdir("/proc"):
    try:
      if pid.isdigit() and os.stat(f"/proc/{pid}").st_uid == uid:
        count += len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
      pass
  return count


def _reason(e: BaseException, timeout_s: float) -> str:
  if isinstance(e, TimeLimit):
    return f"time limit: ran past {timeout_s:g} CPU seconds"
  if isinstance(e, RecursionError):
    return "recursion limit: the program recursed too deeply"
  if isinstance(e, MemoryError):
    return "memory limit: MemoryError"
  text = " ".join(str(e).split())[:300]
  if "MemoryError" in text:
    return f"memory limit: {text}"
  if "RecursionError" in text:
    return f"recursion limit: {text}"
  return text if type(e).__name__ == "TaskError" else f"{type(e).__name__}: {text}"


def base_worlds(request: dict, memo: dict):
  """The worlds every program of the batch builds on: exactly those `task.check_task` would
  generate from the request's key, made once per batch (within the time of the first program
  that gets that far, as before). Generating them per program recompiled craftax's world
  generator for each one, since every program's caches are cleared after it."""
  import jax

  from jaxlab.rl.dicode import world

  if "base" not in memo:
    k_base, _ = jax.random.split(jax.random.key(int(request["seed"])))
    keys = jax.random.split(k_base, int(request["num_worlds"]))
    memo["base"] = jax.block_until_ready(world.base_worlds(keys))
  return memo["base"]


def check_one(source: str, request: dict, memo: dict | None = None) -> dict:
  """compile_task + check_task under the time limit; a result event (without key/token)."""
  import jax

  from jaxlab.rl.dicode import sandbox, task

  timeout_s = float(request["timeout_s"])
  out = {"ok": False, "name": None, "info": {}}
  used = cpu_seconds()
  start_clock(timeout_s, float(request["cpu_grace_s"]))
  try:
    reasons = sandbox.check_source(source)  # the parent checked too; never run an unchecked one
    if reasons:
      raise task.TaskError(reasons[0])
    t = task.compile_task(source, classic=bool(request["classic"]))
    out["name"] = t.name
    key = jax.random.key(int(request["seed"]))  # typed key, as the multitask env uses
    classic = bool(request["classic"])
    base = None if classic or memo is None else base_worlds(request, memo)
    info = task.check_task(t, key, int(request["num_worlds"]), classic=classic, base=base)
    stop_clock()
    info = {**info, "cpu_seconds": round(cpu_seconds() - used, 2), "peak_rss_mb": _peak_rss_mb()}
    out.update(ok=True, reason="ok", info=json.loads(json.dumps(info, default=str)))
  except BaseException as e:  # noqa: BLE001 -- every failure of a program is a verdict
    stop_clock()
    if isinstance(e, (KeyboardInterrupt, SystemExit)):
      raise
    out["reason"] = _reason(e, timeout_s)
  finally:
    stop_clock()
    jax.clear_caches()  # each program compiles its own world function; free them
  return out


def main() -> None:
  protocol = os.fdopen(os.dup(1), "w")  # the parent's stream; programs print nowhere near it
  os.dup2(2, 1)
  sys.stdout = sys.stderr
  request = json.loads(sys.stdin.read())
  token = request["token"]

  def emit(**msg):
    protocol.write(json.dumps({**msg, "token": token}) + "\n")
    protocol.flush()

  set_limits(request["limits"])
  signal.signal(signal.SIGPROF, _on_alarm)
  probes = {}
  if "env" in request["probes"]:
    probes["env"] = sorted(os.environ)
  import jax  # noqa: F401 -- imported under the limits, once for the whole batch

  from jaxlab.rl.dicode import task, world  # noqa: F401 -- craftax too: outside the time limits

  task.achievement_ids(bool(request["classic"]))
  if request.get("drop_to") is not None and os.getuid() == 0:
    drop_privileges(int(request["drop_to"]))

  if "fork" in request["probes"]:
    probes["fork"] = fork_probe()
  emit(event="ready", limits=current_limits(), uid=os.getuid(), probes=probes)
  memo: dict = {}  # the batch's base worlds, made once
  for key in request["order"]:
    emit(event="result", key=key, **check_one(request["sources"][key], request, memo))


if __name__ == "__main__":
  main()
