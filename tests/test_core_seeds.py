"""Seeds as a leading axis of one compiled program (jaxlab.core.seeds + runtime.train(seeds=))."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import struct

from jaxlab.core import metrics, resources, runtime
from jaxlab.core import seeds as seeds_lib
from jaxlab.core.errors import ConfigError

TX = optax.adam(3e-2)


class State(struct.PyTreeNode):
  w: jax.Array
  opt_state: optax.OptState


def _init(key):
  w = 0.1 * jax.random.normal(key, (4,))
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


def _eval(state, step):
  return {"w_norm": jnp.linalg.norm(state.w, axis=-1)}


def _run(workdir, data, seeds, steps=30, **kw):
  """The seeds of ``seeds`` vmapped (a tuple of several) or one seed alone (an int)."""
  loop = runtime.Loop(steps, log_every=10, ckpt_every=10, eval_every=15, progress=False)
  if isinstance(seeds, int):
    key = seeds_lib.seed_keys((seeds,))[0]
    state = _init(jax.random.fold_in(key, 0))
    return runtime.train(
      state, _update, loop, key=jax.random.fold_in(key, 1), workdir=workdir, data=data,
      sample_fn=_sample, eval_fn=_eval, **kw,
    )  # fmt: skip
  keys = seeds_lib.seed_keys(seeds)
  states = seeds_lib.init(_init, seeds_lib.stream(keys, 0))
  return runtime.train(
    states, _update, loop, key=seeds_lib.stream(keys, 1), workdir=workdir, data=data,
    sample_fn=_sample, eval_fn=_eval, seeds=seeds, config={"seeds": list(seeds)}, **kw,
  )  # fmt: skip


@pytest.mark.parametrize(
  "value, base, want",
  [
    (None, 3, (3,)),
    ("4", 2, (2, 3, 4, 5)),
    ("0,3,7", 9, (0, 3, 7)),
    (2, 0, (0, 1)),
    ("5,", 0, (5,)),
  ],
)
def test_parse_seeds(value, base, want):
  assert seeds_lib.parse_seeds(value, base) == want


@pytest.mark.parametrize("value", ["0", "-2", "1,1", "a", "2,x", "5000", "1,-3", str(2**31), ""])
def test_parse_seeds_refuses_naming_the_flag(value):
  with pytest.raises(ConfigError) as e:
    seeds_lib.parse_seeds(value, 0)
  assert e.value.field == "seeds"


def test_seed_k_of_a_vmapped_run_equals_its_solo_run(tmp_path, data):
  states, result = _run(tmp_path / "v", data, (3, 5, 9))
  solo, alone = _run(tmp_path / "s", data, 5)
  np.testing.assert_allclose(np.asarray(states.w[1]), np.asarray(solo.w), rtol=1e-6, atol=1e-7)
  assert not np.allclose(states.w[0], states.w[1])  # the seeds differ
  mine = result.per_seed[5]
  assert mine["train/loss"] == pytest.approx(alone.summary["train/loss"], rel=1e-5)
  assert mine["eval/w_norm"] == pytest.approx(alone.summary["eval/w_norm"], rel=1e-5)
  means = np.mean([result.per_seed[s]["eval/w_norm"] for s in (3, 5, 9)])
  assert result.summary["eval/w_norm"] == pytest.approx(means)
  # one row per seed and step, the seed second; a TensorBoard run per seed; one checkpoint
  cols = metrics.read_csv(tmp_path / "v" / "metrics.csv")
  assert list(cols)[:2] == ["step", "seed"] and len(cols["step"]) == 3 * 3
  assert list(cols["seed"][:3]) == [3, 5, 9]
  ev = metrics.read_csv(tmp_path / "v" / "eval.csv")
  assert list(ev["step"]) == [15, 15, 15, 30, 30, 30]
  assert ev["w_norm"][4] == pytest.approx(alone.evals[30]["w_norm"], rel=1e-5)
  assert sorted(p.name for p in (tmp_path / "v" / "tb").iterdir()) == ["seed3", "seed5", "seed9"]
  summary = json.loads((tmp_path / "v" / "summary.json").read_text())
  assert summary["seeds"] == [3, 5, 9] and set(summary["per_seed"]) == {"3", "5", "9"}


def test_a_killed_vmapped_run_resumes_bitwise_and_refuses_other_seeds(tmp_path, data):
  straight, _ = _run(tmp_path / "a", data, (1, 2), steps=30)
  _run(tmp_path / "b", data, (1, 2), steps=20)  # "killed" after 20 steps
  resumed, result = _run(tmp_path / "b", data, (1, 2), steps=30)
  assert result.summary["resumed_from"] == 20
  for a, b in zip(jax.tree.leaves(straight), jax.tree.leaves(resumed)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  with pytest.raises(ConfigError) as e:  # another seed set never continues this run
    _run(tmp_path / "b", data, (1, 3), steps=40)
  assert "seeds" in str(e.value)


def test_seeds_that_do_not_fit_train_in_sequential_groups(tmp_path, data, monkeypatch, capsys):
  whole, expect = _run(None, data, (0, 1, 2, 4, 5))
  # a machine whose memory holds the chunk of two seeds, not five
  chunk = runtime.make_chunk_fn(_update, _sample, None, seeds_lib.vmap)
  keys = seeds_lib.stream(seeds_lib.seed_keys((0, 1)), 1)
  states = seeds_lib.init(_init, seeds_lib.stream(seeds_lib.seed_keys((0, 1)), 0))
  two = chunk.memory(states, data, keys, 10, arguments=False)
  monkeypatch.setattr(resources, "device_memory", lambda: int(two * 1.01))
  grouped, got = _run(tmp_path / "g", data, (0, 1, 2, 4, 5))
  assert "training them in 3 sequential groups" in capsys.readouterr().out
  for a, b in zip(jax.tree.leaves(whole), jax.tree.leaves(grouped)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  assert got.per_seed == expect.per_seed


def test_a_non_finite_seed_is_named(tmp_path, data):
  def update(state, batch, key):
    state, m = _update(state, batch, key)
    return state, {"loss": jnp.where(state.w[0] > 0.2, jnp.nan, m["loss"])}

  keys = seeds_lib.seed_keys((0, 1))
  states = seeds_lib.init(_init, seeds_lib.stream(keys, 0))
  states = states.replace(w=states.w.at[1, 0].set(5.0))
  loop = runtime.Loop(10, log_every=5, progress=False)
  with pytest.raises(runtime.NonFiniteError, match=r"loss \(seed 1\)"):
    runtime.train(states, update, loop, key=keys, data=data, sample_fn=_sample, seeds=(0, 1))


def test_a_state_without_the_seed_axis_is_a_clear_error(data):
  with pytest.raises(ValueError, match="leading axis of 2"):
    runtime.train(
      _init(jax.random.key(0)), _update, runtime.Loop(2, progress=False),
      key=seeds_lib.seed_keys((0, 1)), data=data, sample_fn=_sample, seeds=(0, 1),
    )  # fmt: skip


def test_seeds_with_their_own_data_equal_their_solo_runs(tmp_path, monkeypatch):
  """seed_data: each seed trains on its own data set (drawn from its key), as its solo run does;
  also when the seeds train in sequential groups."""

  def problem(key):
    x = jax.random.normal(key, (32, 4))
    return {"x": x, "y": x @ jax.random.normal(jax.random.fold_in(key, 1), (4,))}

  seeds = (2, 6, 7)
  keys = seeds_lib.seed_keys(seeds)
  data = jax.vmap(problem)(seeds_lib.stream(keys, 2))
  loop = runtime.Loop(12, log_every=4, progress=False, tensorboard=False, plot=False)
  kw = dict(sample_fn=_sample, seeds=seeds, seed_data=True)
  states = seeds_lib.init(_init, seeds_lib.stream(keys, 0))
  both, result = runtime.train(states, _update, loop, key=keys, data=data, **kw)
  k = keys[2]
  solo, alone = runtime.train(
    _init(jax.random.fold_in(k, 0)), _update, loop, key=k, data=problem(jax.random.fold_in(k, 2)),
    sample_fn=_sample,
  )  # fmt: skip
  np.testing.assert_allclose(np.asarray(both.w[2]), np.asarray(solo.w), rtol=1e-6, atol=1e-7)
  assert result.per_seed[7]["train/loss"] == pytest.approx(alone.summary["train/loss"], rel=1e-5)
  chunk = runtime.make_chunk_fn(_update, _sample, None, seeds_lib.vmap, True)
  one = jax.tree.map(lambda x: x[:1], (states, keys, data))
  small = chunk.memory(one[0], one[2], one[1], 4, arguments=False)
  monkeypatch.setattr(resources, "device_memory", lambda: int(small * 1.01))
  grouped, _ = runtime.train(states, _update, loop, key=keys, data=data, **kw)
  np.testing.assert_array_equal(np.asarray(grouped.w), np.asarray(both.w))
