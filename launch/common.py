"""What the launchers share: the ``[launcher flags] -- [command]`` split, validation, execution.

A launcher is an absl program run through :func:`jaxlab.core.experiment.run` (bad flags: one line,
exit 2). Everything after the first ``--`` is the user's command; it is never parsed, only quoted
with :func:`shlex.quote` wherever it reaches a shell, so quotes, ``;`` and ``$(...)`` stay literal.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence

from absl import flags

from jaxlab.core.errors import ConfigError, require

# Flags that `jaxlab.core.experiment` defines for experiments. Given to a launcher (before `--`)
# they would be accepted and silently ignored, so they are rejected with a hint instead.
EXPERIMENT_FLAGS = (
  "workdir",
  "seed",
  "seeds",
  "mesh",
  "steps",
  "log_every",
  "ckpt_every",
  "keep",
  "profile",
  "tracker",
  "videos",
  "compile_cache",
  "coordinator_address",
  "num_processes",
  "process_id",
)

# Environment that makes `jaxlab.core.distributed.initialize` start jax.distributed. A launcher runs
# no JAX computation, so inside a SLURM allocation or on a pod worker it must not wait for peers.
_MULTIHOST_ENV = ("SLURM_JOB_ID", "JAXLAB_TPU_POD", "TPU_WORKER_HOSTNAMES")

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def join(cmd: Sequence[str]) -> str:
  return " ".join(shlex.quote(c) for c in cmd)


def split_command(argv: Sequence[str]) -> tuple[list[str], list[str]]:
  """Splits ``[launcher flags] -- [the command to run]`` at the first ``--``."""
  argv = list(argv)
  if "--" in argv:
    i = argv.index("--")
    return argv[:i], argv[i + 1 :]
  return argv, []


def check_text(field: str, value: str | None, pattern: str | None = None, hint: str = "") -> None:
  """A value that reaches a script or a command line: one line, no control characters, and (if
  given) matching ``pattern`` in full."""
  if value is None:
    return
  require(
    not _CONTROL.search(value),
    field,
    f"holds a control character (newline, tab, ...): {value!r}",
  )
  if pattern is not None:
    require(re.fullmatch(pattern, value) is not None, field, f"{value!r} is not valid; {hint}")


def require_command(command: Sequence[str], example: str) -> None:
  require(bool(command), "--", f"give the command to run after --, e.g. -- {example}")
  require(
    not command[0].startswith("-"),
    "--",
    f"the command after -- starts with the flag {command[0]!r}; give a program first",
  )


def _experiment_flag(arg: str) -> str | None:
  m = re.match(r"--?(?:no)?([A-Za-z_]+)(?:=|$)", arg)
  return m.group(1) if m and m.group(1) in EXPERIMENT_FLAGS else None


def missing_programs(cmds: Sequence[Sequence[str]]) -> list[str]:
  return sorted({c[0] for c in cmds if shutil.which(c[0]) is None})


def report_missing(missing: Sequence[str]) -> int:
  print(
    f"error: {', '.join(missing)} not found on PATH (--dry_run prints the commands instead)",
    file=sys.stderr,
    flush=True,
  )
  return 127


def execute(cmds: Sequence[Sequence[str]], dry_run: bool) -> int:
  """Prints each command; runs them in order unless ``dry_run`` (stops at the first failure)."""
  missing = [] if dry_run else missing_programs(cmds)
  if missing:  # checked before anything runs, so no action is left half done
    return report_missing(missing)
  for cmd in cmds:
    print(join(cmd), flush=True)
    if not dry_run:
      rc = subprocess.call(list(cmd))
      if rc:
        print(f"error: command failed with exit code {rc}: {join(cmd)}", file=sys.stderr)
        return rc
  return 0


def entry(main: Callable[..., int], define_flags: Callable, positional: bool = False) -> None:
  """Runs a launcher as a program: ``main(flag_values, command[, first_argument])``.

  ``positional``: the first argument (if it is not a flag) is passed to ``main`` (``launch.tpu``'s
  action), since ``experiment.run`` rejects positional arguments.
  """
  from jaxlab.core import experiment

  own, command = split_command(sys.argv[1:])
  first = None
  if positional and own and not own[0].startswith("-"):
    first, own = own[0], own[1:]
  for arg in own:
    name = _experiment_flag(arg)
    if name:
      experiment.fail(name, "is a flag of the experiment: put it after --, in the command")
  define_flags(flags.FLAGS)
  sys.argv = [sys.argv[0], *own]
  hidden = {k: os.environ.pop(k) for k in _MULTIHOST_ENV if k in os.environ}

  def _main(argv):
    del argv
    os.environ.update(hidden)  # the commands this launcher runs see the user's environment
    if positional:
      return main(flags.FLAGS, command, first)
    return main(flags.FLAGS, command)

  experiment.run(_main)


def parse_flags(define_flags: Callable, prog: str, argv: Sequence[str]) -> flags.FlagValues:
  """Parses launcher flags into a fresh ``FlagValues`` (library use and tests, no globals)."""
  fv = flags.FlagValues()
  define_flags(fv)
  rest = fv([prog, *argv])
  if len(rest) > 1:
    raise ConfigError(rest[1], f"unexpected argument {rest[1]!r}; flags look like --name=value")
  return fv


def from_flags(cls, fv, **given):
  """``cls`` (a dataclass of launcher options) filled from the flags of the same name."""
  import dataclasses

  names = [f.name for f in dataclasses.fields(cls) if f.name not in given]
  return cls(**{n: getattr(fv, n) for n in names}, **given)
