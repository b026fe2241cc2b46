"""UHM on an OGBench single task: what `python -m experiments.uhm` does, as library functions.

    task = load_task(config, env_name)         # data set, task discount / alphas, clipped actions
    state, result = train(task, loop, seed=0, eval_episodes=10)  # create + runtime.train + eval
    r = evaluate_seeds(state, task.env_name, num_episodes=50, env=task.env)
    summary = write_report(workdir, task, result, [0])  # the figures + summary.json
    print(final_line(summary, task, 10, workdir))  # names the diagnostic figure that moved

Held-out diagnostics (`jaxlab.rl.uhm.diagnostics`): on the data set's validation episodes (never
trained on) the horizon model's n-step error against two baselines and the critic's Q against the
Monte-Carlo return are measured at step 0 and at every evaluation, into eval.csv and
diagnostics.jsonl (per seed), and drawn in horizon_model.png and critic.png. At every evaluation the
critic is also scored against the current actor's own discounted returns in its evaluation episodes
(`jaxlab.rl.uhm.critic_eval`: eval.csv columns qpi_mae, qpi_bias, qpi_corr, qpi_base_mae, qpi_n).

Task values: a config field discount / alpha_actor / alpha_critic left unset (None, as
`get_config()` leaves them) takes the task's value from `task_defaults(env_name)`, or
`NO_TASK_VALUES` where no public value exists (said out loud); where each came from is
`task.sources` (summary.json: ``task_values_from``). Dataset actions are clipped to
+-(1 - ACTION_CLIP_EPS), as FQL's `make_env_and_datasets` does.

Evaluation seeds (one rule, in training and in re-evaluation): episode i of every evaluation resets
the environment with seed ``EVAL_SEED + i``, for every run, training seed and checkpoint, so runs
differ only by training. Several training seeds (a state stacked by `create_seeds`) are each
evaluated on those episodes and averaged.
"""

from __future__ import annotations

import dataclasses
import pathlib
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from jaxlab.core import checkpoint, metrics, plots, resources, runtime, sharding
from jaxlab.core import seeds as seeds_lib
from jaxlab.core import workdir as workdir_lib
from jaxlab.core.errors import ConfigError, require
from jaxlab.rl.uhm import agent, critic_eval, diagnostics, offline_data

ACTION_CLIP_EPS = 1e-5  # dataset actions clipped to +-(1 - eps) [FQL envs/env_utils.py]
EVAL_SEED = 10_000  # episode i of every evaluation resets with seed EVAL_SEED + i

__all__ = [
  "ACTION_CLIP_EPS",
  "EVAL_SEED",
  "RunOptions",
  "Task",
  "check_memory",
  "check_options",
  "evaluate_checkpoint",
  "evaluate_seeds",
  "final_line",
  "load_task",
  "make_eval_fn",
  "make_task",
  "recorded_config",
  "resolve_eval_every",
  "resolve_task_config",
  "seed_slice",
  "train",
  "write_report",
]
_act = jax.jit(agent.sample_actions)  # one compiled actor call per environment step


# Each evaluation episode is a real MuJoCo episode of up to ~1000 steps stepped from the host
# (about a second each on a CPU): beyond this an evaluation runs for days without a word.
MAX_EVAL_EPISODES = 100_000


def check_eval_episodes(n: int) -> None:
  require(
    1 <= n <= MAX_EVAL_EPISODES, "eval_episodes", f"must be in [1, {MAX_EVAL_EPISODES}], got {n}"
  )


@dataclasses.dataclass(frozen=True)
class RunOptions:
  """A run's options as `check_options` returns them, checked: `load_task` and `train` take them
  as ``options=`` and do not check them again."""

  seeds: tuple[int, ...]  # training seeds (several: vmapped in one program, on one device)
  mesh: Any  # None or the device mesh (one seed)
  eval_episodes: int  # episodes per evaluation
  episodes: int | None  # a generated data set of this many episodes (None: the standard set)
  data_seed: int  # the generated data set's seed


