"""Checkpoints of a run: orbax manager under ``<workdir>/checkpoints``, restore, SIGTERM handling.

Saves are atomic (orbax writes a tmp dir, then renames), so a kill at any moment leaves the
previous checkpoint intact. A manager made with ``async_save=True`` (the training runtime's) writes
in orbax's background thread: :func:`save` with ``wait=False`` returns once the arrays are copied to
the host, the files are written while the next chunk trains, and :func:`wait` (or the next save, or
closing the manager) blocks until they are renamed into place. On SIGTERM the loop finishes its
chunk, saves, waits, and raises :class:`Preempted` (exit 143) so schedulers requeue the job.

Every checkpoint carries a digest of its arrays as written (:func:`digest`), an orbax JSON item
``digest`` saved in the same atomic step folder as the state, so a checkpoint never exists without
its record. A restore recomputes it from the restored arrays: a flipped bit that orbax and
tensorstore read back without complaint (zstd keeps poorly compressible float bytes nearly raw) is
caught there. A step folder orbax cannot read (truncated or emptied file, bad metadata) fails the
same way. :func:`restore_latest` then resumes from the newest checkpoint that verifies, with one
warning line, and sets the bad one aside as ``checkpoints/corrupt-<step>`` (orbax lists only
numeric step folders, so it neither prunes that folder under ``keep`` nor lets a later save at the
same step replace it): a checkpoint a user might still want is never deleted. Checkpoints written
before digests existed restore unverified, as before.

With several processes only process 0 writes the record, so arrays sharded over processes (not
replicated) are listed as skipped, not digested; every process verifies the rest from the same
files and reaches the same verdict, and process 0 alone renames, between two barriers.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import hashlib
import json
import os
import pathlib
import signal
import sys
import threading
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from absl import logging

from jaxlab.core.errors import ConfigError

PyTree = Any
CKPT_DIR = "checkpoints"
SIGTERM_EXIT_CODE = 143
DIGEST_ITEM = "digest"  # the orbax item beside "state" that holds the record of its arrays
CORRUPT_PREFIX = "corrupt-"  # a checkpoint that failed verification, set aside, never deleted


class Preempted(SystemExit):
  """Raised after a SIGTERM-triggered checkpoint; exit code 143 tells schedulers to requeue."""

  def __init__(self, step: int):
    super().__init__(SIGTERM_EXIT_CODE)
    self.step = step


def manager(
  workdir: str | os.PathLike, keep: int = 3, *, read_only: bool = False, async_save: bool = False
) -> ocp.CheckpointManager:
  """Orbax manager under ``<workdir>/checkpoints``; saves are atomic (tmp dir, then rename).

  ``read_only``: for commands that only read a run (evaluation, generation): creates nothing,
  deletes nothing, saves nothing. ``async_save``: orbax's asynchronous checkpointing, the files
  written in a background thread (module docstring; :func:`save` with ``wait=False``).
  """
  path = pathlib.Path(workdir).absolute() / CKPT_DIR
  opts = ocp.CheckpointManagerOptions(
    max_to_keep=None if read_only else keep,
    create=not read_only,
    read_only=read_only,
    save_interval_steps=0 if read_only else 1,
    enable_async_checkpointing=async_save and not read_only,
  )
  # orbax warns that a read-only manager is read-only, and logs an error for a step whose
  # _CHECKPOINT_METADATA (timestamps) is unreadable; restores verify the arrays themselves
  with _quiet():
    return ocp.CheckpointManager(path, options=opts)


def _abstract(tree: PyTree) -> PyTree:
  return jax.tree.map(ocp.utils.to_shape_dtype_struct, tree)


class CorruptCheckpoint(ConfigError):
  """A checkpoint that fails verification: orbax cannot read it, or its arrays fail their digest.

  ``reason`` completes "checkpoint at step N in DIR ...", e.g. ``fails its digest (array w)``.
  """

  def __init__(self, directory, step: int, reason: str):
    super().__init__("workdir", f"checkpoint at step {step} in {directory} {reason}")
    self.step, self.reason = step, reason


def _host(leaf) -> np.ndarray | str:
  """The host value of one leaf as written, or why it is not digested."""
  if isinstance(leaf, jax.Array):
    if jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key):
      leaf = jax.random.key_data(leaf)
    if not leaf.is_fully_addressable:
      if not leaf.is_fully_replicated:
        # each process holds only its shards and only process 0 writes the record
        return "spans processes"
      leaf = leaf.addressable_data(0)
  return np.asarray(leaf)


def _leaf_record(a: np.ndarray) -> list:
  h = hashlib.blake2b(np.ascontiguousarray(a).tobytes(), digest_size=16)
  return [str(a.dtype), list(a.shape), h.hexdigest()]


def _seal(body: dict) -> str:
  """The digest of the record itself: a flipped bit in it reads as a damaged record, not as a
  corrupt array."""
  text = json.dumps(body, sort_keys=True, separators=(",", ":"))
  return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def digest(tree: PyTree) -> dict:
  """The record of ``tree`` as written: per leaf, in tree order, its path, dtype, shape and the
  blake2b of its host bytes. Arrays that span several processes and are not replicated are listed
  under ``skipped`` (process 0, the only writer, does not hold them)."""
  arrays, skipped = [], []
  for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
    name = jax.tree_util.keystr(path, simple=True, separator="/")
    host = _host(leaf)
    if isinstance(host, str):
      skipped.append([name, host])
    else:
      arrays.append([name, *_leaf_record(host)])
  body = {"version": 1, "arrays": arrays, "skipped": skipped}
  return {**body, "seal": _seal(body)}


def _mismatch(record: dict, tree: PyTree) -> str | None:
  """Why ``tree`` (as restored) is not what ``record`` describes; None when it is."""
  if record.pop("seal", None) != _seal(record):
    return "has a damaged digest record"
  restored = {
    jax.tree_util.keystr(path, simple=True, separator="/"): leaf
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]
  }
  for name, dtype, shape, want in record["arrays"]:
    if name not in restored:  # a partial restore reads only some arrays
      continue
    host = _host(restored[name])
    if isinstance(host, str):
      continue
    # a Python-scalar leaf comes back as int64/float64; the value is compared as written
    if str(host.dtype) != dtype:
      host = host.astype(jnp.dtype(dtype))
    if list(host.shape) != shape or _leaf_record(host)[2] != want:
      return f"fails its digest (array {name})"
  return None


def _has_digest(mngr: ocp.CheckpointManager, step: int) -> bool:
  return (pathlib.Path(mngr.directory) / str(step) / DIGEST_ITEM).is_dir()


@contextlib.contextmanager
def _quiet():
  """Silences orbax's and tensorstore's own reports of a failed read (absl errors, exceptions
  left in orbax's coroutines): the failure reaches the user once, as one line of jaxlab's."""
  verbosity, hook = logging.get_verbosity(), sys.unraisablehook
  logging.set_verbosity(logging.FATAL)
  sys.unraisablehook = lambda unraisable: None
  try:
    yield
  finally:
    logging.set_verbosity(verbosity)
    sys.unraisablehook = hook


def _first_line(e: BaseException) -> str:
  text = str(e).strip()
  if "See full TensorStore details" in text and e.__cause__ is not None:
    return _first_line(e.__cause__)  # orbax's wrapper; tensorstore's cause says what is wrong
  return f"{type(e).__name__}: {text.splitlines()[0][:200]}" if text else type(e).__name__


def restore_with(mngr: ocp.CheckpointManager, like: PyTree, step: int) -> PyTree:
  """Checkpoint ``step`` in the structure/shardings of ``like``, verified against its digest.

  A checkpoint orbax cannot read into ``like`` (a corrupt file or another run's structure) or whose
  arrays fail their digest raises :class:`CorruptCheckpoint` (a :class:`ConfigError`, one line).
  """
  args = {"state": ocp.args.StandardRestore(_abstract(like))}
  with _quiet():
    try:
      restored = mngr.restore(step, args=ocp.args.Composite(**args))["state"]
    except Exception as e:  # orbax raises many types, with very long messages
      gc.collect()  # orbax's abandoned read coroutines report themselves when collected
      reason = f"cannot be restored ({_first_line(e)})"
      raise CorruptCheckpoint(mngr.directory, step, reason) from e
    verify(mngr, step, restored)
  return jax.tree.map(_like_type, restored, like)


def verify(mngr: ocp.CheckpointManager, step: int, restored: PyTree) -> None:
  """Raises :class:`CorruptCheckpoint` unless the arrays of ``restored`` (all of a checkpoint's
  ``state`` item, or a partial restore of some of them, under the same paths) match the digest
  written with checkpoint ``step``; a checkpoint written without a digest is not checked."""
  if not _has_digest(mngr, step):
    return
  try:
    restore_args = ocp.args.Composite(**{DIGEST_ITEM: ocp.args.JsonRestore()})
    record = dict(mngr.restore(step, args=restore_args)[DIGEST_ITEM])
    reason = _mismatch(record, restored)
  except Exception:  # unreadable JSON, or a record of another shape
    reason = "has a damaged digest record"
  if reason is not None:
    raise CorruptCheckpoint(mngr.directory, step, reason)


def _like_type(restored, like):
  """Gives a restored leaf the weak type ``like`` had.

  Orbax restores a Python scalar ``like`` (a fresh ``TrainState.step = 0``) as a Python scalar,
  but a weak-typed scalar (one carried through jit) as a strong array; jit caches those apart,
  so without this a resumed run would compile its update a second time.
  """
  if isinstance(like, jax.Array) and like.ndim == 0 and like.weak_type:
    # zeros_like keeps like's dtype, weak type and sharding; adding a Python scalar keeps them.
    return jnp.zeros_like(like) + _item(restored)
  return restored


def _item(x) -> Any:
  """The value of a scalar leaf, also when it is replicated over several processes."""
  return np.asarray(x.addressable_data(0) if isinstance(x, jax.Array) else x).item()


def save(mngr: ocp.CheckpointManager, step: int, state: PyTree, *, wait: bool = True) -> None:
  """Checkpoint ``step`` of ``state`` with its digest. ``wait=False`` with an ``async_save``
  manager returns while orbax still writes (a failure then surfaces at :func:`wait`, the next
  save or ``mngr.close()``); otherwise the checkpoint is on disk when this returns."""
  with _writing(mngr):
    record = digest(state) if jax.process_index() == 0 else {}  # only process 0 writes JSON
    items = {"state": ocp.args.StandardSave(state), DIGEST_ITEM: ocp.args.JsonSave(record)}
    mngr.save(step, args=ocp.args.Composite(**items), force=True)
    if wait:
      mngr.wait_until_finished()


def wait(mngr: ocp.CheckpointManager) -> None:
  """Blocks until the manager's asynchronous save (if any) is renamed into place."""
  with _writing(mngr):
    mngr.wait_until_finished()


@contextlib.contextmanager
def _writing(mngr: ocp.CheckpointManager):
  # orbax's writer threads log a failure with a full traceback before the save raises; the error
  # that matters is the one raised here, so the save runs with absl logging at FATAL.
  verbosity = logging.get_verbosity()
  logging.set_verbosity(logging.FATAL)
  try:
    yield
  except Exception as e:  # tensorstore reports a full disk as ValueError(RESOURCE_EXHAUSTED ...)
    text = str(e)
    if "RESOURCE_EXHAUSTED" in text or "No space left" in text:
      raise OSError(errno.ENOSPC, "No space left on device", str(mngr.directory)) from None
    raise
  finally:
    logging.set_verbosity(verbosity)


def restore_latest(
  mngr: ocp.CheckpointManager, like: PyTree, *, set_aside: bool = False
) -> tuple[PyTree, int] | None:
  """The newest checkpoint of ``mngr`` that verifies, as ``(state, step)``; None when there is none.

  Newer ones that fail verification are skipped with one warning line on stderr naming each step
  and why. With ``set_aside`` (a training run, whose manager prunes and saves) they move to
  ``corrupt-<step>``, where pruning and later saves leave them alone; without, nothing is
  touched. When no checkpoint verifies: one :class:`ConfigError` naming the folder and what a user
  can do.
  """
  bad: list[CorruptCheckpoint] = []
  for step in sorted(mngr.all_steps(), reverse=True):
    try:
      state = restore_with(mngr, like, step)
    except CorruptCheckpoint as e:
      bad.append(e)
      continue
    _warn_skipped(mngr, bad, f"resuming from step {step}", set_aside)
    return state, int(step)
  if not bad:
    return None
  steps = ", ".join(str(e.step) for e in bad)
  raise ConfigError(
    "workdir",
    f"no checkpoint in {mngr.directory} can be restored (steps {steps}; step {bad[0].step} "
    f"{bad[0].reason}); they are kept: move {mngr.directory} aside to start this run afresh",
  )


def _reasons(bad: list[CorruptCheckpoint]) -> str:
  return "; ".join(f"step {e.step} {e.reason}" for e in bad)


def _warn_skipped(mngr, bad: list[CorruptCheckpoint], then: str, set_aside: bool) -> None:
  if not bad:
    return
  kept = _set_aside(mngr, [e.step for e in bad]) if set_aside else "kept"
  if jax.process_index() == 0:
    what = f"checkpoint at step {bad[0].step} in {mngr.directory} {bad[0].reason}"
    if len(bad) > 1:
      what = f"checkpoints in {mngr.directory}: {_reasons(bad)}"
    print(f"warning: {what}; {then} ({kept})", file=sys.stderr, flush=True)


def _set_aside(mngr: ocp.CheckpointManager, steps: list[int]) -> str:
  """Renames each step folder to ``corrupt-<step>`` (``corrupt-<step>.<n>`` if that exists) and
  reloads the manager; returns what the warning says about them."""
  root = pathlib.Path(mngr.directory)
  names = []
  for step in steps:
    dest, n = root / f"{CORRUPT_PREFIX}{step}", 1
    while dest.exists():
      dest, n = root / f"{CORRUPT_PREFIX}{step}.{n}", n + 1
    names.append(dest.name)
    _sync(f"jaxlab_set_aside_{step}_before")  # every process has finished reading it
    if jax.process_index() == 0:
      (root / str(step)).rename(dest)
    _sync(f"jaxlab_set_aside_{step}_after")
  mngr.reload()
  return f"kept as {', '.join(names)}"


def _sync(name: str) -> None:
  if jax.process_count() > 1:
    from jax.experimental import multihost_utils

    multihost_utils.sync_global_devices(name)


def restore(
  workdir: str | os.PathLike, like: PyTree, step: int | None = None
) -> tuple[PyTree, int] | None:
  """A checkpoint of ``workdir`` (the latest that verifies, or ``step``) in the structure/shardings
  of ``like``.

  Returns ``(state, step)``, or None when the workdir has no checkpoint. Reads only: creates no
  folder, prunes nothing, sets nothing aside; the manager is closed on every path (no orbax thread
  outlives it). Without ``step``, newer checkpoints that fail verification are skipped with one
  warning line (:func:`restore_latest`); an explicit ``step`` that fails is a :class:`ConfigError`
  naming it.
  """
  if not (pathlib.Path(workdir) / CKPT_DIR).is_dir():
    if step is not None:
      raise ConfigError("step", f"no checkpoint at step {step}: {workdir} has no {CKPT_DIR}/")
    return None
  mngr = manager(workdir, read_only=True)
  try:
    if step is None:
      return restore_latest(mngr, like)
    if step not in mngr.all_steps():
      raise ConfigError(
        "step", f"no checkpoint at step {step} in {workdir}; have {list(mngr.all_steps())}"
      )
    try:
      return restore_with(mngr, like, step), int(step)
    except CorruptCheckpoint as e:
      have = list(mngr.all_steps())
      raise ConfigError("step", f"{e.message}; it is kept: choose another of {have}") from None
  finally:
    mngr.close()


@contextlib.contextmanager
def sigterm_flag():
  """Yields ``flag`` whose ``flag['set']`` turns true on SIGTERM, so the loop can save first."""
  flag = {"set": False}
  if threading.current_thread() is not threading.main_thread():
    yield flag
    return

  def handler(signum, frame):
    del signum, frame
    flag["set"] = True
    logging.warning("SIGTERM received: saving a checkpoint after the current chunk")

  old = signal.signal(signal.SIGTERM, handler)
  try:
    yield flag
  finally:
    signal.signal(signal.SIGTERM, old)
