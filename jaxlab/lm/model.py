"""Decoder-only transformer (RMSNorm, RoPE, SwiGLU, GQA) in flax linen, sharded by logical names.

Parameters carry logical axis names (``nn.with_logical_partitioning``) that
`jaxlab.core.sharding.DEFAULT_RULES` maps to the mesh (embed->fsdp, heads/mlp/vocab->tensor), and
activations are constrained to (batch->data+fsdp, seq->context). One mesh config therefore gives
data, FSDP, tensor and context parallelism; the attention implementation is a config string
(`jaxlab.lm.attention.IMPLS`). KV heads that the tensor axis does not divide are replicated in the
parameters and repeated in the computation (as MaxText does), so any GQA ratio runs.

Layers are a ``nn.scan`` over one block (``scan_layers``; parameters stacked on a ``layers`` axis),
so compile time does not grow with depth; ``remat`` picks a rematerialisation policy per block.

Options for token world models (all off in `jaxlab.lm.config.get_config`; off, every output is
bit-identical to the plain LM):

* ``block_size = k >= 1``: a BLOCK-CAUSAL mask. Tokens are grouped in consecutive blocks of ``k``
  (one frame's tokens plus its per-step extra tokens, e.g. the action) and a token attends to
  every token of its own and earlier blocks. It is the kernels' ``pos_q >= pos_k`` mask applied
  to block indices ``pos // k``, so the blockwise kernel needs no extra mask input.
* ``rope_mode="spatiotemporal"`` with ``frame_shape=(rows, cols)``: rotary dimensions split
  between the frame's time index and the token's (row, col) in the frame (`st_positions`,
  `rotate`): of a head's ``D`` dims, ``g = 2 * (D // 6)`` rotate by the row, the next ``g`` by the
  column and the first ``D - 2g`` by the time, each group in the half-split convention of `rope`
  with its own frequency ladder ``theta ** (-2i / group)``. This split is a reconstruction (the
  world-model papers that use 3-axis RoPE do not publish theirs).
* ``dropout``: residual dropout after attention and MLP, active only with ``train=True``.

The world-model options need ``attention="dense"`` (context-parallel kernels would need the
block index and the RoPE position carried separately); other settings raise `ConfigError`.
"""

from __future__ import annotations

import dataclasses
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from jaxlab.core import sharding as shd
from jaxlab.core.errors import ConfigError, check_choice, require
from jaxlab.lm import attention as attn_lib

_POSITIVE = ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "head_dim", "mlp_dim")
DTYPES = ("float32", "bfloat16")
ROPE_MODES = ("1d", "spatiotemporal")
# jax.checkpoint policies per block: what the backward pass may keep instead of recomputing.
REMAT = {
  "none": None,
  "full": jax.checkpoint_policies.nothing_saveable,
  "dots": jax.checkpoint_policies.checkpoint_dots,
  "dots_no_batch": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}


