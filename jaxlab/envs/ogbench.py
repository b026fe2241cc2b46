"""OGBench single-task data sets and evaluation, offline.

OGBench (Park et al., arXiv 2410.20092); the layout and options are described in docs/ogbench.md.

Data (`load`): for a single-task name such as `cube-single-play-singletask-task2-v0` the raw OGBench
file `<data set>.npz` (+ `-val.npz`) is looked up, in this order,
  1. in `dataset_dir` if given (an existing folder, unless a set is to be generated there), else
     in OGBench's default folder `~/.ogbench/data`;
  2. if absent and `embedded=True`: the small set shipped in `jaxlab/envs/data/` (made by
     `jaxlab.envs.ogbench_generate`; only for the default task's data set cube-single-play-v0);
  3. if still absent, only when asked: `generate_if_missing=True` generates the full standard set
     (35-90 min on a CPU) with OGBench's environments and scripted oracles, in the folder of step 1;
     `num_episodes=N` generates (or reuses) a set of N episodes in
     `<folder>/jaxlab-generated/e<N>-s<seed>/`, so a small set never shadows a real one.
  Otherwise a missing set is a `DatasetError` that gives the generator command to run.
Loaded arrays holding NaN or inf are a `DatasetError`. Nothing here downloads: ogbench's downloading
path is never called (its loader only gets an explicit `dataset_path`). Rewards and masks come from
ogbench's own single-task relabelling.

Evaluation (`evaluate`): runs the real OGBench single-task environment, no rendering, and reports
the success rate, the return and the episode length.

Reward and success timing (OGBench README, "Caveats"): since OGBench 1.2.0 a single-task env
computes reward, `terminated` and `info['success']` on the current state s of a step (s, a, s'),
as its data sets' relabelled rewards do; 1.1 computed them on s'. Every env made here passes
`success_timing=SUCCESS_TIMING` ("pre" = on s) explicitly, so results do not depend on the
installed version's default; `timing_record()` is what experiments write into summary.json.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import time

import numpy as np
from absl import logging

from jaxlab.core import files
from jaxlab.core.errors import ConfigError, check_finite_array
from jaxlab.envs import ogbench_generate as gen

DEFAULT_DATASET_DIR = gen.DEFAULT_DATASET_DIR
DEFAULT_ENV_NAME = "cube-single-play-singletask-task2-v0"
SUCCESS_TIMING = "pre"  # reward / success on s (OGBench >= 1.2.0); "post" = on s' (1.1)
EMBEDDED_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")

_DATASET_TYPES = ("play", "noisy", "navigate", "stitch", "explore")
ALLOWED_HELP = (
  "single-task names look like <data set minus -v0>-singletask[-task{1..5}]-v0, e.g. "
  f"{DEFAULT_ENV_NAME}; generated offline when missing: "
  + ", ".join(gen.GENERATABLE)
  + "; need OGBench's file placed in --dataset_dir or ~/.ogbench/data: "
  "antmaze-{medium,large,giant,teleport}-{navigate,stitch,explore}-v0, "
  "humanoidmaze-{medium,large,giant}-{navigate,stitch}-v0, antsoccer-{arena,medium}-"
  "{navigate,stitch}-v0, visual-* variants"
)


class DatasetError(ConfigError):
  """A data set is missing, malformed or cannot be made offline. ``field`` is the option to fix
  (``dataset_dir`` or ``env_name``); the message says what to do."""


def _mujoco_warning(message: str) -> None:
  logging.warning("MuJoCo: %s", message)


def _require_ogbench():
  try:
    import mujoco
    import ogbench  # noqa: F401  (registers the environments)
  except ImportError as e:
    raise ImportError(
      f"OGBench is not installed ({e}); install it with: pip install -e '.[ogbench]'"
    ) from None
  # MuJoCo's default warning handler appends to ./MUJOCO_LOG.TXT: nothing goes to the current
  # directory unasked, so warnings go to the log instead.
  mujoco.set_mju_user_warning(_mujoco_warning)
  return ogbench


@dataclasses.dataclass(frozen=True)
class TaskName:
  """A parsed OGBench single-task name."""

  name: (
    str  # as requested, normalised to the single-task form: 'cube-single-play-singletask-task2-v0'
  )
  dataset_name: str  # the raw data set: 'cube-single-play-v0'
  env_id: str  # gymnasium id of the single-task env: 'cube-single-singletask-task2-v0'
  task_id: int | None  # 1..5, None = the environment's default task


def parse_name(env_name: str, task_id: int | None = None) -> TaskName:
  """Parse `<dataset>-singletask[-taskN]-v0`, or a plain data set name plus `task_id`.

  Raises DatasetError listing what is allowed.
  """
  _require_ogbench()
  import gymnasium

  if not isinstance(env_name, str) or not env_name.endswith("-v0"):
    raise DatasetError("env_name", f"unknown OGBench env_name {env_name!r}; {ALLOWED_HELP}")
  parts = env_name.split("-")
  if "singletask" in parts:
    pos = parts.index("singletask")
    m = re.fullmatch(r"task(\d)", parts[-2]) if len(parts) >= pos + 3 else None
    named_task = int(m.group(1)) if m else None
    if task_id is not None and named_task is not None and task_id != named_task:
      raise DatasetError(
        "env_name", f"env_name {env_name!r} names task {named_task} but task_id={task_id} was given"
      )
    task_id = task_id if task_id is not None else named_task
    dataset_name = "-".join(parts[:pos] + parts[-1:])
    prefix = parts[:pos]
  else:
    dataset_name = env_name
    prefix = parts[:-1]
  if len(prefix) < 2 or prefix[-1] not in _DATASET_TYPES:
    raise DatasetError("env_name", f"unknown OGBench env_name {env_name!r}; {ALLOWED_HELP}")
  if "singletask" not in parts and task_id is None:
    raise DatasetError(
      "env_name",
      f"{env_name!r} is a goal-conditioned data set name; pass task_id=1..5 or use a "
      f"single-task name; {ALLOWED_HELP}",
    )
  if task_id is not None and not 1 <= int(task_id) <= 5:
    raise DatasetError("env_name", f"task_id must be in 1..5, got {task_id}")
  base = "-".join(prefix[:-1])
  suffix = "" if task_id is None else f"-task{int(task_id)}"
  env_id = f"{base}-singletask{suffix}-v0"
  if env_id not in gymnasium.registry:
    raise DatasetError(
      "env_name", f"unknown OGBench env_name {env_name!r} (no environment {env_id}); {ALLOWED_HELP}"
    )
  name = f"{'-'.join(prefix)}-singletask{suffix}-v0"
  return TaskName(name, dataset_name, env_id, None if task_id is None else int(task_id))


# -------------------------------------------------------------------------------------- file checks


def _check_against_env(path: str, shapes: dict, env, need_qpos: bool) -> None:
  """The file's rows fit the environment's observation, action and MuJoCo state sizes."""
  ob, ac = env.observation_space.shape, env.action_space.shape
  if tuple(shapes["observations"][1:]) != tuple(ob):
    raise DatasetError(
      "dataset_dir",
      f"{path}: 'observations' rows have shape {shapes['observations'][1:]}, the environment "
      f"expects {tuple(ob)} (wrong data set for this env?)",
    )
  if tuple(shapes["actions"][1:]) != tuple(ac):
    raise DatasetError(
      "dataset_dir",
      f"{path}: 'actions' rows have shape {shapes['actions'][1:]}, the environment expects "
      f"{tuple(ac)}",
    )
  if need_qpos:
    nq = env.unwrapped.model.nq
    if shapes["qpos"][1:] != (nq,):
      raise DatasetError(
        "dataset_dir",
        f"{path}: 'qpos' rows have shape {shapes['qpos'][1:]}, the environment has nq={nq}",
      )
  if hasattr(env.unwrapped, "_num_buttons") and "button_states" not in shapes:
    raise DatasetError(
      "dataset_dir",
      f"{path}: missing 'button_states', needed to relabel rewards for this environment",
    )


@contextlib.contextmanager
def _dataset_error():
  """A bad file found by `jaxlab.core.files` as this module's DatasetError."""
  try:
    yield
  except DatasetError:
    raise
  except ConfigError as e:
    raise DatasetError(e.field, e.message) from None


