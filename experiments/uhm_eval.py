"""Re-evaluate a saved UHM run at any checkpoint, with as many episodes as wanted.

  python -m experiments.uhm_eval --workdir=runs/uhm --step=20000 --eval_episodes=50

Reads the run's config.json, restores the checkpoint (latest when --step is not given), runs the
real OGBench environment and writes ``eval_step<step>_n<episodes>.json`` into the workdir. Used to
compare agents at equal steps with more episodes than the in-training evaluation.
"""

from __future__ import annotations

import json
import pathlib
import warnings

import jax
from absl import flags

from jaxlab.core import experiment, runtime
from jaxlab.rl import uhm

flags.DEFINE_integer("step", None, "Checkpoint step (default: the latest).")
flags.DEFINE_integer("eval_episodes", 50, "Evaluation episodes.")
FLAGS = flags.FLAGS


def main(argv):
  del argv
  if not FLAGS.workdir:
    experiment.fail("workdir", "give the run directory to evaluate")
  workdir = pathlib.Path(FLAGS.workdir)
  if not (workdir / "config.json").exists():
    experiment.fail("workdir", f"{workdir} has no config.json: not a finished or running UHM run")
  if FLAGS.eval_episodes < 1:
    experiment.fail("eval_episodes", f"must be >= 1, got {FLAGS.eval_episodes}")
  record = json.loads((workdir / "config.json").read_text())
  config = uhm.get_config()
  for k, v in record["agent"].items():
    config[k] = tuple(v) if isinstance(v, list) else v
  cfg = uhm.validate_config(config)

  warnings.filterwarnings("ignore", message=".*precision lowered.*")
  warnings.filterwarnings("ignore", message=".*DISPLAY.*")
  from envs import ogbench as og

  env = og.make_env(record["env_name"])
  obs_dim = int(env.observation_space.shape[0])
  act_dim = int(env.action_space.shape[0])
  like = uhm.create(jax.random.key(0), obs_dim, act_dim, cfg)  # structure only; values restored
  try:
    restored = runtime.restore(workdir, like, FLAGS.step)
  except FileNotFoundError as e:
    experiment.fail("step", str(e))
  if restored is None:
    experiment.fail("workdir", f"{workdir} has no checkpoint")
  state, step = restored
  act = jax.jit(uhm.sample_actions)
  r = og.evaluate(
    record["env_name"],
    lambda o: act(state, o),
    num_episodes=FLAGS.eval_episodes,
    seed=20_000 + FLAGS.seed,
    env=env,
  )
  r.update(step=step, agent=cfg.agent, env_name=record["env_name"])
  out = workdir / f"eval_step{step}_n{FLAGS.eval_episodes}.json"
  runtime.write_json(out, r)
  print(
    f"[uhm_eval] {cfg.agent} @ {step}: success {100 * r['success']:.1f}% over "
    f"{FLAGS.eval_episodes} episodes -> {out}"
  )


if __name__ == "__main__":
  experiment.run(main)
