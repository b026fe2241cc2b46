"""The layout rules a user relies on: the library imports no program package and starts no program,
one folder per method under ``jaxlab/rl``, and thin programs (the logic is in importable, tested
library code)."""

import ast
import importlib
import importlib.util
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


# The only modules that start processes: the DiCode sandbox (task programs run isolated) and the
# provenance record (git). A study or method never shells out to a program: it calls the library.
STARTS_PROCESSES = {"jaxlab/rl/dicode/sandbox.py", "jaxlab/core/provenance.py"}


@pytest.mark.parametrize("path", sorted(ROOT.glob("jaxlab/**/*.py")), ids=str)
def test_library_imports_no_program_package(path):
  assert not (_imported(path) & PROGRAM_PACKAGES), path


@pytest.mark.parametrize("path", sorted(ROOT.glob("jaxlab/**/*.py")), ids=str)
def test_library_starts_no_program(path):
  rel = path.relative_to(ROOT).as_posix()
  if rel not in STARTS_PROCESSES:
    assert "subprocess" not in _imported(path), rel


def test_rl_is_one_folder_per_method():
  rl = ROOT / "jaxlab" / "rl"
  modules = {p.name for p in rl.glob("*.py")} - {"__init__.py"}
  packages = {p.name for p in rl.iterdir() if (p / "__init__.py").exists()}
  assert modules == set() and packages == METHODS, (modules, packages)


def _fields(config, prefix=""):
  out = set()
  for k, v in config.items():
    out |= _fields(v, f"{prefix}{k}.") if hasattr(v, "items") else {f"{prefix}{k}"}
  return out


def _library_config(method):
  import importlib

  module = {"lm": "jaxlab.lm.config", "dasbs": "jaxlab.sampling.dasbs"}.get(
    method, f"jaxlab.rl.{method}"
  )
  return importlib.import_module(module).get_config()


@pytest.mark.parametrize(
  "path", sorted(ROOT.glob("experiments/configs/*.py")), ids=lambda p: p.stem
)
def test_presets_only_change_fields_of_the_library_config(path):
  """Defaults are declared once, in the library's get_config(); a preset file holds no field the
  library does not declare (so no second default can hide there)."""
  import importlib.util

  spec = importlib.util.spec_from_file_location(f"_preset_{path.stem}", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  names = [
    None,
    *getattr(module, "PRESETS", ()),
    *getattr(module, "ARMS", ()),
    *getattr(module, "SIZES", ()),
  ]
  library = _fields(_library_config(path.stem))
  for name in names:
    assert _fields(module.get_config(name)) == library, (path.stem, name)


@pytest.mark.parametrize("path", sorted(ROOT.glob("experiments/*.py")), ids=lambda p: p.stem)
def test_programs_are_thin(path):
  """flags -> data -> create -> train -> report; the logic is library code a notebook imports."""
  assert len(path.read_text().splitlines()) <= 150, path


# --- facades and the config contract


_FACADES = sorted(ROOT.glob("jaxlab/**/__init__.py"))


@pytest.mark.parametrize("path", _FACADES, ids=lambda p: str(p.parent.relative_to(ROOT)))
def test_facades_re_export_explicitly(path):
  """No star import, an ``__all__`` naming only what the package holds (no jax/jnp leaking)."""
  package = str(path.parent.relative_to(ROOT))
  source = path.read_text()
  assert "import *" not in source
  module = importlib.import_module(package.replace("/", "."))
  assert isinstance(module.__all__, list)
  for name in module.__all__:
    assert hasattr(module, name) or importlib.util.find_spec(f"{module.__name__}.{name}"), name
  assert not {"jax", "jnp", "np"} & set(module.__all__)


_VALIDATORS = {
  "jaxlab.rl.uhm": lambda m: m.validate_config(m.get_config()),
  "jaxlab.rl.ppo.config": lambda m: m.validate_config(m.gymnax_config()),
  "jaxlab.rl.qrim.config": lambda m: m.validate_config(m.get_config(), 16),
  "jaxlab.rl.r4.config": lambda m: m.validate_config(
    m.get_config(), method="r4", ratings="simulated", protocol="offline", updates=8
  ),
  "jaxlab.rl.itc.config": lambda m: m.validate_config(m.get_config()),
  "jaxlab.rl.dicode.config": lambda m: m.validate_config(m.get_config(), "none"),
  "jaxlab.sampling.dasbs": lambda m: m.validate_config(m.get_config()),
  "jaxlab.sampling.evaluation": lambda m: m.validate_config(m.get_config()),
  "jaxlab.sampling.exact_check": lambda m: m.validate_config(m.get_config()),
  "jaxlab.lm.config": lambda m: m.validate_config(m.get_config(), "train"),
  "jaxlab.optim.goma.config": lambda m: m.validate_config(m.get_config()),
  "jaxlab.optim.decentralized.config": lambda m: m.validate_config(
    m.get_config(), problem="least_squares"
  ),
}


@pytest.mark.parametrize("module", sorted(_VALIDATORS))
def test_validate_config_returns_the_checked_config_frozen(module):
  """One contract: ``validate_config(config, ...) -> config`` (frozen); typed objects are built
  from it by the method's ``*_config`` helpers."""
  import ml_collections

  out = _VALIDATORS[module](importlib.import_module(module))
  assert isinstance(out, ml_collections.FrozenConfigDict)


@pytest.mark.parametrize("path", sorted(ROOT.glob("jaxlab/**/*.py")), ids=str)
def test_no_module_imports_its_own_package_facade_or_imports_late(path):
  """A module reaches its siblings directly (no cycle through the facade), and no import sits
  below code to break a cycle (``noqa: E402``)."""
  source = path.read_text()
  assert "noqa: E402" not in source
  if path.name == "__init__.py":
    return
  package = str(path.parent.relative_to(ROOT)).replace("/", ".")
  parent, _, name = package.rpartition(".")
  tree = ast.parse(source)
  for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom) and node.module == parent:
      assert name not in {a.name for a in node.names}, f"imports its own facade {package}"
    if isinstance(node, ast.Import):
      assert package not in {a.name for a in node.names}, f"imports its own facade {package}"


