"""Launchers print exactly the commands they would run, validate what reaches a shell, and the
scripts they generate behave as documented (run here with stub srun/scontrol/sudo/python)."""

import os
import pathlib
import shlex
import shutil
import subprocess
import sys

import pytest

from jaxlab.core import distributed
from jaxlab.core.errors import ConfigError
from launch import slurm, tpu

ROOT = pathlib.Path(__file__).resolve().parents[1]
HOSTILE = "a b;$(touch pwned)'\""  # must reach the program as one literal argument


def _cmds(argv):
  return [" ".join(c) for c in tpu.commands(tpu.parse(argv))]


def _remote(argv) -> str:
  """The shell command ``launch.tpu`` sends to the workers."""
  (ssh,) = tpu.commands(tpu.parse(argv))
  return [c for c in ssh if c.startswith("--command=")][0][len("--command=") :]


# ---------------------------------------------------------------- TPU


@pytest.mark.parametrize(
  "accelerator, accel_type, runtime",
  [
    ("v4-64", "v4-64", "tpu-ubuntu2204-base"),
    ("v5litepod-16", "v5litepod-16", "v2-alpha-tpuv5-lite"),
    ("v5e-8", "v5litepod-8", "v2-alpha-tpuv5-lite"),
    ("v5p-32", "v5p-32", "v2-alpha-tpuv5"),
    ("v6e-8", "v6e-8", "v2-alpha-tpuv6e"),
  ],
)
def test_tpu_create_runtime_matches_accelerator(accelerator, accel_type, runtime):
  (create,) = _cmds(["create", "--name=jl", "--zone=us-east5-a", f"--accelerator={accelerator}"])
  assert create == (
    "gcloud compute tpus tpu-vm create jl --zone=us-east5-a "
    f"--accelerator-type={accel_type} --version={runtime}"
  )


def test_tpu_create_explicit_version_spot_project_and_delete():
  (create,) = _cmds(
    [
      "create",
      "--name=jl",
      "--zone=us-east5-a",
      "--accelerator=v4-8",
      "--version=my-rt",
      "--project=p1-abcd",
      "--spot",
    ]
  )
  assert create.endswith("--project=p1-abcd --accelerator-type=v4-8 --version=my-rt --spot")
  (delete,) = _cmds(["delete", "--name=jl", "--zone=us-east5-a"])
  assert delete == "gcloud compute tpus tpu-vm delete jl --zone=us-east5-a --quiet"


def test_tpu_copy_ships_committed_tree_and_makes_a_venv_on_all_workers():
  archive, scp, setup = _cmds(["copy", "--name=jl", "--zone=us-east5-a"])
  assert archive.startswith("git archive --format=tar.gz") and archive.endswith("HEAD")
  assert scp.endswith("--worker=all") and "jl:/tmp/" in scp
  assert "--worker=all" in setup and setup.endswith("bash launch/setup_worker.sh tpu")
  # the command (or --extras) chooses what is installed besides tpu
  *_, setup = _cmds(
    ["copy", "--name=jl", "--zone=us-east5-a", "--", "python", "-m", "experiments.uhm"]
  )
  assert setup.endswith("bash launch/setup_worker.sh tpu,ogbench")
  *_, setup = _cmds(["copy", "--name=jl", "--zone=us-east5-a", "--extras=quantum"])
  assert setup.endswith("bash launch/setup_worker.sh tpu,quantum")


@pytest.mark.parametrize(
  "program, extras",
  [
    (["python", "-m", "experiments.uhm"], "tpu,ogbench"),
    (["python", "-m", "experiments.uhm_eval"], "tpu,ogbench"),
    (["python", "-m", "experiments.study", "uhm/size"], "tpu,ogbench"),
    (["python", "experiments/uhm.py"], "tpu,ogbench"),
    (["python", "-m", "experiments.example"], "tpu"),
    (["python", "-m", "experiments.lm", "--config=experiments/configs/lm.py"], "tpu"),
  ],
)
def test_tpu_run_installs_the_extras_its_command_needs(program, extras):
  remote = _remote(["run", "--name=jl", "--zone=us-east5-a", "--", *program, "--mesh=data:-1"])
  assert remote.startswith(
    f"cd ~/jaxlab && bash launch/setup_worker.sh --if-missing {extras} && . .venv/bin/activate && "
  )
  assert f"JAXLAB_TPU_POD=1 nohup {' '.join(program)} --mesh=data:-1 > ~/jaxlab_run.log" in remote


