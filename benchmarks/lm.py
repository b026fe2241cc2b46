"""LM benchmarks: training tokens/s + MFU, and peak attention memory per context-parallel variant.

  python -m benchmarks.lm                      # both parts; GPU: the small preset, CPU: tiny
  python -m benchmarks.lm --part=throughput [--model=small|tiny] [--steps=20]
  python -m benchmarks.lm --part=memory [--seq=16384 --heads=64 --kv_heads=8 --context=8]

Throughput: steps/s of the jitted LM update on a preset of experiments/configs/lm.py; MFU = model
FLOPs (6N + attention, `jaxlab.lm.flops`) / step time / nominal peak, and the same against the
matmul throughput measured in this process (the reference, printed as a ratio).
Memory: per-device temp bytes of the compiled forward+backward of one attention layer, QKV and
output projections included (``jax.jit(...).lower(...).compile().memory_analysis()``; nothing is
executed, so long contexts are fine on CPU), at L and 2L: every variant should grow x2 (linear in
L). On CPU the memory part simulates ``--context`` devices itself. Reference: Ulysses; UPipe's
ratio should fall ~1/chunks (UPipe, arXiv 2602.21196: up to 87.5 % less).
"""

from __future__ import annotations

import os
import sys
import time

import jax
import jax.numpy as jnp
from absl import flags

from experiments.configs.lm import get_config as lm_preset
from jaxlab.core import experiment, resources
from jaxlab.core.errors import ConfigError, require
from jaxlab.core.mesh import make_mesh
from jaxlab.lm import attention, flops, train
from jaxlab.lm import memory as lm_memory
from jaxlab.lm.model import LMConfig, param_count

flags.DEFINE_enum("part", "all", ["all", "throughput", "memory"], "Which benchmark to run.")
flags.DEFINE_enum(
  "model", "auto", ["auto", "tiny", "small", "1b"], "Throughput preset (auto: small on GPU/TPU)."
)
flags.DEFINE_integer("batch", 0, "Throughput: sequences per step (0: the preset's).")
flags.DEFINE_integer("seq", 16384, "Memory: context length.")
flags.DEFINE_integer("heads", 64, "Memory: query heads.")
flags.DEFINE_integer("kv_heads", 8, "Memory: key/value heads.")
flags.DEFINE_integer("head_dim", 64, "Memory: per-head width.")
flags.DEFINE_integer("context", 8, "Memory: context-parallel degree (simulated devices on CPU).")
flags.DEFINE_integer("d_model", 4096, "Memory: model width (input of the projections).")
flags.DEFINE_integer("block", 512, "Memory: query/key block of the blockwise attention kernel.")
FLAGS = flags.FLAGS

DEFAULT_STEPS = 10  # timed steps of the throughput part (--steps overrides)
UNUSED_FLAGS = ("workdir", "mesh", "log_every", "ckpt_every", "keep", "profile", "seed")


def validate() -> int:
  for name in UNUSED_FLAGS:
    if FLAGS[name].present:
      raise ConfigError(name, "is not used by benchmarks.lm; remove it")
  steps = DEFAULT_STEPS if FLAGS.steps is None else FLAGS.steps
  require(steps >= 1, "steps", f"must be >= 1, got {steps}")
  require(FLAGS.batch >= 0, "batch", f"must be >= 0 (0: the preset's), got {FLAGS.batch}")
  for name in ("seq", "heads", "kv_heads", "head_dim", "context", "d_model", "block"):
    require(FLAGS[name].value >= 1, name, f"must be >= 1, got {FLAGS[name].value}")
  h, kh, p = FLAGS.heads, FLAGS.kv_heads, FLAGS.context
  require(h % kh == 0, "kv_heads", f"{kh} must divide heads={h}")
  require(h % p == 0, "heads", f"{h} must be divisible by context={p} (Ulysses)")
  require(FLAGS.seq % p == 0, "seq", f"{FLAGS.seq} must be divisible by context={p}")
  resources.check_int32("seq", 2 * FLAGS.seq, "the context length 2L")
  return steps


def _simulate_cpu_devices(n: int) -> None:
  """The memory part needs ``n`` devices; on CPU, ask XLA for them before the backend starts."""
  if os.environ.get("JAX_PLATFORMS", "") not in ("", "cpu"):
    return
  if "--xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    jax.config.update("jax_num_cpu_devices", n)


