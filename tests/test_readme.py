"""The README's quick-start test command is exactly what CI runs."""

import pathlib
import re
import subprocess
import sys

import pytest

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


def _snippets():
  """The ```python blocks of the README's "Use from Python" section, by their heading."""
  readme = (ROOT / "README.md").read_text()
  section = readme.split("## Use from Python", 1)[1].split("\n## ", 1)[0]
  out = {}
  for m in re.finditer(r"^\*\*([^\n*]+?)\*\*[^\n]*\n+```python\n(.*?)```", section, re.S | re.M):
    out[m.group(1)] = m.group(2)
  return out


def test_readme_has_a_snippet_per_method():
  names = set(_snippets())
  for method in ("Core", "UHM", "PPO", "GOMA", "Decentralized", "Discrete ASBS", "LM"):
    assert any(n.startswith(method) for n in names), (method, names)


@pytest.mark.parametrize("name", sorted(_snippets()))
def test_readme_snippet_runs(name, tmp_path):
  code = _snippets()[name]
  r = subprocess.run(
    [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600
  )
  assert r.returncode == 0, r.stderr[-3000:]