def test_tpu_run_same_literal_command_on_all_workers():
  argv = [
    "run",
    "--name=jl",
    "--zone=us-east5-a",
    "--",
    "python",
    "-m",
    "experiments.uhm",
    "--mesh=data:-1",
    HOSTILE,
  ]
  (run,) = tpu.commands(tpu.parse(argv))
  assert run[:6] == ["gcloud", "compute", "tpus", "tpu-vm", "ssh", "jl"]
  assert "--worker=all" in run
  # the remote shell splits the command back into exactly the user's arguments
  words = shlex.split(_remote(argv))
  i = words.index("nohup")
  assert words[i + 1 : i + 6] == ["python", "-m", "experiments.uhm", "--mesh=data:-1", HOSTILE]
  fg = _remote(argv[:3] + ["--foreground"] + argv[3:])
  assert "nohup" not in fg and "JAXLAB_TPU_POD=1 python -m experiments.uhm" in fg
  (logs,) = _cmds(["logs", "--name=jl", "--zone=us-east5-a", "--log_worker=3"])
  assert "--worker=3" in logs and "tail" in logs


def test_tpu_dry_run_prints_and_runs_nothing(capsys):
  assert tpu.run(tpu.parse(["delete", "--name=jl", "--zone=us-east5-a", "--dry_run"])) == 0
  out = capsys.readouterr().out.strip()
  assert out == "gcloud compute tpus tpu-vm delete jl --zone=us-east5-a --quiet"


@pytest.mark.parametrize(
  "argv, field",
  [
    (["run", "--name=jl", "--zone=us-east5-a"], ""),  # no command after --
    (["boot", "--name=jl", "--zone=us-east5-a"], "action"),
    (["--name=jl", "--zone=us-east5-a"], "action"),
    (["create", "--zone=us-east5-a"], "name"),
    (["create", "--name=--jl", "--zone=us-east5-a"], "name"),
    (["create", "--name=JL", "--zone=us-east5-a"], "name"),
    (["create", "--name=jl", "--zone=us east"], "zone"),
    (["create", "--name=jl", "--zone=us-east5-a", "--accelerator=v9x-8"], "accelerator"),
    (["create", "--name=jl", "--zone=us-east5-a", "--accelerator=v5p"], "accelerator"),
    (["create", "--name=jl", "--zone=us-east5-a", "--version=a;b"], "version"),
    (["copy", "--name=jl", "--zone=us-east5-a", "--extras=gpu"], "extras"),
    (["logs", "--name=jl", "--zone=us-east5-a", "--log_worker=-1"], "log_worker"),
    (["delete", "--name=jl", "--zone=us-east5-a", "--", "python"], ""),
  ],
)
def test_tpu_bad_input_names_the_field(argv, field):
  with pytest.raises(ConfigError) as e:
    tpu.parse(argv)
  assert e.value.field == field


# ---------------------------------------------------------------- SLURM


def _slurm(tmp_path, *flags, command=("python", "-m", "experiments.lm", "--mesh=data:-1")):
  return slurm.parse([f"--script_dir={tmp_path}", *flags, "--", *command])


def test_slurm_script(tmp_path, capsys):
  opts = _slurm(
    tmp_path, "--nodes=4", "--partition=gpu", "--account=lab", "--job_name=lm-1", "--dry_run"
  )
  assert slurm.run(opts) == 0
  out = capsys.readouterr().out
  for line in (
    "#SBATCH --job-name=lm-1",
    "#SBATCH --nodes=4",
    "#SBATCH --ntasks-per-node=1",
    "#SBATCH --gpus-per-node=8",
    "#SBATCH --partition=gpu",
    "#SBATCH --account=lab",
    "#SBATCH --requeue",
    "#SBATCH --signal=TERM@120",
    f"#SBATCH --output={tmp_path}/lm-1-%j.out",
    "srun --kill-on-bad-exit=1 python -m experiments.lm --mesh=data:-1 || rc=$?",
  ):
    assert line in out.splitlines()
  assert out.strip().endswith(f"sbatch {tmp_path}/lm-1.sbatch")
  assert not list(tmp_path.iterdir())  # a dry run writes nothing


def test_slurm_writes_only_where_asked(tmp_path, monkeypatch):
  home, cwd, bin_ = tmp_path / "home", tmp_path / "cwd", tmp_path / "bin"
  for d in (home, cwd, bin_):
    d.mkdir()
  _stub(bin_, "sbatch", 'echo "$@" > "$HOME/sbatch_args"')
  monkeypatch.setenv("HOME", str(home))
  monkeypatch.setenv("PATH", f"{bin_}{os.pathsep}{os.environ['PATH']}")
  monkeypatch.chdir(cwd)
  opts = slurm.parse(["--", "python", "-m", "experiments.lm"])
  assert opts.script_dir == home / ".jaxlab" / "slurm"
  assert slurm.run(opts) == 0
  assert not list(cwd.iterdir())
  script = home / ".jaxlab" / "slurm" / "jaxlab.sbatch"
  assert script.read_text() == slurm.render(opts)
  assert (home / "sbatch_args").read_text().split() == [str(script)]


