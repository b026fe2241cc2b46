"""The online-RL environments: gymnax and Craftax behind `jaxlab.envs.vec.VecEnv`.

See docs/online_envs.md.
"""

import collections
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core.errors import ConfigError
from jaxlab.envs import craftax as cx
from jaxlab.envs import gymnax as gx
from jaxlab.envs import vec

N = 4
Ref = collections.namedtuple("Ref", "obs worlds")


# ----------------------------------------------------------------------------------------- gymnax


@pytest.fixture(scope="module")
def cartpole():
  env = gx.make("cartpole", N)
  return env, jax.jit(env.reset), jax.jit(env.step)


def test_cartpole_shapes(cartpole):
  env, reset, step = cartpole
  assert (env.name, env.obs_shape, env.num_actions, env.action_dim) == ("CartPole-v1", (4,), 2, 0)
  assert env.achievement_names == () and env.max_return is None
  obs, state = reset(jax.random.key(0))
  assert obs.shape == (N, 4) and obs.dtype == jnp.float32
  obs, state, reward, done, info = step(state, jnp.zeros((N,), jnp.int32), jax.random.key(1))
  assert obs.shape == (N, 4) and obs.dtype == jnp.float32
  assert reward.shape == (N,) and reward.dtype == jnp.float32
  assert done.shape == (N,) and done.dtype == jnp.bool_
  assert info["returned_episode"].dtype == jnp.bool_
  assert info["episode_return"].dtype == jnp.float32
  assert info["episode_length"].dtype == jnp.int32
  assert all(v.shape == (N,) for v in info.values())


def test_cartpole_stats_match_unbatched_loop(cartpole):
  """Batched episode statistics == one gymnax env per index, stepped by hand with the same keys."""
  import gymnax

  env, reset, step = cartpole
  raw, params = gymnax.make("CartPole-v1")
  raw_step = jax.jit(raw.step)
  key = jax.random.key(3)
  key, k = jax.random.split(key)
  obs, state = reset(k)
  singles = [raw.reset(kk, params)[1] for kk in jax.random.split(k, N)]
  run_ret, run_len = np.zeros(N), np.zeros(N, int)
  finished = []  # (step, env, return, length) from the hand-rolled loop
  reported = []  # the same from the batched info
  rng = np.random.default_rng(0)
  for t in range(120):
    key, k = jax.random.split(key)
    action = rng.integers(0, 2, size=N).astype(np.int32)
    obs, state, reward, done, info = step(state, jnp.asarray(action), k)
    for i, ki in enumerate(jax.random.split(k, N)):
      o_i, singles[i], r_i, term, trunc, _ = raw_step(ki, singles[i], action[i], params)
      run_ret[i] += float(r_i)
      run_len[i] += 1
      np.testing.assert_allclose(obs[i], o_i, rtol=1e-5, atol=1e-6)
      assert bool(done[i]) == bool(term | trunc)
      if term | trunc:
        finished.append((t, i, run_ret[i], run_len[i]))
        run_ret[i], run_len[i] = 0.0, 0
    for i in np.flatnonzero(np.asarray(info["returned_episode"])):
      reported.append((t, i, float(info["episode_return"][i]), int(info["episode_length"][i])))
    not_done = ~np.asarray(info["returned_episode"])
    assert np.all(np.asarray(info["episode_return"])[not_done] == 0)
    np.testing.assert_allclose(state.episode_return, run_ret, rtol=1e-6)
    np.testing.assert_array_equal(state.episode_length, run_len)
  assert len(finished) >= 4  # random CartPole episodes last ~20 steps
  assert reported == [(t, i, pytest.approx(r), n) for t, i, r, n in finished]


def test_pendulum_truncates_at_200():
  env = gx.make("pendulum", 2)
  assert env.num_actions == 0 and env.action_dim == 1

  def body(state, k):
    _, state, reward, done, info = env.step(state, jnp.zeros((2, 1)), k)
    return state, (done, info["episode_length"], info["episode_return"], reward)

  _, state = env.reset(jax.random.key(0))
  _, (done, length, ret, reward) = jax.jit(
    lambda s: jax.lax.scan(body, s, jax.random.split(jax.random.key(1), 401))
  )(state)
  assert np.flatnonzero(np.asarray(done[:, 0])).tolist() == [199, 399]
  assert np.all(np.asarray(length)[np.asarray(done)] == 200)
  np.testing.assert_allclose(ret[199], reward[:200].sum(0), rtol=1e-5)


@pytest.mark.parametrize("name", ["breakout-minatar", "acrobot", "mountaincar-continuous"])
def test_other_gymnax_envs(name):
  env = gx.make(name, 2)
  obs, state = env.reset(jax.random.key(0))
  act = jnp.zeros((2,), jnp.int32) if env.discrete else jnp.zeros((2, env.action_dim))
  obs2, *_ = env.step(state, act, jax.random.key(1))
  assert obs.shape == obs2.shape == (2, *env.obs_shape) and obs2.dtype == jnp.float32