def check_options(
  *, seeds=(0,), mesh=None, eval_episodes: int = 1, episodes=None, data_seed: int = 0
) -> RunOptions:
  """The run options `load_task` and `train` take, checked before anything is read or written
  (ConfigError naming each as the command line spells it); returned as `RunOptions`, which a
  program checks once and passes to both (``options=``)."""
  check_eval_episodes(eval_episodes)
  require(episodes is None or episodes >= 1, "episodes", f"must be >= 1, got {episodes}")
  require(data_seed >= 0, "data_seed", f"must be >= 0, got {data_seed}")
  require(len(seeds) >= 1, "seeds", "needs at least one seed")
  require(
    len(seeds) == 1 or mesh is None,
    "seeds",
    "vmapped seeds run on one device; drop --mesh (or train one seed per process with --mesh)",
  )
  return RunOptions(tuple(seeds), mesh, eval_episodes, episodes, data_seed)


def check_memory(config, obs_dim: int = 1, act_dim: int = 1, num_seeds: int = 1, devices=1) -> None:
  """Refuses a config whose arrays cannot fit, before anything is built: the train states of
  ``num_seeds`` seeds (shapes by `jax.eval_shape`, nothing allocated), a batch of windows and the
  activations of one update. Before the data set is loaded its dimensions may be left at 1 (the
  networks' widths and the batch dominate)."""
  c = config
  resources.check_int32("config.batch_size", c.batch_size)
  dims = {f: max(c[f], default=1) for f in ("actor_hidden_dims", "value_hidden_dims")}
  dims |= {f: max(c[f], default=1) for f in ("model_hidden_dims", "reward_hidden_dims")}
  widest = max(dims, key=dims.get)
  width = dims[widest]
  depth = sum(len(c[f]) for f in dims) + 4
  resources.check_int32(f"config.{widest}", width)
  one = 4 * 4 * (width + obs_dim + act_dim) ** 2 * depth * (1 + c.num_critics)
  resources.check_fits(one, f"config.{widest}", "the networks of one seed")
  resources.check_fits(num_seeds * one, "seeds", f"the networks of {num_seeds} seeds")
  state = jax.eval_shape(
    lambda: agent.create_seeds(jax.random.key(0), num_seeds, obs_dim, act_dim, c)
  )
  nbytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state))
  field = "seeds" if num_seeds > 1 else f"config.{widest}"
  what = f"the train state of {num_seeds} seed(s)"
  resources.check_fits(2 * nbytes, field, what, devices=devices)
  rows = num_seeds * c.batch_size
  batch = 4 * rows * c.k_max * (2 * obs_dim + act_dim + 4)
  act = 4 * rows * width * depth * (c.k_max + c.flow_steps + c.num_critics) * 4
  what = f"a batch of {c.batch_size} x {c.k_max} windows and its activations"
  resources.check_fits(batch + act, "config.batch_size", what, devices=devices)


def resolve_task_config(config, env_name: str, verbose: bool = True):
  """Fills the unset discount / alphas from `task_defaults(env_name)` and validates.

  Returns (frozen config, sources): sources[field] says where each value came from ("given" when
  the config set it).
  """
  c = ml_collections.ConfigDict(config.to_dict() if hasattr(config, "to_dict") else dict(config))
  defaults = agent.task_defaults(env_name)
  sources = {}
  for name in agent.TASK_FIELDS:
    key = "discount" if name == "discount" else "alpha"
    if c.get(name) is not None:
      sources[name] = "given"
      continue
    value = defaults[name]
    if value is None:  # no public value: the library's, said out loud
      value = agent.NO_TASK_VALUES[name]
      if verbose:
        print(
          f"[uhm] no public ReBRAC {name} for {env_name}; using {value} "
          f"(pass --config.{name}, chosen on tuning seeds never used for the reported numbers)",
          flush=True,
        )
      sources[name] = f"library default {value}; " + defaults[f"{key}_source"]
    else:
      sources[name] = defaults[f"{key}_source"]
    c[name] = value
  return agent.validate_config(c), sources


@dataclasses.dataclass(frozen=True)
class Task:
  """An OGBench single task ready to train on: what `create` and `runtime.train` need."""

  env_name: str
  config: ml_collections.FrozenConfigDict  # validated, task values filled
  sources: dict  # where discount / alpha_actor / alpha_critic came from
  data: offline_data.OfflineData  # the train split, actions clipped
  env: object  # the evaluation env (None: made on first evaluation)
  record: dict  # what summary.json records about the data and task values
  heldout: diagnostics.HeldOut | None = None  # fixed diagnostic batch from held-out episodes

  @property
  def obs_dim(self) -> int:
    return int(self.data.observations.shape[1])

  @property
  def act_dim(self) -> int:
    return int(self.data.actions.shape[1])


