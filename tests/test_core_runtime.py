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

from jaxlab.core import metrics, runtime


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


_LOOP_ARGS = {f.name for f in __import__("dataclasses").fields(runtime.Loop)}


def _train(tmp, data, steps, state=None, update=_update, **kw):
  """The test run: loop fields and train() keywords in one call."""
  loop_kw = {"log_every": 10, "ckpt_every": 20, "progress": False}
  loop_kw.update({k: v for k, v in kw.items() if k in _LOOP_ARGS})
  train_kw = {k: v for k, v in kw.items() if k not in _LOOP_ARGS}
  state, result = runtime.train(
    _init() if state is None else state,
    update,
    runtime.Loop(num_steps=steps, **loop_kw),
    workdir=tmp,
    key=jax.random.key_data(jax.random.key(3)),
    data=data,
    sample_fn=_sample,
    **train_kw,
  )
  return state, result.summary


def test_chunk_boundaries():
  assert runtime.chunk_boundaries(0, 50, 10, 25) == [10, 20, 25, 30, 40, 50]
  assert runtime.chunk_boundaries(25, 50, 10, 0) == [30, 40, 50]
  assert runtime.chunk_boundaries(7, 9, 100) == [9]
  # a fresh run's one-step first chunk leaves the rest of the first interval as the longest
  assert runtime.chunk_length(runtime.Loop(5, log_every=5)) == 4
  assert runtime.chunk_length(runtime.Loop(5, log_every=5, log_first_step=False)) == 5
  assert runtime.chunk_length(runtime.Loop(25, log_every=10), start=20) == 5


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


def test_a_fresh_run_logs_its_first_step_without_changing_its_rows(tmp_path, data, monkeypatch):
  """The first chunk of a fresh run is one step (the user sees it run right after the compile);
  metrics.csv keeps its rows at log_every, the first row still the mean of steps 1..10, and the
  state is the one a run without the one-step chunk reaches."""
  lengths = []
  make = runtime.make_chunk_fn

  def recording(*args, **kw):
    chunk = make(*args, **kw)

    def run(state, data, key, start, length, max_len=None):
      lengths.append(length)
      return chunk(state, data, key, start, length, max_len)

    run.memory, run.cache_size = chunk.memory, chunk.cache_size
    return run

  monkeypatch.setattr(runtime, "make_chunk_fn", recording)
  first, _ = _train(tmp_path / "first", data, 25, ckpt_every=0)
  assert lengths == [1, 9, 10, 5]
  lengths.clear()
  plain, _ = _train(tmp_path / "plain", data, 25, ckpt_every=0, log_first_step=False)
  assert lengths == [10, 10, 5]
  a, b = (runtime.read_csv(tmp_path / n / "metrics.csv") for n in ("first", "plain"))
  assert list(a["step"]) == list(b["step"]) == [10, 20, 25]
  np.testing.assert_allclose(a["loss"], b["loss"], rtol=1e-6)
  jax.tree.map(
    lambda x, y: np.testing.assert_array_equal(np.asarray(x), np.asarray(y)), first, plain
  )


def test_chunks_of_different_lengths_share_one_compiled_program(tmp_path, data):
  """Chunks of 10, 10, 10, 5 and 3 steps (log_every 10, ckpt_every 35, 38 steps): one compile, the
  per-step metrics of every step, and the same numbers as 38 steps cut into chunks of 2."""

  def update(state, batch, key):  # a function of its own: a chunk no other test compiled
    return _update(state, batch, key)

  _train(tmp_path / "mixed", data, 38, update=update, ckpt_every=35)
  chunk = runtime.make_chunk_fn(update, _sample)
  assert chunk.cache_size() == 1
  cols = runtime.read_csv(tmp_path / "mixed" / "metrics.csv")
  assert list(cols["step"]) == [10, 20, 30, 38]  # rows at log_every and the last step
  _, per_step = chunk(_init(), data, jax.random.key_data(jax.random.key(3)), 0, 3, 10)
  assert per_step["loss"].shape == (3,) and chunk.cache_size() == 1
  twos, _ = _train(tmp_path / "twos", data, 38, log_every=2, ckpt_every=38)
  mixed, _ = _train(tmp_path / "mixed", data, 38, ckpt_every=35)  # finished: restored
  jax.tree.map(
    lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), twos, mixed
  )


