"""Bar chart of per-achievement success rates (Craftax), the one plot jaxlab.core.plots lacks.

Built on matplotlib through :mod:`jaxlab.core.plots`' backend setup and saving, so it writes PNGs
the same way as every other jaxlab plot.
"""

from __future__ import annotations

import pathlib
from collections.abc import Mapping

import numpy as np

from jaxlab.core import plots


def bars(
  path: str | pathlib.Path,
  values: Mapping[str, float],
  xlabel: str,
  title: str = "",
  xlim: tuple[float, float] | None = None,
) -> pathlib.Path:
  """Horizontal bars ``{label: value}`` in the given order (first label on top)."""
  plt = plots._pyplot()
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
    ax.set_title(title, fontsize=9)
  ax.grid(True, axis="x", alpha=0.3)
  return plots._save(fig, path)


def achievement_chart(
  path: str | pathlib.Path, rates: Mapping[str, float], title: str = ""
) -> pathlib.Path:
  """Success rate (%) of each achievement: fraction of evaluation episodes unlocking it."""
  pct = {name.replace("_", " ").lower(): 100.0 * r for name, r in rates.items()}
  return bars(path, pct, "success rate (% of episodes)", title=title, xlim=(0.0, 105.0))
