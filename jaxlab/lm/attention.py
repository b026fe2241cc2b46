"""Causal attention: blockwise (flash-style) local attention and context-parallel variants.

Every function takes ``q_BxLxHxD``, ``k_BxLxKxD``, ``v_BxLxKxD`` (GQA: ``K`` divides ``H``) and
``pos_BxL`` (the token position of each row; masking is ``pos_q >= pos_k``), so a permuted
sequence layout (the zigzag layout used for causal load balancing) needs no special casing.

Local attention (`flash_attention`) never materialises an ``L x L`` score matrix: a ``lax.scan``
over KV blocks keeps an online-softmax state (running max, normaliser, output), and a
``custom_vjp`` backward recomputes each block from the saved log-sum-exp (FlashAttention, Dao et
al., arXiv 2205.14135, Alg. 1-2), so forward and backward memory are linear in the sequence length.
Fully masked (future) blocks are skipped with ``lax.cond``. On a GPU with bf16/fp16 inputs in
natural token order, ``jax.nn.dot_product_attention(implementation="cudnn")`` (cuDNN's fused flash
kernel) is used instead where the log-sum-exp is not needed.

Context-parallel variants (``jax.shard_map`` over ``context``; batch/heads stay on their own axes):

* ``allgather``: only Q stays sequence-sharded; K/V (and positions) are all-gathered (MaxText CP).
* ``ring``: K/V blocks travel round the ring with ``ppermute``; each step's blockwise output is
  merged with the running one by log-sum-exp; its backward pass runs the ring again (`_ring_bwd`),
  keeping only this device's q/k/v/o; with the zigzag layout (`zigzag_permutation`, undone by
  `unzigzag`) every device skips the same number of masked blocks (causal load balancing).
* ``ulysses``: ``all_to_all`` heads <-> sequence, full-sequence blockwise attention on H/P heads.
* ``upipe``: Ulysses one head chunk at a time, with the QKV projections and the output projection
  inside the chunk loop (`upipe_attention`; UPipe, arXiv 2602.21196, section 3): a ``lax.scan``
  over chunks, each stage under ``jax.checkpoint``, so only one chunk's Q/K/V/O (projected,
  exchanged, attended) is live in the forward and in the backward pass.

GQA with fewer KV heads than an all-to-all or tensor degree repeats KV heads (`repeat_kv`), as
MaxText does; the repeat's gradient sums the copies.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

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
TENSOR_AXIS = "tensor"
BLOCK = 512  # default query/key block of the blockwise kernel
_NEG = -1e30  # finite "minus infinity": keeps fully-masked rows NaN-free
_PAD_K = np.iinfo(np.int32).max  # padded keys sit "in the future" of every query
_PAD_Q = -1  # padded queries see no key


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


def unzigzag(x_BxLxF, mesh: Mesh, rules: Sequence | None = None):
  """Zigzag order (`zigzag_permutation`) back to natural order, sequence-sharded throughout.

  Device i holds chunks i and 2P-1-i and must end with chunks 2i and 2i+1: four partial
  ``ppermute``s of one chunk each. A gather by the inverse permutation instead makes XLA
  all-gather the whole sequence on every device (for the logits: ``L x vocab`` floats per device,
  and as much again for their gradient).
  """
  names = ("batch", "seq") + (None,) * (x_BxLxF.ndim - 2)
  spec = shd.logical_to_spec(names, rules, mesh)
  if spec[1] != CONTEXT_AXIS:
    raise ValueError(f"unzigzag needs 'seq' mapped to '{CONTEXT_AXIS}'")
  fn = jax.shard_map(_unzigzag_body, mesh=mesh, in_specs=spec, out_specs=spec, check_vma=False)
  return fn(x_BxLxF)


def _unzigzag_body(x):
  n = lax.axis_size(CONTEXT_AXIS)
  c = x.shape[1] // 2
  halves = (x[:, :c], x[:, c:])  # chunks i and 2n-1-i
  out = [jnp.zeros_like(halves[0]), jnp.zeros_like(halves[0])]
  for src in (0, 1):
    chunk = [i if src == 0 else 2 * n - 1 - i for i in range(n)]
    for dst in (0, 1):  # chunk m goes to device m // 2, slot m % 2; each device gets one per slot
      perm = [(i, m // 2) for i, m in enumerate(chunk) if m % 2 == dst]
      out[dst] = out[dst] + lax.ppermute(halves[src], CONTEXT_AXIS, perm)
  return jnp.concatenate(out, axis=1)


def repeat_kv(x_BxLxKxD, times: int):
  """Each KV head repeated ``times`` in place (head j -> j*times..): GQA grouping is unchanged."""
  return x_BxLxKxD if times == 1 else jnp.repeat(x_BxLxKxD, times, axis=2)


def kv_repeats(kv_heads: int, degree: int) -> int:
  """Repeats that make ``kv_heads`` a multiple of ``degree`` (heads split ``degree`` ways)."""
  return math.lcm(kv_heads, degree) // kv_heads


# ---------------------------------------------------------------------------------------------
# Blockwise local attention (online softmax, custom VJP).


def _pad_to(x, axis: int, size: int, value):
  extra = size - x.shape[axis]
  if extra == 0:
    return x
  widths = [(0, 0)] * x.ndim
  widths[axis] = (0, extra)
  return jnp.pad(x, widths, constant_values=value)


def _blocks(x, axis: int, block: int):
  """Splits ``axis`` into (num_blocks, block) and moves num_blocks to the front."""
  n = x.shape[axis] // block
  x = x.reshape(x.shape[:axis] + (n, block) + x.shape[axis + 1 :])
  return jnp.moveaxis(x, axis, 0)


def _block_scores(qb, kb, qpb, kpb, scale):
  """qb: B x bq x K x G x D, kb: B x bk x K x D -> masked fp32 scores B K G bq bk and mask."""
  s = jnp.einsum("bqkgd,bskd->bkgqs", qb, kb, preferred_element_type=jnp.float32) * scale
  mask = (qpb[:, :, None] >= kpb[:, None, :])[:, None, None]
  return jnp.where(mask, s, _NEG), mask


def _scan(f, init, xs):
  """``lax.scan``, or one direct call when there is a single block (cheaper to compile)."""
  if jax.tree.leaves(xs)[0].shape[0] > 1:
    return lax.scan(f, init, xs)
  carry, y = f(init, jax.tree.map(lambda x: x[0], xs))
  return carry, jax.tree.map(lambda x: x[None], y)


def _if_visible(single: bool, qpb, kpb, visit, *args):
  """``visit(*args)`` where any query of the block may see any key, else ``args`` unchanged.

  With a single block in all (``single``) there is nothing to skip: compute it unconditionally
  (a fully masked block contributes exactly nothing), which compiles faster.
  """
  if single:
    return visit(*args)
  skip = lambda *a: a if len(a) > 1 else a[0]
  return lax.cond(jnp.max(qpb) >= jnp.min(kpb), visit, skip, *args)


def _fwd_q_block(qb, qpb, ks, vs, kps, scale, single):
  """Output (B K G bq D, fp32) and LSE (B K G bq) of one query block over all KV blocks."""
  b, bq, kh, g, d = qb.shape
  init = (
    jnp.full((b, kh, g, bq), _NEG, jnp.float32),
    jnp.zeros((b, kh, g, bq), jnp.float32),
    jnp.zeros((b, kh, g, bq, d), jnp.float32),
  )

  def visit(carry, kb, vb, kpb):
    m0, l0, acc0 = carry
    s, mask = _block_scores(qb, kb, qpb, kpb, scale)
    m = jnp.maximum(m0, jnp.max(s, axis=-1))
    p = jnp.where(mask, jnp.exp(s - m[..., None]), 0.0)
    c = jnp.exp(m0 - m)
    pv = jnp.einsum("bkgqs,bskd->bkgqd", p.astype(vb.dtype), vb, preferred_element_type=jnp.float32)
    return m, l0 * c + p.sum(-1), acc0 * c[..., None] + pv

  def step(carry, x):
    kb, vb, kpb = x
    return _if_visible(single, qpb, kpb, lambda c: visit(c, kb, vb, kpb), carry), None

  (m, l, acc), _ = _scan(step, init, (ks, vs, kps))
  safe = jnp.maximum(l, 1e-30)
  lse = jnp.where(l > 0, m + jnp.log(safe), _NEG)
  return acc / safe[..., None], lse


def _prepare(q, k, v, q_pos, k_pos, block):
  """Pads to whole blocks and splits: q -> nq x B x bq x K x G x D, k/v -> nk x B x bk x K x D."""
  b, lq, h, d = q.shape
  lk, kh = k.shape[1], k.shape[2]
  bq, bk = min(block, lq), min(block, lk)
  nq, nk = -(-lq // bq), -(-lk // bk)
  q = _pad_to(q, 1, nq * bq, 0).reshape(b, nq * bq, kh, h // kh, d)
  q_pos = _pad_to(q_pos, 1, nq * bq, _PAD_Q)
  k, v = (_pad_to(x, 1, nk * bk, 0) for x in (k, v))
  k_pos = _pad_to(k_pos, 1, nk * bk, _PAD_K)
  return (
    _blocks(q, 1, bq),
    _blocks(q_pos, 1, bq),
    _blocks(k, 1, bk),
    _blocks(v, 1, bk),
    _blocks(k_pos, 1, bk),
  )


def _flash_fwd_impl(q, k, v, q_pos, k_pos, block):
  # Ties the positions to q: inside a differentiated lax.scan (the layer scan), JAX hoists
  # loop-invariant values out of the loop, and the masks depend on positions only, so every block
  # pair's mask (and its broadcast fill values) would be precomputed and stacked: the full L x L
  # matrix the kernel exists to avoid. The barrier makes them depend on q, computed per block.
  q, q_pos, k_pos = lax.optimization_barrier((q, q_pos, k_pos))
  b, lq, h, d = q.shape
  kh = k.shape[2]
  qs, qps, ks, vs, kps = _prepare(q, k, v, q_pos, k_pos, block)
  scale = d**-0.5
  single = qs.shape[0] * ks.shape[0] == 1
  q_block = lambda _, x: (None, _fwd_q_block(x[0], x[1], ks, vs, kps, scale, single))
  _, (o, lse) = _scan(q_block, None, (qs, qps))
  # o: nq B K G bq D -> B (nq bq) H D ; lse: nq B K G bq -> B K G (nq bq)
  o = jnp.moveaxis(o, 0, 3).reshape(b, kh, h // kh, -1, d)[:, :, :, :lq]
  o = jnp.moveaxis(o, 3, 1).reshape(b, lq, h, d).astype(q.dtype)
  lse = jnp.moveaxis(lse, 0, 3).reshape(b, kh, h // kh, -1)[..., :lq]
  return o, lse


@functools.partial(jax.custom_vjp, nondiff_argnums=(5,))
def flash_attention(q, k, v, q_pos, k_pos, block: int = BLOCK):
  """Masked blockwise attention -> (out B x Lq x H x D, lse B x K x G x Lq float32).

  Rows with no visible key get output 0 and LSE ``-1e30``. Memory is O(block^2) per head for
  the scores plus the O(L) inputs, outputs and LSE, forward and backward.
  """
  return _flash_fwd_impl(q, k, v, q_pos, k_pos, block)


def _flash_fwd(q, k, v, q_pos, k_pos, block):
  o, lse = _flash_fwd_impl(q, k, v, q_pos, k_pos, block)
  return (o, lse), (q, k, v, q_pos, k_pos, o, lse)


def _flash_bwd(block, res, cts):
  q, k, v, q_pos, k_pos = res[:5]
  dq, dk, dv = _flash_grads(block, res, cts)
  zero_pos = lambda p: np.zeros(p.shape, jax.dtypes.float0)
  return (
    dq.astype(q.dtype),
    dk.astype(k.dtype),
    dv.astype(v.dtype),
    zero_pos(q_pos),
    zero_pos(k_pos),
  )


def _flash_grads(block, res, cts):
  """float32 (dq, dk, dv) of the blockwise kernel from its residuals; ``o`` and ``lse`` may be
  those of a larger attention that this call's keys are part of (ring attention's backward)."""
  q, k, v, q_pos, k_pos, o, lse = res
  q, q_pos, k_pos = lax.optimization_barrier((q, q_pos, k_pos))  # see _flash_fwd_impl
  do, dlse = cts
  b, lq, h, d = q.shape
  lk, kh = k.shape[1], k.shape[2]
  g, scale = h // kh, d**-0.5
  do5 = do.astype(jnp.float32).reshape(b, lq, kh, g, d)
  o5 = o.astype(jnp.float32).reshape(b, lq, kh, g, d)
  # ds = p * (dp - delta), with delta = rowsum(do * o) - dlse (the LSE's own cotangent).
  delta = jnp.einsum("bqkgd,bqkgd->bkgq", do5, o5) - dlse
  qs, qps, ks, vs, kps = _prepare(q, k, v, q_pos, k_pos, block)
  nq, bq = qs.shape[0], qs.shape[2]
  single = nq * ks.shape[0] == 1
  pad = lambda x, val=0.0: _pad_to(x, 3, nq * bq, val)
  dos = _blocks(_pad_to(do5, 1, nq * bq, 0.0), 1, bq)
  lses = _blocks(pad(lse), 3, bq)  # nq B K G bq
  deltas = _blocks(pad(delta), 3, bq)

  def kv_block(dq, x):
    kb, vb, kpb = x

    def q_block(acc, y):
      dk, dv = acc
      qb, qpb, dob, lseb, deltab, dqb = y

      def visit(dk, dv, dqb):
        s, mask = _block_scores(qb, kb, qpb, kpb, scale)
        p = jnp.where(mask, jnp.exp(s - lseb[..., None]), 0.0)  # B K G bq bk
        dv = dv + jnp.einsum("bkgqs,bqkgd->bskd", p, dob)
        dp = jnp.einsum("bqkgd,bskd->bkgqs", dob, vb.astype(jnp.float32))
        ds = p * (dp - deltab[..., None]) * scale
        dk = dk + jnp.einsum("bkgqs,bqkgd->bskd", ds, qb.astype(jnp.float32))
        dqb = dqb + jnp.einsum("bkgqs,bskd->bqkgd", ds, kb.astype(jnp.float32))
        return dk, dv, dqb

      dk, dv, dqb = _if_visible(single, qpb, kpb, visit, dk, dv, dqb)
      return (dk, dv), dqb

    zeros = jnp.zeros(kb.shape, jnp.float32)
    (dk, dv), dq = _scan(q_block, (zeros, zeros), (qs, qps, dos, lses, deltas, dq))
    return dq, (dk, dv)

  dq0 = jnp.zeros(qs.shape, jnp.float32)
  dq, (dk, dv) = _scan(kv_block, dq0, (ks, vs, kps))
  dq = jnp.moveaxis(dq, 0, 1).reshape(b, nq * bq, h, d)[:, :lq]
  dk, dv = (jnp.moveaxis(x, 0, 1).reshape(b, -1, kh, d)[:, :lk] for x in (dk, dv))
  return dq, dk, dv


flash_attention.defvjp(_flash_fwd, _flash_bwd)


def _use_cudnn(q, natural: bool) -> bool:
  """cuDNN's fused kernel: GPU, half precision, natural causal order, head_dim it supports."""
  d = q.shape[-1]
  return (
    natural
    and jax.default_backend() == "gpu"
    and q.dtype in (jnp.bfloat16, jnp.float16)
    and d % 8 == 0
    and d <= 128
  )


