"""The README's quick start: the test command is exactly what CI runs, the main job is UHM.

The README's "Use from Python" snippets run from an installed wheel: tests/test_wheel.py.
"""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_ci_runs_the_readme_test_command():
  readme = (ROOT / "README.md").read_text()
  ci = (ROOT / ".ci" / "run").read_text()
  m = re.search(r"pip install -e '\.\[test\]' && (python -m pytest[^\n`]*)", readme)
  assert m, "README quick start must install .[test] and run pytest"
  ci_cmds = [l.strip() for l in ci.splitlines() if l.strip().startswith("python -m pytest")]
  assert ci_cmds == [m.group(1).strip()]


def test_readme_main_command_is_the_uhm_job():
  readme = (ROOT / "README.md").read_text()
  assert "pip install -e '.[ogbench]' && python -m experiments.uhm --env=ogbench" in readme
