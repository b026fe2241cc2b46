"""Every PNG jaxlab writes: learning curves, lines, histograms, bar charts; readable axes.

A constant series is drawn on a unit-wide axis around its value (not matplotlib's ±4 % of zero),
and a metric whose name says it is a rate (``success``) gets the [0, 1] axis.
"""

from __future__ import annotations

import math
import pathlib
import textwrap
from collections.abc import Mapping, Sequence

import numpy as np


def _pyplot():
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  return plt


def _readable_ylim(ax, name: str, ys: np.ndarray) -> None:
  finite = ys[np.isfinite(ys)]
  if "success" in name and finite.size and finite.min() >= 0 and finite.max() <= 1:
    ax.set_ylim(-0.03, 1.03)
  elif finite.size and np.ptp(finite) <= 1e-12 * max(1.0, abs(float(finite[0]))):
    v = float(finite[0])
    half = max(0.5, 0.5 * abs(v))
    ax.set_ylim(v - half, v + half)
    ax.text(
      0.5, 0.5, f"constant {v:.4g}", transform=ax.transAxes, ha="center", fontsize=8, color="gray"
    )


def fit_text(text: str, width_in: float, fontsize: float) -> str:
  """``text`` with each line wrapped to fit ``width_in`` inches at ``fontsize`` points (an average
  glyph of DejaVu Sans is about 0.6 em wide), so no title runs past the figure's edge."""
  chars = max(20, int(width_in * 72 / (0.6 * fontsize)))
  return "\n".join(
    "\n".join(textwrap.wrap(line, chars, break_on_hyphens=False) or [""])
    for line in text.split("\n")
  )


def _title(ax, title: str, fontsize: float | None = None) -> None:
  """A title wrapped to the figure's width."""
  from matplotlib import font_manager, rcParams

  size = fontsize or font_manager.FontProperties(size=rcParams["axes.titlesize"]).get_size()
  ax.set_title(fit_text(title, ax.figure.get_figwidth() * 0.95, size), fontsize=size)


def _label(ax, xlabel: str, ylabel: str, title: str, grid: dict | None, legend: int = 8) -> None:
  """Axis labels, an optional title (small if it may run to two lines), grid and legend."""
  ax.set_xlabel(xlabel)
  ax.set_ylabel(ylabel)
  if title:
    _title(ax, title, 9 if legend < 8 else 10)
  if grid is not None:
    ax.grid(True, **grid)
  ax.legend(fontsize=legend)


def _save(fig, path: str | pathlib.Path, bottom: float = 0.0, layout: bool = True) -> pathlib.Path:
  """``layout=False``: the figure's margins are already set (``tight_layout`` draws the figure
  once more to measure its text, as long as the ``savefig`` that follows)."""
  path = pathlib.Path(path)
  if layout:
    fig.tight_layout(rect=(0, bottom, 1, 1))
  fig.savefig(path, dpi=110)
  _pyplot().close(fig)
  return path


def panels(
  path: str | pathlib.Path,
  series: Sequence[tuple[str, np.ndarray, np.ndarray]],
  footnote: str = "",
) -> pathlib.Path | None:
  """One small panel per ``(title, x, y)``: a run's learning curves; ``footnote`` under them."""
  if not series and not footnote:
    return None
  plt = _pyplot()
  n = max(1, len(series))
  ncol = min(4, n)
  nrow = math.ceil(n / ncol)
  width = 3.6 * ncol
  note = fit_text(footnote, width * 0.97, 8) if footnote else ""
  note_in = 0.16 * (note.count("\n") + 1) + 0.1 if note else 0.0
  height = 2.6 * nrow + note_in
  fig, axes = plt.subplots(nrow, ncol, figsize=(width, height), squeeze=False)
  # Margins in inches for what a panel holds (a two-line 9-pt title, 7-pt ticks, an 8-pt x
  # label), not measured by tight_layout: curves.png is drawn at the end of every run, and the
  # measuring draw doubled its cost (16 panels: 7.7 s against 15.3 s at load 11 on 2 cores).
  fig.subplots_adjust(
    left=0.62 / width,
    right=1 - 0.12 / width,
    top=1 - 0.42 / height,
    bottom=(note_in + 0.42) / height,
    wspace=0.78 / (3.6 - 0.9),
    hspace=0.95 / (2.6 - 0.95),
  )
  for ax, (title, x, y) in zip(axes.flat, series):
    x, y = np.asarray(x), np.asarray(y, dtype=float)
    ax.plot(x, y, marker="." if len(x) < 30 else None)
    _readable_ylim(ax, title, y)
    ax.set_title(fit_text(title, 3.4, 9), fontsize=9)
    ax.set_xlabel("step", fontsize=8)
    ax.tick_params(labelsize=7)
  for ax in list(axes.flat)[len(series) :]:
    ax.axis("off")
  if note:
    fig.text(0.01, 0.05 / height, note, fontsize=8, va="bottom", ha="left", color="dimgray")
  return _save(fig, path, layout=False)


