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
from jaxlab.lm.config import get_config
from jaxlab.lm.model import LMConfig, Transformer

B, L, H, K, D = 2, 32, 8, 2, 8


@pytest.fixture(scope="module")
def qkv():
  ks = jax.random.split(jax.random.key(0), 3)
  q = jax.random.normal(ks[0], (B, L, H, D))
  k = jax.random.normal(ks[1], (B, L, K, D))
  v = jax.random.normal(ks[2], (B, L, K, D))
  return q, k, v


def _loss(fn, d=D):
  # A non-linear readout so gradient errors in any output element show up.
  return lambda q, k, v: jnp.sum(jnp.sin(fn(q, k, v)) * jnp.arange(d))


def _naive(q, k, v, qpos, kpos):
  """Independent NumPy-style reference: repeat KV heads, full masked softmax."""
  g = q.shape[2] // k.shape[2]
  k, v = jnp.repeat(k, g, axis=2), jnp.repeat(v, g, axis=2)
  s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(q.shape[-1])
  mask = qpos[:, None, :, None] >= kpos[:, None, None, :]
  p = jax.nn.softmax(jnp.where(mask, s, -jnp.inf), axis=-1)
  return jnp.einsum("bhqk,bkhd->bqhd", p, v)


def test_flash_attention_matches_naive_fwd_bwd_and_lse():
  """Blockwise kernel (several query/key blocks, padding, skipped blocks, permuted positions)."""
  lq = 21  # not a multiple of the block: padded queries and keys
  ks = jax.random.split(jax.random.key(1), 4)
  q = jax.random.normal(ks[0], (2, lq, 6, 4))
  k, v = (jax.random.normal(kk, (2, lq, 3, 4)) for kk in ks[1:3])
  pos = jnp.broadcast_to(jnp.asarray(np.random.default_rng(0).permutation(lq)), (2, lq))
  w = jax.random.normal(ks[3], (2, 3, 2, lq))  # LSE readout

  def both(q, k, v):
    o, lse = attention.flash_attention(q, k, v, pos, pos, 5)
    return jnp.sum(jnp.sin(o) * jnp.arange(4)) + jnp.sum(lse * w)

  def naive(q, k, v):
    s = jnp.einsum("bqkgd,bskd->bkgqs", q.reshape(2, lq, 3, 2, 4), k) / 2.0
    mask = pos[:, None, None, :, None] >= pos[:, None, None, None, :]
    lse = jax.nn.logsumexp(jnp.where(mask, s, -jnp.inf), axis=-1)
    return jnp.sum(jnp.sin(_naive(q, k, v, pos, pos)) * jnp.arange(4)) + jnp.sum(lse * w)

  (val, grads), (ref, ref_grads) = jax.jit(
    lambda *a: (jax.value_and_grad(both, (0, 1, 2))(*a), jax.value_and_grad(naive, (0, 1, 2))(*a))
  )(q, k, v)
  np.testing.assert_allclose(val, ref, atol=5e-4)  # a sum of ~300 float32 terms
  for g, r, name in zip(grads, ref_grads, "qkv"):
    np.testing.assert_allclose(g, r, atol=2e-5, err_msg=f"d{name}")


# Context-parallel attention == dense, forward and gradients, over layouts the model meets:
# (impl, mesh, seq, heads, kv heads, kernel block). Local lengths 5 and 7 are odd; K=1 is MQA;
# context 3 is odd; tensor x context shards heads two ways (KV heads repeated for the tensor axis).
CP_CASES = [
  pytest.param("ring", "data:2,context:4", 20, 8, 2, 2, marks=pytest.mark.slow),
  ("ring", "context:3", 21, 4, 1, 4),
  ("allgather", "context:3", 21, 6, 3, 4),
  ("ulysses", "context:2,tensor:4", 16, 8, 2, 3),
  ("ulysses", "context:4", 20, 8, 1, 8),
  ("upipe", "context:2,tensor:2", 14, 8, 1, 4),
  pytest.param("upipe", "data:2,context:4", 32, 8, 2, 512, marks=pytest.mark.slow),
]


def _mesh(spec):
  n = int(np.prod([int(p.split(":")[1]) for p in spec.split(",")]))
  return make_mesh(spec, devices=jax.devices()[:n])


