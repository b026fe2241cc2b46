"""The wheel stands alone: built from the clone, installed into a fresh virtualenv, used from a
folder outside the clone. Every ``jaxlab`` module imports, the package data is there, the programs'
packages are not, and every README "Use from Python" snippet runs.

The fresh virtualenv gets the wheel only; its dependencies are the ones this test run already has
(a path entry to their site-packages, which does not activate the editable install of the clone).
"""

import fcntl
import os
import pathlib
import re
import shutil
import subprocess
import sys
import sysconfig

import pytest
from programs import REPO

ROOT = pathlib.Path(REPO)
_SOURCES = ("jaxlab", "setup.cfg", "pyproject.toml", "README.md")


def _build(base: pathlib.Path) -> pathlib.Path:
  """``base/venv`` with the wheel of this clone installed (once per test run, shared by workers)."""
  venv = base / "venv"
  if (base / "done").exists():
    return venv
  src = base / "src"
  shutil.rmtree(src, ignore_errors=True)
  for name in _SOURCES:  # a copy, so building writes nothing into the clone
    copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy2
    copy(
      ROOT / name,
      src / name,
      **({"ignore": shutil.ignore_patterns("__pycache__")} if (ROOT / name).is_dir() else {}),
    )
  pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
  build = subprocess.run(
    [*pip, "wheel", "--no-deps", "-w", str(base / "dist"), str(src)],
    capture_output=True,
    text=True,
  )
  (base / "build.log").write_text(build.stdout + build.stderr)
  assert build.returncode == 0, (build.stdout + build.stderr)[-3000:]
  subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
  py = venv / "bin" / "python"
  wheel = next((base / "dist").glob("jaxlab-*.whl"))
  subprocess.run(
    [str(py), "-m", "pip", "-q", "install", "--no-deps", "--no-index", str(wheel)], check=True
  )
  site = subprocess.run(
    [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
    capture_output=True,
    text=True,
    check=True,
  ).stdout.strip()
  deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
  pathlib.Path(site, "_test_deps.pth").write_text("\n".join(sorted(deps)) + "\n")
  (base / "done").write_text(str(wheel))
  return venv


@pytest.fixture(scope="session")
def wheel_python(tmp_path_factory):
  base = tmp_path_factory.getbasetemp()
  if os.environ.get("PYTEST_XDIST_WORKER"):  # one build for this run's workers, none from before
    base = base.parent
  base = base / "jaxlab_wheel"
  base.mkdir(exist_ok=True)
  with open(base / "lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    venv = _build(base)
  return str(venv / "bin" / "python")


def _run(python, code, cwd, timeout=600):
  env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  return subprocess.run(
    [python, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
  )


_IMPORT_ALL = """
import importlib, pathlib, pkgutil, sys
import jaxlab
assert "site-packages" in jaxlab.__file__, jaxlab.__file__
names = [m.name for m in pkgutil.walk_packages(jaxlab.__path__, "jaxlab.")]
for name in names:
  importlib.import_module(name)
for program in ("envs", "experiments", "benchmarks", "launch"):
  try:
    importlib.import_module(program)
  except ModuleNotFoundError:
    continue
  raise AssertionError(f"the wheel installed a top-level package {program!r}")
from jaxlab.envs import ogbench
from jaxlab.rl.dicode import task
data = pathlib.Path(jaxlab.__file__).parent
assert (data / "envs" / "data" / "cube-single-play-v0.npz").exists()
assert list((data / "lm" / "corpus").glob("*.txt.gz"))
assert ogbench.embedded_path("cube-single-play-v0")
assert len(task.achievement_ids()) > 0
print(len(names))
"""


def test_every_module_imports_from_the_wheel(wheel_python, tmp_path):
  r = _run(wheel_python, _IMPORT_ALL, tmp_path)
  assert r.returncode == 0, r.stderr[-3000:]
  assert int(r.stdout.split()[-1]) > 80, r.stdout


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


@pytest.mark.parametrize("name", sorted(_snippets()), ids=lambda n: n.split(":")[0])
def test_readme_snippet_runs_from_the_wheel(name, wheel_python, tmp_path):
  r = _run(wheel_python, _snippets()[name], tmp_path)
  assert r.returncode == 0, r.stderr[-3000:]


def test_the_build_has_no_packaging_warning(wheel_python):
  """setuptools warns when a folder Python can import (the data folders) is not a declared package;
  they are packages (an __init__.py each) found by setup.cfg's ``find:``."""
  log = (pathlib.Path(wheel_python).parents[2] / "build.log").read_text()
  assert "absent from the `packages` configuration" not in log, log[-3000:]
  assert "BuildBackendWarning" not in log, log[-3000:]


def test_the_data_generator_runs_from_the_wheel(wheel_python, tmp_path):
  env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  r = subprocess.run(
    [wheel_python, "-m", "jaxlab.envs.ogbench_generate", "--help"],
    cwd=tmp_path,
    env={**env, "JAX_PLATFORMS": "cpu"},
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert r.returncode == 0, r.stderr[-3000:]
  assert "python -m jaxlab.envs.ogbench_generate --env_name=" in r.stdout, r.stdout[:2000]
  assert "--env_name" in r.stdout and "--episodes" in r.stdout
  r = subprocess.run(
    [wheel_python, "-m", "jaxlab.envs.ogbench_generate", "--env_name=no-such-set-v0"],
    cwd=tmp_path,
    env={**env, "JAX_PLATFORMS": "cpu"},
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert r.returncode == 2 and r.stderr.startswith("error: --env_name"), r.stderr[-2000:]
  assert list(tmp_path.iterdir()) == []
