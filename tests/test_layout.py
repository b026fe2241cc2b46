"""The layout rules a user relies on: the library imports no program package, one folder per
method under ``jaxlab/rl``, and thin programs (the logic is in importable, tested library code)."""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PROGRAM_PACKAGES = {"envs", "experiments", "launch", "benchmarks"}
METHODS = {"uhm", "ppo", "r4", "qrim", "dicode", "itc"}


def _imported(path: pathlib.Path) -> set[str]:
  names = set()
  for node in ast.walk(ast.parse(path.read_text())):
    if isinstance(node, ast.Import):
      names.update(a.name.split(".")[0] for a in node.names)
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
      names.add(node.module.split(".")[0])
  return names


@pytest.mark.parametrize("path", sorted(ROOT.glob("jaxlab/**/*.py")), ids=str)
def test_library_imports_no_program_package(path):
  assert not (_imported(path) & PROGRAM_PACKAGES), path


def test_rl_is_one_folder_per_method():
  rl = ROOT / "jaxlab" / "rl"
  modules = {p.name for p in rl.glob("*.py")} - {"__init__.py"}
  packages = {p.name for p in rl.iterdir() if (p / "__init__.py").exists()}
  assert modules == set() and packages == METHODS, (modules, packages)
