"""Small host-side helpers shared by the optimization comparisons (NumPy only, no JAX).

Used by `jaxlab.optim.decentralized.compare` (decentralized Strategy I vs II) and
`jaxlab.optim.goma.compare` (monotone-VI methods); importable from a notebook::

    from jaxlab.optim import report
    report.tail_mean(curve, 0.1)           # mean of the last 10% of a curve
    print(report.md_table(rows, ["topology", "lam", "gap_I"]))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from jaxlab.core.errors import require

TINY = 1e-300  # floor before a log, so an exact zero residual does not give -inf


def tail_mean(x, frac: float) -> float:
  """Mean of the last ``max(1, round(frac * len(x)))`` entries of a 1-D curve."""
  x = np.asarray(x)
  require(x.ndim == 1 and x.size > 0, "x", f"must be a non-empty 1-D curve, got shape {x.shape}")
  require(0 < frac <= 1, "frac", f"must be in (0, 1], got {frac}")
  k = max(1, int(round(frac * len(x))))
  return float(np.mean(x[-k:]))


def geometric_mean(x, axis=0) -> np.ndarray:
  """exp(mean(log x)) along ``axis``, flooring at `TINY` (exact zeros stay finite)."""
  return np.exp(np.log(np.maximum(np.asarray(x, np.float64), TINY)).mean(axis))


def log_points(last: int, num: int) -> np.ndarray:
  """0 and ``num`` log-spaced integers in [1, last] (duplicates removed), as int64."""
  require(last >= 1, "last", f"must be >= 1, got {last}")
  require(num >= 1, "num", f"must be >= 1, got {num}")
  pts = np.unique(np.concatenate([[0], np.round(np.geomspace(1, last, num))]))
  return pts.astype(np.int64)


def fmt(v: Any) -> str:
  """Table cell: booleans as True/False, floats with 3 significant digits, the rest as str."""
  if isinstance(v, (bool, np.bool_)):
    return str(bool(v))
  if isinstance(v, (float, np.floating)):
    return f"{v:.3g}"
  return str(v)


def md_table(rows: Sequence[Mapping[str, Any]], cols: Sequence[str]) -> str:
  """A Markdown table of ``rows`` restricted to ``cols`` (missing cells are empty)."""
  lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
  lines += ["| " + " | ".join(fmt(r.get(c, "")) for c in cols) + " |" for r in rows]
  return "\n".join(lines) + "\n"
