"""PPO on the online-RL core: GAE, the clipped loss, policies, sharding, resume, the experiment."""

from __future__ import annotations

import json
import math
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core import mesh as mesh_lib
from jaxlab.core import runtime
from jaxlab.envs import vec
from jaxlab.rl import ppo
from jaxlab.rl.ppo import evaluation as ppo_eval
from jaxlab.rl.ppo import policies
from jaxlab.rl.ppo.loss import LossTerms, gae, ppo_loss
from tests.programs import run_program

ROOT = pathlib.Path(__file__).resolve().parents[1]


# --- a tiny hand-made environment: episode i of environment n lasts n + 2 steps, reward 1 ---


def counter_env(num_envs: int, num_actions: int = 2) -> vec.VecEnv:
  """obs = [steps so far / 10, n]; environment n's episodes last n + 2 steps; reward 1 per step."""
  length = jnp.arange(num_envs) + 2

  def observe(t):
    return jnp.stack([t / 10.0, jnp.arange(num_envs, dtype=jnp.float32)], axis=1)

  def reset(key):
    del key
    t = jnp.zeros((num_envs,), jnp.float32)
    return observe(t), vec.init_state(t, num_envs)

  def step(state, action, key):
    del action, key
    t = state.env + 1
    done = t >= length
    t = jnp.where(done, 0.0, t)
    reward = jnp.ones((num_envs,), jnp.float32)
    new, info = vec.track(state, t, reward, done)
    return observe(t), new, reward, done, info

  return vec.VecEnv("counter", num_envs, (2,), num_actions, 0, (), None, reset, step)


# --- GAE and the loss ---


def _gae_reference(reward, value, done, last_value, gamma, lam):
  t_len = reward.shape[0]
  adv = np.zeros_like(reward)
  next_adv, next_value = np.zeros_like(last_value), last_value
  for t in reversed(range(t_len)):
    nd = 1.0 - done[t]
    delta = reward[t] + gamma * next_value * nd - value[t]
    next_adv = delta + gamma * lam * nd * next_adv
    adv[t], next_value = next_adv, value[t]
  return adv, adv + value


