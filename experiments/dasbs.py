"""Discrete ASBS on periodic Ising / Potts lattices (presets: `experiments/configs/dasbs.py`).

Commands:
  # Ising at beta_c, L = 24 (the default preset): GPU intended, hours on 2 CPU cores.
  python -m experiments.dasbs --config=experiments/configs/dasbs.py:ising_critical
  python -m experiments.dasbs --config=experiments/configs/dasbs.py:potts_low --mesh=data:-1
  # The CPU preset: Ising at beta_c, L = 4 (minutes on 2 CPU cores; its schedule and per-seed
  # unweighted energy errors: experiments/configs/dasbs.py and docs/dasbs.md, "CPU presets"):
  python -m experiments.dasbs --config=experiments/configs/dasbs.py:ising_critical_cpu

Writes to --workdir (default runs/dasbs/<target>/L<L>_beta<beta>): config.json, metrics.csv, tb/,
checkpoints/ (core runtime), curves.png (controller and corrector losses, each over its own phases),
energy_hist.png (model vs MCMC) and summary.json (energy W2 vs MCMC, magnetisation and +/- phase
balance or Potts majority fraction and colour balance, ESS, |F^-F| and |U^-U| per spin vs the exact
Ferdinand–Fisher values for Ising at h = 0). The printed line starts with what the samples show
unweighted (err_u_unweighted, energy_w2, ess_target), then the reweighted estimates.
"""

from __future__ import annotations

import math
import pathlib
import time

import jax
import numpy as np
from absl import flags

from jaxlab.core import experiment, plots, runtime
from jaxlab.sampling import dasbs, exact, mcmc, metrics

CONFIG_FILE = pathlib.Path(__file__).resolve().parent / "configs" / "dasbs.py"

# The energy per spin of critical 4 x 4 Ising has a standard deviation of 0.50: 8192 samples
# measure its mean to +/- 0.0055 (1024: 0.016, too coarse for a 0.05 target).
flags.DEFINE_integer("eval_samples", 8192, "Model samples for the final metrics.")
flags.DEFINE_integer(
  "stage_eval_samples",
  1024,
  "Model samples scored after every stage (mean energy per spin and, for Ising at h = 0, its "
  "signed error against the exact value: + = too disordered); 0 turns it off.",
)
flags.DEFINE_integer("mcmc_chains", 64, "MCMC reference chains.")
flags.DEFINE_integer("mcmc_samples", 32, "Kept samples per chain.")
flags.DEFINE_integer("mcmc_burn_in", 200, "Burn-in sweeps per chain.")
flags.DEFINE_integer("mcmc_thin", 5, "Sweeps between kept samples.")
FLAGS = flags.FLAGS

CONFIG = experiment.define_config_file(str(CONFIG_FILE))


def check_mcmc_flags() -> None:
  for flag in ("mcmc_chains", "mcmc_samples", "mcmc_thin"):
    experiment.check_positive(flag, getattr(FLAGS, flag))
  experiment.check_positive("mcmc_burn_in", FLAGS.mcmc_burn_in, allow_zero=True)


def mcmc_method(target) -> str:
  """Swendsen–Wang where it applies (h = 0, J > 0), else single-site Metropolis."""
  return "sw" if target.h == 0.0 and target.J > 0 else "metropolis"


def mcmc_reference(target, key, method: str | None = None) -> dict:
  """MCMC samples of the target from the --mcmc_* flags: x, energies (samples x chains), tau_int of
  the energy in kept samples, wall seconds (compilation included)."""
  t0 = time.perf_counter()
  method = method or mcmc_method(target)
  xs, es, _ = mcmc.run_chains(
    key, target, FLAGS.mcmc_chains, FLAGS.mcmc_samples, FLAGS.mcmc_burn_in, FLAGS.mcmc_thin, method
  )
  es = np.asarray(es)
  return {
    "x": xs,
    "energies": es,
    "tau": mcmc.integrated_autocorr(es),
    "method": method,
    "wall_s": time.perf_counter() - t0,
  }


def evaluate(state, key, mesh, num: int, mc: dict):
  """Model samples, then every metric against MCMC and (Ising, h = 0) the exact values."""
  tgt = state.spec.target
  out = dasbs.sample_paths(state, key, num, mesh)
  e_ref = np.asarray(mc["energies"]).ravel()
  exact_obs = None
  if tgt.kind == "ising" and tgt.h == 0.0:
    exact_obs = exact.ising_exact_observables(tgt.L, tgt.beta, tgt.J)
  res = metrics.summarize(
    tgt, state.spec.sched, state.spec.source, out, e_ref=e_ref, exact_obs=exact_obs
  )
  ref_stats = metrics.lattice_stats(tgt, mc["x"])
  res.update({f"mcmc/{k}": v for k, v in ref_stats.items()})
  res["mcmc/tau_int_energy"] = mc["tau"]
  if exact_obs is not None:
    res.update({f"exact/{k}": v for k, v in exact_obs.items()})
    res["mcmc/abs_err_u_per_spin"] = abs(ref_stats["u_per_spin_mean"] - exact_obs["u_per_spin"])
  e_model = np.asarray(tgt.energy(out["x1"])) / tgt.D
  return res, e_model, e_ref / tgt.D


