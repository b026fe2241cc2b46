"""Discrete ASBS on periodic Ising / Potts lattices (presets: `experiments/configs/dasbs.py`).

Commands:
  # Ising at beta_c, L = 24 (the default preset): GPU intended, hours on 2 CPU cores.
  python -m experiments.dasbs --config=experiments/configs/dasbs.py:ising_critical
  python -m experiments.dasbs --config=experiments/configs/dasbs.py:potts_low --mesh=data:-1
  # The CPU preset: Ising at beta_c, L = 4 (minutes on 2 CPU cores; its schedule and per-seed
  # unweighted energy errors: experiments/configs/dasbs.py and docs/results/dasbs/notes.md):
  python -m experiments.dasbs --config=experiments/configs/dasbs.py:ising_critical_cpu
  # Seeds 0-3 of the CPU preset vmapped in one compiled program (one device; seed k equals
  # --seed=k alone; summary.json: means over seeds and per_seed):
  python -m experiments.dasbs --config=experiments/configs/dasbs.py:ising_critical_cpu --seeds=4

Writes to --workdir (default runs/dasbs/<target>/L<L>_beta<beta>): config.json, metrics.csv, tb/,
checkpoints/ (core runtime), curves.png (controller and corrector losses, each over its own phases),
energy_hist.png (model vs MCMC) and summary.json (energy W2 vs MCMC, magnetisation and +/- phase
balance or Potts majority fraction and colour balance, ESS, |F^-F| and |U^-U| per spin vs the exact
Ferdinand–Fisher values for Ising at h = 0). The printed line starts with what the samples show
unweighted (err_u_unweighted, energy_w2, ess_target), then the reweighted estimates.

The same run from Python: `jaxlab.sampling.evaluation.train_and_report` (docs/dasbs.md, "Use from
Python").
"""

from __future__ import annotations

import jax
from absl import flags

from jaxlab.core import experiment
from jaxlab.core import workdir as workdir_lib
from jaxlab.sampling import dasbs, evaluation

_EVAL_FLAGS = {  # defaults: evaluation.get_config()
  "eval_samples": "Model samples for the final metrics.",
  "stage_eval_samples": "Model samples scored after every stage (mean energy per spin and, for "
  "Ising at h = 0, its signed error against the exact value: + = too disordered); 0 turns it off.",
  "mcmc_chains": "MCMC reference chains.",
  "mcmc_samples": "Kept samples per chain.",
  "mcmc_burn_in": "Burn-in sweeps per chain.",
  "mcmc_thin": "Sweeps between kept samples.",
}
for _name, _help in _EVAL_FLAGS.items():
  flags.DEFINE_integer(_name, evaluation.get_config()[_name], _help)
FLAGS = flags.FLAGS

CONFIG = experiment.define_config_file(experiment.config_path(__file__))


def eval_settings():
  """The --eval_samples, --stage_eval_samples and --mcmc_* flags as a validated ConfigDict."""
  ev = evaluation.get_config()
  ev.update({name: FLAGS[name].value for name in _EVAL_FLAGS})
  return evaluation.validate_config(ev)


UNUSED_FLAGS = ("videos",)  # no evaluation video (also out of --help)


def main(argv):
  del argv
  config = CONFIG.value
  spec = dasbs.make_spec(config)  # ConfigError names the field
  tgt = spec.target
  run = experiment.common(
    "dasbs",
    default_steps=spec.total_steps,
    default_log_every=evaluation.chunk_steps(spec),
    default_ckpt_every=spec.phase_steps,
    variant=(tgt.kind, f"L{tgt.L}_beta{tgt.beta:g}"),
    mesh_axes=("data",),
    seeds=True,
    unused=UNUSED_FLAGS,
  )
  many = len(run.seeds) > 1
  experiment.require(
    not many or run.mesh is None, "seeds", "several seeds train vmapped on one device; drop --mesh"
  )
  ev = eval_settings()
  run.check_batch("config.batch_size", spec.batch_size)
  devices = 1 if run.mesh is None else run.mesh.size
  evaluation.check_memory(spec, ev, devices=devices, seeds=len(run.seeds))
  print(
    f"[dasbs] {tgt} noise={spec.sched} source={spec.source} ctrl={spec.ctrl_loss} "
    f"corr={spec.corr_loss} steps={run.steps} (schedule {spec.total_steps})"
    + (f" seeds={','.join(map(str, run.seeds))} (vmapped)" if many else ""),
    flush=True,
  )
  loop = run.loop(
    history=True,
    plot=False,
    progress_keys=("loss", "ess", "stage"),
    eval_every=spec.phase_steps if ev.stage_eval_samples else 0,
    memory_field="config.batch_size",  # a chunk's memory grows with batch_size x num_repl paths
  )
  with workdir_lib.identity(run.seeds):  # another seed never continues or replaces this run
    evaluation.train_and_report(
      config,
      ev,
      jax.random.key_data(jax.random.key(run.seed)),
      workdir=run.workdir,
      loop=loop,
      mesh=run.mesh,
      log=lambda line: print(line, flush=True),
      seeds=run.seeds if many else None,
    )


if __name__ == "__main__":
  experiment.run(main)
