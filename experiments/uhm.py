"""UHM on OGBench: offline RL with universal horizon models (and its ablations), the main job.

  python -m experiments.uhm --env=ogbench
      UHM on cube-single-play-singletask-task2-v0 with the embedded data set, on a CPU: ~80 s on 2
      idle cores (data load, 2000 updates at ~35/s, 10 evaluation episodes), progress bar, then the
      success rate; results in runs/uhm/uhm/cube-single-play-singletask-task2-v0/ (summary.json,
      learning_curve.png, curves.png, metrics.csv, eval.csv, tb/, checkpoints/). 2000 updates on 12k
      transitions show the pipeline, not the paper's numbers.
  python -m experiments.uhm --env=ogbench --agent=rebrac      # ablations, each in its own workdir:
      --agent in {uhm, rebrac, ghm, dtd, mbtd}                # runs/uhm/<agent>/<env_name>
  python -m envs.ogbench_generate --env_name=puzzle-3x3-play-v0 --dataset_dir=~/.ogbench/data
  python -m experiments.uhm --env=ogbench --env_name=puzzle-3x3-play-singletask-task4-v0 \\
      --dataset_dir=~/.ogbench/data --steps=1000000 --config.model_hidden_dims='(512,512,512,512)'
      the paper's protocol (1M updates) on a full data set: generate it first (35-90 min), or add
      --generate_missing to generate it in --dataset_dir when it is absent.
  python -m experiments.uhm --env=ogbench --mesh=data:-1   # batch sharded over all devices

Config (`--config.<field>=...`) is the agent's `jaxlab.rl.uhm.get_config()`; every field is
commented there. Data sets: docs/ogbench.md. The method and our reconstruction choices: docs/uhm.md.
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags

from jaxlab.core import experiment, plots, runtime, sharding
from jaxlab.core.errors import require
from jaxlab.rl import offline_data, uhm

ENVS = ("ogbench",)

flags.DEFINE_string("env", "ogbench", "Benchmark suite; only 'ogbench' for now.")
flags.DEFINE_string(
  "env_name",
  "cube-single-play-singletask-task2-v0",
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
flags.DEFINE_integer("eval_episodes", 10, "Evaluation episodes in the real environment.")
flags.DEFINE_integer(
  "eval_every",
  None,
  "Steps between evaluations (0 = only at the end; default: "
  "a quarter of --steps, so the learning curve has 4 points).",
)
FLAGS = flags.FLAGS


def get_config():
  """UHM agent config; see `jaxlab.rl.uhm.get_config` for every field.

  CPU default run (this config): `python -m experiments.uhm --env=ogbench`, ~80 s on 2 idle cores.
  Paper-scale: `--steps=1000000 --config.{actor,value,model}_hidden_dims='(512,512,512,512)'`
  (hours on one GPU).
  """
  c = uhm.get_config()
  c.batch_size = 256
  return c


_CONFIG = experiment.define_config(get_config())


def make_policy():
  """``policy(state)(obs) -> action``: one jitted deterministic actor call per environment step."""
  act = jax.jit(uhm.sample_actions)
  return lambda state: lambda obs: np.asarray(act(state, jnp.asarray(obs)))


def _eval_every(run) -> int:
  if FLAGS.eval_every is not None:
    require(FLAGS.eval_every >= 0, "eval_every", f"must be >= 0, got {FLAGS.eval_every}")
    return FLAGS.eval_every
  # A multiple of log_every keeps every chunk the same length: one compile for the whole run.
  return max(run.log_every, run.steps // 4 // run.log_every * run.log_every)


def load_data(run):
  """The task's data set (`envs.ogbench.load`); a missing or bad set raises ConfigError (exit 2)."""
  # gymnasium/glfw warn about float64 bounds and a missing X display; both are harmless here.
  warnings.filterwarnings("ignore", message=".*precision lowered.*")
  warnings.filterwarnings("ignore", message=".*DISPLAY.*")
  from envs import ogbench as og  # imports mujoco: only after the cheap checks

  return og.load(
    FLAGS.env_name,
    dataset_dir=FLAGS.dataset_dir,
    generate_if_missing=FLAGS.generate_missing,
    embedded=FLAGS.dataset_dir is None and not FLAGS.generate_missing,
    num_episodes=FLAGS.episodes,
    seed=run.seed,
  )


