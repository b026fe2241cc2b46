"""Discrete ASBS on periodic Ising / Potts lattices (the six settings of the DASBS README as presets).

Commands:
  python -m experiments.dasbs --target=ising --L=24 --beta=0.4407            # preset ising_critical
  python -m experiments.dasbs --preset=potts_low --mesh=data:-1              # data-parallel batch
  # CPU smoke run of the critical preset at reduced size (~5 min on 2 cores):
  python -m experiments.dasbs --preset=ising_critical --L=8 --config.num_stages=2 \
      --config.ctrl_steps=60 --config.corr_steps=30 --config.sampling_steps=50 --config.num_repl=4

Writes to --workdir: metrics.csv / tb / checkpoints (core runtime), energy_hist.png (model vs MCMC) and
summary.json (energy W2 vs MCMC, magnetisation and +/- phase balance or Potts majority fraction and
colour balance, ESS, |F^-F| and |U^-U| per spin vs the exact Ferdinand–Fisher values for Ising).
Without --preset the preset is chosen by --target and the nearest preset beta.
"""

from __future__ import annotations

import math
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags

from jaxlab.core import experiment, sharding
from jaxlab.sampling import dasbs, exact, mcmc, metrics, sampler

# name: (target, beta, L, N, batch, num_repl, buffer, ctrl, corr, lr, resample, tau-steps, ctrl, corr,
#        source, gamma)   -- brief §3.6 table (DASBS README)
PRESETS = {
  "ising_high": (
    "ising",
    0.28,
    24,
    2,
    64,
    8,
    512,
    400,
    200,
    1e-3,
    20,
    200,
    "tm",
    "tm",
    "uniform",
    1.0,
  ),
  "ising_critical": (
    "ising",
    0.4407,
    24,
    2,
    64,
    8,
    512,
    400,
    200,
    5e-4,
    20,
    200,
    "tm",
    "dm",
    "constant",
    1.0,
  ),
  "ising_low": (
    "ising",
    0.6,
    24,
    2,
    64,
    8,
    512,
    500,
    250,
    5e-4,
    20,
    200,
    "tm",
    "dm",
    "constant",
    0.25,
  ),
  "potts_high": (
    "potts",
    0.9,
    16,
    4,
    128,
    16,
    512,
    500,
    250,
    1e-3,
    20,
    100,
    "tm",
    "tm",
    "uniform",
    1.0,
  ),
  "potts_critical": (
    "potts",
    1.0986,
    16,
    4,
    128,
    16,
    4096,
    200,
    100,
    5e-4,
    10,
    100,
    "tm",
    "dm",
    "constant",
    1.0,
  ),
  "potts_low": (
    "potts",
    1.3,
    16,
    4,
    128,
    16,
    4096,
    500,
    250,
    1e-3,
    20,
    100,
    "tm",
    "dm",
    "constant",
    0.25,
  ),
}

flags.DEFINE_string("preset", None, f"One of {', '.join(PRESETS)} (default: by --target/--beta).")
flags.DEFINE_string("target", None, "ising | potts (default: the preset's).")
flags.DEFINE_integer("L", None, "Lattice side (default: the preset's).")
flags.DEFINE_float("beta", None, "Inverse temperature (default: the preset's).")
flags.DEFINE_integer("eval_samples", 1024, "Model samples for the final metrics.")
flags.DEFINE_integer("mcmc_chains", 64, "Swendsen–Wang reference chains.")
flags.DEFINE_integer("mcmc_samples", 32, "Kept samples per chain.")
flags.DEFINE_integer("mcmc_burn_in", 200, "Burn-in sweeps per chain.")
flags.DEFINE_integer("mcmc_thin", 5, "Sweeps between kept samples.")
FLAGS = flags.FLAGS

_CONFIG = experiment.define_config(dasbs.get_config())