def local_attention(q, k, v, q_pos, k_pos, *, natural: bool = False, block: int = BLOCK):
  """Causal (``pos_q >= pos_k``) attention on one device, without an L x L buffer.

  ``natural=True`` promises ``q_pos == k_pos == arange(L)`` (enables the cuDNN kernel on GPU).
  """
  if _use_cudnn(q, natural):
    return jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation="cudnn")
  return flash_attention(q, k, v, q_pos, k_pos, block)[0]


def reference_attention(q, k, v, q_pos, k_pos):
  """Plain masked softmax attention with the full score matrix (tests and small shapes only)."""
  b, lq, h, d = q.shape
  kh = k.shape[2]
  s, mask = _block_scores(q.reshape(b, lq, kh, h // kh, d), k, q_pos, k_pos, d**-0.5)
  p = jnp.where(mask, jax.nn.softmax(s, axis=-1), 0.0)
  o = jnp.einsum("bkgqs,bskd->bqkgd", p.astype(v.dtype), v)
  return o.reshape(b, lq, h, d)


# ---------------------------------------------------------------------------------------------
# Per-device bodies (run inside shard_map; collectives over CONTEXT_AXIS).


def _allgather_body(q, k, v, pos, *, block):
  k_all = lax.all_gather(k, CONTEXT_AXIS, axis=1, tiled=True)
  v_all = lax.all_gather(v, CONTEXT_AXIS, axis=1, tiled=True)
  pos_all = lax.all_gather(pos, CONTEXT_AXIS, axis=1, tiled=True)
  return local_attention(q, k_all, v_all, pos, pos_all, block=block)


def _lse_merge(a, b):
  """Merges two normalised partial attentions (o fp32 B x Q x H x D, lse B x K x G x Q)."""
  (o1, l1), (o2, l2) = a, b
  lse = jnp.logaddexp(l1, l2)
  w = lambda l: jnp.moveaxis(jnp.exp(l - lse), 3, 1).reshape(o1.shape[:3])[..., None]
  return o1 * w(l1) + o2 * w(l2), lse


def _ring_body(q, k, v, pos, *, block):
  lq = q.shape[1]
  # Blocks no longer than half the local length: with the zigzag layout each device then skips
  # the same number of fully masked blocks.
  blk = min(block, lq // 2) if lq % 2 == 0 and lq >= 2 else min(block, lq)
  return _ring_attention(q, k, v, pos, blk)


def _ring_perm():
  n = lax.axis_size(CONTEXT_AXIS)
  return n, [(i, (i + 1) % n) for i in range(n)]


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _ring_attention(q, k, v, pos, blk):
  """Ring attention with its own backward pass (`_ring_bwd`): the residuals are this device's
  q, k, v, output and log-sum-exp, whatever the ring size."""
  return _ring_fwd(q, k, v, pos, blk)[0]


def _ring_fwd(q, k, v, pos, blk):
  n, perm = _ring_perm()

  def step(carry, _):
    acc, k_c, v_c, kpos_c = carry
    o, lse = _flash_fwd_impl(q, k_c, v_c, pos, kpos_c, blk)
    acc = _lse_merge(acc, (o.astype(jnp.float32), lse))
    k_c, v_c, kpos_c = (lax.ppermute(x, CONTEXT_AXIS, perm) for x in (k_c, v_c, kpos_c))
    return (acc, k_c, v_c, kpos_c), None

  b, lq, h, d = q.shape
  kh = k.shape[2]
  init = (jnp.zeros((b, lq, h, d), jnp.float32), jnp.full((b, kh, h // kh, lq), _NEG))
  ((o, lse), *_), _ = lax.scan(step, (init, k, v, pos), None, length=n)
  o = o.astype(q.dtype)
  return o, (q, k, v, pos, o, lse)


def _ring_bwd(blk, res, do):
  """The ring again (ring attention, arXiv 2310.01889): each step adds this device's
  dq for the visiting K/V block, and that block's dk/dv travel with it; after ``n`` steps every
  block (and its gradient) is home. A differentiated scan of the forward would instead keep every
  step's carry (the float32 output accumulator and the visiting K/V: ring-size times the local
  activations)."""
  q, k, v, pos, o, lse = res
  n, perm = _ring_perm()
  no_dlse = jnp.zeros_like(lse)

  def step(carry, _):
    dq, k_c, v_c, kpos_c, dk_c, dv_c = carry
    dqi, dki, dvi = _flash_grads(blk, (q, k_c, v_c, pos, kpos_c, o, lse), (do, no_dlse))
    travel = (k_c, v_c, kpos_c, dk_c + dki, dv_c + dvi)
    return (dq + dqi, *(lax.ppermute(x, CONTEXT_AXIS, perm) for x in travel)), None

  zeros = lambda x: jnp.zeros(x.shape, jnp.float32)
  init = (zeros(q), k, v, pos, zeros(k), zeros(v))
  (dq, *_, dk, dv), _ = lax.scan(step, init, None, length=n)
  pos0 = np.zeros(pos.shape, jax.dtypes.float0)
  return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), pos0


_ring_attention.defvjp(_ring_fwd, _ring_bwd)


def _a2a(x, to_heads: bool):
  """Sequence-sharded <-> head-sharded exchange over CONTEXT_AXIS."""
  split, concat = (2, 1) if to_heads else (1, 2)
  return lax.all_to_all(x, CONTEXT_AXIS, split_axis=split, concat_axis=concat, tiled=True)


def _ulysses_core(q, k, v, pos, *, natural, block):
  """All-to-all to (full sequence, H/P heads), local attention, all-to-all back."""
  n = lax.axis_size(CONTEXT_AXIS)
  r = kv_repeats(k.shape[2], n)
  k, v = repeat_kv(k, r), repeat_kv(v, r)
  qf, kf, vf = _a2a(q, True), _a2a(k, True), _a2a(v, True)  # B x L x H/P x D
  pos_all = lax.all_gather(pos, CONTEXT_AXIS, axis=1, tiled=True)
  o = local_attention(qf, kf, vf, pos_all, pos_all, natural=natural, block=block)
  return _a2a(o, False)


# ---------------------------------------------------------------------------------------------
# Checks shared by the model's config validation and the functions below.


def check_heads(
  impl: str, n_heads: int, n_kv_heads: int, context: int, tensor: int = 1, chunks: int = 0
) -> int:
  """Raises `ConfigError` when the head layout cannot run; returns UPipe's chunk count."""
  if n_heads % tensor:
    raise ConfigError("n_heads", f"{n_heads} is not divisible by the mesh's tensor axis ({tensor})")
  if n_heads % n_kv_heads:
    raise ConfigError("n_kv_heads", f"{n_kv_heads} must divide n_heads={n_heads}")
  if impl not in ("ulysses", "upipe") or context <= 1:
    return 1
  heads = n_heads // tensor
  if heads % context:
    raise ConfigError(
      "n_heads",
      f"{impl} needs the heads per tensor shard (n_heads={n_heads} / tensor={tensor}) "
      f"divisible by context={context}",
    )
  if impl == "ulysses":
    return 1
  chunks = chunks or heads // context
  if chunks < 1 or heads % chunks or (heads // chunks) % context:
    raise ConfigError(
      "upipe_chunks",
      f"{chunks} must split the {heads} heads per tensor shard into equal chunks of a "
      f"multiple of context={context} heads (n_heads={n_heads}, tensor={tensor})",
    )
  return chunks


def _mesh_size(mesh, axis) -> int:
  return 1 if mesh is None else mesh.shape.get(axis, 1)


def _specs(mesh, rules, heads_name="heads"):
  qspec = shd.logical_to_spec(("batch", "seq", heads_name, "head_dim"), rules, mesh)
  if qspec[1] != CONTEXT_AXIS:
    raise ValueError(f"context-parallel attention needs 'seq' mapped to '{CONTEXT_AXIS}'")
  return qspec, P(qspec[0], qspec[1])


# ---------------------------------------------------------------------------------------------
# Public entry points.


def dense_attention(q, k, v, pos=None, *, block: int = BLOCK):
  """Causal attention on the global arrays (cuDNN on GPU in half precision, else blockwise)."""
  b, l = q.shape[:2]
  natural = pos is None
  if natural:
    pos = jnp.broadcast_to(jnp.arange(l, dtype=jnp.int32), (b, l))
  return local_attention(q, k, v, pos, pos, natural=natural, block=block)


def attention(
  q_BxLxHxD,
  k_BxLxKxD,
  v_BxLxKxD,
  pos_BxL=None,
  *,
  impl: str,
  mesh: Mesh | None = None,
  upipe_chunks: int = 0,
  block: int = BLOCK,
  rules: Sequence | None = None,
):
  """Causal (GQA) attention by ``impl`` (one of `IMPLS`).

  ``pos_BxL=None`` means natural order. Context-parallel impls need a mesh with a ``context``
  axis; with context size 1 (or no mesh) they fall back to dense attention. KV heads are
  repeated when the tensor axis does not divide them. ``upipe`` here chunks the attention only
  (its projections are outside); `upipe_attention` chunks the projections too.
  """
  check_choice("attention", impl, IMPLS)
  n, t = _mesh_size(mesh, CONTEXT_AXIS), _mesh_size(mesh, TENSOR_AXIS)
  h, kh = q_BxLxHxD.shape[2], k_BxLxKxD.shape[2]
  chunks = check_heads(impl, h, kh, n, t, upipe_chunks)
  r = kv_repeats(kh, t)
  k_BxLxKxD, v_BxLxKxD = repeat_kv(k_BxLxKxD, r), repeat_kv(v_BxLxKxD, r)
  if impl == "dense" or n <= 1:
    return dense_attention(q_BxLxHxD, k_BxLxKxD, v_BxLxKxD, pos_BxL, block=block)
  b, l = q_BxLxHxD.shape[:2]
  natural = pos_BxL is None
  if natural:
    pos_BxL = jnp.broadcast_to(jnp.arange(l, dtype=jnp.int32), (b, l))
  qspec, pspec = _specs(mesh, rules)
  kspec = shd.logical_to_spec(("batch", "seq", "kv_heads", "head_dim"), rules, mesh)
  if impl == "allgather":
    body = functools.partial(_allgather_body, block=block)
  elif impl == "ring":
    body = functools.partial(_ring_body, block=block)
  elif impl == "ulysses":
    body = functools.partial(_ulysses_core, natural=natural, block=block)
  else:
    body = functools.partial(_upipe_attn_body, num_chunks=chunks, natural=natural, block=block)
  fn = jax.shard_map(
    body, mesh=mesh, in_specs=(qspec, kspec, kspec, pspec), out_specs=qspec, check_vma=False
  )
  return fn(q_BxLxHxD, k_BxLxKxD, v_BxLxKxD, pos_BxL.astype(jnp.int32))


def _stage_kv_index(h: int, kh: int, num_chunks: int) -> np.ndarray:
  """KV heads each stage needs (stage x kv-slot): whole GQA groups, else one per query head."""
  g, hc = h // kh, h // num_chunks
  if hc % g == 0:
    return np.arange(kh).reshape(num_chunks, hc // g)
  return np.arange(h).reshape(num_chunks, hc) // g


def _upipe_attn_body(q, k, v, pos, *, num_chunks, natural, block):
  """UPipe on already-projected Q/K/V: a scan over head chunks of the Ulysses core."""
  b, lq, h, d = q.shape
  idx = _stage_kv_index(h, k.shape[2], num_chunks)
  qs = jnp.moveaxis(q.reshape(b, lq, num_chunks, h // num_chunks, d), 2, 0)
  ks, vs = (jnp.moveaxis(x[:, :, idx], 2, 0) for x in (k, v))  # C x B x L x kc x D

  @jax.checkpoint  # rematerialise each stage in the backward pass: one stage live at a time
  def stage(_, x):
    return None, _ulysses_core(*x, pos, natural=natural, block=block)

  _, out = lax.scan(stage, None, (qs, ks, vs))  # C x B x L x hc x D
  return jnp.moveaxis(out, 0, 2).reshape(b, lq, h, d)


def upipe_attention(
  x_BxLxE,
  wq_ExHxD,
  wk_ExKxD,
  wv_ExKxD,
  wo_HxDxE,
  pos_BxL,
  *,
  mesh: Mesh,
  rope: Callable,
  upipe_chunks: int = 0,
  natural: bool = True,
  block: int = BLOCK,
  dtype=jnp.float32,
  rules: Sequence | None = None,
):
  """UPipe attention block with per-chunk projections: x -> sum over chunks of o_c @ wo_c.

  Per stage c (UPipe, arXiv 2602.21196, section 3): q_c = x wq_c, k_c/v_c for the stage's GQA
  groups, RoPE (``rope(x_BxLxHxD, pos_BxL)``), all-to-all to the full sequence, blockwise
  attention, all-to-all back, and ``o_c wo_c`` accumulated into the output, so no tensor of all
  heads at full sequence length ever exists. Stages run under ``jax.checkpoint`` in a
  ``lax.scan``. Heads shard over ``tensor`` (output summed with ``psum``); KV weights are
  repeated first when the tensor axis does not divide the KV heads.
  """
  n, t = _mesh_size(mesh, CONTEXT_AXIS), _mesh_size(mesh, TENSOR_AXIS)
  h, kh = wq_ExHxD.shape[1], wk_ExKxD.shape[1]
  chunks = check_heads("upipe", h, kh, n, t, upipe_chunks)
  r = kv_repeats(kh, t)
  wk_ExKxD, wv_ExKxD = (jnp.repeat(w, r, axis=1) if r > 1 else w for w in (wk_ExKxD, wv_ExKxD))
  qspec, pspec = _specs(mesh, rules)
  xspec = P(qspec[0], qspec[1], None)
  wspec = P(None, qspec[2], None)
  ospec = P(qspec[2], None, None)
  body = functools.partial(
    _upipe_proj_body,
    num_chunks=chunks,
    rope=rope,
    natural=natural,
    block=block,
    dtype=dtype,
    tensor_sharded=qspec[2] is not None,
  )
  fn = jax.shard_map(
    body,
    mesh=mesh,
    in_specs=(xspec, wspec, wspec, wspec, ospec, pspec),
    out_specs=xspec,
    check_vma=False,
  )
  return fn(x_BxLxE, wq_ExHxD, wk_ExKxD, wv_ExKxD, wo_HxDxE, pos_BxL.astype(jnp.int32))


def _upipe_proj_body(
  x, wq, wk, wv, wo, pos, *, num_chunks, rope, natural, block, dtype, tensor_sharded
):
  e, h, d = wq.shape
  hc = h // num_chunks
  idx = jnp.asarray(_stage_kv_index(h, wk.shape[1], num_chunks))
  wq4 = wq.reshape(e, num_chunks, hc, d)
  wo4 = wo.reshape(num_chunks, hc, d, e)
  x = x.astype(dtype)

  # Weights are sliced per stage inside the loop (not stacked per stage up front), so no copy of
  # them is made; their gradients accumulate in one buffer each.
  @jax.checkpoint  # only x and the running output are kept between stages
  def stage(out, c):
    wq_c = lax.dynamic_index_in_dim(wq4, c, axis=1, keepdims=False)
    wk_c, wv_c = (jnp.take(w, idx[c], axis=1) for w in (wk, wv))
    wo_c = lax.dynamic_index_in_dim(wo4, c, axis=0, keepdims=False)
    wq_c, wk_c, wv_c, wo_c = (w.astype(dtype) for w in (wq_c, wk_c, wv_c, wo_c))
    q = rope(jnp.einsum("ble,ehd->blhd", x, wq_c), pos)
    k = rope(jnp.einsum("ble,ehd->blhd", x, wk_c), pos)
    v = jnp.einsum("ble,ehd->blhd", x, wv_c)
    o = _ulysses_core(q, k, v, pos, natural=natural, block=block)
    return out + jnp.einsum("blhd,hde->ble", o, wo_c, preferred_element_type=jnp.float32), None

  out, _ = lax.scan(stage, jnp.zeros(x.shape, jnp.float32), jnp.arange(num_chunks))
  if tensor_sharded:
    out = lax.psum(out, TENSOR_AXIS)
  return out.astype(dtype)
