"""What a chunk boundary costs PPO: the same iterations in one compiled call or in many.

  python -m benchmarks.ppo_calls                        # CartPole, 4 envs x 128 steps, 480 its
  python -m benchmarks.ppo_calls --num_envs=64 --iterations=240 --calls=1,10,60

jaxlab's PPO iteration (``ppo.make_update`` with the PureJaxRL CartPole config of
``benchmarks.ppo``) runs through ``runtime.make_chunk_fn`` (the program a run executes), from the
same state, over the same iterations and keys, as ``--calls`` chunks of equal length; each chunk's
state feeds the next and its metrics are read before the next call, as ``runtime.train`` does.
``--reference`` (default on) also times the reference PPO of ``benchmarks.ppo`` (one jitted
``train``, PureJaxRL's style) over as many iterations, in the same rounds: its ratio to jaxlab's
one call is what the update itself costs, apart from the chunking. ``--pipelined`` also
dispatches each chunk before reading the previous chunk's metrics. Rounds
alternate the variants (the load changes slowly). Printed per variant: the median wall and CPU
seconds over ``--rounds`` and the ratio to one call (> 1: slower), with the load before and after.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags

from benchmarks import ppo as bench_ppo
from jaxlab.core import experiment, runtime
from jaxlab.rl import ppo

UNUSED_FLAGS = ("workdir", "ckpt_every", "keep", "mesh", "log_every", "profile", "steps")

_NUM_ENVS = flags.DEFINE_integer("num_envs", 4, "Environments N.")
_ITERATIONS = flags.DEFINE_integer("iterations", 480, "PPO iterations timed per variant.")
_CALLS = flags.DEFINE_list("calls", ["1", "10", "120"], "Chunk counts (each divides iterations).")
_ROUNDS = flags.DEFINE_integer("rounds", 3, "Alternating rounds.")
_PIPELINED = flags.DEFINE_bool("pipelined", True, "Also time dispatch-ahead chunks.")
_REFERENCE = flags.DEFINE_bool(
  "reference", True, "Also time benchmarks.ppo's reference PPO over the same iterations."
)


def make(num_envs: int, iterations: int):
  """(chunk_fn, state after one iteration, raw key) for CartPole at ``num_envs``."""
  c = bench_ppo.bench_config("cartpole", num_envs, 128, num_envs * 128 * (iterations + 1))
  env = ppo.make_env("cartpole", num_envs, c)
  policy = ppo.make_policy("mlp", env, c)
  config = ppo.PPOConfig.from_config(c, num_updates=ppo.num_updates(c))
  chunk = runtime.make_chunk_fn(ppo.make_update(env, policy, config), None)
  key = jax.random.key_data(jax.random.key(0))
  state = ppo.init(env, policy, config, jax.random.key(0))
  # one iteration first: the state's step becomes an array, as after a run's first chunk
  state, metrics = chunk(state, None, key, jnp.int32(0), 1, iterations)
  jax.device_get(metrics)
  return chunk, state, key


def make_reference(num_envs: int, iterations: int) -> Callable[[], tuple[float, float]]:
  """The reference PPO (``benchmarks.ppo.make_train``, one jitted ``train``) over ``iterations``
  iterations of the same config, compiled: a function returning (wall s, CPU s) of one call."""
  c = bench_ppo.bench_config("cartpole", num_envs, 128, num_envs * 128 * iterations)
  key = jax.random.key(0)
  train = jax.jit(bench_ppo.make_train(c, "cartpole")).lower(key).compile()

  def timed_reference():
    wall, cpu = time.perf_counter(), time.process_time()
    jax.block_until_ready(train(key))
    return time.perf_counter() - wall, time.process_time() - cpu

  return timed_reference


def timed(chunk, state, key, iterations: int, calls: int, pipelined: bool) -> tuple[float, float]:
  length, pending = iterations // calls, None
  wall, cpu = time.perf_counter(), time.process_time()
  for i in range(calls):
    state, metrics = chunk(state, None, key, jnp.int32(1 + i * length), length, iterations)
    if pipelined:
      if pending is not None:
        jax.device_get(pending)
      pending = metrics
    else:
      jax.device_get(metrics)
  jax.device_get(pending)
  return time.perf_counter() - wall, time.process_time() - cpu


def main(argv):
  del argv
  experiment.common("ppo_calls_benchmark", unused=UNUSED_FLAGS)
  experiment.check_positive("num_envs", _NUM_ENVS.value)
  experiment.check_positive("iterations", _ITERATIONS.value)
  experiment.check_positive("rounds", _ROUNDS.value)
  n, iterations = _NUM_ENVS.value, _ITERATIONS.value
  if not all(v.strip().isdigit() and int(v) > 0 for v in _CALLS.value):
    experiment.fail("calls", f"positive integers, got {','.join(_CALLS.value)}")
  calls = [int(v) for v in _CALLS.value]
  bad = [k for k in calls if iterations % k]
  if bad:
    experiment.fail("calls", f"each must divide --iterations={iterations}; {bad} do not")
  variants = [(k, False) for k in calls]
  if _PIPELINED.value:
    variants += [(k, True) for k in calls if k > 1]
  chunk, state, key = make(n, iterations)
  run = {v: functools.partial(timed, chunk, state, key, iterations, *v) for v in variants}
  if _REFERENCE.value:
    run["reference"] = make_reference(n, iterations)
  for f in run.values():  # every length compiled and run once before timing
    f()
  load0, times = os.getloadavg()[0], {v: [] for v in run}
  for _ in range(_ROUNDS.value):
    for v, f in run.items():
      times[v].append(f())
  base = np.median(np.asarray(times[(min(calls), False)]), axis=0)
  print(f"cartpole N={n} T=128: {iterations} iterations, median of {_ROUNDS.value} rounds")
  if "reference" in times:
    wall, cpu = np.median(np.asarray(times.pop("reference")), axis=0)
    print(
      f"  reference PPO, one jitted train:    wall {wall:.3f} s ({wall / base[0]:.2f}x)  "
      f"cpu {cpu:.3f} s ({cpu / base[1]:.2f}x)"
    )
  for (k, p), t in times.items():
    wall, cpu = np.median(np.asarray(t), axis=0)
    print(
      f"  {k:4d} call(s) of {iterations // k:4d}{' pipelined' if p else '          '}: "
      f"wall {wall:.3f} s ({wall / base[0]:.2f}x)  cpu {cpu:.3f} s ({cpu / base[1]:.2f}x)"
    )
  print(f"load {load0:.1f} -> {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
  experiment.run(main)