def check_dataset_file(path: str, env=None, need_qpos: bool = True) -> dict:
  """Checks a raw OGBench npz without loading it into the training pipeline; returns {key: shape}.

  Raises DatasetError naming the file and the field when keys are missing or shapes disagree with
  each other or with `env`'s observation/action spaces.
  """
  # Headers first: a damaged or oversized member is refused before anything is allocated.
  with _dataset_error():
    members = files.npz_members("dataset_dir", path)
  shapes = {k: m.shape for k, m in members.items()}
  required = ["observations", "actions", "terminals"] + (["qpos"] if need_qpos else [])
  missing = [k for k in required if k not in shapes]
  if missing:
    raise DatasetError(
      "dataset_dir",
      f"{path}: missing key(s) {missing}; an OGBench raw file has {required} "
      f"(+ qvel, button_states); found {sorted(shapes)}",
    )
  n = shapes["observations"][0] if shapes["observations"] else 0
  if n < 2:
    raise DatasetError(
      "dataset_dir",
      f"{path}: 'observations' has shape {shapes['observations']}, need at least 2 rows",
    )
  for k, s in shapes.items():
    if not s or s[0] != n:
      raise DatasetError(
        "dataset_dir", f"{path}: '{k}' has shape {s} but 'observations' has {n} rows"
      )
  with _dataset_error():
    files.check_real("dataset_dir", path, members)
  if len(shapes["terminals"]) != 1:
    raise DatasetError(
      "dataset_dir", f"{path}: 'terminals' must be 1-D, got shape {shapes['terminals']}"
    )
  with _dataset_error():
    terminals = files.load_npz("dataset_dir", path, ["terminals"])["terminals"]
  if not bool(terminals[-1]):
    raise DatasetError(
      "dataset_dir",
      f"{path}: 'terminals' must be True at the last step of each trajectory (the last row is "
      "False; the file looks truncated)",
    )
  if env is not None:
    _check_against_env(path, shapes, env, need_qpos)
  return shapes