def _matmul_flops(dtype, reps: int = 10) -> float:
  n = 4096 if jax.default_backend() != "cpu" else 1024
  a = jnp.ones((n, n), dtype)
  f = jax.jit(lambda x: x @ x)
  f(a).block_until_ready()
  t = time.perf_counter()
  for _ in range(reps):
    out = f(a)
  out.block_until_ready()
  return 2 * n**3 * reps / (time.perf_counter() - t)


def _model(name: str, accelerator: bool) -> tuple[LMConfig, int, int]:
  c = lm_preset(name)
  dtype = c.dtype if accelerator else "float32"  # bfloat16 matmuls are emulated on CPU
  # Dense attention on one device: the preset's model otherwise (the attention part measures CP).
  cfg = LMConfig.from_config(c, dtype=dtype, attention="dense")
  return cfg, FLAGS.batch or c.batch_size, c.seq_len


def check_fits(name: str, cfg: LMConfig, batch: int, seq: int) -> None:
  """The preset's state and one batch's activations must fit (before anything is allocated)."""
  field = "batch" if FLAGS.batch else "model"
  resources.check_int32(field, batch * (seq + 1), "the tokens of a batch")
  n = lm_memory.param_count(cfg)
  need = lm_memory.STATE_BYTES * n + lm_memory.activation_bytes(cfg, batch, seq)
  what = (
    f"model={name} ({n / 1e6:.1f}M params and optimizer state) and a batch of {batch} x {seq} "
    f"tokens (logits: batch x seq x vocab {cfg.vocab_size})"
  )
  resources.check_fits(need, field, what)


def plan() -> tuple[str, LMConfig, int, int]:
  """The throughput part's preset, model, batch and sequence length, checked to fit."""
  accelerator = jax.default_backend() != "cpu"
  name = FLAGS.model if FLAGS.model != "auto" else ("small" if accelerator else "tiny")
  cfg, batch, seq = _model(name, accelerator)
  check_fits(name, cfg, batch, seq)
  return name, cfg, batch, seq


def throughput(steps: int, name: str, cfg: LMConfig, batch: int, seq: int) -> None:
  accelerator = jax.default_backend() != "cpu"
  tx = train.make_optimizer(3e-4, 10, 1000, 0.0)
  state = train.create_state(cfg, tx, jax.random.key(0), seq)
  n = param_count(state.params)
  tokens = jax.random.randint(jax.random.key(1), (batch, seq + 1), 0, cfg.vocab_size)
  step = jax.jit(train.update, donate_argnums=(0,) if accelerator else ())
  state, m = step(state, {"tokens": tokens})
  jax.block_until_ready(m)
  t = time.perf_counter()
  for _ in range(steps):
    state, m = step(state, {"tokens": tokens})
  jax.block_until_ready(m)
  dt = (time.perf_counter() - t) / steps
  achieved = flops.flops_per_token(cfg, seq, n) * batch * seq / dt
  mm = _matmul_flops(jnp.dtype(cfg.dtype))
  peak = flops.device_peak_flops()
  print(
    f"[throughput] model={name} ({n / 1e6:.1f}M params, {cfg.dtype}, batch {batch} x {seq}) "
    f"on {jax.devices()[0].device_kind}: {dt * 1e3:.1f} ms/step, {batch * seq / dt:,.0f} "
    f"tokens/s, {achieved / 1e12:.3f} TFLOP/s"
  )
  if peak:
    print(f"[throughput] MFU {100 * achieved / peak:.1f}% of {peak / 1e12:.0f} TFLOP/s peak")
  else:
    print("[throughput] MFU: not reported (no known peak for this device kind)")
  print(
    f"[throughput] reference: {mm / 1e12:.3f} TFLOP/s square matmul in this process; "
    f"LM / matmul = {achieved / mm:.2f}"
  )


