"""Launchers print exactly the commands they would run; multi-host detection reads the right env."""

import pytest

from jaxlab.core import distributed
from launch import slurm, tpu


def _cmds(argv):
  return [" ".join(c) for c in tpu.commands(tpu.parse(argv))]


def test_tpu_create_and_delete():
  (create,) = _cmds(
    ["create", "--name=jl", "--zone=us-east5-a", "--accelerator=v5p-32", "--project=p1", "--spot"]
  )
  assert create == (
    "gcloud compute tpus tpu-vm create jl --zone=us-east5-a --project=p1 "
    "--accelerator-type=v5p-32 --version=v2-alpha-tpuv5 --spot"
  )
  (delete,) = _cmds(["delete", "--name=jl", "--zone=us-east5-a"])
  assert delete == "gcloud compute tpus tpu-vm delete jl --zone=us-east5-a --quiet"


def test_tpu_copy_ships_committed_tree_to_all_workers():
  archive, scp, setup = _cmds(["copy", "--name=jl", "--zone=z"])
  assert archive.startswith("git archive --format=tar.gz")
  assert scp.endswith("--worker=all") and "jl:/tmp/" in scp
  assert "--worker=all" in setup and "pip install -q -e '.[tpu]'" in setup


def test_tpu_run_same_command_on_all_workers():
  (run,) = tpu.commands(
    tpu.parse(
      [
        "run",
        "--name=jl",
        "--zone=z",
        "--",
        "python",
        "-m",
        "experiments.uhm",
        "--env=ogbench",
        "--mesh=data:-1",
      ]
    )
  )
  assert run[:6] == ["gcloud", "compute", "tpus", "tpu-vm", "ssh", "jl"]
  assert "--worker=all" in run
  command = [c for c in run if c.startswith("--command=")][0]
  assert "JAXLAB_TPU_POD=1 nohup python -m experiments.uhm --env=ogbench --mesh=data:-1" in command
  (logs,) = _cmds(["logs", "--name=jl", "--zone=z"])
  assert "--worker=0" in logs and "tail" in logs


def test_tpu_dry_run_prints_and_runs_nothing(capsys):
  assert tpu.main(["delete", "--name=jl", "--zone=z", "--dry_run"]) == 0
  assert capsys.readouterr().out.strip() == "gcloud compute tpus tpu-vm delete jl --zone=z --quiet"


def test_tpu_run_without_command_is_an_error():
  with pytest.raises(SystemExit, match="give the command"):
    tpu.commands(tpu.parse(["run", "--name=jl", "--zone=z"]))


def test_slurm_script(capsys):
  assert (
    slurm.main(
      [
        "--nodes=4",
        "--gpus_per_node=8",
        "--partition=gpu",
        "--dry_run",
        "--",
        "python",
        "-m",
        "experiments.lm",
        "--config=tiny",
      ]
    )
    == 0
  )
  out = capsys.readouterr().out
  for line in (
    "#SBATCH --nodes=4",
    "#SBATCH --ntasks-per-node=1",
    "#SBATCH --gpus-per-node=8",
    "#SBATCH --partition=gpu",
    "#SBATCH --requeue",
    "srun --kill-on-bad-exit=1 python -m experiments.lm --config=tiny",
  ):
    assert line in out
  assert out.strip().endswith("sbatch jaxlab.sbatch")


def test_slurm_rejects_bad_nodes():
  with pytest.raises(SystemExit):
    slurm.parse(["--nodes=0", "--", "python"])


def test_distributed_plan_single_host_is_noop():
  assert distributed.plan(env={}) is None
  assert distributed.initialize() is False


def test_distributed_plan_slurm():
  env = {
    "SLURM_JOB_ID": "7",
    "SLURM_NTASKS": "4",
    "SLURM_PROCID": "2",
    "SLURM_JOB_NODELIST": "gpu[003-006]",
  }
  assert distributed.plan(env=env) == dict(
    coordinator_address="gpu003:12355", num_processes=4, process_id=2
  )
  assert distributed.plan(env={**env, "SLURM_NTASKS": "1"}) is None


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
