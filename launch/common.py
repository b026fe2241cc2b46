"""Shared helpers for launchers: quoting, printing or running a list of commands."""

from __future__ import annotations

import shlex
import subprocess
import sys
from typing import Sequence


def join(cmd: Sequence[str]) -> str:
  return " ".join(shlex.quote(c) for c in cmd)


def execute(cmds: Sequence[Sequence[str]], dry_run: bool) -> int:
  """Prints each command; runs them in order unless ``dry_run`` (stops at the first failure)."""
  for cmd in cmds:
    print(join(cmd), flush=True)
    if not dry_run:
      rc = subprocess.call(list(cmd))
      if rc:
        print(f"command failed with exit code {rc}", file=sys.stderr)
        return rc
  return 0


def split_command(argv: Sequence[str]) -> tuple[list[str], list[str]]:
  """Splits ``[launcher flags] -- [the command to run]`` at the first ``--``."""
  argv = list(argv)
  if "--" in argv:
    i = argv.index("--")
    return argv[:i], argv[i + 1 :]
  return argv, []
