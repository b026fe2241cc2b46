"""Iterate-level checks of every `jaxlab.optim.goma.vi` method against small, independent NumPy
transcriptions of the published updates (float64, a few steps, relative error 1e-10).

Slope windows cannot tell a coefficient bug from the right method (FEG with b_k = 1/(k+2), FEG or
APV without the (1 - b_k) factor, EAG-C with a doubled step, APV with M = 2L^2 all keep a slope in
[-2.1, -1.8] on T1); the iterates themselves can. Each transcription is written from the paper's
equations (docs/goma.md, "Sources"), not from the library code: EAG-V's step uses the paper's
form of the recurrence, the library an algebraically equal one.

The operator is a random affine monotone F(z) = M z + c with a non-normal M (skew part plus a PSD
part), and L is passed explicitly as a value different from 1 so that a misplaced 1/L shows.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.optim.goma import vi

DIM = 6
STEPS = 7
RTOL = 1e-10


def _operator():
  rng = np.random.default_rng(0)
  a = rng.normal(size=(DIM, DIM))
  b = rng.normal(size=(DIM, DIM))
  m = (a - a.T) + 0.3 * b @ b.T  # monotone: sym part PSD; non-normal
  c = rng.normal(size=DIM)
  z0 = rng.normal(size=DIM)
  return m, c, z0, float(np.linalg.norm(m, 2))


M, C, Z0, LIP = _operator()


def F(z):
  return M @ z + C


# ------------------------------------------------------------------- NumPy transcriptions --------
# Each returns the iterates z_0..z_K (the update sequence, where the residual is recorded).


def np_gda(K, L, eta_c=0.1, r=0.0):
  zs = [Z0]
  for k in range(K):
    z = zs[-1]
    zs.append(z - eta_c / L / (k + 1) ** r * F(z))
  return zs


def np_eg(K, L, eta_c=0.5):
  zs, eta = [Z0], eta_c / L
  for _ in range(K):
    z = zs[-1]
    y = z - eta * F(z)
    zs.append(z - eta * F(y))
  return zs


def np_popov(K, L, eta_c=0.5):
  zs, eta, y_prev = [Z0], eta_c / L, Z0  # y_{-1} = z_0
  for _ in range(K):
    z = zs[-1]
    y = z - eta * F(y_prev)
    zs.append(z - eta * F(y))
    y_prev = y
  return zs


def np_dseg(K, L, form, gamma_c=0.8, eta_c=0.8, r_gamma=1 / 3, r_eta=2 / 3, b=1.0):
  """Hsieh et al. 2020: gamma_t = gamma/(t+b)^r_gamma (explore), eta_t = eta/(t+b)^r_eta."""
  zs, g_prev = [Z0], None
  for t in range(K):
    x = zs[-1]
    gamma = gamma_c / L / (t + b) ** r_gamma
    eta = eta_c / L / (t + b) ** r_eta
    if form == "eg":
      x_half = x - gamma * F(x)
      zs.append(x - eta * F(x_half))
    else:  # OG form of the DSEG code: X+ = X - eta g_t - gamma (g_t - g_{t-1}), g_{-1} := g_0
      g = F(x)
      g_prev = g if g_prev is None else g_prev
      zs.append(x - eta * g - gamma * (g - g_prev))
      g_prev = g
  return zs


def np_eag(K, L, variable):
  """Yoon & Ryu 2021 (arXiv 2102.07922): EAG-C alpha = 1/(8L); EAG-V alpha_0 = 0.618/L with
  alpha_{k+1} = alpha_k / (1 - alpha_k^2 L^2) (1 - (k+2)^2 / ((k+1)(k+3)) alpha_k^2 L^2)."""
  zs = [Z0]
  alpha = 0.618 / L if variable else 1.0 / (8.0 * L)
  for k in range(K):
    z = zs[-1]
    beta = 1.0 / (k + 2)
    half = z + beta * (Z0 - z) - alpha * F(z)
    zs.append(z + beta * (Z0 - z) - alpha * F(half))
    if variable:
      q = alpha**2 * L**2
      alpha = alpha / (1.0 - q) * (1.0 - (k + 2) ** 2 / ((k + 1) * (k + 3)) * q)
  return zs


def np_feg(K, L):
  """Lee & Kim 2021 (arXiv 2106.02326), monotone case: b_k = 1/(k+1), alpha = 1/L."""
  zs, alpha = [Z0], 1.0 / L
  for k in range(K):
    z = zs[-1]
    beta = 1.0 / (k + 1)
    half = z + beta * (Z0 - z) - (1.0 - beta) * alpha * F(z)
    zs.append(z + beta * (Z0 - z) - alpha * F(half))
  return zs


def np_anchored_popov(K, etas, gammas):
  """y_k = z_k + b_k (z_0 - z_k) - gamma_k F(y_{k-1}); z_{k+1} = z_k + b_k (z_0 - z_k)
  - eta_k F(y_k); b_k = 1/(k+2), y_{-1} = z_0. ``gammas(k, eta_k)``."""
  zs, y_prev = [Z0], Z0
  for k in range(K):
    z, beta, eta = zs[-1], 1.0 / (k + 2), etas[k]
    base = z + beta * (Z0 - z)
    y = base - gammas(k, eta) * F(y_prev)
    zs.append(base - eta * F(y))
    y_prev = y
  return zs


def apv_etas(K, L):
  """Tran-Dinh & Luo 2021 (arXiv 2110.08150): eta_0 = 1/(2 sqrt(3) L), M = 4 L^2,
  eta_{k+1} = (1 - b_k^2 - M eta_k^2) b_{k+1} eta_k / ((1 - M eta_k^2)(1 - b_k) b_k)."""
  big_m, etas = 4.0 * L**2, [1.0 / (2.0 * math.sqrt(3.0) * L)]
  for k in range(K):
    b, b1, e = 1.0 / (k + 2), 1.0 / (k + 3), etas[-1]
    etas.append((1 - b**2 - big_m * e**2) * b1 * e / ((1 - big_m * e**2) * (1 - b) * b))
  return etas


def np_apv(K, L):
  return np_anchored_popov(K, apv_etas(K, L), lambda k, eta: (1.0 - 1.0 / (k + 2)) * eta)


def np_goma(K, L):
  """Deterministic GOMA reconstruction = anchored Popov, constant eta = 0.4/L, gamma_k =
  (1 - b_k) eta."""
  return np_anchored_popov(K, [0.4 / L] * K, lambda k, eta: (1.0 - 1.0 / (k + 2)) * eta)


def np_goma_stochastic(K, L):
  """Two time scales: eta_k = 0.6/(L (k+1)^(2/3)) (update), gamma_k = 0.6/(L (k+1)^(1/3))."""
  etas = [0.6 / L / (k + 1) ** (2 / 3) for k in range(K)]
  return np_anchored_popov(K, etas, lambda k, eta: 0.6 / L / (k + 1) ** (1 / 3))


CASES = {
  "gda": ("gda", {}, lambda K, L: np_gda(K, L)),
  "gda_decaying": ("gda", {"r": 0.5}, lambda K, L: np_gda(K, L, r=0.5)),
  "eg": ("eg", {}, np_eg),
  "popov": ("popov", {}, np_popov),
  "dseg_eg": ("dseg", {}, lambda K, L: np_dseg(K, L, "eg")),
  "dseg_og": ("dseg", {"form": "og"}, lambda K, L: np_dseg(K, L, "og")),
  "eag_c": ("eag_c", {}, lambda K, L: np_eag(K, L, variable=False)),
  "eag_v": ("eag_v", {}, lambda K, L: np_eag(K, L, variable=True)),
  "feg": ("feg", {}, np_feg),
  "apv": ("apv", {}, np_apv),
  "goma": ("goma", {}, np_goma),
  "goma_stochastic": ("goma_stochastic", {}, np_goma_stochastic),
}


def test_every_method_has_a_transcription():
  assert {m for m, _, _ in CASES.values()} == set(vi.METHODS)


@pytest.mark.parametrize("case", sorted(CASES))
def test_iterates_match_the_published_update(case):
  """||F(z_k)||^2 for k = 0..K and z_K agree with the transcription to 1e-10 (float64); the
  default hparams are used (only L is given), so a wrong default constant fails too."""
  method, hp, reference = CASES[case]
  zs = reference(STEPS, LIP)
  with jax.enable_x64(True):
    op = lambda z: jnp.asarray(M) @ z + jnp.asarray(C)
    tr = vi.run(method, op, jnp.asarray(Z0, jnp.float64), STEPS, L=LIP, **hp)
    res = np.asarray(tr.residual_sq)
    z_last = np.asarray(tr.z)
  assert res.dtype == np.float64
  want = np.array([F(z) @ F(z) for z in zs])
  np.testing.assert_allclose(res, want, rtol=RTOL, atol=0)
  np.testing.assert_allclose(z_last, zs[-1], rtol=RTOL, atol=RTOL * np.abs(zs[-1]).max())


def test_the_transcriptions_tell_the_listed_coefficient_bugs_apart():
  """The comparison can fail: each coefficient bug named in the tests' docstring moves the
  iterates far more than 1e-10 (here the bug is applied to the transcription)."""

  def feg_variant(beta_offset, explore_factor):
    zs, alpha = [Z0], 1.0 / LIP
    for k in range(STEPS):
      z, beta = zs[-1], 1.0 / (k + beta_offset)
      half = z + beta * (Z0 - z) - (explore_factor(beta)) * alpha * F(z)
      zs.append(z + beta * (Z0 - z) - alpha * F(half))
    return zs

  def apv_m2():
    big_m, etas = 2.0 * LIP**2, [1.0 / (2.0 * math.sqrt(3.0) * LIP)]
    for k in range(STEPS):
      b, b1, e = 1.0 / (k + 2), 1.0 / (k + 3), etas[-1]
      etas.append((1 - b**2 - big_m * e**2) * b1 * e / ((1 - big_m * e**2) * (1 - b) * b))
    return np_anchored_popov(STEPS, etas, lambda k, eta: (1.0 - 1.0 / (k + 2)) * eta)

  right = {"feg": np_feg(STEPS, LIP), "apv": np_apv(STEPS, LIP), "eag_c": np_eag(STEPS, LIP, False)}
  bugs = {
    "feg": [feg_variant(2, lambda b: 1 - b), feg_variant(1, lambda b: 1.0)],
    "apv": [np_anchored_popov(STEPS, apv_etas(STEPS, LIP), lambda k, eta: eta), apv_m2()],
    "eag_c": [np_eag(STEPS, LIP / 2, False)],  # alpha = 2/(8L)
  }
  for name, variants in bugs.items():
    for zs in variants:
      assert np.abs(zs[-1] - right[name][-1]).max() > 1e-4 * np.abs(right[name][-1]).max(), name
