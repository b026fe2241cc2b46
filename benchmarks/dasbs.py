"""DASBS throughput next to the MCMC baseline on the same target.

Prints training steps/s (the core runtime's jitted chunk), model samples/s (tau-leaping), and
Swendsen–Wang / Metropolis effective samples/s (samples / tau_int of the energy), each measured
after compilation in this process, and the ratio model samples/s : MCMC effective samples/s. The
model here is untrained: its samples/s is a cost figure, not a quality-adjusted one.

The target and model are the experiment's config (`experiments/configs/dasbs.py`, default preset
`ising_critical` at L = 24):

  # ~2-4 min on 2 CPU cores:
  python -m benchmarks.dasbs --config.L=8 --config.num_repl=4 --config.sampling_steps=100
  # on a GPU:
  python -m benchmarks.dasbs --config=experiments/configs/dasbs.py:potts_critical
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
from absl import flags

from experiments import dasbs as dasbs_experiment  # the --config and --mcmc_* flags
from jaxlab.core import experiment, runtime
from jaxlab.sampling import dasbs, mcmc

flags.DEFINE_integer("timed_steps", 20, "Timed training steps (after a compile run).")
flags.DEFINE_integer("num_samples", 256, "Model samples per timed sampling call.")
FLAGS = flags.FLAGS
# tau_int needs consecutive sweeps and a longer trace than the experiment's reference samples
FLAGS.set_default("mcmc_samples", 200)
FLAGS.set_default("mcmc_thin", 1)
FLAGS.set_default("mcmc_burn_in", 100)


def _timed(fn, *args):
  """Seconds of the second call (the first compiles), and its output."""
  jax.block_until_ready(fn(*args))
  t0 = time.perf_counter()
  out = jax.block_until_ready(fn(*args))
  return time.perf_counter() - t0, out


def _train_steps_per_sec(spec, key):
  """Two chunks of --timed_steps through the runtime's chunk function; the second is timed (the
  state is donated on accelerators, so each chunk continues from the last one's output)."""
  state = dasbs.init_state(spec, key)
  chunk = runtime.make_chunk_fn(dasbs.make_update(spec))
  n = FLAGS.timed_steps
  state, _ = jax.block_until_ready(chunk(state, None, key, jnp.int32(0), n))
  t0 = time.perf_counter()
  state, _ = jax.block_until_ready(chunk(state, None, key, jnp.int32(n), n))
  return n / (time.perf_counter() - t0), state


def main(argv):
  del argv
  spec = dasbs.make_spec(dasbs_experiment.CONFIG.value)
  unused = ("workdir", "mesh", "steps", "log_every", "ckpt_every", "keep", "profile")
  run = experiment.common("dasbs_benchmark", unused=unused)
  experiment.check_positive("timed_steps", FLAGS.timed_steps)
  experiment.check_positive("num_samples", FLAGS.num_samples)
  dasbs_experiment.check_mcmc_flags()
  key = jax.random.key_data(jax.random.key(run.seed))
  train_sps, state = _train_steps_per_sec(spec, key)
  sim = jax.jit(lambda p, k: dasbs.simulate(spec, state.ctrl, p, k, FLAGS.num_samples)["x1"])
  samp_s, _ = _timed(sim, state.ctrl.target_params, key)
  model_sps = FLAGS.num_samples / samp_s
  t = spec.target
  print(
    f"DASBS {t.kind} L={t.L} beta={t.beta}: train {train_sps:.2f} steps/s "
    f"(batch {spec.batch_size}x{spec.num_repl}, resample every {spec.resample_freq}), "
    f"sampling {model_sps:.1f} samples/s ({spec.sampling_steps} tau-leaps)"
  )
  methods = ("sw", "metropolis") if dasbs_experiment.mcmc_method(t) == "sw" else ("metropolis",)
  for method in methods:
    f = lambda k: mcmc.run_chains(
      k, t, FLAGS.mcmc_chains, FLAGS.mcmc_samples, FLAGS.mcmc_burn_in, FLAGS.mcmc_thin, method
    )
    mc_s, (_, es, _) = _timed(f, key)
    tau = mcmc.integrated_autocorr(jax.device_get(es))
    eff = FLAGS.mcmc_chains * FLAGS.mcmc_samples / tau / mc_s
    print(
      f"MCMC {method:10s}: tau_int(E) = {tau:.2f} kept samples ({FLAGS.mcmc_thin} sweeps "
      f"apart), {eff:.1f} effective samples/s (incl. {FLAGS.mcmc_burn_in} burn-in sweeps); "
      f"DASBS samples/s : {method} eff. samples/s = {model_sps / eff:.3g}"
    )


if __name__ == "__main__":
  experiment.run(main)