# ------------------------------------------------------------------------------------------ loading


@dataclasses.dataclass
class OGBenchData:
  """What `load` returns."""

  env: object  # the single-task gymnasium env (for evaluation)
  train: dict  # observations, actions, rewards, masks, terminals, next_observations (numpy)
  val: dict  # same keys, validation split
  source: str  # 'file' | 'embedded' | 'generated'
  path: str  # the train .npz that was read
  meta: dict | None  # the generator's note (<path>.json) when the set was generated


def embedded_path(dataset_name: str) -> str | None:
  p = os.path.join(EMBEDDED_DIR, f"{dataset_name}.npz")
  return p if os.path.exists(p) and os.path.exists(p[:-4] + "-val.npz") else None


def _generated_dir(root: str, num_episodes: int, seed: int) -> str:
  return os.path.join(root, "jaxlab-generated", f"e{num_episodes}-s{seed}")


def _log(msg: str) -> None:
  print(f"[jaxlab.envs.ogbench] {msg}", flush=True)


@contextlib.contextmanager
def _generation_lock(folder: str, dataset_name: str):
  """An exclusive lock file next to the data set (POSIX advisory lock; no-op where unsupported)."""
  os.makedirs(folder, exist_ok=True)
  path = os.path.join(folder, f".{dataset_name}.lock")
  with open(path, "a") as f:
    try:
      import fcntl

      fcntl.flock(f, fcntl.LOCK_EX)
    except (ImportError, OSError):
      pass
    try:
      yield
    finally:
      try:
        import fcntl

        fcntl.flock(f, fcntl.LOCK_UN)
      except (ImportError, OSError):
        pass


def generate_command(dataset_name: str, folder: str, num_episodes: int | None = None) -> str:
  """The shell command that makes a data set in a folder."""
  episodes = f" --episodes={num_episodes}" if num_episodes else ""
  program = "python -m jaxlab.envs.ogbench_generate"
  return f"{program} --env_name={dataset_name} --dataset_dir={folder}{episodes}"


