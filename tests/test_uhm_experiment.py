"""experiments.uhm end to end on a tiny generated OGBench set: finite losses, resume, bad input,
default workdirs per agent and task, data folders that must exist, mesh."""

import json
import subprocess
import sys

import jax
import numpy as np
import pytest
from programs import program_env, run_program

pytest.importorskip("ogbench")

SMALL = [
  "--config.actor_hidden_dims=(32,32)",
  "--config.value_hidden_dims=(32,32)",
  "--config.model_hidden_dims=(32,32)",
  "--config.reward_hidden_dims=(32,)",
  "--config.batch_size=32",
  "--config.flow_steps=2",
  "--config.k_max=4",
]
ENV = "pointmaze-medium-navigate-singletask-task1-v0"


def _run(args, cwd):
  return run_program(
    "experiments.uhm", args, cwd, env={"MUJOCO_GL": "egl"}, drop=("XLA_FLAGS",), timeout=600
  )


@pytest.mark.slow  # generates a set, trains twice (2 vmapped seeds), re-evaluates: minutes of CPU
def test_end_to_end_generated_data_and_resume(tmp_path):
  # --dataset_dir does not exist yet: --episodes asks for a generated set, so it may be created.
  common = [
    "--env=ogbench",
    f"--env_name={ENV}",
    "--episodes=3",
    "--data_seed=3",
    "--seed=5",
    "--seeds=2",
    f"--dataset_dir={tmp_path / 'data'}",
    f"--workdir={tmp_path / 'run'}",
    "--eval_episodes=1",
    "--log_every=20",
    *SMALL,
  ]
  r = _run(common + ["--steps=60"], tmp_path)
  assert r.returncode == 0, r.stderr[-3000:]
  assert "generating" in r.stdout and "success rate" in r.stdout
  assert "[uhm] the update: compiled" in r.stdout  # said once the update's program is built
  first = json.loads((tmp_path / "run" / "summary.json").read_text())
  record = json.loads((tmp_path / "run" / "config.json").read_text())
  assert first["step"] == 60 and record["data"] == "generated" and record["agent"]["agent"] == "uhm"
  losses = {k: v for k, v in first.items() if k.startswith("train/")}
  assert {"train/critic_loss", "train/flow_loss", "train/actor_loss"} <= set(losses)
  assert all(np.isfinite(v) for v in losses.values()), losses
  # The data seed picks the generated set; the training seeds are --seed, --seed + 1 (vmapped).
  assert (tmp_path / "data" / "jaxlab-generated" / "e3-s3").is_dir()
  assert first["data_seed"] == 3 and first["training_seeds"] == [5, 6]
  assert set(first["per_seed"]) == {"5", "6"} and first["seeds"] == [5, 6]
  per_seed = (first["per_seed"]["5"]["eval/success"] + first["per_seed"]["6"]["eval/success"]) / 2
  assert first["eval/success"] == pytest.approx(per_seed)
  assert first["ogbench"]["reward_and_success_on"] == "s"
  assert (tmp_path / "run" / "curves.png").exists()
  assert (tmp_path / "run" / "learning_curve.png").exists()
  r = _run(common + ["--steps=100"], tmp_path)  # same workdir: resumes, reuses the cached data set
  assert r.returncode == 0, r.stderr[-3000:]
  assert "resuming from checkpoint at step 60" in r.stdout + r.stderr
  assert "generating" not in r.stdout
  assert "[uhm] the update: read from the compilation cache" in r.stdout, r.stdout[-3000:]
  second = json.loads((tmp_path / "run" / "summary.json").read_text())
  assert second["step"] == 100 and second["resumed_from"] == 60
  assert np.isfinite(second["train/critic_loss"])
  # re-evaluating a kept checkpoint with more episodes
  env = program_env({"JAX_PLATFORMS": "cpu", "MUJOCO_GL": "egl"})
  env.pop("XLA_FLAGS", None)
  r = subprocess.run(
    [
      sys.executable,
      "-m",
      "experiments.uhm_eval",
      f"--workdir={tmp_path / 'run'}",
      "--step=60",
      "--eval_episodes=2",
    ],
    cwd=tmp_path,
    env=env,
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert r.returncode == 0, r.stderr[-3000:]
  ev = json.loads((tmp_path / "run" / "eval_step60_n2.json").read_text())
  assert ev["step"] == 60 and ev["num_episodes"] == 2 and len(ev["success_per_seed"]) == 2
  assert ev["success"] == pytest.approx(np.mean(ev["success_per_seed"]))


@pytest.mark.parametrize(
  "args, flag",
  [
    (["--agent=sac"], "--agent"),
    (["--env=dmc"], "--env"),
    (["--env_name=antmaze-large-navigate-singletask-v0"], "--"),
    (["--config.k_max=0"], "--config.k_max"),
    (["--config.flow_loss=ddpm"], "--config.flow_loss"),
    (["--eval_episodes=0"], "--eval_episodes"),
    (["--seeds=0"], "--seeds"),
    (["--seeds=1,1"], "--seeds"),
    (["--data_seed=-1"], "--data_seed"),
    # sizes that cannot fit: refused before any data is read
    (["--config.batch_size=100000000"], "--config.batch_size"),
    (["--config.value_hidden_dims=(1000000,)"], "--config.value_hidden_dims"),
    (["--seeds=4000"], "--seeds"),
  ],
)
def test_bad_input_exits_2(tmp_path, args, flag):
  (tmp_path / "data").mkdir()
  r = _run([f"--workdir={tmp_path / 'run'}", f"--dataset_dir={tmp_path / 'data'}", *args], tmp_path)
  _assert_exit_2(r, flag)
  assert not (tmp_path / "run").exists() and list((tmp_path / "data").iterdir()) == []


def _assert_exit_2(r, *needles):
  assert r.returncode == 2, r.stderr[-2000:]
  err = [l for l in r.stderr.splitlines() if l.startswith("error:")]
  assert len(err) == 1 and all(n in err[0] for n in needles), r.stderr[-2000:]
  return err[0]


def test_dataset_dir_must_exist_and_hold_the_set(tmp_path):
  """A mistyped --dataset_dir never creates a folder nor starts a long generation."""
  missing = tmp_path / "no" / "such"
  r = _run([f"--dataset_dir={missing}"], tmp_path)
  _assert_exit_2(r, "--dataset_dir", str(missing), "does not exist", "--generate_missing")
  assert not missing.exists() and not missing.parent.exists()
  assert sorted(p.name for p in tmp_path.iterdir()) == []  # no runs/, nothing in the cwd
  (tmp_path / "a_file").write_text("x")
  r = _run([f"--dataset_dir={tmp_path / 'a_file'}"], tmp_path)
  _assert_exit_2(r, "--dataset_dir", "is a file")
  (tmp_path / "empty").mkdir()
  r = _run([f"--dataset_dir={tmp_path / 'empty'}"], tmp_path)
  command = "python -m jaxlab.envs.ogbench_generate --env_name=cube-single-play-v0 --dataset_dir="
  _assert_exit_2(r, "--dataset_dir", command + str(tmp_path / "empty"))
  assert list((tmp_path / "empty").iterdir()) == [] and not (tmp_path / "runs").exists()


def test_default_workdirs_are_distinct_per_agent_and_task(tmp_path):
  """Without --workdir, runs of other agents or tasks never share (and break) a run directory."""
  quick = ["--steps=2", "--log_every=1", "--eval_episodes=1", "--eval_every=0", *SMALL]
  from jaxlab.core import experiment

  r = _run(["--agent=rebrac", "--env_name=cube-single-play-singletask-task2-v0", *quick], tmp_path)
  assert r.returncode == 0, r.stderr[-3000:]
  runs = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.glob("runs/uhm/*/*"))
  assert runs == ["runs/uhm/rebrac/cube-single-play-singletask-task2-v0"]
  other = experiment.default_workdir("uhm", "dtd", "cube-single-play-singletask-task1-v0")
  assert str(other) == "runs/uhm/dtd/cube-single-play-singletask-task1-v0"
  for run in runs:
    summary = json.loads((tmp_path / run / "summary.json").read_text())
    assert summary["step"] == 2 and "eval/success" in summary
    assert summary["ogbench"]["success_timing"] == "pre" and summary["data_seed"] == 0


