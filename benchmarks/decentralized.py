"""Distributed (one node per device, shard_map) vs dense decentralized SGD, same process.

  python -m benchmarks.decentralized [--nodes=8] [--steps=2000] [--dim=1000] [--topology=ring]

On CPU with fewer than ``--nodes`` devices it re-executes itself with that many simulated host
devices. Prints steps/s of the dense simulation and of the `shard_map` run with ``ppermute`` and
``all_gather`` mixing, and each ratio to dense (compile excluded). On simulated CPU devices the
collectives are memcpys, so this measures overhead, not a network.
"""

import os
import sys
import time

import jax
import numpy as np
from absl import flags

from jaxlab.core import experiment, resources
from jaxlab.core.mesh import make_mesh
from jaxlab.optim import decentralized as dec

_NODES = flags.DEFINE_integer("nodes", 8, "Nodes = devices along the mesh axis `nodes`.")
_DIM = flags.DEFINE_integer("dim", 1000, "Least-squares parameter dimension.")
_TOPOLOGY = flags.DEFINE_string("topology", "ring", f"Graph: {', '.join(dec.TOPOLOGIES)}.")
# The benchmark builds its own one-node-per-device mesh and writes nothing.
UNUSED_FLAGS = ("workdir", "ckpt_every", "keep", "mesh", "log_every", "profile")
_FORCE = "xla_force_host_platform_device_count"


def _ensure_devices(n: int) -> None:
  """Simulated CPU devices must be requested before jax starts: re-execute once with them."""
  if jax.device_count() >= n:
    return
  xla_flags = os.environ.get("XLA_FLAGS", "")
  experiment.require(
    jax.default_backend() == "cpu" and _FORCE not in xla_flags,
    "nodes",
    f"needs {n} devices, found {jax.device_count()} {jax.default_backend()} device(s)",
  )
  env = {**os.environ, "XLA_FLAGS": f"{xla_flags} --{_FORCE}={n}".strip()}
  sys.stdout.flush()
  os.execve(sys.executable, sys.orig_argv, env)


def main(argv):
  del argv
  steps = flags.FLAGS.steps
  experiment.require(steps is None or steps >= 1, "steps", f"must be >= 1, got {steps}")
  run = experiment.common("decentralized_benchmark", default_steps=2000, unused=UNUSED_FLAGS)
  n, steps, dim = _NODES.value, run.steps, _DIM.value
  experiment.require(n >= 2, "nodes", f"must be >= 2, got {n}")
  experiment.require(dim >= 1, "dim", f"must be >= 1, got {dim}")
  experiment.check_choice("topology", _TOPOLOGY.value, dec.TOPOLOGIES)
  for name, value in (("nodes", n), ("dim", dim), ("steps", steps)):
    resources.check_int32(name, value)
  # before the graph, the data and the simulated devices: n x n mixing matrices, each node's
  # 32 x dim least-squares block and iterates (dense and two shard_map runs)
  resources.check_fits(4 * 8 * n * n, "nodes", f"the {n} x {n} mixing matrices")
  what = f"{n} nodes x 32 rows x {dim} dims (three runs)"
  resources.check_fits(3 * 4 * 4 * n * 33 * dim, "dim" if dim > n else "nodes", what)
  msg = dec.topology_error(_TOPOLOGY.value, n, p=0.4, seed=run.seed)
  experiment.require(msg is None, "topology", msg)
  _ensure_devices(n)

  g = dec.make_graph(_TOPOLOGY.value, n, p=0.4, seed=run.seed)
  prob = dec.least_squares(n, d=_DIM.value, m=32, batch_size=8, seed=run.seed)
  lam = dec.make_lambda("degree", g)
  lr = dec.default_lr(prob, lam)
  mesh = make_mesh({"nodes": n}, devices=jax.devices()[:n])
  key = jax.random.key(run.seed)
  strategy = "I" if g.directed else "II"  # no λ-reversible A on a directed graph

  def timed(**kw):
    dec.run(strategy, g, lam, prob, steps, lr, key=key, f_star=0.0, **kw)  # compile
    t = time.perf_counter()
    r = dec.run(strategy, g, lam, prob, steps, lr, key=key, f_star=0.0, **kw)
    return steps / (time.perf_counter() - t), r

  base, ref = timed()
  print(f"dense      : {base:9.1f} steps/s   ({n} nodes, d={_DIM.value}, {_TOPOLOGY.value})")
  for comm in ("ppermute", "all_gather"):
    sps, r = timed(mesh=mesh, comm=comm)
    err = float(np.max(np.abs(np.asarray(r.x) - np.asarray(ref.x))))
    print(f"{comm:11s}: {sps:9.1f} steps/s   ratio to dense {sps / base:.2f}   max |Δx| {err:.1e}")


if __name__ == "__main__":
  experiment.run(main)
