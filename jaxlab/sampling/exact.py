"""Ground truth: enumeration of small lattices, the exact Schrödinger bridge (Sinkhorn) and the
Ferdinand–Fisher / Kaufman finite-size partition function of the periodic 2-D Ising model.

Enumeration order: state index = sum_d x^d N^(D-1-d) (the order of `itertools.product`).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.sampling import reference as ref_lib

MAX_ENUM_STATES = 1 << 20


def enumerate_states(N: int, D: int) -> np.ndarray:
  """All N^D states as an (N^D, D) int32 array."""
  if N**D > MAX_ENUM_STATES:
    raise ValueError(f"enumeration of N^D = {N}^{D} states exceeds {MAX_ENUM_STATES}")
  idx = np.arange(N**D)
  pw = N ** np.arange(D - 1, -1, -1)
  return ((idx[:, None] // pw[None, :]) % N).astype(np.int32)


def state_index(x_BxD, N: int):
  D = x_BxD.shape[-1]
  pw = jnp.asarray(N ** np.arange(D - 1, -1, -1), dtype=jnp.int32)
  return (x_BxD.astype(jnp.int32) * pw).sum(-1)


def exact_pmf(target, dtype=np.float64) -> tuple[np.ndarray, np.ndarray, float]:
  """(states, pmf, log Z) of a `Lattice` target by enumeration (float64 on host)."""
  states = enumerate_states(target.N, target.D)
  # energies are exact small numbers in float32; multiply by beta in float64
  lp = -target.beta * np.asarray(jax.jit(target.energy)(jnp.asarray(states)), dtype=dtype)
  logz = float(np.logaddexp.reduce(lp))
  return states, np.exp(lp - logz), logz


def enumerated_observables(target) -> dict:
  """log Z, U per site, E|m|, E m^2 (Ising) or E[majority fraction] (Potts), by enumeration."""
  states, p, logz = exact_pmf(target)
  x = jnp.asarray(states)
  e = np.asarray(jax.jit(target.energy)(x), np.float64)
  out = {"log_z": logz, "u_per_site": float(p @ e) / target.D}
  if target.kind == "ising":
    m = np.asarray(target.magnetisation(x), np.float64)
    out.update(abs_m=float(p @ np.abs(m)), m2=float(p @ m**2))
  else:
    out.update(majority=float(p @ np.asarray(target.majority_fraction(x), np.float64)))
  return out


def tv_distance(samples_BxD, pmf: np.ndarray, N: int) -> float:
  """Total variation between the empirical pmf of samples and an enumerated pmf."""
  idx = np.asarray(state_index(jnp.asarray(samples_BxD), N))
  emp = np.bincount(idx, minlength=pmf.shape[0]) / idx.shape[0]
  return 0.5 * float(np.abs(emp - pmf).sum())


def energy_law(target) -> tuple[np.ndarray, np.ndarray]:
  """The exact law of the energy per site by enumeration: (levels ascending, probabilities)."""
  states, p, _ = exact_pmf(target)
  e = np.asarray(jax.jit(target.energy)(jnp.asarray(states)), np.float64) / target.D
  levels, inv = np.unique(e, return_inverse=True)
  return levels, np.bincount(inv, weights=p, minlength=levels.size)


# ----------------------------------------------------------------------------- Ferdinand–Fisher
def _log_kaufman_z(L: int, K: float) -> float:
  """log Z of the L x L periodic Ising model, h = 0, coupling K = beta J (Kaufman 1949;
  Ferdinand & Fisher 1969). Exact for every L >= 1 with the right/down bond convention."""
  c = np.cos(np.pi * np.arange(2 * L) / L)
  ch = np.cosh(2 * K) / np.tanh(2 * K) - c
  g = np.arccosh(np.maximum(ch, 1.0))
  g[0] = 2 * K + np.log(np.tanh(K))  # signed: negative above K_c
  odd, even = g[1::2], g[0::2]
  half = L / 2.0

  def lcosh(v):
    return np.sum(np.logaddexp(half * v, -half * v))  # sum log 2cosh

  def lsinh(v):  # (sign, sum log|2sinh|)
    a = np.abs(half * v)
    sgn = np.prod(np.sign(v))
    return sgn, np.sum(a + np.log(-np.expm1(-2 * a)))

  terms = [(1.0, lcosh(odd)), lsinh(odd), (1.0, lcosh(even)), lsinh(even)]
  mx = max(t[1] for t in terms)
  tot = sum(s * math.exp(l - mx) for s, l in terms)
  return -math.log(2) + 0.5 * L * L * math.log(2 * math.sinh(2 * K)) + mx + math.log(tot)


def ising_exact_observables(L: int, beta: float, J: float = 1.0) -> dict:
  """Exact finite-size F, U, S per spin and log Z for the periodic L x L Ising model (h = 0)."""
  if L < 1 or beta <= 0:
    raise ValueError(f"need L >= 1 and beta > 0, got L={L}, beta={beta}")
  logz = _log_kaufman_z(L, beta * J)
  eps = 1e-5 * beta
  dlogz = (_log_kaufman_z(L, (beta + eps) * J) - _log_kaufman_z(L, (beta - eps) * J)) / (2 * eps)
  n = L * L
  u = -dlogz / n
  f = -logz / (beta * n)
  return {"log_z": logz, "f_per_spin": f, "u_per_spin": u, "s_per_spin": beta * (u - f)}


# ----------------------------------------------------------------------------- exact SB (Sinkhorn)
def sinkhorn_sb(
  mu: np.ndarray, nu: np.ndarray, p10: np.ndarray, iters: int = 10000, tol: float = 1e-15
):
  """Schrödinger potentials for reference kernel p10[x, y] = p^r_{1|0}(y|x) (float64):
  phi_0 = P phi_1, hat phi_1 = P^T hat phi_0, mu = phi_0 hat phi_0, nu = phi_1 hat phi_1."""
  phi1 = np.ones_like(nu)
  for _ in range(iters):
    hphi0 = mu / (p10 @ phi1)
    new = nu / (p10.T @ hphi0)
    if np.max(np.abs(new / phi1 - 1)) < tol:
      phi1 = new
      break
    phi1 = new
  hphi0 = mu / (p10 @ phi1)
  return {"phi1": phi1, "hphi0": hphi0, "phi0": p10 @ phi1, "hphi1": p10.T @ hphi0}


def neighbour_index(states_SxD: np.ndarray, N: int) -> np.ndarray:
  """idx[s, d, n] = index of state s with site d set to n."""
  D = states_SxD.shape[1]
  pw = N ** np.arange(D - 1, -1, -1)
  base = states_SxD @ pw
  return (
    base[:, None, None] + (np.arange(N)[None, None, :] - states_SxD[:, :, None]) * pw[None, :, None]
  )


def exact_sb_rates(target, sched: ref_lib.Schedule, source: str = "uniform"):
  """Exact controller log-ratio fn `log_phi(t, x_BxD) -> BxDxN` of the SB from `source` to `target`,
  plus the Sinkhorn potentials (by enumeration; small lattices only)."""
  states, nu, _ = exact_pmf(target)
  N = target.N
  S = states.shape[0]
  if source == "uniform":
    mu = np.full(S, 1.0 / S)
  elif source == "constant":
    mu = np.where((states == states[:, :1]).all(1), 1.0 / N, 0.0)
  else:
    raise ValueError(f"source must be 'uniform' or 'constant', got {source!r}")
  la, lb = (float(v) for v in _log_ab64(sched, 0.0, 1.0, N))
  ham = (states[:, None, :] != states[None, :, :]).sum(-1)
  p10 = np.exp(states.shape[1] * lb + ham * (la - lb))
  pots = sinkhorn_sb(mu, nu, p10)
  log_phi1 = jnp.asarray(np.log(pots["phi1"]), jnp.float32)
  ham_j = jnp.asarray(ham, jnp.float32)
  D = states.shape[1]

  def log_phi(t, x_BxD):
    t = jnp.ravel(t)[0]  # one common time per call (as in tau-leaping)
    log_a, log_b = ref_lib.log_AB(sched, t, 1.0, N)
    log_phit = jax.nn.logsumexp(
      D * log_b + ham_j * (log_a - log_b) + log_phi1[None, :], axis=1
    )  # S
    i = state_index(x_BxD, N)
    xs = x_BxD.astype(jnp.int32)
    pw = jnp.asarray(N ** np.arange(D - 1, -1, -1), jnp.int32)
    nb = i[..., None, None] + (jnp.arange(N) - xs[..., None]) * pw[:, None]
    return log_phit[nb] - log_phit[i][..., None, None]

  return log_phi, {"states": states, "mu": mu, "nu": nu, "p10": p10, **pots}


def _log_ab64(sched, s, t, N):
  a, b = _ab64(sched, s, t, N)
  return math.log(a), math.log(b)


# ----------------------------------------------------------------------------- exact SB, constant
def constant_source_sb_log_phi(target, sched: ref_lib.Schedule, times):
  """Exact SB controller of the constant source (h = 0) on a tau-leaping grid, without the S x S
  matrix of `exact_sb_rates`, so lattices up to 2^20 states (4 x 4 Ising) fit.

  With h = 0 the target and the reference are symmetric under relabelling the values, so phi_0 is
  equal on the N all-equal sources and phi_1 ∝ nu / p^r_1. The reference kernel factorises over
  sites: phi_t = (K_t ⊗ ... ⊗ K_t) phi_1 with K_t[a, b] = B(t, 1) if a == b else A(t, 1), one
  N x N contraction per axis of phi_1 reshaped to (N,) * D (float64; all terms are positive).

  `times` must be a uniform ascending grid in [0, 1] (e.g. `linspace(0, 1, steps + 1)[:-1]`, the
  points where `sampler.tau_leap` calls the controller): `log_phi(t_B, x_BxD) -> BxDxN` (float32,
  log phi_t(x^{d<-n}) - log phi_t(x), 0 at n = x^d) uses the grid point nearest to the common
  time t_B[0], so it is exact only at grid times. Only log phi_t (T x S) is stored; neighbours are
  gathered per call. Also returns {"times", "log_phi_t" (T x S, float64, max 0 per row),
  "log_phi1" (S, max 0)}.
  """
  N, D = target.N, target.D
  if target.h != 0.0:
    raise ValueError(f"the constant-source closed form needs h = 0, got h={target.h}")
  if N**D > MAX_ENUM_STATES:
    raise ValueError(f"N^D = {N}^{D} states exceeds {MAX_ENUM_STATES}")
  times = np.asarray(times, np.float64)
  T = times.shape[0] if times.ndim == 1 else 0
  dt = float(times[1] - times[0]) if T > 1 else 1.0
  if (
    T == 0
    or times[0] < 0
    or times[-1] > 1
    or dt <= 0
    or not np.allclose(np.diff(times), dt, rtol=0, atol=1e-9)
  ):
    raise ValueError("times must be a non-empty uniform ascending 1-D grid in [0, 1]")
  states = enumerate_states(N, D)
  S = states.shape[0]
  energy = jax.jit(target.energy)
  e = np.concatenate(
    [np.asarray(energy(jnp.asarray(states[i : i + 8192])), np.float64) for i in range(0, S, 8192)]
  )
  # log p^r_1(x) = log mean_g A^{D - m_g} B^{m_g}, m_g = #{d: x^d = g} (float64)
  la1, lb1 = _log_ab64(sched, 0.0, 1.0, N)
  m_SxG = np.stack([(states == g).sum(1) for g in range(N)], 1)
  log_p1 = np.logaddexp.reduce(m_SxG * lb1 + (D - m_SxG) * la1, axis=1) - math.log(N)
  log_phi1 = -target.beta * e - log_p1
  log_phi1 -= log_phi1.max()
  phi1 = np.exp(log_phi1)
  if not (phi1 > 0).all():
    raise ValueError("log phi_1 spans more than float64's range (beta too large)")
  rows = []
  for t in times:
    a, b = _ab64(sched, float(t), 1.0, N)  # at t = 1: a = 0, K = identity
    K = np.full((N, N), a)
    np.fill_diagonal(K, b)
    p = phi1
    for d in range(D):  # contract axis d of phi reshaped to (N^d, N, N^(D-1-d))
      p = np.einsum("ab,ibj->iaj", K, p.reshape(N**d, N, -1)).reshape(-1)
    lp = np.log(p)
    rows.append(lp - lp.max())
  log_phi_t = np.stack(rows)  # T x S
  table = jnp.asarray(log_phi_t, jnp.float32)
  t0 = float(times[0])

  def log_phi(t_B, x_BxD):
    t = jnp.ravel(t_B)[0]  # one common time per call (as in tau-leaping)
    k = jnp.clip(jnp.round((t - t0) / dt), 0, T - 1).astype(jnp.int32)
    return neighbour_log_ratios(table[k], x_BxD, N)

  return log_phi, {"times": times, "log_phi_t": log_phi_t, "log_phi1": log_phi1}


def neighbour_log_ratios(log_phi_S, x_BxD, N: int):
  """f(x^{d<-n}) - f(x) (BxDxN, 0 at n = x^d) of a function tabulated over all states (log_phi_S
  in `enumerate_states` order): the controller's output form, gathered without an S x D x N
  table."""
  D = x_BxD.shape[-1]
  xs = x_BxD.astype(jnp.int32)
  i = state_index(xs, N)
  pw = jnp.asarray(N ** np.arange(D - 1, -1, -1), jnp.int32)
  nb = i[..., None, None] + (jnp.arange(N) - xs[..., None]) * pw[:, None]
  lp_S = jnp.asarray(log_phi_S)
  return lp_S[nb] - lp_S[i][..., None, None]


def _ab64(sched, s, t, N):
  """(A, B) of `reference.log_AB` in float64, not in logs (A = 0 when s = t)."""
  if sched.kind == "const":
    G = sched.gamma * (t - s)
  else:
    G = sched.gamma * (math.log(sched.alpha + t) - math.log(sched.alpha + s))
  return -math.expm1(-G) / N, (1 + (N - 1) * math.exp(-G)) / N