# --- call depth from a program to its loss

# Probe run in a fresh process (the program's absl flags parse there): it wraps the loss, runs the
# program's main, and at the loss's first trace prints the stack's frames of this repository and
# exits (nothing compiles or trains).
_PROBE = r"""
import importlib, json, os, pathlib, sys, traceback
root, program, module, name, *argv = sys.argv[1:]
prog, mod = importlib.import_module(program), importlib.import_module(module)
table, _, key = name.partition("/")  # "TABLE/key": the loss is entry 1 of a (init, step) table
orig = mod.__dict__[table][key][1] if key else getattr(mod, name)

def probe(*args, **kwargs):
  frames = [f for f in traceback.extract_stack()[:-1] if f.filename.startswith(root)]
  frames = [f for f in frames if "site-packages" not in f.filename]  # a virtualenv in the clone
  frames = [(str(pathlib.Path(f.filename).relative_to(root)), f.name) for f in frames]
  mains = [i for i, f in enumerate(frames) if f[1] == "main" and f[0].startswith("experiments/")]
  print("FRAMES=" + json.dumps(frames[mains[-1]:]), flush=True)
  os._exit(0)

if key:
  mod.__dict__[table][key] = (mod.__dict__[table][key][0], probe)
else:
  setattr(mod, name, probe)
from jaxlab.core import experiment
sys.argv = [program, *argv]
experiment.run(prog.main)
"""

_RUNTIME = "jaxlab/core/runtime.py"  # the chunked training loop every program shares


def _frames_to_loss(tmp_path, program, module, loss, *args):
  import json
  import subprocess
  import sys

  from tests.programs import program_env

  argv = [str(ROOT) + "/", program, module, loss, *args, f"--workdir={tmp_path / 'run'}"]
  out = subprocess.run(
    [sys.executable, "-c", _PROBE, *argv],
    cwd=tmp_path,
    env=program_env({"JAX_PLATFORMS": "cpu"}),
    capture_output=True,
    text=True,
    timeout=600,
  )
  lines = [ln for ln in out.stdout.splitlines() if ln.startswith("FRAMES=")]
  assert lines, out.stdout[-2000:] + out.stderr[-2000:]
  return [tuple(f) for f in json.loads(lines[0][len("FRAMES=") :])]


# program, the loss (module, name; "TABLE/key" for a method table's step), flags, and the bound on
# the frames from the program's main to the loss outside the runtime (main included, the loss
# not); the runtime's own frames (train, its memory check and compile, the chunk, one step) are
# counted apart
_DEPTHS = {
  "ppo": (
    "jaxlab.rl.ppo.agent",  # the name the update calls (imported from jaxlab.rl.ppo.loss)
    "ppo_loss",
    ("--env=cartpole", f"--config={ROOT}/experiments/configs/ppo.py:cpu"),
    7,  # main, train_run | update, learn, epoch, minibatch, _loss_fn
  ),
  "uhm": (
    "jaxlab.rl.uhm.agent",
    "actor_critic_loss",
    (
      f"--config={ROOT}/experiments/configs/uhm.py:cpu",
      "--steps=2",
      "--eval_episodes=1",
      "--videos=0",
    ),
    6,  # main, train | update, the cond's branch, ac_step, apply_loss
  ),
  "goma": (
    "jaxlab.optim.goma.vi",
    "_IMPL/goma",
    ("--problem=bilinear", "--methods=goma", "--steps=20", "--seeds=1"),
    7,  # main, run_comparison, solve, one (a seed), run, _run_jit, body (a step)
  ),
}
_RUNTIME_FRAMES = 6


@pytest.mark.parametrize("name", sorted(_DEPTHS))
def test_few_frames_from_a_program_to_its_loss(tmp_path, name):
  """A reader follows a program to the paper's loss in a few calls: no wrapper that only forwards
  (counted at the loss's trace, in the program's own run on its smallest preset)."""
  if name == "uhm":
    pytest.importorskip("ogbench")
  module, loss, args, bound = _DEPTHS[name]
  frames = _frames_to_loss(tmp_path, f"experiments.{name}", module, loss, *args)
  own = [f for f in frames if f[0] != _RUNTIME]
  assert frames[0] == (f"experiments/{name}.py", "main"), frames
  assert len(own) <= bound, own
  assert len(frames) - len(own) <= _RUNTIME_FRAMES, frames


CORE_FUNCTION_LINES = 60  # the core is read by every method's user: short functions, one job each


def test_no_core_function_is_longer_than_the_bound():
  long = []
  for path in sorted((ROOT / "jaxlab" / "core").rglob("*.py")):
    for node in ast.walk(ast.parse(path.read_text())):
      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        lines = node.end_lineno - node.lineno + 1
        if lines > CORE_FUNCTION_LINES:
          long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)")
  assert not long, long
