"""The UHM run's pictures and last line say what they show and what they do not: titles inside the
figure, coinciding baselines named together, a diagnostic named as learning only when it beat its
baseline, curves.png without constant panels and with summary.json's names. Crafted data, no
training (the plotting and report functions are called directly)."""

import json
import types

import numpy as np
import pytest

from jaxlab.core import plots
from jaxlab.rl import uhm
from jaxlab.rl.uhm import task as task_lib

K = 8
ENV = "cube-single-play-singletask-task2-v0"


@pytest.fixture
def figures(monkeypatch):
  """{file name: the matplotlib figure as saved}."""
  import matplotlib.figure

  seen = {}
  real = matplotlib.figure.Figure.savefig

  def spy(fig, path, *a, **k):
    out = real(fig, path, *a, **k)
    renderer = fig.canvas.get_renderer()  # the saved layout (gone once the figure is closed)
    texts = [ax.title for ax in fig.axes if ax.get_title()] + list(fig.texts)
    fig.boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts]
    seen[str(path).rsplit("/", 1)[-1]] = fig
    return out

  monkeypatch.setattr(matplotlib.figure.Figure, "savefig", spy)
  return seen


def _inside(fig) -> None:
  """Every title and figure text lies within the figure's width and height."""
  assert fig.boxes
  for text, box in fig.boxes:
    assert box.x0 >= -1 and box.x1 <= fig.bbox.width + 1, (text, box, fig.bbox)
    assert box.y0 >= -1 and box.y1 <= fig.bbox.height + 1, (text, box, fig.bbox)


def _legend(fig) -> list[str]:
  return [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]


def _fake_task(mean_return=1.0):
  G = np.linspace(0.0, 20.0, 16)
  return types.SimpleNamespace(
    config=types.SimpleNamespace(agent="uhm", k_max=K, discount=0.99),
    env_name=ENV,
    record={},
    heldout=types.SimpleNamespace(mc_return=G, mean_return=mean_return),
  )


def _seed_row(q_mae, model_err, base=0.3154):
  return dict(
    q_pred=list(np.full(16, 30.0)),
    q_mae=q_mae,
    q_bias=q_mae,
    q_corr=0.0,
    q_base_mae=5.0,
    model_err=list(model_err),
    model_err_state=[base] * K,  # the two baselines coincide (as on cube-single at rest)
    model_err_mean=[base] * K,
  )


def _write_run(workdir, q_last, err_last):
  rows = {0: _seed_row(25.0, [0.5] * K), 2000: _seed_row(q_last, err_last)}
  with open(workdir / "diagnostics.jsonl", "w") as f:
    for step, row in rows.items():
      f.write(json.dumps({"step": step, "seeds": {"0": row}}) + "\n")
  result = types.SimpleNamespace(
    summary={"step": 2000, "eval/success": 0.0},
    evals={0: {"success": 0.0}, 1000: {"success": 0.0}, 2000: {"success": 0.0}},
  )
  return result


def test_uhm_report_figures_fit_and_name_what_they_show(tmp_path, figures):
  pytest.importorskip("ogbench")  # summary.json records OGBench's version
  task = _fake_task()
  # the critic's error fell 25 -> 20 but stays 4x the constant baseline's 5; the horizon model
  # ends below the (coinciding) baselines at every n
  result = _write_run(tmp_path, q_last=20.0, err_last=[0.1] * K)
  summary = task_lib.write_report(tmp_path, task, result, [0])
  assert set(figures) >= {"learning_curve.png", "horizon_model.png", "critic.png"}
  for name in ("learning_curve.png", "horizon_model.png", "critic.png"):
    _inside(figures[name])
  # coinciding baselines: one line whose legend names both
  legend = _legend(figures["horizon_model.png"])
  both = [t for t in legend if "current state" in t and "mean displacement" in t]
  assert len(both) == 1 and "equal" in both[0], legend
  assert "below the better baseline at 8 of 8 horizons" in figures["horizon_model.png"].axes[
    0
  ].get_title().replace("\n", " ")
  # the critic's picture says it is not better than a constant, and draws that constant
  critic_title = figures["critic.png"].axes[0].get_title().replace("\n", " ")
  assert "4.0x the constant baseline's 5" in critic_title, critic_title
  assert any("constant baseline" in t for t in _legend(figures["critic.png"]))
  line = uhm.final_line(summary, task, 10)
  assert "[horizon_model.png]" in line and "below the mean displacement" not in line, line
  assert "[critic.png]" not in line, line
  assert "critic |Q - G| 25 -> 20 (fell), still 4.0x" in line, line
  assert "not yet better than the baseline" in line, line


