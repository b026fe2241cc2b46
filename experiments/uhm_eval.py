"""Re-evaluate a saved UHM run at any checkpoint, with as many episodes as wanted.

  python -m experiments.uhm_eval --workdir=runs/uhm/uhm/cube-single-play-singletask-task2-v0 \\
      --step=20000 --eval_episodes=50

Reads the run's config.json, restores the checkpoint (latest when --step is not given), runs the
real OGBench environment (reward and success on s, `jaxlab.envs.ogbench.SUCCESS_TIMING`) and writes
``eval_step<step>_n<episodes>.json`` into the workdir: the mean over the run's training seeds
(several when it was trained with --num_seeds) and `success_per_seed`. Used to
compare agents at equal steps with more episodes than the in-training evaluation.
"""

from __future__ import annotations

import pathlib
import warnings

import jax
import numpy as np
from absl import flags

from jaxlab.core import checkpoint, experiment, metrics
from jaxlab.core.errors import ConfigError, require
from jaxlab.rl import uhm

flags.DEFINE_integer("step", None, "Checkpoint step (default: the latest).")
flags.DEFINE_integer("eval_episodes", 50, "Evaluation episodes.")
FLAGS = flags.FLAGS

_UNUSED = ("steps", "log_every", "ckpt_every", "keep", "mesh", "profile")


def _recorded_config(workdir: pathlib.Path):
  """The run's agent config and env name, as `experiments.uhm` recorded them in config.json."""
  path = workdir / "config.json"
  require(path.exists(), "workdir", f"{workdir} has no config.json: not a UHM run directory")
  try:
    record = metrics.read_json(path)
    config = uhm.get_config()
    for k, v in record["agent"].items():
      config[k] = tuple(v) if isinstance(v, list) else v
    return uhm.validate_config(config), str(record["env_name"]), int(record.get("num_seeds", 1))
  except (ValueError, KeyError, TypeError, AttributeError) as e:  # ConfigError is a ValueError
    why = e.message if isinstance(e, ConfigError) else f"{type(e).__name__}: {e}"
    raise ConfigError(
      "workdir", f"{path} is not the config of an experiments.uhm run ({why})"
    ) from None


def main(argv):
  del argv
  for name in _UNUSED:
    require(not FLAGS[name].present, name, "is not used by uhm_eval; remove it")
  require(bool(FLAGS.workdir), "workdir", "give the run directory to evaluate")
  require(FLAGS.eval_episodes >= 1, "eval_episodes", f"must be >= 1, got {FLAGS.eval_episodes}")
  workdir = pathlib.Path(FLAGS.workdir)
  cfg, env_name, num_seeds = _recorded_config(workdir)

  warnings.filterwarnings("ignore", message=".*precision lowered.*")
  warnings.filterwarnings("ignore", message=".*DISPLAY.*")
  from jaxlab.envs import ogbench as og

  env = og.make_env(env_name)
  obs_dim = int(env.observation_space.shape[0])
  act_dim = int(env.action_space.shape[0])
  # Structure only (values are restored): one state, or num_seeds stacked by --num_seeds.
  like = uhm.create_seeds(jax.random.key(0), num_seeds, obs_dim, act_dim, cfg)
  restored = checkpoint.restore(workdir, like, FLAGS.step)
  if restored is None:
    raise ConfigError("workdir", f"{workdir} has no checkpoint")
  state, step = restored
  act = jax.jit(uhm.sample_actions)
  per_seed = []
  for i in range(num_seeds):
    s_i = state if num_seeds == 1 else jax.tree.map(lambda x, i=i: x[i], state)
    per_seed.append(
      og.evaluate(
        env_name,
        lambda o, s_i=s_i: act(s_i, o),
        num_episodes=FLAGS.eval_episodes,
        seed=20_000 + FLAGS.seed,
        env=env,
      )
    )
  r = {k: float(np.mean([p[k] for p in per_seed])) for k in per_seed[0]}
  r.update(num_episodes=FLAGS.eval_episodes, success_per_seed=[p["success"] for p in per_seed])
  r.update(step=step, agent=cfg.agent, env_name=env_name, ogbench=og.timing_record())
  out = workdir / f"eval_step{step}_n{FLAGS.eval_episodes}.json"
  metrics.write_json(out, r)
  print(
    f"[uhm_eval] {cfg.agent} @ {step}: success {100 * r['success']:.1f}% over "
    f"{FLAGS.eval_episodes} episodes x {num_seeds} seed(s) -> {out}"
  )


if __name__ == "__main__":
  experiment.run(main)