def make_eval_fn(run, env):
  """Success rate, return and episode length of the deterministic actor in the real environment."""
  from envs import ogbench as og

  policy = make_policy()

  def eval_fn(state, step):
    del step
    r = og.evaluate(
      FLAGS.env_name,
      policy(state),
      num_episodes=FLAGS.eval_episodes,
      seed=10_000 + run.seed,
      env=env,
    )
    return {"success": r["success"], "return": r["return"], "episode_len": r["episode_len"]}

  return eval_fn


def parse_flags(config):
  """The validated shared flags, agent config and evaluation period; nothing is written."""
  agent = FLAGS.agent if FLAGS.agent is not None else config.agent
  run = experiment.common(
    "uhm",
    default_steps=2000,
    default_log_every=100,
    default_ckpt_every=1000,
    variant=(agent, FLAGS.env_name),
    mesh_axes=("data", "fsdp"),
  )
  experiment.check_choice("env", FLAGS.env, ENVS)
  config.agent = experiment.check_choice("agent", agent, uhm.AGENTS)
  require(FLAGS.eval_episodes >= 1, "eval_episodes", f"must be >= 1, got {FLAGS.eval_episodes}")
  require(
    FLAGS.episodes is None or FLAGS.episodes >= 1, "episodes", f"must be >= 1, got {FLAGS.episodes}"
  )
  eval_every = _eval_every(run)
  cfg = uhm.validate_config(config)
  run.check_batch("config.batch_size", cfg.batch_size)
  return run, cfg, eval_every


def main(argv):
  del argv
  run, cfg, eval_every = parse_flags(_CONFIG.value)
  loaded = load_data(run)
  data = offline_data.make_offline_data(loaded.train)
  key = jax.random.key_data(jax.random.key(run.seed))
  state = uhm.create(
    jax.random.fold_in(key, 0),
    data.observations.shape[1],
    data.actions.shape[1],
    cfg,
    obs_stats=offline_data.obs_stats(data),
  )
  # Data parallel over --mesh: the batch is split, parameters and the data set are replicated.
  sample_fn = sharding.data_parallel(uhm.make_sample_fn(cfg), run.mesh)
  replicated = None if run.mesh is None else sharding.replicated(run.mesh)

  print(
    f"[uhm] agent={cfg.agent} env={FLAGS.env_name} data={loaded.source} "
    f"({data.size} transitions) steps={run.steps} batch={cfg.batch_size} "
    f"mesh={run.mesh_spec or 'none'} workdir={run.workdir}",
    flush=True,
  )
  loop = run.loop(
    eval_every=eval_every, progress_keys=("critic_loss", "q_mean", "bc_mse", "flow_loss")
  )
  _, result = runtime.train(
    state,
    uhm.update,
    loop,
    key=key,
    workdir=run.workdir,
    data=data,
    sample_fn=sample_fn,
    eval_fn=make_eval_fn(run, loaded.env),
    mesh=run.mesh,
    state_sharding=replicated,
    data_sharding=replicated,
    config={
      "agent": cfg.to_dict(),
      "env_name": FLAGS.env_name,
      "data": loaded.source,
      "data_path": loaded.path,
      "transitions": data.size,
      "seed": run.seed,
    },
  )
  report(run, cfg, result)


def report(run, cfg, result) -> None:
  """The success-rate learning curve of this session's evaluations, and one line of results."""
  if result.evals:
    steps = sorted(result.evals)
    plots.lines(
      run.workdir / "learning_curve.png",
      {cfg.agent: (steps, [result.evals[s]["success"] for s in steps])},
      "update step",
      "success rate",
      title=f"{cfg.agent} on {FLAGS.env_name}",
    )
  s = result.summary
  print(
    f"[uhm] {cfg.agent} on {FLAGS.env_name}: success rate "
    f"{100 * s.get('eval/success', float('nan')):.1f}% over {FLAGS.eval_episodes} episodes "
    f"after {s.get('step')} steps -> {run.workdir}/summary.json",
    flush=True,
  )


if __name__ == "__main__":
  experiment.run(main)
