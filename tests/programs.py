"""Running a jaxlab program (``python -m <module>``) as a user would, for the CLI tests.

``tests/conftest.py`` puts the clone on PYTHONPATH, so programs run from any directory (tests run
them from a temporary one, where a stray file would show).
"""

import os
import subprocess
import sys


def run_program(module, args, cwd, *, env=None, drop=(), timeout=300):
  """``python -m module *args`` on the CPU; ``env`` adds variables, ``drop`` removes some."""
  full = {**os.environ, "JAX_PLATFORMS": "cpu", **(env or {})}
  for name in drop:
    full.pop(name, None)
  return subprocess.run(
    [sys.executable, "-m", module, *args],
    cwd=cwd,
    env=full,
    capture_output=True,
    text=True,
    timeout=timeout,
  )