def apply_preset(config, name: str):
  (tgt, beta, L, N, batch, repl, buf, cs, rs, lr, freq, steps, cl, rl, src, gamma) = PRESETS[name]
  config.update(
    target=tgt,
    beta=beta,
    L=L,
    q=N if tgt == "potts" else config.q,
    batch_size=batch,
    num_repl=repl,
    buffer_size=buf,
    ctrl_steps=cs,
    corr_steps=rs,
    lr=lr,
    resample_freq=freq,
    sampling_steps=steps,
    ctrl_loss=cl,
    corr_loss=rl,
    source=src,
    gamma=gamma,
    noise="log_linear",
    alpha=0.5,
    num_stages=5,
    model="ropesit",
    hidden=32,
    depth=6,
  )


def _overridden(argv_prefix: str) -> set[str]:
  import sys

  return {a.split("=", 1)[0][len(argv_prefix) :] for a in sys.argv[1:] if a.startswith(argv_prefix)}


def resolve_config(config):
  """Preset, then --target/--L/--beta, then explicit --config.* overrides (which win)."""
  user = _overridden("--config.")
  explicit = {k: config[k] for k in user if k in config}
  name = FLAGS.preset
  if name is None:
    kind = FLAGS.target or "ising"
    experiment.check_choice("target", kind, ("ising", "potts"))
    cands = [n for n, p in PRESETS.items() if p[0] == kind]
    b = FLAGS.beta if FLAGS.beta is not None else PRESETS[f"{kind}_critical"][1]
    name = min(cands, key=lambda n: abs(PRESETS[n][1] - b))
  experiment.check_choice("preset", name, PRESETS)
  apply_preset(config, name)
  if FLAGS.target is not None:
    experiment.check_choice("target", FLAGS.target, ("ising", "potts"))
    if FLAGS.target != config.target:
      experiment.fail("target", f"{FLAGS.target!r} contradicts preset {name!r} ({config.target})")
  if FLAGS.L is not None:
    if FLAGS.L < 3:
      experiment.fail("L", f"must be >= 3 (roll-based bonds double-count at L = 2), got {FLAGS.L}")
    config.L = FLAGS.L
  if FLAGS.beta is not None:
    if FLAGS.beta <= 0:
      experiment.fail("beta", f"must be > 0, got {FLAGS.beta}")
    config.beta = FLAGS.beta
  config.update(explicit)
  return name