def _dataset_root(dataset_dir: str | None, may_create: bool) -> str:
  """The folder to look in: `dataset_dir` (existing, unless it may be created) or OGBench's."""
  if dataset_dir is None:
    return os.path.expanduser(DEFAULT_DATASET_DIR)
  root = os.path.expanduser(dataset_dir)
  if os.path.exists(root) and not os.path.isdir(root):
    raise DatasetError("dataset_dir", f"{root} is a file, not a folder of OGBench .npz files")
  if not os.path.exists(root) and not may_create:
    raise DatasetError(
      "dataset_dir",
      f"folder {root} does not exist. Give the folder that holds OGBench's <data set>.npz files, "
      "or generate a set there deliberately: --generate_missing (the full set; Python: "
      "generate_if_missing=True), --episodes=N (a small one), or "
      "python -m jaxlab.envs.ogbench_generate",
    )
  return root


def _generate_missing(tn: TaskName, spec, folder: str, episodes: int, seed: int, verbose: bool):
  """Generates the set into `folder` unless another process did meanwhile (waits on its lock)."""
  train_path, val_path = gen.dataset_paths(tn.dataset_name, folder)
  log = _log if verbose else (lambda *_: None)
  steps = episodes * spec.max_episode_steps * 1.1
  per_k = 0.15 if spec.family == "pointmaze" else 1.9
  # Several runs of a sweep may ask for the same missing set at once: one generates, the others
  # wait on the lock and then load what it wrote.
  with _generation_lock(folder, tn.dataset_name):
    if os.path.exists(train_path):
      log(f"{train_path} was generated by another run meanwhile; loading it")
      return
    if os.path.exists(val_path):
      raise DatasetError(
        "dataset_dir",
        f"{val_path} exists without its train file {train_path}; not overwriting it. Remove it "
        "(or place the matching train file) and retry.",
      )
    log(
      f"{train_path} not found (nothing is downloaded); generating {tn.dataset_name} locally with "
      f"OGBench's scripted oracles: {episodes} episodes (+{max(1, episodes // 10)} val), "
      f"~{steps / 1e3:.0f}k steps, ~{steps / 1e3 * per_k / 60:.1f} min; cached in {folder}"
    )
    gen.generate(
      tn.dataset_name, num_episodes=episodes, dataset_dir=folder, seed=seed, progress=verbose
    )


def _locate(
  tn: TaskName,
  root: str,
  generate_full: bool,
  embedded: bool,
  num_episodes: int | None,
  seed: int,
  verbose: bool,
) -> tuple[str, str, str]:
  """``(train_path, val_path, source)`` of the set to load, generating it when that was asked."""
  try:
    spec = gen.spec_for(tn.dataset_name)
  except gen.UnsupportedDatasetError as e:
    spec, unsupported = None, DatasetError(e.field, e.message)
  small = num_episodes is not None and (spec is None or num_episodes != spec.num_episodes)
  folder = _generated_dir(root, int(num_episodes), seed) if small else root
  train_path, val_path = gen.dataset_paths(tn.dataset_name, folder)
  # lexists: a symlink loop or dangling link is reported as that, not as a missing set
  if os.path.lexists(train_path):
    if not os.path.lexists(val_path):
      raise DatasetError(
        "dataset_dir",
        f"{train_path} exists but its validation file {val_path} does not; OGBench's loader "
        "needs both (place the -val.npz next to it)",
      )
    return train_path, val_path, "file"
  emb = embedded_path(tn.dataset_name) if (embedded and num_episodes is None) else None
  if emb is not None:
    if verbose:
      _log(
        f"{tn.dataset_name}.npz not found in {folder}; using the small embedded set {emb}. For "
        f"the full set run: {generate_command(tn.dataset_name, root)}"
      )
    return emb, emb[:-4] + "-val.npz", "embedded"
  if spec is None:  # expert-needing / visual / unknown: the error says which file to place
    raise unsupported
  if not (generate_full or num_episodes is not None):
    raise DatasetError(
      "dataset_dir",
      f"{train_path} not found. Generate the set (~{spec.num_episodes} episodes, 35-90 min on a "
      f"CPU) with: {generate_command(tn.dataset_name, root)} -- or pass --generate_missing "
      "(Python: generate_if_missing=True), or a small set with --episodes=N",
    )
  episodes = spec.num_episodes if num_episodes is None else int(num_episodes)
  _generate_missing(tn, spec, folder, episodes, seed, verbose)
  return train_path, val_path, "generated"


