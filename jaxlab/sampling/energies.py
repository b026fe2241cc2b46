"""Lattice targets nu(x) ∝ exp(-beta E(x)) on {0..N-1}^D, D = L*L, periodic boundaries.

States are integer arrays x_BxD (site d = row * L + col). Bonds are counted once, via the right and
down neighbours (as `torch.roll` in the DASBS code), so L >= 3 is required: at L = 2 the roll-based
Hamiltonian double-counts every bond.

The discrete score S(x)_{d,n} = log nu(x^{d<-n}) / nu(x) (shape BxDxN, zero at n = x^d) is the
terminal "adjoint" of Discrete ASBS.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp


def _grid(x_BxD: jax.Array, L: int) -> jax.Array:
  return x_BxD.reshape(x_BxD.shape[:-1] + (L, L))


def _nbr_sum(a_BxLxL: jax.Array) -> jax.Array:
  """Sum over the 4 periodic neighbours of every site."""
  return (
    jnp.roll(a_BxLxL, 1, -1)
    + jnp.roll(a_BxLxL, -1, -1)
    + jnp.roll(a_BxLxL, 1, -2)
    + jnp.roll(a_BxLxL, -1, -2)
  )


@dataclasses.dataclass(frozen=True)
class Lattice:
  """A periodic L x L Ising (N = 2) or q-state Potts (N = q) target at inverse temperature beta.

  Ising: spins s = 2x - 1, E = -J sum_<ij> s_i s_j - h sum_i s_i.
  Potts: E = -J sum_<ij> 1[x_i = x_j].
  Hashable (usable as a static jit argument).
  """

  kind: str  # "ising" | "potts"
  L: int
  beta: float
  J: float = 1.0
  h: float = 0.0  # Ising field (must be 0 for Potts)
  q: int = 4  # Potts colours (ignored for Ising)

  def __post_init__(self):
    if self.kind not in ("ising", "potts"):
      raise ValueError(f"target kind must be 'ising' or 'potts', got {self.kind!r}")
    if self.L < 3:
      raise ValueError(f"L must be >= 3 (roll-based bonds double-count at L = 2), got L={self.L}")
    if self.kind == "potts" and self.h != 0.0:
      raise ValueError("h (field) is only supported for kind='ising'")
    if self.kind == "potts" and self.q < 2:
      raise ValueError(f"Potts q must be >= 2, got {self.q}")

  @property
  def N(self) -> int:
    return 2 if self.kind == "ising" else self.q

  @property
  def D(self) -> int:
    return self.L * self.L

  def energy(self, x_BxD: jax.Array) -> jax.Array:
    g = _grid(x_BxD, self.L)
    if self.kind == "ising":
      s = (2 * g - 1).astype(jnp.float32)
      bonds = s * jnp.roll(s, -1, -1) + s * jnp.roll(s, -1, -2)
      return -self.J * bonds.sum((-1, -2)) - self.h * s.sum((-1, -2))
    same = (g == jnp.roll(g, -1, -1)).astype(jnp.float32) + (g == jnp.roll(g, -1, -2))
    return -self.J * same.sum((-1, -2))

  def log_prob_unnorm(self, x_BxD: jax.Array) -> jax.Array:
    return -self.beta * self.energy(x_BxD)

  def score(self, x_BxD: jax.Array) -> jax.Array:
    """S(x)_{d,n} = log nu(x^{d<-n}) / nu(x), shape BxDxN (exactly 0 at n = x^d)."""
    g = _grid(x_BxD, self.L)
    lead = x_BxD.shape[:-1]
    if self.kind == "ising":
      s = (2 * g - 1).astype(jnp.float32)
      field = (self.J * _nbr_sum(s) + self.h).reshape(lead + (self.D, 1))
      ns = jnp.array([-1.0, 1.0])
      sd = s.reshape(lead + (self.D, 1))
      return self.beta * (ns - sd) * field
    oh = jax.nn.one_hot(g, self.q)  # ...xLxLxq
    cnt = (
      jnp.roll(oh, 1, -2) + jnp.roll(oh, -1, -2) + jnp.roll(oh, 1, -3) + jnp.roll(oh, -1, -3)
    ).reshape(lead + (self.D, self.q))
    same_now = jnp.take_along_axis(cnt, x_BxD[..., None], axis=-1)  # neighbours equal to s_d
    return self.beta * self.J * (cnt - same_now)

  def magnetisation(self, x_BxD: jax.Array) -> jax.Array:
    """Ising: mean spin per sample."""
    return (2 * x_BxD - 1).astype(jnp.float32).mean(-1)

  def majority_fraction(self, x_BxD: jax.Array) -> jax.Array:
    """Fraction of sites holding the most frequent value, per sample."""
    return jax.nn.one_hot(x_BxD, self.N).mean(-2).max(-1)


def brute_force_score(log_prob_fn, x_BxD: jax.Array, N: int) -> jax.Array:
  """S(x)_{d,n} by evaluating log nu at every single-site change (for tests and generic targets)."""
  D = x_BxD.shape[-1]
  lp = log_prob_fn(x_BxD)

  def one(d, n):
    return log_prob_fn(x_BxD.at[..., d].set(n)) - lp

  out = jax.vmap(lambda d: jax.vmap(lambda n: one(d, n))(jnp.arange(N)))(jnp.arange(D))  # DxNx...
  return jnp.moveaxis(out, (0, 1), (-2, -1))
