"""--tracker: TensorBoard by default, Weights & Biases offline without a key, one W&B run per
workdir that a resumed run appends to; a bad value is one line, exit 2."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from programs import run_program

from jaxlab.core import runtime, tracking
from jaxlab.core.errors import ConfigError


def test_bad_tracker_is_one_line_exit_2_and_writes_nothing(tmp_path):
  wd = tmp_path / "wd"
  r = run_program("experiments.ppo", ["--tracker=mlflow", f"--workdir={wd}"], tmp_path)
  lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
  assert r.returncode == 2 and len(lines) == 1, r.stderr[-2000:]
  assert lines[0].startswith("error: --tracker: got 'mlflow'; allowed: tensorboard, wandb")
  assert not wd.exists()
  with pytest.raises(ConfigError, match="tracker"):
    runtime.Loop(10, tracker="mlflow")


def test_run_id_is_the_workdir_and_identity(tmp_path):
  a, b = tmp_path / "a", tmp_path / "b"
  assert tracking.run_id(a) == tracking.run_id(tmp_path / "x" / ".." / "a")  # resolved path
  assert tracking.run_id(a) != tracking.run_id(b)
  assert tracking.run_id(a, {"seed": 0}) != tracking.run_id(a, {"seed": 1})
  assert len(tracking.run_id(a)) == 16


def test_wandb_is_offline_without_an_api_key(tmp_path, monkeypatch):
  monkeypatch.delenv("WANDB_MODE", raising=False)
  monkeypatch.delenv("WANDB_API_KEY", raising=False)
  monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
  monkeypatch.setenv("NETRC", str(tmp_path / "none"))
  assert tracking.wandb_mode() == "offline"
  monkeypatch.setenv("WANDB_MODE", "disabled")
  assert tracking.wandb_mode() == "disabled"


class Killed(Exception):
  pass


def _update(state, batch, key):
  w = state["w"] + jax.random.normal(key, (2,))
  return {"w": w}, {"loss": jnp.sum(w**2)}


def _train(wd, killed_at=None):
  def eval_fn(state, step):
    if step == killed_at:
      raise Killed  # the process dies after the checkpoint of step 2, before that of step 4
    return {"r": float(step)}

  loop = runtime.Loop(6, log_every=2, ckpt_every=2, eval_every=2, progress=False, tracker="wandb")
  video = lambda state, step: np.full((2, 4, 4, 3), 40 * step, np.uint8)
  config = {"lr": 0.1}
  return runtime.train(
    {"w": jnp.zeros(2)},
    _update,
    loop,
    key=jax.random.key(0),
    workdir=wd,
    eval_fn=eval_fn,
    video_fn=video,
    config=config,
  )


def test_wandb_killed_and_resumed_run_is_one_run(tmp_path, monkeypatch):
  pytest.importorskip("wandb", reason="wandb is not installed (pip install 'jaxlab[wandb]')")
  monkeypatch.setenv("WANDB_MODE", "offline")
  wd = tmp_path / "wd"
  with pytest.raises(Killed):
    _train(wd, killed_at=4)
  _, result = _train(wd)
  assert result.summary["resumed_from"] == 2 and result.summary["step"] == 6
  runs = sorted((wd / "wandb").glob("offline-run-*"))
  want = tracking.run_id(wd, {})
  assert len(runs) == 2 and all(r.name.endswith(f"-{want}") for r in runs), runs
  assert all((r / f"run-{want}.wandb").exists() for r in runs)
  assert not (wd / "tb").exists()  # the tracker replaces TensorBoard; the CSV files stay
  assert (wd / "metrics.csv").exists() and (wd / "videos" / "eval_6.gif").exists()
  for r in runs:  # the run's config and provenance, in W&B's offline record
    record = (r / f"run-{want}.wandb").read_bytes()
    assert b'"lr":0.1' in record and b"git_commit" in record
  media = list(runs[-1].glob("files/media/videos/**/*.gif"))
  assert media, "the evaluation video is logged to W&B"
