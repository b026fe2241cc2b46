"""Every program's ``--help``: exit 0, its docstring's commands as commands, its own flags and the
shared ones with their defaults, the ``--config`` the default run uses; nothing written."""

import pathlib

import pytest
from programs import REPO, run_program

PROGRAMS = sorted(
  f"experiments.{p.stem}"
  for p in pathlib.Path(REPO, "experiments").glob("*.py")
  if p.stem != "__init__"
)


@pytest.mark.parametrize("module", PROGRAMS)
def test_help_lists_own_and_shared_flags(module, tmp_path):
  r = run_program(module, ["--help"], tmp_path, timeout=120)
  assert r.returncode == 0, r.stderr[-2000:]
  out = r.stdout
  for flag in ("--steps", "--seed=0", "--workdir", "--mesh=", "--log_every", "--keep=3"):
    assert f"\n  {flag}" in out, (flag, out[-3000:])
  # The docstring's example commands are printed one per line, as typed.
  assert f"\n  python -m {module}" in out or f"\n    python -m {module}" in out, out[:3000]
  assert "Traceback" not in r.stderr, r.stderr[-2000:]
  assert list(tmp_path.iterdir()) == []


def test_help_shows_the_config_of_the_default_run(tmp_path):
  r = run_program("experiments.example", ["--help", "--config.lr=0.5"], tmp_path)
  assert r.returncode == 0, r.stderr
  config = r.stdout.split("\n--config:", 1)[1]
  assert "\n  lr: 0.5\n" in config and "\n  dim: 16\n" in config, config