def stage_eval(spec, key, num: int, mesh):
  """eval_fn for the runtime: the sampler after each stage (it only changes in controller phases).
  One compiled sampler for every stage; keys fold in the step, apart from the training keys."""
  tgt = spec.target
  exact_u = None
  if tgt.kind == "ising" and tgt.h == 0.0:
    exact_u = exact.ising_exact_observables(tgt.L, tgt.beta, tgt.J)["u_per_spin"]
  sim = jax.jit(lambda ctrl, k: dasbs.simulate(spec, ctrl, ctrl.target_params, k, num, mesh)["x1"])

  def eval_fn(state, step):
    u = float(np.mean(np.asarray(tgt.energy(sim(state.ctrl, jax.random.fold_in(key, step))))))
    out = {"stage_u_per_spin": u / tgt.D}
    if exact_u is not None:
      out["stage_err_u_signed"] = u / tgt.D - exact_u
    return out

  return eval_fn


def energy_bins(*energies_per_spin: np.ndarray) -> np.ndarray:
  """One bin per energy level (energies live on a lattice), or 60 bins when there are too many."""
  allv = np.concatenate(energies_per_spin)
  lo, hi = allv.min(), allv.max()
  levels = np.unique(allv)
  step = np.min(np.diff(levels)) if levels.size > 1 else 1.0
  if (hi - lo) / step <= 200:
    return np.arange(lo - step / 2, hi + step, step)
  return np.linspace(lo, hi, 60)


def loss_curves(path, history: dict, first_step: int):
  """Per-step curves; each loss only over the steps of its own phase (gaps elsewhere)."""
  n = len(history.get("loss", ()))
  if n == 0:  # nothing ran in this process (a finished run re-opened)
    return None
  steps = first_step + np.arange(n)
  by_phase = dasbs.loss_by_phase(history)
  series = [
    ("controller loss (controller phases)", steps, by_phase["ctrl_loss"]),
    ("corrector loss (corrector phases)", steps, by_phase["corr_loss"]),
    ("tau-leap log-RND ESS (last resample)", steps, history["ess"]),
    ("invalid tau-leap rows (last resample)", steps, history["invalid_frac"]),
  ]
  return plots.panels(path, [s for s in series if np.isfinite(s[2]).any()])


def report(run, state, result, key, train_s: float) -> None:
  """MCMC reference, model samples, plots, summary.json and the printed line."""
  tgt = state.spec.target
  mc = mcmc_reference(tgt, jax.random.fold_in(key, 2))
  res, e_model, e_ref = evaluate(
    state, jax.random.fold_in(key, 1), run.mesh, FLAGS.eval_samples, mc
  )
  first = result.summary.get("resumed_from", 0) + 1
  loss_curves(run.workdir / "curves.png", result.history or {}, first)
  plots.histograms(
    run.workdir / "energy_hist.png",
    {f"MCMC ({mc['method']}, n={e_ref.size})": e_ref, f"DASBS (n={e_model.size})": e_model},
    xlabel="energy per spin",
    title=f"{tgt.kind} L={tgt.L} beta={tgt.beta}",
    bins=energy_bins(e_model, e_ref),
  )
  summary = {
    **result.summary,
    "train_wall_s": train_s,
    "mcmc_wall_s": mc["wall_s"],
    "mcmc/method": mc["method"],
    **{f"eval/{k}": v for k, v in res.items()},
  }
  stages = [result.evals[s] for s in sorted(result.evals)]
  if stages and "stage_err_u_signed" in stages[0]:
    summary["stage_err_u_signed"] = [ev["stage_err_u_signed"] for ev in stages]
    errs = ", ".join(f"{e:+.3f}" for e in summary["stage_err_u_signed"])
    print(f"[dasbs] signed err_u after each stage (+ = too disordered; this process): {errs}")
  runtime.write_summary(run.workdir, summary)
  print(
    f"[dasbs] {metrics.result_line(res)} -> {run.workdir}/summary.json",
    flush=True,
  )


def main(argv):
  del argv
  config = CONFIG.value
  spec = dasbs.make_spec(config)  # ConfigError names the field
  tgt = spec.target
  run = experiment.common(
    "dasbs",
    default_steps=spec.total_steps,
    # equal chunk lengths (one compile), each inside one phase: a divisor of both phase lengths
    default_log_every=math.gcd(spec.ctrl_steps, spec.corr_steps or spec.ctrl_steps),
    default_ckpt_every=spec.phase_steps,
    variant=(tgt.kind, f"L{tgt.L}_beta{tgt.beta:g}"),
    mesh_axes=("data",),
  )
  experiment.check_positive("eval_samples", FLAGS.eval_samples)
  experiment.check_positive("stage_eval_samples", FLAGS.stage_eval_samples, allow_zero=True)
  check_mcmc_flags()
  run.check_batch("config.batch_size", spec.batch_size)
  key = jax.random.key_data(jax.random.key(run.seed))
  print(
    f"[dasbs] {tgt} noise={spec.sched} source={spec.source} ctrl={spec.ctrl_loss} "
    f"corr={spec.corr_loss} steps={run.steps} (schedule {spec.total_steps})",
    flush=True,
  )

  t0 = time.perf_counter()
  n_stage = FLAGS.stage_eval_samples
  loop = run.loop(
    history=True,
    plot=False,
    progress_keys=("loss", "ess", "stage"),
    eval_every=spec.phase_steps if n_stage else 0,
  )
  state, result = dasbs.train(
    spec,
    jax.random.fold_in(key, 0),
    mesh=run.mesh,
    workdir=run.workdir,
    loop=loop,
    record=config,
    eval_fn=stage_eval(spec, jax.random.fold_in(key, 3), n_stage, run.mesh) if n_stage else None,
  )
  report(run, state, result, key, time.perf_counter() - t0)


if __name__ == "__main__":
  experiment.run(main)
