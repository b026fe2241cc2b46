"""MCMC baselines in JAX with vmapped chains: single-site Metropolis (checkerboard for even L, each
site of a colour tried w.p. 1/2; random sequential sites for odd L) and Swendsen–Wang cluster
updates (Ising and Potts, h = 0, J > 0).

`run_chains` returns decorrelated-by-thinning samples plus each chain's energy trace, from which
`integrated_autocorr` gives tau_int (effective samples = samples / tau_int). `run_for` runs the
chains for a given CPU time instead (the baselines at matched time of docs/dasbs.md).
"""

from __future__ import annotations

import functools
import time

import jax
import jax.numpy as jnp
import numpy as np

METHODS = ("metropolis", "sw")


def _metropolis_proposal(key, target, x_CxD):
  """Uniform proposal among the N-1 other values; log acceptance ratio = score entry."""
  k1, k2 = jax.random.split(key)
  N = target.N
  new = (x_CxD + jax.random.randint(k1, x_CxD.shape, 1, N)) % N
  log_acc = jnp.take_along_axis(target.score(x_CxD), new[..., None], -1)[..., 0]
  accept = jnp.log(jax.random.uniform(k2, x_CxD.shape)) < log_acc
  return new, accept


def metropolis_sweep(key, target, x_CxD):
  """One sweep per chain: D site updates for odd L, D / 2 on average for even L."""
  L, D = target.L, target.D
  if L % 2 == 0:  # checkerboard: same-colour sites are not neighbours, update them in parallel
    r, c = np.divmod(np.arange(D), L)
    colour = jnp.asarray((r + c) % 2)
    for k, col in zip(jax.random.split(key, 2), (0, 1)):
      kp, ks = jax.random.split(k)
      new, acc = _metropolis_proposal(kp, target, x_CxD)
      # Each site of the colour is tried w.p. 1/2. Trying all of them at once, an Ising chain can
      # fall into a cycle of energy-0 states in which every flip costs 0 and is accepted w.p. 1:
      # the move is then deterministic and the chain never leaves (1 of 64 chains at 4 x 4).
      tried = jax.random.bernoulli(ks, 0.5, x_CxD.shape)
      x_CxD = jnp.where(acc & tried & (colour == col), new, x_CxD)
    return x_CxD

  def body(i, x):  # odd L: random-site sequential updates (exact detailed balance)
    ks, kp = jax.random.split(jax.random.fold_in(key, i))
    site = jax.random.randint(ks, x.shape[:1], 0, D)
    new, acc = _metropolis_proposal(kp, target, x)
    hit = jnp.arange(D) == site[:, None]
    return jnp.where(acc & hit, new, x)

  return jax.lax.fori_loop(0, D, body, x_CxD)


def _sw_one(key, target, x_D):
  L, D, N = target.L, target.D, target.N
  kb, kc = jax.random.split(key)
  g = x_D.reshape(L, L)
  # FK bond probability between equal neighbours: Ising (beta J s s') 1 - e^{-2 beta J};
  # Potts 1 - e^{-beta J}
  k_eff = 2.0 * target.beta * target.J if target.kind == "ising" else target.beta * target.J
  p = 1.0 - jnp.exp(-k_eff)
  u = jax.random.uniform(kb, (2, L, L))
  bond_r = ((g == jnp.roll(g, -1, 1)) & (u[0] < p)).reshape(D)  # site i <-> right neighbour
  bond_d = ((g == jnp.roll(g, -1, 0)) & (u[1] < p)).reshape(D)  # site i <-> down neighbour
  idx = jnp.arange(D).reshape(L, L)
  right = jnp.roll(idx, -1, 1).reshape(D)
  down = jnp.roll(idx, -1, 0).reshape(D)
  left = jnp.roll(idx, 1, 1).reshape(D)
  up = jnp.roll(idx, 1, 0).reshape(D)
  bond_l = bond_r[left]
  bond_u = bond_d[up]
  big = D

  def step(lab):
    m = jnp.minimum(lab, jnp.where(bond_r, lab[right], big))
    m = jnp.minimum(m, jnp.where(bond_d, lab[down], big))
    m = jnp.minimum(m, jnp.where(bond_l, lab[left], big))
    m = jnp.minimum(m, jnp.where(bond_u, lab[up], big))
    return m[m]  # pointer jumping: faster propagation

  def cond(c):
    return c[1]

  def body(c):
    lab, _ = c
    new = step(lab)
    return new, jnp.any(new != lab)

  lab, _ = jax.lax.while_loop(cond, body, (jnp.arange(D), True))
  colours = jax.random.randint(kc, (D,), 0, N)
  return colours[lab].astype(x_D.dtype)


