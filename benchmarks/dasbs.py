"""DASBS effective samples/s of a trained model next to the MCMC baseline on the same target.

Prints training steps/s (the core runtime's jitted chunk), then, for a **trained** model (the
checkpoint of an `experiments.dasbs` run given by --trained_workdir, else the config's schedule
trained here in memory): raw samples/s (tau-leaping) and effective samples/s = samples/s × the ESS
fraction of its target importance weights (`metrics.path_is_log_weights`; model samples are
independent, so this is the number of target samples they are worth), with the unweighted energy
error per spin next to it; and Swendsen–Wang / Metropolis effective samples/s (samples / tau_int of
the energy). Every timing is measured after compilation in this process.

The target and model are the experiment's config (`experiments/configs/dasbs.py`, default preset
`ising_critical` at L = 24):

  # trains the CPU preset first (4 x 4 at beta_c; minutes on 2 CPU cores):
  python -m benchmarks.dasbs --config=experiments/configs/dasbs.py:ising_critical_cpu
  # a model trained by the experiment (same --config):
  python -m benchmarks.dasbs --config=experiments/configs/dasbs.py:potts_critical \
      --trained_workdir=runs/dasbs/potts/L16_beta1.0986
"""

from __future__ import annotations

import os
import time

import jax
import jax.numpy as jnp
from absl import flags

from experiments import dasbs as dasbs_experiment  # the --config and --mcmc_* flags
from jaxlab.core import checkpoint, experiment, runtime
from jaxlab.sampling import dasbs, evaluation, exact, mcmc, metrics

flags.DEFINE_integer("timed_steps", 20, "Timed training steps (after a compile run).")
flags.DEFINE_integer("num_samples", 256, "Model samples per timed sampling call.")
flags.DEFINE_string(
  "trained_workdir", None, "An experiments.dasbs run (same --config) whose checkpoint is sampled."
)
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


def _trained(spec, key, like):
  """The EMA controller of --trained_workdir's checkpoint, or of the schedule trained here."""
  if FLAGS.trained_workdir:
    got = checkpoint.restore(FLAGS.trained_workdir, like)
    experiment.require(got is not None, "trained_workdir", "has no checkpoint")
    return got[0], f"checkpoint step {got[1]} of {FLAGS.trained_workdir}"
  t0 = time.perf_counter()
  state, _ = dasbs.train(spec, key)
  return state, f"{spec.total_steps} steps trained here in {time.perf_counter() - t0:.0f} s"


def _model_line(spec, state, key, how):
  """Raw and effective samples/s of the trained model, with its unweighted energy error."""
  sim = jax.jit(lambda p, k: dasbs.simulate(spec, state.ctrl, p, k, FLAGS.num_samples))
  samp_s, out = _timed(sim, state.ctrl.target_params, key)
  t = spec.target
  log_w = metrics.path_is_log_weights(t, spec.sched, spec.source, out)
  ess = metrics.is_observables(t, log_w, out["x1"])["ess_target"]
  raw = FLAGS.num_samples / samp_s
  err = ""
  if t.kind == "ising" and t.h == 0.0:
    u = float(jnp.mean(t.energy(out["x1"]))) / t.D
    u_exact = exact.ising_exact_observables(t.L, t.beta, t.J)["u_per_spin"]
    err = f", unweighted |U - U_exact| {abs(u - u_exact):.3f}/spin"
  print(
    f"DASBS model ({how}): {raw:.1f} samples/s ({spec.sampling_steps} tau-leaps), target ESS "
    f"{ess:.3f} -> {raw * ess:.1f} effective samples/s{err}"
  )
  return raw * ess


UNUSED_FLAGS = ("workdir", "mesh", "steps", "log_every", "ckpt_every", "keep", "profile")


def main(argv):
  del argv
  spec = dasbs.make_spec(dasbs_experiment.CONFIG.value)
  run = experiment.common("dasbs_benchmark", unused=UNUSED_FLAGS)
  experiment.check_positive("timed_steps", FLAGS.timed_steps)
  experiment.check_positive("num_samples", FLAGS.num_samples)
  ev = dasbs_experiment.eval_settings()
  where = FLAGS.trained_workdir
  if where is not None:
    experiment.require(os.path.isdir(where), "trained_workdir", f"no such directory: {where}")
    ckpts = os.path.join(where, checkpoint.CKPT_DIR)  # read only: never create checkpoints/
    experiment.require(os.path.isdir(ckpts), "trained_workdir", f"{where} has no checkpoints/")
  dasbs.check_memory(spec, FLAGS.num_samples)
  evaluation.check_memory(spec, ev)
  key = jax.random.key_data(jax.random.key(run.seed))
  train_sps, untrained = _train_steps_per_sec(spec, key)
  t = spec.target
  print(
    f"DASBS {t.kind} L={t.L} beta={t.beta}: train {train_sps:.2f} steps/s "
    f"(batch {spec.batch_size}x{spec.num_repl}, resample every {spec.resample_freq})"
  )
  state, how = _trained(spec, jax.random.fold_in(key, 1), dasbs.init_state(spec, key))
  del untrained
  model_eff = _model_line(spec, state, jax.random.fold_in(key, 2), how)
  methods = ("sw", "metropolis") if evaluation.mcmc_method(t) == "sw" else ("metropolis",)
  for method in methods:
    f = lambda k: mcmc.run_chains(
      k, t, ev.mcmc_chains, ev.mcmc_samples, ev.mcmc_burn_in, ev.mcmc_thin, method
    )
    mc_s, (_, es, _) = _timed(f, key)
    tau = mcmc.integrated_autocorr(jax.device_get(es))
    eff = ev.mcmc_chains * ev.mcmc_samples / tau / mc_s
    print(
      f"MCMC {method:10s}: tau_int(E) = {tau:.2f} kept samples ({ev.mcmc_thin} sweeps "
      f"apart), {eff:.1f} effective samples/s (incl. {ev.mcmc_burn_in} burn-in sweeps); "
      f"DASBS eff. samples/s : {method} eff. samples/s = {model_eff / eff:.3g}"
    )


if __name__ == "__main__":
  experiment.run(main)
