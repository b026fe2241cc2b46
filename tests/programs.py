"""Running a jaxlab program (``python -m <module>``) as a user would, for the CLI tests.

The programs (``experiments``, ``envs``, ``benchmarks``, ``launch``) live in the clone, not in the
wheel, so they run with the clone on PYTHONPATH; tests run them from a temporary directory, where a
stray file would show. The library itself is imported from wherever it is installed (the wheel test,
``tests/test_wheel.py``, imports it from outside the clone).
"""

import os
import pathlib
import subprocess
import sys

REPO = str(pathlib.Path(__file__).resolve().parents[1])


def program_env(env=None):
  """``os.environ`` plus ``env``, the clone first on PYTHONPATH (for ``python -m <program>``)."""
  full = {**os.environ, **(env or {})}
  full["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, full.get("PYTHONPATH", "")) if p)
  return full


def run_program(module, args, cwd, *, env=None, drop=(), timeout=300):
  """``python -m module *args`` on the CPU; ``env`` adds variables, ``drop`` removes some."""
  full = program_env({"JAX_PLATFORMS": "cpu", **(env or {})})
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