def test_unknown_env_and_bad_sizes():
  with pytest.raises(ConfigError) as e:
    gx.make("cartpoles", 4)
  assert e.value.field == "env" and "cartpole" in e.value.message
  with pytest.raises(ConfigError) as e:
    cx.make("craftax", 4)
  assert e.value.field == "env" and "craftax-classic-symbolic" in e.value.message
  with pytest.raises(ConfigError) as e:
    vec.make("atari", 4, field="config.env")
  assert e.value.field == "config.env"
  assert "cartpole" in e.value.message and "craftax-symbolic" in e.value.message
  assert vec.make("acrobot", 2).name == "Acrobot-v1"
  assert gx.resolve("Breakout-MinAtar") == "Breakout-MinAtar"
  assert cx.resolve("craftax-classic-symbolic-v1")[0] == "Craftax-Classic-Symbolic-v1"
  for bad in (0, -1, 2.0):
    with pytest.raises(ConfigError, match="num_envs"):
      gx.make("cartpole", bad)
  with pytest.raises(ConfigError) as e:
    cx.make("craftax-classic-symbolic", 4, reset_ratio=0)
  assert e.value.field == "config.reset_ratio"


def test_versions():
  v = vec.versions()
  assert v["gymnax"] and v["craftax"] and v["jax"] == jax.__version__


# ---------------------------------------------------------------------------------------- Craftax

CN, RATIO = 8, 4  # a pool of 2 fresh worlds per step


@pytest.fixture(scope="module")
def classic():
  from craftax.craftax_env import make_craftax_env_from_name

  env = cx.make("craftax-classic-symbolic", CN, reset_ratio=RATIO)
  raw = make_craftax_env_from_name("Craftax-Classic-Symbolic-v1", False)
  # craftax's own functions, jitted once: the reference worlds and observations.
  ref = Ref(
    obs=jax.jit(jax.vmap(raw.get_obs)),
    worlds=jax.jit(jax.vmap(lambda k: raw.reset_env(k, raw.default_params)[1])),
  )
  return env, jax.jit(env.reset), jax.jit(env.step), ref


def _world(env_state, i):
  return np.asarray(env_state.map[i])


def _types(tree):
  return [(x.shape, x.dtype, x.weak_type) for x in jax.tree.leaves(tree)]


@pytest.mark.parametrize("make", [lambda: gx.make("breakout-minatar", 2), lambda: None])
def test_state_types_are_stable(make, classic):
  """reset and step return states of identical types (no retrace per call, a valid scan carry)."""
  env = make() or classic[0]
  _, state = jax.eval_shape(env.reset, jax.random.key(0))
  action = jax.ShapeDtypeStruct((env.num_envs,), jnp.int32)
  _, state2, *_ = jax.eval_shape(env.step, state, action, jax.random.key(1))
  assert jax.tree.structure(state) == jax.tree.structure(state2)
  assert _types(state) == _types(state2)


def test_craftax_reset_distinct_worlds(classic):
  env, reset, _, raw = classic
  assert env.obs_shape == (1345,) and env.num_actions == 17 and env.max_return == 22.0
  assert len(env.achievement_names) == 22 and env.achievement_names[0] == "collect_wood"
  obs, state = reset(jax.random.key(0))
  assert obs.shape == (CN, 1345) and obs.dtype == jnp.float32
  maps = [_world(state.env, i) for i in range(CN)]
  assert all(not np.array_equal(maps[i], maps[j]) for i in range(CN) for j in range(i))
  _, other = reset(jax.random.key(1))
  assert not np.array_equal(_world(other.env, 0), maps[0])
  assert np.all(np.asarray(state.env.timestep) == 0)
  np.testing.assert_array_equal(obs, raw.obs(state.env))


def _force_end(state, envs):
  """Puts `envs` one step before craftax's time limit so they finish at the next step."""
  t = state.env.timestep.at[jnp.asarray(envs)].set(raw_limit())
  return state.replace(env=state.env.replace(timestep=t))


def raw_limit():
  from craftax.craftax_classic.envs.craftax_state import EnvParams

  return EnvParams().max_timesteps - 1


def _pool_worlds(raw, key, pool):
  """The fresh worlds `step(.., key)` draws: jaxlab.envs.craftax splits `key` into (step, reset)
  keys."""
  _, k_reset = jax.random.split(key)
  worlds = raw.worlds(jax.random.split(k_reset, pool))
  return [np.asarray(worlds.map[j]) for j in range(pool)]


