"""Cost of a UHM update against ReBRAC's (paper: UHM ≈ 1.8× ReBRAC), vmapped seeds, data loading.

  python -m benchmarks.uhm [--steps=200] [--agents=rebrac,uhm] [--num_seeds=4]
  python -m benchmarks.uhm --config=experiments/configs/uhm.py:paper --config.batch_size=512
      networks and batch come from experiments.uhm's config (default 3x256, batch 256; `:paper`
      is FQL's 4x512; formerly --paper_scale / --batch_size)

Prints ms/update for each agent (a jitted lax.scan of updates, compile excluded), the ratio to
ReBRAC, and the sampler's throughput (batches/s and transitions/s) against a NumPy gather of the
same batches. With --num_seeds=S it also times S training seeds vmapped in one program (as
`experiments.uhm --num_seeds`) against S separate runs, in seed-updates per second and
1M-update seeds per hour (compile excluded; separate runs pay it once per process). The data set
is the embedded OGBench cube-single set when ogbench is installed, else random.
"""

import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags

from jaxlab.core import experiment
from jaxlab.core.errors import require
from jaxlab.rl import uhm
from jaxlab.rl.uhm import offline_data

flags.DEFINE_list("agents", ["rebrac", "dtd", "ghm", "uhm", "mbtd"], "Agents to time.")
flags.DEFINE_integer("num_seeds", 0, "Also time this many vmapped seeds vs separate runs (0: no).")
FLAGS = flags.FLAGS
_CONFIG = experiment.define_config_file(
  str(pathlib.Path(__file__).resolve().parents[1] / "experiments" / "configs" / "uhm.py")
)


def _dataset():
  try:
    from jaxlab.envs import ogbench as og

    return og.load(verbose=False).train, "embedded cube-single-play"
  except (ImportError, OSError):  # the ogbench extra (or MuJoCo) is not installed
    rng = np.random.default_rng(0)
    n = 100_000
    return dict(
      observations=rng.normal(size=(n, 28)),
      actions=rng.uniform(-1, 1, (n, 5)),
      rewards=-np.ones(n),
      masks=np.ones(n),
      terminals=np.arange(n) % 1000 == 999,
      next_observations=rng.normal(size=(n, 28)),
    ), "random"


def time_chunk(fn, *args, reps=3):
  out = fn(*args)
  jax.block_until_ready(out)
  best = float("inf")
  for _ in range(reps):
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    best = min(best, time.perf_counter() - t0)
  return best


def time_agent(agent: str, data, steps: int, num_seeds: int = 1) -> float:
  """ms per update of one agent (of all `num_seeds` vmapped seeds together): a jitted lax.scan of
  `steps` updates, compile excluded."""
  c = uhm.validate_config(_CONFIG.value).as_configdict()
  c.agent = agent
  cfg = uhm.validate_config(c)
  dims = (data.observations.shape[1], data.actions.shape[1])
  stats = offline_data.obs_stats(data)
  state = uhm.create_seeds(jax.random.key(0), num_seeds, *dims, cfg, obs_stats=stats)
  update, sample = uhm.update, uhm.make_sample_fn(cfg)
  if num_seeds > 1:
    update, sample = uhm.vmap_seeds(update, sample, num_seeds)

  @jax.jit
  def chunk(state, key):
    def body(s, i):
      k = jax.random.fold_in(key, i)
      return update(s, sample(data, k), k)

    return jax.lax.scan(body, state, jnp.arange(steps))

  return 1e3 * time_chunk(chunk, state, jax.random.key(1)) / steps


# The benchmark writes nothing and runs one device: these shared flags would be ignored.
UNUSED_FLAGS = ("workdir", "seed", "mesh", "log_every", "ckpt_every", "keep", "profile")


def main(argv):
  del argv
  steps = FLAGS.steps if FLAGS.steps is not None else 100
  require(steps >= 1, "steps", f"must be >= 1, got {steps}")
  for name in UNUSED_FLAGS:
    require(not FLAGS[name].present, name, "is not used by benchmarks.uhm; remove it")
  cfg = uhm.validate_config(_CONFIG.value)
  batch_size = cfg.batch_size
  require(FLAGS.num_seeds >= 0, "num_seeds", f"must be >= 0, got {FLAGS.num_seeds}")
  agents = experiment.check_list("agents", FLAGS.agents, uhm.AGENTS)
  for agent in agents:  # every agent's networks and batch, before the first is timed
    c = cfg.as_configdict()
    c.agent = agent
    uhm.check_memory(uhm.validate_config(c), 28, 5, num_seeds=max(1, FLAGS.num_seeds))
  raw, source = _dataset()
  data = offline_data.make_offline_data(raw)
  print(
    f"backend={jax.default_backend()} data={source} ({data.size} transitions) "
    f"batch={batch_size} steps/chunk={steps}"
  )
  results = {agent: time_agent(agent, data, steps) for agent in agents}
  ref = results.get("rebrac")
  for agent, ms in results.items():
    ratio = f"{ms / ref:5.2f}x ReBRAC" if ref else ""
    print(f"  {agent:7s} {ms:8.2f} ms/update  {ratio}")
  if "uhm" in results and ref:
    print(f"UHM / ReBRAC cost ratio: {results['uhm'] / ref:.2f} (paper, GPU: ≈ 2.4/1.3 = 1.8)")
  if FLAGS.num_seeds > 1:
    S = FLAGS.num_seeds
    for agent, ms in results.items():
      ms_v = time_agent(agent, data, steps, S)
      per_h = lambda ms_per_update: 3.6e6 / (ms_per_update * 1_000_000)  # 1M-update runs per hour
      print(
        f"  {agent:7s} {S} seeds: vmapped {S * 1e3 / ms_v:9.1f} seed-updates/s vs separate "
        f"{1e3 / ms:9.1f} ({ms_v / (S * ms):.2f}x the time per seed); 1M-update seeds/hour: "
        f"{S * per_h(ms_v):.3f} vs {per_h(ms):.3f}"
      )
  sampler_throughput(raw, data, batch_size)


def sampler_throughput(raw, data, batch_size: int) -> None:
  """The sampler as training uses it (jit + scan) against a NumPy gather of the same batches."""
  # A checksum of every batch keeps XLA from dropping the sampling.
  n = 500

  @jax.jit
  def sample_many(d, key):
    def body(acc, i):
      b = offline_data.sample(d, jax.random.fold_in(key, i), batch_size, 8)
      return acc + jnp.sum(b["observations"]) + jnp.sum(b["window_rewards"]), None

    return jax.lax.scan(body, 0.0, jnp.arange(n))[0]

  jax_bps = n / time_chunk(sample_many, data, jax.random.key(2))
  rng = np.random.default_rng(0)
  raw_np = {k: np.asarray(v) for k, v in raw.items()}
  t0 = time.perf_counter()
  for _ in range(n):
    idx = rng.integers(0, len(raw_np["rewards"]), batch_size)
    _ = {k: v[idx] for k, v in raw_np.items()}
  np_bps = n / (time.perf_counter() - t0)
  print(
    f"sampler (jit+scan, k_max=8 windows): {jax_bps:9.1f} batches/s = "
    f"{jax_bps * batch_size:,.0f} transitions/s; NumPy gather (no windows): {np_bps:9.1f} "
    f"batches/s; ratio {jax_bps / np_bps:.2f}"
  )


if __name__ == "__main__":
  experiment.run(main)