def sw_sweep(key, target, x_CxD):
  """One Swendsen–Wang update per chain (clusters by label propagation, new uniform colour each)."""
  if target.h != 0.0 or target.J <= 0:
    raise ValueError("Swendsen–Wang needs h = 0 and J > 0 (use method='metropolis')")
  keys = jax.random.split(key, x_CxD.shape[0])
  return jax.vmap(lambda k, x: _sw_one(k, target, x))(keys, x_CxD)


@functools.partial(
  jax.jit, static_argnames=("target", "num_chains", "num_samples", "burn_in", "thin", "method")
)
def run_chains(
  key,
  target,
  num_chains: int,
  num_samples: int,
  burn_in: int = 100,
  thin: int = 1,
  method: str = "sw",
):
  """Returns (samples (num_samples*num_chains) x D, energies num_samples x num_chains, final state).

  Chains start uniform at random; `thin` sweeps between kept samples."""
  if method not in METHODS:
    raise ValueError(f"mcmc method must be one of {METHODS}, got {method!r}")
  sweep = sw_sweep if method == "sw" else metropolis_sweep
  k0, kb, ks = jax.random.split(key, 3)
  x = jax.random.randint(k0, (num_chains, target.D), 0, target.N).astype(jnp.int32)
  x = jax.lax.fori_loop(0, burn_in, lambda i, x: sweep(jax.random.fold_in(kb, i), target, x), x)

  def collect(x, i):
    x = jax.lax.fori_loop(
      0, thin, lambda j, x: sweep(jax.random.fold_in(jax.random.fold_in(ks, i), j), target, x), x
    )
    return x, (x, target.energy(x))

  x, (xs, es) = jax.lax.scan(collect, x, jnp.arange(num_samples))
  return xs.reshape(-1, target.D), es, x


@functools.partial(jax.jit, static_argnames=("target", "sweeps", "method"))
def _chunk(key, target, x, sweeps: int, method: str):
  """``sweeps`` sweeps of every chain from ``x``: (final state, energies sweeps x chains)."""
  sweep = sw_sweep if method == "sw" else metropolis_sweep

  def one(x, i):
    x = sweep(jax.random.fold_in(key, i), target, x)
    return x, target.energy(x)

  return jax.lax.scan(one, x, jnp.arange(sweeps))


def run_for(
  key,
  target,
  seconds: float,
  method: str = "metropolis",
  num_chains: int = 64,
  sweeps_per_chunk: int = 100,
  burn_in: int = 100,
  clock=time.process_time,
) -> dict:
  """Runs ``num_chains`` chains for ``seconds`` of ``clock`` (process CPU time by default,
  compilation and burn-in included), in chunks of ``sweeps_per_chunk`` sweeps.

  Returns ``energies`` (sweeps x chains, the burn-in dropped), ``seconds`` (measured, at least the
  budget: the last chunk finishes), and per chunk end ``chunk_s`` (seconds so far) and
  ``chunk_sweeps`` (kept sweeps so far): the energies a run stopped at that time would hold."""
  if method not in METHODS:
    raise ValueError(f"mcmc method must be one of {METHODS}, got {method!r}")
  t0 = clock()
  k0, kc = jax.random.split(key)
  x = jax.random.randint(k0, (num_chains, target.D), 0, target.N).astype(jnp.int32)
  traces, chunk_s, chunk_sweeps, done, i = [], [], [], 0, 0
  while True:
    x, e = _chunk(jax.random.fold_in(kc, i), target, x, sweeps_per_chunk, method)
    traces.append(np.asarray(e))  # blocks: the chunk's time is spent before the clock is read
    i, done = i + 1, done + sweeps_per_chunk
    chunk_s.append(clock() - t0)
    chunk_sweeps.append(max(done - burn_in, 0))
    if chunk_s[-1] >= seconds and done > burn_in:
      break
  return {
    "energies": np.concatenate(traces)[burn_in:],
    "seconds": chunk_s[-1],
    "chunk_s": np.asarray(chunk_s),
    "chunk_sweeps": np.asarray(chunk_sweeps),
  }


def integrated_autocorr(trace_TxC: np.ndarray, c: float = 5.0) -> float:
  """tau_int = 1 + 2 sum_k rho_k with Sokal's automatic window (smallest W with W >= c tau(W)),
  averaged autocorrelation over chains (trace: time x chains)."""
  y = np.asarray(trace_TxC, np.float64)
  y = y - y.mean(0, keepdims=True)
  T = y.shape[0]
  f = np.fft.rfft(y, n=2 * T, axis=0)
  acf = np.fft.irfft(f * np.conj(f), axis=0)[:T].sum(1)
  if acf[0] <= 0:
    return 1.0
  rho = acf / acf[0]
  taus = 2.0 * np.cumsum(rho) - 1.0
  for w in range(1, T):
    if w >= c * taus[w]:
      return float(max(taus[w], 1.0))
  return float(max(taus[-1], 1.0))
