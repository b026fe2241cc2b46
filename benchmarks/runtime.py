"""Overhead of the training runtime: chunked scan + logging + checkpoints vs a bare jitted loop.

  python -m benchmarks.runtime [--steps=2000] [--log_every=100] [--dim=256]

Prints steps/s of a Python loop over the jitted update, of ``runtime.train`` in memory (no
workdir) and with a workdir (CSV/TensorBoard logging and two checkpoints, in a temporary
directory), and the ratios runtime / bare (> 1 means the scanned chunks win). Compilation is
excluded from all three.
"""

from __future__ import annotations

import dataclasses
import tempfile
import time

import jax
import jax.numpy as jnp
import optax
from absl import flags

from jaxlab.core import experiment, resources, runtime
from jaxlab.core.errors import require
from jaxlab.core.train_state import TrainState

_DIM = flags.DEFINE_integer("dim", 256, "Width of the square weight matrix being trained.")


def create(dim: int) -> TrainState:
  apply = lambda variables, x: jnp.tanh(x @ variables["params"]["w"])
  return TrainState.create(apply, {"w": jnp.zeros((dim, dim))}, optax.adam(1e-3))


def update(state: TrainState, batch, key):
  del key

  def loss_fn(params):
    loss = jnp.mean(state(batch, params=params) ** 2)
    return loss, {"loss": loss}

  return state.apply_loss(loss_fn)


def bare_loop(state, batch, key, steps: int) -> float:
  """Steps/s of a Python loop over the jitted update (compiled before timing)."""
  step = jax.jit(update)
  jax.block_until_ready(step(state, batch, key))
  t0 = time.perf_counter()
  for i in range(steps):
    state, _ = step(state, batch, jax.random.fold_in(key, i))
  jax.block_until_ready(state)
  return steps / (time.perf_counter() - t0)


def _timed_train(state, batch, key, loop: runtime.Loop, workdir) -> float:
  t0 = time.perf_counter()
  final, _ = runtime.train(state, update, loop, key=key, data=batch, workdir=workdir)
  jax.block_until_ready(final)
  return time.perf_counter() - t0


def runtime_loop(state, batch, key, loop: runtime.Loop, workdir: str | None, repeats=3) -> float:
  """Steady-state steps/s of ``runtime.train``.

  Every ``train`` call compiles its chunk function anew, so a one-chunk run is timed too and
  subtracted: what remains is ``num_steps - log_every`` steps with their logging and checkpoints.
  An untimed first run pays the one-time costs (imports, TensorBoard and orbax set-up); the
  fastest of ``repeats`` timings of each kind is kept (other load on the machine only slows).
  """
  short = dataclasses.replace(loop, num_steps=loop.log_every)
  sub = lambda name: workdir and f"{workdir}/{name}"
  _timed_train(state, batch, key, short, sub("warm"))
  t_short = min(_timed_train(state, batch, key, short, sub(f"s{i}")) for i in range(repeats))
  t_full = min(_timed_train(state, batch, key, loop, sub(f"f{i}")) for i in range(repeats))
  return (loop.num_steps - loop.log_every) / max(t_full - t_short, 1e-9)


UNUSED_FLAGS = ("workdir", "mesh", "keep", "ckpt_every", "profile")


def main(argv):
  del argv
  steps = flags.FLAGS.steps
  require(steps is None or steps >= 1, "steps", f"must be >= 1, got {steps}")
  run = experiment.common(
    "runtime_benchmark",
    default_steps=2000,
    default_log_every=100,
    unused=UNUSED_FLAGS,
  )
  require(_DIM.value >= 1, "dim", f"must be >= 1, got {_DIM.value}")
  dim = _DIM.value
  resources.check_int32("dim", dim)
  # the weights, Adam's two moments, the gradients and the copies a checkpoint restore holds
  resources.check_fits(8 * 4 * dim * dim, "dim", f"a {dim} x {dim} weight matrix and its state")
  require(
    run.steps >= 2 * run.log_every,
    "steps",
    f"must be at least 2 * --log_every "
    f"({2 * run.log_every}) to time chunks after the first, got {run.steps}",
  )
  key = jax.random.key_data(jax.random.key(run.seed))
  batch = jax.random.normal(jax.random.key(run.seed + 1), (64, _DIM.value))
  state = create(_DIM.value)
  # checkpoints at chunk boundaries, so every chunk has the one compiled length
  ckpt_every = max(run.log_every, run.steps // 2 // run.log_every * run.log_every)
  loop = runtime.Loop(
    num_steps=run.steps,
    log_every=run.log_every,
    ckpt_every=ckpt_every,
    progress=False,
    plot=False,
  )

  bare = bare_loop(state, batch, key, run.steps)
  in_memory = runtime_loop(state, batch, key, loop, workdir=None)
  with tempfile.TemporaryDirectory() as d:
    on_disk = runtime_loop(state, batch, key, loop, workdir=d)
  print(
    f"backend={jax.default_backend()} dim={_DIM.value} steps={run.steps} log_every={run.log_every}"
  )
  print(f"bare jitted python loop   : {bare:10.1f} steps/s")
  print(f"runtime.train, in memory  : {in_memory:10.1f} steps/s  ratio {in_memory / bare:.2f}")
  print(
    f"runtime.train, workdir    : {on_disk:10.1f} steps/s  ratio {on_disk / bare:.2f} "
    f"(CSV/TensorBoard logging, a checkpoint every {ckpt_every} steps)"
  )


if __name__ == "__main__":
  experiment.run(main)
