"""DASBS throughput next to the MCMC baseline at the same beta.

Prints training steps/s, model samples/s (tau-leaping), and Swendsen–Wang / Metropolis effective samples/s
(samples / tau_int of the energy), each measured after compilation in this process, and the ratio
model samples/s : SW effective samples/s.

  python -m benchmarks.dasbs --L=8 --beta=0.4407          # ~2-4 min on 2 CPU cores
"""

from __future__ import annotations

import time

import jax
import numpy as np
from absl import app, flags

from jaxlab.sampling import dasbs, mcmc

flags.DEFINE_string("target", "ising", "ising | potts")
flags.DEFINE_integer("L", 8, "lattice side")
flags.DEFINE_float("beta", 0.4407, "inverse temperature")
flags.DEFINE_integer("steps", 20, "timed training steps (after a compile run)")
flags.DEFINE_integer("num_samples", 256, "model samples per timed sampling call")
flags.DEFINE_integer("chains", 64, "MCMC chains")
flags.DEFINE_integer("mcmc_samples", 200, "MCMC samples per chain (1 sweep apart)")
FLAGS = flags.FLAGS


def _timed(fn, *a):
  jax.block_until_ready(fn(*a))  # compile + warm
  t0 = time.perf_counter()
  jax.block_until_ready(fn(*a))
  return time.perf_counter() - t0


def main(argv):
  del argv
  if FLAGS.target not in ("ising", "potts"):
    raise app.UsageError(f"--target must be ising or potts, got {FLAGS.target!r}")
  c = dasbs.get_config()
  c.update(target=FLAGS.target, L=FLAGS.L, beta=FLAGS.beta, num_repl=4, sampling_steps=100)
  if FLAGS.target == "potts":
    c.update(batch_size=128, num_repl=16, source="constant", corr_loss="dm")
  spec = dasbs.make_spec(c)
  key = jax.random.PRNGKey(0)
  state = dasbs.init_state(spec, key)
  update = dasbs.make_update(spec)

  @jax.jit
  def run(state, key):
    def body(st, i):
      return update(st, None, jax.random.fold_in(key, i))[0], None

    return jax.lax.scan(body, state, jax.numpy.arange(FLAGS.steps))[0]

  train_s = _timed(run, state, key)
  sim = jax.jit(lambda p, k: dasbs.simulate(spec, p, k, FLAGS.num_samples)["x1"])
  samp_s = _timed(sim, state.ctrl_ema, key)
  print(
    f"DASBS {spec.target.kind} L={spec.target.L} beta={spec.target.beta}: "
    f"train {FLAGS.steps / train_s:.2f} steps/s (batch {spec.batch_size}x{spec.num_repl}, "
    f"resample every {spec.resample_freq}), sampling {FLAGS.num_samples / samp_s:.1f} samples/s "
    f"({spec.sampling_steps} tau-leaps)"
  )
  model_sps = FLAGS.num_samples / samp_s
  for method in ("sw", "metropolis"):
    f = lambda k: mcmc.run_chains(k, spec.target, FLAGS.chains, FLAGS.mcmc_samples, 100, 1, method)
    mc_s = _timed(f, key)
    _, es, _ = f(key)
    tau = mcmc.integrated_autocorr(np.asarray(es))
    eff = FLAGS.chains * FLAGS.mcmc_samples / tau / mc_s
    print(
      f"MCMC {method:10s}: tau_int(E) = {tau:.2f} sweeps, {eff:.1f} effective samples/s "
      f"(incl. 100 burn-in sweeps/chain); DASBS samples/s : {method} eff. samples/s = "
      f"{model_sps / eff:.3g}"
    )


if __name__ == "__main__":
  app.run(main)
