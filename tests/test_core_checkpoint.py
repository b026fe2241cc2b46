"""Checkpoints that cannot be silently wrong: digests, fallback to the newest good one, suspects.

A killed run's latest checkpoint is damaged in place (one flipped bit in a stored value, in the
digest record or in orbax's metadata; a truncated or emptied file); the same run then resumes from
the checkpoint before it with one warning line, keeps the damaged one on disk, and ends bit for bit
where an uninterrupted run ends.
"""

import pathlib
import re
import shutil
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest
from flax import struct
from programs import run_program

from jaxlab.core import checkpoint, metrics, runtime
from jaxlab.core.errors import ConfigError


class State(struct.PyTreeNode):
  w: jax.Array
  opt_state: optax.OptState


TX = optax.adam(1e-2)
# 32 x 32 float32 = 4 KiB per array: above ocdbt's 1 KiB inline limit, so each array lives in a
# zstd-compressed data file, where float bytes stay nearly raw and a flipped bit reads back silently
DIM = 32


def _init():
  w = jnp.zeros((DIM, DIM))
  return State(w=w, opt_state=TX.init(w))


def _sample(data, key):
  idx = jax.random.randint(key, (16,), 0, data["x"].shape[0])
  return {"x": data["x"][idx], "y": data["y"][idx]}


def _update(state, batch, key):
  noise = 1e-3 * jax.random.normal(key, state.w.shape)
  loss, g = jax.value_and_grad(lambda w: jnp.mean((batch["x"] @ w - batch["y"]) ** 2))(state.w)
  upd, opt = TX.update(g + noise, state.opt_state, state.w)
  return state.replace(w=optax.apply_updates(state.w, upd), opt_state=opt), {"loss": loss}


@pytest.fixture(scope="module")
def data():
  x = jax.random.normal(jax.random.key(0), (128, DIM))
  w = jax.random.normal(jax.random.key(1), (DIM, DIM))
  return {"x": x, "y": x @ w}


def _train(workdir, data, steps, update=_update):
  loop = runtime.Loop(num_steps=steps, log_every=10, ckpt_every=20, keep=3, progress=False)
  loop = runtime.Loop(**{**loop.__dict__, "plot": False, "tensorboard": False})
  key = jax.random.key_data(jax.random.key(3))
  state, _ = runtime.train(
    _init(), update, loop, workdir=workdir, key=key, data=data, sample_fn=_sample
  )
  return state


@pytest.fixture(scope="module")
def reference(tmp_path_factory, data):
  """The uninterrupted 60-step run's final state."""
  return _train(tmp_path_factory.mktemp("ref"), data, 60)


@pytest.fixture(scope="module")
def killed(tmp_path_factory, data):
  """A run stopped after its checkpoint at step 40 (checkpoints 20 and 40 on disk)."""
  workdir = tmp_path_factory.mktemp("killed") / "run"
  _train(workdir, data, 40)
  (workdir / "summary.json").unlink()  # killed before its summary: the next run resumes
  return workdir


@pytest.fixture
def run(tmp_path, killed):
  """A fresh copy of the killed run."""
  shutil.copytree(killed, tmp_path / "run")
  return tmp_path / "run"


def _raw(step_dir: pathlib.Path):
  """The arrays orbax reads from a step folder, unverified (no digest, no target)."""
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # orbax: no sharding given, read from the sharding file
    return jax.tree.leaves(ocp.PyTreeCheckpointer().restore(step_dir / "state"))


def _largest(step_dir: pathlib.Path) -> pathlib.Path:
  return max((f for f in (step_dir / "state").rglob("*") if f.is_file()), key=_size)


def _size(f: pathlib.Path) -> int:
  return f.stat().st_size


