"""Nearest-neighbour patch tokenizer (Dedieu et al. 2025, arXiv 2502.01591; as in ITC's code).

A 63x63 RGB frame is cut into a 9x9 grid of 7x7 patches (81 tokens, row-major). The codebook is
a growing list of patches: a patch is ADDED when its squared L2 distance to every existing code
exceeds ``threshold`` (0.75 on pixels in [0, 1]) and the codebook has room (at most 4096 codes).
Encoding is the nearest code; decoding is a lookup. Codes are never changed once inserted, so a
frame all of whose patches were inserted decodes exactly.

Growing runs under jit: every patch's distance to the codebook is computed in parallel, at most
``max_candidates`` patches farther than the threshold (the farthest first) are then inserted one
by one with ``lax.scan`` (each rechecked against the codes inserted before it). Patches left out
by the cap are picked up by the next call.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import struct

from jaxlab.core.errors import require
from jaxlab.rl.itc import fields

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class TokenizerConfig:
  """The patch tokenizer (values: ``jaxlab.rl.itc.get_config().tokenizer``)."""

  patch: int  # patch side in pixels
  grid: tuple[int, int]  # patches per (column, row)
  channels: int  # colour channels of a frame
  codebook_size: int  # maximum number of codes
  threshold: float  # squared L2 distance beyond which a patch becomes a new code
  max_candidates: int  # new codes inserted per `grow` call at most

  @classmethod
  def from_config(cls, config, **overrides) -> TokenizerConfig:
    """From ``config.tokenizer`` (``jaxlab.rl.itc.get_config()``) and ``overrides``."""
    return fields.from_config(cls, config, **overrides)

  @property
  def num_tokens(self) -> int:
    return self.grid[0] * self.grid[1]

  @property
  def patch_dim(self) -> int:
    return self.patch * self.patch * self.channels

  def validate(self, prefix: str = "config.tokenizer") -> TokenizerConfig:
    for name in ("patch", "channels", "codebook_size", "max_candidates"):
      require(getattr(self, name) >= 1, f"{prefix}.{name}", "must be >= 1")
    require(self.threshold > 0, f"{prefix}.threshold", f"must be > 0, got {self.threshold}")
    return self


@struct.dataclass
class Codebook:
  codes: Array  # [codebook_size, patch_dim] float32 (rows >= size are unused)
  size: Array  # int32 scalar: codes in use


def init(cfg: TokenizerConfig) -> Codebook:
  return Codebook(jnp.zeros((cfg.codebook_size, cfg.patch_dim), jnp.float32), jnp.int32(0))


def patchify(frames: Array, cfg: TokenizerConfig) -> Array:
  """``[..., H, W, C]`` -> ``[..., rows * cols, patch * patch * C]`` (row-major patches)."""
  rows, cols, p = cfg.grid[0], cfg.grid[1], cfg.patch
  lead = frames.shape[:-3]
  x = frames.reshape(lead + (rows, p, cols, p, frames.shape[-1]))
  x = jnp.moveaxis(x, -4, -3)  # [..., rows, cols, p, p, C]
  return x.reshape(lead + (rows * cols, -1)).astype(jnp.float32)


def unpatchify(patches: Array, cfg: TokenizerConfig) -> Array:
  rows, cols, p = cfg.grid[0], cfg.grid[1], cfg.patch
  lead = patches.shape[:-2]
  x = patches.reshape(lead + (rows, cols, p, p, cfg.channels))
  x = jnp.moveaxis(x, -3, -4)  # [..., rows, p, cols, p, C]
  return x.reshape(lead + (rows * p, cols * p, cfg.channels))


def sq_distances(book: Codebook, patches: Array) -> Array:
  """``[..., K]`` squared distances to every code; +inf for unused rows."""
  cross = patches @ book.codes.T
  d = jnp.sum(patches**2, -1, keepdims=True) - 2 * cross + jnp.sum(book.codes**2, -1)
  valid = jnp.arange(book.codes.shape[0]) < book.size
  return jnp.where(valid, jnp.maximum(d, 0.0), jnp.inf)


def encode(book: Codebook, frames: Array, cfg: TokenizerConfig) -> Array:
  """Frames ``[..., H, W, C]`` -> tokens ``[..., rows * cols]`` (nearest code)."""
  return jnp.argmin(sq_distances(book, patchify(frames, cfg)), axis=-1).astype(jnp.int32)


def decode(book: Codebook, tokens: Array, cfg: TokenizerConfig) -> Array:
  """Tokens ``[..., rows * cols]`` -> frames ``[..., H, W, C]`` (codebook lookup)."""
  return unpatchify(book.codes[tokens], cfg)


def grow(book: Codebook, frames: Array, cfg: TokenizerConfig) -> Codebook:
  """Inserts the patches of ``frames`` that are farther than the threshold from every code."""
  patches = patchify(frames, cfg).reshape(-1, cfg.patch_dim)
  far = jnp.min(sq_distances(book, patches), axis=-1)
  k = min(cfg.max_candidates, patches.shape[0])
  score = jnp.where(far > cfg.threshold, jnp.minimum(far, 1e30), -1.0)
  _, idx = jax.lax.top_k(score, k)

  def insert(book, i):
    x = patches[i]
    d = jnp.min(
      jnp.sum((book.codes - x) ** 2, -1)
      + jnp.where(jnp.arange(book.codes.shape[0]) < book.size, 0.0, jnp.inf)
    )
    ok = (d > cfg.threshold) & (book.size < cfg.codebook_size)
    slot = jnp.minimum(book.size, cfg.codebook_size - 1)
    codes = jnp.where(ok, book.codes.at[slot].set(x), book.codes)
    return Codebook(codes, book.size + ok.astype(jnp.int32)), None

  book, _ = jax.lax.scan(insert, book, idx)
  return book
