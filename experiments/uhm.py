"""UHM on OGBench: offline RL with universal horizon models (and its ablations), the main job.

  python -m experiments.uhm --env=ogbench
      UHM on cube-single-play-singletask-task2-v0 with the embedded data set, on a CPU: ~80 s on 2 idle
      cores (data load, 2000 updates at ~35/s, 10 evaluation episodes), progress bar, then the success
      rate; results in runs/uhm/ (summary.json, learning_curve.png, curves.png, metrics.csv, eval.csv,
      tb/, checkpoints/). 2000 updates on 12k transitions show the pipeline, not the paper's numbers.
  python -m experiments.uhm --env=ogbench --agent=rebrac --workdir=runs/rebrac        # ablations:
      --agent in {uhm, rebrac, ghm, dtd, mbtd}
  python -m experiments.uhm --env=ogbench --env_name=puzzle-3x3-play-singletask-task4-v0 \\
      --dataset_dir=~/.ogbench/data --steps=1000000 --config.model_hidden_dims='(512,512,512,512)' ...
      the paper's protocol (1M updates; data from --dataset_dir, generated there if absent).
  python -m experiments.uhm --env=ogbench --mesh=data:-1   # batch sharded over all devices

Config (`--config.<field>=...`) is the agent's `jaxlab.rl.uhm.get_config()`; every field is commented
there. The experiment-level defaults below are sized for the CPU default run.
"""

from __future__ import annotations

import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags

from jaxlab.core import experiment, runtime, sharding
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
  "Folder with OGBench .npz files (default ~/.ogbench/data); "
  "missing sets are generated there offline.",
)
flags.DEFINE_integer(
  "episodes",
  None,
  "Generate/use a local set of this many episodes instead of the standard (or embedded) one.",
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


def main(argv):
  del argv
  config = _CONFIG.value
  run = experiment.common(
    "uhm",
    default_steps=2000,
    default_log_every=100,
    default_ckpt_every=1000,
    mesh_axes=("data", "fsdp"),
  )
  experiment.check_choice("env", FLAGS.env, ENVS)
  if FLAGS.agent is not None:
    experiment.check_choice("agent", FLAGS.agent, uhm.AGENTS)
    config.agent = FLAGS.agent
  if FLAGS.eval_episodes < 1:
    experiment.fail("eval_episodes", f"must be >= 1, got {FLAGS.eval_episodes}")
  # A multiple of log_every keeps every chunk the same length: one compile for the whole run.
  eval_every = (
    max(run.log_every, run.steps // 4 // run.log_every * run.log_every)
    if FLAGS.eval_every is None
    else FLAGS.eval_every
  )
  if eval_every < 0:
    experiment.fail("eval_every", f"must be >= 0, got {eval_every}")
  if FLAGS.episodes is not None and FLAGS.episodes < 1:
    experiment.fail("episodes", f"must be >= 1, got {FLAGS.episodes}")
  try:
    cfg = uhm.validate_config(config)
  except ValueError as e:
    msg = str(e)
    field = msg.split("config.", 1)[1].split(" ", 1)[0] if "config." in msg else "config"
    experiment.fail(f"config.{field}" if field != "config" else "config", msg)
  if run.mesh is not None and cfg.batch_size % run.mesh.size:
    experiment.fail(
      "config.batch_size",
      f"{cfg.batch_size} is not divisible by the {run.mesh.size} devices of --mesh",
    )

  # gymnasium/glfw warn about float64 bounds and a missing X display; both are harmless here.
  warnings.filterwarnings("ignore", message=".*precision lowered.*")
  warnings.filterwarnings("ignore", message=".*DISPLAY.*")
  from envs import ogbench as og  # imports mujoco: only after the cheap checks

  try:
    og.parse_name(FLAGS.env_name)
  except Exception as e:  # noqa: BLE001 - the loader's message lists what is allowed
    experiment.fail("env_name", str(e))
  try:
    loaded = og.load(
      FLAGS.env_name,
      dataset_dir=FLAGS.dataset_dir,
      num_episodes=FLAGS.episodes,
      seed=run.seed,
      embedded=FLAGS.dataset_dir is None,
    )
  except og.DatasetError as e:
    experiment.fail("dataset_dir" if FLAGS.dataset_dir else "env_name", str(e))

  experiment.prepare_workdir(run.workdir)
  data = offline_data.make_offline_data(loaded.train)
  obs_dim, act_dim = data.observations.shape[1], data.actions.shape[1]
  key = jax.random.key_data(jax.random.key(run.seed))
  state = uhm.create(
    jax.random.fold_in(key, 0), obs_dim, act_dim, cfg, obs_stats=offline_data.obs_stats(data)
  )

  # Data parallel over --mesh: the batch is split, parameters and the data set are replicated.
  sample_fn = sharding.data_parallel(uhm.make_sample_fn(cfg), run.mesh)
  state_sharding = data_sharding = None
  if run.mesh is not None:
    state_sharding = data_sharding = sharding.replicated(run.mesh)

  policy = make_policy()
  eval_env = loaded.env

  def eval_fn(state, step):
    del step
    r = og.evaluate(
      FLAGS.env_name,
      policy(state),
      num_episodes=FLAGS.eval_episodes,
      seed=10_000 + run.seed,
      env=eval_env,
    )
    return {"success": r["success"], "return": r["return"], "episode_len": r["episode_len"]}

  print(
    f"[uhm] agent={cfg.agent} env={FLAGS.env_name} data={loaded.source} "
    f"({data.size} transitions) steps={run.steps} batch={cfg.batch_size} "
    f"mesh={run.mesh_spec or 'none'} workdir={run.workdir}",
    flush=True,
  )
  t0 = time.perf_counter()
  state, summary = runtime.train(
    state,
    uhm.update,
    num_steps=run.steps,
    workdir=run.workdir,
    key=key,
    data=data,
    sample_fn=sample_fn,
    log_every=run.log_every,
    ckpt_every=run.ckpt_every,
    keep=run.keep,
    eval_fn=eval_fn,
    eval_every=eval_every,
    mesh=run.mesh,
    state_sharding=state_sharding,
    data_sharding=data_sharding,
    progress_keys=("critic_loss", "q_mean", "bc_mse", "flow_loss"),
    config={
      "agent": cfg.to_dict(),
      "env_name": FLAGS.env_name,
      "data": loaded.source,
      "data_path": loaded.path,
      "transitions": data.size,
      "flags": {"steps": run.steps, "seed": run.seed, "mesh": run.mesh_spec},
    },
  )
  summary.update(
    {
      "agent": cfg.agent,
      "env_name": FLAGS.env_name,
      "data_source": loaded.source,
      "transitions": int(data.size),
      "total_wall_s": time.perf_counter() - t0,
    }
  )
  experiment.write_summary(run.workdir, summary)
  evals = runtime.read_csv(run.workdir / "eval.csv") if (run.workdir / "eval.csv").exists() else {}
  if evals:
    experiment.plot_curves(
      run.workdir / "learning_curve.png",
      {cfg.agent: (evals["step"], 100 * evals["success"])},
      "update step",
      "success rate (%)",
      title=f"{cfg.agent} on {FLAGS.env_name}",
    )
  print(
    f"[uhm] {cfg.agent} on {FLAGS.env_name}: success rate "
    f"{100 * summary.get('eval/success', float('nan')):.1f}% over {FLAGS.eval_episodes} episodes "
    f"after {summary['step']} steps -> {run.workdir}/summary.json",
    flush=True,
  )


if __name__ == "__main__":
  experiment.run(main)
