"""UHM on OGBench: offline RL with universal horizon models (and its ablations), the main job.

  python -m experiments.uhm --env=ogbench
      UHM on cube-single-play-singletask-task2-v0 with the embedded data set (12 episodes, 12k
      transitions), on a CPU: 2000 updates, 4 evaluations of 10 episodes, progress bar, then the
      success rate; results in runs/uhm/uhm/cube-single-play-singletask-task2-v0/ (summary.json,
      learning_curve.png, curves.png, metrics.csv, eval.csv, tb/, checkpoints/). This shows the
      pipeline; at this budget the success rate is expected to stay near 0 (docs/uhm.md, Results).
  python -m experiments.uhm --env=ogbench --agent=rebrac      # ablations, each in its own workdir:
      --agent in {uhm, rebrac, ghm, dtd, mbtd}                # runs/uhm/<agent>/<env_name>
  python -m experiments.uhm --env=ogbench --num_seeds=3       # training seeds 0, 1, 2 vmapped
  python -m experiments.uhm --env=ogbench --episodes=100 --data_seed=1   # a generated data set
  python -m envs.ogbench_generate --env_name=puzzle-3x3-play-v0 --dataset_dir=~/.ogbench/data
  python -m experiments.uhm --env=ogbench --env_name=puzzle-3x3-play-singletask-task4-v0 \
      --dataset_dir=~/.ogbench/data --steps=1000000 \
      --config.{actor,value,model}_hidden_dims='(512,512,512,512)'
      FQL's protocol (1M updates, 4x512) on a full data set: generate it first (35-90 min), or add
      --generate_missing to generate it in --dataset_dir when it is absent.
  python -m experiments.uhm --env=ogbench --mesh=data:-1   # batch sharded over all devices

Seeds: --seed is the training seed (networks, batches, noise), --data_seed the generated data set's;
evaluation episodes use the same environment seeds for every run, so runs differ only by training.
summary.json also records the data and training seeds, where discount and ReBRAC's alphas came
from (`uhm.task_defaults`), and OGBench's reward / success timing (on s: docs/ogbench.md).
Config (`--config.<field>=...`) is the agent's `jaxlab.rl.uhm.get_config()`; every field is
commented there. Data sets: docs/ogbench.md. The method and our reconstruction choices: docs/uhm.md.
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import flags

from jaxlab.core import experiment, plots, runtime, sharding
from jaxlab.core.errors import require
from jaxlab.rl import uhm
from jaxlab.rl.uhm import offline_data

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
flags.DEFINE_integer(
  "data_seed",
  0,
  "Seed of a generated data set (--episodes / --generate_missing); --seed is the training seed "
  "(networks, batches, noise). Standard and embedded files do not depend on it.",
)
flags.DEFINE_integer(
  "num_seeds",
  1,
  "Train training seeds seed, seed+1, ... in ONE process, vmapped (one compile; every seed draws "
  "its own batches and noise, so a seed here is not bitwise the run --seed=<it> would be).",
)
flags.DEFINE_integer("eval_episodes", 10, "Evaluation episodes in the real environment.")
flags.DEFINE_integer(
  "eval_every",
  None,
  "Steps between evaluations (0 = only at the end; default: "
  "a quarter of --steps, so the learning curve has 4 points).",
)
FLAGS = flags.FLAGS


CPU_HIDDEN = (256, 256, 256)


def get_config():
  """UHM agent config; see `jaxlab.rl.uhm.get_config` for every field.

  Two CPU choices differ from the library (= FQL's ReBRAC) defaults: 3x256 networks instead of
  4x512 (pass `--config.{actor,value,model}_hidden_dims='(512,512,512,512)'` for those), and
  discount / alpha_actor / alpha_critic left unset, which takes the task's values from
  `uhm.task_defaults` (recorded with their source in summary.json); set them to override.
  """
  c = uhm.get_config()
  c.actor_hidden_dims = c.value_hidden_dims = c.model_hidden_dims = CPU_HIDDEN
  for name in ("discount", "alpha_actor", "alpha_critic"):
    c[name] = ml_collections.config_dict.placeholder(float)
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
  """The task's data set (`jaxlab.envs.ogbench.load`); a missing or bad set raises ConfigError (exit 2)."""
  # gymnasium/glfw warn about float64 bounds and a missing X display; both are harmless here.
  warnings.filterwarnings("ignore", message=".*precision lowered.*")
  warnings.filterwarnings("ignore", message=".*DISPLAY.*")
  from jaxlab.envs import ogbench as og  # imports mujoco: only after the cheap checks

  return og.load(
    FLAGS.env_name,
    dataset_dir=FLAGS.dataset_dir,
    generate_if_missing=FLAGS.generate_missing,
    embedded=FLAGS.dataset_dir is None and not FLAGS.generate_missing,
    num_episodes=FLAGS.episodes,
    seed=FLAGS.data_seed,
  )


def _seed_slice(state, i: int):
  return jax.tree.map(lambda x: x[i], state)


def make_eval_fn(run, env, num_seeds: int):
  """Success rate, return and episode length of the deterministic actor in the real environment.

  With several vmapped seeds: each seed's actor is evaluated (`success_seed<i>`), and `success`,
  `return` and `episode_len` are the means over seeds.
  """
  from jaxlab.envs import ogbench as og

  policy = make_policy()

  def one(state):
    r = og.evaluate(
      FLAGS.env_name, policy(state), num_episodes=FLAGS.eval_episodes, seed=10_000, env=env
    )
    return {"success": r["success"], "return": r["return"], "episode_len": r["episode_len"]}

  def eval_fn(state, step):
    del step
    if num_seeds == 1:
      return one(state)
    per = [one(_seed_slice(state, i)) for i in range(num_seeds)]
    out = {k: float(np.mean([p[k] for p in per])) for k in per[0]}
    out.update({f"success_seed{run.seed + i}": p["success"] for i, p in enumerate(per)})
    return out

  return eval_fn


def resolve_task_config(config):
  """Fills the unset discount / alphas from `uhm.task_defaults`; returns where each came from."""
  defaults = uhm.task_defaults(FLAGS.env_name)
  sources = {}
  for name, key in (("discount", "discount"), ("alpha_actor", "alpha"), ("alpha_critic", "alpha")):
    if config[name] is not None:
      sources[name] = "given"
      continue
    value = defaults[name]
    if value is None:  # no public value: the library default, said out loud
      value = uhm.get_config()[name]
      print(
        f"[uhm] no public ReBRAC {name} for {FLAGS.env_name}; using {value} "
        "(pick one with experiments.uhm_sweep --alpha_grid, or pass --config." + name + ")",
        flush=True,
      )
      sources[name] = f"library default {value}; " + defaults[f"{key}_source"]
    else:
      sources[name] = defaults[f"{key}_source"]
    config[name] = value
  return sources


def parse_flags(config):
  """The validated flags, agent config, evaluation period and value sources; nothing is written."""
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
  require(FLAGS.data_seed >= 0, "data_seed", f"must be >= 0, got {FLAGS.data_seed}")
  require(FLAGS.num_seeds >= 1, "num_seeds", f"must be >= 1, got {FLAGS.num_seeds}")
  require(
    FLAGS.num_seeds == 1 or run.mesh is None,
    "num_seeds",
    "vmapped seeds run on one device; drop --mesh (or train one seed per process with --mesh)",
  )
  eval_every = _eval_every(run)
  sources = resolve_task_config(config)
  cfg = uhm.validate_config(config)
  run.check_batch("config.batch_size", cfg.batch_size)
  return run, cfg, eval_every, sources


def main(argv):
  del argv
  run, cfg, eval_every, sources = parse_flags(_CONFIG.value)
  loaded = load_data(run)
  # FQL clips dataset actions to +-(1 - 1e-5) (envs/env_utils.py); so do we.
  data = offline_data.make_offline_data(loaded.train, action_clip_eps=1e-5)
  key = jax.random.key_data(jax.random.key(run.seed))
  S = FLAGS.num_seeds
  dims = (data.observations.shape[1], data.actions.shape[1])
  stats = offline_data.obs_stats(data)
  state = uhm.create_seeds(jax.random.fold_in(key, 0), S, *dims, cfg, obs_stats=stats)
  update_fn, sample_fn = uhm.update, uhm.make_sample_fn(cfg)
  if S > 1:
    update_fn, sample_fn = uhm.vmap_seeds(update_fn, sample_fn, S)
  # Data parallel over --mesh: the batch is split, parameters and the data set are replicated.
  sample_fn = sharding.data_parallel(sample_fn, run.mesh)
  replicated = None if run.mesh is None else sharding.replicated(run.mesh)
  seeds = list(range(run.seed, run.seed + S))
  print(
    f"[uhm] agent={cfg.agent} env={FLAGS.env_name} data={loaded.source} "
    f"({data.size} transitions, data seed {FLAGS.data_seed}) steps={run.steps} "
    f"batch={cfg.batch_size} training seeds={seeds} mesh={run.mesh_spec or 'none'} "
    f"workdir={run.workdir}",
    flush=True,
  )
  loop = run.loop(
    eval_every=eval_every, progress_keys=("critic_loss", "q_mean", "bc_mse", "flow_loss")
  )
  record = {
    "env_name": FLAGS.env_name,
    "data": loaded.source,
    "data_path": loaded.path,
    "transitions": data.size,
    "data_seed": FLAGS.data_seed,
    "training_seeds": seeds,
    "task_values_from": sources,
  }
  _, result = runtime.train(
    state,
    update_fn,
    loop,
    key=key,
    workdir=run.workdir,
    data=data,
    sample_fn=sample_fn,
    eval_fn=make_eval_fn(run, loaded.env, S),
    mesh=run.mesh,
    state_sharding=replicated,
    data_sharding=replicated,
    config={"agent": cfg.to_dict(), "seed": run.seed, "num_seeds": S, **record},
  )
  report(run, cfg, result, record)


def report(run, cfg, result, record) -> None:
  """Learning curve, summary.json completed with the data / seed / OGBench record, one line."""
  from jaxlab.envs import ogbench as og

  if result.evals:
    steps = sorted(result.evals)
    plots.lines(
      run.workdir / "learning_curve.png",
      {cfg.agent: (steps, [result.evals[s]["success"] for s in steps])},
      "update step",
      "success rate",
      title=f"{cfg.agent} on {FLAGS.env_name}",
    )
  s = {**result.summary, **record, "ogbench": og.timing_record()}
  runtime.write_summary(run.workdir, s)
  print(
    f"[uhm] {cfg.agent} on {FLAGS.env_name}: success rate "
    f"{100 * s.get('eval/success', float('nan')):.1f}% over {FLAGS.eval_episodes} episodes "
    f"x {len(record['training_seeds'])} seed(s) after {s.get('step')} steps "
    f"-> {run.workdir}/summary.json",
    flush=True,
  )


if __name__ == "__main__":
  experiment.run(main)
