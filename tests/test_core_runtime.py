"""Chunked training runtime: logging, checkpoints, resume equality, SIGTERM save."""

import json
import os
import signal
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import struct

from jaxlab.core import runtime


class State(struct.PyTreeNode):
  w: jax.Array
  opt_state: optax.OptState


TX = optax.adam(3e-2)


def _init():
  w = jnp.zeros((4,))
  return State(w=w, opt_state=TX.init(w))


def _sample(data, key):
  idx = jax.random.randint(key, (8,), 0, data["x"].shape[0])
  return {"x": data["x"][idx], "y": data["y"][idx]}


def _update(state, batch, key):
  noise = 1e-3 * jax.random.normal(key, state.w.shape)  # the per-step key must matter
  loss, g = jax.value_and_grad(lambda w: jnp.mean((batch["x"] @ w - batch["y"]) ** 2))(state.w)
  upd, opt = TX.update(g + noise, state.opt_state, state.w)
  return state.replace(w=optax.apply_updates(state.w, upd), opt_state=opt), {"loss": loss}


@pytest.fixture(scope="module")
def data():
  x = jax.random.normal(jax.random.key(0), (64, 4))
  return {"x": x, "y": x @ jnp.arange(1.0, 5.0)}


def _train(tmp, data, steps, **kw):
  kw = {"log_every": 10, "ckpt_every": 20, "progress": False, **kw}
  return runtime.train(
    _init(),
    _update,
    num_steps=steps,
    workdir=tmp,
    key=jax.random.key_data(jax.random.key(3)),
    data=data,
    sample_fn=_sample,
    **kw,
  )


def test_chunk_boundaries():
  assert runtime.chunk_boundaries(0, 50, 10, 25) == [10, 20, 25, 30, 40, 50]
  assert runtime.chunk_boundaries(25, 50, 10, 0) == [30, 40, 50]
  assert runtime.chunk_boundaries(7, 9, 100) == [9]


def test_train_writes_outputs_and_learns(tmp_path, data):
  evals = []
  state, summary = _train(
    tmp_path, data, 60, eval_fn=lambda s, k: evals.append(k) or {"n": 1.0}, eval_every=30
  )
  assert evals == [30, 60]
  for f in ("metrics.csv", "eval.csv", "summary.json", "curves.png"):
    assert (tmp_path / f).exists(), f
  assert any((tmp_path / "tb").iterdir())
  cols = runtime.read_csv(tmp_path / "metrics.csv")
  assert list(cols["step"]) == [10, 20, 30, 40, 50, 60]
  assert cols["loss"][-1] < cols["loss"][0]
  on_disk = json.loads((tmp_path / "summary.json").read_text())
  assert on_disk["step"] == 60 and on_disk["train/loss"] == pytest.approx(summary["train/loss"])
  steps = sorted(int(p.name) for p in (tmp_path / "checkpoints").iterdir() if p.name.isdigit())
  assert steps == [20, 40, 60]  # keep=3: 20, 40, 60 (and the end)


def test_resume_equals_uninterrupted_bitwise(tmp_path, data):
  ref, _ = _train(tmp_path / "ref", data, 60)
  _train(tmp_path / "split", data, 35)  # stops (and saves) at 35
  state, summary = _train(tmp_path / "split", data, 60)
  assert summary["resumed_from"] == 35
  jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), state, ref)
  # metrics.csv has each step once after the resume
  cols = runtime.read_csv(tmp_path / "split" / "metrics.csv")
  assert list(cols["step"]) == [10, 20, 30, 35, 40, 50, 60]


def test_finished_run_is_not_redone(tmp_path, data):
  s1, _ = _train(tmp_path, data, 20)
  s2, summary = _train(tmp_path, data, 20)
  assert summary["resumed_from"] == 20
  np.testing.assert_array_equal(s1.w, s2.w)


_SCRIPT = textwrap.dedent("""
    import os, signal, sys
    import jax, jax.numpy as jnp
    sys.path.insert(0, {testdir!r})
    import test_core_runtime as t
    from jaxlab.core import runtime
    x = jax.random.normal(jax.random.key(0), (64, 4))
    data = {{"x": x, "y": x @ jnp.arange(1.0, 5.0)}}
    def eval_fn(state, step):
      if step == {kill_at} and not os.path.exists({marker!r}):
        open({marker!r}, "w").close()
        os.kill(os.getpid(), signal.{sig})
        if signal.{sig} == signal.SIGKILL:
          import time; time.sleep(10)
      return {{}}
    state, _ = t._train({workdir!r}, data, 100, eval_fn=eval_fn, eval_every=10, ckpt_every=30)
    import numpy as np
    np.save({out!r}, np.asarray(state.w))
""")


def _subprocess(tmp_path, sig, kill_at):
  script = _SCRIPT.format(
    testdir=os.path.dirname(__file__),
    kill_at=kill_at,
    marker=str(tmp_path / "killed"),
    sig=sig,
    workdir=str(tmp_path / "run"),
    out=str(tmp_path / "w.npy"),
  )
  env = {**os.environ, "JAX_PLATFORMS": "cpu"}
  return subprocess.run(
    [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
  )


@pytest.fixture(scope="module")
def reference_w(tmp_path_factory, data):
  state, _ = _train(tmp_path_factory.mktemp("ref"), data, 100, ckpt_every=30)
  return np.asarray(state.w)


def test_sigterm_saves_then_exits_and_resume_matches(tmp_path, reference_w):
  first = _subprocess(tmp_path, "SIGTERM", kill_at=50)
  assert first.returncode == runtime.SIGTERM_EXIT_CODE, first.stderr[-2000:]
  ckpts = sorted(
    int(p.name) for p in (tmp_path / "run" / "checkpoints").iterdir() if p.name.isdigit()
  )
  assert ckpts[-1] == 50  # saved at the chunk where SIGTERM arrived, not only at 30
  second = _subprocess(tmp_path, "SIGTERM", kill_at=50)
  assert second.returncode == 0, second.stderr[-2000:]
  np.testing.assert_array_equal(np.load(tmp_path / "w.npy"), reference_w)


def test_sigkill_resumes_from_last_checkpoint_bitwise(tmp_path, reference_w):
  first = _subprocess(tmp_path, "SIGKILL", kill_at=70)
  assert first.returncode == -signal.SIGKILL
  ckpts = sorted(
    int(p.name) for p in (tmp_path / "run" / "checkpoints").iterdir() if p.name.isdigit()
  )
  assert ckpts[-1] == 60
  second = _subprocess(tmp_path, "SIGKILL", kill_at=70)
  assert second.returncode == 0, second.stderr[-2000:]
  np.testing.assert_array_equal(np.load(tmp_path / "w.npy"), reference_w)


def test_sharded_runtime_equals_single_device(tmp_path, data):
  from jaxlab.core import mesh as mesh_lib, sharding

  m = mesh_lib.make_mesh("data:8")
  ref, _ = _train(tmp_path / "one", data, 20)

  def sample(d, k):
    b = _sample(d, k)
    return jax.tree.map(lambda a: sharding.constrain(a, ("batch",) + (None,) * (a.ndim - 1), m), b)

  state, _ = runtime.train(
    _init(),
    _update,
    num_steps=20,
    workdir=tmp_path / "mesh",
    key=jax.random.key_data(jax.random.key(3)),
    data=data,
    sample_fn=sample,
    log_every=10,
    ckpt_every=20,
    progress=False,
    mesh=m,
    state_sharding=sharding.replicated(m),
  )
  np.testing.assert_allclose(np.asarray(state.w), np.asarray(ref.w), rtol=1e-5, atol=1e-6)
