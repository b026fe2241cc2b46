"""LM stack: causality, context-parallel attention == dense (fwd+bwd), sharded step == unsharded."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxlab.core import runtime
from jaxlab.core.errors import ConfigError
from jaxlab.core.mesh import make_mesh
from jaxlab.core.train_state import TrainState
from jaxlab.lm import attention, train
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
  out = attention.dense_attention(*qkv)
  grads = jax.grad(_loss(attention.dense_attention), argnums=(0, 1, 2))(*qkv)
  return out, grads


def test_local_attention_matches_jax_nn(qkv, dense_ref):
  q, k, v = qkv
  pos = jnp.broadcast_to(jnp.arange(L), (B, L))
  np.testing.assert_allclose(attention.local_attention(q, k, v, pos, pos), dense_ref[0], atol=1e-5)


@pytest.mark.parametrize("impl", CP_IMPLS)
def test_context_parallel_equals_dense(impl, qkv, cp_mesh, dense_ref):
  fn = lambda q, k, v: attention.attention(q, k, v, impl=impl, mesh=cp_mesh)
  out = jax.jit(fn)(*qkv)
  grads = jax.jit(jax.grad(_loss(fn), argnums=(0, 1, 2)))(*qkv)
  np.testing.assert_allclose(out, dense_ref[0], atol=2e-5)
  for g, gr, name in zip(grads, dense_ref[1], "qkv"):
    np.testing.assert_allclose(g, gr, atol=5e-5, err_msg=f"d{name}")


def test_ring_zigzag_layout_equals_dense(qkv, cp_mesh, dense_ref):
  perm = attention.zigzag_permutation(L, 4)
  # Each shard holds one early and one late chunk: equal causal work per device.
  assert sorted(perm[: L // 4] // (L // 8)) == [0] * 4 + [7] * 4
  pos = jnp.broadcast_to(jnp.asarray(perm), (B, L))
  fn = lambda q, k, v: attention.attention(
    q[:, perm], k[:, perm], v[:, perm], pos, impl="ring", mesh=cp_mesh
  )
  grads = jax.jit(jax.grad(_loss(lambda *a: fn(*a)[:, np.argsort(perm)]), argnums=(0, 1, 2)))(*qkv)
  np.testing.assert_allclose(jax.jit(fn)(*qkv), dense_ref[0][:, perm], atol=2e-5)
  for g, gr in zip(grads, dense_ref[1]):
    np.testing.assert_allclose(g, gr, atol=5e-5)


def test_upipe_chunk_counts_and_errors(qkv, cp_mesh, dense_ref):
  out = jax.jit(
    lambda q, k, v: attention.attention(q, k, v, impl="upipe", mesh=cp_mesh, upipe_chunks=1)
  )(*qkv)
  np.testing.assert_allclose(out, dense_ref[0], atol=2e-5)
  with pytest.raises(ConfigError, match="upipe_chunks: 3 must divide"):
    attention.attention(*qkv, impl="upipe", mesh=cp_mesh, upipe_chunks=3)
  with pytest.raises(ConfigError, match="allowed"):
    attention.attention(*qkv, impl="flash")


# ------------------------------------------------------------------------------- model


TINY = LMConfig(
  vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8, mlp_dim=64
)


@pytest.mark.parametrize(
  "impl,mesh_spec",
  [("dense", None), pytest.param("ring", "data:2,context:4", marks=pytest.mark.slow)],
)
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
  f = lambda e: model.apply({"params": params}, tokens, embeds_BxLxD=e)[0] @ r  # (seq,)
  jac = jax.jit(jax.jacrev(f))(emb)  # seq x 2 x seq x D
  norms = np.asarray(jnp.linalg.norm(jac[:, 0], axis=-1))  # t x s
  assert np.all(norms[np.triu_indices(seq, 1)] == 0.0)
  assert np.all(norms[np.tril_indices(seq)] > 0.0)
  assert np.all(np.asarray(jac[:, 1]) == 0.0)  # examples do not mix


@pytest.fixture(scope="module")
def ref_step():
  """One unsharded dense AdamW step: (tx, tokens, loss, params after, initial state)."""
  tx = train.make_optimizer(lr=1e-2, warmup=1, total=10)
  state = train.create_state(TINY, tx, jax.random.key(0), seq_len=16)
  tokens = jax.random.randint(jax.random.key(5), (8, 17), 0, TINY.vocab_size)
  new, m = jax.jit(train.update)(state, {"tokens": tokens})
  return tx, tokens, float(m["loss"]), new.params, state


def test_state_is_core_train_state(ref_step):
  _, tokens, ref_loss, ref_params, state = ref_step
  assert isinstance(state, TrainState) and state.target_params is None

  @jax.jit
  def check(state, tokens):
    logits = state(tokens[:, :-1])  # the module travels with its parameters
    grads = jax.grad(lambda p: train.loss_fn(p, state, tokens)[0])(state.params)
    skipped = state.apply_gradients(grads=grads, enabled=jnp.bool_(False))
    return logits, skipped, state.apply_gradients(grads=grads)

  logits, skipped, taken = check(state, tokens)
  assert logits.shape == (8, 16, TINY.vocab_size)
  loss, _ = train.next_token_loss(logits, tokens[:, 1:])
  np.testing.assert_allclose(float(loss), ref_loss, rtol=1e-5)
  # The update is the core's apply_gradients: gated off, it changes nothing; on, it is the step.
  assert int(skipped.step) == 0 and int(taken.step) == 1
  jax.tree.map(np.testing.assert_array_equal, skipped.params, state.params)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6), taken.params, ref_params)


@pytest.mark.parametrize(
  "overrides,field",
  [
    ({"n_kv_heads": 3}, "config.n_kv_heads"),
    ({"n_kv_heads": 0}, "config.n_kv_heads"),
    ({"d_model": 0}, "config.d_model"),
    ({"attention": "flash"}, "config.attention"),
    ({"dtype": "float16"}, "config.dtype"),
    ({"head_dim": 7}, "config.head_dim"),
  ],
)
def test_lm_config_errors_name_the_field(overrides, field):
  with pytest.raises(ConfigError) as e:
    LMConfig(**{**TINY.__dict__, **overrides})
  assert e.value.field == field


def test_check_mesh_errors_name_the_field():
  mesh = make_mesh("data:2,context:4")
  ring = LMConfig(**{**TINY.__dict__, "attention": "ring"})
  ring.check_mesh(mesh, 16)  # 16 = 2 x context x 2: fine
  cases = [
    (TINY, 16, "config.attention"),  # dense attention on a context axis
    (ring, 12, "config.seq_len"),  # zigzag needs 2 x context blocks
    (
      LMConfig(**{**TINY.__dict__, "attention": "ulysses", "n_heads": 2, "n_kv_heads": 2}),
      16,
      "config.n_heads",
    ),
  ]
  for cfg, seq_len, field in cases:
    with pytest.raises(ConfigError) as e:
      cfg.check_mesh(mesh, seq_len)
    assert e.value.field == field, (cfg, seq_len)
  with pytest.raises(ConfigError) as e:
    train.create_state(TINY, optax.sgd(0.1), jax.random.key(0), seq_len=16, mesh=mesh)
  assert e.value.field == "config.attention"


@pytest.mark.parametrize("impl", ["ring", pytest.param("upipe", marks=pytest.mark.slow)])
def test_sharded_step_equals_unsharded(impl, ref_step):
  tx, tokens, ref_loss, ref_params, _ = ref_step
  mesh = make_mesh("data:2,fsdp:2,context:2")
  cfg = LMConfig(**{**TINY.__dict__, "attention": impl})
  state = train.create_state(cfg, tx, jax.random.key(0), seq_len=16, mesh=mesh)
  wq = state.params["block0"]["attn"]["wq"]
  assert wq.sharding.spec[0] == "fsdp"  # embed dim is FSDP-sharded
  new, m = jax.jit(train.update)(state, {"tokens": tokens})
  np.testing.assert_allclose(float(m["loss"]), ref_loss, rtol=1e-5)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=2e-5), new.params, ref_params)


# ------------------------------------------------------------------------------- checkpoint resume


def test_checkpoint_resume_equals_uninterrupted(tmp_path):
  """4 steps + resume to 8 gives the same params as 8 straight steps (core runtime, orbax)."""
  cfg = LMConfig(**{**TINY.__dict__, "n_layers": 1})
  tx = train.make_optimizer(lr=1e-2, warmup=1, total=8)
  corpus = jax.random.randint(jax.random.key(3), (512,), 0, cfg.vocab_size)
  sample = lambda d, k: {
    "tokens": jax.vmap(lambda s: jax.lax.dynamic_slice(d, (s,), (17,)))(
      jax.random.randint(k, (4,), 0, 400)
    )
  }
  init = train.create_state(cfg, tx, jax.random.key(0), seq_len=16)
  key = jax.random.key_data(jax.random.key(1))
  loop = lambda n: runtime.Loop(
    n, log_every=4, ckpt_every=4, progress=False, tensorboard=False, plot=False
  )
  kw = dict(key=key, data=corpus, sample_fn=sample)
  straight, _ = runtime.train(init, train.update, loop(8), workdir=tmp_path / "a", **kw)
  runtime.train(init, train.update, loop(4), workdir=tmp_path / "b", **kw)
  resumed, result = runtime.train(init, train.update, loop(8), workdir=tmp_path / "b", **kw)
  assert result.summary["resumed_from"] == 4 and int(resumed.step) == 8
  jax.tree.map(
    lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6), resumed.params, straight.params
  )


# ------------------------------------------------------------------------------- HPD


def _hpd_reference(ls, lt, y, y_hat):
  """NumPy transcription of the authors' compute_hpd_loss (per token, no padding)."""
  ls_y, lt_y = ls[y], lt[y]
  k1 = (lt_y - ls_y) * np.exp(ls_y)
  m1 = k1 > 0
  adv1 = np.exp(lt_y) + k1 if m1 else k1
  k1s = (lt[y_hat] - ls[y_hat]) * np.exp(ls[y_hat])
  m2 = k1s < 0
  adv2 = k1s if m2 else 0.0
  if m1 and m2:
    adv1 += np.exp(lt_y)
  return -ls_y * adv1 - adv2 * ls[y_hat] * (y != y_hat)


