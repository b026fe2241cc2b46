"""Experiment conventions: shared absl flags, one-line exit-2 errors, workdirs, summaries.

Every ``experiments/*.py`` file reads flags -> data -> create -> train -> report::

    from jaxlab.core import experiment
    _CONFIG = experiment.define_config(get_config())

    def main(argv):
      run = experiment.common("uhm", variant=(agent, task))   # validates the shared flags
      config = mylib.validate_config(_CONFIG.value)            # raises ConfigError("config.x", ...)
      data = ...; state = mylib.create(...)
      state, result = runtime.train(state, mylib.update, run.loop(), key=key, workdir=run.workdir)
      print(...)                                                # report from `result`

    if __name__ == "__main__":
      experiment.run(main)     # ConfigError anywhere -> "error: --field: message", exit 2

Shared flags: ``--workdir --seed --seeds --mesh --steps --log_every --ckpt_every --keep
--profile --tracker --videos``.
Nothing is written before validation ends: ``runtime.train`` creates and locks the workdir.
"""

from __future__ import annotations

import dataclasses
import errno
import math
import os
import pathlib
import re
import sys
import textwrap
import threading
from collections.abc import Iterable, Sequence
from typing import Any, NoReturn

from absl import app, flags

from jaxlab.core import mesh as mesh_lib
from jaxlab.core import resources, sharding
from jaxlab.core import workdir as workdir_lib
from jaxlab.core.compile_cache import (
  enable_compile_cache,
)
from jaxlab.core.errors import ConfigError, check_choice, check_config, require  # noqa: F401
from jaxlab.core.runtime import Loop, NonFiniteError

FLAGS = flags.FLAGS

flags.DEFINE_string(
  "workdir",
  None,
  "Run directory (default: runs/<experiment>). An existing workdir with checkpoints is resumed.",
)
flags.DEFINE_integer("seed", 0, "Base PRNG seed.")
flags.DEFINE_string(
  "seeds",
  None,
  "Training seeds trained together, vmapped in ONE compiled program: a count N (seeds --seed ... "
  "--seed+N-1) or a comma list (0,3,7). Seed k equals the run --seed=k alone; metrics.csv and "
  "eval.csv get a seed column, summary.json a per_seed record.",
)
flags.DEFINE_string(
  "mesh", "", "Device mesh, e.g. 'data:2,fsdp:-1' (-1 = the rest). Empty: no mesh (single device)."
)
flags.DEFINE_integer("steps", None, "Number of training steps (default: the experiment's).")
flags.DEFINE_integer(
  "log_every", None, "Steps per jitted chunk / metrics row (default: the experiment's)."
)
flags.DEFINE_integer("keep", 3, "Checkpoints kept in the workdir (older ones are deleted).")
flags.DEFINE_string(
  "coordinator_address",
  None,
  "Multi-host GPU: host:port of process 0 (TPU pods and SLURM jobs are detected without it).",
)
flags.DEFINE_integer("num_processes", None, "Multi-host GPU: number of processes.")
flags.DEFINE_integer("process_id", None, "Multi-host GPU: this process's index.")
flags.DEFINE_bool(
  "profile",
  False,
  "Write a jax.profiler trace of one chunk (after compilation) "
  "to <workdir>/profile (TensorBoard's profile tab or Perfetto).",
)
flags.DEFINE_integer(
  "ckpt_every", None, "Steps between checkpoints (0 = only at the end; default: the experiment's)."
)
flags.DEFINE_string(
  "compile_cache",
  None,
  "Folder of JAX's persistent compilation cache, so the second run of a command skips compiling "
  "(default: $JAXLAB_COMPILE_CACHE, else <user cache dir>/jaxlab/xla); 'off' disables it.",
)

flags.DEFINE_enum(
  "tracker",
  "tensorboard",
  ["tensorboard", "wandb"],
  "Where metrics and videos go besides metrics.csv/eval.csv: tensorboard (<workdir>/tb) or wandb "
  "(pip install 'jaxlab[wandb]'; offline without an API key or network; a resumed run appends "
  "to the same W&B run).",
)
flags.DEFINE_integer(
  "videos",
  None,
  "Episodes per evaluation video (<workdir>/videos/eval_<step>.gif, per seed in a grid; "
  "0 = none; default: the program's).",
)