def test_a_chunk_that_cannot_fit_is_refused_before_the_workdir_is_created(
  tmp_path, data, monkeypatch
):
  """XLA's memory analysis of the compiled first chunk against the device's memory: over it, a
  ConfigError naming the loop's memory_field, and nothing written; a resumed run is checked too
  (its checkpoints are kept)."""
  from jaxlab.core import resources
  from jaxlab.core.errors import ConfigError

  def update(state, batch, key):  # a chunk of its own, so its memory is analysed in this test
    return _update(state, batch, key)

  monkeypatch.setattr(resources, "device_memory", lambda: 1000)
  with pytest.raises(ConfigError) as e:
    _train(tmp_path / "run", data, 20, update=update, memory_field="config.width")
  assert e.value.field == "config.width" and "XLA's memory analysis" in e.value.message
  assert "this machine has 1000 B" in e.value.message
  assert not (tmp_path / "run").exists()
  monkeypatch.undo()
  _train(tmp_path / "run", data, 20, update=update)  # stops (and saves) at 20
  monkeypatch.setattr(resources, "device_memory", lambda: 1000)
  with pytest.raises(ConfigError) as e:
    _train(tmp_path / "run", data, 40, update=update)
  assert e.value.field == "config.batch_size"  # the default memory_field
  assert runtime.read_csv(tmp_path / "run" / "metrics.csv")["step"].tolist() == [10, 20]


def test_a_chunk_that_fits_runs_the_executable_the_check_compiled(tmp_path, data, monkeypatch):
  """The memory check compiles the chunk once; the run uses that executable (jit's own dispatch
  never runs it) and computes what the jitted chunk computes. On a CPU the arguments are not
  counted against the host's available memory; without a memory analysis there is no check."""

  def update(state, batch, key):
    return _update(state, batch, key)

  key = jax.random.key_data(jax.random.key(3))
  state, _ = _train(tmp_path / "run", data, 30, update=update)
  chunk = runtime.make_chunk_fn(update, _sample)
  assert chunk.cache_size() == 1 and chunk.jitted._cache_size() == 0
  nbytes = chunk.memory(_init(), data, key, 10)
  assert chunk.cache_size() == 1
  state_bytes = sum(np.asarray(x).nbytes for x in jax.tree.leaves(_init()))
  assert state_bytes < nbytes < 2**30  # arguments included, a sane size
  ref = _init()
  for start in (0, 10, 20):
    ref, _ = chunk.jitted(ref, data, key, jnp.int32(start), jnp.int32(10), 10)
  jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), state, ref)

  from jaxlab.core import resources

  # on a CPU the limit is the host's available memory, which the arguments (state and data,
  # already allocated) no longer count: what the chunk adds is what must fit
  added = chunk.memory(_init(), data, key, 10, arguments=False)
  assert added < nbytes
  monkeypatch.setattr(resources, "device_memory", lambda: added)
  again, _ = _train(tmp_path / "again", data, 30, update=update)
  np.testing.assert_array_equal(np.asarray(again.w), np.asarray(state.w))

  def other(state, batch, key):
    return _update(state, batch, key)

  monkeypatch.setattr(resources, "device_memory", lambda: 1000)
  monkeypatch.setattr(runtime, "chunk_bytes", lambda compiled, arguments=True: None)  # no analysis
  unchecked, _ = _train(tmp_path / "unchecked", data, 30, update=other)
  np.testing.assert_array_equal(np.asarray(unchecked.w), np.asarray(state.w))


def test_one_step_chunks_equal_scanned_chunks(tmp_path, data):
  # A chunk of one step runs without a loop (runtime.make_chunk_fn); same numbers as a scan.
  ref, _ = _train(tmp_path / "ref", data, 20)
  one, summary = _train(tmp_path / "one", data, 20, log_every=1, ckpt_every=20)
  jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), one, ref)
  assert len(runtime.read_csv(tmp_path / "one" / "metrics.csv")["step"]) == 20


def test_finished_run_is_not_redone_and_keeps_its_record(tmp_path, data):
  files = lambda: {str(p): p.read_bytes() for p in sorted(tmp_path.rglob("*")) if p.is_file()}
  s1, first = _train(tmp_path, data, 20, eval_fn=lambda s, k: {"n": 1.0})
  on_disk = files()
  s2, again = _train(tmp_path, data, 20, eval_fn=lambda s, k: {"n": 1.0})
  np.testing.assert_array_equal(s1.w, s2.w)
  assert again["train/loss"] == first["train/loss"] and again["eval/n"] == 1.0
  assert files() == on_disk  # re-run: every file as it was (no new TensorBoard file, no pid)
  _, fewer = _train(tmp_path, data, 10)  # --steps below the last checkpoint: same record
  assert fewer["train/loss"] == first["train/loss"]


