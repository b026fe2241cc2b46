"""The training runtime every long jaxlab experiment runs on.

A run is a sequence of jitted chunks (``lax.scan`` over K update steps). Between chunks the host
logs metrics (CSV + TensorBoard), advances a tqdm bar with steps/s, evaluates, and saves an orbax
checkpoint. Step ``i`` always uses ``fold_in(key, i)`` and chunk boundaries are global multiples of
``log_every``/``ckpt_every``/``eval_every``, so a run killed and restarted from its workdir ends
bit-for-bit where an uninterrupted run would (on CPU).

    state, summary = train(state, update_fn, num_steps=1000, workdir="runs/x", key=key,
                           data=dataset, sample_fn=sample)
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import os
import pathlib
import signal
import threading
import time
from functools import partial
from typing import Any, Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from absl import logging

PyTree = Any
UpdateFn = Callable[[PyTree, PyTree, jax.Array], tuple[PyTree, Mapping[str, jax.Array]]]

CKPT_DIR = "checkpoints"
SIGTERM_EXIT_CODE = 143


class Preempted(SystemExit):
  """Raised after a SIGTERM-triggered checkpoint; the exit code (143) tells schedulers to requeue."""

  def __init__(self, step: int):
    super().__init__(SIGTERM_EXIT_CODE)
    self.step = step


# ----------------------------------------------------------------------------- jitted chunk


def make_chunk_fn(update_fn: UpdateFn, sample_fn: Callable | None = None,
                  state_sharding: PyTree | None = None) -> Callable:
  """Returns ``chunk(state, data, key, start, length) -> (state, mean_metrics)`` (jitted)."""

  def chunk(state, data, key, start, length):
    def body(state, step):
      k_sample, k_update = jax.random.split(jax.random.fold_in(key, step))
      batch = data if sample_fn is None else sample_fn(data, k_sample)
      state, metrics = update_fn(state, batch, k_update)
      return state, metrics

    steps = start + jnp.arange(length, dtype=jnp.int32)
    state, metrics = jax.lax.scan(body, state, steps)
    if state_sharding is not None:
      state = jax.lax.with_sharding_constraint(state, state_sharding)
    return state, jax.tree.map(lambda m: jnp.mean(m.astype(jnp.float32)), metrics)

  donate = (0,) if jax.default_backend() != "cpu" else ()
  return jax.jit(chunk, static_argnums=(4,), donate_argnums=donate)


def chunk_boundaries(start: int, num_steps: int, *everies: int) -> list[int]:
  """Chunk end points after ``start``: every multiple of each positive ``every`` plus ``num_steps``."""
  ends = {num_steps}
  for every in everies:
    if every and every > 0:
      ends.update(range((start // every + 1) * every, num_steps, every))
  return sorted(e for e in ends if start < e <= num_steps)


# ----------------------------------------------------------------------------- logging


class MetricsWriter:
  """Appends rows to ``<workdir>/<name>.csv`` and TensorBoard scalars; trims rows past a resume."""

  def __init__(self, workdir: pathlib.Path, resume_step: int, use_tensorboard: bool = True):
    self.workdir = workdir
    self._files: dict[str, tuple[Any, csv.DictWriter, list[str]]] = {}
    self._resume_step = resume_step
    self._tb = None
    if use_tensorboard:
      try:
        from tensorboardX import SummaryWriter
        self._tb = SummaryWriter(str(workdir / "tb"), purge_step=resume_step or None)
      except Exception as e:  # TensorBoard is a convenience; never fail a run for it
        logging.warning("TensorBoard disabled: %s", e)

  def _writer(self, name: str, keys: list[str]):
    if name in self._files:
      return self._files[name]
    path = self.workdir / f"{name}.csv"
    rows = []
    if path.exists():  # resume: keep rows up to the restored step only
      with open(path, newline="") as f:
        rows = [r for r in csv.DictReader(f) if int(float(r["step"])) <= self._resume_step]
    fields = ["step"] + sorted(set(keys) | {k for r in rows for k in r if k != "step"})
    f = open(path, "w", newline="")
    w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
    w.writeheader()
    w.writerows(rows)
    self._files[name] = (f, w, fields)
    return self._files[name]

  def write(self, name: str, step: int, metrics: Mapping[str, float]):
    f, w, fields = self._writer(name, list(metrics))
    w.writerow({"step": step, **{k: v for k, v in metrics.items() if k in fields}})
    f.flush()
    if self._tb is not None:
      for k, v in metrics.items():
        self._tb.add_scalar(f"{name}/{k}", v, step)

  def close(self):
    for f, _, _ in self._files.values():
      f.close()
    if self._tb is not None:
      self._tb.close()


def read_csv(path: str | os.PathLike) -> dict[str, np.ndarray]:
  """Columns of a metrics CSV as float arrays (empty cells -> nan)."""
  with open(path, newline="") as f:
    rows = list(csv.DictReader(f))
  if not rows:
    return {}
  return {k: np.array([float(r[k]) if r.get(k) not in (None, "") else np.nan for r in rows])
          for k in rows[0]}


def plot_metrics(workdir: pathlib.Path, out: str = "curves.png") -> pathlib.Path | None:
  """One panel per metric of ``metrics.csv`` and ``eval.csv``: the run's learning curves."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  panels = []
  for name in ("metrics", "eval"):
    path = workdir / f"{name}.csv"
    if path.exists():
      cols = read_csv(path)
      panels += [(f"{name}/{k}", cols["step"], v) for k, v in cols.items()
                 if k not in ("step", "steps_per_sec")]
  if not panels:
    return None
  n = len(panels)
  ncol = min(4, n)
  nrow = math.ceil(n / ncol)
  fig, axes = plt.subplots(nrow, ncol, figsize=(3.6 * ncol, 2.6 * nrow), squeeze=False)
  for ax, (title, x, y) in zip(axes.flat, panels):
    ax.plot(x, y, marker="." if len(x) < 30 else None)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("step", fontsize=8)
    ax.tick_params(labelsize=7)
  for ax in list(axes.flat)[n:]:
    ax.axis("off")
  fig.tight_layout()
  path = workdir / out
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return path