def make_task(
  config, env_name: str, train_data: dict, *, env=None, sources=None, heldout_data=None, **record
):
  """A Task from numpy arrays (the OGBench layout); `load_task` reads them from a data set.

  config: unresolved (its unset task values are filled here) or, with `sources`, the output of
  `resolve_task_config`. heldout_data: episodes never trained on (OGBench's validation split) for
  the diagnostics; None: no diagnostics. record: extra entries for summary.json.
  """
  if sources is None:
    cfg, sources = resolve_task_config(config, env_name)
  else:
    cfg = agent.validate_config(config)
  data = offline_data.make_offline_data(train_data, action_clip_eps=ACTION_CLIP_EPS)
  rec = {"env_name": env_name, **record, "transitions": data.size, "task_values_from": sources}
  held = None
  if heldout_data is not None:
    held = diagnostics.make_heldout(
      heldout_data,
      train_data,
      k_max=cfg.k_max,
      discount=cfg.discount,
      action_clip_eps=ACTION_CLIP_EPS,
    )
    rec["heldout"] = dict(
      episodes=held.episodes, states=len(held.mc_return), mc_horizon=held.mc_horizon
    )
  return Task(env_name, cfg, sources, data, env, rec, held)


def load_task(
  config=None,
  env_name: str | None = None,
  *,
  dataset_dir: str | None = None,
  generate_missing: bool = False,
  num_episodes: int | None = None,
  data_seed: int | None = None,
  sources: dict | None = None,
  verbose: bool = True,
  options: RunOptions | None = None,
) -> Task:
  """The task's OGBench data set (`jaxlab.envs.ogbench.load`) as a Task.

  config: default `get_config()`; env_name: default the embedded set's task. Without dataset_dir
  and generate_missing the embedded set is used when no standard file is found. A missing or bad
  set raises a ConfigError naming dataset_dir or env_name. Task values are resolved before any
  data is read. ``options`` (`check_options`) replaces num_episodes and data_seed (default 0).
  """
  from jaxlab.envs import ogbench as og  # imports ogbench / mujoco lazily

  if options is None:
    options = check_options(episodes=num_episodes, data_seed=data_seed or 0)
  elif num_episodes is not None or data_seed is not None:
    raise TypeError("load_task: pass num_episodes and data_seed in options=, not beside it")
  num_episodes, data_seed = options.episodes, options.data_seed
  env_name = env_name or og.DEFAULT_ENV_NAME
  config = agent.get_config() if config is None else config
  if sources is None:
    config, sources = resolve_task_config(config, env_name, verbose)
  # gymnasium/glfw warn about float64 bounds and a missing X display; both are harmless here.
  warnings.filterwarnings("ignore", message=".*precision lowered.*")
  warnings.filterwarnings("ignore", message=".*DISPLAY.*")
  if verbose:
    print(f"[uhm] loading the {env_name} data set (and building MuJoCo) ...", flush=True)
  loaded = og.load(
    env_name,
    dataset_dir=dataset_dir,
    generate_if_missing=generate_missing,
    embedded=dataset_dir is None and not generate_missing,
    num_episodes=num_episodes,
    seed=data_seed,
    verbose=verbose,
  )
  return make_task(
    config,
    env_name,
    loaded.train,
    env=loaded.env,
    sources=sources,
    heldout_data=loaded.val,
    data=loaded.source,
    data_path=loaded.path,
    data_seed=data_seed,
  )


def seed_slice(state, i: int):
  """Training seed i of a state stacked by `create_seeds`."""
  return jax.tree.map(lambda x: x[i], state)


