"""Monotone test problems for ``jaxlab.optim.goma.vi`` (all linear: F(z) = M (z - z_shift)).

Every problem is a ``flax.struct.PyTreeNode`` that is callable (``problem(z) -> F(z)``), so it can
be passed to ``vi.run`` directly, batched with ``jax.vmap`` and passed through ``jit`` without
recompiling. Each exposes ``lipschitz`` (= ||M||_2), ``project_solution(z)`` (the nearest point of
the solution set shift + ker M, which Halpern-anchored methods converge to from anchor z) and
``distance_to_solution(z)``.

* ``bilinear``: min_x max_y x^T A y, A = U diag(s) V^T with a chosen spectrum, optional rank
  deficiency. ``ill_conditioned_bilinear`` is problem T1 of docs/goma.md (n = 40, s log-spaced in
  [1e-3, 1]); ``dseg_bilinear`` is the bilinear setup of DSEG (Hsieh et al. 2020,
  arXiv 2003.10162; d = 50, s ~ U[1, 2]), problem T2.
* ``quadratic_game``: 1/2 dx^T A dx + dx^T C dy - 1/2 dy^T B dy with PSD A, B scaled by omega.
* ``rotation``: F(z) = (z_2, -z_1), where plain GDA spirals out.
* ``stochastic``: unbiased oracles with additive Gaussian noise (bounded variance) and/or a
  multiplicative Gaussian perturbation of the game matrix (variance grows with ||z - z*||^2,
  i.e. unbounded), as in the DSEG code.

Bad arguments raise :class:`jaxlab.core.errors.ConfigError` naming the argument.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import struct

from jaxlab.core.errors import check_choice, require


class LinearGame(struct.PyTreeNode):
  """F(z) = M (z - shift) with M monotone (M + M^T PSD). ``n_x`` > 0 marks a bilinear game whose
  first n_x coordinates are the min player (multiplicative noise then keeps the game structure)."""

  M: jax.Array
  shift: jax.Array
  n_x: int = struct.field(pytree_node=False, default=0)

  def __call__(self, z):
    return self.M @ (z - self.shift)

  def exact(self, z):
    return self(z)

  @property
  def dim(self) -> int:
    return self.M.shape[-1]

  @property
  def lipschitz(self):
    return jnp.linalg.norm(self.M, 2)

  def project_solution(self, z):
    d = z - self.shift
    return self.shift + d - jnp.linalg.pinv(self.M) @ (self.M @ d)

  def distance_to_solution(self, z):
    return jnp.linalg.norm(z - self.project_solution(z))


class StochasticOracle(struct.PyTreeNode):
  """g(z, key) = (M + sigma_mult E)(z - shift) + sigma xi, E and xi standard Gaussian (unbiased).

  For a bilinear game E perturbs A only: the noisy matrix is [[0, E], [-E^T, 0]]. Only E d is
  ever used, so it is sampled exactly in distribution with O(dim) normals (see
  ``_matrix_noise_times``) instead of forming E."""

  game: LinearGame
  sigma: jax.Array
  sigma_mult: jax.Array
  multiplicative: bool = struct.field(pytree_node=False, default=False)

  def __call__(self, z, key):
    k_add, k_mult = jax.random.split(key)
    d = z - self.game.shift
    g = self.game.M @ d + self.sigma * jax.random.normal(k_add, z.shape, z.dtype)
    if self.multiplicative:
      g = g + self.sigma_mult * _matrix_noise_times(k_mult, d, self.game.n_x)
    return g

  def exact(self, z):
    return self.game(z)

  @property
  def lipschitz(self):
    return self.game.lipschitz


def _safe_unit(v):
  n = jnp.linalg.norm(v)
  return jnp.where(n > 0, v / jnp.where(n > 0, n, 1.0), 0.0), n


def _matrix_noise_times(key, d, n_x):
  """A sample of E d for E with i.i.d. N(0, 1) entries, without forming E.

  Full E: E d ~ N(0, ||d||^2 I). Bilinear ([[0, E], [-E^T, 0]] d = (E d_y, -E^T d_x)): with unit
  p = d_x/|d_x|, q = d_y/|d_y|, E q and E^T p share only a = p^T E q ~ N(0, 1); the rest,
  (I - pp^T) E q and (I - qq^T) E^T p, are independent N(0, I - pp^T), N(0, I - qq^T). So
  E q = a p + (I - pp^T) xi, E^T p = a q + (I - qq^T) zeta is exact in law (and still exact
  when d_x or d_y is 0, where p or q is the zero vector)."""
  if not n_x:
    return jnp.linalg.norm(d) * jax.random.normal(key, d.shape, d.dtype)
  k_a, k_u, k_v = jax.random.split(key, 3)
  p, nx = _safe_unit(d[:n_x])
  q, ny = _safe_unit(d[n_x:])
  a = jax.random.normal(k_a, (), d.dtype)
  xi = jax.random.normal(k_u, p.shape, d.dtype)
  zeta = jax.random.normal(k_v, q.shape, d.dtype)
  e_q = a * p + xi - p * jnp.vdot(p, xi)
  et_p = a * q + zeta - q * jnp.vdot(q, zeta)
  return jnp.concatenate([ny * e_q, -nx * et_p])


def _is_number(x) -> bool:
  return isinstance(x, (int, float))


def _orthonormal(key, n, r):
  q, _ = jnp.linalg.qr(jax.random.normal(key, (n, r)))
  return q


def bilinear_from_singular_values(key, s, n=None, m=None, shift=None) -> LinearGame:
  """x^T A y with A = U diag(s) V^T (U, V Haar-like), z = (x, y) flat of size n + m."""
  s = jnp.asarray(s, jnp.float32)
  r = s.shape[0]
  n = r if n is None else n
  m = n if m is None else m
  require(r <= min(n, m), "s", f"{r} singular values do not fit an {n}x{m} matrix")
  ku, kv = jax.random.split(key)
  a = _orthonormal(ku, n, r) @ jnp.diag(s) @ _orthonormal(kv, m, r).T
  mat = jnp.block([[jnp.zeros((n, n)), a], [-a.T, jnp.zeros((m, m))]])
  shift = jnp.zeros(n + m) if shift is None else jnp.asarray(shift, jnp.float32)
  return LinearGame(M=mat, shift=shift, n_x=n)


def bilinear(
  key,
  n: int,
  smin: float = 1e-3,
  smax: float = 1.0,
  spectrum: str = "log",
  rank: int | None = None,
  shift=None,
) -> LinearGame:
  """n x n bilinear game; ``spectrum`` "log" (log-spaced in [smin, smax]) or "uniform"
  (i.i.d. U[smin, smax]); ``rank`` < n zeroes the smallest singular values (a solution set of
  dimension 2 (n - rank)); ``shift`` moves the solution set off the origin."""
  check_choice("spectrum", spectrum, ("log", "uniform"))
  require(isinstance(n, int) and n >= 1, "n", f"must be an int >= 1, got {n!r}")
  if _is_number(smin) and _is_number(smax):  # traced values (vmapped spectra) are not checked
    ok = math.isfinite(smin) and math.isfinite(smax) and 0 <= smin <= smax
    require(ok, "smax", f"need finite 0 <= smin <= smax, got smin={smin}, smax={smax}")
  k_s, k_uv = jax.random.split(key)
  if spectrum == "log":
    s = jnp.geomspace(smax, smin, n)
  else:
    s = jnp.sort(jax.random.uniform(k_s, (n,), minval=smin, maxval=smax))[::-1]
  if rank is not None:
    require(0 <= rank <= n, "rank", f"must be in [0, {n}], got {rank}")
    s = jnp.where(jnp.arange(n) < rank, s, 0.0)
  return bilinear_from_singular_values(k_uv, s, n, n, shift)


def ill_conditioned_bilinear(
  key, n: int = 40, smin: float = 1e-3, smax: float = 1.0, rank: int | None = None
) -> LinearGame:
  """Problem T1 of docs/goma.md: s log-spaced in [1e-3, 1] (L = 1, z* = 0)."""
  return bilinear(key, n, smin, smax, "log", rank)


def dseg_bilinear(key, d: int = 50) -> LinearGame:
  """Problem T2 of docs/goma.md, the DSEG bilinear game: s ~ U[1, 2] (mu = 1, L <= 2)."""
  return bilinear(key, d, 1.0, 2.0, "uniform")


def quadratic_game(key, n: int, m: int | None = None, omega: float = 0.5) -> LinearGame:
  """1/2 (x-x*)^T A (x-x*) + (x-x*)^T C (y-y*) - 1/2 (y-y*)^T B (y-y*), A, B PSD with
  ||A|| = ||B|| = omega, C Gaussian / sqrt(n + m); solution (x*, y*) ~ N(0, I)."""
  m = n if m is None else m
  require(math.isfinite(omega) and omega >= 0, "omega", f"must be finite and >= 0, got {omega}")
  ka, kb, kc, ks = jax.random.split(key, 4)

  def psd(k, d):
    g = jax.random.normal(k, (d, d))
    p = g @ g.T
    return omega * p / jnp.linalg.norm(p, 2)

  c = jax.random.normal(kc, (n, m)) / jnp.sqrt(n + m)
  mat = jnp.block([[psd(ka, n), c], [-c.T, psd(kb, m)]])
  return LinearGame(M=mat, shift=jax.random.normal(ks, (n + m,)), n_x=0)


def rotation() -> LinearGame:
  """F(z) = (z_2, -z_1): the bilinear game x*y, L = 1, solution 0."""
  return LinearGame(M=jnp.array([[0.0, 1.0], [-1.0, 0.0]]), shift=jnp.zeros(2), n_x=1)


def stochastic(game: LinearGame, sigma: float = 0.0, sigma_mult: float = 0.0) -> StochasticOracle:
  """Additive N(0, sigma^2 I) noise plus (if sigma_mult > 0) a multiplicative Gaussian
  perturbation of the game matrix, whose variance grows with ||z - z*||^2 (unbounded)."""
  for name, v in (("sigma", sigma), ("sigma_mult", sigma_mult)):
    require(math.isfinite(v) and v >= 0, name, f"must be finite and >= 0, got {v}")
  return StochasticOracle(
    game=game,
    sigma=jnp.float32(sigma),
    sigma_mult=jnp.float32(sigma_mult),
    multiplicative=bool(sigma_mult > 0),
  )


def sample_start(key, game: LinearGame, scale: float = 1.0):
  """z0 ~ N(0, scale^2 I) (the start of problem T1)."""
  return scale * jax.random.normal(key, (game.dim,))