# The shared flags that shape a training run; a program without one refuses them all (UNUSED_FLAGS).
RUN_FLAGS = (
  "workdir",
  "seed",
  "seeds",
  "mesh",
  "steps",
  "log_every",
  "ckpt_every",
  "keep",
  "profile",
  "tracker",
  "videos",
)

ExperimentError = ConfigError  # one typed error for flags, config fields and library arguments


def fail(flag: str, message: str) -> NoReturn:
  """Prints ``error: --flag: message`` and exits with status 2."""
  print(f"error: --{flag.lstrip('-')}: {message}", file=sys.stderr, flush=True)
  sys.exit(2)


def check_list(flag: str, values: str | Sequence[str], allowed: Iterable[str]) -> list[str]:
  """Comma-separated list whose every element is in ``allowed`` (and at least one)."""
  items = [v.strip() for v in values.split(",")] if isinstance(values, str) else list(values)
  items = [v for v in items if v]
  allowed = list(allowed)
  bad = [v for v in items if v not in allowed]
  if bad or not items:
    raise ConfigError(flag, f"got {','.join(bad) or 'nothing'}; allowed: {', '.join(allowed)}")
  return items


def check_positive(flag: str, value: float, allow_zero: bool = False) -> float:
  ok = value is not None and math.isfinite(value) and (value > 0 or (allow_zero and value == 0))
  require(ok, flag, f"must be {'>= 0' if allow_zero else '> 0'} and finite, got {value}")
  return value


INT32_MAX = resources.INT32_MAX
# Each chunk is a host round trip, a metrics row and an entry of the runtime's schedule (about
# 100 bytes of host memory); a million rows is already a 100 MB metrics.csv, so more is a typo.
MAX_CHUNKS = 1_000_000


def check_chunks(steps: int, **everies: int) -> None:
  """Refuses a schedule of more than :data:`MAX_CHUNKS` chunks, naming the ``every`` to raise."""
  for name, every in everies.items():
    if every and steps // every > MAX_CHUNKS:
      raise ConfigError(
        name,
        f"{every} cuts {steps} steps into {steps // every} chunks (a host round trip and a "
        f"metrics row each); at most {MAX_CHUNKS}: use at least {-(-steps // MAX_CHUNKS)}",
      )


@dataclasses.dataclass(frozen=True)
class Common:
  """The validated shared flags of a run."""

  name: str
  workdir: pathlib.Path
  seed: int
  mesh: Any  # jax.sharding.Mesh or None
  mesh_spec: dict
  steps: int
  log_every: int
  ckpt_every: int
  keep: int = 3
  profile: bool = False
  seeds: tuple[int, ...] = ()  # --seeds (default: (seed,)); several train vmapped in one program
  tracker: str = "tensorboard"  # --tracker (jaxlab.core.tracking)
  videos: int | None = None  # --videos: episodes per evaluation video (None: the program's)

  def video_episodes(self, default: int = 2) -> int:
    """Episodes per evaluation video: ``--videos``, else the program's ``default`` (0 = none)."""
    return default if self.videos is None else self.videos

  def loop(self, **overrides) -> Loop:
    """The runtime schedule these flags ask for (``eval_every`` etc. as overrides)."""
    kw = {k: getattr(self, k) for k in ("log_every", "ckpt_every", "keep", "profile", "tracker")}
    return Loop(**{"num_steps": self.steps, **kw, **overrides})

  def check_batch(self, field: str, batch_size: int) -> None:
    """A data-parallel batch must split evenly over the mesh's batch axes."""
    if self.mesh is None:
      return
    n = sharding.named_sharding(self.mesh, ("batch",)).num_devices
    require(
      batch_size % n == 0,
      field,
      f"{batch_size} is not divisible by the {n} devices of "
      f"the mesh's batch axes (--mesh={mesh_lib.format_mesh(self.mesh_spec)})",
    )


def default_workdir(name: str, *variant: Any) -> pathlib.Path:
  """``runs/<name>/<variant...>``: distinct per experiment, agent and task, so runs never share."""
  parts = [_safe(v) for v in variant if v not in (None, "")]
  return pathlib.Path("runs", name, *parts)


def _safe(part: Any) -> str:
  return re.sub(r"[^A-Za-z0-9._=-]+", "_", str(part)).strip("._") or "_"


