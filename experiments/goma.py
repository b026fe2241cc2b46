"""GOMA and the monotone-VI baselines: last-iterate ||F(z_k)||^2 against oracle calls.

Test problems T1-T3 and the reconstruction of GOMA (arXiv 2606.21528) are described in
docs/goma.md.

  python -m experiments.goma --problem=bilinear --methods=eg,popov,eag_v,feg,apv,goma --steps=10000
      T1 (n = 40 bilinear, s log-spaced in [1e-3, 1]), 5 seeds; about 20 s on 2 idle CPU cores
      (19 s of CPU time; 82 s measured with the cores busy, load ~20).
  python -m experiments.goma --problem=stochastic_bilinear --noise=multiplicative
      T2 (DSEG bilinear d = 50, additive sigma = 0.5 + matrix noise sigma_C = 0.1, i.e.
      variance growing with ||z - z*||^2); default methods goma_stochastic, dseg,
      popov_anchored_1step (single decaying step size), apv; ~30 s.
  python -m experiments.goma --problem=quadratic | --problem=rotation
  python -m experiments.goma --seeds=0,3,7   # these instances (default: 5 seeds from --seed)
  python -m experiments.goma --study_figure=docs/results/goma/unbounded_tuned
      figure.png of the study goma/unbounded_tuned (or goma/unbounded), run by
      `python -m experiments.study goma/unbounded_tuned`, from its raw per-seed files.

--seeds picks the instances: a count N (seeds --seed ... --seed+N-1) or a list; without it, 5
seeds from --seed. Seed k is one problem instance, start and noise stream, the same in any set of
seeds; every method solves all seeds in one vmapped jit. summary.json: per_seed holds each seed's
final residual (and constant).

--steps is the number of iterations of every method. Writes into --workdir (default
runs/goma/<problem>): curves.png (log-log; the curve is the geometric mean over seeds for
deterministic problems and the arithmetic mean, i.e. E||F(z_k)||^2, for stochastic ones; the band is
min..max over seeds), metrics.csv (log-spaced iterations) and summary.json (per method: slope of the
curve over iterations config.fit_lo..fit_hi, for deterministic problems the constant
k^2 ||F(z_k)||^2 / (L^2 R^2) at the last iteration, final residual and oracle calls). ||F|| is
measured at the update sequence z_k with the exact operator. GOMA here is a reconstruction: see
`jaxlab.optim.goma.vi.run`. Deterministic GOMA is anchored Popov with a constant 0.4/L step: on
deterministic problems a step-size sweep (config.step_sweep, step_sweep.csv) runs that update at
eta = c/L for each c and reports each as stable or diverged, so GOMA's lead over APV (whose step
tends to 0.215/L) shows as what it is, a larger stable step.

The same run from Python: `goma.compare.run_comparison` then `goma.compare.write_report`
(docs/goma.md, "Use from Python").
"""

from __future__ import annotations

import pathlib

from absl import flags

from jaxlab.core import experiment, provenance
from jaxlab.core import workdir as workdir_lib
from jaxlab.optim import goma

# Shared flags this experiment has no use for: one vmapped solve per method, no checkpoints.
UNUSED_FLAGS = ("ckpt_every", "keep", "mesh", "log_every", "profile", "tracker", "videos")

_PROBLEM = flags.DEFINE_string(
  "problem", "bilinear", f"Test problem: {', '.join(goma.compare.PROBLEMS)}."
)
_METHODS = flags.DEFINE_string(
  "methods",
  None,
  f"Comma-separated methods: {', '.join(goma.compare.METHODS)} (default: per problem).",
)
_NOISE = flags.DEFINE_string(
  "noise",
  "multiplicative",
  f"Oracle noise for stochastic_bilinear: {', '.join(goma.compare.NOISES)}.",
)
_FIGURE = flags.DEFINE_string(
  "study_figure",
  None,
  "Only draw figure.png of the study goma/<folder name> from the raw results in this folder "
  "(docs/results/goma/unbounded or docs/results/goma/unbounded_tuned) and exit.",
)
_CONFIG = experiment.define_config(goma.get_config())


def main(argv):
  del argv
  if _FIGURE.value is not None:
    from jaxlab.studies import goma as goma_study

    results = pathlib.Path(_FIGURE.value)
    names = [n for n in goma_study.NAMES if n == f"goma/{results.name}"]
    if not names or not (results / "raw").is_dir():
      allowed = ", ".join(f"docs/results/{n}" for n in goma_study.NAMES)
      experiment.fail("study_figure", f"{results} holds no raw/ results of {allowed}")
    print(f"wrote {goma_study.figure(results, name=f'goma/{results.name}')}")
    return
  cfg = goma.validate_config(_CONFIG.value)
  goma.compare.check_problem(_PROBLEM.value, _NOISE.value, _METHODS.value)
  variant = (_PROBLEM.value,)
  run = experiment.common(
    "goma", default_steps=10_000, variant=variant, unused=UNUSED_FLAGS, seeds=True
  )
  # a comparison is over seeds: without --seeds, 5 of them from --seed
  seeds = goma.compare.run_seeds(None if experiment.FLAGS.seeds is None else run.seeds, run.seed)
  methods = goma.compare.check_run(
    cfg, _PROBLEM.value, _NOISE.value, _METHODS.value, run.steps, seeds
  )
  noise = _NOISE.value if _PROBLEM.value.startswith("stochastic") else None
  record = {"config": cfg.to_dict(), "problem": _PROBLEM.value, "noise": noise}
  record.update(methods=methods, steps=run.steps, seeds=list(seeds))
  with workdir_lib.session(run.workdir, record) as workdir:
    if workdir_lib.finished(workdir) is not None:
      print(f"{workdir} holds this finished run (summary.json); nothing rewritten")
      return
    provenance.announce()
    result = goma.compare.run_comparison(
      cfg,
      _PROBLEM.value,
      methods,
      _NOISE.value,
      steps=run.steps,
      seeds=seeds,
      log=lambda line: print(line, flush=True),
    )
    goma.compare.write_report(workdir, result)
  print(f"wrote {workdir}/curves.png, metrics.csv, summary.json")


if __name__ == "__main__":
  experiment.run(main)
