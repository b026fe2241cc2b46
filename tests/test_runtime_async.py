"""The runtime's host work between chunks made cheaper: asynchronous checkpoint writes that are on
disk by the next boundary, and curves.png laid out without tight_layout's measuring draw."""

import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core import checkpoint, plots, runtime


def _update(state, batch, key):
  w = state["w"] - 0.1 * (state["w"] - batch) + 1e-3 * jax.random.normal(key, state["w"].shape)
  return {"w": w}, {"loss": jnp.mean(w**2)}


def _steps(workdir: pathlib.Path) -> list[int]:
  return sorted(int(p.name) for p in (workdir / "checkpoints").iterdir() if p.name.isdigit())


def test_async_save_then_wait_restores_bitwise(tmp_path):
  state = {"w": jax.random.normal(jax.random.key(0), (5, 3)), "n": jnp.int32(7)}
  mngr = checkpoint.manager(tmp_path, async_save=True)
  try:
    checkpoint.save(mngr, 4, state, wait=False)
    checkpoint.wait(mngr)
    assert _steps(tmp_path) == [4]  # renamed into place, not a tmp folder
  finally:
    mngr.close()
  restored, step = checkpoint.restore(tmp_path, state)
  assert step == 4
  np.testing.assert_array_equal(restored["w"], state["w"])


def test_a_checkpoint_is_on_disk_before_the_next_boundarys_evaluation(tmp_path, monkeypatch):
  waits, seen = [], {}
  save = checkpoint.save

  def spy(mngr, step, state, *, wait=True):
    waits.append(wait)
    return save(mngr, step, state, wait=wait)

  monkeypatch.setattr(checkpoint, "save", spy)

  def eval_fn(state, step):
    seen[step] = _steps(tmp_path)  # what a kill during this evaluation would resume from
    return {"w": float(jnp.mean(state["w"]))}

  loop = runtime.Loop(60, log_every=10, ckpt_every=20, eval_every=10, progress=False, plot=False)
  state, _ = runtime.train(
    {"w": jnp.ones(3)}, _update, loop, key=jax.random.key(1), workdir=tmp_path,
    data=jnp.zeros(3), eval_fn=eval_fn,
  )  # fmt: skip
  assert waits == [False, False, False]  # every save returned while orbax wrote
  # the save at 20 is written during the evaluation at 20 and the chunk to 30, then waited for
  assert 20 in seen[30] and 40 in seen[50]
  assert _steps(tmp_path) == [20, 40, 60]  # the last one too, before train returned


def test_async_checkpoints_resume_bitwise(tmp_path):
  loop = lambda n: runtime.Loop(n, log_every=5, ckpt_every=10, progress=False, plot=False)
  run = lambda wd, n: runtime.train(
    {"w": jnp.ones(3)}, _update, loop(n), key=jax.random.key(2), workdir=wd, data=jnp.zeros(3)
  )[0]
  whole = run(tmp_path / "a", 40)
  run(tmp_path / "b", 20)  # stopped at 20 (a checkpoint), then the same command to 40
  resumed = run(tmp_path / "b", 40)
  np.testing.assert_array_equal(whole["w"], resumed["w"])


@pytest.fixture
def drawn(monkeypatch):
  """The figure ``plots.panels`` saves, drawn, and whether tight_layout ran."""
  import matplotlib.figure

  out = {"tight": 0}
  real_save = matplotlib.figure.Figure.savefig
  real_tight = matplotlib.figure.Figure.tight_layout

  def save(fig, *a, **k):
    real_save(fig, *a, **k)
    out["fig"] = fig

  def tight(fig, *a, **k):
    out["tight"] += 1
    return real_tight(fig, *a, **k)

  monkeypatch.setattr(matplotlib.figure.Figure, "savefig", save)
  monkeypatch.setattr(matplotlib.figure.Figure, "tight_layout", tight)
  return out


def test_curves_fit_the_figure_without_tight_layout(tmp_path, drawn):
  x = np.arange(20) * 48
  series = [(f"train/metric_{i}", x, np.linspace(-1, 1, 20) * 10.0 ** (i - 6)) for i in range(15)]
  series.append(("eval/a long metric name that wraps onto a second line of its title", x, x))
  plots.panels(tmp_path / "c.png", series, footnote="Constant over the run (not drawn): x = 1.")
  assert drawn["tight"] == 0
  from matplotlib.backends.backend_agg import FigureCanvasAgg

  fig = drawn["fig"]
  canvas = FigureCanvasAgg(fig)  # pyplot closed the figure: a canvas to measure its text on
  canvas.draw()
  renderer = canvas.get_renderer()
  page = fig.bbox
  for ax in fig.axes:
    box = ax.get_tightbbox(renderer)  # title, tick labels, axis labels
    assert page.x0 - 1 <= box.x0 and box.x1 <= page.x1 + 1, ax.get_title()
    assert page.y0 - 1 <= box.y0 and box.y1 <= page.y1 + 1, ax.get_title()
  boxes = [ax.get_tightbbox(renderer) for ax in fig.axes]
  for i, a in enumerate(boxes):  # no panel's text runs into another panel
    for b in boxes[i + 1 :]:
      assert not a.overlaps(b)
