"""Metric writing of a run: CSV rows, TensorBoard scalars, atomic JSON.

``metrics.csv`` / ``eval.csv`` never lose history: a resumed run drops the rows past its restored
step by writing a new file and renaming it over the old one, then appends.
"""

from __future__ import annotations

import csv
import json
import math
import os
import pathlib
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
from absl import logging


def _read_rows(path: pathlib.Path) -> list[dict]:
  with open(path, newline="") as f:
    return list(csv.DictReader(f))


class MetricsWriter:
  """Appends rows to ``<workdir>/<name>.csv`` and TensorBoard scalars; trims rows past a resume."""

  def __init__(self, workdir: pathlib.Path, resume_step: int, use_tensorboard: bool = True):
    self.workdir = pathlib.Path(workdir)
    self._files: dict[str, tuple[Any, csv.DictWriter, list[str]]] = {}
    self._resume_step = resume_step
    self._use_tb = use_tensorboard
    self._tbs: dict = {}  # None: the run's writer; a seed: its own run tb/seed<k>

  def _tb(self, seed: int | None):
    if not self._use_tb:
      return None
    if seed not in self._tbs:
      try:
        from tensorboardX import SummaryWriter

        # one TensorBoard run per seed, so the seeds' curves overlay under the same tags
        path = self.workdir / "tb" / (f"seed{seed}" if seed is not None else "")
        self._tbs[seed] = SummaryWriter(str(path), purge_step=self._resume_step or None)
      except Exception as e:  # TensorBoard is a convenience; never fail a run for it
        logging.warning("TensorBoard disabled: %s", e)
        self._use_tb = False
        return None
    return self._tbs[seed]

  def _writer(self, name: str, keys: list[str]):
    if name in self._files:
      return self._files[name]
    path = self.workdir / f"{name}.csv"
    rows = _read_rows(path) if path.exists() else []
    kept = [r for r in rows if int(float(r["step"])) <= self._resume_step]
    names = set(keys) | {k for r in kept for k in r} - {"step"}
    lead = ["step", "seed"] if "seed" in names else ["step"]
    fields = lead + sorted(names - {"seed"})
    if not path.exists() or len(kept) != len(rows) or list(rows[0] if rows else []) != fields:
      tmp = path.with_suffix(".csv.tmp")  # new file, then rename: never a window without history
      with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(kept)
        f.flush()
        os.fsync(f.fileno())
      os.replace(tmp, path)
    f = open(path, "a", newline="")
    self._files[name] = (f, csv.DictWriter(f, fieldnames=fields, extrasaction="ignore"), fields)
    return self._files[name]

  def write(self, name: str, step: int, metrics: Mapping[str, float], seed: int | None = None):
    """One row of ``<name>.csv`` (with a ``seed`` column when ``seed`` is given)."""
    row = dict(metrics) if seed is None else {"seed": seed, **metrics}
    f, w, fields = self._writer(name, list(row))
    w.writerow({"step": step, **{k: v for k, v in row.items() if k in fields}})
    f.flush()
    tb = self._tb(seed)
    if tb is not None:
      for k, v in metrics.items():
        tb.add_scalar(f"{name}/{k}", v, step)

  def close(self):
    for f, _, _ in self._files.values():
      f.close()
    for tb in self._tbs.values():
      tb.close()


def write_table(path: str | os.PathLike, rows: list[Mapping[str, Any]]) -> pathlib.Path:
  """A whole CSV table (one dict per row, columns in first-seen order), written atomically."""
  path = pathlib.Path(path)
  fields: list[str] = []
  for r in rows:
    fields += [k for k in r if k not in fields]
  tmp = path.with_suffix(path.suffix + ".tmp")
  with open(tmp, "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=fields)
    w.writeheader()
    w.writerows(rows)
  os.replace(tmp, path)
  return path


def read_csv(path: str | os.PathLike) -> dict[str, np.ndarray]:
  """Columns of a metrics CSV as float arrays (empty cells -> nan)."""
  rows = _read_rows(pathlib.Path(path))
  if not rows:
    return {}
  return {
    k: np.array([float(r[k]) if r.get(k) not in (None, "") else np.nan for r in rows])
    for k in rows[0]
  }


def to_floats(tree: Mapping[str, Any]) -> dict[str, float]:
  return {k: float(v) for k, v in jax.device_get(dict(tree)).items()}


def jsonable(x: Any) -> Any:
  """Plain JSON types; non-finite floats become ``None`` (JSON has no NaN)."""
  if hasattr(x, "to_dict"):  # ml_collections ConfigDict / FrozenConfigDict
    x = x.to_dict()
  if isinstance(x, Mapping):
    return {str(k): jsonable(v) for k, v in x.items()}
  if isinstance(x, (list, tuple)):
    return [jsonable(v) for v in x]
  if isinstance(x, (np.ndarray, jax.Array)):
    return jsonable(np.asarray(x).tolist())
  if isinstance(x, (np.floating, np.integer, np.bool_)):
    x = x.item()
  if isinstance(x, float) and not math.isfinite(x):
    return None
  if x is None or isinstance(x, (bool, int, float, str)):
    return x
  return str(x)


def write_json(path: str | os.PathLike, obj: Any) -> None:
  """Atomic JSON write (tmp file + rename), so readers never see half a file; strict JSON."""
  path = pathlib.Path(path)
  tmp = path.with_suffix(path.suffix + ".tmp")
  with open(tmp, "w") as f:
    json.dump(jsonable(obj), f, indent=2, allow_nan=False)
  os.replace(tmp, path)


def read_json(path: str | os.PathLike) -> dict:
  with open(path) as f:
    return json.load(f)


def t_interval(xs) -> tuple[float, float, float]:
  """Mean and 95 % Student-t interval of replicate scores, ``(mean, lo, hi)``; nan bounds for n < 2.

  Seeds are the replicates; the studies' tables use `jaxlab.core.stats` (bootstrap intervals).
  """
  from scipy import stats

  xs = np.asarray(xs, np.float64)
  m = float(np.mean(xs))
  if len(xs) < 2:
    return m, float("nan"), float("nan")
  h = float(stats.t.ppf(0.975, len(xs) - 1) * np.std(xs, ddof=1) / np.sqrt(len(xs)))
  return m, m - h, m + h
