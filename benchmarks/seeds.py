"""What vmapping seeds buys: S seeds in one compiled program against S runs one after another.

  python -m benchmarks.seeds                       # PPO CartPole at N = 4 and 64, then UHM; 8 seeds
  python -m benchmarks.seeds --num_envs=4 --nouhm  # PPO at N = 4 only
  python -m benchmarks.seeds --seeds=4 --updates=40 --uhm_updates=20
  python -m benchmarks.seeds --nouhm --rejax       # and rejax's PPO, vmapped its own way

Each program is the runtime's chunk a run compiles (``runtime.make_chunk_fn``): for the vmapped
side with the seed axis (``runtime.train(..., seeds=)``, what ``--seeds=S`` runs), for the
sequential side one seed, run once per seed with each seed's own state and key (the compiled
program is reused: the best case for sequential runs in one process). Both sides run the same
updates of the same seeds, in turn, ``--reps`` rounds (the best round of each is kept; the machine
may be shared, so the load is printed). Printed per setting:
  - steady throughput: PPO env steps/s (UHM updates/s) summed over the seeds, vmapped against
    sequential, and their ratio (the goal for PPO at N = 4 on 2 CPU cores: >= 2x);
  - compile seconds of each program (``lower().compile()``, the persistent cache off);
  - the wall time of S seeds from nothing: vmapped (one compile + one run), sequential in one
    process (one compile + S runs) and S separate processes (S compiles + S runs, no cache).
PPO is CartPole-v1 with PureJaxRL's setting (``benchmarks.ppo.bench_config``: 128-step rollouts,
4 x 4 minibatches, a 64-64 MLP); UHM is ``experiments.uhm``'s default agent and networks on the
embedded cube-single data set (when ogbench is installed). ``--rejax`` also times rejax's PPO at
the same config (``benchmarks.ppo.rejax_algo``; its differences there) the same two ways,
``jit(vmap(train))`` over the seeds' keys and ``jit(train)`` per seed, and prints jaxlab's vmapped
and sequential rates against rejax's.
"""

from __future__ import annotations

import os
import time

import jax
from absl import flags

from jaxlab.core import experiment, runtime
from jaxlab.core import seeds as seeds_lib
from jaxlab.core.errors import require
from jaxlab.rl import ppo

UNUSED_FLAGS = ("workdir", "ckpt_every", "keep", "mesh", "log_every", "profile", "steps")


def define_flags() -> None:
  """The flags, defined only when run as a program (the tests import this module)."""
  flags.DEFINE_list("num_envs", ["4", "64"], "PPO sizes N (environments per seed) to time.")
  flags.DEFINE_string("env", "cartpole", "PPO's environment: cartpole or a Craftax name.")
  flags.DEFINE_integer("updates", 0, "PPO iterations per timed run (0: 64 at N <= 16, else 16).")
  flags.DEFINE_bool("uhm", True, "Also time UHM (experiments.uhm's default agent and networks).")
  flags.DEFINE_integer("uhm_updates", 50, "UHM updates per timed run.")
  flags.DEFINE_integer("reps", 3, "Timed rounds (each: the vmapped run, then the sequential ones).")
  flags.DEFINE_bool("rejax", False, "Also time rejax's PPO (vmapped over seeds its own way).")


def _load() -> float:
  return os.getloadavg()[0]


def compare(update, states, keys, length: int, reps: int, data=None, sample_fn=None, vmap=None):
  """Compile and time ``length`` updates of every seed: vmapped (one program over the stacked
  ``states``) and sequential (the one-seed program once per seed). Returns seconds:
  ``{"compile_v", "compile_1", "run_v", "run_seq"}`` (runs: the best of ``reps`` rounds)."""
  n = int(keys.shape[0])
  chunk_v = runtime.make_chunk_fn(update, sample_fn, None, vmap or seeds_lib.vmap)
  chunk_1 = runtime.make_chunk_fn(update, sample_fn, None)
  # one jitted slice of the whole state: eagerly, every leaf shape compiles its own slice (a
  # Craftax state has dozens), minutes on a loaded CPU
  take = jax.jit(seeds_lib.take)
  solo = [(take(states, i), keys[i]) for i in range(n)]
  out = {}
  t0 = time.perf_counter()
  chunk_v.compile(states, data, keys, length)
  out["compile_v"] = time.perf_counter() - t0
  t0 = time.perf_counter()
  chunk_1.compile(solo[0][0], data, solo[0][1], length)
  out["compile_1"] = time.perf_counter() - t0
  out["run_v"] = out["run_seq"] = float("inf")
  for _ in range(reps):
    t0 = time.perf_counter()
    jax.block_until_ready(chunk_v(states, data, keys, 0, length, length))
    out["run_v"] = min(out["run_v"], time.perf_counter() - t0)
    t0 = time.perf_counter()
    for state, key in solo:
      jax.block_until_ready(chunk_1(state, data, key, 0, length, length))
    out["run_seq"] = min(out["run_seq"], time.perf_counter() - t0)
  return out


