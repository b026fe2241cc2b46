"""Experiment conventions: shared absl flags, validation that exits 2, workdirs, summaries, plots.

Every ``experiments/*.py`` file looks like::

    from jaxlab.core import experiment
    _CONFIG = config_flags.DEFINE_config_dict("config", get_config())

    def main(argv):
      run = experiment.common("uhm", default_steps=2000)   # validates; exits 2 on bad input
      ...                                                   # validate the rest, then
      experiment.prepare_workdir(run.workdir)               # only now touch the disk

    if __name__ == "__main__":
      experiment.run(main)

Shared flags: ``--workdir --seed --mesh --steps --log_every --ckpt_every``.
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys
from typing import Any, Iterable, Mapping, NoReturn, Sequence

import numpy as np
from absl import app, flags

from jaxlab.core import mesh as mesh_lib
from jaxlab.core.runtime import write_json

FLAGS = flags.FLAGS

flags.DEFINE_string("workdir", None, "Run directory (default: runs/<experiment>). An existing "
                    "workdir with checkpoints is resumed.")
flags.DEFINE_integer("seed", 0, "Base PRNG seed.")
flags.DEFINE_string("mesh", "", "Device mesh, e.g. 'data:2,fsdp:-1' (-1 = the rest). Empty: no "
                    "mesh (single device).")
flags.DEFINE_integer("steps", None, "Number of training steps (default: the experiment's).")
flags.DEFINE_integer("log_every", None, "Steps per jitted chunk / metrics row (default: the "
                     "experiment's).")
flags.DEFINE_integer("keep", 3, "Checkpoints kept in the workdir (older ones are deleted).")
flags.DEFINE_string("coordinator_address", None, "Multi-host GPU: host:port of process 0 "
                    "(TPU pods and SLURM jobs are detected without it).")
flags.DEFINE_integer("num_processes", None, "Multi-host GPU: number of processes.")
flags.DEFINE_integer("process_id", None, "Multi-host GPU: this process's index.")
flags.DEFINE_integer("ckpt_every", None, "Steps between checkpoints (0 = only at the end; default: "
                     "the experiment's).")


class ExperimentError(ValueError):
  """A bad flag or config value; carries the flag name for the one-line message."""

  def __init__(self, flag: str, message: str):
    super().__init__(f"--{flag.lstrip('-')}: {message}")
    self.flag = flag


def fail(flag: str, message: str) -> NoReturn:
  """Prints ``error: --flag: message`` and exits with status 2."""
  print(f"error: --{flag.lstrip('-')}: {message}", file=sys.stderr, flush=True)
  sys.exit(2)


def check_choice(flag: str, value: Any, allowed: Iterable[Any]) -> Any:
  allowed = list(allowed)
  if value not in allowed:
    fail(flag, f"got {value!r}; allowed: {', '.join(map(str, allowed))}")
  return value


def check_list(flag: str, values: str | Sequence[str], allowed: Iterable[str]) -> list[str]:
  """Comma-separated list whose every element is in ``allowed``."""
  items = [v.strip() for v in values.split(",")] if isinstance(values, str) else list(values)
  items = [v for v in items if v]
  allowed = list(allowed)
  bad = [v for v in items if v not in allowed]
  if bad or not items:
    fail(flag, f"got {','.join(bad) or 'nothing'}; allowed: {', '.join(allowed)}")
  return items


def check_positive(flag: str, value: float, allow_zero: bool = False) -> float:
  if value is None or value < 0 or (value == 0 and not allow_zero):
    fail(flag, f"must be {'>= 0' if allow_zero else '>= 1'}, got {value}")
  return value


def check_config(config, checks: Mapping[str, Any]) -> None:
  """Validates ``config`` fields: a check is a list of allowed values, ``'positive'``,
  ``'nonneg'``, ``'prob'`` (in [0, 1]) or a callable returning an error string (or None)."""
  for field, check in checks.items():
    value = config
    for part in field.split("."):
      value = value[part]
    flag = f"config.{field}"
    if isinstance(check, (list, tuple, set)):
      check_choice(flag, value, check)
    elif check == "positive":
      if not value > 0:
        fail(flag, f"must be > 0, got {value}")
    elif check == "nonneg":
      if not value >= 0:
        fail(flag, f"must be >= 0, got {value}")
    elif check == "prob":
      if not 0 <= value <= 1:
        fail(flag, f"must be in [0, 1], got {value}")
    elif callable(check):
      msg = check(value)
      if msg:
        fail(flag, msg)


@dataclasses.dataclass(frozen=True)
class Common:
  """The validated shared flags of a run."""
  name: str
  workdir: pathlib.Path
  seed: int
  mesh: Any            # jax.sharding.Mesh or None
  mesh_spec: dict
  steps: int
  log_every: int
  ckpt_every: int
  keep: int = 3


def common(name: str, default_steps: int = 1000, default_log_every: int | None = None,
           default_ckpt_every: int | None = None, default_workdir: str | None = None,
           mesh_axes: Sequence[str] | None = None) -> Common:
  """Validates the shared flags (exits 2 naming the flag) without touching the disk.

  Args:
    mesh_axes: axis names this experiment understands; others are rejected.
  """
  steps = default_steps if FLAGS.steps is None else FLAGS.steps
  if steps < 1:
    fail("steps", f"must be >= 1, got {steps}")
  log_every = FLAGS.log_every if FLAGS.log_every is not None else (
      default_log_every or max(1, min(100, steps // 20 or 1)))
  if log_every < 1:
    fail("log_every", f"must be >= 1, got {log_every}")
  ckpt_every = FLAGS.ckpt_every if FLAGS.ckpt_every is not None else (
      default_ckpt_every if default_ckpt_every is not None else max(log_every, steps // 4))
  if ckpt_every < 0:
    fail("ckpt_every", f"must be >= 0 (0 = only at the end), got {ckpt_every}")
  if FLAGS.seed < 0:
    fail("seed", f"must be >= 0, got {FLAGS.seed}")
  if FLAGS.keep < 1:
    fail("keep", f"must be >= 1, got {FLAGS.keep}")

  mesh = None
  spec: dict = {}
  if FLAGS.mesh:
    import jax
    try:
      spec = mesh_lib.parse_mesh(FLAGS.mesh)
      if mesh_axes is not None:
        unknown = [a for a in spec if a not in mesh_axes]
        if unknown:
          fail("mesh", f"axis {unknown[0]!r} is not used by {name}; allowed axes: "
               f"{', '.join(mesh_axes)}")
      mesh = mesh_lib.make_mesh(spec)
      spec = dict(mesh.shape)
    except mesh_lib.MeshError as e:
      fail("mesh", f"{e} ({jax.device_count()} devices: {jax.devices()[0].platform})")

  workdir = pathlib.Path(FLAGS.workdir or default_workdir or f"runs/{name}")
  if workdir.exists() and not workdir.is_dir():
    fail("workdir", f"{workdir} exists and is not a directory")
  return Common(name=name, workdir=workdir, seed=FLAGS.seed, mesh=mesh, mesh_spec=spec,
                steps=steps, log_every=log_every, ckpt_every=ckpt_every, keep=FLAGS.keep)


def prepare_workdir(path: str | pathlib.Path) -> pathlib.Path:
  """Creates the run directory; call only after every input was validated."""
  path = pathlib.Path(path)
  try:
    path.mkdir(parents=True, exist_ok=True)
  except OSError as e:
    fail("workdir", f"cannot create {path}: {e}")
  return path


def write_summary(workdir: str | pathlib.Path, summary: Mapping[str, Any]) -> pathlib.Path:
  path = pathlib.Path(workdir) / "summary.json"
  write_json(path, dict(summary))
  return path


def plot_curves(path: str | pathlib.Path, curves: Mapping[str, tuple], xlabel: str, ylabel: str,
                logx: bool = False, logy: bool = False, title: str = "") -> pathlib.Path:
  """Line plot of ``{label: (xs, ys)}`` or ``{label: (xs, ys, lo, hi)}`` (with a band) to PNG."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, ax = plt.subplots(figsize=(6, 4))
  for label, c in curves.items():
    xs, ys = np.asarray(c[0]), np.asarray(c[1])
    (line,) = ax.plot(xs, ys, label=label)
    if len(c) == 4:
      ax.fill_between(xs, np.asarray(c[2]), np.asarray(c[3]), color=line.get_color(), alpha=0.2)
  if logx:
    ax.set_xscale("log")
  if logy:
    ax.set_yscale("log")
  ax.set_xlabel(xlabel)
  ax.set_ylabel(ylabel)
  if title:
    ax.set_title(title)
  ax.grid(True, which="both", alpha=0.3)
  ax.legend(fontsize=8)
  fig.tight_layout()
  path = pathlib.Path(path)
  fig.savefig(path, dpi=120)
  plt.close(fig)
  return path


