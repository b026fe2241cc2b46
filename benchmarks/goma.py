"""Throughput of the VI solvers: 1024 random instances in one vmapped jit vs a plain NumPy loop.

  python -m benchmarks.goma [--instances=1024] [--n=20] [--steps=1000] [--method=goma] [--seed=0]

Both sides run the same method with the same step sizes on the same 1024 bilinear games (n x n,
s ~ U[0.1, 1]) and record ||F(z_k)||^2 every iteration. The NumPy reference loops over iterations
with batched matmuls over instances (the fastest plain-NumPy form; a Python loop over instances
would be ~100x slower still). Prints instance-iterations/s of both, the ratio (jax / numpy; > 1
means the jitted scan wins), and the largest relative difference of the final residuals.
"""

import math
import sys
import time

import jax
import numpy as np
from absl import flags

from jaxlab.core import experiment, resources
from jaxlab.optim.goma import problems, vi

_INSTANCES = flags.DEFINE_integer("instances", 1024, "Random bilinear games solved in one vmap.")
_N = flags.DEFINE_integer("n", 20, "Size of each player (the iterate has dimension 2n).")
_METHOD = flags.DEFINE_string("method", "goma", "Method: goma or eg (both have a NumPy twin).")
# The benchmark writes nothing and runs on one device: these shared flags would be ignored.
UNUSED_FLAGS = ("workdir", "ckpt_every", "keep", "mesh", "log_every", "profile")


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


def _solve_jax(games, z0s, lips, method, iters):
  solve = jax.jit(jax.vmap(lambda g, z, L: vi.run(method, g, z, iters, L=L)))
  jax.block_until_ready(solve(games, z0s, lips))  # compile
  t0 = time.perf_counter()
  tr = jax.block_until_ready(solve(games, z0s, lips))
  return tr, time.perf_counter() - t0


def main(argv):
  del argv
  steps = flags.FLAGS.steps
  experiment.require(steps is None or steps >= 1, "steps", f"must be >= 1, got {steps}")
  run = experiment.common("vi_benchmark", default_steps=1000, unused=UNUSED_FLAGS)
  method = experiment.check_choice("method", _METHOD.value, ("goma", "eg"))
  experiment.require(_INSTANCES.value >= 1, "instances", f"must be >= 1, got {_INSTANCES.value}")
  experiment.require(_N.value >= 1, "n", f"must be >= 1, got {_N.value}")
  instances, n, iters = _INSTANCES.value, _N.value, run.steps
  # before anything is built: the games (JAX and NumPy copies) and both residual histories
  for name, value in (("instances", instances), ("n", 2 * n), ("steps", iters + 1)):
    resources.check_int32(name, value)
  what = f"{instances} games of size {2 * n} (JAX and NumPy copies)"
  resources.check_fits(
    4 * 4 * instances * 4 * n * n, "n" if n * n > instances else "instances", what
  )
  what = f"{instances} x {iters + 1} residuals (JAX and NumPy)"
  resources.check_fits(
    4 * 4 * instances * (iters + 1), "steps" if iters > instances else "instances", what
  )

  k_games, k_starts = jax.random.split(jax.random.PRNGKey(run.seed))
  games = jax.vmap(lambda k: problems.bilinear(k, n, 0.1, 1.0, "uniform"))(
    jax.random.split(k_games, instances)
  )
  z0s = jax.vmap(problems.sample_start)(jax.random.split(k_starts, instances), games)
  lips = jax.vmap(lambda g: g.lipschitz)(games)
  tr, t_jax = _solve_jax(games, z0s, lips, method, iters)

  m_np, z_np, l_np = (np.asarray(x, np.float32) for x in (games.M, z0s, lips))
  eta = (vi.default_hparams(method)["eta"] / l_np).astype(np.float32)  # eta = c / L per instance
  ref = numpy_goma if method == "goma" else numpy_eg
  t0 = time.perf_counter()
  _, res_np = ref(m_np, z_np, iters, eta)
  t_np = time.perf_counter() - t0

  work = instances * iters
  r_jax, r_np = np.asarray(tr.residual_sq[:, -1]), res_np[-1]
  diff = float(np.max(np.abs(r_jax - r_np) / np.maximum(np.abs(r_np), 1e-30)))
  print(
    f"{method}: {instances} instances x {iters} iters, dim {2 * n}, "
    f"{jax.device_count()} {jax.devices()[0].platform} device(s)"
  )
  print(f"  jax  vmap(jit(scan)): {t_jax:7.3f} s  {work / t_jax:12,.0f} instance-iters/s")
  print(f"  numpy batched loop  : {t_np:7.3f} s  {work / t_np:12,.0f} instance-iters/s")
  print(
    f"  ratio jax/numpy     : {t_np / t_jax:7.2f}x   (max rel. diff of final ||F||^2: "
    f"{diff:.1e}; median final ||F||^2 {np.median(r_np):.2e})"
  )
  if not math.isfinite(diff) or diff > 1e-2:
    print("error: jax and numpy results disagree", file=sys.stderr, flush=True)
    raise SystemExit(1)


if __name__ == "__main__":
  experiment.run(main)