# ----------------------------------------------------------------------------- checkpoints


def checkpoint_manager(workdir: str | os.PathLike, keep: int = 3) -> ocp.CheckpointManager:
  """Orbax manager under ``<workdir>/checkpoints``; saves are atomic (tmp dir, then rename)."""
  path = pathlib.Path(workdir).absolute() / CKPT_DIR
  opts = ocp.CheckpointManagerOptions(max_to_keep=keep, create=True,
                                      enable_async_checkpointing=False)
  return ocp.CheckpointManager(path, options=opts)


def _abstract(tree: PyTree) -> PyTree:
  return jax.tree.map(ocp.utils.to_shape_dtype_struct, tree)


def restore(workdir: str | os.PathLike, like: PyTree,
            step: int | None = None) -> tuple[PyTree, int] | None:
  """A checkpoint of ``workdir`` (the latest, or ``step``) in the structure/shardings of ``like``.

  Returns ``(state, step)``, or None when the workdir has no checkpoint.
  """
  mngr = checkpoint_manager(workdir, keep=1_000_000)  # reading must never prune
  try:
    if step is None:
      step = mngr.latest_step()
    elif step not in mngr.all_steps():
      raise FileNotFoundError(f"no checkpoint at step {step} in {workdir}; have {mngr.all_steps()}")
    if step is None:
      return None
    restored = mngr.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(_abstract(like))))
    return restored["state"], int(step)
  finally:
    mngr.close()


@contextlib.contextmanager
def _sigterm_flag():
  """Sets ``flag['set']`` on SIGTERM instead of dying, so the loop can save first."""
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


# ----------------------------------------------------------------------------- the loop


def _to_float_dict(tree: Mapping[str, Any]) -> dict[str, float]:
  return {k: float(v) for k, v in jax.device_get(dict(tree)).items()}


def _jsonable(x):
  try:
    from ml_collections import ConfigDict
    if isinstance(x, ConfigDict):
      return x.to_dict()
  except ImportError:
    pass
  return x


