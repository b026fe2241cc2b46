"""ARM-style routed memory layer. **A reconstruction**, not the paper's equations.

ARM ("Attention with Routed-Memory for Learnable Sparse Control", ICML 2026 poster 66106,
https://icml.cc/virtual/2026/poster/66106) has only its abstract public: a fixed-size
differentiable KV memory organised as a hierarchical routing structure, Gumbel-Softmax slot
selection, sigmoid-gated soft updates (no hard eviction), and an inference-time choice of how much
memory to read. Everything below is our guess at those pieces (what is stated and what is guessed:
docs/lm.md, "ARM routed memory"), parameterised so variants are settings:

  memory          K, V in R^{G x S x d}   (G groups x S slots), learned initial value
  router level 1  a_t = softmax(W_g h_t / tau)           over groups (read: top ``read_groups``)
  router level 2  z_t = GumbelSoftmax(W_s h_t)           over the slots of each group (write)
  write weight    w_t[g, s] = a_t^hard[g] z_t[g, s]       (straight-through hard top-1 if ``hard``)
  gate            u = sigmoid(W_u [h_t; K_sel])  ;  K_sel <- u * K_sel + (1 - u) * k_t  (same for V)
  read            r_t = sum_g a_t[g] sum_s softmax_s(q_t . K[g, s] / sqrt d) V[g, s]

Reads happen before the write at each step, so output t depends on tokens <= t only (causal).
The sequence is processed with ``lax.scan`` (memory is the recurrent carry).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxlab.core.errors import ConfigError


def gumbel_softmax(key, logits, tau: float = 1.0, hard: bool = True):
  """Gumbel-Softmax over the last axis; ``hard``: one-hot forward, straight-through gradient."""
  g = -jnp.log(-jnp.log(jax.random.uniform(key, logits.shape, minval=1e-9, maxval=1.0)))
  y = jax.nn.softmax((logits + g) / tau, axis=-1)
  if not hard:
    return y
  onehot = jax.nn.one_hot(jnp.argmax(y, -1), y.shape[-1], dtype=y.dtype)
  return y + jax.lax.stop_gradient(onehot - y)


class RoutedMemory(nn.Module):
  """``h_BxLxD -> (out_BxLxD, final memory)``; ARM-like (a reconstruction, see the module doc)."""

  num_groups: int = 4
  slots_per_group: int = 8
  mem_dim: int = 32
  tau: float = 1.0  # router / Gumbel temperature
  hard: bool = True  # straight-through hard selection (groups for writes, slots)
  read_groups: int = 0  # groups read per token (0 = all, weighted); the inference policy knob

  @nn.compact
  def __call__(self, h_BxLxD, key, deterministic: bool = False):
    b, l, d = h_BxLxD.shape
    g, s, m = self.num_groups, self.slots_per_group, self.mem_dim
    if self.read_groups < 0 or self.read_groups > g:
      raise ConfigError("read_groups", f"{self.read_groups} must be in [0, num_groups={g}]")
    dense = lambda n, name: nn.Dense(n, name=name)
    mk0 = self.param("mem_k", nn.initializers.normal(0.1), (g, s, m))
    mv0 = self.param("mem_v", nn.initializers.normal(0.1), (g, s, m))
    q = dense(m, "wq")(h_BxLxD)
    k = dense(m, "wk")(h_BxLxD)
    v = dense(m, "wv")(h_BxLxD)
    group_logits = dense(g, "router_groups")(h_BxLxD) / self.tau  # B L G
    slot_logits = dense(g * s, "router_slots")(h_BxLxD).reshape(b, l, g, s)
    # Raw params (not a Dense submodule): flax modules must not be called inside jax.lax.scan.
    gate_w = self.param("gate_kernel", nn.initializers.lecun_normal(), (d + 2 * m, 2 * m))
    gate_b = self.param("gate_bias", nn.initializers.zeros, (2 * m,))

    keys = jax.random.split(key, l)

    def step(carry, xs):
      mk, mv = carry  # B G S M
      q_t, k_t, v_t, gl_t, sl_t, h_t, key_t = xs
      a = jax.nn.softmax(gl_t, -1)  # B G
      if self.read_groups:
        top = jax.lax.top_k(a, self.read_groups)[1]
        keep = jnp.sum(jax.nn.one_hot(top, g), axis=1)
        a_read = a * keep / jnp.sum(a * keep, -1, keepdims=True)
      else:
        a_read = a
      att = jax.nn.softmax(jnp.einsum("bm,bgsm->bgs", q_t, mk) * m**-0.5, -1)
      r = jnp.einsum("bg,bgs,bgsm->bm", a_read, att, mv)
      # write: hard group (straight-through) x Gumbel slot
      a_w = a + jax.lax.stop_gradient(jax.nn.one_hot(jnp.argmax(a, -1), g) - a) if self.hard else a
      z = (
        jax.nn.softmax(sl_t / self.tau, -1)
        if deterministic
        else gumbel_softmax(key_t, sl_t, self.tau, self.hard)
      )
      w = a_w[:, :, None] * z  # B G S
      k_sel = jnp.einsum("bgs,bgsm->bm", w, mk)
      v_sel = jnp.einsum("bgs,bgsm->bm", w, mv)
      u = jax.nn.sigmoid(jnp.concatenate([h_t, k_sel, v_sel], -1) @ gate_w + gate_b)
      u_k, u_v = jnp.split(u, 2, -1)
      # slot <- u * slot + (1 - u) * new, applied with weight w (a no-op where w = 0)
      new_k = u_k[:, None, None] * mk + (1 - u_k[:, None, None]) * k_t[:, None, None]
      new_v = u_v[:, None, None] * mv + (1 - u_v[:, None, None]) * v_t[:, None, None]
      mk = mk + w[..., None] * (new_k - mk)
      mv = mv + w[..., None] * (new_v - mv)
      return (mk, mv), r

    t_major = lambda x: jnp.moveaxis(x, 1, 0)
    init = (jnp.broadcast_to(mk0, (b, g, s, m)), jnp.broadcast_to(mv0, (b, g, s, m)))
    xs = tuple(t_major(x) for x in (q, k, v, group_logits, slot_logits, h_BxLxD)) + (keys,)
    mem, r = jax.lax.scan(step, init, xs)
    return nn.Dense(d, name="wo")(jnp.moveaxis(r, 0, 1)), mem
