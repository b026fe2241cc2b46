"""LM stack: causality, context-parallel attention == dense (fwd+bwd), sharded step == unsharded."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core.mesh import make_mesh
from jaxlab.lm import attention as A
from jaxlab.lm import train as T
from jaxlab.lm.model import LMConfig, Transformer

B, L, H, K, D = 2, 32, 8, 2, 8
CP_IMPLS = ("allgather", "ring", "ulysses", "upipe")


@pytest.fixture(scope="module")
def qkv():
  ks = jax.random.split(jax.random.key(0), 3)
  q = jax.random.normal(ks[0], (B, L, H, D))
  k = jax.random.normal(ks[1], (B, L, K, D))
  v = jax.random.normal(ks[2], (B, L, K, D))
  return q, k, v


@pytest.fixture(scope="module")
def cp_mesh():
  return make_mesh("data:2,context:4")


def _loss(fn):
  # A non-linear readout so gradient errors in any output element show up.
  return lambda q, k, v: jnp.sum(jnp.sin(fn(q, k, v)) * jnp.arange(D))


@pytest.fixture(scope="module")
def dense_ref(qkv):
  out = A.dense_attention(*qkv)
  grads = jax.grad(_loss(A.dense_attention), argnums=(0, 1, 2))(*qkv)
  return out, grads


def test_local_attention_matches_jax_nn(qkv, dense_ref):
  q, k, v = qkv
  pos = jnp.broadcast_to(jnp.arange(L), (B, L))
  np.testing.assert_allclose(A.local_attention(q, k, v, pos, pos), dense_ref[0], atol=1e-5)


@pytest.mark.parametrize("impl", CP_IMPLS)
def test_context_parallel_equals_dense(impl, qkv, cp_mesh, dense_ref):
  fn = lambda q, k, v: A.attention(q, k, v, impl=impl, mesh=cp_mesh)
  out = jax.jit(fn)(*qkv)
  grads = jax.jit(jax.grad(_loss(fn), argnums=(0, 1, 2)))(*qkv)
  np.testing.assert_allclose(out, dense_ref[0], atol=2e-5)
  for g, gr, name in zip(grads, dense_ref[1], "qkv"):
    np.testing.assert_allclose(g, gr, atol=5e-5, err_msg=f"d{name}")


def test_ring_zigzag_layout_equals_dense(qkv, cp_mesh, dense_ref):
  perm = A.zigzag_permutation(L, 4)
  # Each shard holds one early and one late chunk: equal causal work per device.
  assert sorted(perm[:L // 4] // (L // 8)) == [0] * 4 + [7] * 4
  pos = jnp.broadcast_to(jnp.asarray(perm), (B, L))
  fn = lambda q, k, v: A.attention(q[:, perm], k[:, perm], v[:, perm], pos, impl="ring",
                                   mesh=cp_mesh)
  grads = jax.jit(jax.grad(_loss(lambda *a: fn(*a)[:, np.argsort(perm)]), argnums=(0, 1, 2)))(*qkv)
  np.testing.assert_allclose(jax.jit(fn)(*qkv), dense_ref[0][:, perm], atol=2e-5)
  for g, gr in zip(grads, dense_ref[1]):
    np.testing.assert_allclose(g, gr, atol=5e-5)


def test_upipe_chunk_counts_and_errors(qkv, cp_mesh, dense_ref):
  out = jax.jit(lambda q, k, v: A.attention(q, k, v, impl="upipe", mesh=cp_mesh,
                                            upipe_chunks=1))(*qkv)
  np.testing.assert_allclose(out, dense_ref[0], atol=2e-5)
  with pytest.raises(ValueError, match="upipe_chunks=3"):
    A.attention(*qkv, impl="upipe", mesh=cp_mesh, upipe_chunks=3)
  with pytest.raises(ValueError, match="allowed"):
    A.attention(*qkv, impl="flash")


# ------------------------------------------------------------------------------- model


TINY = LMConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8,
                mlp_dim=64)


@pytest.mark.parametrize("impl,mesh_spec", [
    ("dense", None), pytest.param("ring", "data:2,context:4", marks=pytest.mark.slow)])
def test_causality_input_gradients(impl, mesh_spec):
  """d logits[t] / d input[s] is exactly zero for every future s > t, nonzero for s <= t."""
  mesh = None if mesh_spec is None else make_mesh(mesh_spec)
  cfg = LMConfig(**{**TINY.__dict__, "attention": impl})
  model = Transformer(cfg, mesh)
  seq = 16
  tokens = jnp.zeros((2, seq), jnp.int32)
  params = Transformer(cfg, None).init(jax.random.key(1), tokens)["params"]
  emb = jax.random.normal(jax.random.key(2), (2, seq, cfg.d_model))
  r = jax.random.normal(jax.random.key(3), (cfg.vocab_size,))
  f = lambda e: model.apply({"params": params}, tokens, embeds_BxLxD=e)[0] @ r   # (seq,)
  jac = jax.jit(jax.jacrev(f))(emb)                                     # seq x 2 x seq x D
  norms = np.asarray(jnp.linalg.norm(jac[:, 0], axis=-1))                # t x s
  assert np.all(norms[np.triu_indices(seq, 1)] == 0.0)
  assert np.all(norms[np.tril_indices(seq)] > 0.0)
  assert np.all(np.asarray(jac[:, 1]) == 0.0)  # examples do not mix


@pytest.fixture(scope="module")
def ref_step():
  """One unsharded dense AdamW step: (loss, params after)."""
  tx = T.make_optimizer(lr=1e-2, warmup=1, total=10)
  state = T.create_state(TINY, tx, jax.random.key(0), seq_len=16)
  tokens = jax.random.randint(jax.random.key(5), (8, 17), 0, TINY.vocab_size)
  new, m = jax.jit(T.update)(state, {"tokens": tokens})
  return tx, tokens, float(m["loss"]), new.params


@pytest.mark.parametrize("impl", ["ring", pytest.param("upipe", marks=pytest.mark.slow)])
def test_sharded_step_equals_unsharded(impl, ref_step):
  tx, tokens, ref_loss, ref_params = ref_step
  mesh = make_mesh("data:2,fsdp:2,context:2")
  cfg = LMConfig(**{**TINY.__dict__, "attention": impl})
  state = T.create_state(cfg, tx, jax.random.key(0), seq_len=16, mesh=mesh)
  wq = state.params["block0"]["attn"]["wq"]
  assert wq.sharding.spec[0] == "fsdp"          # embed dim is FSDP-sharded
  new, m = jax.jit(T.update)(state, {"tokens": tokens})
  np.testing.assert_allclose(float(m["loss"]), ref_loss, rtol=1e-5)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=2e-5), new.params, ref_params)