def _check_finite(path: str, arrays: dict) -> None:
  for k in ("observations", "actions", "rewards", "next_observations"):
    if k in arrays:
      try:
        check_finite_array("dataset_dir", arrays[k])
      except ConfigError as e:
        raise DatasetError("dataset_dir", f"{path}: '{k}' {e.message}") from None


def _read_meta(path: str) -> dict | None:
  """The generator's note next to a data set (None when there is none)."""
  if not os.path.lexists(path):
    return None
  with _dataset_error():
    meta = files.read_json("dataset_dir", path)
  if not isinstance(meta, dict):
    raise DatasetError("dataset_dir", f"{path}: a JSON {type(meta).__name__}, not an object")
  return meta


def load(
  env_name: str = DEFAULT_ENV_NAME,
  dataset_dir: str | None = None,
  generate_if_missing: bool = False,
  embedded: bool = True,
  num_episodes: int | None = None,
  seed: int = 0,
  task_id: int | None = None,
  compact_dataset: bool = False,
  verbose: bool = True,
) -> OGBenchData:
  """Finds (or, when asked, makes) a single-task name's raw data set; loads it through ogbench.

  `num_episodes=None` asks for the standard set: a file in `dataset_dir` (an existing folder) or
  ~/.ogbench/data, else the embedded small set if `embedded`, else with `generate_if_missing=True`
  a full-size local generation (35-90 min). An integer asks for a locally generated set of that many
  episodes (made once, cached under `<folder>/jaxlab-generated/`). Raises DatasetError (a
  ConfigError naming `dataset_dir` or `env_name`) when the set is missing, malformed or non-finite.
  """
  ogbench = _require_ogbench()
  tn = parse_name(env_name, task_id)
  # Generating was asked for (a full set, or a small one of num_episodes): the folder may be new.
  root = _dataset_root(dataset_dir, may_create=generate_if_missing or num_episodes is not None)
  train_path, val_path, source = _locate(
    tn, root, generate_if_missing, embedded, num_episodes, seed, verbose
  )
  env = _with_timing(
    lambda: ogbench.make_env_and_datasets(tn.name, env_only=True, success_timing=SUCCESS_TIMING)
  )
  for p in (train_path, val_path):
    check_dataset_file(p, env)
  meta = _read_meta(train_path + ".json")
  # dataset_path given: ogbench never takes its downloading branch.
  train, val = ogbench.make_env_and_datasets(
    tn.name,
    dataset_path=train_path,
    compact_dataset=compact_dataset,
    dataset_only=True,
    cur_env=env,
  )
  _check_finite(train_path, train)
  _check_finite(val_path, val)
  if source == "file" and meta is not None:
    source = "generated"
  if verbose:
    _log(
      f"{tn.name}: {len(train['observations'])} train / {len(val['observations'])} val "
      f"transitions ({source}, {train_path})"
    )
  return OGBenchData(env=env, train=train, val=val, source=source, path=train_path, meta=meta)


# --------------------------------------------------------------------------------------- evaluation

_EVAL_ENVS: dict = {}


def timing_record() -> dict:
  """What to record with a result: the OGBench version and when reward / success are computed."""
  import ogbench

  version = getattr(ogbench, "__version__", None)
  if version is None:
    from importlib.metadata import version as _version

    version = _version("ogbench")
  return {
    "ogbench_version": version,
    "success_timing": SUCCESS_TIMING,
    "reward_and_success_on": "s" if SUCCESS_TIMING == "pre" else "s'",
  }


