"""Checkpoints of a run: orbax manager under ``<workdir>/checkpoints``, restore, SIGTERM handling.

Saves are synchronous and atomic (orbax writes a tmp dir, then renames), so a kill at any moment
leaves the previous checkpoint intact. On SIGTERM the loop finishes its chunk, saves, and raises
:class:`Preempted` (exit 143) so schedulers requeue the job.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pathlib
import signal
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


class Preempted(SystemExit):
  """Raised after a SIGTERM-triggered checkpoint; exit code 143 tells schedulers to requeue."""

  def __init__(self, step: int):
    super().__init__(SIGTERM_EXIT_CODE)
    self.step = step


def manager(
  workdir: str | os.PathLike, keep: int = 3, *, read_only: bool = False
) -> ocp.CheckpointManager:
  """Orbax manager under ``<workdir>/checkpoints``; saves are atomic (tmp dir, then rename).

  ``read_only``: for commands that only read a run (evaluation, generation): creates nothing,
  deletes nothing, saves nothing.
  """
  path = pathlib.Path(workdir).absolute() / CKPT_DIR
  opts = ocp.CheckpointManagerOptions(
    max_to_keep=None if read_only else keep,
    create=not read_only,
    read_only=read_only,
    save_interval_steps=0 if read_only else 1,
    enable_async_checkpointing=False,
  )
  if not read_only:
    return ocp.CheckpointManager(path, options=opts)
  verbosity = logging.get_verbosity()
  logging.set_verbosity(logging.ERROR)  # orbax warns that a read-only manager is read-only
  try:
    return ocp.CheckpointManager(path, options=opts)
  finally:
    logging.set_verbosity(verbosity)


def _abstract(tree: PyTree) -> PyTree:
  return jax.tree.map(ocp.utils.to_shape_dtype_struct, tree)


def restore_with(mngr: ocp.CheckpointManager, like: PyTree, step: int) -> PyTree:
  """Checkpoint ``step`` in the structure/shardings of ``like``; a mismatch is one clear error."""
  try:
    restored = mngr.restore(
      step, args=ocp.args.Composite(state=ocp.args.StandardRestore(_abstract(like)))
    )
  except Exception as e:  # orbax raises many types, with very long messages
    first = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
    raise ConfigError(
      "workdir",
      f"checkpoint at step {step} in {mngr.directory} cannot be "
      f"restored into this run's state ({type(e).__name__}: {first})",
    ) from e
  return jax.tree.map(_like_type, restored["state"], like)


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


def save(mngr: ocp.CheckpointManager, step: int, state: PyTree) -> None:
  # orbax's writer threads log a failure with a full traceback before the save raises; the error
  # that matters is the one raised here, so the save runs with absl logging at FATAL.
  verbosity = logging.get_verbosity()
  logging.set_verbosity(logging.FATAL)
  try:
    mngr.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state)), force=True)
    mngr.wait_until_finished()
  except Exception as e:  # tensorstore reports a full disk as ValueError(RESOURCE_EXHAUSTED ...)
    text = str(e)
    if "RESOURCE_EXHAUSTED" in text or "No space left" in text:
      raise OSError(errno.ENOSPC, "No space left on device", str(mngr.directory)) from None
    raise
  finally:
    logging.set_verbosity(verbosity)


def restore(
  workdir: str | os.PathLike, like: PyTree, step: int | None = None
) -> tuple[PyTree, int] | None:
  """A checkpoint of ``workdir`` (the latest, or ``step``) in the structure/shardings of ``like``.

  Returns ``(state, step)``, or None when the workdir has no checkpoint. Reads only: creates no
  folder, prunes nothing; the manager is closed on every path (no orbax thread outlives it).
  """
  if not (pathlib.Path(workdir) / CKPT_DIR).is_dir():
    if step is not None:
      raise ConfigError("step", f"no checkpoint at step {step}: {workdir} has no {CKPT_DIR}/")
    return None
  mngr = manager(workdir, read_only=True)
  try:
    if step is None:
      step = mngr.latest_step()
    elif step not in mngr.all_steps():
      raise ConfigError(
        "step", f"no checkpoint at step {step} in {workdir}; have {list(mngr.all_steps())}"
      )
    if step is None:
      return None
    return restore_with(mngr, like, step), int(step)
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
