"""Re-evaluate a saved UHM run at any checkpoint, with as many episodes as wanted.

  # after `python -m experiments.uhm --env=ogbench` (2000 updates, checkpoints at 1000 and 2000)
  python -m experiments.uhm_eval --workdir=runs/uhm/uhm/cube-single-play-singletask-task2-v0 \\
      --step=1000 --eval_episodes=50

Reads the run's config.json, restores the checkpoint (latest when --step is not given), runs the
real OGBench environment (reward and success on s, `jaxlab.envs.ogbench.SUCCESS_TIMING`) and writes
``eval_step<step>_n<episodes>.json`` into the workdir: the mean over the run's training seeds
(several when it was trained with --seeds) and `success_per_seed`. Episode i resets with seed
10000 + i, the rule of the in-training evaluation (`jaxlab.rl.uhm.EVAL_SEED`), so the first
episodes are the ones training evaluated. Used to compare agents at equal steps with more episodes
than the in-training evaluation; the library call is `jaxlab.rl.uhm.evaluate_checkpoint`.
"""

from __future__ import annotations

from absl import flags

from jaxlab.core import experiment
from jaxlab.core.errors import require
from jaxlab.rl import uhm

flags.DEFINE_integer("step", None, "Checkpoint step (default: the latest).")
flags.DEFINE_integer("eval_episodes", 50, "Evaluation episodes.")
FLAGS = flags.FLAGS

# The agent, task and seeds are the run's (its config.json): --help names this in place of a config.
CONFIG_NOTE = "the agent, task and seeds are read from the --workdir run's config.json."
UNUSED_FLAGS = (
  "seed",
  "seeds",
  "steps",
  "log_every",
  "ckpt_every",
  "keep",
  "mesh",
  "profile",
  "tracker",
  "videos",
)


def main(argv):
  del argv
  for name in UNUSED_FLAGS:
    require(not FLAGS[name].present, name, "is not used by uhm_eval; remove it")
  require(bool(FLAGS.workdir), "workdir", "give the run directory to evaluate")
  r, out = uhm.evaluate_checkpoint(FLAGS.workdir, FLAGS.step, FLAGS.eval_episodes)
  print(
    f"[uhm_eval] {r['agent']} @ {r['step']}: success {100 * r['success']:.1f}% over "
    f"{FLAGS.eval_episodes} episodes x {len(r['success_per_seed'])} seed(s) -> {out}"
  )


if __name__ == "__main__":
  experiment.run(main)
