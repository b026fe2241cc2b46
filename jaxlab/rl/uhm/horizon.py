"""Horizon distributions and nu-operator weights for UHM's generalised TD target.

UHM (Chung, Lee, Oh; arXiv 2605.15603), Prop. C.1 and the value-target / winsorized-weights figures
of its project page:
    T^nu Q(s,a) = E[ R(s,a) + gamma * sum_{k>=1} ( xi(k) R(s_k,a_k) + nu(k) Q(s_k,a_k) ) ]
    xi(k)       = gamma^{k-1} - sum_{kappa=0}^{k-1} gamma^kappa nu(k - kappa)
    one sample: n ~ p_H, s_e ~ m(.|s,a,n), a_e ~ pi(s_e),
                G = r + gamma (w_xi(n) R(s_e,a_e) + w_nu(n) Q(s_e,a_e)),  w = xi/p_H, nu/p_H
    winsorized weights: w_xi = lam/(1-lam*gamma), w_nu = (1-lam)/(1-lam*gamma) for n < k_max;
                        w_xi = 0, w_nu = 1 at n = k_max.
The p_H (min(Geom(1-lam*gamma), k_max)) and nu (TD(lam) truncated at k_max) these weights imply are
our derivation (docs/uhm.md, "Winsorized weights"), checked to 1e-12 in tests/test_uhm.py and
tests/test_uhm_tabular.py.

Arrays here are indexed by n - 1 (entry 0 is horizon 1). Host-side maths is float64 numpy; the
jitted agent turns the tables into constants.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.core.errors import require


def _check(lam, gamma, k_max):
  require(0.0 <= lam <= 1.0, "config.lam", f"must be in [0, 1], got {lam}")
  require(0.0 < gamma < 1.0, "config.discount", f"must be in (0, 1), got {gamma}")
  require(
    int(k_max) == k_max and k_max >= 1, "config.k_max", f"must be an integer >= 1, got {k_max}"
  )


def _winsorized_geometric(head: float, lam: float, gamma: float, k_max: int) -> np.ndarray:
  """``head * (lam*gamma)^{n-1}`` for n < k_max and the whole geometric tail
  ``(lam*gamma)^{k_max-1}`` at n = k_max (n = 1..k_max)."""
  _check(lam, gamma, k_max)
  lg = lam * gamma
  n = np.arange(1, k_max + 1, dtype=np.float64)
  out = head * lg ** (n - 1)
  out[-1] = lg ** (k_max - 1)
  return out


def winsorized_p_H(lam: float, gamma: float, k_max: int) -> np.ndarray:
  """p_H(n), n = 1..k_max: Geom(1 - lam*gamma) with the tail mass moved onto k_max."""
  return _winsorized_geometric(1.0 - lam * gamma, lam, gamma, k_max)


def winsorized_nu(lam: float, gamma: float, k_max: int) -> np.ndarray:
  """nu(k), k = 1..k_max: TD(lam) weights (1-lam)(lam*gamma)^{k-1}, full bootstrap at k_max."""
  return _winsorized_geometric(1.0 - lam, lam, gamma, k_max)


def xi_from_nu(nu: np.ndarray, gamma: float) -> np.ndarray:
  """xi(k) = gamma^{k-1} - sum_{kappa=0}^{k-1} gamma^kappa nu(k - kappa)  (Prop. C.1)."""
  nu = np.asarray(nu, np.float64)
  K = nu.shape[0]
  xi = np.empty(K)
  for k in range(1, K + 1):
    xi[k - 1] = gamma ** (k - 1) - sum(gamma**kap * nu[k - kap - 1] for kap in range(k))
  return xi


def truncated_lambda_tables(lam: float, gamma: float, k_max: int) -> tuple[np.ndarray, np.ndarray]:
  """(nu, xi) of TD(lam) truncated at every length j = 1..k_max, as k_max x k_max tables.

  Row j - 1 holds ``winsorized_nu(lam, gamma, j)`` and its ``xi_from_nu``, padded with zeros after
  k = j: the weights of a lambda-return that fully bootstraps at step j (a trajectory window cut
  short by the end of its trajectory). Row k_max - 1 is the untruncated-window case.
  """
  _check(lam, gamma, k_max)
  nu = np.zeros((k_max, k_max))
  xi = np.zeros((k_max, k_max))
  for j in range(1, k_max + 1):
    nu[j - 1, :j] = winsorized_nu(lam, gamma, j)
    xi[j - 1, :j] = xi_from_nu(nu[j - 1, :j], gamma)
  return nu, xi


def target_weights(nu: np.ndarray, xi: np.ndarray, p_H: np.ndarray):
  """One-sample weights w_xi = xi/p_H, w_nu = nu/p_H; p_H must cover the support of nu and xi."""
  nu, xi, p_H = (np.asarray(v, np.float64) for v in (nu, xi, p_H))
  bad = (p_H <= 0) & ((np.abs(nu) > 0) | (np.abs(xi) > 0))
  if bad.any():
    raise ValueError(f"p_H(n) = 0 where nu or xi is non-zero at n = {np.nonzero(bad)[0] + 1}")
  safe = np.where(p_H > 0, p_H, 1.0)
  return xi / safe, nu / safe


def winsorized_weights(lam: float, gamma: float, k_max: int):
  """Closed form (w_xi, w_nu) for n = 1..k_max (the paper's winsorized weights)."""
  _check(lam, gamma, k_max)
  w_xi = np.full(k_max, lam / (1.0 - lam * gamma))
  w_nu = np.full(k_max, (1.0 - lam) / (1.0 - lam * gamma))
  w_xi[-1], w_nu[-1] = 0.0, 1.0
  return w_xi, w_nu


def ghm_weights(lam: float, gamma: float):
  """Constant weights for an n-agnostic geometric model with discount lam*gamma (k_max -> inf).

  p_H = Geom(1 - lam*gamma), nu = TD(lam): w_xi = lam/(1-lam*gamma), w_nu = (1-lam)/(1-lam*gamma).
  lam = 1 is the pure gamma-model value (n ~ Geom(1-gamma), nu = 0, w_xi = 1/(1-gamma)).
  """
  _check(lam, gamma, 1)
  return lam / (1.0 - lam * gamma), (1.0 - lam) / (1.0 - lam * gamma)


def sample_geometric(key, shape, p_continue) -> jax.Array:
  """n ~ Geom(1 - p_continue) on {1, 2, ...}: P(n) = (1-p) p^{n-1} (int32)."""
  if p_continue <= 0.0:
    return jnp.ones(shape, jnp.int32)
  u = jax.random.uniform(key, shape, minval=jnp.finfo(jnp.float32).tiny, maxval=1.0)
  n = 1.0 + jnp.floor(jnp.log(u) / jnp.log(p_continue))
  return jnp.clip(n, 1, 2**30).astype(jnp.int32)


def sample_winsorized(key, shape, lam: float, gamma: float, k_max: int) -> jax.Array:
  """n = min(Geom(1 - lam*gamma), k_max) ~ winsorized_p_H (int32 in [1, k_max])."""
  _check(lam, gamma, k_max)
  return jnp.minimum(sample_geometric(key, shape, lam * gamma), k_max)
