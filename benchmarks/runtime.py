"""Overhead of the training runtime: chunked scan + logging + checkpoints vs a bare jitted loop.

  python -m benchmarks.runtime [--steps=2000] [--log_every=100]

Prints steps/s of both and their ratio (runtime / bare; > 1 means the scanned chunks win).
"""

import argparse
import tempfile
import time

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxlab.core import runtime


class State(struct.PyTreeNode):
  w: jax.Array
  opt_state: optax.OptState


TX = optax.adam(1e-3)


def update(state, batch, key):
  del key
  loss, g = jax.value_and_grad(lambda w: jnp.mean(jnp.tanh(batch @ w) ** 2))(state.w)
  upd, opt = TX.update(g, state.opt_state, state.w)
  return state.replace(w=optax.apply_updates(state.w, upd), opt_state=opt), {"loss": loss}


def main():
  p = argparse.ArgumentParser()
  p.add_argument("--steps", type=int, default=2000)
  p.add_argument("--log_every", type=int, default=100)
  p.add_argument("--dim", type=int, default=256)
  a = p.parse_args()
  w = jnp.zeros((a.dim, a.dim))
  batch = jax.random.normal(jax.random.key(0), (64, a.dim))
  init = State(w=w, opt_state=TX.init(w))
  key = jax.random.key_data(jax.random.key(0))

  step = jax.jit(update)
  s, _ = step(init, batch, key)  # compile
  jax.block_until_ready(s)
  t0 = time.perf_counter()
  s = init
  for i in range(a.steps):
    s, m = step(s, batch, jax.random.fold_in(key, i))
  jax.block_until_ready(s)
  bare = a.steps / (time.perf_counter() - t0)

  with tempfile.TemporaryDirectory() as d:
    runtime.train(
      init,
      update,
      num_steps=a.log_every,
      workdir=f"{d}/warm",
      key=key,
      data=batch,
      log_every=a.log_every,
      ckpt_every=0,
      progress=False,
      plot=False,
    )  # compile
    t0 = time.perf_counter()
    runtime.train(
      init,
      update,
      num_steps=a.steps,
      workdir=f"{d}/run",
      key=key,
      data=batch,
      log_every=a.log_every,
      ckpt_every=a.steps // 2,
      progress=False,
      plot=False,
    )
    ours = a.steps / (time.perf_counter() - t0)
  print(f"backend={jax.default_backend()} dim={a.dim} steps={a.steps}")
  print(f"bare jitted python loop : {bare:10.1f} steps/s")
  print(f"jaxlab runtime (chunks) : {ours:10.1f} steps/s (incl. CSV/TB logging, 2 checkpoints)")
  print(f"ratio runtime/bare      : {ours / bare:10.2f}")


if __name__ == "__main__":
  main()