def _mesh(name: str, mesh_axes: Sequence[str] | None):
  if not FLAGS.mesh:
    return None, {}
  import jax

  try:
    spec = mesh_lib.parse_mesh(FLAGS.mesh)
    unknown = [a for a in spec if mesh_axes is not None and a not in mesh_axes]
    if unknown:
      raise ConfigError(
        "mesh", f"axis {unknown[0]!r} is not used by {name}; allowed axes: {', '.join(mesh_axes)}"
      )
    mesh = mesh_lib.make_mesh(spec)
  except mesh_lib.MeshError as e:
    raise ConfigError(
      "mesh", f"{e} ({jax.device_count()} devices: {jax.devices()[0].platform})"
    ) from None
  return mesh, dict(mesh.shape)


def common(
  name: str,
  default_steps: int = 1000,
  default_log_every: int | None = None,
  default_ckpt_every: int | None = None,
  variant: Sequence[Any] = (),
  mesh_axes: Sequence[str] | None = None,
  unused: Sequence[str] = (),
  seeds: bool = False,
) -> Common:
  """Validates the shared flags (raises ``ConfigError`` naming the flag) without touching the disk.

  Args:
    variant: what makes this run distinct (agent, task, preset...): the default workdir is
      ``runs/<name>/<variant...>``.
    mesh_axes: axis names this experiment understands; others are rejected.
    unused: shared flags this experiment does not honour (e.g. ``("keep", "mesh")``): setting one
      is an error instead of being silently ignored.
    seeds: whether the program trains several ``--seeds`` in one program (vmapped); when not,
      ``--seeds`` with more than one seed is refused naming the flag.
  """
  for name_ in unused:
    if FLAGS[name_].present:
      raise ConfigError(name_, f"is not used by {name}; remove it")
  steps, log_every, ckpt_every = _schedule(default_steps, default_log_every, default_ckpt_every)
  run_seeds = _seeds(name, seeds)
  require(FLAGS.keep >= 1, "keep", f"must be >= 1, got {FLAGS.keep}")
  videos = FLAGS.videos
  require(videos is None or 0 <= videos <= 64, "videos", f"must be in [0, 64], got {videos}")
  mesh, spec = _mesh(name, mesh_axes)
  workdir = pathlib.Path(FLAGS.workdir) if FLAGS.workdir else default_workdir(name, *variant)
  require(
    not workdir.exists() or workdir.is_dir(), "workdir", f"{workdir} exists and is not a directory"
  )
  # A busy or read-only workdir is refused now, before the program builds or compiles anything.
  workdir_lib.check_free(workdir)
  workdir_lib.check_writable(workdir, "workdir")
  return Common(
    name=name,
    workdir=workdir,
    seed=run_seeds[0],
    mesh=mesh,
    mesh_spec=spec,
    steps=steps,
    log_every=log_every,
    ckpt_every=ckpt_every,
    keep=FLAGS.keep,
    profile=FLAGS.profile,
    seeds=run_seeds,
    tracker=FLAGS.tracker,
    videos=videos,
  )


