"""SLURM launcher for multi-node GPU runs: one process per node driving all its GPUs.

  python -m launch.slurm --nodes=2 --gpus_per_node=8 --partition=gpu --dry_run -- \\
      python -m experiments.lm --config=experiments/configs/lm.py:small --mesh=data:2,fsdp:-1 \\
      --workdir=/shared/runs/lm

writes ``<script_dir>/<job_name>.sbatch`` (default ``~/.jaxlab/slurm``; ``--dry_run`` prints it and
writes nothing) and submits it with ``sbatch``. Everything after ``--`` is the command, passed
literally. Inside the job, ``srun`` starts one task per node and
``jaxlab.core.distributed.initialize()`` reads SLURM_STEP_NUM_TASKS / SLURM_PROCID /
SLURM_JOB_NODELIST (inside the srun step only).

Preemption and time limits: SLURM sends SIGTERM 120 s ahead (``--signal=TERM@120``), jaxlab saves a
checkpoint and exits 143, and the script then requeues the job (``scontrol requeue``, at most
``--max_requeues`` times); the requeued job resumes from the checkpoint. The workdir and
``--script_dir`` (which also receives the job's output) must be on a filesystem every node sees.
See docs/launch.md.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib

from absl import flags

from jaxlab.core.errors import require
from launch import common
from launch.common import check_text

SIGTERM_EXIT = 143  # 128 + SIGTERM: what a jaxlab run exits with after saving on SIGTERM
DEFAULT_SCRIPT_DIR = "~/.jaxlab/slurm"

_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}"
_TIME = r"([0-9]+-)?[0-9]+(:[0-9]+){0,2}|UNLIMITED|unlimited|INFINITE|infinite"
_PARTITION = r"[A-Za-z0-9_.-]+(,[A-Za-z0-9_.-]+)*"
_PATH = r"[A-Za-z0-9_./+@,:=-]+"  # no spaces, quotes or '%' (SLURM's output pattern character)


def define_flags(fv: flags.FlagValues) -> None:
  kw = dict(flag_values=fv)
  flags.DEFINE_integer("nodes", 1, "Nodes (one task each).", **kw)
  flags.DEFINE_integer("gpus_per_node", 8, "GPUs per node.", **kw)
  flags.DEFINE_integer("cpus_per_task", 16, "CPUs per task (= per node).", **kw)
  flags.DEFINE_string("time", "04:00:00", "Time limit per run of the job: [D-]HH:MM:SS.", **kw)
  flags.DEFINE_string("partition", None, "SLURM partition(s), comma-separated.", **kw)
  flags.DEFINE_string("account", None, "SLURM account.", **kw)
  flags.DEFINE_string("job_name", "jaxlab", "Job name; also the script's file name.", **kw)
  flags.DEFINE_string(
    "setup", "", "One shell line run before srun, e.g. 'source ~/jaxlab/.venv/bin/activate'.", **kw
  )
  flags.DEFINE_string(
    "script_dir", DEFAULT_SCRIPT_DIR, "Where the .sbatch file and the job's output go.", **kw
  )
  flags.DEFINE_integer("max_requeues", 10, "Requeues after SIGTERM (exit 143) at most.", **kw)
  flags.DEFINE_bool("dry_run", False, "Print the script and the sbatch command only.", **kw)


@dataclasses.dataclass(frozen=True)
class Options:
  """The validated job request. ``script_dir`` is absolute."""

  command: tuple[str, ...]
  nodes: int = 1
  gpus_per_node: int = 8
  cpus_per_task: int = 16
  time: str = "04:00:00"
  partition: str | None = None
  account: str | None = None
  job_name: str = "jaxlab"
  setup: str = ""
  script_dir: pathlib.Path = pathlib.Path(DEFAULT_SCRIPT_DIR)
  max_requeues: int = 10
  dry_run: bool = False

  @property
  def script_path(self) -> pathlib.Path:
    return self.script_dir / f"{self.job_name}.sbatch"


def validate(opts: Options) -> Options:
  common.require_command(opts.command, "python -m experiments.lm --mesh=data:-1")
  for field in ("nodes", "gpus_per_node", "cpus_per_task"):
    value = getattr(opts, field)
    require(value >= 1, field, f"must be >= 1, got {value}")
  require(opts.max_requeues >= 0, "max_requeues", f"must be >= 0, got {opts.max_requeues}")
  check_text("time", opts.time, _TIME, "use [D-]HH:MM:SS, MM or D-HH, e.g. 04:00:00")
  check_text("partition", opts.partition, _PARTITION, "letters, digits, '_.-', comma-separated")
  check_text("account", opts.account, _NAME, "letters, digits and '_.-'")
  check_text(
    "job_name",
    opts.job_name,
    _NAME,
    "letters, digits and '_.-' (it names a file), starting with a letter or digit",
  )
  check_text("setup", opts.setup)
  check_text("script_dir", str(opts.script_dir), _PATH, "a path without spaces, quotes or '%'")
  require(
    opts.script_path.resolve().parent == opts.script_dir.resolve(),
    "job_name",
    f"{opts.job_name!r} leaves --script_dir",
  )
  return opts


def options(fv: flags.FlagValues, command) -> Options:
  script_dir = pathlib.Path(os.path.expanduser(fv.script_dir or DEFAULT_SCRIPT_DIR)).absolute()
  opts = common.from_flags(Options, fv, command=tuple(command), script_dir=script_dir)
  return validate(opts)


def parse(argv: list[str]) -> Options:
  """``[flags] -- command`` -> validated :class:`Options` (library use and tests)."""
  own, command = common.split_command(argv)
  return options(common.parse_flags(define_flags, "launch.slurm", own), command)


def _sbatch_header(opts: Options) -> list[str]:
  q = common.join
  out = opts.script_dir / f"{opts.job_name}-%j.out"
  lines = [
    f"#SBATCH --job-name={q([opts.job_name])}",
    f"#SBATCH --nodes={opts.nodes}",
    "#SBATCH --ntasks-per-node=1",
    f"#SBATCH --gpus-per-node={opts.gpus_per_node}",
    f"#SBATCH --cpus-per-task={opts.cpus_per_task}",
    f"#SBATCH --time={q([opts.time])}",
    f"#SBATCH --output={q([str(out)])}",
    "#SBATCH --open-mode=append",  # a requeued run appends to the same log
  ]
  if opts.partition:
    lines.append(f"#SBATCH --partition={q([opts.partition])}")
  if opts.account:
    lines.append(f"#SBATCH --account={q([opts.account])}")
  return lines + ["#SBATCH --requeue", "#SBATCH --signal=TERM@120"]


_RESTARTS = "${SLURM_RESTART_COUNT:-0}"


def _requeue(opts: Options) -> list[str]:
  """Shell lines that requeue the job after the step saved a checkpoint on SIGTERM.

  SLURM requeues a job by itself only when preempted under ``PreemptMode=REQUEUE``, never after a
  time limit. Only a job still RUNNING is requeued: ``scontrol requeue`` also requeues finished
  jobs, and a job the user cancelled (scancel) must stay cancelled.
  """
  return [
    "# exit 143: the run saved a checkpoint on SIGTERM (--signal above); requeue it to resume",
    f'if [ "$rc" -eq {SIGTERM_EXIT} ]; then',
    '  state=$(scontrol show job -o "$SLURM_JOB_ID" | grep -o "JobState=[A-Z_]*" || true)',
    '  if [ "$state" != JobState=RUNNING ]; then',
    '    echo "jaxlab: exit 143 and ${state:-JobState=unknown}: not requeued" >&2',
    f'  elif [ "{_RESTARTS}" -ge {opts.max_requeues} ]; then',
    f'    echo "jaxlab: exit 143, not requeued: --max_requeues={opts.max_requeues} reached" >&2',
    "  else",
    '    echo "jaxlab: the run saved a checkpoint on SIGTERM (exit 143); requeueing the job"',
    '    scontrol requeue "$SLURM_JOB_ID" || echo "jaxlab: scontrol requeue failed" >&2',
    "  fi",
    "fi",
  ]


def render(opts: Options) -> str:
  """The sbatch script for ``opts``."""
  lines = ["#!/bin/bash", *_sbatch_header(opts), "", "set -euo pipefail"]
  lines += [
    'JAXLAB_COORDINATOR_HOST=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
    # per-job port: two jobs whose first node is shared do not collide
    "JAXLAB_COORDINATOR_PORT=$((20000 + SLURM_JOB_ID % 20000))",
    "export JAXLAB_COORDINATOR_HOST JAXLAB_COORDINATOR_PORT XLA_PYTHON_CLIENT_MEM_FRACTION=0.9",
  ]
  if opts.setup:
    lines.append(opts.setup)
  lines += [
    f'echo "jaxlab: job $SLURM_JOB_ID on $SLURM_JOB_NUM_NODES node(s), requeue {_RESTARTS}"',
    "rc=0",
    f"srun --kill-on-bad-exit=1 {common.join(opts.command)} || rc=$?",
    *_requeue(opts),
    'exit "$rc"',
  ]
  return "\n".join(lines) + "\n"


def run(opts: Options) -> int:
  cmds = [["sbatch", str(opts.script_path)]]
  script = render(opts)
  if opts.dry_run:
    print(f"# {opts.script_path}")
    print(script)
  else:
    missing = common.missing_programs(cmds)
    if missing:
      return common.report_missing(missing)
    opts.script_dir.mkdir(parents=True, exist_ok=True)
    opts.script_path.write_text(script)
  return common.execute(cmds, opts.dry_run)


def main(fv: flags.FlagValues, command: list[str]) -> int:
  return run(options(fv, command))


if __name__ == "__main__":
  common.entry(main, define_flags)
