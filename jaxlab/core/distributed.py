"""Multi-host start-up: one call that is right on a laptop, a TPU pod and a SLURM GPU cluster."""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping

import jax
from absl import logging

_initialized = False


def first_host(nodelist: str) -> str:
  """First host of a SLURM nodelist: ``gpu[001-004,007],cpu1`` -> ``gpu001``."""
  if not nodelist:
    return "localhost"
  head = nodelist.split("[", 1)
  if len(head) == 1:
    return nodelist.split(",")[0]
  prefix, rest = head
  if "," in prefix:  # "cpu1,gpu[01-02]": the first entry has no brackets
    return prefix.split(",")[0]
  return prefix + rest.split(",")[0].split("]")[0].split("-")[0]


_HOSTNAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?")


def check_address(address: str) -> str:
  """``address`` when it is ``host:port`` (an IPv6 host in brackets); else ValueError saying why.

  jax would otherwise fail deep inside its gRPC client, with a traceback or by aborting."""
  host, sep, port = address.rpartition(":")
  ok_port = sep and port.isascii() and port.isdigit() and 0 < int(port) < 65536
  if host.startswith("[") and host.endswith("]"):
    try:
      ok_host = isinstance(ipaddress.ip_address(host[1:-1]), ipaddress.IPv6Address)
    except ValueError:
      ok_host = False
  else:
    ok_host = len(host) <= 253 and _HOSTNAME.fullmatch(host) is not None
  if not (ok_port and ok_host):
    raise ValueError(
      f"{address!r} is not host:port (a host name or IP address, a port in 1-65535; "
      "an IPv6 address in brackets: [::1]:1234)"
    )
  return address


def plan(
  coordinator_address: str | None = None,
  num_processes: int | None = None,
  process_id: int | None = None,
  env: Mapping[str, str] | None = None,
) -> dict | None:
  """The keyword arguments `initialize` passes to ``jax.distributed.initialize``.

  ``None`` means single host (nothing to do); ``{}`` means let jax auto-detect (TPU pods).
  """
  env = os.environ if env is None else env
  if coordinator_address or num_processes or process_id is not None:
    if coordinator_address is None or num_processes is None or process_id is None:
      raise ValueError(
        "multi-host needs --coordinator_address, --num_processes and --process_id together"
      )
    check_address(coordinator_address)
    if not 0 <= process_id < num_processes:
      raise ValueError(f"--process_id={process_id} is not in [0, {num_processes})")
    return dict(
      coordinator_address=coordinator_address, num_processes=num_processes, process_id=process_id
    )
  if env.get("JAXLAB_TPU_POD") or "," in env.get("TPU_WORKER_HOSTNAMES", ""):
    return {}  # TPU pod slice: jax reads the topology from the TPU metadata server
  # Only inside an `srun` step: SLURM_STEP_NUM_TASKS is set per step, whereas SLURM_NTASKS is also
  # set on the login/batch shell of a multi-task allocation, where waiting for peers would hang.
  ntasks = int(env.get("SLURM_STEP_NUM_TASKS", "1") or 1)
  if "SLURM_JOB_ID" in env and ntasks > 1:
    host = env.get("JAXLAB_COORDINATOR_HOST") or first_host(
      env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST", "")
    )
    port = env.get("JAXLAB_COORDINATOR_PORT", "12355")
    return dict(
      coordinator_address=check_address(f"{host}:{port}"),
      num_processes=ntasks,
      process_id=int(env["SLURM_PROCID"]),
    )
  return None


def initialize(
  coordinator_address: str | None = None,
  num_processes: int | None = None,
  process_id: int | None = None,
) -> bool:
  """Starts ``jax.distributed`` on several hosts; a no-op (returns False) on one host.

  Sources, in order: explicit arguments (flags), a TPU pod environment, SLURM variables.
  """
  global _initialized
  if _initialized:
    return True
  kwargs = plan(coordinator_address, num_processes, process_id)
  if kwargs is None:
    return False
  # A dead peer is detected after this many seconds (jax's default is 100); the survivors then
  # exit instead of waiting in a collective forever.
  timeout = int(os.environ.get("JAXLAB_HEARTBEAT_TIMEOUT", 100))
  kwargs.setdefault("heartbeat_timeout_seconds", timeout)
  if jax.config.jax_cpu_collectives_implementation in (None, "", "none"):
    # CPU processes need a collectives backend to form one mesh (local multi-process checks, CI).
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
  logging.info("jax.distributed.initialize(%s)", kwargs)
  jax.distributed.initialize(**kwargs)
  _initialized = True
  return True