def _schedule(default_steps, default_log_every, default_ckpt_every) -> tuple[int, int, int]:
  """``--steps --log_every --ckpt_every`` with the program's defaults, checked."""
  steps = default_steps if FLAGS.steps is None else FLAGS.steps
  require(1 <= steps <= INT32_MAX, "steps", f"must be in [1, {INT32_MAX}], got {steps}")
  log_every = (
    FLAGS.log_every
    if FLAGS.log_every is not None
    else max(default_log_every or max(1, min(100, steps // 20 or 1)), -(-steps // MAX_CHUNKS))
  )
  require(1 <= log_every <= INT32_MAX, "log_every", f"must be in [1, {INT32_MAX}], got {log_every}")
  ckpt_every = (
    FLAGS.ckpt_every
    if FLAGS.ckpt_every is not None
    else (default_ckpt_every if default_ckpt_every is not None else max(log_every, steps // 4))
  )
  require(
    0 <= ckpt_every <= INT32_MAX,
    "ckpt_every",
    f"must be in [0, {INT32_MAX}] (0 = only at the end), got {ckpt_every}",
  )
  check_chunks(steps, log_every=log_every, ckpt_every=ckpt_every)
  return steps, log_every, ckpt_every


def _seeds(name: str, several: bool) -> tuple[int, ...]:
  """``--seed`` / ``--seeds`` checked; several only where the program vmaps them."""
  from jaxlab.core import seeds as seeds_lib

  require(
    0 <= FLAGS.seed <= seeds_lib.MAX_SEED,
    "seed",
    f"must be in [0, {seeds_lib.MAX_SEED}], got {FLAGS.seed}",
  )
  if FLAGS.seeds is not None and "," in FLAGS.seeds and FLAGS["seed"].present:
    raise ConfigError("seed", "--seeds lists the seeds; drop --seed (or give --seeds a count)")
  run_seeds = seeds_lib.parse_seeds(FLAGS.seeds, FLAGS.seed)
  if len(run_seeds) > 1 and not several:
    raise ConfigError("seeds", f"{name} trains one seed per run; run one --seed at a time")
  return run_seeds


def prepare_workdir(path: str | pathlib.Path) -> pathlib.Path:
  """Creates the run directory; call only after every input was validated."""
  path = pathlib.Path(path)
  workdir_lib.create(path)
  return path


_OVERRIDE_ERRORS = (AttributeError, KeyError, ValueError, TypeError, flags.Error)


def _fail_override(name: str, default_config, error: Exception) -> NoReturn:
  """One line for a bad ``--<name>.x=...`` override: the unknown field and the fields there."""
  prefix = f"--{name}."
  for arg in sys.argv[1:]:
    if arg.startswith(prefix) and default_config is not None:
      path = arg[len(prefix) :].split("=", 1)[0]
      node = default_config
      for part in path.split("."):
        if not hasattr(node, "keys") or part not in node.keys():
          allowed = ", ".join(sorted(node.keys())) if hasattr(node, "keys") else "none"
          fail(f"{name}.{path}", f"unknown config field {part!r}; fields here: {allowed}")
        node = node[part]
  fail(name, str(error).strip("'\""))


_CONFIG_FLAGS: list[str] = []  # every --config-style flag, for the integer range check
# Config fields (``config.x.y``) and flags whose integers may pass 32 bits (counters of
# environment steps, byte sizes): a program adds the names it serves in 64-bit arithmetic.
WIDE_INTS: set[str] = set()


# Seeds may be unsigned 32-bit (numpy's, envs.ogbench_generate); common() narrows jax's to int32.
_INT_RANGES = {name: (-(2**31), 2**32 - 1) for name in ("seed", "data_seed")}


def _int_error(name: str, value: int) -> str | None:
  low, high = _INT_RANGES.get(name, (-INT32_MAX - 1, INT32_MAX))
  if name in WIDE_INTS or low <= value <= high:
    return None
  return f"{value} overflows a 32-bit integer (must be in [{low}, {high}])"


def _ints(value) -> list[int]:
  vals = value if isinstance(value, (list, tuple)) else [value]
  return [v for v in vals if isinstance(v, int) and not isinstance(v, bool)]


def check_int_flags() -> None:
  """Every integer flag the user typed fits 32 bits: arrays, seeds and counters are int32."""
  for name in list(FLAGS):
    flag = FLAGS[name]
    if name != flag.name or not flag.present:  # short names alias a flag checked by its name
      continue
    for v in _ints(flag.value):
      why = _int_error(name, v)
      if why:
        raise ConfigError(name, why)


def check_config_ints(config, prefix: str = "config") -> None:
  """Every integer of ``config`` (nested fields and tuple items) fits 32 bits."""
  from jaxlab.core.errors import _leaves

  for name, value in _leaves(config, prefix):
    for v in _ints(value):
      why = _int_error(name, v)
      if why:
        raise ConfigError(name, why)


def define_config(default_config, name: str = "config"):
  """``config_flags.DEFINE_config_dict`` whose bad overrides exit 2 naming the field.

  ml_collections applies ``--config.x=...`` overrides while the flag is defined (at import), so
  an unknown field would otherwise surface as a traceback.
  """
  from ml_collections import config_flags

  _CONFIG_FLAGS.append(name)
  try:
    return config_flags.DEFINE_config_dict(name, default_config)
  except _OVERRIDE_ERRORS as e:
    _fail_override(name, default_config, e)


def _load_config_file(spec: str):
  """``path.py[:arg]`` -> ``get_config(arg)``, as ml_collections loads it (for error messages)."""
  import importlib.util

  path, _, arg = spec.partition(":")
  try:
    module_spec = importlib.util.spec_from_file_location("_jaxlab_config", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module.get_config(arg) if arg else module.get_config()
  except Exception:  # the message then names the flag without listing fields
    return None


_CONFIG_FILE_FLAGS: list[str] = []


def _check_config_files() -> None:
  """ml_collections defers a config file's load error to first use; report it as a bad flag."""
  for name in _CONFIG_FILE_FLAGS:
    try:
      FLAGS[name].value.keys()
    except OSError as e:
      chosen = FLAGS[name].config_filename if hasattr(FLAGS[name], "config_filename") else ""
      why = str(e).strip().splitlines()[-1].strip()
      fail(name, f"cannot load the config file {chosen!r}: {why}")


def _check_configs() -> None:
  for name in _CONFIG_FLAGS:
    try:
      check_config_ints(FLAGS[name].value, name)
    except ConfigError as e:
      fail(e.field, e.message)


def config_path(program: str) -> str:
  """``configs/<method>.py`` beside the program file ``program`` (``experiments/<method>.py``:
  pass its ``__file__``).

  Programs run from a clone; the path is relative to the working directory when it lies inside it,
  so ``--help`` shows what a user types.
  """
  program = pathlib.Path(program).resolve()
  path = program.parent / "configs" / f"{program.stem}.py"
  try:
    return str(path.relative_to(pathlib.Path.cwd()))
  except ValueError:
    return str(path)


def define_config_file(default_path: str, name: str = "config"):
  """``config_flags.DEFINE_config_file`` (big_vision style: ``--config=path.py:arg``).

  Like :func:`define_config`, a bad ``--config=`` or ``--config.x=...`` exits 2 with one line.
  """
  from ml_collections import config_flags

  _CONFIG_FILE_FLAGS.append(name)
  _CONFIG_FLAGS.append(name)
  try:
    holder = config_flags.DEFINE_config_file(name, default=default_path, lock_config=True)
  except _OVERRIDE_ERRORS + (OSError, ImportError, SyntaxError) as e:
    chosen = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith(f"--{name}=")), None)
    _fail_override(name, _load_config_file(chosen or default_path), e)
  FLAGS[name].parser = _strict_parser(name)
  return holder


class BadConfigFile(Exception):
  """A ``--config=path.py[:arg]`` that does not give a config (not a ValueError: absl would
  re-word it; :func:`_flags_parser` prints it as one line)."""

  def __init__(self, flag: str, message: str):
    self.flag, self.message = flag, message
    super().__init__(f"{flag}: {message}")


def load_config_file(spec: str, flag: str = "config"):
  """``path.py[:arg]`` -> its ``get_config([arg])``, a ConfigDict; :class:`BadConfigFile` for any
  way that fails (no file, a syntax error, no ``get_config``, one that raises or returns
  something else), naming the file."""
  import importlib.machinery
  import importlib.util

  from ml_collections import config_dict

  path, has_arg, arg = spec.partition(":")
  if not path or not os.path.exists(path):
    raise BadConfigFile(flag, f"{path or spec!r}: no such file")
  if not os.path.isfile(path):
    raise BadConfigFile(flag, f"{path}: not a Python file (get_config() in a .py file)")
  try:
    loader = importlib.machinery.SourceFileLoader(f"{flag}_config", path)
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(module)
  except Exception as e:  # any error of the file's own code is the user's to fix
    raise BadConfigFile(flag, f"{path}: {_why(e)}") from None
  get_config = getattr(module, "get_config", None)
  if not callable(get_config):
    raise BadConfigFile(flag, f"{path}: defines no get_config() function")
  try:
    config = get_config(arg) if has_arg else get_config()
  except Exception as e:
    call = f"get_config({arg!r})" if has_arg else "get_config()"
    raise BadConfigFile(flag, f"{path}: {call} raised {_why(e)}") from None
  if not isinstance(config, config_dict.ConfigDict):
    raise BadConfigFile(
      flag,
      f"{path}: get_config() returned {type(config).__name__}, not an ml_collections ConfigDict",
    )
  return config


def _why(e: BaseException) -> str:
  text = str(e).strip().splitlines()
  return f"{type(e).__name__}: {text[-1].strip()}" if text else type(e).__name__


def _strict_parser(name: str):
  """ml_collections' parser, but a file that does not load is refused when the flags are parsed
  (ml_collections defers some errors to the config's first use and lets others escape)."""
  from ml_collections.config_flags import config_flags as cf

  class Parser(cf.ConfigFileFlagParser):
    def parse(self, path):
      config = load_config_file(path, self.name)
      if self._lock_config:
        config.lock()
      return config

  return Parser(name)


def _flags_parser(argv: list[str]) -> list[str]:
  """absl's parser, but a bad flag exits 2 with one line instead of 1 with the whole usage."""
  try:
    rest = FLAGS(argv)
    check_int_flags()
    return rest
  except BadConfigFile as e:
    fail(e.flag, e.message)
  except ConfigError as e:
    fail(e.field, e.message)
  except flags.UnrecognizedFlagError as e:
    fail(e.flagname, "unknown flag (--help lists them)")
  except flags.Error as e:
    fail(*(_rejected(argv) or ("flags", _why(e))))


def _rejected(argv: list[str]) -> tuple[str, str] | None:
  """The first ``--name=value`` of ``argv`` that its flag's own parser refuses -> ``(flag,
  message)``, the message worded from the flag's type (absl's error text is not parsed)."""
  for arg in argv[1:]:
    name, eq, value = arg[2:].partition("=")
    if not (arg.startswith("--") and eq) or name not in FLAGS:
      continue
    flag = FLAGS[name]
    try:
      flag.parser.parse(value)
    except BadConfigFile as e:
      return e.flag, e.message
    except ConfigError as e:
      return e.field, e.message
    except Exception as e:  # whatever the flag's parser raises is the reason
      return name, _allowed(flag, value, e)
  return None


def _allowed(flag, value: str, error: Exception) -> str:
  parser, default = flag.parser, flag.default if flag.default is not None else flag.value
  choices = getattr(parser, "enum_values", None)
  if choices:
    return f"got {value!r}; allowed: {', '.join(choices)}"
  if isinstance(parser, flags.BooleanParser) or isinstance(default, bool):
    return f"must be true or false, got {value!r}"
  if isinstance(parser, flags.IntegerParser) or isinstance(default, int):
    return f"must be an integer, got {value!r}"
  if isinstance(parser, flags.FloatParser) or isinstance(default, float):
    return f"must be a number, got {value!r}"
  return f"{_why(error)} (got {value!r})"


def _background_line(where: str, exc_type, exc_value) -> None:
  print(
    f"warning: {where}: {getattr(exc_type, '__name__', exc_type)}: {exc_value}"[:300],
    file=sys.stderr,
    flush=True,
  )


def _thread_failure(args) -> None:
  """A failing background thread (e.g. a checkpoint writer on a full disk) logs one line; the
  main thread's error is what the user acts on."""
  name = args.thread.name if args.thread is not None else "?"
  _background_line(f"background thread {name}", args.exc_type, args.exc_value)


def _quiet_background_reports() -> None:
  """Every error reported outside the main thread's control flow becomes one warning line.

  Three routes print tracebacks that are not the run's error: ``threading.excepthook`` (a Python
  thread), ``sys.excepthook`` called from a thread that is not the main one (native code such as
  tensorstore's future callbacks calls ``PyErr_Print`` when asyncio's loop is already closed), and
  ``sys.unraisablehook`` (errors in finalizers and in ``_thread`` threads). Printed line by line,
  such a traceback interleaves with the main thread's one-line error on a full disk. The main
  thread's own uncaught errors keep their full traceback.
  """
  threading.excepthook = _thread_failure
  main_hook = sys.excepthook

  def excepthook(exc_type, exc_value, tb):
    if threading.current_thread() is threading.main_thread():
      return main_hook(exc_type, exc_value, tb)
    _background_line(f"background thread {threading.current_thread().name}", exc_type, exc_value)

  def unraisable(args):
    where = args.err_msg or "Exception ignored in"
    if args.object is not None:
      where = f"{where}: {args.object!r}"[:120]
    _background_line(where, args.exc_type, args.exc_value)

  sys.excepthook = excepthook
  sys.unraisablehook = unraisable


_HELP_ARGS = ("--help", "-h", "-?", "--helpshort")
_LIBRARY_MODULES = ("absl", "orbax", "jax", "ml_collections", "etils", "tensorflow", "jaxlab")


def _flag_lines(flag) -> list[str]:
  """``--name=default`` and the help text, wrapped at 100 columns without breaking names."""
  head = f"  --{flag.name}"
  if flag.default is not None:
    head += "=" + flag.default_as_str.strip("'")
  body = textwrap.wrap(
    flag.help or "",
    96,
    initial_indent="      ",
    subsequent_indent="      ",
    break_on_hyphens=False,
    break_long_words=False,
  )
  return [head, *body]


def help_text(argv: Sequence[str]) -> str:
  """A program's ``--help``: its docstring verbatim, its own flags, the shared flags with defaults,
  and the ``--config`` the run with these arguments would use."""
  main_doc = (getattr(sys.modules.get("__main__"), "__doc__", None) or "").strip("\n")
  by_module = FLAGS.flags_by_module_dict()
  own = [
    f
    for module, fl in by_module.items()
    if module.split(".")[0] not in _LIBRARY_MODULES
    for f in fl
  ]
  # A program names the shared flags it refuses in UNUSED_FLAGS; --help lists only the others.
  unused = tuple(getattr(sys.modules.get("__main__"), "UNUSED_FLAGS", ()))
  shared = [
    f
    for f in by_module.get("jaxlab.core.experiment", [])
    if f.name != "config" and f.name not in unused
  ]
  out = [main_doc, ""]
  if own:
    out += ["Flags of this program:"] + [line for f in own for line in _flag_lines(f)] + [""]
  out += ["Shared flags (accepted by this program):"]
  out += [line for f in shared for line in _flag_lines(f)] + [""]
  if unused:
    names = ", ".join(f"--{n}" for n in unused)
    out += textwrap.wrap(f"Not used by this program (refused with exit 2): {names}.", 100) + [""]
  if "config" in FLAGS:
    cfg = FLAGS["config"]
    rest = [a for a in argv[1:] if a not in _HELP_ARGS]
    try:
      FLAGS(argv[:1] + rest, known_only=True)
      value = cfg.value
    except Exception as e:  # the help still prints; the error is what a run would report
      value = f"<cannot build the config: {str(e).strip().splitlines()[-1]}>"
    from ml_collections.config_flags import config_flags as cf

    source = cfg.config_filename if isinstance(cfg.parser, cf.ConfigFileFlagParser) else None
    how = (
      f"--config={source}:<preset> (presets: that file's docstring) or --config.<field>=<value>"
      if source
      else "--config.<field>=<value>"
    )
    out += [f"--config: this run's configuration; change it with {how}:"]
    out += ["  " + line for line in str(value).rstrip().splitlines()] + [""]
  elif note := getattr(sys.modules.get("__main__"), "CONFIG_NOTE", None):
    out += textwrap.wrap(f"--config: none; {note}", 100) + [""]
  if re.search(r"\b\d+(-\d+)? ?(s|min)\b", main_doc):
    out += ["Times above: wall time on 2 CPU cores; cores busy with other work take longer."]
  out += ["All absl and library flags: --helpfull."]
  return "\n".join(out)


def run(main) -> None:
  """``absl.app.run`` with jaxlab's flag-error convention (exit 2, one clear line)."""

  _quiet_background_reports()
  if any(a in _HELP_ARGS for a in sys.argv[1:]):
    try:
      print(help_text(sys.argv), flush=True)
    except BrokenPipeError:  # `--help | head`
      os._exit(0)
    sys.exit(0)

  def _main(argv):
    if not any(a.startswith(("--verbosity", "-v")) for a in sys.argv[1:]):
      # orbax and absl log every checkpoint at INFO; a run's console is the bar and results.
      from absl import logging

      logging.set_verbosity(logging.WARNING)
    from jaxlab.core import distributed, watchdog

    if len(argv) > 1:
      fail(argv[1], f"unexpected positional argument {argv[1]!r}; flags look like --name=value")
    _check_config_files()
    _check_configs()
    try:
      distributed.initialize(FLAGS.coordinator_address, FLAGS.num_processes, FLAGS.process_id)
    except ValueError as e:
      fail("coordinator_address", str(e))
    watchdog.start()
    try:
      enable_compile_cache(FLAGS.compile_cache)
      return main(argv)
    except ConfigError as e:
      fail(e.field, e.message)
    except NonFiniteError as e:
      print(f"error: {e}", file=sys.stderr, flush=True)
      sys.exit(3)
    except OSError as e:
      if e.errno != errno.ENOSPC:
        raise
      print(
        f"error: disk full writing {e.filename or 'the workdir'}; the last complete "
        "checkpoint is kept",
        file=sys.stderr,
        flush=True,
      )
      sys.stdout.flush()
      os._exit(1)  # writers' exit hooks would only fail again on the full disk

  app.run(_main, flags_parser=_flags_parser)