def train(state: PyTree,
          update_fn: UpdateFn,
          *,
          num_steps: int,
          workdir: str | os.PathLike,
          key: jax.Array,
          data: PyTree = None,
          sample_fn: Callable[[PyTree, jax.Array], PyTree] | None = None,
          log_every: int = 100,
          ckpt_every: int = 1000,
          keep: int = 3,
          eval_fn: Callable[[PyTree, int], Mapping[str, float]] | None = None,
          eval_every: int = 0,
          mesh: jax.sharding.Mesh | None = None,
          state_sharding: PyTree | None = None,
          data_sharding: PyTree | None = None,
          config: Any = None,
          progress: bool = True,
          progress_keys: tuple[str, ...] | None = None,
          use_tensorboard: bool = True,
          plot: bool = True) -> tuple[PyTree, dict]:
  """Runs ``num_steps`` updates in jitted chunks with logging, eval, checkpoints and resume.

  Args:
    state: the whole algorithm state (a pytree of arrays; typically a ``flax.struct.PyTreeNode``).
    update_fn: ``update_fn(state, batch, key) -> (state, metrics)``; traced once per chunk length.
    num_steps: total number of updates of the run (not of this call: resumed runs continue).
    workdir: where metrics.csv, eval.csv, tb/, checkpoints/, summary.json and curves.png go.
    key: base PRNG key; step ``i`` uses ``fold_in(key, i)``.
    data: pytree passed to every chunk as an argument (e.g. an offline data set on device).
    sample_fn: ``sample_fn(data, key) -> batch`` inside jit; ``None`` passes ``data`` as the batch.
    log_every, ckpt_every, eval_every: chunk boundaries (0 disables ckpt/eval; the end always
      saves and evaluates).
    keep: checkpoints kept.
    eval_fn: host-side ``eval_fn(state, step) -> dict`` run between chunks.
    mesh, state_sharding, data_sharding: optional placement; the chunk keeps ``state_sharding``.
    config: saved to ``config.json`` for the record.
    progress_keys: metrics shown on the progress bar (default: the first three).

  Returns:
    ``(final_state, summary)``; ``summary`` is also written to ``summary.json``.
  """
  if num_steps < 0:
    raise ValueError(f"num_steps must be >= 0, got {num_steps}")
  if log_every <= 0:
    raise ValueError(f"log_every must be >= 1, got {log_every}")
  workdir = pathlib.Path(workdir).absolute()
  workdir.mkdir(parents=True, exist_ok=True)
  main = jax.process_index() == 0  # one host writes logs and plots; orbax coordinates all hosts
  progress, use_tensorboard, plot = progress and main, use_tensorboard and main, plot and main
  if config is not None and main:
    with open(workdir / "config.json", "w") as f:
      json.dump(_jsonable(config), f, indent=2, default=str)

  if state_sharding is not None:
    state = jax.device_put(state, state_sharding)
  if data is not None and data_sharding is not None:
    data = jax.device_put(data, data_sharding)

  mngr = checkpoint_manager(workdir, keep)
  start = 0
  latest = mngr.latest_step()
  if latest is not None:
    restored = mngr.restore(latest, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(_abstract(state))))
    state, start = restored["state"], int(latest)
    logging.info("resumed from %s at step %d", workdir / CKPT_DIR, start)
    if progress:
      print(f"[jaxlab] resuming from checkpoint at step {start} in {workdir}", flush=True)

  chunk_fn = make_chunk_fn(update_fn, sample_fn, state_sharding)
  writer = MetricsWriter(workdir, start, use_tensorboard) if main else None
  bar = None
  if progress:
    from tqdm.auto import tqdm
    bar = tqdm(total=num_steps, initial=start, unit="step", dynamic_ncols=True,
               desc=workdir.name)
  last_metrics: dict[str, float] = {}
  last_eval: dict[str, float] = {}
  t_run = time.perf_counter()
  sps = float("nan")
  step = start
  try:
    with _sigterm_flag() as sigterm, (jax.set_mesh(mesh) if mesh is not None
                                       else contextlib.nullcontext()):
      for end in chunk_boundaries(start, num_steps, log_every, ckpt_every, eval_every):
        t0 = time.perf_counter()
        state, metrics = chunk_fn(state, data, key, jnp.int32(step), end - step)
        last_metrics = _to_float_dict(metrics)  # blocks: the chunk is done
        sps = (end - step) / (time.perf_counter() - t0)
        step = end
        if writer is not None and (step % log_every == 0 or step == num_steps):
          writer.write("metrics", step, {**last_metrics, "steps_per_sec": sps})
        if bar is not None:
          bar.update(end - bar.n)
          keys = [k for k in (progress_keys or list(last_metrics)[:3]) if k in last_metrics]
          shown = {k: f"{last_metrics[k]:.3g}" for k in keys}
          bar.set_postfix(**shown, sps=f"{sps:.1f}")
        if eval_fn is not None and ((eval_every and step % eval_every == 0) or step == num_steps):
          last_eval = dict(eval_fn(state, step))
          if writer is not None:
            writer.write("eval", step, last_eval)
          if bar is not None:
            bar.write(f"[eval @ {step}] " + " ".join(f"{k}={v:.4g}" for k, v in last_eval.items()))
        if (ckpt_every and step % ckpt_every == 0) or step == num_steps or sigterm["set"]:
          mngr.save(step, args=ocp.args.Composite(state=ocp.args.StandardSave(state)),
                    force=True)
          mngr.wait_until_finished()
        if sigterm["set"] and step < num_steps:
          raise Preempted(step)
  finally:
    if bar is not None:
      bar.close()
    if writer is not None:
      writer.close()
    mngr.close()

  summary = {"step": step, "num_steps": num_steps, "wall_s": time.perf_counter() - t_run,
             "steps_per_sec": sps, "resumed_from": start}
  summary.update({f"train/{k}": v for k, v in last_metrics.items()})
  summary.update({f"eval/{k}": v for k, v in last_eval.items()})
  if start == num_steps and (workdir / "summary.json").exists():
    with open(workdir / "summary.json") as f:  # already finished: keep its record
      summary = {**json.load(f), "resumed_from": start}
  if main:
    write_json(workdir / "summary.json", summary)
  if plot:
    try:
      plot_metrics(workdir)
    except Exception as e:  # a plot never fails a finished run
      logging.warning("plotting failed: %s", e)
  return state, summary


def write_json(path: str | os.PathLike, obj: Any) -> None:
  """Atomic JSON write (tmp file + rename), so readers never see half a file."""
  path = pathlib.Path(path)
  tmp = path.with_suffix(path.suffix + ".tmp")
  with open(tmp, "w") as f:
    json.dump(obj, f, indent=2, default=_json_default)
  os.replace(tmp, path)


def _json_default(x):
  if isinstance(x, (np.floating, np.integer)):
    return x.item()
  if isinstance(x, (np.ndarray, jax.Array)):
    return np.asarray(x).tolist()
  return str(x)
