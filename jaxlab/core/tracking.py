"""Experiment trackers beside a run's CSV files: TensorBoard (the default) or Weights & Biases.

``metrics.csv`` and ``eval.csv`` are always written (:mod:`jaxlab.core.metrics`); the tracker adds
one viewer (with ``wandb`` no TensorBoard files are written). ``tensorboard``: scalars under
``<workdir>/tb`` (one run per seed) and evaluation videos as animated image summaries. ``wandb``
(``pip install 'jaxlab[wandb]'``): one W&B run per workdir whose id is derived from the workdir's
resolved path and the run's identity (its seeds), opened with ``resume="allow"``, so a killed run
that resumes from its checkpoint appends to the same W&B run instead of starting another; its files
live in ``<workdir>/wandb``; its config is the run's recorded config plus the provenance record. W&B
never blocks or fails a run: without an API key (``$WANDB_API_KEY`` or a netrc entry) or without
network it runs offline (``wandb sync <workdir>/wandb/offline-run-*`` uploads later), and a W&B that
cannot start is one warning line. ``$WANDB_MODE`` (``online``, ``offline``, ``disabled``) overrides
the choice."""

from __future__ import annotations

import hashlib
import json
import netrc
import os
import pathlib
import socket
import sys
import threading
from collections.abc import Mapping
from typing import Any

from jaxlab.core.errors import check_choice

TRACKERS = ("tensorboard", "wandb")
WANDB_PROJECT = "jaxlab"
_WANDB_HOST = "api.wandb.ai"


def check(name: str, field: str = "tracker") -> str:
  """``name`` if it is a tracker (:data:`TRACKERS`); ConfigError naming ``field`` otherwise."""
  check_choice(field, name, TRACKERS)
  return name


def run_id(workdir: str | os.PathLike, identity: Any = None) -> str:
  """The W&B run id of a workdir: the same for every process that trains (or resumes) it, and
  different for another workdir or another identity (seed set) in the same folder."""
  path = str(pathlib.Path(workdir).resolve())
  who = json.dumps(identity, sort_keys=True, default=str)
  return hashlib.sha256(f"{path}\n{who}".encode()).hexdigest()[:16]


def _has_api_key() -> bool:
  if os.environ.get("WANDB_API_KEY"):
    return True
  try:
    return netrc.netrc().authenticators(_WANDB_HOST) is not None
  except (OSError, netrc.NetrcParseError):
    return False


def _reachable(host: str, timeout_s: float = 2.0) -> bool:
  """Whether a TCP connection to ``host:443`` opens within ``timeout_s`` (DNS included: the
  lookup runs in a daemon thread, since ``socket``'s timeout does not bound it)."""
  ok: list[bool] = []

  def probe():
    try:
      socket.create_connection((host, 443), timeout=timeout_s).close()
      ok.append(True)
    except OSError:
      pass

  t = threading.Thread(target=probe, daemon=True)
  t.start()
  t.join(timeout_s)
  return bool(ok)


def wandb_mode() -> str:
  """``$WANDB_MODE`` when set, else ``online`` with an API key and a reachable server, else
  ``offline``."""
  mode = os.environ.get("WANDB_MODE")
  if mode:
    return mode
  return "online" if _has_api_key() and _reachable(_WANDB_HOST) else "offline"


def _warn(message: str) -> None:
  print(f"[jaxlab] {message}"[:300], file=sys.stderr, flush=True)


class Tracker:
  """The viewer a run logs to besides its CSV files. This base writes nothing (TensorBoard
  scalars are the metrics writer's); subclasses add scalars and videos."""

  name = "none"

  def scalars(self, kind: str, step: int, values: Mapping[str, float], seed=None) -> None:
    """``values`` of ``kind`` (``metrics`` or ``eval``) at ``step``; ``seed``: one seed's row."""

  def video(self, step: int, tag: str, gif: pathlib.Path, shape: tuple[int, ...], fps: int):
    """The GIF file ``gif`` (frames ``shape`` = [T, H, W, 3]) as a video named ``tag``."""

  def close(self, failed: bool = False) -> None:
    pass


