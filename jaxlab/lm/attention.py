"""Causal attention: dense, and context-parallel variants over the ``context`` mesh axis.

Every function takes ``q_BxLxHxD``, ``k_BxLxKxD``, ``v_BxLxKxD`` (GQA: ``K`` divides ``H``) and
``pos_BxL`` (the token position of each row; masking is ``pos_q >= pos_k``), so a permuted
sequence layout (the zigzag layout used for causal load balancing) needs no special casing.

Context-parallel variants (``jax.shard_map`` over ``context``; batch/heads stay on their own axes):

* ``allgather``: only Q stays sequence-sharded; K/V (and positions) are all-gathered (MaxText CP).
* ``ring``: K/V blocks travel round the ring with ``ppermute``; online-softmax merge; sub-blocks
  that are fully masked are skipped with ``lax.cond``, so with the zigzag layout
  (`zigzag_permutation`) every device does the same work (causal load balancing).
* ``ulysses``: ``all_to_all`` heads <-> sequence, full-sequence attention on H/P heads, back.
* ``upipe``: Ulysses done one head chunk at a time (``lax.scan`` over chunks, each stage under
  ``jax.checkpoint``) so only one chunk's full-sequence Q/K/V/scores is live: attention activation
  memory falls ~1/num_chunks (UPipe, arXiv 2602.21196). The per-stage QKV projection fusion of the
  paper is not done here (projections happen before this function), so the saving covers the
  post-all-to-all tensors and attention intermediates, not the projection outputs.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from jaxlab.core import sharding as shd
from jaxlab.core.errors import ConfigError, check_choice

IMPLS = ("dense", "allgather", "ring", "ulysses", "upipe")
CONTEXT_AXIS = "context"
_NEG = -1e30  # finite "minus infinity": keeps fully-masked rows NaN-free in the online softmax


def zigzag_permutation(length: int, num_shards: int) -> np.ndarray:
  """Sequence order for causal load balancing: shard i holds chunks i and 2P-1-i of 2P chunks."""
  if length % (2 * num_shards):
    raise ConfigError(
      "seq_len",
      f"{length} must be divisible by 2 x context = {2 * num_shards} for the load-balanced "
      "(zigzag) layout",
    )
  chunks = np.arange(length).reshape(2 * num_shards, -1)
  order = [np.concatenate([chunks[i], chunks[2 * num_shards - 1 - i]]) for i in range(num_shards)]
  return np.concatenate(order)


# ---------------------------------------------------------------------------------------------
# Local (per-device) attention math.


def _scores(q_BxQxHxD, k_BxSxKxD, q_pos_BxQ, k_pos_BxS):
  """Masked fp32 logits, grouped for GQA: returns s_BxKxGxQxS and mask_Bx1x1xQxS."""
  b, lq, h, d = q_BxQxHxD.shape
  kh = k_BxSxKxD.shape[2]
  q = q_BxQxHxD.reshape(b, lq, kh, h // kh, d)
  s = jnp.einsum("bqkgd,bskd->bkgqs", q, k_BxSxKxD, preferred_element_type=jnp.float32)
  s = s * (d**-0.5)
  mask = (q_pos_BxQ[:, :, None] >= k_pos_BxS[:, None, :])[:, None, None]
  return jnp.where(mask, s, _NEG), mask


def local_attention(q, k, v, q_pos, k_pos):
  """Plain masked softmax attention on one device (fp32 softmax)."""
  s, mask = _scores(q, k, q_pos, k_pos)
  p = jax.nn.softmax(s, axis=-1)
  p = jnp.where(mask, p, 0.0)
  b, lq, h, d = q.shape
  o = jnp.einsum("bkgqs,bskd->bqkgd", p.astype(v.dtype), v)
  return o.reshape(b, lq, h, d)


def _block_stats(q, k, v, q_pos, k_pos):
  """Unnormalised block attention: (m_BxKxGxQ, l_BxKxGxQ, acc_BxKxGxQxD) for online softmax."""
  s, mask = _scores(q, k, q_pos, k_pos)
  m = jnp.max(s, axis=-1)
  p = jnp.where(mask, jnp.exp(s - m[..., None]), 0.0)
  l = jnp.sum(p, axis=-1)
  acc = jnp.einsum("bkgqs,bskd->bkgqd", p, v.astype(jnp.float32))
  return m, l, acc


def _merge(a, b):
  m1, l1, o1 = a
  m2, l2, o2 = b
  m = jnp.maximum(m1, m2)
  c1, c2 = jnp.exp(m1 - m), jnp.exp(m2 - m)
  return m, l1 * c1 + l2 * c2, o1 * c1[..., None] + o2 * c2[..., None]


def _empty_stats(q, kh):
  b, lq, h, d = q.shape
  shape = (b, kh, h // kh, lq)
  return (
    jnp.full(shape, _NEG, jnp.float32),
    jnp.zeros(shape, jnp.float32),
    jnp.zeros(shape + (d,), jnp.float32),
  )


def _finish(stats, q):
  m, l, acc = stats
  b, lq, h, d = q.shape
  o = acc / jnp.maximum(l, 1e-30)[..., None]  # B K G Q D
  return jnp.moveaxis(o, 3, 1).reshape(b, lq, h, d).astype(q.dtype)


def _skippable_block(q, k, v, q_pos, k_pos, num_sub: int):
  """Block stats computed over num_sub x num_sub sub-blocks, skipping fully masked ones."""
  kh = k.shape[2]
  lq, lk = q.shape[1], k.shape[1]
  if lq % num_sub or lk % num_sub:
    num_sub = 1  # odd local lengths: whole-block skipping only
  sq, sk = lq // num_sub, lk // num_sub
  rows = []
  for i in range(num_sub):
    qi, qpi = q[:, i * sq : (i + 1) * sq], q_pos[:, i * sq : (i + 1) * sq]
    st = _empty_stats(qi, kh)
    for j in range(num_sub):
      kj, vj, kpj = (
        k[:, j * sk : (j + 1) * sk],
        v[:, j * sk : (j + 1) * sk],
        k_pos[:, j * sk : (j + 1) * sk],
      )
      visible = jnp.max(qpi) >= jnp.min(kpj)  # any (q, k) pair with pos_q >= pos_k
      blk = lax.cond(
        visible,
        lambda a: _block_stats(*a),
        lambda a: _empty_stats(a[0], kh),
        (qi, kj, vj, qpi, kpj),
      )
      st = _merge(st, blk)
    rows.append(st)
  return tuple(jnp.concatenate([r[n] for r in rows], axis=3) for n in range(3))


# ---------------------------------------------------------------------------------------------
# Per-device bodies (run inside shard_map; collectives over CONTEXT_AXIS).


def _allgather_body(q, k, v, pos):
  k_all = lax.all_gather(k, CONTEXT_AXIS, axis=1, tiled=True)
  v_all = lax.all_gather(v, CONTEXT_AXIS, axis=1, tiled=True)
  pos_all = lax.all_gather(pos, CONTEXT_AXIS, axis=1, tiled=True)
  return local_attention(q, k_all, v_all, pos, pos_all)


def _ring_body(q, k, v, pos, *, num_sub: int):
  n = lax.axis_size(CONTEXT_AXIS)
  perm = [(i, (i + 1) % n) for i in range(n)]

  @jax.checkpoint  # keep per-step residuals out of the backward pass's live set
  def step(carry, _):
    stats, k_c, v_c, kpos_c = carry
    blk = _skippable_block(q, k_c, v_c, pos, kpos_c, num_sub)
    stats = _merge(stats, blk)
    k_c, v_c, kpos_c = (lax.ppermute(x, CONTEXT_AXIS, perm) for x in (k_c, v_c, kpos_c))
    return (stats, k_c, v_c, kpos_c), None

  init = (_empty_stats(q, k.shape[2]), k, v, pos)
  (stats, *_), _ = lax.scan(step, init, None, length=n)
  return _finish(stats, q)


def _repeat_kv_for(k, num_shards):
  """Repeats KV heads so their count is a multiple of the all-to-all degree (GQA with K < P)."""
  kh = k.shape[2]
  if kh % num_shards == 0:
    return k
  if num_shards % kh:
    raise ConfigError(
      "n_kv_heads",
      f"kv heads per device ({kh}) and context size ({num_shards}) must divide one another "
      "for Ulysses",
    )
  return jnp.repeat(k, num_shards // kh, axis=2)


def _ulysses_core(q, k, v, pos):
  """All-to-all to (full sequence, H/P heads), local attention, all-to-all back."""
  n = lax.axis_size(CONTEXT_AXIS)
  if q.shape[2] % n:
    raise ConfigError(
      "n_heads", f"Ulysses needs heads per device ({q.shape[2]}) divisible by context ({n})"
    )
  k, v = _repeat_kv_for(k, n), _repeat_kv_for(v, n)
  a2a = functools.partial(
    lax.all_to_all, axis_name=CONTEXT_AXIS, split_axis=2, concat_axis=1, tiled=True
  )
  qf, kf, vf = a2a(q), a2a(k), a2a(v)  # B x L x H/P x D
  pos_all = lax.all_gather(pos, CONTEXT_AXIS, axis=1, tiled=True)
  o = local_attention(qf, kf, vf, pos_all, pos_all)
  return lax.all_to_all(o, CONTEXT_AXIS, split_axis=1, concat_axis=2, tiled=True)


def _ulysses_body(q, k, v, pos):
  return _ulysses_core(q, k, v, pos)


def _upipe_body(q, k, v, pos, *, num_chunks: int):
  b, lq, h, d = q.shape
  kh = k.shape[2]
  g = h // kh
  if h % num_chunks:
    raise ConfigError("upipe_chunks", f"{num_chunks} must divide the heads per device ({h})")
  hc = h // num_chunks
  # Per stage, the KV heads its query heads use. If a stage holds whole GQA groups, slice them;
  # otherwise give each query head its own copy of its KV head (cheap: one stage at a time).
  if hc % g == 0:
    kc = hc // g
    ks = k.reshape(b, lq, num_chunks, kc, d)
    vs = v.reshape(b, lq, num_chunks, kc, d)
  else:
    idx = np.arange(h).reshape(num_chunks, hc) // g  # stage x head -> kv head
    ks = k[:, :, idx]  # B L C hc D
    vs = v[:, :, idx]
  qs = q.reshape(b, lq, num_chunks, hc, d)
  xs = tuple(jnp.moveaxis(x, 2, 0) for x in (qs, ks, vs))  # C x B x L x heads x D

  @jax.checkpoint  # rematerialise each stage in the backward pass: one stage live at a time
  def stage(_, x):
    qc, kc_, vc = x
    return None, _ulysses_core(qc, kc_, vc, pos)

  _, out = lax.scan(stage, None, xs)  # C x B x L x hc x D
  return jnp.moveaxis(out, 0, 2).reshape(b, lq, h, d)


# ---------------------------------------------------------------------------------------------
# Public entry point.


def dense_attention(q, k, v, pos=None):
  """Causal attention on the global arrays (``jax.nn.dot_product_attention``; cuDNN on GPU)."""
  if pos is None:
    impl = (
      "cudnn"
      if (jax.default_backend() == "gpu" and q.dtype in (jnp.bfloat16, jnp.float16))
      else "xla"
    )
    return jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation=impl)
  mask = (pos[:, :, None] >= pos[:, None, :])[:, None]  # B 1 Q S
  return jax.nn.dot_product_attention(q, k, v, mask=mask)


def attention(
  q_BxLxHxD,
  k_BxLxKxD,
  v_BxLxKxD,
  pos_BxL=None,
  *,
  impl: str = "dense",
  mesh: Mesh | None = None,
  upipe_chunks: int = 0,
  ring_sub_blocks: int = 2,
  rules: Sequence | None = None,
):
  """Causal (GQA) attention by ``impl`` (one of `IMPLS`).

  ``pos_BxL=None`` means natural order. Context-parallel impls need a mesh with a ``context``
  axis; with context size 1 (or no mesh) they fall back to dense attention.
  ``upipe_chunks=0`` means heads-per-device / context (one head per device per stage, as in the
  paper's ``pipe_degree``).
  """
  check_choice("attention", impl, IMPLS)
  n = 0 if mesh is None else mesh.shape.get(CONTEXT_AXIS, 1)
  if impl == "dense" or n <= 1:
    return dense_attention(q_BxLxHxD, k_BxLxKxD, v_BxLxKxD, pos_BxL)
  b, l = q_BxLxHxD.shape[:2]
  if pos_BxL is None:
    pos_BxL = jnp.broadcast_to(jnp.arange(l, dtype=jnp.int32), (b, l))
  qspec = shd.logical_to_spec(("batch", "seq", "heads", "head_dim"), rules, mesh)
  kspec = shd.logical_to_spec(("batch", "seq", "kv_heads", "head_dim"), rules, mesh)
  pspec = P(qspec[0], qspec[1])
  if qspec[1] != CONTEXT_AXIS:
    raise ValueError(f"context-parallel attention needs 'seq' mapped to '{CONTEXT_AXIS}'")
  if impl == "allgather":
    body = _allgather_body
  elif impl == "ring":
    body = functools.partial(_ring_body, num_sub=ring_sub_blocks)
  elif impl == "ulysses":
    body = _ulysses_body
  else:
    heads_local = q_BxLxHxD.shape[2] // shd_axis_size(mesh, qspec[2])
    chunks = upipe_chunks or max(1, heads_local // n)
    body = functools.partial(_upipe_body, num_chunks=chunks)
  fn = jax.shard_map(
    body, mesh=mesh, in_specs=(qspec, kspec, kspec, pspec), out_specs=qspec, check_vma=False
  )
  return fn(q_BxLxHxD, k_BxLxKxD, v_BxLxKxD, pos_BxL.astype(jnp.int32))


def shd_axis_size(mesh, axes) -> int:
  if axes is None:
    return 1
  axes = (axes,) if isinstance(axes, str) else tuple(axes)
  return int(np.prod([mesh.shape[a] for a in axes]))
