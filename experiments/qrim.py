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
``--config.ppo.``). ``--seeds=3`` (seeds ``--seed`` .. +2) or ``--seeds=0,3,7`` runs several
seeds in one workdir: parts 1 and 2 seed by seed, part 3's PPO for all seeds vmapped in one
compiled program per arm (seed k draws the keys of ``--seed=k`` alone); summary.json holds the
means and ``per_seed``, each seed's queries.png is under ``seed<k>/``. Commands (times: wall
time on 2 CPU cores; every part prints a line per step of its progress):

  python -m experiments.qrim --env=cartpole --set_size=256 --steps=200   # ~25 min, cores busy
  python -m experiments.qrim --env=pendulum --set_size=64 --config.robust_ppo=False
      # parts 1-2 only: 105 s with the cores busy (load ~14), so under 2 min on idle cores
  python -m experiments.qrim --env=cartpole --set_size=64 --seeds=3     # seeds 0-2

The evidence over seeds of docs/qrim.md (robust against nominal PPO; the queries against |U|)
is ``python -m experiments.study qrim/robust`` and ``qrim/queries`` (`jaxlab.studies.qrim`).
"""

from __future__ import annotations

from absl import flags

from jaxlab.core import experiment, provenance
from jaxlab.rl import qrim
from jaxlab.rl.qrim import protocol as qrim_protocol
from jaxlab.rl.qrim import robust as qrim_robust

flags.DEFINE_string(
  "env", "cartpole", "cartpole | cartpole_force | pendulum (parameter grids: docs/qrim.md)"
)
flags.DEFINE_integer("set_size", 256, "|U|: uncertainty-set size of the robust MDP and the grid")
FLAGS = flags.FLAGS
_CONFIG = experiment.define_config(qrim.get_config())

UNUSED_FLAGS = (
  "mesh",
  "keep",
  "ckpt_every",
  "profile",
  "log_every",
  "tracker",
  "videos",
)  # also out of --help


def main(argv):
  del argv
  config = _CONFIG.value
  env, set_size = qrim_robust.check_env(FLAGS.env), FLAGS.set_size
  qrim.validate_config(config, set_size)
  run = experiment.common(
    "qrim",
    default_steps=qrim.ppo_updates(config),
    variant=(env, set_size),
    unused=UNUSED_FLAGS,
    seeds=True,
  )
  provenance.announce()
  qrim_protocol.run(
    config,
    env=env,
    set_size=set_size,
    updates=run.steps,
    seed=run.seed,
    seeds=run.seeds,
    workdir=run.workdir,
  )
  plot = "seed<k>/queries.png" if len(run.seeds) > 1 else "queries.png"
  print(f"-> {run.workdir}/summary.json, {plot}")


if __name__ == "__main__":
  experiment.run(main)