def define_config(default_config, name: str = "config"):
  """``config_flags.DEFINE_config_dict`` whose bad overrides exit 2 naming the field.

  ml_collections applies ``--config.x=...`` overrides while the flag is defined (at import), so
  an unknown field would otherwise surface as a traceback.
  """
  from ml_collections import config_flags
  try:
    return config_flags.DEFINE_config_dict(name, default_config)
  except (AttributeError, KeyError, ValueError, TypeError, flags.Error) as e:
    prefix = f"--{name}."
    for arg in sys.argv[1:]:
      if arg.startswith(prefix):
        path = arg[len(prefix):].split("=", 1)[0]
        node = default_config
        for part in path.split("."):
          if not hasattr(node, "keys") or part not in node.keys():
            allowed = ", ".join(sorted(node.keys())) if hasattr(node, "keys") else "none"
            fail(f"{name}.{path}", f"unknown config field {part!r}; fields here: {allowed}")
          node = node[part]
    fail(name, str(e).strip("'\""))


def _flags_parser(argv: list[str]) -> list[str]:
  """absl's parser, but a bad flag exits 2 with one line instead of 1 with the whole usage."""
  try:
    return FLAGS(argv)
  except flags.Error as e:
    print(f"error: {e}", file=sys.stderr, flush=True)
    sys.exit(2)


def run(main) -> None:
  """``absl.app.run`` with jaxlab's flag-error convention (exit 2, one clear line)."""
  def _main(argv):
    if not any(a.startswith(("--verbosity", "-v")) for a in sys.argv[1:]):
      # orbax and absl log every checkpoint at INFO; a run's console is the bar and results.
      from absl import logging
      logging.set_verbosity(logging.WARNING)
    from jaxlab.core import distributed
    try:
      distributed.initialize(FLAGS.coordinator_address, FLAGS.num_processes, FLAGS.process_id)
    except ValueError as e:
      fail("coordinator_address", str(e))
    if len(argv) > 1:
      fail(argv[1], f"unexpected positional argument {argv[1]!r}; flags look like --name=value")
    try:
      return main(argv)
    except ExperimentError as e:
      fail(e.flag, str(e).split(": ", 1)[1])
  app.run(_main, flags_parser=_flags_parser)