def report(name: str, t: dict, n: int, units: float, unit: str) -> str:
  """The lines of one setting: throughput ratio, compile seconds, wall of n seeds from nothing."""
  v, s = units * n / t["run_v"], units * n / t["run_seq"]
  wall_v = t["compile_v"] + t["run_v"]
  wall_1 = t["compile_1"] + t["run_seq"]
  wall_n = n * t["compile_1"] + t["run_seq"]
  return (
    f"{name}, {n} seeds: {unit} {v:,.0f} vmapped vs {s:,.0f} sequential = {v / s:.2f}x; "
    f"compile {t['compile_v']:.1f} s vmapped vs {t['compile_1']:.1f} s one seed; "
    f"{n} seeds from nothing: {wall_v:.1f} s vmapped, {wall_1:.1f} s one process, "
    f"{wall_n:.1f} s {n} processes (no cache) = {wall_n / wall_v:.2f}x"
  )


def rollout_len(env_name: str) -> int:
  """``benchmarks.ppo``'s rollout: 128 steps (CartPole, PureJaxRL), 64 (Craftax_Baselines)."""
  return 64 if ppo.is_craftax(env_name) else 128


def ppo_setting(n_envs: int, seeds: tuple[int, ...], updates: int, env_name: str = "cartpole"):
  """(update, stacked states, keys, env steps per update) of PPO on ``env_name`` at ``n_envs``
  (``benchmarks.ppo.bench_config``: PureJaxRL's CartPole setting or Craftax_Baselines')."""
  from benchmarks.ppo import bench_config

  t_len = rollout_len(env_name)
  c = bench_config(env_name, n_envs, t_len, n_envs * t_len * updates)
  cfg = ppo.PPOConfig.from_config(c, num_updates=updates)
  env = ppo.make_env(env_name, n_envs, c)
  policy = ppo.make_policy("mlp", env, c)
  keys = seeds_lib.seed_keys(seeds)
  states = ppo.init_seeds(env, policy, cfg, seeds_lib.stream(keys, 0))
  return ppo.make_update(env, policy, cfg), states, seeds_lib.stream(keys, 1), n_envs * t_len


def rejax_compare(
  n_envs: int, seeds: tuple[int, ...], updates: int, reps: int, env_name: str = "cartpole"
) -> dict:
  """:func:`compare`'s seconds for rejax's PPO at the same config (``benchmarks.ppo.rejax_algo``,
  its evaluation a no-op): ``jit(vmap(algo.train))`` over the seeds' keys (how rejax trains seeds
  together) against ``jit(algo.train)`` once per seed."""
  from benchmarks.ppo import bench_config, rejax_algo

  t_len = rollout_len(env_name)
  c = bench_config(env_name, n_envs, t_len, n_envs * t_len * updates)
  algo = rejax_algo(c, env_name).replace(eval_callback=lambda a, ts, rng: jax.numpy.zeros(()))
  keys = jax.numpy.stack([jax.random.PRNGKey(s) for s in seeds])
  out = {}
  t0 = time.perf_counter()
  train_v = jax.jit(jax.vmap(algo.train)).lower(keys).compile()
  out["compile_v"] = time.perf_counter() - t0
  t0 = time.perf_counter()
  train_1 = jax.jit(algo.train).lower(keys[0]).compile()
  out["compile_1"] = time.perf_counter() - t0
  out["run_v"] = out["run_seq"] = float("inf")
  for _ in range(reps):
    t0 = time.perf_counter()
    jax.block_until_ready(train_v(keys))
    out["run_v"] = min(out["run_v"], time.perf_counter() - t0)
    t0 = time.perf_counter()
    for k in keys:
      jax.block_until_ready(train_1(k))
    out["run_seq"] = min(out["run_seq"], time.perf_counter() - t0)
  return out