def test_craftax_optimistic_reset_hands_fresh_worlds(classic):
  env, reset, step, raw = classic
  pool = CN // RATIO
  _, state = reset(jax.random.key(0))
  before = [_world(state.env, i) for i in range(CN)]
  state = _force_end(state, [2, 5])
  key = jax.random.key(7)
  obs, new, _, done, info = step(state, jnp.zeros((CN,), jnp.int32), key)
  assert np.flatnonzero(np.asarray(done)).tolist() == [2, 5]
  fresh = _pool_worlds(raw, key, pool)
  assert not np.array_equal(fresh[0], fresh[1])
  for slot, i in enumerate([2, 5]):
    np.testing.assert_array_equal(_world(new.env, i), fresh[slot])  # a distinct new world each
    assert int(new.env.timestep[i]) == 0 and int(new.episode_length[i]) == 0
    assert float(new.episode_return[i]) == 0.0
    assert int(info["episode_length"][i]) == 1 and bool(info["returned_episode"][i])
  np.testing.assert_array_equal(obs, raw.obs(new.env))  # each obs is of the state handed back
  for i in set(range(CN)) - {2, 5}:
    np.testing.assert_array_equal(_world(new.env, i), before[i])
    assert int(new.env.timestep[i]) == 1
  # More finished envs than the pool: every one still gets a fresh world (shared, optimistically).
  obs, new, _, done, _ = step(_force_end(new, list(range(CN))), jnp.zeros((CN,), jnp.int32), key)
  assert bool(done.all()) and np.all(np.asarray(new.env.timestep) == 0)
  for i in range(CN):
    assert any(np.array_equal(_world(new.env, i), w) for w in fresh)
  np.testing.assert_array_equal(obs, raw.obs(new.env))


def test_craftax_episode_stats_and_achievements(classic):
  env, reset, step, _ = classic
  obs, state = reset(jax.random.key(1))
  rng = np.random.default_rng(1)
  key = jax.random.key(2)
  run_ret, run_len, n_done = np.zeros(CN), np.zeros(CN, int), 0
  for _ in range(250):
    key, k = jax.random.split(key)
    prev = np.asarray(state.env.achievements)
    obs, state, reward, done, info = step(state, jnp.asarray(rng.integers(0, 17, CN)), k)
    run_ret += np.asarray(reward)
    run_len += 1
    d = np.asarray(done)
    ach = np.asarray(info["achievements"])
    assert ach.shape == (CN, 22) and ach.dtype == np.float32
    assert np.all(ach[~d] == 0) and np.all(ach[d] >= prev[d])  # unlocked ones are kept
    np.testing.assert_allclose(np.asarray(info["episode_return"])[d], run_ret[d], rtol=1e-5)
    np.testing.assert_array_equal(np.asarray(info["episode_length"])[d], run_len[d])
    assert np.all(np.asarray(state.env.timestep)[d] == 0)
    run_ret[d], run_len[d] = 0.0, 0
    n_done += int(d.sum())
  assert n_done >= 2  # random Classic agents die within a few hundred steps


def test_texture_cache_stays_out_of_the_package(tmp_path, monkeypatch):
  """A pixel env's texture atlas goes to our cache dir, atomically; the package dir is untouched."""
  consts = cx._constants(True)
  pkg = tmp_path / "site-packages"
  pkg.mkdir()
  monkeypatch.setattr(consts, "TEXTURE_CACHE_FILE", str(pkg / "texture_cache_classic.pbz2"))
  monkeypatch.setenv("JAXLAB_CACHE_DIR", str(tmp_path / "cache"))
  monkeypatch.delenv("CRAFTAX_RELOAD_TEXTURES", raising=False)
  calls = []

  def fake(size):  # the real build takes ~100 s
    calls.append(size)
    shape = (len(consts.BlockType), consts.OBS_DIM[0] * size, consts.OBS_DIM[1] * size, 3)
    return {"full_map_block_textures": np.zeros(shape, np.uint8)}

  monkeypatch.setattr(consts, "load_all_textures_given_size", fake)
  consts.load_all_textures.cache_clear()
  try:
    path = cx.prepare_textures(True)
    assert path == tmp_path / "cache" / "craftax" / "texture_cache_classic.pbz2"
    assert path.exists() and sorted(os.listdir(path.parent)) == [path.name]
    assert os.listdir(pkg) == [] and len(calls) == 3
    consts.load_all_textures.cache_clear()
    assert cx.prepare_textures(True) == path and len(calls) == 3  # read back, not rebuilt
  finally:
    consts.load_all_textures.cache_clear()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["craftax-classic-pixels", "craftax-symbolic"])
def test_craftax_other_variants(name):
  env = cx.make(name, 2, reset_ratio=2)
  obs, state = jax.jit(env.reset)(jax.random.key(0))
  obs2, _, _, _, info = jax.jit(env.step)(state, jnp.zeros((2,), jnp.int32), jax.random.key(1))
  assert obs.shape == obs2.shape == (2, *env.obs_shape)
  assert info["achievements"].shape == (2, len(env.achievement_names))


def test_gymnax_import_defers_seaborn_until_used():
  """gymnax imports seaborn (and scipy.stats) for rendering only; jaxlab imports it on first use."""
  code = (
    "import sys\n"
    "from jaxlab.envs import gymnax\n"
    "gymnax.make('cartpole', 2)\n"
    "assert 'scipy.stats' not in sys.modules, 'seaborn was imported'\n"
    "from gymnax.environments.misc import pong\n"
    "assert len(pong.sns.color_palette('cubehelix', 3)) == 3\n"
    "import seaborn\n"
    "assert seaborn.color_palette is pong.sns.color_palette\n"
  )
  done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
  assert done.returncode == 0, done.stderr[-2000:]