def test_hpd_matches_reference_and_vanishes_at_teacher():
  from jaxlab.lm import distill

  ks = jax.random.split(jax.random.key(0), 3)
  s = jax.random.normal(ks[0], (3, 5, 7)) * 2
  t = jax.random.normal(ks[1], (3, 5, 7)) * 2
  y = jax.random.randint(ks[2], (3, 5), 0, 7)
  loss, _ = distill.hpd_loss(s, t, y, None, sample="greedy")
  ls, lt = np.asarray(jax.nn.log_softmax(s)), np.asarray(jax.nn.log_softmax(t))
  yh = ls.argmax(-1)
  ref = np.mean(
    [
      _hpd_reference(ls[i, j], lt[i, j], int(y[i, j]), int(yh[i, j]))
      for i in range(3)
      for j in range(5)
    ]
  )
  np.testing.assert_allclose(float(loss), ref, rtol=1e-5)
  # Both masks switch on somewhere in this batch, so the comparison covers every branch.
  k1 = np.take_along_axis(lt - ls, np.asarray(y)[..., None], -1) > 0
  assert k1.any() and (~k1).any()
  # Student == teacher: every advantage is zero, so the gradient is zero (a fixed point, as for KL).
  g = jax.grad(lambda s_: distill.hpd_loss(s_, s, y, jax.random.key(1))[0])(s)
  np.testing.assert_allclose(g, 0.0, atol=1e-7)