@pytest.mark.parametrize(
  "flag, field",
  [
    ("--partition=gpu\nrm -rf ~", "partition"),
    ("--partition=gpu;id", "partition"),
    ("--time=04:00:00\n#SBATCH --x", "time"),
    ("--time=4h", "time"),
    ("--account=a b", "account"),
    ("--job_name=../..", "job_name"),
    ("--job_name=a/b", "job_name"),
    ("--job_name=.hidden", "job_name"),
    ("--job_name=", "job_name"),
    ("--setup=source x\nrm -rf ~", "setup"),
    ("--script_dir=/tmp/with space", "script_dir"),
    ("--nodes=0", "nodes"),
    ("--gpus_per_node=0", "gpus_per_node"),
    ("--max_requeues=-1", "max_requeues"),
  ],
)
def test_slurm_rejects_what_could_escape_the_script(tmp_path, flag, field):
  with pytest.raises(ConfigError) as e:
    slurm.parse([f"--script_dir={tmp_path}", flag, "--", "python"])
  assert e.value.field == field


@pytest.mark.parametrize("time", ["04:00:00", "30", "1-00", "2-12:00:00", "UNLIMITED"])
def test_slurm_accepts_slurm_time_formats(tmp_path, time):
  assert _slurm(tmp_path, f"--time={time}").time == time


def _stub(bin_dir: pathlib.Path, name: str, body: str) -> None:
  path = bin_dir / name
  path.write_text(f"#!/bin/bash\n{body}\n")
  path.chmod(0o755)


@pytest.mark.parametrize(
  "step_rc, restarts, state, requeued",
  [
    (143, 0, "RUNNING", True),
    (143, 9, "RUNNING", True),
    (143, 10, "RUNNING", False),  # --max_requeues spent
    (143, 0, "CANCELLED", False),  # scancel: the job stays cancelled
    (0, 0, "RUNNING", False),
    (1, 0, "RUNNING", False),
  ],
)
def test_slurm_requeues_after_sigterm_exit(tmp_path, step_rc, restarts, state, requeued):
  """The script runs the step with srun and requeues exactly when it exited 143 (saved on
  SIGTERM), the job still runs and the requeue budget is not spent; the command reaches srun
  literally."""
  bin_, log = tmp_path / "bin", tmp_path / "log"
  bin_.mkdir()
  _stub(bin_, "srun", f'printf "%s\\n" "$@" > {log}/srun; exit {step_rc}')
  scontrol = f"""case "$1 $2" in
  "show hostnames") echo node01 ;;
  "show job") echo "JobId=$4 JobName=x JobState={state} Reason=None" ;;
  *) echo "$@" > {log}/scontrol ;;
esac"""
  _stub(bin_, "scontrol", scontrol)
  log.mkdir()
  command = ("python", "-m", "experiments.uhm", HOSTILE)
  opts = _slurm(tmp_path, "--max_requeues=10", command=command)
  env = {
    "PATH": f"{bin_}{os.pathsep}/usr/bin:/bin",
    "SLURM_JOB_ID": "4242",
    "SLURM_JOB_NODELIST": "node[01-02]",
    "SLURM_JOB_NUM_NODES": "2",
    "SLURM_RESTART_COUNT": str(restarts),
  }
  proc = subprocess.run(
    ["bash", "-c", slurm.render(opts)],
    env=env,
    cwd=tmp_path,
    capture_output=True,
    text=True,
    timeout=30,
  )
  assert proc.returncode == step_rc, proc.stderr
  srun_args = (log / "srun").read_text().splitlines()
  assert srun_args == ["--kill-on-bad-exit=1", *command]
  assert not (tmp_path / "pwned").exists()
  if requeued:
    assert (log / "scontrol").read_text().split() == ["requeue", "4242"]
  else:
    assert not (log / "scontrol").exists()
    if step_rc == 143:
      assert "not requeued" in proc.stderr


# ---------------------------------------------------------------- worker setup script


@pytest.fixture
def worker(tmp_path):
  """A fake worker: the repo layout with setup_worker.sh, and a PATH without any python."""
  repo, bin_ = tmp_path / "jaxlab", tmp_path / "bin"
  (repo / "launch").mkdir(parents=True)
  bin_.mkdir()
  shutil.copy(ROOT / "launch" / "setup_worker.sh", repo / "launch")
  for tool in ("dirname", "grep", "sort", "tr", "cat", "mv"):
    os.symlink(shutil.which(tool), bin_ / tool)
  _stub(bin_, "sudo", "exit 1")  # apt cannot install python3.11 here
  run = lambda *args: subprocess.run(
    [shutil.which("bash"), str(repo / "launch" / "setup_worker.sh"), *args],
    env={"PATH": str(bin_), "HOSTNAME": "w0"},
    capture_output=True,
    text=True,
    timeout=30,
  )
  return repo, bin_, run