def test_summary_rebuilt_when_killed_before_it_was_written(tmp_path, data):
  _, first = _train(tmp_path, data, 20)
  (tmp_path / "summary.json").unlink()  # a kill between the final checkpoint and the summary
  _, again = _train(tmp_path, data, 20)
  assert again["train/loss"] == pytest.approx(first["train/loss"])


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
  from jaxlab.core import mesh as mesh_lib
  from jaxlab.core import sharding

  m = mesh_lib.make_mesh("data:8")
  ref, _ = _train(tmp_path / "one", data, 20)

  def sample(d, k):
    b = _sample(d, k)
    return jax.tree.map(lambda a: sharding.constrain(a, ("batch",) + (None,) * (a.ndim - 1), m), b)

  state, _ = runtime.train(
    _init(),
    _update,
    runtime.Loop(num_steps=20, log_every=10, ckpt_every=20, progress=False),
    workdir=tmp_path / "mesh",
    key=jax.random.key_data(jax.random.key(3)),
    data=data,
    sample_fn=sample,
    mesh=m,
    state_sharding=sharding.replicated(m),
  )
  np.testing.assert_allclose(np.asarray(state.w), np.asarray(ref.w), rtol=1e-5, atol=1e-6)


def test_in_memory_run_keeps_every_step_and_writes_nothing(tmp_path, data, monkeypatch):
  monkeypatch.chdir(tmp_path)
  state, result = runtime.train(
    _init(),
    _update,
    runtime.Loop(num_steps=25, log_every=10, history=True, progress=False),
    key=jax.random.key_data(jax.random.key(3)),
    data=data,
    sample_fn=_sample,
  )
  assert result.history["loss"].shape == (25,)
  assert result.summary["train/loss"] == pytest.approx(result.history["loss"][20:].mean())
  assert list(tmp_path.iterdir()) == []
  ref, _ = _train(tmp_path / "disk", data, 25)  # same keys with and without a workdir
  np.testing.assert_array_equal(np.asarray(state.w), np.asarray(ref.w))


def test_resume_with_another_config_is_refused_naming_the_field(tmp_path, data):
  from jaxlab.core.errors import ConfigError

  _train(tmp_path, data, 20, config={"lr": 0.1, "seed": 0})
  before = (tmp_path / "config.json").read_text()
  with pytest.raises(ConfigError, match=r"lr: 0.1 -> 0.2") as e:
    _train(tmp_path, data, 40, config={"lr": 0.2, "seed": 0})
  assert e.value.field == "workdir"
  assert (tmp_path / "config.json").read_text() == before  # the record is not overwritten
  _, s = _train(tmp_path, data, 40, config={"lr": 0.1, "seed": 0})  # same config: resumes
  assert s["resumed_from"] == 20


def test_second_process_on_a_workdir_is_refused(tmp_path, data):
  from jaxlab.core import workdir
  from jaxlab.core.errors import ConfigError

  with workdir.session(tmp_path):
    with pytest.raises(ConfigError, match="in use by pid"):
      _train(tmp_path, data, 10)
  _train(tmp_path, data, 10)  # released on exit


def test_stale_lock_of_a_dead_process_is_ignored(tmp_path, data):
  code = (
    f"from jaxlab.core import workdir; import pathlib, os\n"
    f"with workdir.session(pathlib.Path({str(tmp_path)!r})): os._exit(9)"
  )
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
  assert r.returncode == 9 and (tmp_path / ".lock").exists()
  _train(tmp_path, data, 10)  # flock died with its process


def test_metrics_csv_rewrite_on_resume_is_atomic(tmp_path, data, monkeypatch):
  _train(tmp_path, data, 40, ckpt_every=20)
  import shutil

  shutil.rmtree(tmp_path / "checkpoints" / "40")  # resume at 20; rows 30, 40 must go
  opened = []
  real_open = open

  def spy(path, mode="r", *a, **k):
    opened.append((str(path), mode))
    return real_open(path, mode, *a, **k)

  monkeypatch.setattr("builtins.open", spy)
  _train(tmp_path, data, 40, ckpt_every=20)
  writes = [(p, m) for p, m in opened if p.endswith("metrics.csv") and "w" in m]
  assert writes == []  # the live file is never truncated: new file, then rename
  cols = runtime.read_csv(tmp_path / "metrics.csv")
  assert list(cols["step"]) == [10, 20, 30, 40]


