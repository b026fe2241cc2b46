"""OGBench data layer: offline generation in OGBench's raw format, loading through ogbench's own
loader, the embedded default set, data folders that must exist, clear errors (exit 2 from the
generator's command line), and evaluation in the real environment (no rendering)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from programs import program_env

pytest.importorskip("ogbench")

from jaxlab.envs import ogbench as og  # noqa: E402
from jaxlab.envs import ogbench_generate as gen  # noqa: E402

CUBE = "cube-single-play-v0"
POINT = "pointmaze-medium-navigate-v0"


@pytest.fixture(scope="module")
def cube_dir(tmp_path_factory):
  d = str(tmp_path_factory.mktemp("cube"))
  meta = gen.generate(
    CUBE,
    num_episodes=2,
    num_val_episodes=1,
    max_episode_steps=151,
    dataset_dir=d,
    seed=0,
    progress=False,
  )
  return d, meta


@pytest.fixture(scope="module")
def point_dir(tmp_path_factory):
  d = str(tmp_path_factory.mktemp("point"))
  meta = gen.generate(
    POINT, num_episodes=2, num_val_episodes=1, dataset_dir=d, seed=0, progress=False
  )
  return d, meta


def test_cube_generation_is_ogbench_raw_format(cube_dir):
  d, meta = cube_dir
  train = np.load(os.path.join(d, f"{CUBE}.npz"))
  val = np.load(os.path.join(d, f"{CUBE}-val.npz"))
  assert set(train.files) == {"observations", "actions", "terminals", "qpos", "qvel"}
  assert train["observations"].shape == (2 * 151, 28) and train["actions"].shape == (2 * 151, 5)
  assert val["observations"].shape == (151, 28)
  assert train["terminals"].dtype == bool and np.flatnonzero(train["terminals"]).tolist() == [
    150,
    301,
  ]
  assert np.abs(train["actions"]).max() <= 1.0
  # observation t and qpos t describe the same state (info['prev_qpos'] is recorded with the
  # pre-step obs): the arm joints and the cube position (scaled, centred) appear in both.
  obs, qpos = train["observations"], train["qpos"]
  np.testing.assert_allclose(obs[:, :6], qpos[:, :6], atol=1e-5)
  np.testing.assert_allclose(
    obs[:, 19:22] / 10.0 + np.array([0.425, 0.0, 0.0]), qpos[:, 14:17], atol=1e-5
  )
  # the scripted PlanOracle really manipulates the cube (a do-nothing policy leaves it in place)
  assert np.ptp(qpos[:, 14:17], axis=0).max() > 0.05
  assert meta["oracle_tasks_finished"] >= 1


def test_cube_loads_through_ogbench_loader(cube_dir):
  import ogbench

  d, _ = cube_dir
  name = "cube-single-play-singletask-task2-v0"
  env, train, val = ogbench.make_env_and_datasets(name, dataset_path=os.path.join(d, f"{CUBE}.npz"))
  assert train["observations"].shape == (
    300,
    28,
  )  # the last state of each trajectory has no next state
  ours = og.load(name, dataset_dir=d, embedded=False, generate_if_missing=False, verbose=False)
  assert ours.source == "generated" and ours.meta["num_episodes"] == 2
  for k in ("observations", "actions", "rewards", "masks", "terminals", "next_observations"):
    np.testing.assert_array_equal(ours.train[k], train[k])
  t = ours.train
  inside = t["terminals"][:-1] == 0
  np.testing.assert_array_equal(t["next_observations"][:-1][inside], t["observations"][1:][inside])
  assert set(np.unique(t["rewards"])) <= {-1.0, 0.0}
  np.testing.assert_array_equal(t["masks"], (t["rewards"] < 0).astype(np.float32))


def test_pointmaze_generation_and_load(point_dir):
  d, meta = point_dir
  assert meta["train_steps"] == 2 * 1001 and meta["val_steps"] == 1001
  assert meta["oracle_tasks_finished"] >= 2  # the BFS-subgoal expert reaches goals
  data = og.load(
    "pointmaze-medium-navigate-singletask-task1-v0",
    dataset_dir=d,
    embedded=False,
    generate_if_missing=False,
    verbose=False,
  )
  t = data.train
  assert t["observations"].shape == (2000, 2)
  inside = t["terminals"][:-1] == 0
  np.testing.assert_array_equal(t["next_observations"][:-1][inside], t["observations"][1:][inside])
  # pointmaze observations are the xy position; step length is bounded by the action scale
  assert np.linalg.norm(t["next_observations"] - t["observations"], axis=-1).max() < 1.0


def test_embedded_default_loads(tmp_path):
  emb = og.embedded_path(CUBE)
  assert emb is not None
  size = os.path.getsize(emb) + os.path.getsize(emb[:-4] + "-val.npz")
  assert size < 3e6
  data = og.load(
    og.DEFAULT_ENV_NAME, dataset_dir=str(tmp_path), generate_if_missing=False, verbose=False
  )
  assert data.source == "embedded"
  assert data.train["observations"].shape[1] == 28 and len(data.train["observations"]) >= 10_000
  assert data.train["rewards"].shape == data.train["masks"].shape == data.train["terminals"].shape
  assert (
    0 < (data.train["rewards"] == 0).sum() < len(data.train["rewards"])
  )  # the task-2 goal is visited
  assert list(tmp_path.iterdir()) == []  # nothing written to the data folder
  # Without the embedded set a missing standard set is an error that gives the generator command.
  with pytest.raises(og.DatasetError) as e:
    og.load(og.DEFAULT_ENV_NAME, dataset_dir=str(tmp_path), embedded=False)
  command = f"python -m jaxlab.envs.ogbench_generate --env_name={CUBE} --dataset_dir={tmp_path}"
  assert e.value.field == "dataset_dir" and command in e.value.message
  assert list(tmp_path.iterdir()) == []


def test_dataset_dir_must_be_an_existing_folder(tmp_path):
  missing = tmp_path / "typo"
  with pytest.raises(og.DatasetError) as e:
    og.load(og.DEFAULT_ENV_NAME, dataset_dir=str(missing))
  assert e.value.field == "dataset_dir" and str(missing) in e.value.message
  assert "does not exist" in e.value.message and not missing.exists()
  (tmp_path / "f.npz").write_bytes(b"")
  with pytest.raises(og.DatasetError, match="is a file"):
    og.load(og.DEFAULT_ENV_NAME, dataset_dir=str(tmp_path / "f.npz"))


def test_small_generation_is_cached_apart_and_reused(tmp_path, capsys):
  name = "pointmaze-medium-stitch-singletask-task1-v0"
  a = og.load(name, dataset_dir=str(tmp_path), num_episodes=3, seed=1)
  assert (
    a.source == "generated"
    and "generating pointmaze-medium-stitch-v0 locally" in capsys.readouterr().out
  )
  assert "jaxlab-generated" in a.path and not (tmp_path / "pointmaze-medium-stitch-v0.npz").exists()
  mtime = os.path.getmtime(a.path)
  b = og.load(name, dataset_dir=str(tmp_path), num_episodes=3, seed=1, verbose=False)
  assert b.path == a.path and os.path.getmtime(b.path) == mtime
  np.testing.assert_array_equal(a.train["observations"], b.train["observations"])


@pytest.mark.parametrize(
  "name",
  [
    "antmaze-large-navigate-v0",
    "humanoidmaze-medium-navigate-singletask-task1-v0",
    "antsoccer-arena-navigate-v0",
  ],
)
def test_expert_sets_say_which_file_to_place(name, tmp_path):
  with pytest.raises(gen.UnsupportedDatasetError) as e:
    gen.generate(name, dataset_dir=str(tmp_path))
  err, base = e.value.message, gen.base_dataset_name(name)
  assert e.value.field == "env_name"
  assert f"`{base}.npz`" in err and f"`{base}-val.npz`" in err and "~/.ogbench/data" in err
  assert "expert" in err and list(tmp_path.iterdir()) == []
  if "singletask" in name:
    with pytest.raises(og.DatasetError, match=f"{base}.npz"):
      og.load(name, dataset_dir=str(tmp_path))


def test_unknown_names_list_allowed():
  for bad, msg in [
    ("cube-single-foo-singletask-v0", "singletask.*generated offline"),
    ("walker-run-v0", "unknown OGBench env_name"),
    ("cube-single-play-singletask-task9-v0", "task_id must be in 1..5"),
  ]:
    with pytest.raises(og.DatasetError, match=msg):
      og.parse_name(bad)
  with pytest.raises(og.DatasetError, match="task_id"):
    og.parse_name(CUBE)  # goal-conditioned name without a task
  assert og.parse_name(CUBE, task_id=3).env_id == "cube-single-singletask-task3-v0"
  with pytest.raises(gen.UnsupportedDatasetError, match=r"puzzle-\{3x3,4x4,4x5,4x6\}-\{play"):
    gen.spec_for("cube-single-v1")


def test_bad_files_raise_clearly_and_are_never_overwritten(tmp_path, cube_dir):
  d, _ = cube_dir
  src = dict(np.load(os.path.join(d, f"{CUBE}.npz")))
  path = tmp_path / f"{CUBE}.npz"
  np.savez(path, **{k: v for k, v in src.items() if k != "actions"})
  np.savez(tmp_path / f"{CUBE}-val.npz", **src)
  before = path.read_bytes()
  with pytest.raises(og.DatasetError, match="missing key.*actions"):
    og.load("cube-single-play-singletask-task2-v0", dataset_dir=str(tmp_path), verbose=False)
  assert path.read_bytes() == before
  bad = dict(src, observations=src["observations"][:, :10])
  np.savez(path, **bad)
  with pytest.raises(og.DatasetError, match="'observations' rows have shape"):
    og.load("cube-single-play-singletask-task2-v0", dataset_dir=str(tmp_path), verbose=False)
  path.write_bytes(b"not a zip")
  with pytest.raises(og.DatasetError, match="not a readable .npz"):
    og.check_dataset_file(str(path))
  # the generator refuses to overwrite; the file stays as it was
  with pytest.raises(FileExistsError, match="not overwriting"):
    gen.generate(
      CUBE, num_episodes=1, dataset_dir=str(tmp_path), max_episode_steps=5, progress=False
    )
  assert path.read_bytes() == b"not a zip"


def test_non_finite_data_is_rejected(tmp_path, cube_dir):
  d, _ = cube_dir
  for suffix in ("", "-val"):
    src = dict(np.load(os.path.join(d, f"{CUBE}{suffix}.npz")))
    if not suffix:
      src["observations"][5, 3] = np.nan
    np.savez(tmp_path / f"{CUBE}{suffix}.npz", **src)
  with pytest.raises(og.DatasetError, match="'observations' holds 1 non-finite") as e:
    og.load("cube-single-play-singletask-task2-v0", dataset_dir=str(tmp_path), verbose=False)
  assert e.value.field == "dataset_dir"


def _generator(args, cwd):
  env = program_env({"JAX_PLATFORMS": "cpu"})
  env.pop("XLA_FLAGS", None)
  cmd = [sys.executable, "-m", "envs.ogbench_generate", *args]
  return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(
  "args, needle",
  [
    (["--env_name=antmaze-large-navigate-v0"], "--env_name: antmaze-large-navigate-v0: this data"),
    ([f"--env_name={CUBE}", "--noise=nan"], "--noise: must be >= 0 and finite, got nan"),
    ([f"--env_name={CUBE}", "--episodes=0"], "--episodes: must be >= 1"),
    ([f"--env_name={CUBE}", "--steps=5"], "--steps: is not used"),
    (["--episodes=2"], "--env_name: give the data set"),
    ([f"--env_name={CUBE}", "--episodes=1000000000"], "--episodes: needs about"),
    ([f"--env_name={CUBE}", "--max_episode_steps=1000000000"], "--max_episode_steps: needs about"),
    ([f"--env_name={CUBE}", "--seed=-1"], "--seed: must be in [0, 2**32 - 1]"),
  ],
)
def test_generator_command_line_exits_2(tmp_path, args, needle):
  r = _generator([*args, f"--dataset_dir={tmp_path / 'out'}"], tmp_path)
  err = [line for line in r.stderr.splitlines() if line.startswith("error:")]
  assert r.returncode == 2 and len(err) == 1 and needle in err[0], r.stderr[-2000:]
  assert list(tmp_path.iterdir()) == []  # no folder made, nothing written to the cwd


def test_generator_refuses_a_dataset_dir_it_cannot_write_before_generating(tmp_path):
  (tmp_path / "a_file").write_text("x")
  r = _generator([f"--env_name={CUBE}", f"--dataset_dir={tmp_path / 'a_file' / 'd'}"], tmp_path)
  err = [line for line in r.stderr.splitlines() if line.startswith("error:")]
  assert r.returncode == 2 and len(err) == 1, r.stderr[-2000:]
  assert err[0].startswith("error: --dataset_dir:") and "not a directory" in err[0]
  assert "generating" not in r.stderr + r.stdout


def test_evaluate_trivial_and_oracle_policies():
  # a do-nothing policy never solves the cube task: success 0, every episode runs to the step cap
  r = og.evaluate(
    "cube-single-play-singletask-task2-v0",
    lambda o: np.zeros((1, 5), np.float32),
    num_episodes=2,
    seed=0,
    max_episode_steps=25,
  )
  assert r["success"] == 0.0 and r["episode_len"] == 25 and r["return"] == -25
  # a BFS-subgoal policy solves pointmaze task 1: success 1, episodes end early at the goal
  env = og.make_env("pointmaze-medium-navigate-v0", task_id=1)

  def oracle(obs_1x2):
    xy = obs_1x2[0].astype(np.float64)
    sub, _ = env.unwrapped.get_oracle_subgoal(xy, env.unwrapped.cur_goal_xy)
    if env.unwrapped.xy_to_ij(xy) == env.unwrapped.xy_to_ij(env.unwrapped.cur_goal_xy):
      sub = env.unwrapped.cur_goal_xy
    d = sub - xy
    return (d / (np.linalg.norm(d) + 1e-6))[None]

  r = og.evaluate("pointmaze-medium-navigate-v0", oracle, num_episodes=2, seed=0, task_id=1)
  assert r["success"] == 1.0 and r["episode_len"] < 1000 and r["steps_per_s"] > 0
  r2 = og.evaluate("pointmaze-medium-navigate-v0", oracle, num_episodes=2, seed=0, task_id=1)
  assert r2["return"] == r["return"]  # seeded resets: reproducible
  with pytest.raises(ValueError, match="policy_fn returned shape"):
    og.evaluate("pointmaze-medium-navigate-v0", lambda o: np.zeros(3), num_episodes=1, task_id=1)


def test_success_timing_is_pinned_to_the_current_state():
  """OGBench >= 1.2 computes reward and success on s (success_timing 'pre'), 1.1 on s'. The envs
  made here pass 'pre' explicitly: an episode terminates on the step that STARTS at the goal."""
  import gymnasium

  env = og.make_env("pointmaze-medium-navigate-v0", task_id=1)
  assert env.unwrapped._success_timing == og.SUCCESS_TIMING == "pre"
  assert og.timing_record()["reward_and_success_on"] == "s"
  env_id = og.parse_name("pointmaze-medium-navigate-v0", task_id=1).env_id
  post = gymnasium.make(env_id, success_timing="post")
  at_goal = {}
  for name, e in (("pre", env), ("post", post)):
    ob, _ = e.reset(seed=3)
    goal, tol = e.unwrapped.cur_goal_xy, e.unwrapped._goal_tol
    for _ in range(1000):
      xy = ob.astype(np.float64)
      sub, _ = e.unwrapped.get_oracle_subgoal(xy, goal)
      if e.unwrapped.xy_to_ij(xy) == e.unwrapped.xy_to_ij(goal):
        sub = goal
      d = sub - xy
      ob, _, terminated, _, _ = e.step(d / (np.linalg.norm(d) + 1e-6))
      if terminated:
        near = lambda p: bool(np.linalg.norm(np.asarray(p)[:2] - goal) <= tol)
        at_goal[name] = (near(xy), near(ob))  # (s at the goal, s' at the goal)
        break
  assert at_goal["pre"][0] and at_goal["post"] == (False, True), at_goal


def test_concurrent_runs_generate_a_missing_set_once(tmp_path):
  """Two runs of a sweep asking for the same missing set: one generates, the other waits, loads."""
  code = (
    "from jaxlab.envs import ogbench as og; "
    "d = og.load('pointmaze-medium-stitch-singletask-task1-v0', "
    f"dataset_dir={str(tmp_path)!r}, num_episodes=2, verbose=True); "
    "print('N', len(d.train['rewards']))"
  )
  env = {**os.environ, "JAX_PLATFORMS": "cpu"}
  procs = [
    subprocess.Popen(
      [sys.executable, "-c", code],
      env=env,
      stdout=subprocess.PIPE,
      stderr=subprocess.PIPE,
      text=True,
    )
    for _ in range(2)
  ]
  outs = [p.communicate(timeout=300) for p in procs]
  assert all(p.returncode == 0 for p in procs), [o[1][-1500:] for o in outs]
  stdout = [o[0] for o in outs]
  assert sum("generating pointmaze-medium-stitch-v0 locally" in s for s in stdout) == 1
  sizes = {line for s in stdout for line in s.splitlines() if line.startswith("N ")}
  assert len(sizes) == 1  # both loaded the same set


def test_generator_command_line_writes_a_set(tmp_path):
  out = tmp_path / "out"
  args = [f"--env_name={POINT}", "--episodes=1", "--val_episodes=1", "--max_episode_steps=20"]
  r = _generator([*args, "--seed=3", f"--dataset_dir={out}"], tmp_path)
  assert r.returncode == 0, r.stderr[-2000:]
  assert "wrote" in r.stdout and (out / f"{POINT}.npz").exists()
  assert (out / f"{POINT}-val.npz").exists()
  meta = json.loads((out / f"{POINT}.npz.json").read_text())
  assert meta["seed"] == 3 and meta["train_steps"] == 20