def test_the_last_line_names_the_critic_when_it_beats_its_baseline(tmp_path, figures):
  pytest.importorskip("ogbench")
  task = _fake_task()
  result = _write_run(tmp_path, q_last=2.0, err_last=[0.9] * K)  # the model is worse than both
  summary = task_lib.write_report(tmp_path, task, result, [0])
  line = uhm.final_line(summary, task, 10)
  assert "critic |Q - G| 25 -> 2, below the constant" in line and "[critic.png]" in line, line
  assert "[horizon_model.png]" not in line and "horizon-model error at n=4 0.5 -> 0.9" in line
  assert "2.9x the current state baseline's 0.315: not yet better" in line, line
  title = figures["horizon_model.png"].axes[0].get_title().replace("\n", " ")
  assert "below the better baseline at 0 of 8 horizons" in title, title


def test_curves_png_has_no_constant_panels_and_summary_names(tmp_path, figures):
  steps = np.arange(0, 400, 20)
  cols = {
    "step": steps,
    "seed": np.zeros_like(steps),
    "loss": 1.0 / (1 + steps),
    "lr": np.full(len(steps), 3e-4),  # constant: listed, not drawn
    "grad_norm": np.sqrt(1 + steps),
  }
  # two seeds: the curves are their means
  lines = ["step,seed,loss,lr,grad_norm"]
  for seed in (0, 1):
    lines += [
      f"{s},{seed},{cols['loss'][i] + seed},{cols['lr'][i]},{cols['grad_norm'][i]}"
      for i, s in enumerate(steps)
    ]
  (tmp_path / "metrics.csv").write_text("\n".join(lines) + "\n")
  (tmp_path / "eval.csv").write_text(
    "step,success,return,qpi_mae\n0,0.0,1.0,nan\n200,0.0,2.0,nan\n400,0.0,3.0,nan\n"
  )
  plots.learning_curves(tmp_path)
  fig = figures["curves.png"]
  titles = sorted(ax.get_title() for ax in fig.axes if ax.get_title())
  assert titles == ["eval/return", "train/grad_norm", "train/loss"], titles
  note = " ".join(t.get_text() for t in fig.texts).replace("\n", " ")
  assert "train/lr = 0.0003" in note and "eval/success = 0" in note, note
  assert "means over the run's 2 seeds" in note, note
  assert "No finite value (not drawn): eval/qpi_mae." in note, note
  _inside(fig)
  w, h = fig.get_size_inches() * fig.dpi
  assert w <= 4 * 3.6 * fig.dpi + 1 and h < 2 * 2.6 * fig.dpi, (w, h)  # 3 panels: one row


def test_a_long_title_is_wrapped_inside_the_figure(tmp_path, figures):
  title = "uhm on " + ENV + "\n(" + "0 % is expected at 2000 updates; " * 4 + ")"
  plots.lines(
    tmp_path / "l.png", {"uhm": ([0, 1], [0.0, 0.0])}, "step", "success rate", title=title
  )
  _inside(figures["l.png"])
  assert figures["l.png"].axes[0].get_title().count("\n") >= 2


def test_the_build_line_says_compiled_or_read_from_the_cache(tmp_path):
  """The run's progress lines after a build say what happened: an identical program in a fresh
  process (here: after clearing the in-memory caches) is read from the persistent cache."""
  import jax
  import jax.numpy as jnp
  from jax.experimental.compilation_cache import compilation_cache as cc

  names = (
    "jax_compilation_cache_dir",
    "jax_persistent_cache_min_compile_time_secs",
    "jax_persistent_cache_min_entry_size_bytes",
  )
  old = {k: getattr(jax.config, k) for k in names}
  try:
    jax.config.update("jax_compilation_cache_dir", str(tmp_path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    cc.reset_cache()
    task_lib._watch_compiles()
    f = jax.jit(lambda x: jnp.tanh(x) @ x.T + 7.0)
    before = task_lib._compile_counts()
    f(np.ones((3, 5), np.float32)).block_until_ready()
    assert task_lib._compile_words(before).startswith("compiled 1 program(s) in ")
    jax.clear_caches()
    before = task_lib._compile_counts()
    f(np.ones((3, 5), np.float32)).block_until_ready()
    words = task_lib._compile_words(before)
    assert words.startswith("read from the compilation cache") and "compiled" not in words.replace(
      "nothing compiled", ""
    ), words
  finally:
    for k, v in old.items():
      jax.config.update(k, v)
    cc.reset_cache()
