"""Soft rank by projection onto the permutahedron (Blondel et al. 2020, arXiv 2002.08871).

``soft_rank(x, eps)`` is the Euclidean projection of ``x / eps`` onto the permutahedron of
``w = (n, n-1, ..., 1)`` (the L2-regularised soft rank of the paper's Section 3; "ascending": the
largest value gets rank ``n``, the smallest rank 1). As ``eps -> 0`` it is the hard rank; for
large ``eps`` all ranks tend to the mean ``(n + 1) / 2``. It is the operator of
``google-research/fast-soft-sort`` (``direction="ASCENDING"``, ``regularization="l2"``) used by
R4 (arXiv 2601.09236).

The projection (the paper's Proposition 3): sort ``z`` decreasingly (``s = z[perm]``), solve the
decreasing isotonic regression ``v = argmin_{v_1 >= ... >= v_n} |v - (s - w)|^2`` by
pool-adjacent-violators (PAV), and return ``s - v`` in the original order. Its Jacobian is
``I - B`` (in sorted order), ``B`` averaging inside each PAV block, which :func:`projection`'s
``custom_vjp`` applies. Everything is jittable and vmappable; the PAV is a
``fori_loop`` with a ``while_loop`` of merges over a fixed-size stack of blocks.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array


def pav_decreasing(y: Array) -> tuple[Array, Array]:
  """Decreasing isotonic regression of ``y[n]`` by PAV -> ``(v[n], block id per element)``."""
  n = y.shape[0]
  dtype = y.dtype

  def merge(st):
    sums, cnts, starts, top = st
    sums = sums.at[top - 2].add(sums[top - 1])
    cnts = cnts.at[top - 2].add(cnts[top - 1])
    starts = starts.at[top - 1].set(n)
    return sums, cnts, starts, top - 1

  def violated(st):
    sums, cnts, _, top = st
    prev = sums[jnp.maximum(top - 2, 0)] / cnts[jnp.maximum(top - 2, 0)]
    return (top > 1) & (prev < sums[top - 1] / cnts[top - 1])

  def push(i, st):
    sums, cnts, starts, top = st
    st = (sums.at[top].set(y[i]), cnts.at[top].set(1.0), starts.at[top].set(i), top + 1)
    return jax.lax.while_loop(violated, merge, st)

  init = (jnp.zeros((n,), dtype), jnp.ones((n,), dtype), jnp.full((n,), n), jnp.zeros((), int))
  sums, cnts, starts, _ = jax.lax.fori_loop(0, n, push, init)
  block = jnp.sum(starts[None, :] <= jnp.arange(n)[:, None], axis=1) - 1
  return (sums / cnts)[block], block


def _project(z: Array, w: Array):
  perm = jnp.argsort(-z)
  s = z[perm]
  v, block = pav_decreasing(s - w)
  out = jnp.zeros_like(z).at[perm].set(s - v)
  return out, (perm, block)


@jax.custom_vjp
def projection(z: Array, w: Array) -> Array:
  """Projection of ``z[n]`` onto the permutahedron of the decreasing vector ``w[n]``."""
  return _project(z, w)[0]


def _fwd(z, w):
  out, res = _project(z, w)
  return out, res


def _bwd(res, g):
  perm, block = res
  n = g.shape[0]
  gs = g[perm]
  mean = jax.ops.segment_sum(gs, block, n) / jnp.maximum(
    jax.ops.segment_sum(jnp.ones_like(gs), block, n), 1.0
  )
  grad_s = gs - mean[block]
  return jnp.zeros_like(g).at[perm].set(grad_s), None  # w is a constant of the operator


projection.defvjp(_fwd, _bwd)


@jax.jit
def soft_rank(x: Array, eps: float | Array) -> Array:
  """Ascending soft ranks of ``x[..., n]`` (1 = smallest), regularisation strength ``eps``."""
  x = jnp.asarray(x)
  n = x.shape[-1]
  w = jnp.arange(n, 0, -1, dtype=x.dtype)
  flat = x.reshape(-1, n) / eps
  out = jax.vmap(projection, in_axes=(0, None))(flat, w)
  return out.reshape(x.shape)


def hard_rank(x: Array) -> Array:
  """Ascending integer ranks 1..n (ties broken by position)."""
  return (jnp.argsort(jnp.argsort(x, axis=-1), axis=-1) + 1).astype(jnp.asarray(x).dtype)
