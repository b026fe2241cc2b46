r"""R4 (arXiv 2601.09236): learn a reward from trajectory ratings, then train PPO on it.

Offline protocol: a pool of behaviour trajectories (random linear policies,
``jaxlab.envs.gymnax``) is rated (simulated: true returns binned into classes; or a human-ratings
CSV, see docs/r4.md), the reward ensemble is fitted with ``--method`` (r4: rMSE on soft ranks;
rbrl; bt: Bradley-Terry on pairs), Kendall tau / Spearman rho are measured on held-out
trajectories, and PPO (``jaxlab.rl.ppo``) is trained on the learned reward and evaluated on the
TRUE return.
``--protocol=online``: rounds of PPO, rollouts of the current policy, new ratings, refit.
``--method=true`` trains PPO on the true reward (the upper reference). The protocol is
``jaxlab.rl.r4.protocol.run_setting`` (the flags as one ``protocol.Setting``); the config is
``jaxlab.rl.r4.get_config()`` (``--config.x=...``;
PPO's fields under ``--config.ppo.``); ``--steps`` (PPO updates) defaults to
``config.ppo.total_timesteps // (num_envs * num_steps)``.

Outputs in the workdir (default ``runs/r4/<env>/<method>/<protocol>``): summary.json,
alignment.png (held-out learned vs true return), agent.png (true return vs environment steps),
trajectories.npz (the rated pool, to rate by hand). ``--seeds=3`` (seeds ``--seed`` .. +2) or
``--seeds=0,3,7`` runs several seeds in one workdir: each seed's pool, ratings and reward fit in
turn, and every PPO phase for all seeds vmapped in one compiled program (seed k draws
the keys of ``--seed=k`` alone); summary.json holds the means and ``per_seed``, each seed's
files are under ``seed<k>/``. Commands (CPU, 2 busy cores):

  python -m experiments.r4 --env=cartpole --method=r4 --ratings=simulated   # ~6 min
  python -m experiments.r4 --env=cartpole --method=bt --ratings=simulated
  python -m experiments.r4 --env=cartpole --method=r4 --ratings=my_ratings.csv
  python -m experiments.r4 --env=cartpole --method=r4 --protocol=online
  python -m experiments.r4 --env=cartpole --method=r4 --seeds=3   # seeds 0-2, PPO vmapped

The comparison studies of docs/r4.md (every method x rater noise x seed) are
``python -m experiments.study r4/pendulum`` (and the earlier ``r4/cartpole``, ``r4/asterix``;
`jaxlab.studies.r4`).
"""

from __future__ import annotations

from absl import flags

from jaxlab.core import experiment
from jaxlab.envs import gymnax
from jaxlab.rl import r4
from jaxlab.rl.r4 import protocol as r4_protocol

flags.DEFINE_string(
  "env", "cartpole", "gymnax environment (cartpole, acrobot, breakout-minatar...)"
)
flags.DEFINE_string("method", "r4", "Reward learning: r4 | rbrl | bt | true (PPO on true reward).")
flags.DEFINE_string("ratings", "simulated", "'simulated' or a CSV file 'trajectory_id,rating'.")
flags.DEFINE_string("protocol", "offline", "offline | online")
FLAGS = flags.FLAGS
_CONFIG = experiment.define_config(r4.get_config())

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
  method, ratings, protocol = FLAGS.method, FLAGS.ratings, FLAGS.protocol
  gymnax.resolve(FLAGS.env)
  run = experiment.common(
    "r4",
    default_steps=r4.ppo_updates(config),
    variant=(FLAGS.env, method, "file" if ratings != "simulated" else "sim", protocol),
    unused=UNUSED_FLAGS,
    seeds=True,
  )
  setting = r4_protocol.Setting(
    FLAGS.env, method, run.steps, ratings=ratings, protocol=protocol, seeds=run.seeds
  )
  summary = r4_protocol.run_setting(config, setting, run.workdir)
  tau = summary.get("heldout/kendall_tau", float("nan"))
  over = f" (means over {len(run.seeds)} seeds)" if len(run.seeds) > 1 else ""
  print(
    f"{method}: held-out Kendall tau {tau:.3f}, "
    f"true eval return {summary['eval/true_return']:.4g}{over} -> {run.workdir}"
  )


if __name__ == "__main__":
  experiment.run(main)
