"""Distributed (one node per device, shard_map) vs dense decentralized SGD, same process.

  python -m benchmarks.decentralized [--nodes=8] [--steps=2000] [--dim=1000] [--topology=ring]

On CPU it forces ``--nodes`` simulated host devices. Prints steps/s of the dense simulation and of the
`shard_map` run with ``ppermute`` and ``all_gather`` mixing, and each ratio to dense (compile excluded).
On simulated CPU devices the collectives are memcpys, so this measures overhead, not a network.
"""

import argparse
import os
import time


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--nodes", type=int, default=8)
  ap.add_argument("--steps", type=int, default=2000)
  ap.add_argument("--dim", type=int, default=1000)
  ap.add_argument("--topology", default="ring")
  args = ap.parse_args()
  if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
      os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={args.nodes}"
    )
  import jax
  import numpy as np

  from jaxlab.core.mesh import make_mesh
  from jaxlab.optim import decentralized as dec

  n = args.nodes
  g = dec.make_graph(args.topology, n, p=0.4)
  prob = dec.least_squares(n, d=args.dim, m=32, batch_size=8)
  lam = dec.make_lambda("degree", g)
  lr = dec.default_lr(prob, lam)
  mesh = make_mesh({"nodes": n}, devices=jax.devices()[:n])
  key = jax.random.key(0)

  def timed(**kw):
    dec.run("II", g, lam, prob, args.steps, lr, key=key, f_star=0.0, **kw)  # compile
    t = time.perf_counter()
    r = dec.run("II", g, lam, prob, args.steps, lr, key=key, f_star=0.0, **kw)
    return args.steps / (time.perf_counter() - t), r

  base, ref = timed()
  print(f"dense      : {base:9.1f} steps/s   ({n} nodes, d={args.dim}, {args.topology})")
  for comm in ("ppermute", "all_gather"):
    sps, r = timed(mesh=mesh, comm=comm)
    err = float(np.max(np.abs(np.asarray(r.x) - np.asarray(ref.x))))
    print(f"{comm:11s}: {sps:9.1f} steps/s   ratio to dense {sps / base:.2f}   max |Δx| {err:.1e}")


if __name__ == "__main__":
  main()
