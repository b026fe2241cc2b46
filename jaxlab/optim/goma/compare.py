"""Summaries of monotone-VI runs over several seeds: the reported curve, slopes, the O(1/k²)
constant and the CSV rows (docs/goma.md, "Reported quantities").

Host-side NumPy on the arrays `jaxlab.optim.goma.vi.run` returns, stacked over seeds::

    from jaxlab.optim import vi, vi_compare
    entry, curve = vi_compare.method_summary(
        res, calls, lips, r2, stochastic=False, fit=(100, 10_000), seconds=1.0, hparams={})
    entry["slope"], entry["constant"]     # log-log slope over fit, k² ||F||² / (L² R²)

Deterministic problems report the geometric mean over seeds (the per-seed rates are multiplicative),
stochastic ones the arithmetic mean, i.e. E||F(z_k)||²; the band is min..max over seeds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from jaxlab.optim.goma import vi
from jaxlab.optim.report import geometric_mean

CSV_COLUMNS = (
  "method",
  "iteration",
  "oracle_calls",
  "residual_sq_center",
  "residual_sq_min",
  "residual_sq_max",
)


def center_curve(residual_sq, stochastic: bool) -> np.ndarray:
  """(seeds, iters+1) -> (iters+1,): arithmetic mean if ``stochastic`` else geometric mean."""
  res = np.asarray(residual_sq, np.float64)
  return res.mean(0) if stochastic else geometric_mean(res, 0)


def slopes(center, fit: tuple[int, int]) -> tuple[float | None, float | None]:
  """(endpoint slope, least-squares slope) of the curve over iterations fit[0]..fit[1]; (None,
  None) when the curve is not finite or the range is empty."""
  center = np.asarray(center, np.float64)
  if not (np.all(np.isfinite(center)) and fit[0] < fit[1]):
    return None, None
  ks = np.arange(len(center))
  return (
    float(vi.fit_slope(ks, center, *fit)),
    float(vi.fit_slope(ks, center, *fit, method="lsq")),
  )


def rate_constant(residual_sq_last, lipschitz, r2, iters: int) -> np.ndarray:
  """k² ||F(z_k)||² / (L² ||z_0 − P_Sol(z_0)||²) per seed at k = ``iters``."""
  res, lips, r2 = (np.asarray(x, np.float64) for x in (residual_sq_last, lipschitz, r2))
  return iters**2 * res / (lips**2 * r2)


def method_hparams(base: str, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
  """`vi.default_hparams` of ``base`` as plain floats/strings, overridden by ``extra``."""
  out = {k: (v if isinstance(v, str) else float(v)) for k, v in vi.default_hparams(base).items()}
  return out | dict(extra or {})


def method_summary(
  residual_sq,
  oracle_calls,
  lipschitz,
  r2,
  *,
  stochastic: bool,
  fit: tuple[int, int],
  seconds: float,
  hparams: Mapping[str, Any],
) -> tuple[dict[str, Any], tuple[np.ndarray, ...]]:
  """Summary entry and the (calls, center, lo, hi) curves of one method's runs over seeds.

  Args: ``residual_sq`` (seeds, iters+1); ``oracle_calls`` (seeds, iters+1), the same for every
  seed; ``lipschitz`` and ``r2`` (seeds,). The constant is omitted under noise (it is the
  deterministic O(1/k²) constant).
  """
  res = np.asarray(residual_sq, np.float64)
  calls = np.asarray(oracle_calls, np.float64)[0].astype(np.int64)
  iters = res.shape[1] - 1
  center = center_curve(res, stochastic)
  slope, lsq = slopes(center, fit)
  entry = {
    "slope": slope,
    "slope_lsq": lsq,
    "residual_sq_final": float(center[-1]),
    "oracle_calls_final": int(calls[-1]),
    "oracle_calls_per_iter": float((calls[-1] - calls[1]) / max(iters - 1, 1)),
    "seconds": round(seconds, 2),
    "hparams": dict(hparams),
  }
  if not stochastic:
    const = rate_constant(res[:, -1], lipschitz, r2, iters)
    entry["constant"] = float(geometric_mean(const))
    entry["constant_max"] = float(const.max())
  return entry, (calls, center, res.min(0), res.max(0))


def curve_rows(
  curves: Mapping[str, tuple[np.ndarray, ...]], points: Sequence[int]
) -> list[dict[str, Any]]:
  """Rows of metrics.csv (`CSV_COLUMNS`): each method's curve at the given iterations."""
  rows = []
  for m, (calls, center, lo, hi) in curves.items():
    rows += [
      dict(zip(CSV_COLUMNS, (m, int(i), int(calls[i]), center[i], lo[i], hi[i]))) for i in points
    ]
  return rows


def summary_line(method: str, entry: Mapping[str, Any], fit: tuple[int, int]) -> str:
  """One progress line: slope, constant (deterministic), final residual, oracle calls, time."""
  parts = [f"{method:22s}"]
  if entry["slope"] is not None:
    parts.append(f"slope[{fit[0]}..{fit[1]}] {entry['slope']:+.3f}")
  if "constant" in entry:
    parts.append(f"k^2|F|^2/(L^2R^2) {entry['constant']:.3g}")
  parts.append(f"|F(z_K)|^2 {entry['residual_sq_final']:.3g}")
  parts.append(f"calls {entry['oracle_calls_final']}  ({entry['seconds']:.1f}s)")
  return "  ".join(parts)