def evaluate_seeds(
  state,
  env_name: str,
  num_episodes: int,
  *,
  num_seeds: int = 1,
  env=None,
  max_episode_steps: int | None = None,
  qpi_discount: float | None = None,
  eval_seed: int = EVAL_SEED,
) -> dict:
  """The deterministic actor of each training seed in the real env, episodes seeded
  ``eval_seed + i`` (default EVAL_SEED; a pilot that chooses settings uses other episodes).

  Returns the means over seeds of `jaxlab.envs.ogbench.evaluate`'s numbers (success, return,
  episode_len, steps_per_s), num_episodes, and success_per_seed (one entry per seed).
  qpi_discount: also each seed's critic against its actor's returns in those same episodes
  (`critic_eval.critic_vs_returns` at this discount: the ``qpi_*`` numbers); None: not measured.
  """
  from jaxlab.envs import ogbench as og

  per_seed = []
  for i in range(num_seeds):
    s_i = state if num_seeds == 1 else seed_slice(state, i)
    r = og.evaluate(
      env_name,
      lambda o, s_i=s_i: np.asarray(_act(s_i, jnp.asarray(o))),
      num_episodes=num_episodes,
      seed=eval_seed,
      env=env,
      max_episode_steps=max_episode_steps,
      return_episodes=qpi_discount is not None,
    )
    if qpi_discount is not None:
      r.update(critic_eval.critic_vs_returns(s_i, r.pop("episodes"), qpi_discount))
    per_seed.append(r)
  out = {k: float(np.mean([p[k] for p in per_seed])) for k in per_seed[0] if k != "num_episodes"}
  out.update(num_episodes=num_episodes, success_per_seed=[p["success"] for p in per_seed])
  out["per_seed"] = per_seed
  return out


def make_eval_fn(
  task: Task,
  num_episodes: int,
  seeds=(0,),
  workdir=None,
  diag=None,
  qpi: bool = True,
  max_episode_steps: int | None = None,
  eval_seed: int = EVAL_SEED,
):
  """``eval_fn(state, step)`` for `runtime.train`: success, return, episode_len, the held-out
  diagnostics (eval.csv columns from `diagnostics.summarize`; each seed's whole record in
  ``<workdir>/diagnostics.jsonl``) and, with ``qpi``, the critic against the actor's own returns in
  the evaluation episodes (`critic_eval.COLUMNS`). With several ``seeds`` (a stacked state) every
  value is an array with one entry per seed (the runtime writes a row per seed).

  diag: (diagnostics_fn, record of step 0) from `train`; None: no held-out diagnostics.
  qpi costs one batched critic call per seed on the episodes already played."""
  from tqdm.auto import tqdm

  seeds = tuple(seeds)
  n = len(seeds)

  def eval_fn(state, step):
    rows = [{} for _ in seeds]
    if diag is not None:
      fn, step0 = diag
      out = fn(state, jax.random.key(diagnostics.DIAG_SEED))
      rows = [diagnostics.summarize(d) for d in diagnostics.per_seed(jax.device_get(out))]
      if workdir is not None and jax.process_index() == 0:
        _append_diagnostics(workdir, step0, seeds)
        _append_diagnostics(workdir, (step, out), seeds)
    tqdm.write(
      f"[uhm] step {step}: evaluating {num_episodes} episode(s) x {n} seed(s) in MuJoCo "
      "(no output until done) ...",
    )
    r = evaluate_seeds(
      state,
      task.env_name,
      num_episodes,
      num_seeds=n,
      env=task.env,
      max_episode_steps=max_episode_steps,
      qpi_discount=task.config.discount if qpi else None,
      eval_seed=eval_seed,
    )
    keys = ("success", "return", "episode_len") + (critic_eval.COLUMNS if qpi else ())
    if n == 1:
      return {**{k: r[k] for k in keys}, **rows[0]}
    per = r["per_seed"]
    out = {k: np.array([p[k] for p in per]) for k in keys}
    return {**out, **{k: np.array([row[k] for row in rows]) for k in rows[0]}}

  return eval_fn


VIDEO_STEPS = 50  # steps per evaluation video clip at most (MuJoCo renders on the host)


def make_video_fn(task: Task, episodes: int, seeds=(0,), eval_seed: int = EVAL_SEED):
  """``video_fn(state, step)`` for `runtime.train`: ``episodes`` evaluation episodes (the first
  ones the evaluation plays) of each seed's actor rendered off-screen by MuJoCo, one row per
  seed, at most `VIDEO_STEPS` steps, half resolution. None (one printed line) without an
  off-screen backend; a backend that fails at the first render turns videos off with one line."""
  from jaxlab.core import videos
  from jaxlab.envs import render

  if not episodes or not videos.mujoco_renders():
    return None
  n, broken = len(tuple(seeds)), []

  def video_fn(state, step):
    del step
    if broken:
      return None
    try:
      rows, lengths = [], []
      for i in range(n):
        s_i = state if n == 1 else seed_slice(state, i)
        policy = lambda o, s_i=s_i: np.asarray(_act(s_i, jnp.asarray(o)))
        env = task.env if task.env is not None else _ogbench().make_env(task.env_name)
        frames, lens = render.mujoco_episodes(env, policy, episodes, eval_seed, VIDEO_STEPS, 2)
        rows.append(frames)
        lengths.append(lens)
      return videos.grid(videos.trim(np.stack(rows), np.stack(lengths)))
    except Exception as e:  # a renderer that does not work on this machine: no videos
      broken.append(e)
      why = str(e).strip().splitlines()[-1][:120] if str(e).strip() else type(e).__name__
      videos.say_once(f"MuJoCo off-screen rendering failed ({why}): no evaluation videos")
      return None

  return video_fn