def _temp_bytes(mesh, seq: int, impl: str, chunks: int = 0) -> int:
  """Per-device temp bytes of one attention layer's fwd+bwd (input gradient): x -> Q/K/V ->
  attention -> out.

  The projections are inside the measured function, so UPipe's per-chunk projections and
  Ulysses' all-heads Q/K/V/O (the tensors the paper's saving is about) are both counted.
  """
  b, h, kh, d, e = 1, FLAGS.heads, FLAGS.kv_heads, FLAGS.head_dim, FLAGS.d_model
  dt = jnp.bfloat16 if jax.default_backend() != "cpu" else jnp.float32
  x = jax.ShapeDtypeStruct((b, seq, e), dt)
  wq, wk = (jax.ShapeDtypeStruct((e, n, d), dt) for n in (h, kh))
  wo = jax.ShapeDtypeStruct((h, d, e), dt)
  pos = jnp.broadcast_to(jnp.arange(seq, dtype=jnp.int32), (b, seq))
  ident = lambda t, p: t  # RoPE is elementwise: it does not change the peak

  def layer(x, wq, wk, wv, wo):
    if impl == "upipe":
      return attention.upipe_attention(
        x,
        wq,
        wk,
        wv,
        wo,
        pos,
        mesh=mesh,
        rope=ident,
        upipe_chunks=chunks,
        dtype=dt,
        block=FLAGS.block,
      )
    q, k, v = (jnp.einsum("ble,ehd->blhd", x, w) for w in (wq, wk, wv))
    o = attention.attention(q, k, v, impl=impl, mesh=mesh, upipe_chunks=chunks, block=FLAGS.block)
    return jnp.einsum("blhd,hde->ble", o, wo)

  # Gradient w.r.t. the layer input only: the activation memory the paper measures (weight
  # gradients are the same in every variant and would hide the difference).
  loss = lambda *a: jnp.sum(layer(*a).astype(jnp.float32))
  grad = jax.jit(jax.grad(loss, argnums=0))
  return grad.lower(x, wq, wk, wk, wo).compile().memory_analysis().temp_size_in_bytes


def memory() -> None:
  p = FLAGS.context
  if jax.device_count() < p:
    print(f"[memory] needs {p} devices, have {jax.device_count()}; skipped")
    return
  mesh = make_mesh({"context": p}, devices=jax.devices()[:p])
  h, kh, d, seq = FLAGS.heads, FLAGS.kv_heads, FLAGS.head_dim, FLAGS.seq
  print(
    f"[memory] one causal attention layer (projections included), fwd+bwd, B=1 H={h} KV={kh} "
    f"D={d} d_model={FLAGS.d_model} context={p} block={FLAGS.block}; per-device temp MiB from "
    "memory_analysis() at L and 2L (linear in L: x2.0; an L x L buffer: x4)"
  )
  chunks = [c for c in (1, 2, 4, 8, 16) if c <= h // p and h % c == 0 and (h // c) % p == 0]
  variants = [("allgather", 0), ("ring", 0), ("ulysses", 0)] + [("upipe", c) for c in chunks]
  rows = {}
  for impl, c in variants:
    name = impl if impl != "upipe" else f"upipe(chunks={c})"
    rows[name] = [_temp_bytes(mesh, n, impl, c) for n in (seq, 2 * seq)]
  ref = rows["ulysses"][0]
  for name, (t1, t2) in rows.items():
    print(
      f"  {name:18s} L={seq}: {t1 / 2**20:9.1f} MiB  2L: {t2 / 2**20:9.1f} MiB  "
      f"growth x{t2 / t1:.2f}  / ulysses = {t1 / ref:.3f}"
    )
  last = rows[f"upipe(chunks={chunks[-1]})"][0]
  print(
    f"[memory] UPipe at {chunks[-1]} chunks uses {100 * (1 - last / ref):.1f}% less attention "
    f"temp memory than Ulysses (paper: up to 87.5% at 8 chunks, arXiv 2602.21196)"
  )


def main(argv) -> None:
  del argv
  steps = validate()
  if FLAGS.part in ("all", "memory"):
    _simulate_cpu_devices(FLAGS.context)
  planned = plan() if FLAGS.part in ("all", "throughput") else None  # refused before any output
  print(
    f"jax {jax.__version__}, backend {jax.default_backend()}, {jax.device_count()} devices",
    file=sys.stderr,
  )
  if FLAGS.part in ("all", "throughput"):
    throughput(steps, *planned)
  if FLAGS.part in ("all", "memory"):
    memory()


if __name__ == "__main__":
  experiment.run(main)
