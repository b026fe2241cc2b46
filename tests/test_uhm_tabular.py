"""Tabular oracle for UHM (exact n-step laws, nu-operator, successor measure, a tabular model
trained with the bootstrapped recursion) and the checks that use it (docs/uhm.md, "Checks").

Conventions: P_SxAxS transition tensor, pi_SxA policy, state-action index (s, a) -> s * A + a.
M (SA x SA) is the state-action transition matrix M[(s,a),(s',a')] = P(s'|s,a) pi(a'|s').
Exact maths is float64 numpy; the trained table uses jax (float32) on the in-memory runtime.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core import runtime
from jaxlab.rl.uhm import horizon

GAMMA, LAM, KMAX = 0.9, 0.8, 5


# ------------------------------------------------------------------------------------- the oracle
def random_mdp(seed: int, S: int, A: int):
  """Random dense P, rewards R_SxA in [0, 1), stochastic pi."""
  rng = np.random.default_rng(seed)
  P = rng.dirichlet(np.ones(S), size=(S, A))
  R = rng.uniform(size=(S, A))
  pi = rng.dirichlet(np.ones(A), size=S)
  return P, R, pi


def chain_mdp(S: int = 10, p_move: float = 0.8, p_stay: float = 0.1):
  """S-state chain, actions left/right: move w.p. p_move, stay p_stay, else slip the other way."""
  P = np.zeros((S, 2, S))
  for s in range(S):
    for a, d in ((0, -1), (1, 1)):
      P[s, a, min(max(s + d, 0), S - 1)] += p_move
      P[s, a, s] += p_stay
      P[s, a, min(max(s - d, 0), S - 1)] += 1.0 - p_move - p_stay
  return P


def sa_matrix(P, pi):
  S, A, _ = P.shape
  return (P[:, :, :, None] * pi[None, None]).reshape(S * A, S * A)


def exact_n_step(P, pi, k_max: int) -> np.ndarray:
  """Law of s_n given (s_0, a_0) = (s, a): rows e_(s,a) M^{n-1} P, shape k_max x SA x S."""
  S, A, _ = P.shape
  M = sa_matrix(P, pi)
  Pf = P.reshape(S * A, S)
  out, Mn = [], np.eye(S * A)
  for _ in range(k_max):
    out.append(Mn @ Pf)
    Mn = Mn @ M
  return np.stack(out)


def q_pi(P, R, pi, gamma):
  """Q^pi = (I - gamma M)^{-1} r, shape SA."""
  M = sa_matrix(P, pi)
  return np.linalg.solve(np.eye(M.shape[0]) - gamma * M, R.reshape(-1))


def nu_operator(Q, P, R, pi, gamma, nu):
  """T^nu Q = r + gamma sum_{k=1}^{K} M^k (xi_k r + nu_k Q)  (Prop. C.1, nu supported on 1..K)."""
  M = sa_matrix(P, pi)
  r = R.reshape(-1)
  xi = horizon.xi_from_nu(nu, gamma)
  out, Mk = r.copy(), np.eye(M.shape[0])
  for k in range(len(nu)):
    Mk = Mk @ M
    out = out + gamma * Mk @ (xi[k] * r + nu[k] * Q)
  return out


def one_sample_expectation(Q, P, R, pi, gamma, p_H, w_xi, w_nu):
  """E[G^nu] = r + sum_n p_H(n) gamma M^n (w_xi(n) r + w_nu(n) Q)."""
  M = sa_matrix(P, pi)
  r = R.reshape(-1)
  out, Mn = r.copy(), np.eye(M.shape[0])
  for n in range(len(p_H)):
    Mn = Mn @ M
    out = out + p_H[n] * gamma * Mn @ (w_xi[n] * r + w_nu[n] * Q)
  return out


def successor_measure(P, pi, gamma) -> np.ndarray:
  """Law of s_n, n ~ Geom(1 - gamma) on {1, 2, ...}: (1-gamma) (I - gamma M)^{-1} P, SA x S."""
  S, A, _ = P.shape
  M = sa_matrix(P, pi)
  return (1 - gamma) * np.linalg.solve(np.eye(S * A) - gamma * M, P.reshape(S * A, S))


def sample_dataset(seed: int, P, num: int):
  """Offline transitions with uniform (s, a): returns (sa_N, sp_N) int32 numpy arrays."""
  S, A, _ = P.shape
  rng = np.random.default_rng(seed)
  sa = rng.integers(0, S * A, num)
  cdf = np.cumsum(P.reshape(S * A, S), -1)[sa]
  sp = np.minimum((rng.uniform(size=(num, 1)) > cdf).sum(-1), S - 1)
  return sa.astype(np.int32), sp.astype(np.int32)


def train_tabular_uhm(
  key,
  sa_N,
  sp_N,
  pi,
  k_max: int,
  num_iters: int = 2000,
  batch_size: int = 4096,
  lr_power: float = 0.6,
):
  """Tabular UHM m[n-1, (s,a), :] trained on offline data with the bootstrapped recursion.

  Each iteration draws a minibatch, a' ~ pi(s'), and moves every level towards the per-(s,a)
  average of its target: one-hot(s') for n = 1 and the target (previous) table at (s', a', n-1)
  for n > 1, with step size (t+1)^-lr_power (Robbins-Monro). Runs in memory on the jaxlab runtime.
  Returns the table, k_max x SA x S (float32).
  """
  S, A = pi.shape
  SA = S * A
  data = (jnp.asarray(sa_N), jnp.asarray(sp_N))
  logpi = jnp.log(jnp.asarray(pi, jnp.float32))

  def sample(data, key):
    idx = jax.random.randint(key, (batch_size,), 0, data[0].shape[0])
    return data[0][idx], data[1][idx]

  def update(state, batch, key):
    m, t = state
    sa, sp = batch
    ap = jax.random.categorical(key, logpi[sp])
    base = jax.nn.one_hot(sp, S)[None]  # 1 x B x S
    boot = m[:-1, sp * A + ap]  # (k_max-1) x B x S (target = previous table)
    tgt = jnp.concatenate([base, boot], 0)  # k_max x B x S
    cnt = jax.ops.segment_sum(jnp.ones(batch_size), sa, SA)
    tot = jax.vmap(lambda x: jax.ops.segment_sum(x, sa, SA))(tgt)
    avg = tot / jnp.maximum(cnt, 1)[None, :, None]
    lr = (t + 1.0) ** (-lr_power)
    m = jnp.where((cnt > 0)[None, :, None], m + lr * (avg - m), m)
    return (m, t + 1.0), {"lr": lr}

  m0 = jnp.full((k_max, SA, S), 1.0 / S, jnp.float32)
  loop = runtime.Loop(num_steps=num_iters, log_every=num_iters, progress=False)
  (m, _), _ = runtime.train((m0, jnp.zeros(())), update, loop, key=key, data=data, sample_fn=sample)
  return m


def tv(p, q):
  """Total variation distance along the last axis."""
  return 0.5 * np.abs(np.asarray(p, np.float64) - np.asarray(q, np.float64)).sum(-1)


# ------------------------------------------------------------------ (1) nu-operator identities
@pytest.fixture(scope="module")
def mdp():
  P, R, pi = random_mdp(0, 6, 3)
  return P, R, pi, q_pi(P, R, pi, GAMMA)


def test_nu_operator_fixed_point(mdp):
  P, R, pi, Q = mdp
  nu = horizon.winsorized_nu(LAM, GAMMA, KMAX)
  np.testing.assert_allclose(nu_operator(Q, P, R, pi, GAMMA, nu), Q, rtol=0, atol=1e-12)
  p_H = horizon.winsorized_p_H(LAM, GAMMA, KMAX)
  w_xi, w_nu = horizon.winsorized_weights(LAM, GAMMA, KMAX)
  np.testing.assert_allclose(
    one_sample_expectation(Q, P, R, pi, GAMMA, p_H, w_xi, w_nu), Q, rtol=0, atol=1e-12
  )
  Qk = np.zeros_like(Q)
  for _ in range(200):
    Qk = nu_operator(Qk, P, R, pi, GAMMA, nu)
  np.testing.assert_allclose(Qk, Q, rtol=0, atol=1e-12)
  # n-step TD special case nu = gamma^{n-1} 1[k = n]: xi(k) = gamma^{k-1} for k < n, 0 after.
  n = 3
  nu_n = np.zeros(KMAX)
  nu_n[n - 1] = GAMMA ** (n - 1)
  xi_n = horizon.xi_from_nu(nu_n, GAMMA)
  np.testing.assert_allclose(xi_n, [1, GAMMA, 0, 0, 0], atol=1e-12)
  np.testing.assert_allclose(nu_operator(Q, P, R, pi, GAMMA, nu_n), Q, rtol=0, atol=1e-12)
  # A wrong nu (not normalised) must not be a fixed point: the test can fail.
  assert np.abs(nu_operator(Q, P, R, pi, GAMMA, 1.1 * nu) - Q).max() > 1e-3


def test_horizon_samplers_match_laws():
  N = 200_000
  n = np.asarray(horizon.sample_winsorized(jax.random.PRNGKey(0), (N,), LAM, GAMMA, KMAX))
  freq = np.bincount(n, minlength=KMAX + 1)[1:] / N
  assert n.min() >= 1 and n.max() <= KMAX
  assert tv(freq, horizon.winsorized_p_H(LAM, GAMMA, KMAX)) < 0.005
  g = np.asarray(horizon.sample_geometric(jax.random.PRNGKey(1), (N,), 0.6))
  freq = np.bincount(g, minlength=40)[1:40] / N
  assert tv(freq, 0.4 * 0.6 ** np.arange(39)) < 0.005


# --------------------------------------------------------------- (2) tabular UHM = exact n-step law
TAB_K, GHM_GAMMA = 24, 0.6  # GHM tail beyond k_max: 0.6^24 = 5e-6


@pytest.fixture(scope="module")
def tabular():
  P = chain_mdp(10)
  pi = np.random.default_rng(1).dirichlet(np.ones(2), size=10)
  sa, sp = sample_dataset(0, P, 200_000)
  m = np.asarray(train_tabular_uhm(jax.random.PRNGKey(0), sa, sp, pi, TAB_K, num_iters=2000))
  return P, pi, m


def test_tabular_uhm_matches_n_step_law(tabular):
  P, pi, m = tabular
  err = tv(m, exact_n_step(P, pi, TAB_K)).max(-1)  # worst (s, a) per n
  assert err.max() < 0.02, err
  # Bootstrapping through the wrong level would give the (n+1)-step law: far from it.
  assert tv(m[1:], exact_n_step(P, pi, TAB_K)[:-1]).max() > 0.1


# ------------------------------------------------------------------------------------ (4) GHM limit
def test_ghm_limit_pooled_uhm_is_successor_measure(tabular):
  P, pi, m = tabular
  SA = m.shape[1]
  sm = successor_measure(P, pi, GHM_GAMMA)
  w = (1 - GHM_GAMMA) * GHM_GAMMA ** np.arange(TAB_K)
  assert tv(np.einsum("n,nij->ij", w / w.sum(), m), sm).max() < 0.02
  # Monte Carlo pooling: n ~ Geom(1 - gamma), x ~ m(. | s, a, n).
  per = 50_000
  n = jnp.minimum(horizon.sample_geometric(jax.random.PRNGKey(2), (SA, per), GHM_GAMMA), TAB_K)
  cdf = np.cumsum(m, -1)[np.asarray(n) - 1, np.arange(SA)[:, None]]  # SA x per x S
  u = np.random.default_rng(3).uniform(size=(SA, per, 1)) * cdf[..., -1:]
  x = np.minimum((u > cdf).sum(-1), m.shape[2] - 1)
  hist = np.stack([np.bincount(x[i], minlength=m.shape[2]) / per for i in range(SA)])
  assert tv(hist, sm).max() < 0.03
  # A one-step model pooled the same way is far from the successor measure.
  assert tv(m[0], sm).max() > 0.1
