"""UHM on OGBench: offline RL with universal horizon models (and its ablations), the main job.

  python -m experiments.uhm --env=ogbench
      UHM on cube-single-play-singletask-task2-v0 with the embedded data set (12 episodes, 12k
      transitions), on a CPU: 2000 updates, 4 evaluations of 10 episodes, progress bar; the last
      line gives the success rate (0 % is expected at this budget) and names a held-out diagnostic
      figure only where its error ended below its baseline: horizon_model.png (n-step model error
      vs two baselines), critic.png (Q vs Monte-Carlo return), on unseen validation episodes;
      results in runs/uhm/uhm/cube-single-play-singletask-task2-v0/ (summary.json,
      learning_curve.png, curves.png, metrics.csv, eval.csv, diagnostics.jsonl, tb/, checkpoints/).
  python -m experiments.uhm --env=ogbench --agent=rebrac      # ablations, each in its own workdir:
      --agent in {uhm, rebrac, ghm, dtd, mbtd}                # runs/uhm/<agent>/<env_name>
  python -m experiments.uhm --env=ogbench --seeds=3           # training seeds 0, 1, 2 vmapped
  python -m experiments.uhm --env=ogbench --episodes=100 --data_seed=1   # a generated data set
  python -m experiments.uhm --env=ogbench --config=experiments/configs/uhm.py:cpu --steps=100
  python -m jaxlab.envs.ogbench_generate --env_name=puzzle-3x3-play-v0 --dataset_dir=~/.ogbench/data
  python -m experiments.uhm --env=ogbench --env_name=puzzle-3x3-play-singletask-task4-v0 \\
      --dataset_dir=~/.ogbench/data --steps=1000000 --config=experiments/configs/uhm.py:paper
      FQL's protocol (1M updates, 4x512) on a full data set: generate it first (35-90 min), or add
      --generate_missing to generate it in --dataset_dir when it is absent.
  python -m experiments.uhm --env=ogbench --mesh=data:-1   # batch sharded over all devices

Seeds: --seed trains (networks, batches, noise), --data_seed generates a data set; evaluation
episode i resets with seed 10000 + i in every run (`jaxlab.rl.uhm.EVAL_SEED`). summary.json records
the seeds, where discount and ReBRAC's alphas came from (`uhm.task_defaults`) and OGBench's success
timing (docs/ogbench.md). Presets: experiments/configs/uhm.py; `--config.<field>` sets a field of
`jaxlab.rl.uhm.get_config()` (each commented there). The run is `jaxlab.rl.uhm.load_task` ->
`train` -> `write_report` (docs/uhm.md, "Use from Python").
"""

from __future__ import annotations

from absl import flags

from jaxlab.core import experiment, videos
from jaxlab.core import workdir as workdir_lib
from jaxlab.envs import ogbench as og  # light: ogbench and MuJoCo are imported when data is read
from jaxlab.rl import uhm

flags.DEFINE_string("env", "ogbench", "Benchmark suite; only 'ogbench' for now.")
flags.DEFINE_string(
  "env_name",
  og.DEFAULT_ENV_NAME,
  "OGBench single-task name, e.g. puzzle-3x3-play-singletask-task4-v0.",
)
flags.DEFINE_string("agent", None, "Overrides config.agent: uhm, rebrac, ghm, dtd, mbtd.")
flags.DEFINE_string(
  "dataset_dir",
  None,
  "An existing folder with OGBench .npz files, or where --generate_missing / --episodes put a "
  "generated set (default: ~/.ogbench/data, then the embedded set for the default task).",
)
flags.DEFINE_bool(
  "generate_missing",
  False,
  "Generate the full standard data set (35-90 min on a CPU) in --dataset_dir when it is absent.",
)
flags.DEFINE_integer(
  "episodes",
  None,
  "Use a locally generated set of this many episodes (made once under "
  "<dataset_dir>/jaxlab-generated/) instead of the standard (or embedded) one.",
)
flags.DEFINE_integer(
  "data_seed",
  0,
  "Seed of a generated data set (--episodes / --generate_missing); --seed is the training seed "
  "(networks, batches, noise). Standard and embedded files do not depend on it.",
)
flags.DEFINE_integer("eval_episodes", 10, "Evaluation episodes in the real environment.")
flags.DEFINE_integer(
  "eval_every",
  None,
  "Steps between evaluations (0 = only at the end; default: "
  "a quarter of --steps, so the learning curve has 4 points).",
)
FLAGS = flags.FLAGS

_CONFIG = experiment.define_config_file(experiment.config_path(__file__))


def main(argv):
  del argv
  config = _CONFIG.value
  config.agent = FLAGS.agent if FLAGS.agent is not None else config.agent
  run = experiment.common(
    "uhm",
    default_steps=2000,
    default_log_every=100,
    default_ckpt_every=1000,
    variant=(config.agent, FLAGS.env_name),
    mesh_axes=("data", "fsdp"),
    seeds=True,
  )
  experiment.check_choice("env", FLAGS.env, ("ogbench",))
  experiment.check_choice("agent", config.agent, uhm.AGENTS)
  options = uhm.check_options(  # checked once, here; load_task and train take it as checked
    seeds=run.seeds,
    mesh=run.mesh,
    eval_episodes=FLAGS.eval_episodes,
    episodes=FLAGS.episodes,
    data_seed=FLAGS.data_seed,
  )
  eval_every = uhm.resolve_eval_every(FLAGS.eval_every, run.steps, run.log_every)
  cfg, sources = uhm.resolve_task_config(config, FLAGS.env_name)
  run.check_batch("config.batch_size", cfg.batch_size)
  episodes = run.video_episodes(1 if videos.mujoco_by_default() else 0)
  if episodes:
    videos.mujoco_gl()  # picks MuJoCo's off-screen backend before MuJoCo is imported
  devices = 1 if run.mesh is None else run.mesh.size  # memory checked before any data is read
  uhm.check_memory(cfg, num_seeds=len(run.seeds), devices=devices)
  task = uhm.load_task(
    cfg,
    FLAGS.env_name,
    dataset_dir=FLAGS.dataset_dir,
    generate_missing=FLAGS.generate_missing,
    sources=sources,
    options=options,
  )
  print(
    f"[uhm] agent={cfg.agent} env={FLAGS.env_name} data={task.record['data']} "
    f"({task.data.size} transitions, data seed {FLAGS.data_seed}) steps={run.steps} "
    f"batch={cfg.batch_size} training seeds={list(run.seeds)} mesh={run.mesh_spec or 'none'} "
    f"workdir={run.workdir}",
    flush=True,
  )
  if run.videos is None and not episodes:
    videos.say_once(videos.NO_MUJOCO_RENDERER)
  loop = run.loop(
    eval_every=eval_every, progress_keys=("critic_loss", "q_mean", "bc_mse", "flow_loss")
  )
  with workdir_lib.identity(run.seeds):  # another seed set never continues or replaces this run
    _, result = uhm.train(
      task,
      loop,
      options=options,
      workdir=run.workdir,
      videos=episodes,  # at the last evaluation only: MuJoCo renders on the host
    )
  s = uhm.write_report(run.workdir, task, result, list(run.seeds))
  print(uhm.final_line(s, task, FLAGS.eval_episodes, run.workdir), flush=True)


if __name__ == "__main__":
  experiment.run(main)