def lines(
  path: str | pathlib.Path,
  curves: Mapping[str, tuple],
  xlabel: str,
  ylabel: str,
  logx: bool = False,
  logy: bool = False,
  title: str = "",
) -> pathlib.Path:
  """Line plot of ``{label: (xs, ys)}`` or ``{label: (xs, ys, lo, hi)}`` (with a band)."""
  plt = _pyplot()
  fig, ax = plt.subplots(figsize=(6, 4))
  for label, c in curves.items():
    xs, ys = np.asarray(c[0]), np.asarray(c[1], dtype=float)
    (line,) = ax.plot(xs, ys, label=label, marker="." if len(xs) < 30 else None)
    if len(c) == 4:
      ax.fill_between(xs, np.asarray(c[2]), np.asarray(c[3]), color=line.get_color(), alpha=0.2)
  if logx:
    ax.set_xscale("log")
  if logy:
    ax.set_yscale("log")
  else:
    all_y = np.concatenate(
      [np.asarray(c[1], dtype=float).ravel() for c in curves.values()] or [np.zeros(0)]
    )
    _readable_ylim(ax, ylabel, all_y)
  _label(ax, xlabel, ylabel, title, {"which": "both", "alpha": 0.3})
  return _save(fig, path)


def histograms(
  path: str | pathlib.Path,
  samples: Mapping[str, np.ndarray],
  xlabel: str,
  title: str = "",
  bins: int | np.ndarray = 40,
) -> pathlib.Path:
  """Overlaid density histograms of ``{label: values}`` on shared bins."""
  plt = _pyplot()
  arrays = {k: np.asarray(v, dtype=float).ravel() for k, v in samples.items()}
  if isinstance(bins, int):
    allv = np.concatenate([a[np.isfinite(a)] for a in arrays.values()])
    bins = np.histogram_bin_edges(allv, bins=bins)
  fig, ax = plt.subplots(figsize=(6, 4))
  for label, a in arrays.items():
    ax.hist(a[np.isfinite(a)], bins=bins, density=True, alpha=0.5, label=label)
  _label(ax, xlabel, "density", title, None)
  return _save(fig, path)


def bars(
  path: str | pathlib.Path,
  values: Mapping[str, float],
  xlabel: str,
  title: str = "",
  xlim: tuple[float, float] | None = None,
) -> pathlib.Path:
  """Horizontal bars ``{label: value}`` in the given order (first label on top)."""
  plt = _pyplot()
  labels = list(values)
  vals = np.asarray([values[k] for k in labels], dtype=float)
  fig, ax = plt.subplots(figsize=(6.5, max(2.0, 0.22 * len(labels) + 1.0)))
  y = np.arange(len(labels))
  ax.barh(y, vals, color="tab:blue")
  for yi, v in zip(y, vals):
    ax.text(v, yi, f" {v:.1f}", va="center", fontsize=6)
  ax.set_yticks(y, labels, fontsize=7)
  ax.invert_yaxis()
  if xlim is not None:
    ax.set_xlim(*xlim)
  ax.set_xlabel(xlabel)
  if title:
    _title(ax, title, 9)
  ax.grid(True, axis="x", alpha=0.3)
  return _save(fig, path)


def frames(path, rows: Mapping[str, np.ndarray], title: str = "") -> pathlib.Path:
  """Image grid: a row per label, a column per step (rows: label -> [T, H, W, 3] in [0, 1])."""
  plt = _pyplot()
  labels = list(rows)
  t_len = min(len(v) for v in rows.values())
  fig, axes = plt.subplots(
    len(labels), t_len, figsize=(1.1 * t_len, 1.25 * len(labels)), squeeze=False
  )
  for r, label in enumerate(labels):
    for t in range(t_len):
      ax = axes[r, t]
      ax.imshow(np.clip(np.asarray(rows[label][t]), 0, 1), interpolation="nearest")
      ax.set_xticks([])
      ax.set_yticks([])
      if t == 0:
        ax.set_ylabel(label, fontsize=7)
      if r == 0:
        ax.set_title(f"t+{t}", fontsize=7)
  if title:
    fig.suptitle(title, fontsize=8)
  return _save(fig, path)


# metrics.csv's columns are summary.json's train/<name>, eval.csv's its eval/<name>
_SUMMARY_PREFIX = {"metrics": "train/", "eval": "eval/"}