def test_setup_worker_fails_clearly_without_python311(worker):
  repo, _, run = worker
  proc = run("tpu")
  assert proc.returncode == 2
  assert "needs Python 3.11 or 3.12" in proc.stderr
  assert not (repo / ".venv").exists()
  assert run("tpu;rm").returncode == 2


def test_setup_worker_installs_only_missing_extras(worker):
  repo, _, run = worker
  (repo / ".venv" / "bin").mkdir(parents=True)
  _stub(repo / ".venv" / "bin", "python", f'echo "$@" >> {repo}/pip_calls')
  (repo / ".venv" / "jaxlab-extras").write_text("tpu\n")
  assert run("--if-missing", "tpu").returncode == 0
  assert not (repo / "pip_calls").exists()  # everything there: no pip
  proc = run("--if-missing", "tpu,ogbench")
  assert proc.returncode == 0, proc.stderr
  assert (repo / "pip_calls").read_text().splitlines()[0] == "-m pip install -q -e .[tpu,ogbench]"
  assert (repo / ".venv" / "jaxlab-extras").read_text().split() == ["ogbench", "tpu"]


# ---------------------------------------------------------------- the programs (absl, exit 2)


def _program(*argv, env=None):
  return subprocess.run(
    [sys.executable, "-m", *argv],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=120,
    env={**os.environ, **(env or {})},
  )


def test_programs_pass_the_command_literally_and_reject_bad_flags_in_one_line(tmp_path):
  # inside a multi-task SLURM allocation: the launcher must not wait for jax.distributed peers
  slurm_env = {
    "SLURM_JOB_ID": "1",
    "SLURM_NTASKS": "2",
    "SLURM_PROCID": "0",
    "SLURM_JOB_NODELIST": "localhost",
  }
  ok = _program(
    "launch.slurm",
    f"--script_dir={tmp_path}",
    "--dry_run",
    "--",
    "python",
    "-m",
    "experiments.uhm",
    HOSTILE,
    env=slurm_env,
  )
  assert ok.returncode == 0, ok.stderr
  assert f"srun --kill-on-bad-exit=1 python -m experiments.uhm {shlex.quote(HOSTILE)}" in ok.stdout
  for argv, first_line in [
    (("launch.slurm", "--job_name=../..", "--", "python"), "error: --job_name: '../..' is not"),
    (
      ("launch.tpu", "run", "--name=jl", "--zone=us-east5-a", "--workdir=/x", "--", "python"),
      "error: --workdir: is a flag of the experiment",
    ),
    (("launch.tpu", "run", "--name=jl", "--zone=us-east5-a"), "error: --: give the command"),
  ]:
    bad = _program(*argv)
    assert bad.returncode == 2 and bad.stderr.startswith(first_line), bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
  assert not list(tmp_path.iterdir())


# ---------------------------------------------------------------- multi-host detection


def test_distributed_plan_single_host_is_noop():
  assert distributed.plan(env={}) is None
  assert distributed.initialize() is False


def test_distributed_plan_slurm():
  env = {
    "SLURM_JOB_ID": "7",
    "SLURM_NTASKS": "4",
    "SLURM_STEP_NUM_TASKS": "4",
    "SLURM_PROCID": "2",
    "SLURM_JOB_NODELIST": "gpu[003-006]",
  }
  assert distributed.plan(env=env) == dict(
    coordinator_address="gpu003:12355", num_processes=4, process_id=2
  )
  assert distributed.plan(env={**env, "SLURM_STEP_NUM_TASKS": "1"}) is None
  # a multi-task allocation's own shell (salloc -N2, the batch script) is not an srun step: no wait
  no_step = {k: v for k, v in env.items() if k != "SLURM_STEP_NUM_TASKS"}
  assert distributed.plan(env=no_step) is None


def test_distributed_plan_tpu_and_flags():
  assert distributed.plan(env={"TPU_WORKER_HOSTNAMES": "a,b,c,d"}) == {}
  assert distributed.plan("10.0.0.1:1234", 2, 1, env={}) == dict(
    coordinator_address="10.0.0.1:1234", num_processes=2, process_id=1
  )
  with pytest.raises(ValueError, match="together"):
    distributed.plan("10.0.0.1:1234", None, None, env={})
  with pytest.raises(ValueError, match="not in"):
    distributed.plan("h:1", 2, 5, env={})


@pytest.mark.parametrize(
  "nodelist, host",
  [
    ("gpu[001-004,007],cpu1", "gpu001"),
    ("n1,n2", "n1"),
    ("cpu1,gpu[01-02]", "cpu1"),
    ("", "localhost"),
  ],
)
def test_first_host(nodelist, host):
  assert distributed.first_host(nodelist) == host
