"""Controller / corrector networks: log phi(t, x) in R^{D x N} over lattice sites.

`RopeSiT`: a SiT-style transformer over the L*L sites with 2-D RoPE plus a learned absolute
position embedding and adaLN-Zero time conditioning (the DASBS `ropesit`: hidden 32, 6 blocks,
4 heads, MLP ratio 4, qkv bias, LayerNorm eps 1e-6, RoPE theta 10). A small self-contained linen
block: the model is tiny and replicated, so it needs neither the LM's logical-axis sharding nor its
attention variants.
`Tabular*`: lookup tables over enumerated states (tiny lattices only) for exact end-to-end checks.
The head is zero-initialised so an untrained controller is the reference (phi = 1) and an untrained
corrector is zero (the DASBS `zero_init_corrector`). Entries n = x^d are forced to 0.
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np


def rope_2d(x_BxHxSxK, L: int, theta: float):
  """Rotary embedding over 2-D site positions: the first half of the head dim rotates with the row
  index, the second half with the column index."""
  K = x_BxHxSxK.shape[-1]
  k4 = K // 4
  if k4 == 0:
    return x_BxHxSxK
  freqs = 1.0 / (theta ** (np.arange(k4) / k4))
  r, c = np.divmod(np.arange(L * L), L)

  def rot(v, pos):  # v: ... x S x 2*k4
    ang = jnp.asarray(pos[:, None] * freqs[None, :], v.dtype)  # S x k4
    v1, v2 = v[..., :k4], v[..., k4 : 2 * k4]
    cos, sin = jnp.cos(ang), jnp.sin(ang)
    return jnp.concatenate([v1 * cos - v2 * sin, v1 * sin + v2 * cos], -1)

  a = rot(x_BxHxSxK[..., : 2 * k4], r)
  b = rot(x_BxHxSxK[..., 2 * k4 : 4 * k4], c)
  return jnp.concatenate([a, b, x_BxHxSxK[..., 4 * k4 :]], -1)


def timestep_embedding(t_B, dim: int, max_period: float = 10000.0):
  half = dim // 2
  freqs = jnp.exp(-math.log(max_period) * jnp.arange(half) / half)
  args = t_B[:, None] * 1000.0 * freqs[None]
  return jnp.concatenate([jnp.cos(args), jnp.sin(args)], -1)


def _modulate(x, shift, scale):
  return x * (1 + scale[:, None]) + shift[:, None]


class Block(nn.Module):
  hidden: int
  heads: int
  mlp_ratio: int
  L: int
  rope_theta: float
  use_time: bool
  dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, h_BxSxH, c_BxH):
    H, nh = self.hidden, self.heads
    if self.use_time:
      mod = nn.Dense(6 * H, kernel_init=nn.initializers.zeros, dtype=self.dtype)(nn.silu(c_BxH))
      sh1, sc1, g1, sh2, sc2, g2 = jnp.split(mod, 6, -1)
    else:
      z = jnp.zeros((h_BxSxH.shape[0], H), h_BxSxH.dtype)
      sh1 = sc1 = sh2 = sc2 = z
      g1 = g2 = jnp.ones_like(z)
    B, S, _ = h_BxSxH.shape
    a = _modulate(
      nn.LayerNorm(1e-6, use_scale=not self.use_time, use_bias=not self.use_time, dtype=self.dtype)(
        h_BxSxH
      ),
      sh1,
      sc1,
    )
    qkv = nn.Dense(3 * H, use_bias=True, dtype=self.dtype)(a).reshape(B, S, 3, nh, H // nh)
    q, k, v = (jnp.moveaxis(qkv[:, :, i], 1, 2) for i in range(3))  # B x nh x S x K
    q, k = rope_2d(q, self.L, self.rope_theta), rope_2d(k, self.L, self.rope_theta)
    w = jax.nn.softmax(jnp.einsum("bhsk,bhtk->bhst", q, k) / math.sqrt(H // nh), -1)
    o = jnp.moveaxis(jnp.einsum("bhst,bhtk->bhsk", w, v), 1, 2).reshape(B, S, H)
    h_BxSxH = h_BxSxH + g1[:, None] * nn.Dense(H, dtype=self.dtype)(o)
    m = _modulate(
      nn.LayerNorm(1e-6, use_scale=not self.use_time, use_bias=not self.use_time, dtype=self.dtype)(
        h_BxSxH
      ),
      sh2,
      sc2,
    )
    m = nn.Dense(H, dtype=self.dtype)(nn.gelu(nn.Dense(self.mlp_ratio * H, dtype=self.dtype)(m)))
    return h_BxSxH + g2[:, None] * m


class RopeSiT(nn.Module):
  """log phi(t, x): BxD ints (+ B times) -> BxDxN."""

  N: int
  L: int
  hidden: int = 32
  depth: int = 6
  heads: int = 4
  mlp_ratio: int = 4
  rope_theta: float = 10.0
  use_time: bool = True
  dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, x_BxD, t_B=None):
    B, D = x_BxD.shape
    h = nn.Embed(self.N, self.hidden, dtype=self.dtype)(x_BxD)
    h = h + self.param("pos", nn.initializers.normal(0.02), (D, self.hidden))
    c = None
    if self.use_time:
      c = timestep_embedding(t_B.astype(jnp.float32), self.hidden)
      c = nn.Dense(self.hidden)(nn.silu(nn.Dense(self.hidden)(c)))
    for _ in range(self.depth):
      h = Block(
        self.hidden, self.heads, self.mlp_ratio, self.L, self.rope_theta, self.use_time, self.dtype
      )(h, c)
    if self.use_time:
      sh, sc = jnp.split(
        nn.Dense(2 * self.hidden, kernel_init=nn.initializers.zeros)(nn.silu(c)), 2, -1
      )
      h = _modulate(nn.LayerNorm(1e-6, use_scale=False, use_bias=False)(h), sh, sc)
    else:
      h = nn.LayerNorm(1e-6)(h)
    out = nn.Dense(self.N, kernel_init=nn.initializers.zeros, dtype=jnp.float32)(h).astype(
      jnp.float32
    )
    return jnp.where(x_BxD[..., None] == jnp.arange(self.N), 0.0, out)


class TabularLogPhi(nn.Module):
  """Lookup table log phi[knot, state, d, n], linearly interpolated in t between `knots` (>= 2)
  knots on [0, 1]; `knots = 1` means no time input (the corrector)."""

  N: int
  D: int
  knots: int = 16

  @nn.compact
  def __call__(self, x_BxD, t_B=None):
    S = self.N**self.D
    table = self.param("table", nn.initializers.zeros, (self.knots, S, self.D, self.N))
    pw = jnp.asarray(self.N ** np.arange(self.D - 1, -1, -1), jnp.int32)
    idx = (x_BxD.astype(jnp.int32) * pw).sum(-1)
    if self.knots == 1:
      out = table[0, idx]
    else:
      u = jnp.clip(t_B, 0.0, 1.0) * (self.knots - 1)
      k0 = jnp.clip(jnp.floor(u).astype(jnp.int32), 0, self.knots - 2)
      w = (u - k0)[:, None, None]
      out = (1 - w) * table[k0, idx] + w * table[k0 + 1, idx]
    return jnp.where(x_BxD[..., None] == jnp.arange(self.N), 0.0, out)
