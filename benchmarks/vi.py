"""Throughput of the VI solvers: 1024 random instances in one vmapped jit vs a plain NumPy loop.

  python -m benchmarks.vi [--instances=1024] [--n=20] [--iters=1000] [--method=goma]

Both sides run the same method with the same step sizes on the same 1024 bilinear games (n x n,
s ~ U[0.1, 1]) and record ||F(z_k)||^2 every iteration. The NumPy reference loops over iterations
with batched matmuls over instances (the fastest plain-NumPy form; a Python loop over instances
would be ~100x slower still). Prints instance-iterations/s of both, the ratio (jax / numpy; > 1
means the jitted scan wins), and the largest relative difference of the final residuals.
"""

import argparse
import math
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.optim import problems as P
from jaxlab.optim import vi


def numpy_goma(m_bxdxd, z0_bxd, iters, eta, gamma_ratio=1.0, beta_offset=2.0):
  """GOMA with the constant schedule (vi.run("goma") defaults), batched over instances."""
  f = lambda z: np.einsum("bij,bj->bi", m_bxdxd, z)
  z, a = z0_bxd.copy(), z0_bxd
  g_prev = f(z0_bxd)
  res = np.empty((iters + 1, len(z0_bxd)), z0_bxd.dtype)
  res[0] = (g_prev**2).sum(-1)
  for k in range(iters):
    beta = 1.0 / (k + beta_offset)
    base = z + beta * (a - z)
    y = base - gamma_ratio * (1.0 - beta) * eta[:, None] * g_prev
    g_prev = f(y)
    z = base - eta[:, None] * g_prev
    r = f(z)
    res[k + 1] = (r**2).sum(-1)
  return z, res


def numpy_eg(m_bxdxd, z0_bxd, iters, eta):
  f = lambda z: np.einsum("bij,bj->bi", m_bxdxd, z)
  z = z0_bxd.copy()
  res = np.empty((iters + 1, len(z0_bxd)), z0_bxd.dtype)
  res[0] = (f(z) ** 2).sum(-1)
  for k in range(iters):
    y = z - eta[:, None] * f(z)
    z = z - eta[:, None] * f(y)
    res[k + 1] = (f(z) ** 2).sum(-1)
  return z, res


def main():
  p = argparse.ArgumentParser()
  p.add_argument("--instances", type=int, default=1024)
  p.add_argument("--n", type=int, default=20)
  p.add_argument("--iters", type=int, default=1000)
  p.add_argument("--method", default="goma", choices=("goma", "eg"))
  a = p.parse_args()

  keys = jax.random.split(jax.random.PRNGKey(0), a.instances)
  games = jax.vmap(lambda k: P.bilinear(k, a.n, 0.1, 1.0, "uniform"))(keys)
  z0s = jax.vmap(P.sample_start)(jax.random.split(jax.random.PRNGKey(1), a.instances), games)
  lips = jax.vmap(lambda g: g.lipschitz)(games)
  eta_scale = vi.default_hparams(a.method)["eta"]  # eta = c / L per instance

  solve = jax.jit(jax.vmap(lambda g, z, L: vi.run(a.method, g, z, a.iters, L=L)))
  jax.block_until_ready(solve(games, z0s, lips))  # compile
  t0 = time.perf_counter()
  tr = jax.block_until_ready(solve(games, z0s, lips))
  t_jax = time.perf_counter() - t0

  m_np, z_np, l_np = (np.asarray(x, np.float32) for x in (games.M, z0s, lips))
  eta = (eta_scale / l_np).astype(np.float32)
  ref = numpy_goma if a.method == "goma" else numpy_eg
  t0 = time.perf_counter()
  _, res_np = ref(m_np, z_np, a.iters, eta)
  t_np = time.perf_counter() - t0

  work = a.instances * a.iters
  r_jax, r_np = np.asarray(tr.residual_sq[:, -1]), res_np[-1]
  diff = float(np.max(np.abs(r_jax - r_np) / np.maximum(np.abs(r_np), 1e-30)))
  print(
    f"{a.method}: {a.instances} instances x {a.iters} iters, dim {2 * a.n}, "
    f"{jax.device_count()} {jax.devices()[0].platform} device(s)"
  )
  print(f"  jax  vmap(jit(scan)): {t_jax:7.3f} s  {work / t_jax:12,.0f} instance-iters/s")
  print(f"  numpy batched loop  : {t_np:7.3f} s  {work / t_np:12,.0f} instance-iters/s")
  print(
    f"  ratio jax/numpy     : {t_np / t_jax:7.2f}x   (max rel. diff of final ||F||^2: "
    f"{diff:.1e}; median final ||F||^2 {np.median(r_np):.2e})"
  )
  if not math.isfinite(diff) or diff > 1e-2:
    raise SystemExit("jax and numpy results disagree")


if __name__ == "__main__":
  main()