@dataclasses.dataclass(frozen=True)
class LMConfig:
  """Transformer hyper-parameters; invalid values raise `ConfigError` at construction.

  No defaults here: they are `jaxlab.lm.config.get_config` (each field's meaning is commented
  there), and ``LMConfig.from_config(config, **overrides)`` builds one from such a config.
  """

  vocab_size: int
  d_model: int
  n_layers: int
  n_heads: int
  n_kv_heads: int  # GQA: must divide n_heads
  head_dim: int
  mlp_dim: int  # SwiGLU hidden size
  rope_theta: float
  dtype: str  # compute dtype (params are float32)
  attention: str  # one of attention.IMPLS
  upipe_chunks: int  # 0: heads per device / context (one head per device per stage)
  load_balance: bool  # zigzag token layout for causal ring attention
  remat: str  # one of REMAT: the jax.checkpoint policy of each block
  tie_embeddings: bool
  scan_layers: bool  # nn.scan over blocks: compile time flat in depth
  attention_block: int  # query/key block of the blockwise attention kernel
  # World-model options (module docstring); get_config's values leave the LM unchanged.
  block_size: int  # 0: causal per token; k: block-causal over blocks of k tokens
  rope_mode: str  # one of ROPE_MODES
  frame_shape: tuple[int, int]  # (rows, cols) of a frame for spatio-temporal RoPE
  dropout: float  # residual dropout (train=True only)

  @classmethod
  def from_config(cls, config, **overrides) -> LMConfig:
    """The model fields of ``config`` (a `jaxlab.lm.config.get_config` ConfigDict), ``overrides``
    replacing some: ``LMConfig.from_config(get_config(), d_model=32)``."""
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(overrides) - set(names))
    if unknown:
      raise TypeError(f"LMConfig has no field(s) {', '.join(unknown)}")
    kw = {n: overrides[n] if n in overrides else config[n] for n in names}
    return cls(**{**kw, "frame_shape": tuple(kw["frame_shape"])})

  def __post_init__(self):
    self.validate()

  def validate(self, prefix: str = "config") -> LMConfig:
    """Raises `ConfigError` naming the field as ``<prefix>.<field>``."""
    name = lambda f: f"{prefix}.{f}" if prefix else f
    check_choice(name("attention"), self.attention, attn_lib.IMPLS)
    check_choice(name("dtype"), self.dtype, DTYPES)
    check_choice(name("remat"), self.remat, tuple(REMAT))
    require(self.attention_block >= 1, name("attention_block"), "must be >= 1")
    for f in _POSITIVE:
      require(getattr(self, f) >= 1, name(f), f"must be >= 1, got {getattr(self, f)}")
    require(
      self.n_heads % self.n_kv_heads == 0,
      name("n_kv_heads"),
      f"{self.n_kv_heads} must divide n_heads={self.n_heads}",
    )
    require(self.head_dim % 2 == 0, name("head_dim"), f"must be even (RoPE), got {self.head_dim}")
    require(self.upipe_chunks >= 0, name("upipe_chunks"), f"must be >= 0, got {self.upipe_chunks}")
    require(
      math.isfinite(self.rope_theta) and self.rope_theta > 0,
      name("rope_theta"),
      f"must be a finite number > 0, got {self.rope_theta}",
    )
    self._validate_world_model_options(name)
    return self

  def _validate_world_model_options(self, name) -> None:
    check_choice(name("rope_mode"), self.rope_mode, ROPE_MODES)
    require(
      len(self.frame_shape) == 2,
      name("frame_shape"),
      f"must be (rows, cols), got {self.frame_shape}",
    )
    require(self.block_size >= 0, name("block_size"), f"must be >= 0, got {self.block_size}")
    require(
      math.isfinite(self.dropout) and 0 <= self.dropout < 1,
      name("dropout"),
      f"must be in [0, 1), got {self.dropout}",
    )
    if self.block_size or self.rope_mode != "1d":
      require(
        self.attention == "dense",
        name("attention"),
        f"block_size / rope_mode={self.rope_mode!r} need attention='dense' (the "
        "context-parallel kernels derive the mask from the RoPE positions)",
      )
    if self.rope_mode != "spatiotemporal":
      return
    rows, cols = self.frame_shape
    require(rows >= 1 and cols >= 1, name("frame_shape"), f"must be >= 1, got {self.frame_shape}")
    require(
      self.block_size >= rows * cols,
      name("block_size"),
      f"{self.block_size} must hold a frame of {rows} x {cols} tokens (spatio-temporal RoPE)",
    )
    require(
      self.head_dim >= 6,
      name("head_dim"),
      f"must be >= 6 for spatio-temporal RoPE, got {self.head_dim}",
    )

  def check_mesh(self, mesh: Mesh | None, seq_len: int, prefix: str = "config") -> None:
    """Raises `ConfigError` when this model and ``seq_len`` cannot run on ``mesh``."""
    name = lambda f: f"{prefix}.{f}" if prefix else f
    require(seq_len >= 1, name("seq_len"), f"must be >= 1, got {seq_len}")
    if mesh is None:
      return
    size = lambda axis: mesh.shape.get(axis, 1)
    cp, tp, fsdp = size("context"), size("tensor"), size("fsdp")
    for f in ("mlp_dim", "vocab_size"):
      v = getattr(self, f)
      require(v % tp == 0, name(f), f"{v} is not divisible by the mesh's tensor axis ({tp})")
    require(
      self.d_model % fsdp == 0,
      name("d_model"),
      f"{self.d_model} is not divisible by the mesh's fsdp axis ({fsdp})",
    )
    try:
      attn_lib.check_heads(self.attention, self.n_heads, self.n_kv_heads, cp, tp, self.upipe_chunks)
    except ConfigError as e:
      raise ConfigError(name(e.field), e.message) from None
    if cp <= 1:
      return
    require(
      self.attention != "dense",
      name("attention"),
      "the mesh has a context axis; pick a context-parallel attention: "
      + ", ".join(i for i in attn_lib.IMPLS if i != "dense"),
    )
    zigzag = _uses_zigzag(self, mesh)
    blocks = 2 * cp if zigzag else cp
    why = f"2 x context={cp} (zigzag layout)" if zigzag else f"context={cp}"
    require(seq_len % blocks == 0, name("seq_len"), f"{seq_len} must be divisible by {why}")