def make_env(env_name: str = DEFAULT_ENV_NAME, task_id: int | None = None):
  """The single-task OGBench env for a name (cached: a manipulation env compiles MuJoCo, ~1 s).

  Reward and success are computed on s (`SUCCESS_TIMING`), whatever the installed default."""
  import gymnasium

  tn = parse_name(env_name, task_id)
  if tn.env_id not in _EVAL_ENVS:
    _EVAL_ENVS[tn.env_id] = _with_timing(
      lambda: gymnasium.make(tn.env_id, success_timing=SUCCESS_TIMING)
    )
  return _EVAL_ENVS[tn.env_id]


def _with_timing(make):
  """`make()`, with a clear error where the installed OGBench predates `success_timing` (< 1.2)."""
  try:
    return make()
  except TypeError as e:
    if "success_timing" not in str(e):
      raise
    raise ImportError(
      "OGBench >= 1.2 is needed (reward and success on s, success_timing='pre'); install it with "
      "pip install 'ogbench>=1.2,<1.3'"
    ) from None


def evaluate(
  env_name: str,
  policy_fn,
  num_episodes: int = 10,
  seed: int = 0,
  task_id: int | None = None,
  env=None,
  max_episode_steps: int | None = None,
  return_episodes: bool = False,
) -> dict:
  """Runs `policy_fn(obs_1xD float32) -> actions (1xA or A)` in the real single-task env.

  Episodes end on success (OGBench's single-task default) or at the time limit; success is
  `info['success']` at the last step. Episode i resets with seed `seed + i` (numpy's global RNG,
  which some OGBench resets use, is seeded too and restored afterwards), so results are
  reproducible. Actions are clipped to [-1, 1]. Returns success (rate in [0, 1]), return,
  episode_len (means), plus num_episodes and steps_per_s.

  return_episodes: also ``episodes``, one dict per episode: ``observations`` (TxD float32, the
  observation the policy saw at each step), ``rewards`` (T float64, the reward of that step) and
  ``terminated`` (True when the env ended it, i.e. on success; False when the time limit or
  max_episode_steps cut it).
  """
  if not isinstance(num_episodes, (int, np.integer)) or num_episodes < 1:
    raise ConfigError("num_episodes", f"must be a positive integer, got {num_episodes!r}")
  env = env if env is not None else make_env(env_name, task_id)
  act_dim = int(np.prod(env.action_space.shape))
  successes, returns, lengths, episodes = [], [], [], []
  np_state = np.random.get_state()
  steps, t0 = 0, time.perf_counter()
  try:
    for i in range(num_episodes):
      np.random.seed(seed + i)
      ob, info = env.reset(seed=seed + i)
      done, ret, n, success = False, 0.0, 0, 0.0
      obs_seen, rewards = [], []
      while not done:
        ob32 = np.asarray(ob, np.float32)
        if return_episodes:
          obs_seen.append(ob32)
        action = np.asarray(policy_fn(ob32[None]), np.float32)
        if action.size != act_dim:
          raise ValueError(
            f"policy_fn returned shape {action.shape}; the env needs {act_dim} actions "
            "(as (1, A) or (A,))"
          )
        ob, reward, terminated, truncated, info = env.step(np.clip(action.reshape(act_dim), -1, 1))
        ret += float(reward)
        if return_episodes:
          rewards.append(float(reward))
        n += 1
        success = float(info.get("success", 0.0))
        done = terminated or truncated or (max_episode_steps is not None and n >= max_episode_steps)
      successes.append(success)
      returns.append(ret)
      lengths.append(n)
      steps += n
      if return_episodes:
        episodes.append(
          dict(
            observations=np.stack(obs_seen),
            rewards=np.asarray(rewards, np.float64),
            terminated=bool(terminated),
          )
        )
  finally:
    np.random.set_state(np_state)
  dt = time.perf_counter() - t0
  out = {
    "success": float(np.mean(successes)),
    "return": float(np.mean(returns)),
    "episode_len": float(np.mean(lengths)),
    "num_episodes": int(num_episodes),
    "steps_per_s": steps / max(dt, 1e-9),
  }
  if return_episodes:
    out["episodes"] = episodes
  return out