def test_data_parallel_update_equals_single_device(tmp_path):
  from jaxlab.core import mesh as mesh_lib
  from jaxlab.core import runtime, sharding
  from jaxlab.rl import uhm
  from jaxlab.rl.uhm import offline_data

  rng = np.random.default_rng(0)
  n = 400
  d = dict(
    observations=rng.normal(size=(n, 4)),
    actions=rng.uniform(-1, 1, (n, 2)),
    rewards=-np.ones(n),
    masks=np.ones(n),
    terminals=(np.arange(n) % 100 == 99),
    next_observations=rng.normal(size=(n, 4)),
  )
  data = offline_data.make_offline_data(d)
  c = uhm.get_config()
  for k, v in dict(
    actor_hidden_dims=(16,),
    value_hidden_dims=(16,),
    model_hidden_dims=(16,),
    reward_hidden_dims=(16,),
    batch_size=32,
    flow_steps=2,
    k_max=3,
  ).items():
    c[k] = v
  cfg = uhm.validate_config(c)
  key = jax.random.key_data(jax.random.key(0))
  init = uhm.create(jax.random.key(1), 4, 2, cfg, obs_stats=offline_data.obs_stats(data))
  m = mesh_lib.make_mesh("data:8")
  out = {}
  for name, mesh in (("one", None), ("eight", m)):
    out[name], _ = runtime.train(
      init,
      uhm.update,
      runtime.Loop(num_steps=6, log_every=3, ckpt_every=0, progress=False, plot=False),
      workdir=tmp_path / name,
      key=key,
      data=data,
      sample_fn=sharding.data_parallel(uhm.make_sample_fn(cfg), mesh),
      mesh=mesh,
      state_sharding=None if mesh is None else sharding.replicated(m),
    )
  for net in ("ac", "flow", "reward"):
    jax.tree.map(
      lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-5),
      getattr(out["eight"], net).params,
      getattr(out["one"], net).params,
    )
  moved = jax.tree.map(
    lambda a, b: float(np.abs(a - b).max()), out["one"].flow.params, init.flow.params
  )
  assert max(jax.tree.leaves(moved)) > 0