def param_count(params) -> int:
  return int(sum(np.prod(x.shape) for x in jax.tree.leaves(nn.unbox(params))))


def _init(names, init=nn.initializers.lecun_normal()):
  return nn.with_logical_partitioning(init, names)


class RMSNorm(nn.Module):
  eps: float = 1e-6

  @nn.compact
  def __call__(self, x_BxLxD):
    scale = self.param("scale", _init(("embed",), nn.initializers.ones), (x_BxLxD.shape[-1],))
    x = x_BxLxD.astype(jnp.float32)
    x = x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + self.eps)
    return (x * scale).astype(x_BxLxD.dtype)


def rope(x_BxLxHxD, pos_BxL, theta: float):
  """Rotary embedding (half-split convention) at explicit positions."""
  d = x_BxLxHxD.shape[-1]
  freqs = theta ** (-jnp.arange(0, d // 2, dtype=jnp.float32) * 2 / d)
  ang = pos_BxL.astype(jnp.float32)[..., None] * freqs  # B L D/2
  sin, cos = jnp.sin(ang)[:, :, None], jnp.cos(ang)[:, :, None]
  x1, x2 = jnp.split(x_BxLxHxD.astype(jnp.float32), 2, axis=-1)
  out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
  return out.astype(x_BxLxHxD.dtype)


def st_positions(pos_BxL, block_size: int, frame_shape: tuple[int, int]):
  """(time, row, col) of flat token indices for spatio-temporal RoPE, each ``[B, L]``.

  Block ``t`` holds a frame's ``rows * cols`` tokens (row-major) then ``e = block_size - rows *
  cols`` extra tokens. Frames sit at time ``(1 + e) t`` and extra token ``j`` at ``(1 + e) t + 1 +
  j`` (between two frames), at the grid centre ``(rows // 2, cols // 2)``.
  """
  rows, cols = frame_shape
  n = rows * cols
  t, k = jnp.divmod(pos_BxL, block_size)
  frame = k < n
  row, col = jnp.divmod(jnp.minimum(k, n - 1), cols)
  time = (1 + block_size - n) * t + jnp.where(frame, 0, k - n + 1)
  return time, jnp.where(frame, row, rows // 2), jnp.where(frame, col, cols // 2)


def rope_split(head_dim: int) -> tuple[int, int, int]:
  """Rotary dims of (time, row, col) in spatio-temporal RoPE (module docstring)."""
  g = 2 * (head_dim // 6)
  return head_dim - 2 * g, g, g


def rotate(x_BxLxHxD, pos_BxL, cfg: LMConfig):
  """RoPE of ``cfg.rope_mode`` at flat token indices ``pos_BxL``."""
  if cfg.rope_mode == "1d":
    return rope(x_BxLxHxD, pos_BxL, cfg.rope_theta)
  axes = st_positions(pos_BxL, cfg.block_size, cfg.frame_shape)
  parts, start = [], 0
  for p, size in zip(axes, rope_split(x_BxLxHxD.shape[-1]), strict=True):
    parts.append(rope(x_BxLxHxD[..., start : start + size], p, cfg.rope_theta))
    start += size
  return jnp.concatenate(parts, -1)


class Attention(nn.Module):
  cfg: LMConfig
  mesh: Mesh | None = None

  @nn.compact
  def __call__(self, x_BxLxD, pos_BxL):
    c = self.cfg
    dt = jnp.dtype(c.dtype)
    qnames, knames = ("embed", "heads", "head_dim"), ("embed", "kv_heads", "head_dim")
    wq = self.param("wq", _init(qnames), (c.d_model, c.n_heads, c.head_dim))
    wk = self.param("wk", _init(knames), (c.d_model, c.n_kv_heads, c.head_dim))
    wv = self.param("wv", _init(knames), (c.d_model, c.n_kv_heads, c.head_dim))
    wo = self.param("wo", _init(("heads", "head_dim", "embed")), (c.n_heads, c.head_dim, c.d_model))
    natural = not self.is_permuted() and not c.block_size
    cp = 1 if self.mesh is None else self.mesh.shape.get("context", 1)
    if c.attention == "upipe" and cp > 1:  # projections chunked per head chunk, inside UPipe
      return attn_lib.upipe_attention(
        x_BxLxD,
        wq,
        wk,
        wv,
        wo,
        pos_BxL,
        mesh=self.mesh,
        rope=lambda x, p: rope(x, p, c.rope_theta),
        upipe_chunks=c.upipe_chunks,
        natural=natural,
        block=c.attention_block,
        dtype=dt,
      ).astype(dt)
    x = x_BxLxD.astype(dt)
    q = jnp.einsum("bld,dhk->blhk", x, wq.astype(dt))
    k = jnp.einsum("bld,dhk->blhk", x, wk.astype(dt))
    v = jnp.einsum("bld,dhk->blhk", x, wv.astype(dt))
    q, k = rotate(q, pos_BxL, c), rotate(k, pos_BxL, c)
    # Block-causal: the kernels' pos_q >= pos_k mask on block indices.
    mask_pos = pos_BxL // c.block_size if c.block_size else pos_BxL
    o = attn_lib.attention(
      q,
      k,
      v,
      None if natural else mask_pos,
      impl=c.attention,
      mesh=self.mesh,
      upipe_chunks=c.upipe_chunks,
      block=c.attention_block,
    )
    return jnp.einsum("blhk,hkd->bld", o, wo.astype(dt))

  def is_permuted(self) -> bool:
    return _uses_zigzag(self.cfg, self.mesh)


def _uses_zigzag(cfg: LMConfig, mesh) -> bool:
  n = 1 if mesh is None else mesh.shape.get("context", 1)
  return cfg.load_balance and n > 1 and cfg.attention in ("ring", "allgather")


class SwiGLU(nn.Module):
  cfg: LMConfig

  @nn.compact
  def __call__(self, x_BxLxD):
    c = self.cfg
    dt = jnp.dtype(c.dtype)
    w1 = self.param("w1", _init(("embed", "mlp")), (c.d_model, c.mlp_dim))
    w3 = self.param("w3", _init(("embed", "mlp")), (c.d_model, c.mlp_dim))
    w2 = self.param("w2", _init(("mlp", "embed")), (c.mlp_dim, c.d_model))
    x = x_BxLxD.astype(dt)
    h = jax.nn.silu(x @ w1.astype(dt)) * (x @ w3.astype(dt))
    return h @ w2.astype(dt)


class Block(nn.Module):
  cfg: LMConfig
  mesh: Mesh | None = None
  train: bool = False  # residual dropout on (needs a "dropout" rng when cfg.dropout > 0)

  @nn.compact
  def __call__(self, x_BxLxD, pos_BxL):
    drop = self._dropout
    h = Attention(self.cfg, self.mesh, name="attn")(RMSNorm(name="ln1")(x_BxLxD), pos_BxL)
    x = x_BxLxD + drop(h)
    x = shd.constrain(x, ("batch", "seq", None), self.mesh)
    x = x + drop(SwiGLU(self.cfg, name="mlp")(RMSNorm(name="ln2")(x)))
    return shd.constrain(x, ("batch", "seq", None), self.mesh)

  def _dropout(self, x):
    if not self.cfg.dropout or not self.train:
      return x
    return nn.Dropout(self.cfg.dropout, deterministic=False)(x)


class _ScanBlock(Block):
  """`Block` with the ``(carry, out)`` signature of ``nn.scan``."""

  def __call__(self, x_BxLxD, pos_BxL):
    return super().__call__(x_BxLxD, pos_BxL), None


def blocks(cfg: LMConfig, mesh, x, pos, train: bool = False):
  """The residual stream through ``cfg.n_layers`` blocks (scanned or unrolled, remat policy).

  Called inside a compact module, so its parameters belong to the caller (``blocks`` or
  ``block<i>``); ``pos`` holds the flat token indices ``[B, L]``.
  """
  policy = REMAT[cfg.remat]
  if not cfg.scan_layers:
    block = Block if cfg.remat == "none" else nn.remat(Block, policy=policy)
    for i in range(cfg.n_layers):
      x = block(cfg, mesh, train, name=f"block{i}")(x, pos)
    return x
  block = _ScanBlock if cfg.remat == "none" else nn.remat(_ScanBlock, policy=policy)
  stack = nn.scan(
    block,
    variable_axes={"params": 0},
    split_rngs={"params": True, "dropout": True},
    in_axes=(nn.broadcast,),
    length=cfg.n_layers,
    metadata_params={nn.PARTITION_NAME: "layers"},
  )
  x, _ = stack(cfg, mesh, train, name="blocks")(x, pos)
  return x


class Transformer(nn.Module):
  """tokens_BxL -> logits_BxLxV (float32). Causal; positions are 0..L-1."""

  cfg: LMConfig
  mesh: Mesh | None = None

  @nn.compact
  def __call__(self, tokens_BxL, return_hidden: bool = False, embeds_BxLxD=None):
    """``embeds_BxLxD`` (optional) replaces the embedding lookup (for input-gradient tests)."""
    c = self.cfg
    b, l = tokens_BxL.shape
    pos = jnp.broadcast_to(jnp.arange(l, dtype=jnp.int32), (b, l))
    perm = None
    if _uses_zigzag(c, self.mesh):
      # Causal load balancing: every layer runs in the zigzag token order (explicit positions),
      # undone once on the final hidden state (`attention.unzigzag`).
      perm = attn_lib.zigzag_permutation(l, self.mesh.shape["context"])
      tokens_BxL, pos = tokens_BxL[:, perm], pos[:, perm]
      if embeds_BxLxD is not None:
        embeds_BxLxD = embeds_BxLxD[:, perm]
    embed = self.param(
      "embed", _init(("vocab", "embed"), nn.initializers.normal(1.0)), (c.vocab_size, c.d_model)
    )
    x = embed[tokens_BxL] if embeds_BxLxD is None else embeds_BxLxD
    x = x.astype(jnp.dtype(c.dtype))
    x = shd.constrain(x, ("batch", "seq", None), self.mesh)
    x = blocks(c, self.mesh, x, pos)
    if perm is not None:  # natural order again before the per-token head, still sharded
      x = attn_lib.unzigzag(x, self.mesh)
    x = RMSNorm(name="ln_f")(x)
    if c.tie_embeddings:
      w = embed.T
    else:
      w = self.param("unembed", _init(("embed", "vocab")), (c.d_model, c.vocab_size))
    # float32 logits from the matmul itself (not a bf16 result cast up).
    logits = jnp.einsum("bld,dv->blv", x, w.astype(x.dtype), preferred_element_type=jnp.float32)
    logits = shd.constrain(logits, ("batch", "seq", None), self.mesh)
    return (logits, x) if return_hidden else logits
