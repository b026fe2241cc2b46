"""Plots a person reads: constant curves on a readable axis, rates on [0, 1]."""

import numpy as np

from jaxlab.core import plots


def _ylim(monkeypatch, fn, *args, **kwargs):
  import matplotlib.figure

  seen = []
  real = matplotlib.figure.Figure.savefig

  def spy(fig, *a, **k):
    seen.extend(ax.get_ylim() for ax in fig.axes if ax.has_data())
    return real(fig, *a, **k)

  monkeypatch.setattr(matplotlib.figure.Figure, "savefig", spy)
  fn(*args, **kwargs)
  return seen


def test_all_zero_curve_is_not_drawn_on_a_tiny_axis(tmp_path, monkeypatch):
  lims = _ylim(
    monkeypatch, plots.panels, tmp_path / "a.png", [("eval/return", np.arange(5), np.zeros(5))]
  )
  lo, hi = lims[0]
  assert hi - lo >= 1.0 and lo < 0 < hi


def test_success_rate_gets_the_unit_axis(tmp_path, monkeypatch):
  lims = _ylim(
    monkeypatch,
    plots.lines,
    tmp_path / "b.png",
    {"uhm": ([1, 2, 3], [0.1, 0.2, 0.15])},
    "step",
    "success rate",
  )
  lo, hi = lims[0]
  assert lo <= 0 and hi >= 1


def test_histograms_share_bins_and_write_png(tmp_path):
  p = plots.histograms(
    tmp_path / "h.png", {"model": np.random.randn(100), "exact": np.random.randn(100)}, "energy"
  )
  assert p.stat().st_size > 1000


def test_profiles_and_scatter_draw_every_series(tmp_path, monkeypatch):
  import matplotlib.axes

  drawn = []
  real = matplotlib.axes.Axes.plot

  def spy(ax, *a, **k):
    drawn.append((k.get("label"), a[2] if len(a) > 2 else "-"))
    return real(ax, *a, **k)

  monkeypatch.setattr(matplotlib.axes.Axes, "plot", spy)
  n = [1, 2, 3]
  plots.profiles(
    tmp_path / "h.png",
    {"step 0": (n, [3, 3, 3]), "step 9": (n, [1, 2, 2])},
    {"baseline": (n, [2, 2, 2])},
    "n",
    "error",
  )
  assert drawn == [("step 0", "-"), ("step 9", "-"), ("baseline", "--")]
  assert (tmp_path / "h.png").stat().st_size > 0
  drawn.clear()
  plots.scatter(tmp_path / "s.png", {"step 9": ([0, -1], [-2, 1])}, "G", "Q")
  assert drawn == [("y = x", "--")]  # the diagonal, over the points' whole range
  assert (tmp_path / "s.png").stat().st_size > 0
