"""TPU-pod launcher: create a TPU VM slice, copy this repo, run one command on every worker.

Every worker runs the same command (``--worker=all``); `jaxlab.core.distributed.initialize()`
then discovers the pod from the TPU metadata, and the mesh spans all hosts' chips.

  python -m launch.tpu create --name=jl --zone=us-east5-a --accelerator=v5p-32 --dry_run
  python -m launch.tpu copy   --name=jl --zone=us-east5-a
  python -m launch.tpu run    --name=jl --zone=us-east5-a -- \\
      python -m experiments.uhm --env=ogbench --mesh=data:-1 --workdir=/gcs/my-bucket/uhm
  python -m launch.tpu logs   --name=jl --zone=us-east5-a
  python -m launch.tpu delete --name=jl --zone=us-east5-a

``--dry_run`` prints the exact gcloud commands without running them. The workdir must be on storage
every host sees (a GCS FUSE mount such as /gcs/<bucket>, or NFS): checkpoints are written by all hosts.
"""

from __future__ import annotations

import argparse
import shlex
import sys

from launch.common import execute, split_command

ACTIONS = ("create", "copy", "run", "logs", "delete")
REMOTE_DIR = "~/jaxlab"
LOG_FILE = "~/jaxlab_run.log"


def _base(args) -> list[str]:
  extra = [f"--zone={args.zone}"]
  if args.project:
    extra.append(f"--project={args.project}")
  return extra


def _ssh(args, command: str, worker: str = "all") -> list[str]:
  return (
    ["gcloud", "compute", "tpus", "tpu-vm", "ssh", args.name]
    + _base(args)
    + [f"--worker={worker}", f"--command={command}"]
  )


def commands(args) -> list[list[str]]:
  """The gcloud commands for one action (what ``--dry_run`` prints)."""
  if args.action == "create":
    cmd = (
      ["gcloud", "compute", "tpus", "tpu-vm", "create", args.name]
      + _base(args)
      + [f"--accelerator-type={args.accelerator}", f"--version={args.version}"]
    )
    if args.spot:
      cmd.append("--spot")
    return [cmd]
  if args.action == "copy":
    # A tarball of the committed tree: identical code on every worker, no stray local files.
    tarball = "/tmp/jaxlab_src.tar.gz"
    return [
      ["git", "archive", "--format=tar.gz", "-o", tarball, "HEAD"],
      ["gcloud", "compute", "tpus", "tpu-vm", "scp", tarball, f"{args.name}:/tmp/"]
      + _base(args)
      + ["--worker=all"],
      _ssh(
        args,
        f"mkdir -p {REMOTE_DIR} && tar -xzf /tmp/jaxlab_src.tar.gz -C {REMOTE_DIR} && "
        f"cd {REMOTE_DIR} && pip install -q -e '.[tpu]'",
      ),
    ]
  if args.action == "run":
    if not args.command:
      raise SystemExit("error: run: give the command after --, e.g. -- python -m experiments.uhm")
    user = " ".join(shlex.quote(c) for c in args.command)
    env = "JAXLAB_TPU_POD=1"
    if args.foreground:
      return [_ssh(args, f"cd {REMOTE_DIR} && {env} {user}")]
    return [_ssh(args, f"cd {REMOTE_DIR} && {env} nohup {user} > {LOG_FILE} 2>&1 &")]
  if args.action == "logs":
    return [_ssh(args, f"tail -n 200 -f {LOG_FILE}", worker=str(args.log_worker))]
  if args.action == "delete":
    return [
      ["gcloud", "compute", "tpus", "tpu-vm", "delete", args.name] + _base(args) + ["--quiet"]
    ]
  raise ValueError(args.action)


def parse(argv: list[str]) -> argparse.Namespace:
  argv, command = split_command(argv)
  p = argparse.ArgumentParser(
    prog="python -m launch.tpu",
    description=__doc__,
    formatter_class=argparse.RawDescriptionHelpFormatter,
  )
  p.add_argument("action", choices=ACTIONS)
  p.add_argument("--name", required=True, help="TPU VM name")
  p.add_argument("--zone", required=True, help="GCP zone, e.g. us-east5-a")
  p.add_argument("--project", default=None, help="GCP project (default: gcloud's)")
  p.add_argument("--accelerator", default="v5p-8", help="accelerator type, e.g. v5p-32, v4-64")
  p.add_argument("--version", default="v2-alpha-tpuv5", help="TPU VM runtime version")
  p.add_argument("--spot", action="store_true", help="create a spot (preemptible) slice")
  p.add_argument("--foreground", action="store_true", help="run: stream output instead of nohup")
  p.add_argument("--log_worker", type=int, default=0, help="logs: which worker to tail")
  p.add_argument("--dry_run", action="store_true", help="print the commands, run nothing")
  args = p.parse_args(argv)
  args.command = command
  return args


def main(argv=None) -> int:
  args = parse(sys.argv[1:] if argv is None else argv)
  return execute(commands(args), args.dry_run)


if __name__ == "__main__":
  sys.exit(main())