def test_reweighted_kd_limits_are_forward_and_reverse_kl():
  from jaxlab.lm import distill

  ks = jax.random.split(jax.random.key(1), 2)
  s = jax.random.normal(ks[0], (2, 4, 9))
  t = jax.random.normal(ks[1], (2, 4, 9))
  grad = lambda f: jax.grad(f)(s)
  np.testing.assert_allclose(
    grad(lambda x: distill.reweighted_kd_loss(x, t, 1.0, 0.0)),
    grad(lambda x: distill.forward_kl(x, t)),
    atol=1e-6,
  )
  np.testing.assert_allclose(
    grad(lambda x: distill.reweighted_kd_loss(x, t, 0.0, 1.0)),
    grad(lambda x: distill.reverse_kl(x, t)),
    atol=1e-6,
  )
  # ... and the two limits really differ (mode covering vs mode seeking).
  assert (
    float(
      jnp.abs(
        grad(lambda x: distill.forward_kl(x, t)) - grad(lambda x: distill.reverse_kl(x, t))
      ).max()
    )
    > 1e-2
  )


# ------------------------------------------------------------------------ ARM (reconstruction)


def test_routed_memory_shapes_grads_causality():
  from jaxlab.lm.routed_memory import RoutedMemory, gumbel_softmax

  m = RoutedMemory(num_groups=2, slots_per_group=4, mem_dim=8, read_groups=1)
  h = jax.random.normal(jax.random.key(0), (2, 6, 16))
  key = jax.random.key(2)
  params = jax.jit(m.init)(jax.random.key(1), h, key)
  apply = jax.jit(m.apply)
  out, (mk, mv) = apply(params, h, key)
  assert out.shape == h.shape and mk.shape == mv.shape == (2, 2, 4, 8)
  grads = jax.jit(jax.grad(lambda p: jnp.sum(m.apply(p, h, key)[0] ** 2)))(params)
  for path, g in jax.tree_util.tree_leaves_with_path(grads):
    assert np.all(np.isfinite(g)) and np.abs(g).max() > 0, path
  # Output at t does not depend on inputs after t (read before write).
  h2 = h.at[:, 4:].set(0.0)
  np.testing.assert_allclose(apply(params, h2, key)[0][:, :4], out[:, :4], atol=1e-6)
  # Hard Gumbel-softmax is one-hot forward.
  z = gumbel_softmax(key, jnp.zeros((5, 4)))
  np.testing.assert_allclose(z.sum(-1), 1.0)
  np.testing.assert_allclose(z.max(-1), 1.0)
  # Gate saturated to "keep": memory never changes.
  p_keep = jax.tree_util.tree_map_with_path(
    lambda kp, x: jnp.full_like(x, 50.0) if "gate_bias" in str(kp) else x, params
  )
  _, (mk2, _) = apply(p_keep, h, key)
  np.testing.assert_allclose(mk2[0], params["params"]["mem_k"], atol=1e-6)


def test_upipe_attention_memory_falls_with_chunks():
  """UPipe's compiled fwd+bwd temp memory is well below Ulysses' and falls with the chunk count."""
  mesh = make_mesh("context:4", devices=jax.devices()[:4])
  q = jax.ShapeDtypeStruct((1, 512, 16, 16), jnp.float32)
  kv = jax.ShapeDtypeStruct((1, 512, 4, 16), jnp.float32)

  def temp(impl, chunks=0):
    f = lambda q, k, v: jnp.sum(
      attention.attention(q, k, v, impl=impl, mesh=mesh, upipe_chunks=chunks)
    )
    return (
      jax.jit(jax.grad(f, argnums=(0, 1, 2)))
      .lower(q, kv, kv)
      .compile()
      .memory_analysis()
      .temp_size_in_bytes
    )

  ulysses, up2, up4 = temp("ulysses"), temp("upipe", 2), temp("upipe", 4)
  assert up4 < up2 < ulysses
  assert up4 / ulysses < 0.5  # ~1/4 of the score/probability buffers live at once
