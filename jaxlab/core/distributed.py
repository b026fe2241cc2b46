"""Multi-host start-up: one call that is right on a laptop, a TPU pod and a SLURM GPU cluster."""

from __future__ import annotations

import os

import jax
from absl import logging

_initialized = False


def _slurm_env() -> dict | None:
  """Coordinator, process count and id from SLURM variables, when running under srun."""
  if "SLURM_JOB_ID" not in os.environ or "SLURM_NTASKS" not in os.environ:
    return None
  ntasks = int(os.environ["SLURM_NTASKS"])
  if ntasks <= 1:
    return None
  nodelist = os.environ.get("SLURM_STEP_NODELIST") or os.environ.get("SLURM_JOB_NODELIST", "")
  head = os.environ.get("JAXLAB_COORDINATOR_HOST") or _first_host(nodelist)
  port = os.environ.get("JAXLAB_COORDINATOR_PORT", "12355")
  return dict(coordinator_address=f"{head}:{port}", num_processes=ntasks,
              process_id=int(os.environ["SLURM_PROCID"]))


def _first_host(nodelist: str) -> str:
  """First host of a SLURM nodelist such as ``gpu[001-004,007],cpu1`` -> ``gpu001``."""
  if not nodelist:
    return "localhost"
  first = nodelist.split(",")[0] if "[" not in nodelist.split(",")[0] else nodelist
  if "[" in first:
    prefix, rest = first.split("[", 1)
    rng = rest.split(",")[0].split("]")[0]
    return prefix + rng.split("-")[0]
  return first


def plan(coordinator_address: str | None = None, num_processes: int | None = None,
         process_id: int | None = None, env: dict | None = None) -> dict | None:
  """What `initialize` would pass to ``jax.distributed.initialize`` (None = single host)."""
  env = os.environ if env is None else env
  if coordinator_address or (num_processes or 0) > 1:
    if coordinator_address is None or num_processes is None or process_id is None:
      raise ValueError("multi-host needs coordinator_address, num_processes and process_id together")
    return dict(coordinator_address=coordinator_address, num_processes=num_processes,
                process_id=process_id)
  if env.get("TPU_WORKER_HOSTNAMES") or env.get("TPU_WORKER_ID") or env.get("JAXLAB_TPU_POD"):
    hosts = env.get("TPU_WORKER_HOSTNAMES", "")
    if "," in hosts or env.get("JAXLAB_TPU_POD"):
      return {}  # TPU pods: jax discovers everything from the metadata server
    return None
  old = dict(os.environ)
  try:
    if env is not os.environ:
      os.environ.clear(); os.environ.update(env)
    return _slurm_env()
  finally:
    if env is not old and env is not os.environ:
      os.environ.clear(); os.environ.update(old)


def initialize(coordinator_address: str | None = None, num_processes: int | None = None,
               process_id: int | None = None) -> bool:
  """Initialises ``jax.distributed`` when running on several hosts; a no-op on one host.

  Returns True when a multi-host runtime was started. Sources, in order: explicit arguments
  (from flags), TPU pod environment (auto-discovery), SLURM variables (``srun`` tasks).
  """
  global _initialized
  if _initialized:
    return True
  kwargs = plan(coordinator_address, num_processes, process_id)
  if kwargs is None:
    return False
  logging.info("jax.distributed.initialize(%s)", kwargs)
  jax.distributed.initialize(**kwargs)
  _initialized = True
  return True