@pytest.mark.parametrize("impl,spec,seq,h,kh,block", CP_CASES)
def test_context_parallel_equals_dense(impl, spec, seq, h, kh, block):
  mesh = _mesh(spec)
  ks = jax.random.split(jax.random.key(seq + h), 3)
  q = jax.random.normal(ks[0], (2, seq, h, D))
  k, v = (jax.random.normal(kk, (2, seq, kh, D)) for kk in ks[1:])
  pos = jnp.broadcast_to(jnp.arange(seq), (2, seq))
  fn = lambda q, k, v: attention.attention(q, k, v, impl=impl, mesh=mesh, block=block)
  out, grads = jax.jit(lambda *a: (fn(*a), jax.grad(_loss(fn), (0, 1, 2))(*a)))(q, k, v)
  ref = lambda q, k, v: _naive(q, k, v, pos, pos)
  ref_out, ref_grads = ref(q, k, v), jax.grad(_loss(ref), (0, 1, 2))(q, k, v)
  np.testing.assert_allclose(out, ref_out, atol=2e-5)
  for g, gr, name in zip(grads, ref_grads, "qkv"):
    np.testing.assert_allclose(g, gr, atol=5e-5, err_msg=f"d{name}")


def test_ring_zigzag_layout_equals_dense(qkv):
  mesh = _mesh("data:2,context:4")
  perm = attention.zigzag_permutation(L, 4)
  # Each shard holds one early and one late chunk: equal causal work per device.
  assert sorted(perm[: L // 4] // (L // 8)) == [0] * 4 + [7] * 4
  pos = jnp.broadcast_to(jnp.asarray(perm), (B, L))
  fn = lambda q, k, v: attention.attention(
    q[:, perm], k[:, perm], v[:, perm], pos, impl="ring", mesh=mesh
  )[:, np.argsort(perm)]
  out, grads = jax.jit(lambda *a: (fn(*a), jax.grad(_loss(fn), (0, 1, 2))(*a)))(*qkv)
  nat = jnp.broadcast_to(jnp.arange(L), (B, L))
  ref = lambda q, k, v: _naive(q, k, v, nat, nat)
  np.testing.assert_allclose(out, ref(*qkv), atol=2e-5)
  for g, gr in zip(grads, jax.grad(_loss(ref), (0, 1, 2))(*qkv)):
    np.testing.assert_allclose(g, gr, atol=5e-5)


def test_head_layouts_that_cannot_run_name_the_field(qkv):
  mesh = _mesh("data:2,context:4")
  with pytest.raises(ConfigError) as e:
    attention.attention(*qkv, impl="upipe", mesh=mesh, upipe_chunks=3)
  assert e.value.field == "upipe_chunks"
  with pytest.raises(ConfigError) as e:  # 8 heads / tensor 2 = 4 per shard: not 3 context ways
    attention.check_heads("ulysses", 8, 2, context=3, tensor=2)
  assert e.value.field == "n_heads"
  with pytest.raises(ConfigError) as e:
    attention.check_heads("dense", 6, 2, context=1, tensor=4)
  assert e.value.field == "n_heads"
  assert attention.check_heads("upipe", 16, 1, context=2, tensor=2) == 4  # one head/device/stage
  assert attention.kv_repeats(2, 8) == 4 and attention.kv_repeats(3, 2) == 2
  with pytest.raises(ConfigError, match="allowed"):
    attention.attention(*qkv, impl="flash")


def _attn_temp_bytes(impl, mesh, seq, h=16, kh=4, d=16, chunks=0, block=64):
  """Compiled fwd+bwd temp bytes per device of one attention layer (projections included)."""
  e = 32
  x = jax.ShapeDtypeStruct((1, seq, e), jnp.float32)
  ws = [jax.ShapeDtypeStruct(s, jnp.float32) for s in [(e, h, d), (e, kh, d), (e, kh, d)]]
  wo = jax.ShapeDtypeStruct((h, d, e), jnp.float32)
  pos = jnp.broadcast_to(jnp.arange(seq), (1, seq))
  ident = lambda t, p: t

  def layer(x, wq, wk, wv, wo):
    if impl == "upipe":
      return attention.upipe_attention(
        x, wq, wk, wv, wo, pos, mesh=mesh, rope=ident, upipe_chunks=chunks, block=block
      )
    q, k, v = (jnp.einsum("ble,ehd->blhd", x, w) for w in (wq, wk, wv))
    o = attention.attention(q, k, v, impl=impl, mesh=mesh, block=block)
    return jnp.einsum("blhd,hde->ble", o, wo)

  f = jax.grad(lambda *a: jnp.sum(layer(*a)), argnums=(0, 1, 2, 3, 4))
  return jax.jit(f).lower(x, *ws, wo).compile().memory_analysis().temp_size_in_bytes


def test_attention_memory_is_linear_in_length_and_upipe_saves():
  """Doubling L at most ~doubles every variant's temp memory (an L x L buffer would 4x it), and
  UPipe keeps a fraction of Ulysses' (post-all-to-all Q/K/V/O of one chunk, not all heads)."""
  mesh = _mesh("context:4")
  temps = {impl: [_attn_temp_bytes(impl, mesh, n) for n in (1024, 2048)] for impl in IMPLS_MEM}
  for impl, (short, long) in temps.items():
    assert long / short < 2.3, (impl, temps[impl])
  assert temps["upipe"][1] < 0.5 * temps["ulysses"][1], temps


IMPLS_MEM = ("ulysses", "upipe")  # ring and allgather: benchmarks.lm --part=memory


# ------------------------------------------------------------------------------- model


TINY = LMConfig.from_config(
  get_config(),
  vocab_size=64,
  d_model=32,
  n_layers=2,
  n_heads=8,
  n_kv_heads=2,
  head_dim=4,
  mlp_dim=64,
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


def _grads_and_step(state, tokens):
  grads = jax.grad(lambda p: train.loss_fn(p, state, tokens)[0])(state.params)
  return grads, train.update(state, {"tokens": tokens})


def _grads_and_applied(state, tokens):
  """The gradients, the optimizer applied to exactly those, and `train.update`'s metrics.

  `train.update` computes its own gradients in a separately fused program; on a weight whose
  gradient is near 0, Adam's g / (|g| + eps) magnifies that rounding difference up to ~lr.
  """
  grads = jax.grad(lambda p: train.loss_fn(p, state, tokens)[0])(state.params)
  _, metrics = train.update(state, {"tokens": tokens})
  return grads, (state.apply_gradients(grads=grads), metrics)


@pytest.fixture(scope="module")
def ref_step():
  """One unsharded dense AdamW step: (tx, tokens, loss, params after, initial state, grads)."""
  tx = train.make_optimizer(lr=1e-2, warmup=1, total=10, wd=0.0)
  state = train.create_state(TINY, tx, jax.random.key(0), seq_len=16)
  tokens = jax.random.randint(jax.random.key(5), (8, 17), 0, TINY.vocab_size)
  grads, (new, m) = jax.jit(_grads_and_step)(state, tokens)
  return tx, tokens, float(m["loss"]), new.params, state, grads


def test_first_step_is_not_a_no_op(ref_step):
  """Warmup starts at lr / warmup at step 0 (not 0): Adam's first step moves weights by ~lr."""
  _, _, _, new_params, state, _ = ref_step
  moved = max(
    float(jnp.abs(a - b).max()) for a, b in zip(*map(jax.tree.leaves, (new_params, state.params)))
  )
  np.testing.assert_allclose(moved, 1e-2, rtol=0.05)
  sched = train.schedule(1e-2, warmup=4, total=100)
  np.testing.assert_allclose([sched(0), sched(3), sched(99)], [2.5e-3, 1e-2, 1e-3], rtol=1e-5)


def test_state_is_core_train_state(ref_step):
  _, tokens, ref_loss, ref_params, state, _ = ref_step
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
    ({"remat": "yes"}, "config.remat"),
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
    (
      LMConfig(**{**TINY.__dict__, "attention": "upipe", "upipe_chunks": 3}),
      16,
      "config.upipe_chunks",
    ),
  ]
  for cfg, seq_len, field in cases:
    with pytest.raises(ConfigError) as e:
      cfg.check_mesh(mesh, seq_len)
    assert e.value.field == field, (cfg, seq_len)
  with pytest.raises(ConfigError) as e:
    train.create_state(TINY, optax.sgd(0.1), jax.random.key(0), seq_len=16, mesh=mesh)
  assert e.value.field == "config.attention"


@pytest.mark.parametrize(
  "impl,spec",
  [
    ("ring", "data:2,fsdp:2,context:2"),
    ("upipe", "data:2,context:2,tensor:2"),  # 2 chunks of projections; 1 KV head per tensor shard
    ("dense", "data:2,tensor:4"),  # 2 KV heads < tensor 4: replicated weights, repeated heads
    pytest.param("ulysses", "fsdp:2,context:4", marks=pytest.mark.slow),
    pytest.param("allgather", "data:2,context:2,tensor:2", marks=pytest.mark.slow),
  ],
)
def test_sharded_step_equals_unsharded(impl, spec, ref_step):
  """Gradients (compared directly: Adam and clipping hide a scaled gradient) and the step."""
  tx, tokens, ref_loss, ref_params, _, ref_grads = ref_step
  mesh = make_mesh(spec)
  cfg = LMConfig(**{**TINY.__dict__, "attention": impl})
  state = train.create_state(cfg, tx, jax.random.key(0), seq_len=16, mesh=mesh)
  wq = state.params["blocks"]["attn"]["wq"]  # layers x embed x heads x head_dim
  assert wq.sharding.spec[1] == ("fsdp" if "fsdp" in spec else None)
  assert wq.sharding.spec[2] == ("tensor" if "tensor" in spec else None)
  grads, (new, m) = jax.jit(_grads_and_applied)(state, tokens)
  np.testing.assert_allclose(float(m["loss"]), ref_loss, rtol=1e-5)
  for (path, g), r in zip(jax.tree_util.tree_leaves_with_path(grads), jax.tree.leaves(ref_grads)):
    np.testing.assert_allclose(g, r, atol=1e-6, rtol=1e-4, err_msg=jax.tree_util.keystr(path))
  # The step: the sharded optimizer (global norm over shards, sharded moments) against the unsharded
  # one, both on the very gradients checked above. Against ref_params, or against train.update's
  # own gradients, Adam's g / (|g| + eps) turns a rounding difference within the tolerance above
  # into up to lr on a weight whose gradient is near 0 (2e-6 to 4e-5 on one weight of 2048).
  ref_state = ref_step[4]
  host_grads = jax.device_get(grads)
  updates, _ = tx.update(host_grads, ref_state.opt_state, ref_state.params)
  expected = optax.apply_updates(ref_state.params, updates)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=2e-6), new.params, expected)


