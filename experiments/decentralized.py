"""Decentralized SGD with node weights λ: Strategy (I) vs (II) (arXiv 2511.19513; see
docs/decentralized.md for what is the paper's and what is a standard substitute).

Commands (CPU):
  python -m experiments.decentralized --topology=erdos_renyi --lam=degree --problem=least_squares
      # ~15 s: gap.png, consensus.png, diagnostic.md, metrics.csv, summary.json in
      # runs/decentralized/erdos_renyi/least_squares
  python -m experiments.decentralized --sweep  # constant-step bias, topologies × λ (sweep.md)
  python -m experiments.decentralized --sweep --config.lr_policy=own  # each at its own step
  python -m experiments.decentralized --problem=logistic --lam=data  # non-IID digits, λ ∝ data
  python -m experiments.decentralized --mesh=nodes:8 --config.n=8     # one node per device
  python -m experiments.decentralized --seeds=5   # seeds 0-4 vmapped: mean curves, per_seed
  python -m experiments.study decentralized/speed  # the speed study (docs/decentralized.md)
  python -m experiments.decentralized --study_conditions  # its verdict per condition class

--seeds (one device): every seed is its own problem instance and SGD key, all run in one vmapped
scan per strategy (seed k equals --seed=k alone); the plots, verdicts, rates and sweep rows are
those of the mean curves over seeds, metrics.csv gets a seed column, summary.json per_seed.

A strategy whose iterates reach NaN/inf is reported as diverged (never as a winner); a single run
in which every strategy diverged exits with status 3 after writing its summary.

Least squares also reports rates (rates.md): each strategy at the common γ and at its own largest
stable step (exact, `jaxlab.optim.decentralized.stability`) with full and with minibatch gradients,
as the gap after 10, 100, 1000 steps, the tail gap and the linear rate ρ. The sweep compares only
cells where the strategies differ: uniform λ (A = W) is listed as identical, not run.

The same runs from Python: `dec.compare.run_single` and `dec.compare.run_sweep`
(docs/decentralized.md, "Use from Python").
"""

from __future__ import annotations

import sys

from absl import flags

from jaxlab.core import experiment, provenance
from jaxlab.core import workdir as workdir_lib
from jaxlab.optim import decentralized as dec

_TOPOLOGY = flags.DEFINE_string(
  "topology", "erdos_renyi", f"Communication graph: {', '.join(dec.TOPOLOGIES)}."
)
_LAM = flags.DEFINE_string(
  "lam",
  "degree",
  "Node weights λ: uniform, dirichlet (Dirichlet(config.lam_alpha); dirichlet:0.5 sets α), "
  "degree (∝ degree+1), data (∝ local data size).",
)
_PROBLEM = flags.DEFINE_string(
  "problem",
  "least_squares",
  f"Problem: {', '.join(dec.PROBLEMS)} (logistic/mlp need scikit-learn).",
)
_SWEEP = flags.DEFINE_bool(
  "sweep",
  False,
  "Run config.sweep_topologies × config.sweep_lams and "
  "write one table (sweep.md) saying where Strategy II wins.",
)
_STUDY_CONDITIONS = flags.DEFINE_bool(
  "study_conditions",
  False,
  "Only rebuild docs/results/decentralized/speed/conditions.md (the speed study's verdict per "
  "condition class) from its raw files and table.csv, then exit.",
)
# Shared flags this experiment has no use for (each strategy is one in-memory jitted scan).
UNUSED_FLAGS = ("ckpt_every", "keep", "profile", "tracker", "videos")
_CONFIG = experiment.define_config(dec.get_config())


def main(argv):
  del argv
  if _STUDY_CONDITIONS.value:
    from jaxlab.studies import decentralized as studies_dec

    print(studies_dec.write_conditions())
    return
  config, problem = _CONFIG.value, _PROBLEM.value
  topology = experiment.check_choice("topology", _TOPOLOGY.value, dec.TOPOLOGIES)
  lam = dec.parse_lambda(_LAM.value, config.lam_alpha, "lam")
  run = experiment.common(
    "decentralized",
    default_steps=4000,
    default_log_every=10,
    mesh_axes=("nodes",),
    variant=("sweep" if _SWEEP.value else topology, problem),
    unused=UNUSED_FLAGS,
    seeds=True,
  )
  many = len(run.seeds) > 1
  cell = {} if _SWEEP.value else {"topology": topology, "lam": lam}  # the sweep: config's cells
  dec.validate_config(
    config, problem=problem, mesh=run.mesh, steps=run.steps, seeds=len(run.seeds), **cell
  )
  record = {"config": config.to_dict(), "problem": problem, "sweep": _SWEEP.value, **cell}
  # another seed (set) in the same workdir is refused, not mixed into the run
  seeds = {"seeds": list(run.seeds)} if many else {"seed": run.seed}
  record.update(steps=run.steps, **seeds, log_every=run.log_every, mesh=run.mesh_spec)
  with workdir_lib.session(run.workdir, record) as workdir:
    summary = workdir_lib.finished(workdir)
    if summary is not None:
      print(f"{workdir} holds this finished run (summary.json); nothing rewritten")
    else:
      provenance.announce(run.mesh)
      kw = {"problem": problem, "steps": run.steps, "seed": run.seed, "mesh": run.mesh}
      kw["seeds"] = run.seeds if many else None
      if _SWEEP.value:
        summary = dec.compare.run_sweep(config, workdir, **kw)
      else:
        kw.update(topology=topology, lam=_LAM.value, log_every=run.log_every)
        summary = dec.compare.run_single(config, workdir, **kw)
  if not _SWEEP.value and summary.get("all_diverged"):
    msg = "error: every strategy diverged; lower --config.lr (or --config.lr_factor)"
    print(msg, file=sys.stderr, flush=True)
    sys.exit(3)


if __name__ == "__main__":
  experiment.run(main)
