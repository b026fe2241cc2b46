"""SLURM launcher for multi-node GPU runs: one process per node driving all its GPUs.

  python -m launch.slurm --nodes=2 --gpus_per_node=8 --partition=gpu --time=04:00:00 --dry_run -- \\
      python -m experiments.lm --config=tiny --mesh=data:2,fsdp:-1 --workdir=/shared/runs/lm

writes ``<job_name>.sbatch`` (printed with ``--dry_run``) and submits it with ``sbatch``. Inside the
job, ``srun`` starts one task per node; `jaxlab.core.distributed.initialize()` reads
SLURM_NTASKS / SLURM_PROCID / SLURM_JOB_NODELIST and calls ``jax.distributed.initialize``.
The workdir must be on a filesystem every node sees.
"""

from __future__ import annotations

import argparse
import pathlib
import shlex
import sys

from launch.common import execute, split_command

COORDINATOR_PORT = 12355


def render(args) -> str:
  """The sbatch script for ``args``."""
  user = " ".join(shlex.quote(c) for c in args.command)
  lines = [
    "#!/bin/bash",
    f"#SBATCH --job-name={args.job_name}",
    f"#SBATCH --nodes={args.nodes}",
    "#SBATCH --ntasks-per-node=1",
    f"#SBATCH --gpus-per-node={args.gpus_per_node}",
    f"#SBATCH --cpus-per-task={args.cpus_per_task}",
    f"#SBATCH --time={args.time}",
    f"#SBATCH --output={args.job_name}-%j.out",
  ]
  if args.partition:
    lines.append(f"#SBATCH --partition={args.partition}")
  if args.account:
    lines.append(f"#SBATCH --account={args.account}")
  lines += [
    "#SBATCH --requeue",  # preemption: SIGTERM -> jaxlab saves a checkpoint, the requeue resumes
    "#SBATCH --signal=TERM@120",
    "",
    "set -euo pipefail",
    'export JAXLAB_COORDINATOR_HOST=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
    f"export JAXLAB_COORDINATOR_PORT={COORDINATOR_PORT}",
    "export XLA_PYTHON_CLIENT_MEM_FRACTION=0.9",
  ]
  if args.setup:
    lines.append(args.setup)
  lines.append(f"srun --kill-on-bad-exit=1 {user}")
  return "\n".join(lines) + "\n"


def parse(argv: list[str]) -> argparse.Namespace:
  argv, command = split_command(argv)
  p = argparse.ArgumentParser(
    prog="python -m launch.slurm",
    description=__doc__,
    formatter_class=argparse.RawDescriptionHelpFormatter,
  )
  p.add_argument("--nodes", type=int, default=1)
  p.add_argument("--gpus_per_node", type=int, default=8)
  p.add_argument("--cpus_per_task", type=int, default=16)
  p.add_argument("--time", default="04:00:00")
  p.add_argument("--partition", default=None)
  p.add_argument("--account", default=None)
  p.add_argument("--job_name", default="jaxlab")
  p.add_argument(
    "--setup", default="", help="shell line run before srun (e.g. 'source venv/bin/activate')"
  )
  p.add_argument("--script_dir", default=".", help="where the .sbatch file is written")
  p.add_argument("--dry_run", action="store_true", help="print the script and sbatch command only")
  args = p.parse_args(argv)
  if not command:
    p.error("give the command after --, e.g. -- python -m experiments.lm --config=tiny")
  if args.nodes < 1 or args.gpus_per_node < 1:
    p.error("--nodes and --gpus_per_node must be >= 1")
  args.command = command
  return args


def main(argv=None) -> int:
  args = parse(sys.argv[1:] if argv is None else argv)
  script = render(args)
  path = pathlib.Path(args.script_dir) / f"{args.job_name}.sbatch"
  if args.dry_run:
    print(f"# {path}")
    print(script)
  else:
    path.write_text(script)
  return execute([["sbatch", str(path)]], args.dry_run)


if __name__ == "__main__":
  sys.exit(main())
