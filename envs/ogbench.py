"""OGBench single-task data sets and evaluation, offline.

Data (`load` / `load_dataset`): for a single-task name such as `cube-single-play-singletask-task2-v0` the raw
OGBench file `<data set>.npz` (+ `-val.npz`) is looked up, in this order,
  1. in `dataset_dir` if given, else in OGBench's default folder `~/.ogbench/data`;
  2. if absent and `embedded=True` (the default when the user asked for no particular data): the small set shipped
     in `envs/data/` (made by `envs.ogbench_generate`; only for the default task's data set cube-single-play-v0);
  3. if still absent and `generate_if_missing=True`: generated locally with OGBench's environments and scripted
     oracles (`envs.ogbench_generate`), cached at the place of step 1 (full size) or in
     `<folder>/jaxlab-generated/e<episodes>-s<seed>/` (other sizes, so a small set never shadows a real one),
     with a printed notice.
Nothing here downloads: there is no network, and ogbench's downloading path is never called (its loader is only
called with an explicit `dataset_path`). Rewards and masks come from ogbench's own single-task relabelling.

Evaluation (`evaluate`): runs the real OGBench single-task environment, no rendering, and reports the success
rate, the return and the episode length.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import time
import zipfile

import numpy as np

from envs import ogbench_generate as gen

DEFAULT_DATASET_DIR = gen.DEFAULT_DATASET_DIR
DEFAULT_ENV_NAME = "cube-single-play-singletask-task2-v0"
EMBEDDED_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")

_DATASET_TYPES = ("play", "noisy", "navigate", "stitch", "explore")
ALLOWED_HELP = (
  "single-task names look like <data set minus -v0>-singletask[-task{1..5}]-v0, e.g. "
  f"{DEFAULT_ENV_NAME}; generated offline when missing: "
  + ", ".join(gen.GENERATABLE)
  + "; need OGBench's file placed in --dataset_dir or ~/.ogbench/data: antmaze-{medium,large,giant,teleport}-"
  "{navigate,stitch,explore}-v0, humanoidmaze-{medium,large,giant}-{navigate,stitch}-v0, antsoccer-{arena,medium}-"
  "{navigate,stitch}-v0, visual-* variants"
)


class DatasetError(ValueError):
  """A data set file is missing, malformed, or cannot be made offline; the message says which and what to do."""


def _require_ogbench():
  try:
    import ogbench  # noqa: F401  (registers the environments)
  except ImportError as e:
    raise ImportError(
      f"OGBench is not installed ({e}); install it with: pip install -e '.[ogbench]'"
    ) from None
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
    raise DatasetError(f"unknown OGBench env_name {env_name!r}; {ALLOWED_HELP}")
  parts = env_name.split("-")
  if "singletask" in parts:
    pos = parts.index("singletask")
    m = re.fullmatch(r"task(\d)", parts[-2]) if len(parts) >= pos + 3 else None
    named_task = int(m.group(1)) if m else None
    if task_id is not None and named_task is not None and task_id != named_task:
      raise DatasetError(
        f"env_name {env_name!r} names task {named_task} but task_id={task_id} was given"
      )
    task_id = task_id if task_id is not None else named_task
    dataset_name = "-".join(parts[:pos] + parts[-1:])
    prefix = parts[:pos]
  else:
    dataset_name = env_name
    prefix = parts[:-1]
  if len(prefix) < 2 or prefix[-1] not in _DATASET_TYPES:
    raise DatasetError(f"unknown OGBench env_name {env_name!r}; {ALLOWED_HELP}")
  if "singletask" not in parts and task_id is None:
    raise DatasetError(
      f"{env_name!r} is a goal-conditioned data set name; pass task_id=1..5 or use a "
      f"single-task name; {ALLOWED_HELP}"
    )
  if task_id is not None and not 1 <= int(task_id) <= 5:
    raise DatasetError(f"task_id must be in 1..5, got {task_id}")
  base = "-".join(prefix[:-1])
  suffix = "" if task_id is None else f"-task{int(task_id)}"
  env_id = f"{base}-singletask{suffix}-v0"
  if env_id not in gymnasium.registry:
    raise DatasetError(
      f"unknown OGBench env_name {env_name!r} (no environment {env_id}); {ALLOWED_HELP}"
    )
  name = f"{'-'.join(prefix)}-singletask{suffix}-v0"
  return TaskName(name, dataset_name, env_id, None if task_id is None else int(task_id))


# ---------------------------------------------------------------------------------------------- file checks


def check_dataset_file(path: str, env=None, need_qpos: bool = True) -> dict:
  """Check a raw OGBench npz without loading it all into the training pipeline; returns {key: shape}.

  Raises DatasetError naming the file and the field when keys are missing or shapes disagree with each other
  or with `env`'s observation/action spaces.
  """
  try:
    with np.load(path, allow_pickle=False) as f:
      shapes = {k: f[k].shape for k in f.files}
      terminals = f["terminals"][...] if "terminals" in f.files else None
  except FileNotFoundError:
    raise DatasetError(f"{path}: file not found") from None
  except (zipfile.BadZipFile, ValueError, OSError, EOFError) as e:
    raise DatasetError(f"{path}: not a readable .npz file ({type(e).__name__}: {e})") from None
  required = ["observations", "actions", "terminals"] + (["qpos"] if need_qpos else [])
  missing = [k for k in required if k not in shapes]
  if missing:
    raise DatasetError(
      f"{path}: missing key(s) {missing}; an OGBench raw file has {required} "
      f"(+ qvel, button_states); found {sorted(shapes)}"
    )
  n = shapes["observations"][0] if shapes["observations"] else 0
  if n < 2:
    raise DatasetError(
      f"{path}: 'observations' has shape {shapes['observations']}, need at least 2 rows"
    )
  for k, s in shapes.items():
    if not s or s[0] != n:
      raise DatasetError(f"{path}: '{k}' has shape {s} but 'observations' has {n} rows")
  if len(shapes["terminals"]) != 1:
    raise DatasetError(f"{path}: 'terminals' must be 1-D, got shape {shapes['terminals']}")
  if not bool(terminals[-1]):
    raise DatasetError(
      f"{path}: 'terminals' must be True at the last step of each trajectory (the last row is "
      "False; the file looks truncated)"
    )
  if env is not None:
    ob, ac = env.observation_space.shape, env.action_space.shape
    if tuple(shapes["observations"][1:]) != tuple(ob):
      raise DatasetError(
        f"{path}: 'observations' rows have shape {shapes['observations'][1:]}, the environment "
        f"expects {tuple(ob)} (wrong data set for this env?)"
      )
    if tuple(shapes["actions"][1:]) != tuple(ac):
      raise DatasetError(
        f"{path}: 'actions' rows have shape {shapes['actions'][1:]}, the environment expects "
        f"{tuple(ac)}"
      )
    if need_qpos:
      nq = env.unwrapped.model.nq
      if shapes["qpos"][1:] != (nq,):
        raise DatasetError(
          f"{path}: 'qpos' rows have shape {shapes['qpos'][1:]}, the environment has nq={nq}"
        )
    if hasattr(env.unwrapped, "_num_buttons") and "button_states" not in shapes:
      raise DatasetError(
        f"{path}: missing 'button_states', needed to relabel rewards for this environment"
      )
  return shapes


# ---------------------------------------------------------------------------------------------- loading


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
  print(f"[envs.ogbench] {msg}", flush=True)


@contextlib.contextmanager
def _generation_lock(folder: str, dataset_name: str):
  """An exclusive lock file next to the data set (POSIX advisory lock; a no-op where unsupported)."""
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


def load(
  env_name: str = DEFAULT_ENV_NAME,
  dataset_dir: str | None = None,
  generate_if_missing: bool = True,
  embedded: bool = True,
  num_episodes: int | None = None,
  seed: int = 0,
  task_id: int | None = None,
  compact_dataset: bool = False,
  verbose: bool = True,
) -> OGBenchData:
  """Find (or make) the raw data set for a single-task name and load it through ogbench's own loader.

  `num_episodes=None` asks for the standard set (a file found in `dataset_dir`/~/.ogbench/data, else the embedded
  small set if `embedded`, else a full-size local generation); an integer asks for a locally generated set of
  that many episodes (cached under `<folder>/jaxlab-generated/`). Raises DatasetError when the file is
  malformed or cannot be made offline.
  """
  ogbench = _require_ogbench()
  tn = parse_name(env_name, task_id)
  root = os.path.expanduser(dataset_dir or DEFAULT_DATASET_DIR)
  log = _log if verbose else (lambda *_: None)
  spec = None
  try:
    spec = gen.spec_for(tn.dataset_name)
  except gen.UnsupportedDatasetError:
    pass
  if num_episodes is not None and (spec is None or num_episodes != spec.num_episodes):
    folder = _generated_dir(root, int(num_episodes), seed)
  else:
    folder = root
  train_path, val_path = gen.dataset_paths(tn.dataset_name, folder)

  source = "file"
  if not os.path.exists(train_path):
    emb = embedded_path(tn.dataset_name) if (embedded and num_episodes is None) else None
    if emb is not None:
      train_path, val_path, source = emb, emb[:-4] + "-val.npz", "embedded"
      log(
        f"{tn.dataset_name}.npz not found in {folder}; using the small embedded set {emb} "
        f"(made by envs.ogbench_generate). For the full set run: python -m envs.ogbench_generate "
        f"--env_name={tn.dataset_name} --dataset_dir={root}"
      )
    elif not generate_if_missing:
      raise DatasetError(
        f"{train_path} not found and generate_if_missing=False. Make it with: python -m "
        f"envs.ogbench_generate --env_name={tn.dataset_name} --dataset_dir={folder}"
        + (f" --episodes={num_episodes}" if num_episodes else "")
      )
    else:
      if spec is None:  # expert-needing / visual / unknown: say what file to place
        try:
          gen.spec_for(tn.dataset_name)
        except gen.UnsupportedDatasetError as e:
          raise DatasetError(str(e)) from None
      episodes = spec.num_episodes if num_episodes is None else int(num_episodes)
      steps = episodes * spec.max_episode_steps * 1.1
      per_k = 0.15 if spec.family == "pointmaze" else 1.9
      # Several runs of a sweep may ask for the same missing set at once: one generates, the
      # others wait on the lock and then load what it wrote.
      with _generation_lock(folder, tn.dataset_name):
        if not os.path.exists(train_path):
          if os.path.exists(val_path):
            raise DatasetError(
              f"{val_path} exists without its train file {train_path}; not "
              "overwriting it. Remove it (or place the matching train file) and retry."
            )
          log(
            f"{train_path} not found (no network here, nothing is downloaded); generating {tn.dataset_name} "
            f"locally with OGBench's scripted oracles: {episodes} episodes (+{max(1, episodes // 10)} val), "
            f"~{steps / 1e3:.0f}k steps, ~{steps / 1e3 * per_k / 60:.1f} min; cached in {folder}"
          )
          gen.generate(
            tn.dataset_name, num_episodes=episodes, dataset_dir=folder, seed=seed, progress=verbose
          )
        else:
          log(f"{train_path} was generated by another run meanwhile; loading it")
      source = "generated"
  elif not os.path.exists(val_path):
    raise DatasetError(
      f"{train_path} exists but its validation file {val_path} does not; OGBench's loader needs "
      "both (place the -val.npz next to it)"
    )

  env = ogbench.make_env_and_datasets(tn.name, env_only=True)
  for p in (train_path, val_path):
    check_dataset_file(p, env)
  # dataset_path given: ogbench never takes its downloading branch.
  train, val = ogbench.make_env_and_datasets(
    tn.name,
    dataset_path=train_path,
    compact_dataset=compact_dataset,
    dataset_only=True,
    cur_env=env,
  )
  meta = None
  if os.path.exists(train_path + ".json"):
    with open(train_path + ".json") as f:
      meta = json.load(f)
  if source == "file" and meta is not None:
    source = "generated"
    log(
      f"using a locally generated {tn.dataset_name} ({meta.get('num_episodes')} episodes, seed "
      f"{meta.get('seed')}) from {train_path}"
    )
  log(
    f"{tn.name}: {len(train['observations'])} train / {len(val['observations'])} val transitions ({source})"
  )
  return OGBenchData(env=env, train=train, val=val, source=source, path=train_path, meta=meta)


def load_dataset(
  env_name: str = DEFAULT_ENV_NAME,
  dataset_dir: str | None = None,
  generate_if_missing: bool = True,
  **kwargs,
):
  """`(env, train)`: the single-task env and a dict of numpy arrays `observations, actions, rewards, masks,
  terminals, next_observations` (see `load` for where the data come from; kwargs go to `load`)."""
  d = load(env_name, dataset_dir=dataset_dir, generate_if_missing=generate_if_missing, **kwargs)
  return d.env, d.train


# ---------------------------------------------------------------------------------------------- evaluation

_EVAL_ENVS: dict = {}


def make_env(env_name: str = DEFAULT_ENV_NAME, task_id: int | None = None):
  """The single-task OGBench env for a name (cached; building a manipulation env compiles MuJoCo, ~1 s)."""
  import gymnasium

  tn = parse_name(env_name, task_id)
  if tn.env_id not in _EVAL_ENVS:
    _EVAL_ENVS[tn.env_id] = gymnasium.make(tn.env_id)
  return _EVAL_ENVS[tn.env_id]


def evaluate(
  env_name: str,
  policy_fn,
  num_episodes: int = 10,
  seed: int = 0,
  task_id: int | None = None,
  env=None,
  max_episode_steps: int | None = None,
) -> dict:
  """Run `policy_fn(obs_1xD float32) -> actions (1xA or A)` in the real single-task env; no rendering.

  Episodes end on success (OGBench's single-task default) or at the time limit; success is `info['success']`
  at the last step. Episode i resets with seed `seed + i` (numpy's global RNG, which some OGBench resets use,
  is seeded too and restored afterwards), so results are reproducible. Actions are clipped to [-1, 1].
  Returns success (rate in [0, 1]), return, episode_len (means), plus num_episodes and steps_per_s.
  """
  if not isinstance(num_episodes, (int, np.integer)) or num_episodes < 1:
    raise ValueError(f"num_episodes must be a positive integer, got {num_episodes!r}")
  env = env if env is not None else make_env(env_name, task_id)
  act_dim = int(np.prod(env.action_space.shape))
  successes, returns, lengths = [], [], []
  np_state = np.random.get_state()
  steps, t0 = 0, time.perf_counter()
  try:
    for i in range(num_episodes):
      np.random.seed(seed + i)
      ob, info = env.reset(seed=seed + i)
      done, ret, n, success = False, 0.0, 0, 0.0
      while not done:
        action = np.asarray(policy_fn(np.asarray(ob, np.float32)[None]), np.float32)
        if action.size != act_dim:
          raise ValueError(
            f"policy_fn returned shape {action.shape}; the env needs {act_dim} actions "
            "(as (1, A) or (A,))"
          )
        ob, reward, terminated, truncated, info = env.step(np.clip(action.reshape(act_dim), -1, 1))
        ret += float(reward)
        n += 1
        success = float(info.get("success", 0.0))
        done = terminated or truncated or (max_episode_steps is not None and n >= max_episode_steps)
      successes.append(success)
      returns.append(ret)
      lengths.append(n)
      steps += n
  finally:
    np.random.set_state(np_state)
  dt = time.perf_counter() - t0
  return {
    "success": float(np.mean(successes)),
    "return": float(np.mean(returns)),
    "episode_len": float(np.mean(lengths)),
    "num_episodes": int(num_episodes),
    "steps_per_s": steps / max(dt, 1e-9),
  }