def test_non_finite_loss_stops_and_keeps_last_good_checkpoint(tmp_path, data):
  def update(state, batch, key):
    state, m = _update(state, batch, key)
    blow = jnp.where(state.opt_state[0].count > 25, jnp.nan, 0.0)
    return state, {"loss": m["loss"] + blow}

  with pytest.raises(runtime.NonFiniteError, match="non-finite loss"):
    runtime.train(
      _init(),
      update,
      runtime.Loop(num_steps=60, log_every=10, ckpt_every=10, progress=False),
      workdir=tmp_path,
      key=jax.random.key_data(jax.random.key(3)),
      data=data,
      sample_fn=_sample,
    )
  ckpts = sorted(int(p.name) for p in (tmp_path / "checkpoints").iterdir() if p.name.isdigit())
  assert ckpts[-1] == 20 and not (tmp_path / "summary.json").exists()


def test_summary_is_strict_json_with_provenance(tmp_path, data):
  _train(tmp_path, data, 10)
  s = json.loads((tmp_path / "summary.json").read_text(), parse_constant=lambda c: 1 / 0)
  p = s["provenance"]
  assert p["versions"]["jax"] == jax.__version__ and p["process_count"] == 1
  assert p["device_count"] == jax.device_count() and "git_commit" in p


def test_profile_writes_a_trace(tmp_path, data):
  _train(tmp_path, data, 30, profile=True)
  assert any(
    f.suffix in (".pb", ".gz") or f.name.endswith(".xplane.pb")
    for f in (tmp_path / "profile").rglob("*")
    if f.is_file()
  )


def test_corrupted_checkpoint_is_one_clear_error(tmp_path, data):
  from jaxlab.core.errors import ConfigError

  _train(tmp_path, data, 20)
  for f in (tmp_path / "checkpoints" / "20").rglob("*"):
    if f.is_file() and f.stat().st_size > 0 and "metadata" not in f.name:
      f.write_bytes(b"garbage")
  with pytest.raises(ConfigError, match="cannot be restored") as e:
    _train(tmp_path, data, 40)
  assert e.value.field == "workdir" and len(str(e.value)) < 400


def test_write_table_round_trips(tmp_path):
  from jaxlab.core import metrics

  p = metrics.write_table(tmp_path / "t.csv", [{"step": 1, "a": 0.5}, {"step": 2, "b": 3.0}])
  cols = metrics.read_csv(p)
  assert list(cols) == ["step", "a", "b"] and cols["b"][1] == 3.0 and np.isnan(cols["b"][0])


def test_units_per_step_adds_a_throughput_metric(tmp_path, data):
  _, s = _train(tmp_path, data, 20, units_per_step=7, units_name="env_steps_per_sec")
  assert s["env_steps_per_sec"] == pytest.approx(7 * s["steps_per_sec"])  # steady, whole run
  assert s["env_steps_per_sec_average"] == pytest.approx(7 * s["steps_per_sec_average"])
  cols = runtime.read_csv(tmp_path / "metrics.csv")
  np.testing.assert_allclose(cols["env_steps_per_sec"], 7 * cols["steps_per_sec"], rtol=1e-6)


def test_restored_state_reuses_the_compiled_update(tmp_path):
  # A fresh TrainState holds step = 0 (a Python int), a carried one a weak int32; orbax restores
  # the latter as a strong int32, which jit would compile a second time. Restore keeps the type.
  from jaxlab.core import checkpoint
  from jaxlab.core.train_state import TrainState

  fresh = TrainState.create(lambda v, x: v["params"]["w"] @ x, {"w": jnp.ones(3)}, optax.sgd(0.1))
  traces = []

  @jax.jit
  def step(s):
    traces.append(1)
    return s.apply_gradients(grads={"w": s.params["w"]})

  carried = step(fresh)
  carried = step(carried)
  mngr = checkpoint.manager(tmp_path, 1)
  checkpoint.save(mngr, 2, carried)
  for like in (fresh, carried):  # a fresh init or a state carried in the process
    restored = checkpoint.restore_with(mngr, like, 2)
    assert int(restored.step) == 2
    step(restored)
  mngr.close()
  assert len(traces) == 1