# ------------------------------------------------------------------------------- checkpoint resume


def test_checkpoint_resume_equals_uninterrupted(tmp_path):
  """4 steps + resume to 8 gives the same params as 8 straight steps (core runtime, orbax)."""
  cfg = LMConfig(**{**TINY.__dict__, "n_layers": 1})
  tx = train.make_optimizer(lr=1e-2, warmup=1, total=8, wd=0.0)
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
  # The non-greedy (LlamaFactory, multinomial) branch: the same draw the loss makes.
  key = jax.random.key(7)
  loss_m, _ = distill.hpd_loss(s, t, y, key, sample="multinomial")
  ys = np.asarray(jax.random.categorical(key, jnp.asarray(ls), axis=-1))
  assert (ys != yh).any()  # a different branch from greedy
  ref_m = np.mean(
    [
      _hpd_reference(ls[i, j], lt[i, j], int(y[i, j]), int(ys[i, j]))
      for i in range(3)
      for j in range(5)
    ]
  )
  np.testing.assert_allclose(float(loss_m), ref_m, rtol=1e-5)
  # Ignored (-100) labels: finite, and equal to masking those tokens out.
  y_ign = y.at[0, :2].set(-100)
  mask = np.ones((3, 5), bool)
  mask[0, :2] = False
  ign, _ = distill.hpd_loss(s, t, y_ign, None, sample="greedy")
  masked, _ = distill.hpd_loss(s, t, y, None, mask_BxL=jnp.asarray(mask), sample="greedy")
  assert np.isfinite(float(ign))
  np.testing.assert_allclose(float(ign), float(masked), rtol=1e-6)
  nll_ign, _ = train.next_token_loss(s, y_ign)
  nll_masked, _ = train.next_token_loss(s, y, jnp.asarray(mask, jnp.float32))
  np.testing.assert_allclose(float(nll_ign), float(nll_masked), rtol=1e-6)
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