class TensorBoard(Tracker):
  """Evaluation videos as animated-GIF image summaries in ``<workdir>/tb`` (what tensorboardX's
  ``add_video`` writes, without its moviepy dependency); TensorBoard's Images tab plays them."""

  name = "tensorboard"

  def __init__(self, workdir: pathlib.Path):
    self.workdir, self._writer = pathlib.Path(workdir), None

  def video(self, step, tag, gif, shape, fps):
    try:
      from tensorboardX import SummaryWriter
      from tensorboardX.proto.summary_pb2 import Summary

      if self._writer is None:
        # its own event file (tensorboardX names files by the second: without the suffix it
        # would share the scalar writer's file in the same folder)
        self._writer = SummaryWriter(str(self.workdir / "tb"), filename_suffix=".videos")
      _, h, w, c = shape
      image = Summary.Image(
        height=h, width=w, colorspace=c, encoded_image_string=pathlib.Path(gif).read_bytes()
      )
      self._writer._get_file_writer().add_summary(
        Summary(value=[Summary.Value(tag=tag, image=image)]), step
      )
      self._writer.flush()
    except Exception as e:  # a viewer never fails a run
      _warn(f"TensorBoard video not written: {e}")

  def close(self, failed=False):
    if self._writer is not None:
      self._writer.close()


class Wandb(Tracker):
  """One W&B run per workdir (see the module docstring)."""

  name = "wandb"

  def __init__(self, run):
    self.run = run

  def scalars(self, kind, step, values, seed=None):
    prefix = kind if seed is None else f"seed{seed}/{kind}"
    row = {f"{prefix}/{k}": float(v) for k, v in values.items()}
    self._log({**row, "step": step})

  def video(self, step, tag, gif, shape, fps):
    import wandb

    self._log({tag: wandb.Video(str(gif), format="gif"), "step": step})

  def _log(self, row):
    try:
      self.run.log(row)
    except Exception as e:  # a viewer never fails a run
      _warn(f"W&B logging stopped: {e}")
      self.run = None
      self._log = lambda row: None

  def close(self, failed=False):
    if self.run is not None:
      try:
        self.run.finish(exit_code=1 if failed else 0)
      except Exception as e:
        _warn(f"W&B finish failed: {e}")


def start_wandb(
  workdir: str | os.PathLike,
  config: Any = None,
  identity: Any = None,
  name: str | None = None,
  project: str | None = None,
) -> Tracker:
  """The W&B run of ``workdir`` (created, or resumed under the same id), or a :class:`Tracker`
  that logs nothing when wandb is not installed or does not start (one warning line)."""
  try:
    import wandb
  except ImportError:
    _warn("--tracker=wandb: wandb is not installed (pip install 'jaxlab[wandb]'); CSV only")
    return Tracker()
  from jaxlab.core import metrics, provenance

  workdir = pathlib.Path(workdir)
  os.environ.setdefault("WANDB_SILENT", "true")  # the run's console is the progress bar
  mode = wandb_mode()
  record = {
    "config": metrics.jsonable(config),
    "provenance": metrics.jsonable(provenance.collect()),
  }
  if identity:
    record["identity"] = metrics.jsonable(identity)
  kwargs = dict(
    project=project or os.environ.get("WANDB_PROJECT") or WANDB_PROJECT,
    id=run_id(workdir, identity),
    name=name or workdir.name,
    resume="allow",
    dir=str(workdir),
    config=record,
    settings=wandb.Settings(console="off", init_timeout=30),
  )
  os.environ["WANDB_DIR"] = str(workdir)
  for attempt in (mode, "offline") if mode == "online" else (mode,):
    try:
      run = wandb.init(mode=attempt, **kwargs)
    except Exception as e:
      _warn(f"W&B ({attempt}) did not start: {e}")
      continue
    if run is None:
      break
    run.define_metric("step")
    run.define_metric("*", step_metric="step")  # resumed runs re-log steps past their checkpoint
    return Wandb(run)
  return Tracker()


def start(
  kind: str, workdir: str | os.PathLike, config: Any = None, identity: Any = None
) -> Tracker:
  """The tracker ``kind`` (:data:`TRACKERS`) of a run in ``workdir``."""
  check(kind)
  if kind == "wandb":
    return start_wandb(workdir, config, identity)
  return TensorBoard(pathlib.Path(workdir))