def test_a_second_train_call_reuses_the_compiled_chunk(data):
  # A notebook that trains twice with the same update and sample functions compiles once.
  traces = []

  def update(state, batch, key):
    traces.append(1)
    return _update(state, batch, key)

  loop = runtime.Loop(num_steps=20, log_every=10, progress=False)
  kw = dict(key=jax.random.key_data(jax.random.key(3)), data=data, sample_fn=_sample)
  first, _ = runtime.train(_init(), update, loop, **kw)
  second, _ = runtime.train(_init(), update, loop, **kw)
  assert len(traces) == 1
  np.testing.assert_array_equal(first.w, second.w)


def test_summary_reports_steady_and_whole_run_rates(tmp_path, data):
  # 95 steps in chunks of 10: the first chunk and the last (5 steps, a new length) compile; the
  # steady rate leaves them out, the average is the whole run's steps over its wall time.
  def update(state, batch, key):
    state, metrics = _update(state, batch, key)
    return state, metrics

  loop = runtime.Loop(num_steps=95, log_every=10, ckpt_every=0, units_per_step=4, units_name="u")
  _, result = runtime.train(
    _init(), update, loop, workdir=tmp_path, key=jax.random.key(3), data=data, sample_fn=_sample
  )
  s = json.loads((tmp_path / "summary.json").read_text())
  assert s["steps_per_sec_average"] == pytest.approx(95 / s["wall_s"], rel=1e-6)
  assert s["steps_per_sec"] > 2 * s["steps_per_sec_average"]  # compilation dominates the average
  assert s["u"] == pytest.approx(4 * s["steps_per_sec"]) and s["u_average"] == pytest.approx(
    4 * s["steps_per_sec_average"]
  )
  assert result.summary["steps_per_sec"] == s["steps_per_sec"]


def test_restore_only_reads(tmp_path):
  # Evaluation and generation read a run: no checkpoints/ folder appears, nothing is pruned.
  from jaxlab.core import checkpoint

  like = {"w": jnp.zeros(3)}
  assert checkpoint.restore(tmp_path / "run", like) is None
  assert not (tmp_path / "run").exists()
  mngr = checkpoint.manager(tmp_path / "run", keep=2)
  for step in (1, 2):
    checkpoint.save(mngr, step, {"w": jnp.full(3, float(step))})
  mngr.close()
  state, step = checkpoint.restore(tmp_path / "run", like, step=1)
  assert step == 1 and float(state["w"][0]) == 1.0
  assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == ["1", "2"]
  with pytest.raises(runtime.ConfigError) as e:
    checkpoint.restore(tmp_path / "run", {"w": jnp.zeros(4)})
  assert e.value.field == "workdir"


def test_t_interval_is_the_95_percent_student_t_interval():
  # t_{0.975, 2} = 4.302653 (tables); sd([1, 2, 3]) = 1, n = 3
  m, lo, hi = metrics.t_interval([1.0, 2.0, 3.0])
  half = 4.302652729911275 / np.sqrt(3.0)
  np.testing.assert_allclose((m, lo, hi), (2.0, 2.0 - half, 2.0 + half), rtol=1e-9)
  m, lo, hi = metrics.t_interval([5.0])
  assert m == 5.0 and np.isnan(lo) and np.isnan(hi)


def test_equivalent_shardings_share_one_compiled_chunk():
  """The LM's params are placed as ``P(None, 'fsdp', None, None)`` and come out of a chunk as
  ``P(None, 'fsdp')`` (tests/test_lm_experiment.py::test_experiment_cli_mesh_run, slow): the
  compiled chunk is keyed by the sharding up to trailing unsharded dimensions, so the second chunk
  does not compile again; a different sharding still gets its own executable."""
  from jax.sharding import NamedSharding, PartitionSpec

  from jaxlab.core import mesh as mesh_lib

  m = mesh_lib.make_mesh("data:2,fsdp:4")
  x = jnp.ones((2, 8, 2, 2))
  put = lambda *spec: jax.device_put(x, NamedSharding(m, PartitionSpec(*spec)))
  key = lambda *spec: runtime._arg_types((put(*spec),))
  assert key(None, "fsdp", None, None) == key(None, "fsdp")
  assert key(None, "fsdp") != key("data", "fsdp")