def flip_a_stored_value(step_dir: pathlib.Path) -> None:
  """Flips one bit of the largest array data file so that orbax reads back, without an error,
  arrays of which exactly one value differs (asserted: so the corruption is a silent one)."""
  before = [np.asarray(a) for a in _raw(step_dir)]
  f = _largest(step_dir)
  original = f.read_bytes()
  for pos in range(len(original) // 2, len(original)):
    flipped = bytearray(original)
    flipped[pos] ^= 1
    f.write_bytes(bytes(flipped))
    try:
      after = [np.asarray(a) for a in _raw(step_dir)]
    except Exception:  # this byte is framing: tensorstore notices; try the next one
      f.write_bytes(original)
      continue
    changed = sum(int(np.sum(a != b)) for a, b in zip(before, after))
    if changed == 1:
      return
    f.write_bytes(original)
  raise AssertionError(f"no single bit of {f} changes exactly one stored value")


def _flip_first_byte(f: pathlib.Path) -> None:
  b = bytearray(f.read_bytes())
  b[0] ^= 1
  f.write_bytes(bytes(b))


def _flip_in_digest_record(step_dir: pathlib.Path) -> None:
  f = step_dir / checkpoint.DIGEST_ITEM / "metadata"
  text = f.read_bytes()
  pos = text.index(b'"seal"') + 12  # a hex digit of the record's own digest: still valid JSON
  b = bytearray(text)
  b[pos] ^= 1
  f.write_bytes(bytes(b))


CORRUPTIONS = {
  "bit_in_a_stored_value": flip_a_stored_value,
  "bit_in_the_digest_record": _flip_in_digest_record,
  "bit_in_orbax_metadata": lambda d: _flip_first_byte(d / "state" / "_METADATA"),
  "truncated_data_file": lambda d: _largest(d).write_bytes(_largest(d).read_bytes()[:100]),
  "emptied_data_file": lambda d: _largest(d).write_bytes(b""),
}


def _warnings(capfd) -> list[str]:
  return [line for line in capfd.readouterr().err.splitlines() if line.startswith("warning:")]


@pytest.mark.parametrize("corrupt", list(CORRUPTIONS))
def test_a_damaged_latest_checkpoint_falls_back_and_ends_bitwise(
  run, data, reference, capfd, corrupt
):
  CORRUPTIONS[corrupt](run / "checkpoints" / "40")
  capfd.readouterr()
  state = _train(run, data, 60)
  lines = _warnings(capfd)
  assert len(lines) == 1, lines
  assert "checkpoint at step 40" in lines[0] and "resuming from step 20" in lines[0], lines
  assert "corrupt-40" in lines[0]
  # the damaged checkpoint is kept (set aside, out of reach of pruning and of the new step 40)
  assert (run / "checkpoints" / "corrupt-40" / "state").is_dir()
  steps = sorted(p.name for p in (run / "checkpoints").iterdir())
  assert steps == ["20", "40", "60", "corrupt-40"], steps
  assert metrics.read_json(run / "summary.json")["resumed_from"] == 20
  for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(reference)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_a_silent_bit_flip_names_the_array(run):
  flip_a_stored_value(run / "checkpoints" / "40")
  with pytest.raises(ConfigError, match=r"step 40 .*fails its digest \(array ") as e:
    checkpoint.restore(run, _init(), step=40)
  assert e.value.field == "step" and "is kept" in e.value.message


def test_read_only_restore_skips_a_bad_checkpoint_and_touches_nothing(run, capfd):
  flip_a_stored_value(run / "checkpoints" / "40")
  capfd.readouterr()
  _, step = checkpoint.restore(run, _init())
  lines = _warnings(capfd)
  assert step == 20 and len(lines) == 1 and "step 40" in lines[0] and "(kept)" in lines[0]
  assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["20", "40"]


def test_no_checkpoint_that_verifies_is_one_error_naming_the_workdir(run, data):
  for step in ("20", "40"):
    (run / "checkpoints" / step / "state" / "_METADATA").write_bytes(b"")
  with pytest.raises(ConfigError) as e:
    _train(run, data, 60)
  assert e.value.field == "workdir" and str(run / "checkpoints") in e.value.message
  assert "steps 40, 20" in e.value.message
  assert "move" in e.value.message and "\n" not in e.value.message
  assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["20", "40"]


def test_a_checkpoint_without_a_digest_restores_as_before(run, capfd):
  shutil.rmtree(run / "checkpoints" / "40" / checkpoint.DIGEST_ITEM)  # written before digests
  capfd.readouterr()
  state, step = checkpoint.restore(run, _init())
  assert step == 40 and _warnings(capfd) == []
  np.testing.assert_array_equal(np.asarray(state.w), np.asarray(_raw(run / "checkpoints/40")[-1]))


def test_the_digest_is_sealed_and_covers_every_array():
  tree = {"a": jnp.arange(3.0), "b": {"c": jnp.int32(7)}, "d": 2.5}
  record = checkpoint.digest(tree)
  assert [a[0] for a in record["arrays"]] == ["a", "b/c", "d"] and record["skipped"] == []
  assert checkpoint._mismatch(dict(record), tree) is None
  assert checkpoint._mismatch(dict(record), {**tree, "a": jnp.arange(3.0) + 1e-7}) == (
    "fails its digest (array a)"
  )
  assert checkpoint._mismatch({**record, "arrays": record["arrays"][:2]}, tree) == (
    "has a damaged digest record"
  )


def test_non_finite_right_after_resuming_names_the_checkpoint_as_suspect(run, data):
  def update(state, batch, key):
    state, m = _update(state, batch, key)
    return state, {"loss": m["loss"] + jnp.where(state.opt_state[0].count > 45, jnp.nan, 0.0)}

  with pytest.raises(runtime.NonFiniteError, match="suspect") as e:
    _train(run, data, 60, update=update)
  assert e.value.resumed_from[0] == 40 and "step 40" in str(e.value)
  assert "last good checkpoint" not in str(e.value)
  assert (run / "checkpoints" / "40").is_dir()  # kept


# ------------------------------------------------ the same, as a user runs it (experiments.example)

EXAMPLE = ["--steps=40", "--log_every=10", "--ckpt_every=20", "--config.dim=512"]


def test_example_resumes_past_a_flipped_bit_with_one_warning(tmp_path):
  wd = tmp_path / "run"
  first = run_program("experiments.example", [f"--workdir={wd}", *EXAMPLE], tmp_path)
  assert first.returncode == 0, first.stderr[-2000:]
  done = metrics.read_json(wd / "summary.json")
  (wd / "summary.json").unlink()  # killed after its last checkpoint
  flip_a_stored_value(wd / "checkpoints" / "40")
  again = run_program("experiments.example", [f"--workdir={wd}", *EXAMPLE], tmp_path)
  assert again.returncode == 0, again.stderr[-2000:]
  # the progress bar writes to stderr too; nothing else may
  bar = re.compile(r"^\w+: +\d+%\|")
  lines = [x for x in again.stderr.splitlines() if x.strip() and not bar.match(x)]
  assert len(lines) == 1 and lines[0].startswith("warning: checkpoint at step 40"), lines
  assert "fails its digest" in lines[0] and "resuming from step 20" in lines[0], lines
  assert (wd / "checkpoints" / "corrupt-40").is_dir()
  redone = metrics.read_json(wd / "summary.json")
  assert redone["resumed_from"] == 20
  assert redone["train/loss"] == done["train/loss"] and redone["eval/w_err"] == done["eval/w_err"]


def test_a_partial_restore_is_verified_against_the_arrays_it_reads(tmp_path):
  """``verify`` checks the arrays a partial restore read (e.g. DASBS's exact check reads only the
  controller's EMA weights), under their paths in the saved state."""
  state = {"ctrl": {"target_params": jnp.arange(4.0)}, "other": jnp.ones(3)}
  mngr = checkpoint.manager(tmp_path)
  checkpoint.save(mngr, 1, state)
  mngr.close()
  mngr = checkpoint.manager(tmp_path, read_only=True)
  try:
    part = {"ctrl": {"target_params": np.arange(4.0, dtype=np.float32)}}
    checkpoint.verify(mngr, 1, part)  # as written: passes
    part["ctrl"]["target_params"][2] += 1e-3
    with pytest.raises(checkpoint.CorruptCheckpoint, match="ctrl/target_params"):
      checkpoint.verify(mngr, 1, part)
  finally:
    mngr.close()
