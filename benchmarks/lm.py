"""LM benchmarks: training tokens/s + MFU, and peak attention memory per context-parallel variant.

  python -m benchmarks.lm                      # both parts; GPU: ~100M model, CPU: tiny model
  python -m benchmarks.lm --part=throughput [--model=small|tiny] [--steps=20]
  python -m benchmarks.lm --part=memory [--seq=16384 --heads=64 --kv_heads=8 --context=8]

Throughput: steps/s of the jitted LM update; MFU = 6N+attention FLOPs / step time / peak, and the
same against the matmul throughput measured in this process (the reference, printed as a ratio).
Memory: per-device temp bytes of the compiled forward+backward of causal attention
(``jax.jit(...).lower(...).compile().memory_analysis()``; nothing is executed, so long contexts are
fine on CPU). The memory part needs ``context`` simulated devices on CPU: it sets
``XLA_FLAGS=--xla_force_host_platform_device_count`` itself when run on CPU. Reference: Ulysses;
UPipe's ratio should fall ~1/chunks (UPipe paper: 87.5 % less at 8 chunks).
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def _args():
  p = argparse.ArgumentParser()
  p.add_argument("--part", default="all", choices=["all", "throughput", "memory"])
  p.add_argument("--model", default="auto", choices=["auto", "tiny", "small"])
  p.add_argument("--steps", type=int, default=10)
  p.add_argument("--batch", type=int, default=0, help="0: the preset's")
  p.add_argument("--seq", type=int, default=16384, help="memory part: context length")
  p.add_argument("--heads", type=int, default=64)
  p.add_argument("--kv_heads", type=int, default=8)
  p.add_argument("--head_dim", type=int, default=64)
  p.add_argument("--context", type=int, default=8, help="memory part: context-parallel degree")
  return p.parse_args()


ARGS = _args()
if (
  ARGS.part in ("all", "memory")
  and "--xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", "")
  and os.environ.get("JAX_PLATFORMS", "") in ("", "cpu")
):
  os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={ARGS.context}"
  ).strip()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from jaxlab.core.mesh import make_mesh  # noqa: E402
from jaxlab.lm import attention as A  # noqa: E402
from jaxlab.lm import train as T  # noqa: E402
from jaxlab.lm.model import LMConfig, flops_per_token, param_count  # noqa: E402

PEAK_TFLOPS = {"h200": 989, "h100": 989, "a100": 312, "v5p": 459, "v4": 275, "l4": 121}


def _peak():
  kind = jax.devices()[0].device_kind.lower()
  for k, v in PEAK_TFLOPS.items():
    if k in kind:
      return v * 1e12, kind
  return None, kind


def _matmul_flops(dtype, n=4096 if jax.default_backend() != "cpu" else 1024, reps=10):
  a = jnp.ones((n, n), dtype)
  f = jax.jit(lambda x: x @ x)
  f(a).block_until_ready()
  t = time.perf_counter()
  for _ in range(reps):
    out = f(a)
  out.block_until_ready()
  return 2 * n**3 * reps / (time.perf_counter() - t)


def throughput():
  gpu = jax.default_backend() != "cpu"
  model = ARGS.model if ARGS.model != "auto" else ("small" if gpu else "tiny")
  if model == "small":  # ~100M params (GPT-2-small-like, GQA, 32k vocab)
    cfg = LMConfig(
      vocab_size=32768,
      d_model=768,
      n_layers=12,
      n_heads=12,
      n_kv_heads=4,
      head_dim=64,
      mlp_dim=2048,
      dtype="bfloat16" if gpu else "float32",
    )
    batch, seq = ARGS.batch or 16, 1024
  else:
    cfg = LMConfig(
      vocab_size=256, d_model=128, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=32, mlp_dim=384
    )
    batch, seq = ARGS.batch or 8, 128
  tx = T.make_optimizer(3e-4, 10, 1000)
  state = T.create_state(cfg, tx, jax.random.key(0), seq)
  n = param_count(state.params)
  tokens = jax.random.randint(jax.random.key(1), (batch, seq + 1), 0, cfg.vocab_size)
  step = jax.jit(T.update, donate_argnums=(0,) if gpu else ())
  state, m = step(state, {"tokens": tokens})
  jax.block_until_ready(m)
  t = time.perf_counter()
  for _ in range(ARGS.steps):
    state, m = step(state, {"tokens": tokens})
  jax.block_until_ready(m)
  dt = (time.perf_counter() - t) / ARGS.steps
  fpt = flops_per_token(cfg, seq, n)
  achieved = fpt * batch * seq / dt
  mm = _matmul_flops(jnp.dtype(cfg.dtype))
  peak, kind = _peak()
  print(
    f"[throughput] model={model} ({n / 1e6:.1f}M params, {cfg.dtype}, batch {batch} x {seq}) "
    f"on {kind}: {dt * 1e3:.1f} ms/step, {batch * seq / dt:,.0f} tokens/s, "
    f"{achieved / 1e12:.3f} TFLOP/s"
  )
  if peak:
    print(
      f"[throughput] MFU {100 * achieved / peak:.1f}% of {peak / 1e12:.0f} TFLOP/s nominal peak"
    )
  else:
    print("[throughput] MFU: no nominal peak for this device kind")
  print(
    f"[throughput] reference: {mm / 1e12:.3f} TFLOP/s square matmul in this process; "
    f"LM / matmul = {achieved / mm:.2f}"
  )


def memory():
  p = ARGS.context
  if jax.device_count() < p:
    print(f"[memory] needs {p} devices, have {jax.device_count()}; skipped")
    return
  mesh = make_mesh({"context": p}, devices=jax.devices()[:p])
  b, l, h, kh, d = 1, ARGS.seq, ARGS.heads, ARGS.kv_heads, ARGS.head_dim
  dt = jnp.bfloat16 if jax.default_backend() != "cpu" else jnp.float32
  q = jax.ShapeDtypeStruct((b, l, h, d), dt)
  kv = jax.ShapeDtypeStruct((b, l, kh, d), dt)

  def temp_bytes(impl, chunks=0):
    f = lambda q, k, v: A.attention(q, k, v, impl=impl, mesh=mesh, upipe_chunks=chunks)
    loss = lambda q, k, v: jnp.sum(f(q, k, v).astype(jnp.float32))
    comp = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2))).lower(q, kv, kv).compile()
    ma = comp.memory_analysis()
    return ma.temp_size_in_bytes, ma.argument_size_in_bytes

  print(
    f"[memory] causal attention fwd+bwd, B={b} L={l} H={h} KV={kh} D={d} {jnp.dtype(dt).name}, "
    f"context={p}; per-device temp bytes from memory_analysis()"
  )
  rows = {}
  for impl in ("allgather", "ring", "ulysses"):
    rows[impl] = temp_bytes(impl)[0]
  max_chunks = h // p
  chunks = [c for c in (1, 2, 4, 8, 16) if c <= max_chunks and h % c == 0 and (h // c) % p == 0]
  for c in chunks:
    rows[f"upipe(chunks={c})"] = temp_bytes("upipe", c)[0]
  ref = rows["ulysses"]
  for name, t in rows.items():
    print(f"  {name:18s} {t / 2**20:10.1f} MiB   / ulysses = {t / ref:.3f}")
  last = rows[f"upipe(chunks={chunks[-1]})"]
  print(
    f"[memory] UPipe at {chunks[-1]} chunks uses {100 * (1 - last / ref):.1f}% less attention "
    f"temp memory than Ulysses (paper: up to 87.5% at 8 chunks)"
  )


if __name__ == "__main__":
  print(
    f"jax {jax.__version__}, backend {jax.default_backend()}, {jax.device_count()} devices",
    file=sys.stderr,
  )
  if ARGS.part in ("all", "throughput"):
    throughput()
  if ARGS.part in ("all", "memory"):
    memory()
