"""Generate OGBench offline data sets locally with OGBench's own environments and scripted oracles.

    python -m jaxlab.envs.ogbench_generate --env_name=cube-single-play-v0 \\
        --dataset_dir=~/.ogbench/data
    python -m jaxlab.envs.ogbench_generate --env_name=cube-single-play-v0 --episodes=60 \\
        --dataset_dir=/tmp

writes `<dataset_dir>/<name>.npz` and `<name>-val.npz` in OGBench's raw file format (`observations`,
`actions`, `terminals`, `qpos`, `qvel`, plus `button_states` for scene/puzzle), so
`ogbench.make_env_and_datasets(name, dataset_path=...)` loads them, and a `<name>.npz.json` note
saying how the file was made.

OGBench: Park et al., arXiv 2410.20092. This re-implements the logic of OGBench's
`data_gen_scripts/generate_{manipspace,locomaze}.py`, which the pip wheel does not ship (the oracles
it drives do ship): the episode layout, oracle choice and the default settings follow the upstream
commands for each data set. It is a reconstruction; the upstream files were made with other random
seeds, so a regenerated set is statistically, not bitwise, the same.

Supported offline (no pretrained weights needed): cube-{single,double,triple,quadruple}, scene and
puzzle-{3x3,4x4,4x5,4x6} with `play` (PlanOracle) or `noisy` (MarkovOracle + Gaussian noise + random
actions) data, and pointmaze-{medium,large,giant,teleport} with `navigate` or `stitch` data.
Ant/humanoid mazes and antsoccer need OGBench's pretrained SAC experts, visual-* sets need hours of
software rendering per 1M transitions, and powderworld has no oracle in the wheel: for those the
command exits 2 and says which file to place where. Flags are absl flags (`--seed` is jaxlab's
shared one); bad input exits 2 with one line. More in docs/ogbench.md.

Measured on this 2-core box: about 1.5-2.1 s per 1000 transitions for manipulation, 0.13 s for
pointmaze (a full 1M-transition manipulation set is a ~30 min one-off per core).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import tempfile
import time
from collections import defaultdict

import numpy as np

from jaxlab.core import resources, workdir
from jaxlab.core.errors import ConfigError, require

DEFAULT_DATASET_DIR = "~/.ogbench/data"  # OGBench's own default (ogbench.utils.DEFAULT_DATASET_DIR)
DATASET_URL = "https://rail.eecs.berkeley.edu/datasets/ogbench"

_MANIP_RE = re.compile(
  r"^(cube-(single|double|triple|quadruple)|scene|puzzle-(3x3|4x4|4x5|4x6))-(play|noisy)-v0$"
)
_POINT_RE = re.compile(r"^pointmaze-(medium|large|giant|teleport)-(navigate|stitch)-v0$")
_EXPERT_RE = re.compile(
  r"^(visual-)?(antmaze|humanoidmaze|antsoccer)-[a-z]+-(navigate|stitch|explore)-v0$"
)
_VISUAL_RE = re.compile(r"^visual-.*-v0$")
_POWDER_RE = re.compile(r"^powderworld-(easy|medium|hard)-play-v0$")

GENERATABLE = (
  "cube-{single,double,triple,quadruple}-{play,noisy}-v0",
  "scene-{play,noisy}-v0",
  "puzzle-{3x3,4x4,4x5,4x6}-{play,noisy}-v0",
  "pointmaze-{medium,large,giant,teleport}-{navigate,stitch}-v0",
)


class UnsupportedDatasetError(ConfigError):
  """Not an OGBench data set, or one that cannot be generated offline (the message: what to do)."""

  def __init__(self, message: str):
    super().__init__("env_name", message)


@dataclasses.dataclass(frozen=True)
class GenSpec:
  """How one OGBench data set is generated (defaults follow the upstream generation commands)."""

  dataset_name: str  # e.g. 'cube-single-play-v0'
  env_id: str  # gymnasium id of the goal-conditioned env, e.g. 'cube-single-v0'
  family: str  # 'manipspace' | 'pointmaze'
  dataset_type: str  # 'play' | 'noisy' | 'navigate' | 'stitch'
  num_episodes: int  # upstream train episodes (validation adds num_episodes // 10)
  max_episode_steps: (
    int  # steps per episode (+1 as upstream: 1001 gives 1000 transitions per episode)
  )
  noise: float  # plan noise (play), max Gaussian noise level (noisy) or action noise (pointmaze)
  p_random_action: float  # probability of a uniformly random action


def _placement_message(name: str, why: str) -> str:
  return (
    f"{name}: {why} Place OGBench's files `{name}.npz` and `{name}-val.npz` (from "
    f"{DATASET_URL}/{name}.npz and {DATASET_URL}/{name}-val.npz, fetched on a machine with network "
    "access) in OGBench's default folder "
    f"{DEFAULT_DATASET_DIR}/ or in a folder passed as --dataset_dir. Offline generation supports: "
    + ", ".join(GENERATABLE)
    + "."
  )


def base_dataset_name(name: str) -> str:
  """'cube-single-play-singletask-task2-v0' -> 'cube-single-play-v0' (data set names pass)."""
  parts = name.split("-")
  if "singletask" in parts:
    pos = parts.index("singletask")
    return "-".join(parts[:pos] + parts[-1:])
  return name


def spec_for(name: str) -> GenSpec:
  """The generation settings for a data set name (single-task names map to their data set).

  Raises UnsupportedDatasetError with a message that lists what is allowed, or what file to place.
  """
  dataset = base_dataset_name(name)
  m = _MANIP_RE.match(dataset)
  if m:
    env_prefix, dataset_type = m.group(1), m.group(4)
    size = (
      "triple" if "triple" in env_prefix else "quadruple" if "quadruple" in env_prefix else None
    )
    if env_prefix in ("puzzle-4x5",):
      size = "triple"
    if env_prefix in ("puzzle-4x6",):
      size = "quadruple"
    num_episodes = {None: 1000, "triple": 3000, "quadruple": 5000}[size]
    if dataset_type == "play":
      noise, p_rand = 0.1, 0.0
    else:
      noise, p_rand = 0.1, (0.2 if env_prefix.startswith("puzzle") else 0.1)
    return GenSpec(
      dataset, f"{env_prefix}-v0", "manipspace", dataset_type, num_episodes, 1001, noise, p_rand
    )
  m = _POINT_RE.match(dataset)
  if m:
    maze, dataset_type = m.group(1), m.group(2)
    if dataset_type == "navigate":
      num_episodes, steps = (500, 2001) if maze == "giant" else (1000, 1001)
    else:
      num_episodes, steps = 5000, 201
    return GenSpec(
      dataset, f"pointmaze-{maze}-v0", "pointmaze", dataset_type, num_episodes, steps, 0.5, 0.0
    )
  if _EXPERT_RE.match(dataset):
    raise UnsupportedDatasetError(
      _placement_message(
        dataset,
        "this data set is collected by OGBench's pretrained SAC expert policies (experts/ant, "
        "experts/humanoid, experts/antball), which are not available offline, so it cannot be "
        "generated here.",
      )
    )
  if _VISUAL_RE.match(dataset):
    raise UnsupportedDatasetError(
      _placement_message(
        dataset,
        "visual data sets need software (EGL) rendering at about 6 steps/s here (~43 h per 1M "
        "transitions), so the generator does not make them.",
      )
    )
  if _POWDER_RE.match(dataset):
    raise UnsupportedDatasetError(
      _placement_message(
        dataset, "powderworld's data-collection policy is not part of the ogbench wheel."
      )
    )
  raise UnsupportedDatasetError(
    f"unknown OGBench data set name {name!r}. Allowed for offline generation: "
    + ", ".join(GENERATABLE)
    + " (single-task names such as cube-single-play-singletask-task2-v0 map to their data set)."
  )


# ------------------------------------------------------------------------------------------ oracles


def _make_manip_oracles(env, spec: GenSpec):
  """Oracle per sub-task, as upstream: PlanOracle for 'play', MarkovOracle for 'noisy'."""
  from ogbench.manipspace.oracles.markov.button_markov import ButtonMarkovOracle
  from ogbench.manipspace.oracles.markov.cube_markov import CubeMarkovOracle
  from ogbench.manipspace.oracles.markov.drawer_markov import DrawerMarkovOracle
  from ogbench.manipspace.oracles.markov.window_markov import WindowMarkovOracle
  from ogbench.manipspace.oracles.plan.button_plan import ButtonPlanOracle
  from ogbench.manipspace.oracles.plan.cube_plan import CubePlanOracle
  from ogbench.manipspace.oracles.plan.drawer_plan import DrawerPlanOracle
  from ogbench.manipspace.oracles.plan.window_plan import WindowPlanOracle

  min_norm, smooth = 0.4, 0.5  # upstream --min_norm, --noise_smoothing defaults
  markov = spec.dataset_type == "noisy"
  plan = dict(env=env, noise=spec.noise, noise_smoothing=smooth)
  if spec.env_id.startswith("cube"):
    return {
      "cube": CubeMarkovOracle(env=env, min_norm=min_norm) if markov else CubePlanOracle(**plan)
    }
  if spec.env_id.startswith("scene"):
    if markov:
      return {
        "cube": CubeMarkovOracle(env=env, min_norm=min_norm, max_step=100),
        "button": ButtonMarkovOracle(env=env, min_norm=min_norm),
        "drawer": DrawerMarkovOracle(env=env, min_norm=min_norm),
        "window": WindowMarkovOracle(env=env, min_norm=min_norm),
      }
    return {
      "cube": CubePlanOracle(**plan),
      "button": ButtonPlanOracle(**plan),
      "drawer": DrawerPlanOracle(**plan),
      "window": WindowPlanOracle(**plan),
    }
  # puzzle: buttons are pressed with a closed gripper
  if markov:
    return {"button": ButtonMarkovOracle(env=env, min_norm=min_norm, gripper_always_closed=True)}
  return {"button": ButtonPlanOracle(gripper_always_closed=True, **plan)}


def _p_stack(env_id: str) -> float:
  if "single" in env_id:
    return 0.0
  if "double" in env_id:
    return np.random.uniform(0.0, 0.25)
  if "triple" in env_id:
    return np.random.uniform(0.05, 0.35)
  if "quadruple" in env_id:
    return np.random.uniform(0.1, 0.5)
  return 0.5


def _scene_healthy(ep_qpos) -> bool:
  """Upstream health check: the cube stays visible unless it is inside the drawer."""
  xyz = np.asarray(ep_qpos)[:, 14:17]
  if (xyz[:, 1] >= 0.29).any():
    return False
  return not ((xyz[:, 1] <= -0.3) & ((xyz[:, 2] < 0.06) | (xyz[:, 2] > 0.08))).any()


def _manip_episode(env, spec, agents, first_reset_seed):
  """One data-collection episode: (episode dict of lists, sub-tasks the oracle finished)."""
  has_buttons = hasattr(env.unwrapped, "_cur_button_states")
  while True:  # scene: retry unhealthy episodes, as upstream
    ob, info = env.reset(seed=first_reset_seed) if first_reset_seed is not None else env.reset()
    first_reset_seed = None
    p_stack = _p_stack(spec.env_id)
    xi = np.random.uniform(0, spec.noise) if spec.dataset_type == "noisy" else 0.0
    agent = agents[info["privileged/target_task"]]
    agent.reset(ob, info)
    ep = defaultdict(list)
    done, finished = False, 0
    while not done:
      if np.random.rand() < spec.p_random_action:
        action = env.action_space.sample()
      else:
        action = np.array(agent.select_action(ob, info))
        if spec.dataset_type == "noisy":
          action = action + np.random.normal(0, [xi, xi, xi, xi * 3, xi * 10], action.shape)
      action = np.clip(action, -1, 1)
      next_ob, _, terminated, truncated, info = env.step(action)
      done = terminated or truncated
      if agent.done:
        finished += 1
        agent_ob, agent_info = env.unwrapped.set_new_target(p_stack=p_stack)
        agent = agents[agent_info["privileged/target_task"]]
        agent.reset(agent_ob, agent_info)
      ep["observations"].append(ob)
      ep["actions"].append(action)
      ep["terminals"].append(done)
      ep["qpos"].append(info["prev_qpos"])
      ep["qvel"].append(info["prev_qvel"])
      if has_buttons:
        ep["button_states"].append(info["prev_button_states"])
      ob = next_ob
    if not spec.env_id.startswith("scene") or _scene_healthy(ep["qpos"]):
      return ep, finished


def _maze_cells(maze_map):
  """All free cells, and the 'vertex' cells (free, not mid-hallway) that goals come from."""
  all_cells, vertex_cells = [], []
  for i in range(maze_map.shape[0]):
    for j in range(maze_map.shape[1]):
      if maze_map[i, j] != 0:
        continue
      all_cells.append((i, j))
      vertical = (
        maze_map[i - 1, j] == 0
        and maze_map[i + 1, j] == 0
        and maze_map[i, j - 1] == 1
        and maze_map[i, j + 1] == 1
      )
      horizontal = (
        maze_map[i, j - 1] == 0
        and maze_map[i, j + 1] == 0
        and maze_map[i - 1, j] == 1
        and maze_map[i + 1, j] == 1
      )
      if not (vertical or horizontal):
        vertex_cells.append((i, j))
  return all_cells, vertex_cells


def _cells_at_distance(maze_map, start, steps=4):
  """Free cells exactly `steps` BFS moves from `start` (stitch goals)."""
  dist = -np.ones(maze_map.shape, dtype=int)
  dist[start] = 0
  queue, out = [start], []
  while queue:
    i, j = queue.pop(0)
    for di, dj in ((-1, 0), (0, -1), (1, 0), (0, 1)):
      ni, nj = i + di, j + dj
      if (
        0 <= ni < maze_map.shape[0]
        and 0 <= nj < maze_map.shape[1]
        and maze_map[ni, nj] == 0
        and dist[ni, nj] == -1
      ):
        dist[ni, nj] = dist[i, j] + 1
        queue.append((ni, nj))
        if dist[ni, nj] == steps:
          out.append((ni, nj))
  return out


def _point_episode(env, spec, cells, first_reset_seed):
  """One pointmaze episode: the 'expert' steps towards the BFS oracle subgoal, plus noise."""
  all_cells, vertex_cells = cells
  u = env.unwrapped
  init_ij = all_cells[np.random.randint(len(all_cells))]
  if spec.dataset_type == "navigate":
    goal_ij = vertex_cells[np.random.randint(len(vertex_cells))]
  else:
    near = _cells_at_distance(u.maze_map, init_ij)
    goal_ij = near[np.random.randint(len(near))] if near else init_ij
  opts = dict(task_info=dict(init_ij=init_ij, goal_ij=goal_ij))
  ob, _ = (
    env.reset(seed=first_reset_seed, options=opts)
    if first_reset_seed is not None
    else env.reset(options=opts)
  )
  ep = defaultdict(list)
  done, finished = False, 0
  while not done:
    xy = u.get_xy()
    subgoal_xy, _ = u.get_oracle_subgoal(xy, u.cur_goal_xy)
    direction = subgoal_xy - xy
    action = direction / (
      np.linalg.norm(direction) + 1e-6
    )  # the point "expert" is ob[-2:]: this direction
    action = np.clip(action + np.random.normal(0, spec.noise, action.shape), -1, 1)
    next_ob, _, terminated, truncated, info = env.step(action)
    done = terminated or truncated
    if info["success"] and spec.dataset_type == "navigate":
      finished += 1
      u.set_goal(vertex_cells[np.random.randint(len(vertex_cells))])
    ep["observations"].append(ob)
    ep["actions"].append(action)
    ep["terminals"].append(done)
    ep["qpos"].append(info["prev_qpos"])
    ep["qvel"].append(info["prev_qvel"])
    ob = next_ob
  return ep, finished


# ------------------------------------------------------------------------------------------ writing


def _as_arrays(episodes) -> dict:
  out = {}
  for k in episodes[0]:
    v = [x for ep in episodes for x in ep[k]]
    dtype = bool if k == "terminals" else np.int64 if k == "button_states" else np.float32
    out[k] = np.asarray(v, dtype=dtype)
  return out


def _write_npz_atomic(path: str, arrays: dict) -> None:
  """Writes a temporary file in the same folder, then renames: a crash never leaves half a file."""
  folder = os.path.dirname(path) or "."
  fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".", suffix=".tmp", dir=folder)
  try:
    with os.fdopen(fd, "wb") as f:
      np.savez_compressed(f, **arrays)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600 files; give the usual permissions
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.unlink(tmp)
    raise


def dataset_paths(dataset_name: str, dataset_dir: str) -> tuple[str, str]:
  d = os.path.expanduser(dataset_dir)
  return os.path.join(d, f"{dataset_name}.npz"), os.path.join(d, f"{dataset_name}-val.npz")


def _checked_spec(name: str, overrides: dict) -> GenSpec:
  """The data set's settings with the caller's overrides (None: upstream's), each one checked."""
  spec = spec_for(name)
  if spec.dataset_name != name:
    print(
      f"[ogbench_generate] {name} is a single-task name; generating its data set "
      f"{spec.dataset_name}"
    )
  spec = dataclasses.replace(spec, **{k: v for k, v in overrides.items() if v is not None})
  require(spec.num_episodes >= 1, "episodes", f"must be >= 1, got {spec.num_episodes}")
  require(
    spec.max_episode_steps >= 2, "max_episode_steps", f"must be >= 2, got {spec.max_episode_steps}"
  )
  require(
    0.0 <= spec.p_random_action <= 1.0,
    "p_random_action",
    f"must be in [0, 1], got {spec.p_random_action}",
  )
  require(
    math.isfinite(spec.noise) and spec.noise >= 0,
    "noise",
    f"must be >= 0 and finite, got {spec.noise}",
  )
  return spec


def _run_episodes(spec: GenSpec, total: int, seed: int, progress: bool):
  """``total`` episodes of the oracle in OGBench's data-collection env: (episodes, finished, s)."""
  import gymnasium
  import ogbench  # noqa: F401  (registers the environments)

  np_state = np.random.get_state()
  np.random.seed(seed)  # the oracles and samplers draw from numpy's global RNG, as upstream
  try:
    kwargs = dict(terminate_at_goal=False, max_episode_steps=spec.max_episode_steps)
    if spec.family == "manipspace":
      kwargs["mode"] = "data_collection"
    env = gymnasium.make(spec.env_id, **kwargs)
    env.action_space.seed(seed)
    if spec.family == "manipspace":
      agents = _make_manip_oracles(env, spec)
      run = lambda s: _manip_episode(env, spec, agents, s)  # noqa: E731
    else:
      cells = _maze_cells(env.unwrapped.maze_map)
      run = lambda s: _point_episode(env, spec, cells, s)  # noqa: E731
    episodes, finished = [], 0
    t0 = time.perf_counter()
    it = range(total)
    if progress:
      from tqdm import tqdm

      it = tqdm(it, desc=f"generating {spec.dataset_name}", unit="ep")
    for i in it:
      ep, f = run(seed if i == 0 else None)
      episodes.append(ep)
      finished += f
    seconds = time.perf_counter() - t0
    env.close()
  finally:
    np.random.set_state(np_state)
  return episodes, finished, seconds


def generate(
  name: str,
  num_episodes: int | None = None,
  dataset_dir: str = DEFAULT_DATASET_DIR,
  seed: int = 0,
  noise: float | None = None,
  p_random_action: float | None = None,
  max_episode_steps: int | None = None,
  num_val_episodes: int | None = None,
  progress: bool = True,
  drop_keys: tuple[str, ...] = (),
) -> dict:
  """Generate `<name>.npz` + `<name>-val.npz` in `dataset_dir`; returns a dict of statistics and the
  paths.

  `num_episodes` train episodes (default: upstream count) plus `num_val_episodes` (default
  num_episodes // 10, at least 1) of `max_episode_steps` steps each. Never overwrites: raises
  FileExistsError if either file exists. `drop_keys` removes optional keys (e.g. 'qvel', which
  OGBench's loader and relabelling do not need) to make small embedded files smaller. Bad
  arguments raise ConfigError naming the command-line flag.
  """
  overrides = dict(
    num_episodes=None if num_episodes is None else int(num_episodes),
    noise=None if noise is None else float(noise),
    p_random_action=None if p_random_action is None else float(p_random_action),
    max_episode_steps=None if max_episode_steps is None else int(max_episode_steps),
  )
  spec = _checked_spec(name, overrides)
  n_val = max(1, spec.num_episodes // 10) if num_val_episodes is None else int(num_val_episodes)
  require(n_val >= 1, "val_episodes", f"must be >= 1, got {n_val}")
  bad_drop = sorted(set(drop_keys) - {"qvel"})
  require(
    not bad_drop, "drop_keys", f"may only hold 'qvel' (the loader needs the rest): {bad_drop}"
  )
  require(0 <= int(seed) < 2**32, "seed", f"must be in [0, 2**32 - 1], got {seed}")
  # Episodes are kept in memory until written (lists, then arrays): about a KiB per step for the
  # largest observation spaces, twice.
  total = spec.num_episodes + n_val
  field = "episodes" if total > spec.max_episode_steps else "max_episode_steps"
  what = f"{total} episodes x {spec.max_episode_steps} steps held before writing"
  resources.check_fits(2 * 1024 * total * spec.max_episode_steps, field, what)
  train_path, val_path = dataset_paths(spec.dataset_name, dataset_dir)
  workdir.check_writable(os.path.dirname(train_path), "dataset_dir")
  for p in (train_path, val_path):
    if os.path.exists(p):
      raise FileExistsError(
        f"{p} already exists; not overwriting it. Remove it or choose another --dataset_dir."
      )
  os.makedirs(os.path.dirname(train_path), exist_ok=True)

  episodes, finished, seconds = _run_episodes(spec, spec.num_episodes + n_val, seed, progress)
  train, val = _as_arrays(episodes[: spec.num_episodes]), _as_arrays(episodes[spec.num_episodes :])
  for k in drop_keys:
    train.pop(k, None)
    val.pop(k, None)
  n_trans = len(train["terminals"]) + len(val["terminals"])
  meta = dict(
    generator="jaxlab.envs.ogbench_generate (reconstruction of OGBench data_gen_scripts)",
    dataset_name=spec.dataset_name,
    **{k: v for k, v in dataclasses.asdict(spec).items() if k not in ("dataset_name",)},
    num_val_episodes=n_val,
    seed=seed,
    train_steps=int(len(train["terminals"])),
    val_steps=int(len(val["terminals"])),
    oracle_tasks_finished=int(finished),
    seconds=round(seconds, 2),
    seconds_per_1000_steps=round(1000 * seconds / max(n_trans, 1), 3),
    dropped_keys=list(drop_keys),
  )
  # Val first, train last: the train file existing implies the pair is complete.
  _write_npz_atomic(val_path, val)
  _write_npz_atomic(train_path, train)
  with open(train_path + ".json.tmp", "w") as f:
    json.dump(meta, f, indent=1)
  os.replace(train_path + ".json.tmp", train_path + ".json")
  meta.update(train_path=train_path, val_path=val_path)
  return meta


# The program (``python -m jaxlab.envs.ogbench_generate``; ``python -m envs.ogbench_generate`` in a
# clone is the same). Its flags are defined only when it runs: `jaxlab.envs.ogbench` imports this
# module next to experiments that define flags of the same names.
UNUSED_FLAGS = ("workdir", "seeds", "steps", "log_every", "ckpt_every", "keep", "mesh", "profile")


def define_flags() -> None:
  """The generator's own absl flags."""
  from absl import flags

  flags.DEFINE_string(
    "env_name",
    None,
    "Data set name, e.g. cube-single-play-v0, pointmaze-medium-navigate-v0 (single-task names map "
    "to their data set).",
  )
  flags.DEFINE_integer(
    "episodes", None, "Train episodes (default: OGBench's count, e.g. 1000); validation adds 1/10."
  )
  flags.DEFINE_string("dataset_dir", DEFAULT_DATASET_DIR, "Output folder (created if missing).")
  flags.DEFINE_float(
    "noise",
    None,
    "play: plan noise (0.1); noisy: max Gaussian action noise (0.1); pointmaze: action noise "
    "(0.5).",
  )
  flags.DEFINE_float("p_random_action", None, "noisy: 0.1 (cube/scene), 0.2 (puzzle).")
  flags.DEFINE_integer("max_episode_steps", None, "Steps per episode (default 1001).")
  flags.DEFINE_integer("val_episodes", None, "Validation episodes (default episodes // 10).")
  flags.DEFINE_bool("drop_qvel", False, "Omit qvel (not needed by the loader) to save space.")


def main(argv) -> None:
  """Generates the data set the flags name and prints what was written."""
  from absl import flags

  del argv
  f = flags.FLAGS
  for name in UNUSED_FLAGS:
    require(not f[name].present, name, "is not used by the OGBench generator; remove it")
  require(bool(f.env_name), "env_name", "give the data set to generate, e.g. cube-single-play-v0")
  try:
    meta = generate(
      f.env_name,
      f.episodes,
      f.dataset_dir,
      seed=f.seed,
      noise=f.noise,
      p_random_action=f.p_random_action,
      max_episode_steps=f.max_episode_steps,
      num_val_episodes=f.val_episodes,
      drop_keys=("qvel",) if f.drop_qvel else (),
    )
  except FileExistsError as e:
    raise ConfigError("dataset_dir", str(e)) from None
  size = sum(os.path.getsize(meta[k]) for k in ("train_path", "val_path"))
  standard = spec_for(f.env_name).num_episodes
  if meta["num_episodes"] < standard:
    print(
      f"note: this set has {meta['num_episodes']} episodes, OGBench's has {standard}; it sits "
      "under the standard name, so OGBench's downloader would skip this file later (delete it to "
      "fetch the real one)."
    )
  print(
    f"wrote {meta['train_path']} ({meta['train_steps']} steps) and {meta['val_path']} "
    f"({meta['val_steps']} steps), {size / 1e6:.2f} MB, in {meta['seconds']:.1f} s "
    f"({meta['seconds_per_1000_steps']:.2f} s per 1000 steps); oracle finished "
    f"{meta['oracle_tasks_finished']} sub-tasks/goals"
  )


def cli() -> None:
  """Runs the program with jaxlab's shared flags (``--seed``) and exit-2 convention."""
  from jaxlab.core import experiment

  define_flags()
  experiment.run(main)


if __name__ == "__main__":
  cli()