def test_gae_matches_numpy_reference():
  rng = np.random.default_rng(0)
  t_len, n = 9, 4
  reward = rng.normal(size=(t_len, n)).astype(np.float32)
  value = rng.normal(size=(t_len, n)).astype(np.float32)
  done = rng.random((t_len, n)) < 0.3
  last = rng.normal(size=(n,)).astype(np.float32)
  adv, target = gae(reward, value, done, last, 0.97, 0.8)
  ref_adv, ref_target = _gae_reference(reward, value, done.astype(np.float32), last, 0.97, 0.8)
  np.testing.assert_allclose(adv, ref_adv, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(target, ref_target, rtol=1e-5, atol=1e-5)
  # one step, no episode end: A = r + gamma V' - V exactly
  a, _ = gae(jnp.ones((1, 1)), jnp.zeros((1, 1)), jnp.zeros((1, 1), bool), jnp.ones((1,)), 0.5, 1)
  assert float(a[0, 0]) == pytest.approx(1.5)


def test_ppo_loss_hand_computed():
  # ratios 1.5 and 0.5 with advantages +1 and -1 (already normalised: mean 0, std 1).
  old = jnp.log(jnp.array([0.2, 0.4]))
  terms = LossTerms(
    log_prob=old + jnp.log(jnp.array([1.5, 0.5])),
    value=jnp.array([0.5, -0.1]),
    entropy=jnp.array([0.6, 0.4]),
    old_log_prob=old,
    old_value=jnp.array([0.0, 0.0]),
    advantage=jnp.array([1.0, -1.0]),
    target=jnp.array([1.0, 0.0]),
  )
  loss, parts = ppo_loss(
    terms, clip_eps=0.2, vf_coef=0.5, ent_coef=0.01, normalize_advantages=True, clip_value=True
  )
  # policy: min(1.5, 1.2) * 1 = 1.2 and min(-0.5, -0.8) = -0.8 -> -mean = -0.2
  assert float(parts["pg_loss"]) == pytest.approx(-0.2, abs=1e-6)
  # value: V clipped to 0 + 0.2 -> max(0.25, 0.64) and max(0.01, 0.01) -> 0.5 * 0.325
  assert float(parts["value_loss"]) == pytest.approx(0.1625, abs=1e-6)
  assert float(parts["entropy"]) == pytest.approx(0.5, abs=1e-6)
  assert float(loss) == pytest.approx(-0.2 + 0.5 * 0.1625 - 0.01 * 0.5, abs=1e-6)
  assert float(parts["clip_frac"]) == 1.0
  kl = ((0.5 - math.log(1.5)) + (-0.5 - math.log(0.5))) / 2
  assert float(parts["approx_kl"]) == pytest.approx(kl, abs=1e-6)
  # without value clipping the value loss is the plain 0.5 * mean((V - R)^2)
  _, plain = ppo_loss(terms, 0.2, 0.5, 0.01, normalize_advantages=True, clip_value=False)
  assert float(plain["value_loss"]) == pytest.approx(0.5 * (0.25 + 0.01) / 2, abs=1e-6)


def test_library_config_errors_name_the_field():
  from jaxlab.core.errors import ConfigError

  cases = [
    (_default(num_steps=10, minibatches=4, num_updates=1), False, "config.minibatches"),
    (_default(num_envs=6, minibatches=4, num_updates=1), True, "config.minibatches"),
    (_default(num_updates=0), False, "config.num_updates"),  # annealing needs the run's length
    (_default(gamma=1.5, num_updates=1), False, "config.gamma"),
  ]
  for config, recurrent, field in cases:
    with pytest.raises(ConfigError) as e:
      ppo.validate(config, recurrent)
    assert e.value.field == field
  ppo.validate(_default(anneal_lr=False, num_updates=0), False)


def _default(**overrides) -> ppo.PPOConfig:
  return ppo.PPOConfig.from_config(ppo.get_config(), **overrides)


def test_ppo_config_has_no_defaults_of_its_own():
  import dataclasses

  assert all(f.default is dataclasses.MISSING for f in dataclasses.fields(ppo.PPOConfig))
  c = ppo.get_config()
  pc = ppo.PPOConfig.from_config(c)
  assert pc.num_envs == c.num_envs and pc.lr == c.lr and pc.unroll == c.unroll
  assert pc.num_updates == c.total_timesteps // (c.num_envs * c.num_steps) == ppo.num_updates(c)
  assert ppo.PPOConfig.from_config(c, num_updates=7, lr=1.0).num_updates == 7
  with pytest.raises(TypeError, match="num_updates"):  # no total_timesteps to derive it from
    ppo.PPOConfig.from_config({k: v for k, v in c.items() if k != "total_timesteps"})


@pytest.mark.parametrize(
  "field, value, policy, error",
  [
    ("eval_envs", 0, "mlp", "config.eval_envs"),
    ("mlp.activation", "swish", "mlp", "config.mlp.activation"),
    ("gtrxl.num_heads", 3, "gtrxl", "config.gtrxl.num_heads"),
    ("minibatches", 3, "gru", "config.minibatches"),
    ("num_envs", 0, "mlp", "config.num_envs"),
    ("gamma", 1.5, "mlp", "config.gamma"),
  ],
)
def test_validate_config_names_the_field(field, value, policy, error):
  from jaxlab.core.errors import ConfigError

  c = ppo.get_config()
  *parents, leaf = field.split(".")
  target = c
  for part in parents:
    target = target[part]
  target[leaf] = value
  with pytest.raises(ConfigError) as e:
    ppo.validate_config(c, policy)
  assert e.value.field == error
  ppo.validate_config(ppo.get_config(), policy if field != "gtrxl.num_heads" else "mlp")


def _config_file(preset=None):
  import importlib.util

  spec = importlib.util.spec_from_file_location("_ppo_cfg", ROOT / "experiments/configs/ppo.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(preset)


def test_presets_start_from_the_library_config():
  lib = ppo.get_config()
  assert _config_file("craftax").to_dict() == lib.to_dict()
  gtrxl = _config_file("craftax_gtrxl")
  assert (gtrxl.num_steps, gtrxl.gamma, gtrxl.ent_coef) == (128, 0.999, 0.002)
  default = _config_file()
  assert (default.num_envs, default.num_steps, default.lr, default.total_timesteps) == (
    16,
    128,
    1e-3,
    1_000_000,
  )
  assert ppo.num_updates(default) == 488
  assert set(default.keys()) == set(lib.keys()) and "preset" not in lib
  for preset in (None, "craftax", "craftax_gtrxl", "cpu"):
    for policy in policies.POLICIES:
      ppo.validate_config(_config_file(preset), policy)
  with pytest.raises(ValueError, match="unknown preset"):
    _config_file("big")


def test_crafter_score():
  assert float(ppo.crafter_score(np.zeros(22))) == pytest.approx(0.0)
  assert float(ppo.crafter_score(np.ones(22))) == pytest.approx(100.0, rel=1e-5)
  # geometric mean of (1 + 100) and (1 + 0), minus 1
  assert float(ppo.crafter_score(jnp.array([1.0, 0.0]))) == pytest.approx(math.sqrt(101) - 1)


# --- policies ---

_SMALL = {
  "mlp": dict(hidden=(8,), activation="tanh"),
  "gru": dict(embed=8, hidden=8, head_hidden=(8,), activation="relu"),
  "gtrxl": dict(
    embed=8,
    num_heads=2,
    num_layers=2,
    window=4,
    ffn=8,
    head_hidden=(8,),
    gate_bias=2.0,
    activation="relu",
  ),
}


@pytest.mark.parametrize("name", ["gru", "gtrxl"])
def test_recurrent_sequence_equals_step_by_step(name):
  """The loss's one-call re-evaluation of a rollout equals the rollout's step-by-step outputs."""
  t_len, n = 10, 3
  pol = policies.make(name, 3, **_SMALL[name])
  obs = jax.random.normal(jax.random.key(0), (t_len, n, 2))
  reset = jax.random.bernoulli(jax.random.key(1), 0.25, (t_len, n))
  params = pol.init(jax.random.key(2), pol.initial_carry(n), obs[:1], reset[:1])
  warm = jax.random.normal(jax.random.key(3), (6, n, 2))  # a carry with history in it
  carry0, _, _ = pol.apply(params, pol.initial_carry(n), warm, jnp.zeros((6, n), bool))
  carry_seq, dist_seq, value_seq = pol.apply(params, carry0, obs, reset)
  carry, logits, values = carry0, [], []
  for t in range(t_len):
    carry, dist, value = pol.apply(params, carry, obs[t : t + 1], reset[t : t + 1])
    logits.append(dist["logits"][0])
    values.append(value[0])
  np.testing.assert_allclose(np.stack(logits), dist_seq["logits"], atol=1e-5)
  np.testing.assert_allclose(np.stack(values), value_seq, atol=1e-5)
  for a, b in zip(jax.tree.leaves(carry), jax.tree.leaves(carry_seq)):
    np.testing.assert_allclose(np.asarray(a, float), np.asarray(b, float), atol=1e-5)


@pytest.mark.parametrize("name", ["gru", "gtrxl"])
def test_memory_is_used_and_cleared_at_episode_start(name):
  pol = policies.make(name, 3, **_SMALL[name])
  n = 2
  obs = jax.random.normal(jax.random.key(0), (4, n, 2))
  params = pol.init(jax.random.key(1), pol.initial_carry(n), obs[:1], jnp.zeros((1, n), bool))
  other = obs.at[0].set(5.0)  # change only the first step
  no_reset = jnp.zeros((4, n), bool)
  with_reset = no_reset.at[2].set(True)  # step 2 starts a new episode
  out = lambda o, r: pol.apply(params, pol.initial_carry(n), o, r)[1]["logits"]
  assert not np.allclose(out(obs, no_reset)[3], out(other, no_reset)[3], atol=1e-6)
  np.testing.assert_allclose(out(obs, with_reset)[2:], out(other, with_reset)[2:], atol=1e-6)


def test_continuous_policy_distribution():
  pol = policies.make("mlp", 0, action_dim=2, hidden=(8,), activation="tanh")
  obs = jnp.zeros((1, 5, 3))
  params = pol.init(jax.random.key(0), (), obs, jnp.zeros((1, 5), bool))
  _, dist, value = pol.apply(params, (), obs, jnp.zeros((1, 5), bool))
  action = policies.sample(dist, jax.random.key(1))
  assert action.shape == (1, 5, 2) and value.shape == (1, 5)
  # log_std = 0: a standard normal in 2 dims
  ref = -0.5 * jnp.sum((action - dist["mean"]) ** 2, -1) - math.log(2 * math.pi)
  np.testing.assert_allclose(policies.log_prob(dist, action), ref, atol=1e-5)
  np.testing.assert_allclose(policies.entropy(dist), math.log(2 * math.pi * math.e), atol=1e-5)


# --- minibatches, evaluation ---


@pytest.mark.parametrize("recurrent", [False, True])
def test_minibatches_partition_the_rollout(recurrent):
  t_len, n, m = 4, 8, 2
  cfg = _default(num_envs=n, num_steps=t_len, minibatches=m)
  ids = jnp.arange(t_len * n).reshape(t_len, n)  # sample id = t * n + env
  carry0 = jnp.arange(n) if recurrent else ()
  mbs, carries = ppo.agent._minibatches({"id": ids}, carry0, cfg, recurrent, jax.random.key(0))
  got = np.asarray(mbs["id"])
  assert got.shape[0] == m and sorted(got.ravel().tolist()) == list(range(t_len * n))
  if recurrent:  # whole sequences, each with its own initial carry
    env = got % n
    assert (env == env[:, :1]).all() and (np.asarray(got // n) == np.arange(t_len)[:, None]).all()
    np.testing.assert_array_equal(env[:, 0], np.asarray(carries))
  else:  # every minibatch holds every environment
    assert all(sorted(set((g % n).ravel().tolist())) == list(range(n)) for g in got)


def test_evaluate_counts_first_episode_of_each_env():
  env = counter_env(3)
  pol = policies.make("mlp", 2, hidden=(4,), activation="tanh")
  params = pol.init(jax.random.key(0), (), jnp.zeros((1, 3, 2)), jnp.zeros((1, 3), bool))
  out = ppo_eval.make_evaluate(env, pol, max_steps=100)(params["params"], jax.random.key(1))
  scalars, rates = ppo_eval.summarize(out, env)
  np.testing.assert_array_equal(out["return"], [2, 3, 4])  # lengths n + 2, reward 1
  assert scalars["return"] == pytest.approx(3.0) and scalars["finished"] == 1.0 and rates == {}
  capped = ppo_eval.make_evaluate(env, pol, max_steps=3)(params["params"], jax.random.key(1))
  np.testing.assert_array_equal(capped["return"], [2, 3, 3])  # env 2 cut off at 3 steps
  np.testing.assert_array_equal(capped["finished"], [True, True, False])


def test_episode_statistics_from_a_rollout():
  env = counter_env(2)
  pol = policies.make("mlp", 2, hidden=(4,), activation="tanh")
  cfg = _default(num_envs=2, num_steps=6, minibatches=2, epochs=1, num_updates=1)
  state = ppo.init(env, pol, cfg, jax.random.key(0))
  state, metrics = jax.jit(ppo.make_update(env, pol, cfg))(state, None, jax.random.key(1))
  # in 6 steps env 0 (length 2) ends 3 episodes, env 1 (length 3) ends 2: returns 2 and 3
  assert float(metrics["episodes"]) == 5
  assert float(metrics["episode_return"]) == pytest.approx((3 * 2 + 2 * 3) / 5)
  assert float(metrics["env_steps"]) == 12


# --- CartPole: learning, sharding, resume ---


def _cartpole(n):
  from jaxlab.envs import gymnax

  return gymnax.make("cartpole", n)


def _config(n=16, **kw):
  base = dict(
    num_envs=n, num_steps=128, epochs=4, minibatches=4, gae_lambda=0.95, lr=1e-3, max_grad_norm=0.5
  )
  return _default(**{**base, **kw})


def test_learns_cartpole_quickly():
  """60 updates (123k steps, ~15 s on 2 CPU cores): held-out return far above random (~22)."""
  steps = 60
  env, eval_env = _cartpole(16), _cartpole(32)
  pol = policies.make("mlp", env.num_actions, hidden=(64, 64), activation="tanh")
  cfg = _config(num_updates=steps)
  state = ppo.init(env, pol, cfg, jax.random.key(0))
  loop = runtime.Loop(steps, log_every=steps, progress=False)
  state, _ = runtime.train(state, ppo.make_update(env, pol, cfg), loop, key=jax.random.key(1))
  out = ppo_eval.make_evaluate(eval_env, pol, 500)(state.train.params, jax.random.key(7))
  ret = ppo_eval.summarize(out, eval_env)[0]["return"]
  random_policy = ppo_eval.make_evaluate(eval_env, pol, 500)(
    ppo.init(env, pol, cfg, jax.random.key(0)).train.params, jax.random.key(7)
  )
  assert ppo_eval.summarize(random_policy, eval_env)[0]["return"] < 40
  assert ret > 150, ret


def _one_update(policy_name, mesh, n=16):
  env = _cartpole(n)
  pol = policies.make(policy_name, env.num_actions, **_SMALL[policy_name])
  cfg = _config(n, num_steps=8, minibatches=2, epochs=2, num_updates=1)
  state = ppo.init(env, pol, cfg, jax.random.key(0))
  update = ppo.make_update(env, pol, cfg, mesh)
  if mesh is None:
    return jax.jit(update)(state, None, jax.random.key(1))
  shardings = ppo.state_sharding(state, mesh, n)
  state = jax.device_put(state, shardings)
  with jax.set_mesh(mesh):
    new, metrics = jax.jit(update, out_shardings=(shardings, None))(state, None, jax.random.key(1))
  assert new.obs.sharding.spec[0] == "data"  # the environments stay split over the devices
  return new, metrics


@pytest.mark.parametrize("policy_name", ["mlp", "gru"])
def test_unrolled_loops_equal_scanned(policy_name):
  # `unroll` (CNN policies on CPU) must change only how XLA loops, not one number.
  env = _cartpole(16)
  pol = policies.make(policy_name, env.num_actions, **_SMALL[policy_name])
  outs = []
  for unroll in (False, True):
    cfg = _config(16, num_steps=8, minibatches=2, epochs=2, num_updates=1, unroll=unroll)
    state = ppo.init(env, pol, cfg, jax.random.key(0))
    outs.append(jax.jit(ppo.make_update(env, pol, cfg))(state, None, jax.random.key(1)))
  (a, ma), (b, mb) = outs
  for x, y in zip(jax.tree.leaves(a.train.params), jax.tree.leaves(b.train.params), strict=True):
    np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-6, atol=1e-7)
  for k in ma:
    np.testing.assert_allclose(float(ma[k]), float(mb[k]), rtol=1e-5, atol=1e-6, err_msg=k)


@pytest.mark.parametrize("policy_name", ["mlp", "gru"])
def test_eight_devices_equal_one(policy_name):
  assert jax.device_count() == 8
  one, m1 = _one_update(policy_name, None)
  eight, m8 = _one_update(policy_name, mesh_lib.make_mesh({"data": 8}))
  for a, b in zip(jax.tree.leaves(one.train.params), jax.tree.leaves(eight.train.params)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)
  np.testing.assert_array_equal(np.asarray(one.obs), np.asarray(eight.obs))
  for k in m1:
    np.testing.assert_allclose(float(m1[k]), float(m8[k]), rtol=1e-4, atol=1e-6, err_msg=k)


def test_split_run_resumes_bit_identical(tmp_path):
  env = _cartpole(8)
  pol = policies.make("gru", env.num_actions, **_SMALL["gru"])
  cfg = _config(8, num_steps=8, minibatches=2, epochs=2, num_updates=6)
  update = ppo.make_update(env, pol, cfg)
  fresh = lambda: ppo.init(env, pol, cfg, jax.random.key(0))
  key = jax.random.key_data(jax.random.key(1))
  loop = lambda n: runtime.Loop(n, log_every=1, ckpt_every=1, progress=False, tensorboard=False)
  straight, _ = runtime.train(fresh(), update, loop(6), key=key)
  wd = tmp_path / "run"
  runtime.train(fresh(), update, loop(3), key=key, workdir=wd)  # "killed" after 3 updates
  resumed, result = runtime.train(fresh(), update, loop(6), key=key, workdir=wd)
  assert result.summary["resumed_from"] == 3
  for a, b in zip(jax.tree.leaves(straight), jax.tree.leaves(resumed)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


# --- the experiment program ---


def _run(*args, cwd, timeout=300):
  return run_program("experiments.ppo", list(args), cwd, timeout=timeout)


@pytest.mark.parametrize(
  "args, flag",
  [
    (["--env=nope"], "--env"),
    (["--policy=lstm"], "--policy"),
    (["--mesh=data:8", "--config.num_envs=12"], "--config.num_envs"),
    (["--config.lr=nan"], "--config.lr"),
    (["--policy=gru", "--config.minibatches=3"], "--config.minibatches"),
    ([f"--config={ROOT}/experiments/configs/ppo.py:big"], "--config"),
    (["--config.preset=craftax"], "--config.preset"),  # presets are config files only
    (["--config.num_envs=0"], "--config.num_envs"),
    (["--config.num_envs=-4"], "--config.num_envs"),
    (["--config.num_steps=0"], "--config.num_steps"),
    (["--config.mlp.hidden=(-5,)"], "--config.mlp.hidden"),
    (["--policy=gru", "--config.gru.hidden=0"], "--config.gru.hidden"),
    (["--config.num_envs=1000000000"], "--config.num_envs: needs about"),  # memory estimate
    (["--config.num_steps=1000000000"], "--config.num_steps: needs about"),
    (["--config.eval_envs=1000000000"], "--config.eval_envs: needs about"),
    (["--seeds=0"], "--seeds"),
    (["--seeds=3,3"], "--seeds"),
    (["--seeds=1,2", "--seed=4"], "--seed:"),
    (["--seeds=2", "--mesh=data:-1"], "--seeds"),
  ],
)
def test_bad_flags_exit_2_with_one_line(tmp_path, args, flag):
  wd = tmp_path / "wd"
  r = _run(*args, f"--workdir={wd}", cwd=tmp_path)
  assert r.returncode == 2, r.stderr[-2000:]
  lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
  assert len(lines) == 1 and lines[0].startswith(f"error: {flag}"), r.stderr[-2000:]
  assert not wd.exists() and list(tmp_path.iterdir()) == []


def test_experiment_end_to_end_small(tmp_path):
  wd = tmp_path / "wd"
  args = ["--env=cartpole", "--steps=4", "--config.num_envs=8", "--config.num_steps=16"]
  args += ["--config.eval_envs=4", "--config.eval_steps=50", "--mesh=data:-1", f"--workdir={wd}"]
  r = _run(*args, cwd=tmp_path)
  assert r.returncode == 0, r.stderr[-3000:]
  summary = json.loads((wd / "summary.json").read_text())
  assert summary["versions"]["gymnax"] and summary["env"] == "CartPole-v1"
  assert summary["eval/return"] > 0 and summary["train/env_steps_per_sec"] > 0
  config = json.loads((wd / "config.json").read_text())
  assert config["num_envs"] == 8 and config["lr"] == 1e-3  # the gymnax default under the flags
  assert (wd / "curves.png").exists() and "eval return" in r.stdout
  # the last line: steady and whole-run env steps/s, the runtime's top-level summary keys
  assert summary["env_steps_per_sec_average"] > 0 and "env_steps_per_sec" in summary
  last = r.stdout.strip().splitlines()[-1]
  assert "env steps/s steady" in last and "averaged over the run" in last, last
  assert f"{summary['env_steps_per_sec_average']:,.0f} averaged over the run" in last, last
  assert config["seed"] == 0
  r = _run(*args, "--seed=1", cwd=tmp_path)  # another seed: refused, the run left as it is
  assert r.returncode == 2 and "error: --workdir" in r.stderr and "seed: 0 -> 1" in r.stderr


def test_estimate_bytes_grows_with_the_rollout():
  from jaxlab.core.errors import ConfigError

  c = ppo.gymnax_config()
  small = ppo.estimate_bytes(c, (4,))["rollout"]
  c.num_envs *= 2
  assert ppo.estimate_bytes(c, (4,))["rollout"] > 1.9 * small
  c.num_envs = 10**9
  with pytest.raises(ConfigError) as e:
    ppo.check_memory(c, (4,))
  assert e.value.field == "config.num_envs" and "needs about" in e.value.message


@pytest.mark.parametrize(
  "args, flag",
  [
    (["--num_envs=4,x"], "--num_envs"),
    (["--rollout=62"], "--rollout"),  # not a multiple of CartPole's 4 minibatches: before timing
    (["--num_envs=1000000000"], "--num_envs: needs about"),
  ],
)
def test_benchmark_bad_flags_exit_2_before_timing(tmp_path, args, flag):
  r = run_program("benchmarks.ppo", args, tmp_path, timeout=300)
  assert r.returncode == 2, r.stderr[-2000:]
  err = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
  assert len(err) == 1 and err[0].startswith(f"error: {flag}"), r.stderr[-2000:]
  assert "Traceback" not in r.stderr and "env steps/s" not in r.stdout


def test_benchmark_reference_gae_matches_numpy():
  """The reference PPO of benchmarks/ppo.py (16 steps per loop iteration, 20 steps) against the
  NumPy transcription of GAE."""
  from benchmarks import ppo as bench

  rng = np.random.default_rng(1)
  t_len, n = 20, 3
  traj = {
    "reward": rng.normal(size=(t_len, n)).astype(np.float32),
    "value": rng.normal(size=(t_len, n)).astype(np.float32),
    "done": rng.random((t_len, n)) < 0.2,
  }
  last = rng.normal(size=(n,)).astype(np.float32)
  adv = bench.reference_gae(traj, last, 0.97, 0.8)
  done = traj["done"].astype(np.float32)
  ref_adv, _ = _gae_reference(traj["reward"], traj["value"], done, last, 0.97, 0.8)
  np.testing.assert_allclose(adv, ref_adv, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("policy_name", ["mlp", "gru"])
def test_init_compiled_equals_op_by_op(policy_name):
  """`ppo.init` runs compiled; R4, QRIM and DiCode's runs need the bits it gave op by op."""
  from jaxlab.rl.ppo import agent

  env = _cartpole(4)
  pol = policies.make(policy_name, env.num_actions, **_SMALL[policy_name])
  cfg = _config(4, num_steps=8, minibatches=2, num_updates=1)
  key = jax.random.key(3)
  eager = agent._init(env, pol, cfg, key)  # what init ran before: op by op
  compiled = ppo.init(env, pol, cfg, key)
  assert ppo.init(env, pol, cfg, key).train.step == 0  # the cached program again
  flat = lambda s: {jax.tree_util.keystr(p): x for p, x in jax.tree_util.tree_leaves_with_path(s)}
  eager, compiled = flat(eager), flat(compiled)
  assert list(eager) == list(compiled)
  for path, x in eager.items():
    np.testing.assert_array_equal(np.asarray(x), np.asarray(compiled[path]), err_msg=path)
    assert np.asarray(x).dtype == np.asarray(compiled[path]).dtype, path


def test_train_run_from_python(tmp_path):
  """The program's run through the library functions a notebook calls (the cpu preset)."""
  config = _config_file("cpu")
  steps = ppo.num_updates(config)
  loop = runtime.Loop(steps, log_every=4, **ppo.loop_options(config, "cartpole", steps))
  assert steps == 8 and loop.eval_every == ppo.schedule(steps, 0)[1]
  out = ppo.train_run(config, "cartpole", "mlp", loop, seed=0, workdir=tmp_path / "wd")
  summary = json.loads((tmp_path / "wd" / "summary.json").read_text())
  assert summary["env"] == "CartPole-v1" and summary["versions"]["gymnax"]
  assert summary["eval/return"] == out.result.summary["eval/return"] > 0
  assert out.line.startswith("eval return") and out.achievements == {}
  assert int(out.state.train.step) == steps * config.epochs * config.minibatches


def test_vmapped_seeds_equal_each_seed_alone(tmp_path):
  """--seeds: seeds trained in one compiled program; seed 7 there is the run seed=7 alone."""
  config = _config_file("cpu")
  loop = runtime.Loop(4, log_every=2, progress=False, plot=False, tensorboard=False, eval_every=4)
  both = ppo.train_run(config, "cartpole", "mlp", loop, seeds=(2, 7), workdir=tmp_path / "v")
  alone = ppo.train_run(config, "cartpole", "mlp", loop, seed=7, workdir=tmp_path / "s")
  for a, b in zip(
    jax.tree.leaves(both.state.train.params), jax.tree.leaves(alone.state.train.params)
  ):
    np.testing.assert_allclose(np.asarray(a)[1], np.asarray(b), rtol=1e-5, atol=1e-6)
  mine, solo = both.result.per_seed[7], alone.result.summary
  assert mine["eval/return"] == solo["eval/return"]
  assert mine["train/episode_return"] == pytest.approx(solo["train/episode_return"], rel=1e-5)
  assert both.result.summary["seeds"] == [2, 7]
  first = np.asarray(jax.tree.leaves(both.state.train.params)[0])
  assert not np.allclose(first[0], first[1])  # the seeds differ


def test_shared_rollout_step_records():
  from jaxlab.rl.ppo import rollouts

  env = counter_env(2)
  obs, state = env.reset(jax.random.key(0))
  act = lambda c, o, r, k: (c, jnp.zeros((2,), jnp.int32), {})
  carry = (state, obs, jnp.ones((2,), bool), ())
  (_, last_obs, reset, _), tr = rollouts.rollout(env.step, act, carry, jax.random.key(1), 5)
  np.testing.assert_array_equal(tr["done"][:, 0], [False, True, False, True, False])
  np.testing.assert_array_equal(tr["reset"][1:], tr["done"][:-1])  # done starts the next episode
  np.testing.assert_array_equal(reset, tr["done"][-1])
  np.testing.assert_array_equal(rollouts.alive(tr["done"])[:, 1], [1, 1, 1, 0, 0])  # ends at t=2
  assert rollouts.rollout(env.step, act, carry, jax.random.key(1), 5, records=False)[1] is None


def test_rollout_records_equal_the_step_by_step_scan():
  """rollout rebuilds ``reset`` and ``returned_episode`` after its loop: they must be exactly the
  records of the step function scanned as is (initial reset flags included)."""
  from jaxlab.rl.ppo import rollouts

  env = counter_env(3)
  obs, state = env.reset(jax.random.key(0))
  act = lambda c, o, r, k: (c, jax.random.randint(k, (3,), 0, 2), {"u": o[:, 0] + r})
  carry = (state, obs, jnp.array([True, False, True]), ())
  got_carry, got = rollouts.rollout(env.step, act, carry, jax.random.key(1), 7)
  step = rollouts.step_fn(env.step, act, jax.random.key(1))
  want_carry, want = jax.lax.scan(step, carry, jnp.arange(7))
  assert jax.tree.structure(got) == jax.tree.structure(want)
  jax.tree.map(np.testing.assert_array_equal, (got_carry, got), (want_carry, want))


@pytest.mark.parametrize("action_dim", [0, 2])
def test_log_prob_entropy_equals_the_two_functions(action_dim):
  pol = policies.make(
    "mlp", 0 if action_dim else 3, action_dim=action_dim, hidden=(8,), activation="tanh"
  )
  obs, reset = jax.random.normal(jax.random.key(0), (2, 5, 4)), jnp.zeros((2, 5), bool)
  params = pol.init(jax.random.key(1), (), obs, reset)
  _, dist, _ = pol.apply(params, (), obs, reset)
  action = policies.sample(dist, jax.random.key(2))
  lp, ent = policies.log_prob_entropy(dist, action)
  np.testing.assert_allclose(lp, policies.log_prob(dist, action), rtol=1e-6, atol=1e-7)
  np.testing.assert_allclose(ent, policies.entropy(dist), rtol=1e-6, atol=1e-7)
  if not action_dim:  # the categorical case against NumPy (the functions share helpers)
    logits = np.asarray(dist["logits"], np.float64)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    a = np.asarray(action)
    np.testing.assert_allclose(
      lp, np.log(np.take_along_axis(p, a[..., None], -1))[..., 0], atol=1e-5
    )
    np.testing.assert_allclose(ent, -(p * np.log(p)).sum(-1), atol=1e-5)


@pytest.mark.slow
def test_experiment_solves_cartpole(tmp_path):
  """The default command: eval return >= 475. Measured: ~45 s on 2 shared CPU cores."""
  wd = tmp_path / "wd"
  r = _run("--env=cartpole", f"--workdir={wd}", cwd=tmp_path, timeout=900)
  assert r.returncode == 0, r.stderr[-3000:]
  summary = json.loads((wd / "summary.json").read_text())
  assert summary["eval/return"] >= 475, summary


@pytest.mark.slow
def test_experiment_craftax_classic_small(tmp_path):
  """A tiny Craftax-Classic-Symbolic run writes the achievement chart (~2 min, mostly compile)."""
  wd = tmp_path / "wd"
  r = _run(
    "--env=craftax-classic-symbolic",
    f"--config={ROOT}/experiments/configs/ppo.py:craftax",
    "--steps=2",
    "--config.num_envs=16",
    "--config.num_steps=16",
    "--config.minibatches=4",
    "--config.mlp.hidden=(64,64)",
    "--config.eval_envs=8",
    "--config.eval_steps=200",
    f"--workdir={wd}",
    cwd=tmp_path,
    timeout=900,
  )
  assert r.returncode == 0, r.stderr[-3000:]
  summary = json.loads((wd / "summary.json").read_text())
  assert len(summary["achievements"]) == 22 and "eval/score" in summary
  assert "eval/return_pct" in summary and (wd / "achievements.png").exists()