def histogram_plot(path, e_model, e_ref, title):
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, ax = plt.subplots(figsize=(6, 4))
  lo, hi = min(e_model.min(), e_ref.min()), max(e_model.max(), e_ref.max())
  levels = np.unique(np.concatenate([e_model, e_ref]))
  step = np.min(np.diff(levels)) if levels.size > 1 else 1.0  # energies live on a lattice
  bins = (
    np.arange(lo - step / 2, hi + step, step)
    if (hi - lo) / step <= 200
    else np.linspace(lo, hi, 60)
  )
  ax.hist(e_ref, bins=bins, density=True, alpha=0.5, label=f"MCMC (Swendsen–Wang, n={e_ref.size})")
  ax.hist(e_model, bins=bins, density=True, alpha=0.5, label=f"DASBS (n={e_model.size})")
  ax.set_xlabel("energy per spin")
  ax.set_ylabel("density")
  ax.set_title(title)
  ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def evaluate(state, key, mesh, num, mcmc_out):
  """Model samples in batches of batch_size, then every metric against MCMC / exact values."""
  spec = state.spec
  tgt = spec.target
  bs = spec.batch_size
  fn = jax.jit(lambda p, k: dasbs.simulate(spec, p, k, bs, mesh))
  outs = [fn(state.ctrl_ema, jax.random.fold_in(key, i)) for i in range(max(1, -(-num // bs)))]
  out = {
    k: jnp.concatenate([o[k] for o in outs])
    if jnp.ndim(outs[0][k])
    else jnp.mean(jnp.stack([o[k] for o in outs]))
    for k in ("x1", "log_rnd", "log_p_u", "log_p_r", "invalid_frac")
  }
  e_ref = np.asarray(mcmc_out["energies"]).ravel()
  exact_obs = (
    exact.ising_exact_observables(tgt.L, tgt.beta, tgt.J)
    if (tgt.kind == "ising" and tgt.h == 0.0)
    else None
  )
  res = metrics.summarize(tgt, spec.sched, spec.source, out, e_ref=e_ref, exact_obs=exact_obs)
  ref_stats = metrics.lattice_stats(tgt, mcmc_out["x"])
  res.update({f"mcmc/{k}": v for k, v in ref_stats.items()})
  res["mcmc/tau_int_energy"] = mcmc_out["tau"]
  if exact_obs is not None:
    res.update({f"exact/{k}": v for k, v in exact_obs.items()})
    res["mcmc/abs_err_u_per_spin"] = abs(ref_stats["u_per_spin_mean"] - exact_obs["u_per_spin"])
  e_model = np.asarray(tgt.energy(out["x1"])) / tgt.D
  return res, e_model, e_ref / tgt.D


def main(argv):
  del argv
  config = _CONFIG.value
  name = resolve_config(config)
  try:
    spec = dasbs.make_spec(config)
  except ValueError as e:
    field, msg = str(e).split(": ", 1)
    experiment.fail(field, msg)
  run = experiment.common(
    "dasbs",
    default_steps=spec.total_steps,
    # equal chunk lengths (one compile): a divisor of both phase lengths
    default_log_every=math.gcd(spec.ctrl_steps, spec.corr_steps or spec.ctrl_steps),
    default_ckpt_every=spec.ctrl_steps + spec.corr_steps,
    mesh_axes=("data",),
  )
  for flag in ("eval_samples", "mcmc_chains", "mcmc_samples", "mcmc_thin"):
    experiment.check_positive(flag, getattr(FLAGS, flag))
  experiment.check_positive("mcmc_burn_in", FLAGS.mcmc_burn_in, allow_zero=True)
  if run.mesh is not None:
    n = sharding.named_sharding(run.mesh, ("batch",)).num_devices
    if spec.batch_size % n:
      experiment.fail(
        "config.batch_size", f"{spec.batch_size} is not divisible by the {n} devices of --mesh"
      )
  experiment.prepare_workdir(run.workdir)
  key = jax.random.key_data(jax.random.key(run.seed))
  print(
    f"[dasbs] preset {name}: {spec.target} noise={spec.sched} source={spec.source} "
    f"steps={run.steps} (schedule {spec.total_steps})",
    flush=True,
  )

  t0 = time.perf_counter()
  state = dasbs.train(
    spec,
    jax.random.fold_in(key, 0),
    mesh=run.mesh,
    workdir=run.workdir,
    num_steps=run.steps,
    log_every=run.log_every,
    ckpt_every=run.ckpt_every,
    record=config,
  )
  train_s = time.perf_counter() - t0

  t1 = time.perf_counter()
  xs, es, _ = mcmc.run_chains(
    jax.random.fold_in(key, 2),
    spec.target,
    FLAGS.mcmc_chains,
    FLAGS.mcmc_samples,
    FLAGS.mcmc_burn_in,
    FLAGS.mcmc_thin,
    "sw",
  )
  mc = {"x": xs, "energies": es, "tau": mcmc.integrated_autocorr(np.asarray(es))}
  mcmc_s = time.perf_counter() - t1
  res, e_model, e_ref = evaluate(
    state, jax.random.fold_in(key, 1), run.mesh, FLAGS.eval_samples, mc
  )
  histogram_plot(
    run.workdir / "energy_hist.png",
    e_model,
    e_ref,
    f"{name}: {spec.target.kind} L={spec.target.L} beta={spec.target.beta}",
  )
  import json

  base = json.loads((run.workdir / "summary.json").read_text())
  summary = {
    **base,
    "preset": name,
    "train_wall_s": train_s,
    "mcmc_wall_s": mcmc_s,
    **{f"eval/{k}": v for k, v in res.items()},
  }
  experiment.write_summary(run.workdir, summary)
  keys = [
    "energy_w2",
    "ess",
    "ess_target",
    "abs_err_f_per_spin",
    "abs_err_u_per_spin",
    "mag",
    "phase_plus_frac",
    "majority_frac",
    "colour_balance",
  ]
  print(
    "[dasbs] "
    + " ".join(f"{k}={res[k]:.4g}" for k in keys if k in res)
    + f" -> {run.workdir}/summary.json",
    flush=True,
  )


if __name__ == "__main__":
  experiment.run(main)