def test_uhm_eval_never_creates_what_it_reads(tmp_path):
  """A run directory without checkpoints: exit 2 naming --workdir, no checkpoints/ created; a
  missing step names --step; the lock file of the run is the only file uhm_eval may add."""
  run = tmp_path / "run"
  run.mkdir()
  (run / "config.json").write_text(json.dumps({"agent": {}, "env_name": ENV, "num_seeds": 1}))
  r = run_program("experiments.uhm_eval", [f"--workdir={run}"], tmp_path)
  _assert_exit_2(r, "--workdir", "checkpoints")
  assert sorted(p.name for p in run.iterdir()) == ["config.json"]
  (run / "checkpoints" / "60").mkdir(parents=True)
  r = run_program("experiments.uhm_eval", [f"--workdir={run}", "--step=7"], tmp_path)
  _assert_exit_2(r, "--step", "[60]")
  r = run_program("experiments.uhm_eval", [f"--workdir={tmp_path / 'none'}"], tmp_path)
  _assert_exit_2(r, "--workdir")
  assert not (tmp_path / "none").exists() and "Traceback" not in r.stderr


@pytest.mark.parametrize(
  "args, flag",
  [
    (["--config.batch_size=1000000000"], "--config.batch_size"),
    (["--seeds=4000"], "--seeds"),
    (["--agents="], "--agents"),
    (["--agents=uhm,sac"], "--agents"),
    (["--seeds=-1"], "--seeds"),
    (["--workdir=x"], "--workdir"),
  ],
)
def test_benchmark_refuses_bad_sizes_before_timing(tmp_path, args, flag):
  r = run_program("benchmarks.uhm", args, tmp_path, drop=("XLA_FLAGS",))
  _assert_exit_2(r, flag)
  assert "Traceback" not in r.stderr and not r.stdout and list(tmp_path.iterdir()) == []
