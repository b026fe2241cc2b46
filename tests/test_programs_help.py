"""Every program's ``--help``: exit 0, its docstring's commands as commands, its own flags and the
shared ones with their defaults, the ``--config`` the default run uses; nothing written."""

import pathlib
import re
import subprocess

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
  refused = out.split("Not used by this program (refused with exit 2): ", 1)[-1].split("\n\n")[0]
  for flag in ("--steps", "--seed=0", "--workdir", "--mesh=", "--log_every", "--keep=3"):
    name = flag.split("=")[0]
    # listed with its default, or named as refused: never both, never neither
    assert (f"\n  {flag}" in out) != (f"{name}," in refused or f"{name}." in refused), (flag, out)
  # The docstring's example commands are printed one per line, as typed.
  assert f"\n  python -m {module}" in out or f"\n    python -m {module}" in out, out[:3000]
  assert "Traceback" not in r.stderr, r.stderr[-2000:]
  assert list(tmp_path.iterdir()) == []


# The test imports each program (its flags), renders its --help, then calls its main() twice:
# with every shared flag the help lists (neutral values) and with one it refuses. A --workdir
# that is a file stops a run at its workdir check, which follows the refusals, before any work.
_DRIVER = r"""
import importlib, json, sys
from absl import flags
from jaxlab.core import experiment
from jaxlab.core.errors import ConfigError

module, stop = sys.argv[1], sys.argv[2]
program = importlib.import_module(module)  # defines the program's flags
if hasattr(program, "define_flags"):  # the OGBench generator defines its flags when it runs
  program.define_flags()
sys.modules["__main__"] = program  # whose docstring and UNUSED_FLAGS the help reads
text = experiment.help_text([module])
section = text.split("Shared flags (accepted by this program):\n", 1)[1].split("\n\n", 1)[0]
listed = [l[4:].split("=")[0] for l in section.splitlines() if l.startswith("  --")]
NEUTRAL = {"seed": "0", "seeds": "1", "steps": "1", "log_every": "1", "ckpt_every": "0",
           "keep": "3", "mesh": "", "profile": "false", "compile_cache": "off", "workdir": stop}
MULTI_HOST = ("coordinator_address", "num_processes", "process_id")  # would start a cluster


def value(name):
  if name in NEUTRAL:
    return NEUTRAL[name]
  flag = flags.FLAGS[name]
  return flag.default_as_str.strip("'") if flag.default is not None else None


def call(args):
  argv = [module] + args
  flags.FLAGS.unparse_flags()
  flags.FLAGS(argv)
  sys.argv = argv
  try:
    program.main([module])
    return {"ran": True}
  except ConfigError as e:
    return {"field": e.field, "message": e.message}
  except SystemExit as e:
    return {"exit": e.code}


given = [n for n in listed if n not in MULTI_HOST and value(n) is not None]
positive = call([f"--{n}={value(n)}" for n in given])
unused = list(getattr(program, "UNUSED_FLAGS", ()))
stop_args = [f"--workdir={stop}"] if "workdir" in listed else []
first = value(unused[0]) if unused else None  # a flag without a default: any valid value
negative = call([f"--{unused[0]}={first or 1}"] + stop_args) if unused else None
print(json.dumps({"listed": listed, "given": given, "unused": unused, "positive": positive,
                  "negative": negative}))
"""

FLAG_PROGRAMS = PROGRAMS + ["jaxlab.envs.ogbench_generate"]


@pytest.mark.parametrize("module", FLAG_PROGRAMS)
def test_every_shared_flag_the_help_lists_is_accepted(module, tmp_path):
  """A program's --help lists only the shared flags it accepts: given together they pass its
  refusals, and one it lists as not used is refused (so the refusals run before the stop)."""
  import json
  import sys

  from programs import program_env

  stop = tmp_path / "a_file"
  stop.write_text("not a folder")
  r = subprocess.run(
    [sys.executable, "-c", _DRIVER, module, str(stop)],
    cwd=tmp_path,
    env=program_env({"JAX_PLATFORMS": "cpu"}),
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert r.returncode == 0, r.stderr[-3000:]
  got = json.loads(r.stdout.strip().splitlines()[-1])
  assert "seed" in got["listed"] or "seed" in got["unused"], got
  assert not set(got["listed"]) & set(got["unused"]), got
  positive = got["positive"]
  assert "ran" not in positive, got  # the stop was reached: nothing trained
  assert "not used" not in positive.get("message", ""), got
  if got["unused"]:
    assert got["negative"]["field"] == got["unused"][0], got
    assert "not used" in got["negative"]["message"], got
  assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]


def test_help_shows_the_config_of_the_default_run(tmp_path):
  r = run_program("experiments.example", ["--help", "--config.lr=0.5"], tmp_path)
  assert r.returncode == 0, r.stderr
  config = r.stdout.split("\n--config:", 1)[1]
  assert "\n  lr: 0.5\n" in config and "\n  dim: 16\n" in config, config


def test_programs_that_refuse_shared_flags_declare_them():
  """--help reads UNUSED_FLAGS: a program that refuses shared flags names them there (a static
  check of every program, benchmarks included, whose own --help runs are not timed here)."""
  import ast

  folders = ("experiments", "benchmarks")
  missing = []
  for path in sorted(p for f in folders for p in pathlib.Path(REPO, f).glob("*.py")):
    source = path.read_text()
    # refused always (not only in one --mode: experiments.lm's capacity mode says so itself)
    if not re.search(r"is not used by (?!--)", source) and "unused=" not in source:
      continue
    names = {
      t.id
      for node in ast.parse(source).body
      if isinstance(node, ast.Assign)
      for t in node.targets
      if isinstance(t, ast.Name)
    }
    if "UNUSED_FLAGS" not in names:
      missing.append(path.name)
  assert missing == [], missing