def _ogbench():
  from jaxlab.envs import ogbench as og

  return og


def _append_diagnostics(workdir, step_out, seeds) -> None:
  """One line per evaluation step (a step already recorded, e.g. by a resumed run, is skipped)."""
  import json

  step, out = step_out
  if step in diagnostics.read_diagnostics(workdir):
    return
  per = diagnostics.per_seed(out)
  line = dict(step=int(step), seeds={str(seed): d for seed, d in zip(seeds, per)})
  with open(pathlib.Path(workdir) / diagnostics.DIAGNOSTICS_FILE, "a") as f:
    f.write(json.dumps(line) + "\n")


def _mean_row(seeds: dict) -> dict:
  """eval.csv-style means over seeds of one step's per-seed diagnostics."""
  return diagnostics.summarize(
    {k: np.asarray([d[k] for d in seeds.values()]) for k in next(iter(seeds.values()))}
  )


def resolve_eval_every(eval_every: int | None, steps: int, log_every: int) -> int:
  """eval_every as given (>= 0; 0 = only at the end), or when None a quarter of the run rounded to
  a multiple of log_every (equal chunks: one compile; a learning curve of 4 points)."""
  if eval_every is None:
    return max(log_every, steps // 4 // log_every * log_every)
  require(eval_every >= 0, "eval_every", f"must be >= 0, got {eval_every}")
  return eval_every


def train(
  task: Task,
  loop: runtime.Loop,
  *,
  seed: int | None = None,
  eval_episodes: int | None = None,
  seeds=None,
  workdir=None,
  mesh=None,
  options: RunOptions | None = None,
  qpi: bool = True,
  eval_seed: int = EVAL_SEED,
  videos: int = 0,
):
  """Creates the agent and trains it on the task: training seed ``seed`` (default 0), or several
  ``seeds`` trained together, vmapped in one compiled program (seed k there equals ``seed=k``
  alone). ``options`` (`check_options`) replaces seed, seeds, eval_episodes and mesh.

  Evaluates with `make_eval_fn` at loop.eval_every (and at the end). With a mesh the batch is
  split over its batch axes; parameters and the data set are replicated. Returns (state, result)
  of `runtime.train` (with several seeds the state has a leading seed axis and
  ``result.per_seed[k]`` holds seed k's summary); config.json records the agent config, seeds and
  `task.record`. Key streams of a seed: 0 init, the seed's key itself the training steps.
  qpi: score the critic against the actor's own returns at each evaluation (`make_eval_fn`).
  eval_seed: evaluation episode i resets with ``eval_seed + i`` (recorded in config.json when it
  is not EVAL_SEED).
  videos: episodes per evaluation video (`make_video_fn`; 0 = none), at the steps
  ``loop.video_every`` selects.
  """
  if options is None:
    if eval_episodes is None:
      raise TypeError("train: eval_episodes= (or options=) is required")
    seeds = tuple(seeds) if seeds else (seed or 0,)
    options = check_options(seeds=seeds, mesh=mesh, eval_episodes=eval_episodes)
  elif any(x is not None for x in (seed, seeds, eval_episodes, mesh)):
    raise TypeError("train: pass seed, seeds, eval_episodes and mesh in options=, not beside it")
  seeds, mesh, eval_episodes = options.seeds, options.mesh, options.eval_episodes
  cfg = task.config
  num_seeds = len(seeds)
  stats = offline_data.obs_stats(task.data)
  keys = seeds_lib.seed_keys(seeds)
  if num_seeds == 1:
    key = keys[0]
    state = agent.create_seeds(
      jax.random.fold_in(key, 0), 1, task.obs_dim, task.act_dim, cfg, obs_stats=stats
    )
  else:
    key = keys
    init_keys = seeds_lib.stream(keys, 0)
    state = agent.create_stacked(init_keys, task.obs_dim, task.act_dim, cfg, obs_stats=stats)
  update_fn, sample_fn = agent.update, agent.make_sample_fn(cfg)
  sample_fn = sharding.data_parallel(sample_fn, mesh)
  replicated = None if mesh is None else sharding.replicated(mesh)
  record = {**task.record, "training_seeds": list(seeds)}
  diag = None
  _watch_compiles()
  if task.heldout is not None:
    print(
      f"[uhm] held-out diagnostics: {len(task.heldout.mc_return)} states of "
      f"{task.heldout.episodes} validation episodes, horizons 1..{task.heldout.k_max}; "
      "building them and measuring step 0 ...",
      flush=True,
    )
    before = _compile_counts()
    fn = diagnostics.make_diagnostics_fn(cfg, task.heldout, num_seeds)
    diag = fn, (0, jax.device_get(fn(state, jax.random.key(diagnostics.DIAG_SEED))))
    print(f"[uhm] held-out diagnostics: {_compile_words(before)}", flush=True)
  print(
    f"[uhm] training: the first {loop.log_every} steps include building the update (compiling: "
    "about a minute on 2 busy CPU cores; seconds when the compilation cache holds it from an "
    "identical earlier run) ...",
    flush=True,
  )
  before = _compile_counts()
  first_eval = make_eval_fn(
    task, eval_episodes, seeds, workdir=workdir, diag=diag, qpi=qpi, eval_seed=eval_seed
  )
  said = []

  def eval_fn(state, step):
    if not said:  # the update's program was built by now: say how
      said.append(step)
      from tqdm.auto import tqdm

      tqdm.write(f"[uhm] the update: {_compile_words(before)}")  # above the progress bar
    return first_eval(state, step)

  if eval_seed != EVAL_SEED:
    record["eval_seed"] = int(eval_seed)
  return runtime.train(
    state,
    update_fn,
    loop,
    key=key,
    workdir=workdir,
    data=task.data,
    sample_fn=sample_fn,
    eval_fn=eval_fn,
    mesh=mesh,
    state_sharding=replicated,
    data_sharding=replicated,
    config={"agent": cfg.to_dict(), "seed": seeds[0], "num_seeds": num_seeds, **record},
    seeds=seeds if num_seeds > 1 else None,
    seed_vmap=agent.seed_vmap if num_seeds > 1 else None,
    video_fn=make_video_fn(task, videos, seeds, eval_seed) if videos else None,
  )


# Persistent-cache hits and backend compiles of this process (jax.monitoring), so a progress line
# says whether a program was compiled or read from the compilation cache.
_COMPILES = {"hits": 0, "compiles": 0, "seconds": 0.0, "watching": False}


def _watch_compiles() -> None:
  if _COMPILES["watching"]:
    return
  _COMPILES["watching"] = True

  def on_event(event, **_):
    if event == "/jax/compilation_cache/cache_hits":
      _COMPILES["hits"] += 1

  def on_duration(event, seconds, **_):
    if event == "/jax/core/compile/backend_compile_duration":  # timed around the cache lookup
      _COMPILES["compiles"] += 1
      _COMPILES["seconds"] += seconds

  jax.monitoring.register_event_listener(on_event)
  jax.monitoring.register_event_duration_secs_listener(on_duration)


def _compile_counts() -> dict:
  return {k: _COMPILES[k] for k in ("hits", "compiles", "seconds")}


def _compile_words(before: dict) -> str:
  """What building the programs since ``before`` took: compiled, or read from the cache."""
  now = _compile_counts()
  hits = now["hits"] - before["hits"]
  fresh = now["compiles"] - before["compiles"] - hits
  seconds = now["seconds"] - before["seconds"]
  if fresh <= 0 and hits:
    return f"read from the compilation cache in {seconds:.1f} s (nothing compiled)"
  cached = f"; {hits} read from the compilation cache" if hits else ""
  return f"compiled {max(fresh, 0)} program(s) in {seconds:.1f} s{cached}"


EXPECTED_ZERO_BELOW = 100_000  # updates: below this, 0 % success is what a CPU run shows


def write_report(workdir, task: Task, result, training_seeds) -> dict:
  """learning_curve.png, horizon_model.png and critic.png (held-out diagnostics), and summary.json
  completed with the task record, OGBench's timing and what the diagnostics did
  (``diagnostics``: first and last step, the figures that moved)."""
  from jaxlab.envs import ogbench as og

  workdir = pathlib.Path(workdir)
  agent_name = task.config.agent
  step = int(result.summary.get("step", 0) or 0)
  if result.evals:
    steps = sorted(result.evals)
    note = "held-out diagnostics: horizon_model.png, critic.png"
    if step < EXPECTED_ZERO_BELOW:
      note = f"0 % is expected at {step} updates (< {EXPECTED_ZERO_BELOW}); " + note
    plots.lines(
      workdir / "learning_curve.png",
      {agent_name: (steps, [result.evals[s]["success"] for s in steps])},
      "update step",
      "success rate",
      title=f"{agent_name} on {task.env_name}\n({note})",
    )
  summary = {
    **result.summary,
    **task.record,
    "training_seeds": list(training_seeds),
    "ogbench": og.timing_record(),
  }
  diag = diagnostics.read_diagnostics(workdir)
  if diag:
    summary["diagnostics"] = _plot_diagnostics(workdir, task, diag)
  runtime.write_summary(workdir, summary)
  return summary


def _plot_diagnostics(workdir: pathlib.Path, task: Task, diag: dict) -> dict:
  steps = sorted(diag)
  rows = {s: _mean_row(diag[s]) for s in steps}
  first, last = rows[steps[0]], rows[steps[-1]]
  name = f"{task.config.agent} on {task.env_name}"
  k = task.config.k_max
  horizons = list(range(1, k + 1))
  figures = []
  verdict = diagnostics.verdicts(first, last, n=min(4, k))
  if "model_err_n1" in last:
    col = lambda r, p: [r[f"{p}_n{n}"] for n in horizons]  # noqa: E731
    err, best = (
      np.asarray(col(last, "model_err")),
      np.minimum(col(last, "model_err_state"), col(last, "model_err_mean")),
    )
    below = int((err < best).sum())
    plots.profiles(
      workdir / "horizon_model.png",
      {f"step {s}": (horizons, col(rows[s], "model_err")) for s in steps},
      {
        "baseline: current state": (horizons, col(last, "model_err_state")),
        "baseline: mean displacement": (horizons, col(last, "model_err_mean")),
      },
      "horizon n",
      "RMSE of sampled future vs true state (std units)",
      title=f"{name}\nhorizon model on held-out episodes: at step {steps[-1]} below the better "
      f"baseline at {below} of {k} horizons",
    )
    figures.append("horizon_model.png")
  seed0 = next(iter(diag[steps[-1]]))
  G = task.heldout.mc_return
  pts = {f"step {s}": (G, diag[s][seed0]["q_pred"]) for s in dict.fromkeys([steps[0], steps[-1]])}
  c = verdict["critic.png"]
  than = "below" if c["beat"] or not c["baseline"] > 0 else f"{c['after'] / c['baseline']:.1f}x"
  plots.scatter(
    workdir / "critic.png",
    pts,
    f"discounted Monte-Carlo return of the data (gamma {task.config.discount})",
    "critic Q(s, a)",
    title=f"{name}\ncritic on held-out episodes (seed {seed0}); at step {steps[-1]} mean |Q - G| "
    f"{c['after']:.3g} (all seeds), {than} the constant baseline's {c['baseline']:.3g}",
    hline=(
      f"constant baseline: training mean G = {task.heldout.mean_return:.3g}",
      task.heldout.mean_return,
    ),
  )
  figures.append("critic.png")
  moved = diagnostics.moved(first, last, n=min(4, k))
  return dict(
    first_step=steps[0],
    last_step=steps[-1],
    first=first,
    last=last,
    figures=figures,
    moved={f: list(v) for f, v in moved.items()},
    verdicts={f: v for f, v in verdict.items() if f in figures},
  )


def final_line(summary: dict, task: Task, eval_episodes: int, workdir=None) -> str:
  """The run's last line: success, and each held-out diagnostic against its baseline. A figure is
  named as showing learning only when its error ended below its baseline's."""
  seeds = summary.get("training_seeds", [0])
  line = (
    f"[uhm] {task.config.agent} on {task.env_name}: success rate "
    f"{100 * summary.get('eval/success', float('nan')):.1f}% over {eval_episodes} episodes "
    f"x {len(seeds)} seed(s) after {summary.get('step')} steps"
  )
  d = summary.get("diagnostics")
  if d and d.get("verdicts"):
    parts = []
    for fig, v in d["verdicts"].items():
      numbers = f"{v['label']} {v['before']:.3g} -> {v['after']:.3g}"
      if v["beat"]:
        parts.append(f"{numbers}, below {v['baseline_name']}'s {v['baseline']:.3g} [{fig}]")
      else:
        trend = "fell" if v["fell"] else "flat"
        times = f"{v['after'] / v['baseline']:.1f}x " if v["baseline"] > 0 else "at or above "
        parts.append(
          f"{numbers} ({trend}), still {times}{v['baseline_name']}'s {v['baseline']:.3g}: not "
          "yet better than the baseline"
        )
    line += f"; held-out, step {d['first_step']} -> {d['last_step']}: " + "; ".join(parts)
  return line + (f" -> {workdir}/summary.json" if workdir else "")


# ------------------------------------------------------------------------------- re-evaluation
def recorded_config(workdir):
  """(frozen agent config, env name, number of training seeds) a run recorded in config.json."""
  path = pathlib.Path(workdir) / "config.json"
  require(path.exists(), "workdir", f"{workdir} has no config.json: not a UHM run directory")
  try:
    record = metrics.read_json(path)
    config = agent.get_config()
    for k, v in record["agent"].items():
      config[k] = tuple(v) if isinstance(v, list) else v
    num_seeds = int(record.get("num_seeds", 1))
    return agent.validate_config(config), str(record["env_name"]), num_seeds
  except (ValueError, KeyError, TypeError, AttributeError) as e:  # ConfigError is a ValueError
    why = e.message if isinstance(e, ConfigError) else f"{type(e).__name__}: {e}"
    raise ConfigError(
      "workdir", f"{path} is not the config of an experiments.uhm run ({why})"
    ) from None


def evaluate_checkpoint(workdir, step: int | None, num_episodes: int) -> tuple[dict, pathlib.Path]:
  """Restores a run's checkpoint (latest when step is None), evaluates every training seed with
  `evaluate_seeds` and writes ``eval_step<step>_n<episodes>.json`` into the workdir.

  Everything is checked before the environment is built: the run's config.json, its checkpoints/
  folder (never created here) and that the workdir is writable. The workdir is locked while
  evaluating; a result already there (the same step and episodes) is returned unchanged.
  """
  from jaxlab.envs import ogbench as og

  check_eval_episodes(num_episodes)
  workdir = pathlib.Path(workdir)
  require(workdir.is_dir(), "workdir", f"{workdir} is not a run directory")
  cfg, env_name, num_seeds = recorded_config(workdir)
  ckpts = workdir / checkpoint.CKPT_DIR
  require(
    ckpts.is_dir(),
    "workdir",
    f"{workdir} has no {checkpoint.CKPT_DIR}/ folder: nothing to evaluate",
  )
  steps = sorted(int(p.name) for p in ckpts.iterdir() if p.name.isdigit())
  require(bool(steps), "workdir", f"{workdir} has no checkpoint")
  if step is not None:
    require(step in steps, "step", f"no checkpoint at step {step} in {workdir}; have {steps}")
  step = steps[-1] if step is None else step
  workdir_lib.check_writable(workdir, "workdir")
  out = workdir / f"eval_step{step}_n{num_episodes}.json"
  with workdir_lib.session(workdir) as wd:
    if out.exists():  # this evaluation was done: its record, unchanged
      try:
        return metrics.read_json(out), out
      except (OSError, ValueError) as e:
        raise ConfigError("workdir", f"{out} is unreadable ({e}); remove it") from None
    warnings.filterwarnings("ignore", message=".*precision lowered.*")
    warnings.filterwarnings("ignore", message=".*DISPLAY.*")
    env = og.make_env(env_name)
    dims = int(env.observation_space.shape[0]), int(env.action_space.shape[0])
    # Structure only (values are restored): one state, or num_seeds stacked by --seeds.
    like = agent.create_seeds(jax.random.key(0), num_seeds, *dims, cfg)
    restored = checkpoint.restore(wd, like, step)
    if restored is None:
      raise ConfigError("workdir", f"{workdir} has no checkpoint")
    state, step = restored
    r = evaluate_seeds(state, env_name, num_episodes, num_seeds=num_seeds, env=env)
    r.update(step=step, agent=cfg.agent, env_name=env_name, ogbench=og.timing_record())
    metrics.write_json(out, r)
  return r, out