def learning_curves(
  workdir: str | pathlib.Path, out: str = "curves.png", skip: Sequence[str] = ("steps_per_sec",)
) -> pathlib.Path | None:
  """``curves.png`` of a workdir: one panel per column of ``metrics.csv`` and ``eval.csv`` that
  changes, named as in summary.json (``train/loss``, ``eval/success``); the constant columns are
  listed with their value under the panels instead of drawn, and those without a finite value
  by name."""
  from jaxlab.core.metrics import read_csv

  workdir = pathlib.Path(workdir)
  series, constant, empty, num_seeds = [], [], [], 1
  for name, prefix in _SUMMARY_PREFIX.items():
    path = workdir / f"{name}.csv"
    if not path.exists():
      continue
    cols, n = _mean_over_seeds(read_csv(path))
    num_seeds = max(num_seeds, n)
    for k, v in cols.items():
      if k == "step" or k in skip:
        continue
      v = np.asarray(v, dtype=float)
      finite = v[np.isfinite(v)]
      if not finite.size:
        empty.append(f"{prefix}{k}")
      elif len(v) > 1 and finite.size == v.size and np.ptp(finite) <= 1e-12 * max(1, abs(v[0])):
        constant.append(f"{prefix}{k} = {finite[0]:.4g}")
      else:
        series.append((f"{prefix}{k}", cols["step"], v))
  notes = []
  if num_seeds > 1:
    notes.append(f"Curves are means over the run's {num_seeds} seeds.")
  if constant:
    notes.append(f"Constant over the run (not drawn): {'; '.join(constant)}.")
  if empty:
    notes.append(f"No finite value (not drawn): {', '.join(empty)}.")
  return panels(workdir / out, series, footnote=" ".join(notes))


def _mean_over_seeds(cols: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], int]:
  """A run over a seed axis has one row per seed and step: its curves are the seeds' means
  (returned with the number of seeds)."""
  if "seed" not in cols:
    return cols, 1
  steps, inverse = np.unique(cols["step"], return_inverse=True)
  counts = np.bincount(inverse)
  out = {"step": steps}
  for k, v in cols.items():
    if k not in ("step", "seed"):
      out[k] = np.bincount(inverse, weights=v) / counts
  return out, len(np.unique(cols["seed"]))


def profiles(
  path: str | pathlib.Path,
  solid: Mapping[str, tuple],
  dashed: Mapping[str, tuple],
  xlabel: str,
  ylabel: str,
  title: str = "",
) -> pathlib.Path:
  """``{label: (xs, ys)}`` as solid lines shaded light to dark in the given order (e.g. one per
  evaluation step), and reference curves ``dashed`` in black/gray (e.g. baselines)."""
  plt = _pyplot()
  fig, ax = plt.subplots(figsize=(6.4, 4.2))
  cmap = plt.get_cmap("viridis")
  n = max(1, len(solid) - 1)
  for i, (label, (xs, ys)) in enumerate(solid.items()):
    ax.plot(
      np.asarray(xs), np.asarray(ys, float), color=cmap(0.85 * i / n), marker=".", label=label
    )
  grays = ("black", "dimgray", "darkgray")
  styles = ("--", ":", "-.")
  drawn: list[tuple[list[str], np.ndarray, np.ndarray]] = []
  for label, (xs, ys) in dashed.items():
    xs, ys = np.asarray(xs), np.asarray(ys, float)
    same = next(
      (d for d in drawn if d[1].shape == xs.shape and np.allclose(d[2], ys, rtol=1e-3, atol=0)),
      None,
    )
    if same is None:
      drawn.append(([label], xs, ys))
    else:  # one line would hide the other: one line, both names
      same[0].append(label)
  for i, (labels, xs, ys) in enumerate(drawn):
    label = labels[0] if len(labels) == 1 else " = ".join(labels) + " (equal: one line)"
    ax.plot(xs, ys, styles[i % 3], color=grays[i % 3], lw=1.5, label=label)
  _label(ax, xlabel, ylabel, title, {"alpha": 0.3}, legend=7)
  return _save(fig, path)


def scatter(
  path: str | pathlib.Path,
  points: Mapping[str, tuple],
  xlabel: str,
  ylabel: str,
  title: str = "",
  diagonal: bool = True,
  hline: tuple[str, float] | None = None,
) -> pathlib.Path:
  """``{label: (xs, ys)}`` as point clouds; ``diagonal`` draws y = x (prediction = truth) and
  ``hline = (label, y)`` a horizontal reference (e.g. a constant predictor)."""
  plt = _pyplot()
  fig, ax = plt.subplots(figsize=(5.2, 4.8))
  allv = []
  for label, (xs, ys) in points.items():
    xs, ys = np.asarray(xs, float), np.asarray(ys, float)
    ax.scatter(xs, ys, s=9, alpha=0.6, label=label)
    allv += [xs[np.isfinite(xs)], ys[np.isfinite(ys)]]
  allv = np.concatenate(allv) if allv else np.zeros(0)
  if diagonal and allv.size:
    lo, hi = float(allv.min()), float(allv.max())
    ax.plot([lo, hi], [lo, hi], "--", color="gray", lw=1, label="y = x")
  if hline is not None:
    ax.axhline(hline[1], ls=":", color="black", lw=1.2, label=hline[0])
  _label(ax, xlabel, ylabel, title, {"alpha": 0.3}, legend=7)
  return _save(fig, path)
