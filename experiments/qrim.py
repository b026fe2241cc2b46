r"""QRIM reconstruction: quantum minimum finding (simulated) as the inner minimum of robust RL.

Reconstruction, not the paper's algorithm (no QRIM text or code is public; see docs/qrim.md): the
inner ``min_u`` of robust RL is Duerr-Hoyer quantum minimum finding on BBHT search, simulated
classically (``jaxlab.rl.qrim``). Three parts (``jaxlab.rl.qrim.protocol.run``), written to the
workdir (default ``runs/qrim/<env>/<set_size>``):

1. query scaling: oracle queries of one minimisation vs |U| = 2^4..2^max_log2 (``trials`` random
   sets each, 95% intervals over them) against the exhaustive |U|; fitted log-log slope;
   ``queries.png`` (log-log);
2. tabular robust value iteration (random (s,a)-rectangular robust MDP, |U| = ``--set_size``):
   the simulated minimiser's values vs exhaustive minimisation, queries per backup;
3. robust PPO (``jaxlab.rl.qrim.robust``) on ``--env`` with U a ``--set_size`` grid of physical
   parameters vs PPO on the nominal parameters, both evaluated on held-out parameters
   (``--steps`` PPO updates, default ``config.ppo.total_timesteps // (num_envs * num_steps)``;
   ``--config.robust_ppo=False`` skips this part).

The config is ``jaxlab.rl.qrim.get_config()`` (``--config.x=...``; PPO's fields under
``--config.ppo.``). Commands (CPU, 2 busy cores):

  python -m experiments.qrim --env=cartpole --set_size=256 --steps=200   # ~25 min
  python -m experiments.qrim --env=pendulum --set_size=64 --config.robust_ppo=False

``--study_seeds=N`` runs instead the evidence study of docs/qrim.md (``jaxlab.rl.qrim.study``):
seeds ``--seed`` .. ``--seed``+N-1, each the backup's query counts and PPO trained on the nominal
parameters, on uniform draws from the grid and on the worst case (``--steps`` updates each), one
resumable cell per seed and arm under ``--workdir``, whose table.md aggregates the finished ones:

  python -m experiments.qrim --study_seeds=5 --set_size=64 --steps=200 \
    --workdir=docs/results/qrim_study
"""

from __future__ import annotations

from absl import flags

from jaxlab.core import experiment, provenance
from jaxlab.core.errors import ConfigError
from jaxlab.rl import qrim
from jaxlab.rl.qrim import protocol as qrim_protocol
from jaxlab.rl.qrim import robust as qrim_robust
from jaxlab.rl.qrim import study as qrim_study

flags.DEFINE_string("env", "cartpole", "cartpole | pendulum (parameter grids: docs/qrim.md)")
flags.DEFINE_integer("set_size", 256, "|U|: uncertainty-set size of the robust MDP and the grid")
flags.DEFINE_integer(
  "study_seeds", 0, "> 0: the evidence study over this many seeds (docs/qrim.md)"
)
FLAGS = flags.FLAGS
_CONFIG = experiment.define_config(qrim.get_config())


def main(argv):
  del argv
  config = _CONFIG.value
  env, set_size = qrim_robust.check_env(FLAGS.env), FLAGS.set_size
  qrim.validate_config(config, set_size)
  if FLAGS.study_seeds < 0:
    raise ConfigError("study_seeds", f"must be >= 0, got {FLAGS.study_seeds}")
  run = experiment.common(
    "qrim",
    default_steps=qrim.ppo_updates(config),
    variant=(env, set_size, *(("study",) if FLAGS.study_seeds else ())),
    unused=("mesh", "keep", "ckpt_every", "profile", "log_every"),
  )
  provenance.announce()
  if FLAGS.study_seeds:
    seeds = range(run.seed, run.seed + FLAGS.study_seeds)
    qrim_study.run(
      config, env=env, set_size=set_size, updates=run.steps, seeds=seeds, root=run.workdir
    )
    print(f"-> {run.workdir}/table.md, ppo_cells.csv, backup_cells.csv, queries.png, cells/")
    return
  qrim_protocol.run(
    config, env=env, set_size=set_size, updates=run.steps, seed=run.seed, workdir=run.workdir
  )
  print(f"-> {run.workdir}/summary.json, queries.png")


if __name__ == "__main__":
  experiment.run(main)
