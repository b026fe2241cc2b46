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
  assert sorted(perm[: L // 4] // (L // 8)) == [0] * 4 + [7] * 4
  pos = jnp.broadcast_to(jnp.asarray(perm), (B, L))
  fn = lambda q, k, v: A.attention(
    q[:, perm], k[:, perm], v[:, perm], pos, impl="ring", mesh=cp_mesh
  )
  grads = jax.jit(jax.grad(_loss(lambda *a: fn(*a)[:, np.argsort(perm)]), argnums=(0, 1, 2)))(*qkv)
  np.testing.assert_allclose(jax.jit(fn)(*qkv), dense_ref[0][:, perm], atol=2e-5)
  for g, gr in zip(grads, dense_ref[1]):
    np.testing.assert_allclose(g, gr, atol=5e-5)


def test_upipe_chunk_counts_and_errors(qkv, cp_mesh, dense_ref):
  out = jax.jit(lambda q, k, v: A.attention(q, k, v, impl="upipe", mesh=cp_mesh, upipe_chunks=1))(
    *qkv
  )
  np.testing.assert_allclose(out, dense_ref[0], atol=2e-5)
  with pytest.raises(ValueError, match="upipe_chunks=3"):
    A.attention(*qkv, impl="upipe", mesh=cp_mesh, upipe_chunks=3)
  with pytest.raises(ValueError, match="allowed"):
    A.attention(*qkv, impl="flash")


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
  assert wq.sharding.spec[0] == "fsdp"  # embed dim is FSDP-sharded
  new, m = jax.jit(T.update)(state, {"tokens": tokens})
  np.testing.assert_allclose(float(m["loss"]), ref_loss, rtol=1e-5)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=2e-5), new.params, ref_params)


# ------------------------------------------------------------------------------- checkpoint resume


def test_checkpoint_resume_equals_uninterrupted(tmp_path):
  """4 steps + resume to 8 gives the same params as 8 straight steps (core runtime, orbax)."""
  from jaxlab.core import runtime

  cfg = LMConfig(**{**TINY.__dict__, "n_layers": 1})
  tx = T.make_optimizer(lr=1e-2, warmup=1, total=8)
  corpus = jax.random.randint(jax.random.key(3), (512,), 0, cfg.vocab_size)
  sample = lambda d, k: {
    "tokens": jax.vmap(lambda s: jax.lax.dynamic_slice(d, (s,), (17,)))(
      jax.random.randint(k, (4,), 0, 400)
    )
  }
  init = T.create_state(cfg, tx, jax.random.key(0), seq_len=16)
  fresh = lambda: init  # states are immutable pytrees (no donation on CPU)
  kw = dict(
    key=jax.random.key_data(jax.random.key(1)),
    data=corpus,
    sample_fn=sample,
    log_every=4,
    ckpt_every=4,
    progress=False,
    use_tensorboard=False,
    plot=False,
  )
  straight, _ = runtime.train(fresh(), T.update, num_steps=8, workdir=tmp_path / "a", **kw)
  runtime.train(fresh(), T.update, num_steps=4, workdir=tmp_path / "b", **kw)
  resumed, summary = runtime.train(fresh(), T.update, num_steps=8, workdir=tmp_path / "b", **kw)
  assert summary["resumed_from"] == 4 and int(resumed.step) == 8
  jax.tree.map(
    lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6), resumed.params, straight.params
  )


@pytest.mark.slow  # ~30 s CPU (fresh JAX import + compile); in-process tests cover the same paths
def test_experiment_cli_mesh_run(tmp_path):
  """`python -m experiments.lm --config=tiny` on data:2,fsdp:2,context:2 trains and writes outputs."""
  import json, os, subprocess, sys

  env = {
    **os.environ,
    "XLA_FLAGS": "--xla_force_host_platform_device_count=8",
    "JAX_PLATFORMS": "cpu",
  }
  cmd = [
    sys.executable,
    "-m",
    "experiments.lm",
    "--config=tiny",
    f"--workdir={tmp_path}/run",
    "--steps=4",
    "--log_every=2",
    "--mesh=data:2,fsdp:2,context:2",
    "--config.attention=ulysses",
    "--config.seq_len=32",
    "--config.corpus_tokens=4000",
    "--config.n_layers=1",
  ]
  out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
  assert out.returncode == 0, out.stderr[-2000:]
  assert "tokens/s" in out.stdout and "MFU" in out.stdout
  summary = json.loads((tmp_path / "run" / "summary.json").read_text())
  assert (
    summary["step"] == 4 and np.isfinite(summary["train/loss"]) and summary["tokens_per_sec"] > 0
  )
  assert (tmp_path / "run" / "tb").exists() and (tmp_path / "run" / "checkpoints").exists()
  bad = subprocess.run(
    cmd[:3] + ["--config.attention=flash"], env=env, capture_output=True, text=True, timeout=120
  )
  assert bad.returncode == 2 and "--config.attention" in bad.stderr


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


# ------------------------------------------------------------------------------- ARM (reconstruction)


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
    f = lambda q, k, v: jnp.sum(A.attention(q, k, v, impl=impl, mesh=mesh, upipe_chunks=chunks))
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
