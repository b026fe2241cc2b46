"""A run's directory: one writer at a time, and a resume only with the config it was started with.

``session(workdir, config)`` creates the directory, takes an exclusive ``flock`` on
``<workdir>/.lock`` (released on exit, and by the kernel when the process dies, so a dead run never
leaves a stale lock), compares ``config`` with the ``config.json`` already there, and only then
writes ``config.json``.

A run's seeds are part of what it is: inside ``with identity(seeds):`` every ``session`` records
them in ``config.json`` (``seed``, or ``seeds`` for several), so a resume or re-run with another
seed is refused like any other config change.

Files written outside a workdir (``--out``, study tables) go through :func:`output_lock` (one
writer per folder, the same ``flock``) and :func:`write_atomic` (a reader never sees half a file).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pathlib
from collections.abc import Iterator, Sequence
from typing import Any

import jax

from jaxlab.core import metrics
from jaxlab.core.errors import ConfigError

LOCK = ".lock"
_IDENTITY: dict[str, Any] = {}


@contextlib.contextmanager
def identity(seeds: Sequence[int]) -> Iterator[None]:
  """Inside it, every ``session`` with a config records ``seeds`` as part of it: ``seed`` for one,
  ``seeds`` for several (the keys the programs that record their seeds themselves use)."""
  seeds = [int(s) for s in seeds]
  before = dict(_IDENTITY)
  _IDENTITY.clear()
  _IDENTITY.update({"seed": seeds[0]} if len(seeds) == 1 else {"seeds": seeds})
  try:
    yield
  finally:
    _IDENTITY.clear()
    _IDENTITY.update(before)


def with_identity(config: Any) -> Any:
  """``config`` as recorded: its JSON form plus the seeds of the enclosing :func:`identity`."""
  if config is None or not _IDENTITY:
    return config
  rec = json.loads(json.dumps(metrics.jsonable(config)))
  return {**rec, **_IDENTITY} if isinstance(rec, dict) else {"config": rec, **_IDENTITY}


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
  if isinstance(d, dict):
    out = {}
    for k, v in d.items():
      out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    return out
  return {prefix: d}


def config_diff(old: Any, new: Any) -> list[str]:
  """Human-readable ``field: old -> new`` lines between two JSON-able configs."""
  a, b = _flatten(old), _flatten(new)
  return [
    f"{k}: {a.get(k, '<absent>')} -> {b.get(k, '<absent>')}"
    for k in sorted(set(a) | set(b))
    if a.get(k, "<absent>") != b.get(k, "<absent>")
  ]


def check_config(path: pathlib.Path, config: Any) -> None:
  """Raises ``ConfigError('workdir', ...)`` when ``path/config.json`` records another config."""
  cfg_path = path / "config.json"
  if config is None or not cfg_path.exists():
    return
  try:
    old = json.loads(cfg_path.read_text())
  except (OSError, ValueError) as e:
    raise ConfigError("workdir", f"{cfg_path} is unreadable ({e}); use a new --workdir") from e
  # Compare as JSON would store it (tuples -> lists, NaN -> null).
  diff = config_diff(old, json.loads(json.dumps(metrics.jsonable(config))))
  if diff:
    shown = "; ".join(diff[:4]) + (f"; and {len(diff) - 4} more" if len(diff) > 4 else "")
    raise ConfigError(
      "workdir",
      f"{path} holds a run with another config ({shown}); resume it "
      "with the same settings or choose a new --workdir",
    )


def _busy(path: pathlib.Path, f) -> ConfigError:
  f.seek(0)
  owner = f.read().strip() or "another process"
  f.close()
  return ConfigError(
    "workdir", f"{path} is in use by pid {owner}; wait for it, or choose another --workdir"
  )


def check_free(path: str | os.PathLike | None) -> None:
  """``ConfigError('workdir')`` if another process holds ``path`` now; writes nothing.

  For programs that build for a while before ``session`` takes the lock (environments,
  compilation): a busy workdir is then refused first.
  """
  if path is None or not (pathlib.Path(path) / LOCK).exists():
    return
  f = open(pathlib.Path(path) / LOCK)
  try:
    fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
  except OSError:
    raise _busy(pathlib.Path(path), f) from None
  fcntl.flock(f, fcntl.LOCK_UN)
  f.close()


def _lock(path: pathlib.Path):
  f = open(path / LOCK, "a+")
  try:
    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except OSError:
    raise _busy(path, f) from None
  f.seek(0)
  f.truncate()
  f.write(str(os.getpid()))
  f.flush()
  return f


def create(path: pathlib.Path) -> None:
  try:
    path.mkdir(parents=True, exist_ok=True)
  except OSError as e:
    raise ConfigError("workdir", f"cannot create {path}: {e.strerror or e}") from e
  if not os.access(path, os.W_OK):
    raise ConfigError("workdir", f"{path} is not writable")


@contextlib.contextmanager
def session(path: pathlib.Path | None, config: Any = None) -> Iterator[pathlib.Path | None]:
  """Creates, locks and records ``path`` for one run (process 0 locks and writes)."""
  if path is None:
    yield None
    return
  main = jax.process_index() == 0
  config = with_identity(config)
  create(path)
  lock = _lock(path) if main else None
  try:
    check_config(path, config)
    if main and config is not None:
      metrics.write_json(path / "config.json", config)
    yield path
  finally:
    if lock is not None:
      lock.seek(0)
      lock.truncate()  # no pid left behind: a re-run of a finished run changes no byte
      fcntl.flock(lock, fcntl.LOCK_UN)
      lock.close()


def finished(path: pathlib.Path | None) -> dict | None:
  """The record of a run that already finished in ``path`` (its ``summary.json``), else None.

  Call it inside :func:`session` (after the config check): a program that does not go through
  ``runtime.train`` re-run into a finished workdir reports this record and writes nothing.
  """
  if path is None or not (path / "summary.json").exists():
    return None
  try:
    return metrics.read_json(path / "summary.json")
  except (OSError, ValueError) as e:
    raise ConfigError(
      "workdir", f"{path / 'summary.json'} is unreadable ({e}); use a new --workdir"
    ) from e


def check_writable(path: str | os.PathLike, field: str = "workdir") -> pathlib.Path:
  """Raises ``ConfigError(field)`` unless ``path`` could be created and written, writing nothing
  (checked before a long computation whose results go there)."""
  path = pathlib.Path(path).absolute()
  probe = path
  while not probe.exists():
    probe = probe.parent
  if not probe.is_dir():
    raise ConfigError(field, f"{probe} exists and is not a directory")
  if not os.access(probe, os.W_OK | os.X_OK):
    raise ConfigError(field, f"{probe} is not writable")
  return path


@contextlib.contextmanager
def output_lock(path: str | os.PathLike, field: str) -> Iterator[pathlib.Path]:
  """An exclusive ``flock`` on the existing folder ``path`` while a program computes and writes
  files there that lie outside a workdir: a second writer gets ``ConfigError(field)``.

  The folder itself is locked, so no lock file is left among the outputs (a results folder is
  committed); the kernel releases it when the holder dies.
  """
  path = pathlib.Path(path)
  try:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
  except OSError as e:
    raise ConfigError(field, f"cannot open {path}: {e.strerror or e}") from e
  try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except OSError:
    os.close(fd)
    raise ConfigError(
      field, f"another process is writing into {path}; wait for it, or choose another --{field}"
    ) from None
  try:
    yield path
  finally:
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


def write_atomic(path: str | os.PathLike, text: str) -> pathlib.Path:
  """Writes ``text`` to ``path`` through a temporary file and a rename, and only when it changes
  (an unchanged file keeps its bytes and its time stamp)."""
  path = pathlib.Path(path)
  if path.is_file() and path.read_text() == text:
    return path
  tmp = path.with_name(f".{path.name}.tmp")
  tmp.write_text(text)
  os.replace(tmp, path)
  return path
