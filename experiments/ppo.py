r"""PPO (arXiv 1707.06347) on gymnax and Craftax with an MLP, GRU or GTrXL policy.

One PPO iteration (rollout, GAE, epochs x minibatches) is one jitted update of the core runtime:
chunked, checkpointed, resumable bit for bit, evaluated between chunks on held-out environment
seeds. Environments are split over the mesh's ``data`` axis (``--mesh=data:-1`` uses every
device). Outputs in the workdir (default ``runs/ppo/<env>/<policy>``): metrics.csv, eval.csv,
curves.png, TensorBoard, summary.json (with the environment packages' versions and, for Craftax,
per-achievement success rates), achievements.png (Craftax). See docs/ppo.md.

The default config (no ``--config``) is sized for gymnax (CartPole); Craftax runs take a preset of
experiments/configs/ppo.py: ``craftax`` (Craftax_Baselines) or ``craftax_gtrxl`` (DiCode's
PPO-GTrXL); ``cpu`` is a seconds-long smoke run. ``--config.<field>=...`` overrides any field.

Commands and measured wall times (CPU: 2 cores shared with other jobs; no GPU figures yet):
  python -m experiments.ppo --env=cartpole                  # solves CartPole: eval 500, ~35 s
  python -m experiments.ppo --env=cartpole --policy=gru     # eval 500, ~1 min
  python -m experiments.ppo --env=cartpole --policy=gtrxl   # eval 500, ~4 min
  python -m experiments.ppo --env=cartpole --config=experiments/configs/ppo.py:cpu  # smoke run
  python -m experiments.ppo --env=cartpole --seeds=5   # seeds 0-4 vmapped in one program
  python -m experiments.ppo --env=craftax-classic-symbolic \
      --config=experiments/configs/ppo.py:craftax --steps=60 --config.num_envs=64 \
      --config.mlp.hidden='(256,256,256)' --config.eval_envs=64 \
      --config.eval_steps=3000  # ~3 min
  python -m experiments.ppo --env=craftax-symbolic --config=experiments/configs/ppo.py:craftax \
      --mesh=data:-1  # Craftax_Baselines: 1e9 steps
  python -m experiments.ppo --env=craftax-symbolic --policy=gtrxl \
      --config=experiments/configs/ppo.py:craftax_gtrxl  # DiCode's PPO-GTrXL agent
"""

from __future__ import annotations

from absl import flags

from jaxlab.core import experiment
from jaxlab.rl import ppo

flags.DEFINE_string(
  "env",
  "cartpole",
  "Environment: a gymnax name (cartpole, pendulum, acrobot, mountaincar, breakout-minatar, ...) "
  "or craftax-symbolic, craftax-classic-symbolic, craftax-classic-pixels, craftax-pixels "
  "(with --config=experiments/configs/ppo.py:craftax).",
)
flags.DEFINE_string("policy", "mlp", "Policy network: mlp, gru or gtrxl.")
FLAGS = flags.FLAGS

_CONFIG = experiment.define_config_file(experiment.config_path(__file__))


def main(argv):
  del argv
  config, env_name, policy_name = _CONFIG.value, FLAGS.env, FLAGS.policy
  ppo.check(config, env_name, policy_name)
  steps = FLAGS.steps or ppo.num_updates(config)
  log_every, _, ckpt_every = ppo.schedule(steps, config.eval_every)
  run = experiment.common(
    "ppo",
    default_steps=steps,
    default_log_every=log_every,
    default_ckpt_every=ckpt_every,
    variant=(env_name, policy_name),
    mesh_axes=("data",),
    seeds=True,
  )
  run.check_batch("config.num_envs", config.num_envs)
  loop = run.loop(**ppo.loop_options(config, env_name, run.steps))
  out = ppo.train_run(
    config,
    env_name,
    policy_name,
    loop,
    seed=run.seed,
    seeds=run.seeds,
    workdir=run.workdir,
    mesh=run.mesh,
    videos=run.video_episodes(2),
  )
  print(f"{out.line} -> {run.workdir}")


if __name__ == "__main__":
  experiment.run(main)
