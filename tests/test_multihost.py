"""Multi-host for real: 2 processes on localhost (jax.distributed + gloo CPU collectives).

The way to check a launch configuration before spending pod hours: the same program, a mesh spanning
every process, checkpoints written once and restored by all, a dead peer stopping the job.
"""

import json
import os
import socket
import subprocess
import sys
import time

import pytest


def _port():
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def _env(devices):
  env = {**os.environ, "JAX_PLATFORMS": "cpu", "JAXLAB_HEARTBEAT_TIMEOUT": "5"}
  env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
  return env


def _args(workdir, steps, extra=()):
  return [
    sys.executable,
    "-m",
    "experiments.example",
    f"--workdir={workdir}",
    f"--steps={steps}",
    "--log_every=10",
    "--ckpt_every=20",
    "--mesh=data:-1",
    "--config.batch_size=64",
    *extra,
  ]


def _start(workdir, steps, port, extra=()):
  return [
    subprocess.Popen(
      _args(workdir, steps, extra)
      + [f"--coordinator_address=localhost:{port}", "--num_processes=2", f"--process_id={i}"],
      env=_env(2),
      stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT,
      text=True,
    )
    for i in range(2)
  ]


def _wait(procs, timeout=240):
  outs = []
  for p in procs:
    out, _ = p.communicate(timeout=timeout)
    outs.append((p.returncode, out))
  return outs


@pytest.fixture(scope="module")
def single(tmp_path_factory):
  wd = tmp_path_factory.mktemp("single") / "run"
  r = subprocess.run(_args(wd, 40), env=_env(4), capture_output=True, text=True, timeout=240)
  assert r.returncode == 0, r.stderr[-2000:]
  return json.loads((wd / "summary.json").read_text())


def test_two_processes_equal_one_and_resume(tmp_path, single):
  wd = tmp_path / "run"
  outs = _wait(_start(wd, 40, _port()))
  assert [rc for rc, _ in outs] == [0, 0], outs[0][1][-2000:] + outs[1][1][-2000:]
  assert "4 cpu device(s) (cpu), 2 process(es), mesh data:4" in outs[0][1]
  summary = json.loads((wd / "summary.json").read_text())
  assert summary["provenance"]["process_count"] == 2
  for k in ("train/loss", "eval/w_err"):
    assert summary[k] == pytest.approx(single[k], rel=1e-5), k
  steps = sorted(int(p.name) for p in (wd / "checkpoints").iterdir() if p.name.isdigit())
  assert steps == [20, 40]  # one checkpoint directory per step, written once
  outs = _wait(_start(wd, 60, _port()))  # every process restores, then continues
  assert [rc for rc, _ in outs] == [0, 0], outs[0][1][-2000:]
  assert "resuming from checkpoint at step 40" in outs[0][1]
  final = [line for _, out in outs for line in out.splitlines() if line.startswith("final loss")]
  assert len(final) == 2 and final[0] == final[1]


def test_a_dead_process_stops_the_job_and_a_restart_resumes(tmp_path):
  wd = tmp_path / "run"
  procs = _start(wd, 1_000_000, _port())
  deadline = time.time() + 180
  while not (wd / "checkpoints" / "20").exists():
    assert time.time() < deadline and all(p.poll() is None for p in procs)
    time.sleep(0.5)
  procs[1].kill()
  try:
    rc0 = procs[0].wait(timeout=90)  # the heartbeat (5 s here) notices the dead peer
  finally:
    for p in procs:
      p.kill()
      p.communicate()
  assert rc0 != 0
  # Process 0 may have gone on checkpointing until the heartbeat stopped it: resume past its last.
  last = max(int(p.name) for p in (wd / "checkpoints").iterdir() if p.name.isdigit())
  outs = _wait(_start(wd, last + 40, _port()))
  assert [rc for rc, _ in outs] == [0, 0], outs[0][1][-2000:]
  assert "resuming from checkpoint at step" in outs[0][1]


@pytest.mark.slow  # 2 min on 2 cores; runtime parity: test_two_processes_equal_one_and_resume
def test_uhm_two_processes_equal_one(tmp_path):
  """The main job on a mesh spanning both processes: same losses as one process with 4 devices."""
  args = ["--env=ogbench", "--steps=20", "--log_every=10", "--eval_episodes=1", "--mesh=data:-1"]
  port = _port()
  procs = [
    subprocess.Popen(
      [
        sys.executable,
        "-m",
        "experiments.uhm",
        *args,
        f"--workdir={tmp_path / 'two'}",
        f"--coordinator_address=localhost:{port}",
        "--num_processes=2",
        f"--process_id={i}",
      ],
      env=_env(2),
      stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT,
      text=True,
    )
    for i in range(2)
  ]
  outs = _wait(procs, timeout=600)
  assert [rc for rc, _ in outs] == [0, 0], outs[0][1][-2000:]
  one = subprocess.run(
    [sys.executable, "-m", "experiments.uhm", *args, f"--workdir={tmp_path / 'one'}"],
    env=_env(4),
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert one.returncode == 0, one.stderr[-2000:]
  two = json.loads((tmp_path / "two" / "summary.json").read_text())
  ref = json.loads((tmp_path / "one" / "summary.json").read_text())
  for k in ("train/critic_loss", "train/flow_loss", "train/actor_loss"):
    assert two[k] == pytest.approx(ref[k], rel=1e-4), k