def uhm_setting(seeds: tuple[int, ...]):
  """(update, stacked states, keys, data, sample_fn) of experiments.uhm's default run."""
  from jaxlab.rl import uhm
  from jaxlab.rl.uhm import offline_data

  c = uhm.get_config()
  c.actor_hidden_dims = c.value_hidden_dims = c.model_hidden_dims = (256, 256, 256)
  task = uhm.load_task(uhm.validate_config(c), verbose=False)
  keys = seeds_lib.seed_keys(seeds)
  stats = offline_data.obs_stats(task.data)
  states = uhm.create_stacked(
    seeds_lib.stream(keys, 0), task.obs_dim, task.act_dim, task.config, obs_stats=stats
  )
  return uhm.update, states, keys, task.data, uhm.make_sample_fn(task.config)


def check_flags() -> tuple[list[int], tuple[int, ...]]:
  """Every flag, before anything is compiled (ConfigError naming the flag)."""
  f = flags.FLAGS
  for name in UNUSED_FLAGS:
    require(not f[name].present, name, "is not used by benchmarks.seeds")
  sizes = []
  for v in f.num_envs:
    require(v.strip().isdigit() and int(v) >= 1, "num_envs", f"sizes must be >= 1, got {v!r}")
    sizes.append(int(v))
  require(bool(sizes) or f.uhm, "num_envs", "names no size (and --nouhm)")
  ppo.check_env(f.env)
  require(0 <= f.updates <= 100_000, "updates", f"must be in [0, 100000], got {f.updates}")
  require(1 <= f.uhm_updates <= 100_000, "uhm_updates", f"must be in [1, 100000], got {f.updates}")
  require(1 <= f.reps <= 100, "reps", f"must be in [1, 100], got {f.reps}")
  seeds = seeds_lib.parse_seeds(f.seeds or "8", f.seed)
  require(len(seeds) >= 2, "seeds", "needs at least 2 seeds to compare")
  if f.rejax:
    from benchmarks.ppo import REJAX_CRAFTAX, rejax_available

    require(rejax_available(), "rejax", "rejax is not installed (pip install -e '.[bench]')")
    require(not ppo.is_craftax(f.env), "rejax", REJAX_CRAFTAX)
  return sizes, seeds


def main(argv):
  del argv
  sizes, seeds = check_flags()
  f = flags.FLAGS
  if not f["compile_cache"].present:  # compile times are measured: compile every time
    jax.config.update("jax_enable_compilation_cache", False)
  n, env_name = len(seeds), ppo.check_env(f.env)
  print(f"# benchmarks.seeds on {jax.default_backend()} ({os.cpu_count()} CPUs), seeds {seeds}")
  for n_envs in sizes:
    updates = f.updates or (64 if n_envs <= 16 else 16)
    load = _load()
    update, states, keys, per_update = ppo_setting(n_envs, seeds, updates, env_name)
    t = compare(update, states, keys, updates, f.reps)
    name = f"PPO {env_name} N={n_envs}, {updates} updates (load {load:.1f}->{_load():.1f})"
    print(report(name, t, n, per_update * updates, "env steps/s"), flush=True)
    if f.rejax:
      load = _load()
      r = rejax_compare(n_envs, seeds, updates, f.reps, env_name)
      name = f"rejax PPO {env_name} N={n_envs}, {updates} updates (load {load:.1f}->{_load():.1f})"
      print(report(name, r, n, per_update * updates, "env steps/s"), flush=True)
      print(
        f"  vmapped {n} seeds, jaxlab/rejax: {r['run_v'] / t['run_v']:.2f}x (wall of the same "
        f"updates; > 1: jaxlab faster); sequential: {r['run_seq'] / t['run_seq']:.2f}x",
        flush=True,
      )
  if f.uhm:
    from jaxlab.rl import uhm

    load = _load()
    update, states, keys, data, sample = uhm_setting(seeds)
    t = compare(update, states, keys, f.uhm_updates, f.reps, data, sample, uhm.seed_vmap)
    name = f"UHM 3x256, {f.uhm_updates} updates (load {load:.1f}->{_load():.1f})"
    print(report(name, t, n, f.uhm_updates, "updates/s"), flush=True)


if __name__ == "__main__":
  define_flags()
  experiment.run(main)
