"""R4 reward learning from ratings: soft rank, losses (NumPy transcriptions), data, recovery."""

import importlib
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import isotonic_regression

from jaxlab.core.errors import ConfigError
from jaxlab.rl import r4
from jaxlab.rl.r4 import data as r4_data
from jaxlab.rl.r4 import protocol as r4_protocol
from jaxlab.rl.r4.softrank import hard_rank, soft_rank

r4_reward = importlib.import_module("jaxlab.rl.r4.reward")  # r4.reward is the reward function


def np_soft_rank(x, eps):
  """Reference: Blondel et al.'s projection with scipy's isotonic regression."""
  x = np.asarray(x, np.float64)
  n = len(x)
  z, w = x / eps, np.arange(n, 0, -1.0)
  perm = np.argsort(-z)
  s = z[perm]
  out = np.empty(n)
  out[perm] = s - isotonic_regression(s - w, increasing=False).x
  return out


_grad = jax.jit(jax.grad(lambda v, eps, c: jnp.sum(soft_rank(v, eps) * c)))


def test_soft_rank_values_and_gradients_match_reference():
  rng = np.random.default_rng(0)
  for n, eps in itertools.product([2, 5, 9], [0.3, 1.0, 3.0]):
    x = rng.normal(size=n) * 2
    np.testing.assert_allclose(
      np.asarray(soft_rank(jnp.asarray(x), eps)), np_soft_rank(x, eps), atol=1e-5
    )
    c = rng.normal(size=n)
    g = np.asarray(_grad(jnp.asarray(x, jnp.float32), eps, jnp.asarray(c, jnp.float32)))
    h = 1e-5
    fd = [
      (np_soft_rank(x + h * e, eps) @ c - np_soft_rank(x - h * e, eps) @ c) / (2 * h)
      for e in np.eye(n)
    ]
    np.testing.assert_allclose(g, fd, atol=1e-4)


def test_soft_rank_is_the_permutahedron_projection():
  """Brute force, independent of PAV: the projection mu of z satisfies (z - mu).(v - mu) <= 0 for
  every vertex v (every permutation of 1..n), and mu lies in the permutahedron (majorisation)."""
  rng = np.random.default_rng(1)
  n = 5
  verts = np.array(list(itertools.permutations(range(1, n + 1))), float)
  for _ in range(5):
    x = rng.normal(size=n)
    mu = np.asarray(soft_rank(jnp.asarray(x), 1.0), np.float64)
    assert np.max((x - mu) @ (verts - mu).T) <= 1e-4
    top = np.cumsum(np.sort(mu)[::-1])
    assert np.all(top <= np.cumsum(np.arange(n, 0, -1)) + 1e-4) and abs(top[-1] - 15) < 1e-4


def test_soft_rank_limits():
  x = jnp.array([0.3, -1.0, 2.0, 0.5, 1.7])
  np.testing.assert_allclose(soft_rank(x, 1e-3), hard_rank(x), atol=1e-5)
  np.testing.assert_allclose(soft_rank(x, 1e4), jnp.full(5, 3.0), atol=1e-3)


def test_rmse_zero_iff_class_order_respected():
  rng = np.random.default_rng(2)
  perms = list(itertools.permutations(range(4)))
  g = np.array(perms, np.float32) * 10 + rng.normal(size=(len(perms), 4)).astype(np.float32)
  losses = jax.jit(jax.vmap(lambda row: r4.rmse_loss(row[None], 1e-2)))(jnp.asarray(g))
  for perm, loss in zip(perms, np.asarray(losses)):
    assert (loss < 1e-8) == (perm == (0, 1, 2, 3)), (perm, loss)


def np_losses(g, rating, classes, k, ga, gb, pref, eps):
  n = g.shape[1]
  target = np_soft_rank(np.arange(n, dtype=float), eps)
  rmse = np.mean([(np_soft_rank(row, eps) - target) ** 2 for row in g])
  flat = g[:, 0]
  gn = (flat - flat.min()) / (flat.max() - flat.min() + 1e-8)
  b = [0.0] + [np.mean(rating < i) for i in range(1, classes)] + [1.0]
  scores = np.array([[-k * (v - b[i]) * (v - b[i + 1]) for i in range(classes)] for v in gn])
  logp = scores - np.log(np.exp(scores).sum(1, keepdims=True))
  rbrl = -np.mean(logp[np.arange(len(gn)), rating])
  p = 1 / (1 + np.exp(-(ga - gb)))
  bt = -np.mean(pref * np.log(p) + (1 - pref) * np.log(1 - p))
  return rmse, rbrl, bt


def test_losses_match_numpy_transcription():
  rng = np.random.default_rng(3)
  g = rng.normal(size=(6, 4)) * 3
  rating = rng.integers(0, 4, 6)
  ga, gb = rng.normal(size=7), rng.normal(size=7)
  pref = rng.choice([0.0, 0.5, 1.0], 7)
  want = np_losses(g, rating, 4, 10.0, ga, gb, pref, 0.7)
  got = (
    r4.rmse_loss(jnp.asarray(g, jnp.float32), 0.7),
    r4.rbrl_loss(jnp.asarray(g[:, 0], jnp.float32), jnp.asarray(rating), 4, 10.0),
    r4.bt_loss(jnp.asarray(ga), jnp.asarray(gb), jnp.asarray(pref)),
  )
  np.testing.assert_allclose([float(x) for x in got], want, rtol=1e-4)
  mask = np.array([[1.0, 1.0, 0.0]])
  ood = r4.ood_term(jnp.array([1.0, 3.0]), jnp.array([[2.0, 4.0, 100.0]]), jnp.asarray(mask))
  assert float(ood) == pytest.approx(2.0 - 3.0)


# --- learning on the synthetic chain MDP (compiled once per configuration, tiny model) ---

CHAIN = dict(hidden=(16,), ensemble=1, steps=600, batch=32, lr=3e-3)


def _chain(transform=None):
  """The chain MDP (reward s / 9) and quantile ratings of its (transformed) returns. The returns
  are recomputed exactly (9 G is an integer) so that float rounding cannot split ties."""
  traj = r4_data.chain_trajectories(jax.random.key(0), 800)
  train, test = traj.take(np.arange(500)), traj.take(np.arange(500, 800))
  g = np.round(train.true_return.astype(np.float64) * 9) / 9
  g = g if transform is None else transform(g)
  ratings = r4_data.simulate_ratings(g, r4_data.quantile_edges(g, 5), jax.random.key(1), 0.0)
  return train, test, ratings


def _reward_config(**kw):
  """The library's reward defaults (``r4.get_config().reward``, method r4) with ``kw`` changed."""
  return r4.RewardConfig.from_config(r4.get_config().reward, **{"method": "r4", **kw})


def _fit(train, ratings, **kw):
  config = _reward_config(**{**CHAIN, **kw})
  data = r4_protocol.dataset(train, ratings, 2)
  state, result = r4.fit(config, data, jax.random.key(2))
  return state, data, result


def _state_rewards(state):
  eye = np.eye(10, dtype=np.float32)
  both = [np.concatenate([eye, np.tile(np.eye(2)[a], (10, 1))], 1) for a in (0, 1)]
  return np.mean([np.asarray(r4.reward(state, state.params, jnp.asarray(x))) for x in both], 0)


@pytest.fixture(scope="module")
def chain_r4():
  train, test, ratings = _chain()
  state, data, _ = _fit(train, ratings, ood_beta=0.0)
  return train, test, ratings, state, data


def test_chain_ordering_recovery(chain_r4):
  _, test, _, state, _ = chain_r4
  pred = r4.predict_returns(state, r4_protocol.features_of(test, 2), test.mask)
  assert r4.alignment(pred, test.true_return)["kendall_tau"] >= 0.8
  assert int(np.argmax(_state_rewards(state))) == 9  # the goal end of the chain


def test_invariant_to_monotone_transforms(chain_r4):
  """3 r* + 1 per step adds 3 G + 20 (fixed length 20); exp is a monotone warp of G."""
  train, _, ratings, _, data = chain_r4
  for transform in (lambda g: 3 * g + 20, lambda g: np.exp(g / 3.0) - 7):
    other_train, _, other = _chain(transform)
    np.testing.assert_array_equal(other, ratings)
    # ...and everything else the learner sees is the same, so the learned reward is too
    other_data = r4_protocol.dataset(other_train, other, 2)
    for name in ("feats", "mask", "rating", "members", "counts", "box_lo", "box_hi"):
      np.testing.assert_array_equal(other_data[name], data[name])
  # a transform that is not monotone changes the ratings (so the check above can fail)
  _, _, flipped = _chain(lambda g: -g)
  assert np.mean(flipped != ratings) > 0.5


def test_ood_term_lowers_off_data_reward(chain_r4):
  train, _, ratings, state0, data = chain_r4
  state1, _, _ = _fit(train, ratings, ood_beta=0.5)
  box = r4_reward._box(data, jax.random.key(5), 2048)
  x = data["feats"].reshape(-1, data["feats"].shape[-1])

  def gap(st):
    return float(jnp.mean(r4.reward(st, st.params, box)) - jnp.mean(r4.reward(st, st.params, x)))

  assert gap(state1) < 0 and gap(state1) < gap(state0) - 0.5


@pytest.mark.slow
def test_baselines_learn_the_order(chain_r4):
  train, test, ratings, _, _ = chain_r4
  for method in ("rbrl", "bt"):
    state, _, _ = _fit(train, ratings, method=method, ood_beta=0.0, steps=300)
    pred = r4.predict_returns(state, r4_protocol.features_of(test, 2), test.mask)
    assert r4.alignment(pred, test.true_return)["kendall_tau"] >= 0.7, method


# --- raters, the ratings file, the learned-reward environment ---


def test_simulated_raters():
  g = np.linspace(0, 100, 1000)
  edges = r4_data.quantile_edges(g, 5)
  clean = r4_data.simulate_ratings(g, edges, jax.random.key(0), 0.0)
  assert np.all(np.abs(np.bincount(clean) - 200) <= 1) and np.all(np.diff(clean) >= 0)
  noisy = r4_data.simulate_ratings(g, edges, jax.random.key(0), noise=0.3)
  assert 0.1 < np.mean(noisy != clean) < 0.9
  keep = r4_data.imbalance_keep(clean, jax.random.key(1), 0.5)
  counts = np.bincount(clean[keep], minlength=5)
  assert counts[0] == np.sum(clean == 0) and counts[4] < counts[2] < counts[0]
  np.testing.assert_array_equal(r4_data.dense_classes([7, 2, 7, 9]), [1, 0, 1, 2])


@pytest.mark.parametrize(
  "text, needle",
  [
    ("id,rating\n0,1\n", "line 1: the header"),
    ("trajectory_id,rating\n0,1\n1,x\n", "line 3: id and rating must be integers"),
    ("trajectory_id,rating\n0,1\n9,2\n", "line 3: trajectory id 9 is not in the pool 0..4"),
    ("trajectory_id,rating\n0,1\n0,2\n", "line 3: trajectory 0 already rated on line 2"),
    ("trajectory_id,rating\n0,1\n1,-2\n", "line 3: rating must be >= 0"),
    ("trajectory_id,rating\n0,1\n1,1\n", "at least 2 distinct ratings"),
    ("trajectory_id,rating\n0,1,3\n", "line 2: want 2 fields"),
  ],
)
def test_ratings_file_errors(tmp_path, text, needle):
  path = tmp_path / "r.csv"
  path.write_text(text)
  with pytest.raises(ConfigError) as e:
    r4_data.read_ratings(path, 5)
  assert e.value.field == "ratings" and needle in e.value.message and "\n" not in e.value.message


def test_ratings_file_reads(tmp_path):
  path = tmp_path / "r.csv"
  path.write_text("trajectory_id, rating\n3,0\n\n1,4\n")
  ids, ratings = r4_data.read_ratings(path, 5)
  np.testing.assert_array_equal(ids, [3, 1])
  np.testing.assert_array_equal(ratings, [0, 4])


def test_reward_env_replaces_reward_and_keeps_true_return():
  from jaxlab.envs import gymnax

  env = gymnax.make("cartpole", 4)
  config = _reward_config(hidden=(8,), ensemble=2)
  state = r4.create(config, 4 + 2, jax.random.key(0))
  wrapped, set_reward = r4_protocol.reward_env(env, config, state.params, 2.0)
  obs, st = wrapped.reset(jax.random.key(1))
  action = jnp.array([0, 1, 1, 0])
  _, st2, rew, _, info = wrapped.step(st, action, jax.random.key(2))
  want = 2.0 * r4.reward(state, state.params, r4.features(obs, action, 2))
  np.testing.assert_allclose(rew, want, rtol=1e-5)
  assert float(jnp.sum(st2.inner.episode_return)) == 4.0  # CartPole's true reward, 1 per step
  st3 = set_reward(st2, jax.tree.map(jnp.zeros_like, state.params), 1.0)
  assert float(jnp.abs(wrapped.step(st3, action, jax.random.key(3))[2]).max()) == 0.0


def test_reward_config_validation():
  with pytest.raises(ConfigError) as e:
    r4.validate(_reward_config(eps=math.nan), prefix="config.reward")
  assert e.value.field == "config.reward.eps"
  with pytest.raises(ConfigError):
    r4.validate(_reward_config(method="dpo"))


# --- the experiment program ---


def _exit_2(r, flag):
  assert r.returncode == 2, r.stderr[-2000:]
  err = [line for line in r.stderr.splitlines() if line.startswith("error:")]
  assert len(err) == 1 and flag in err[0], r.stderr[-2000:]


def test_experiment_bad_input_exits_2(tmp_path):
  from programs import run_program

  bad = tmp_path / "bad.csv"
  bad.write_text("trajectory_id,rating\n0,1\n0,2\n")
  big = tmp_path / "big.csv"
  big.write_text("trajectory_id,rating\n0," + "1" * 30 + "\n1,2\n")
  good = tmp_path / "good.csv"
  good.write_text("trajectory_id,rating\n0,0\n1,1\n")
  small = ["--config.pool=32", "--config.heldout=16", "--config.traj_len=20"]
  for args, flag in [
    (["--seeds=0"], "--seeds"),
    (["--seeds=1,1"], "--seeds"),
    ([f"--ratings={good}", "--seeds=2"], "--seeds"),  # a ratings file rates one seed's pool
    (["--seeds=4096", "--config.pool=100000"], "--seeds: needs about"),  # every seed's pool
    (["--method=dpo"], "--method"),
    ([f"--ratings={bad}"], "--ratings"),
    ([f"--ratings={big}"], "--ratings"),  # a 30-digit rating: one line, no OverflowError
    ([*small, "--config.bins=(1000.0,)"], "--config.bins"),  # every return in one class
    (["--config.bins=(5.0,1.0)"], "--config.bins"),
    (["--config.pool=1000000000"], "--config.pool: needs about"),
    (["--config.reward.ood_samples=1000000000"], "--config.reward.ood_samples: needs about"),
    (["--config.ppo.num_envs=-4"], "--config.ppo.num_envs"),
    (["--config.ppo.mlp.hidden=(-5,)"], "--config.ppo.mlp.hidden"),
  ]:
    r = run_program("experiments.r4", [f"--workdir={tmp_path / 'run'}", *args], tmp_path)
    _exit_2(r, flag)
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "run").exists()
  assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.csv", "big.csv", "good.csv"]


def _files(wd):
  """Every file's bytes but the lock's (it holds the pid of its last holder)."""
  return {p.name: p.read_bytes() for p in sorted(wd.iterdir()) if p.name != ".lock"}


def test_experiment_rerun_is_safe(tmp_path):
  """A finished run re-run: its record, every file byte-identical; another seed: exit 2."""
  import json

  from programs import run_program

  wd = tmp_path / "run"
  args = [f"--workdir={wd}", "--config.pool=32", "--config.heldout=16", "--config.traj_len=20"]
  args += ["--config.reward.steps=20", "--config.reward.ood_samples=16", "--steps=2"]
  args += ["--config.eval_points=1", "--config.ppo.num_envs=4", "--config.ppo.num_steps=8"]
  args += ["--config.ppo.minibatches=1", "--config.ppo.eval_envs=4", "--config.ppo.eval_steps=20"]
  r = run_program("experiments.r4", args, tmp_path, timeout=600)
  assert r.returncode == 0, r.stderr[-3000:]
  assert r.stdout.count("[jaxlab] ") == 1 and "compile cache " in r.stdout  # the start-up line
  before = _files(wd)
  assert {"summary.json", "config.json", "trajectories.npz", "agent.png"} <= set(before)
  recorded = json.loads(before["config.json"])
  assert recorded["seed"] == 0 and recorded["method"] == "r4" and recorded["steps"] == 2
  r = run_program("experiments.r4", args, tmp_path, timeout=600)
  assert r.returncode == 0, r.stderr[-3000:]
  assert "nothing rewritten" in r.stdout and "held-out Kendall tau" in r.stdout
  assert _files(wd) == before
  r = run_program("experiments.r4", [*args, "--seed=1"], tmp_path, timeout=600)
  _exit_2(r, "--workdir")
  assert "seed" in r.stderr and _files(wd) == before


def _tiny_config():
  """A run of seconds: 32 rated trajectories of 20 steps, a 20-step fit, 2 PPO phases."""
  c = r4.get_config()
  c.pool, c.heldout, c.traj_len, c.eval_points = 32, 16, 20, 2
  c.reward.steps, c.reward.ood_samples = 20, 16
  c.ppo.num_envs, c.ppo.num_steps, c.ppo.minibatches = 4, 8, 1
  c.ppo.eval_envs, c.ppo.eval_steps = 4, 20
  return c


@pytest.mark.slow  # 45 s of compiling; PPO's seed test covers the shared path in the fast suite
def test_vmapped_seeds_equal_each_seed_alone(tmp_path):
  """--seeds: the seeds' PPO phases in one compiled program; seed 1 there is the run seed=1
  alone (the pool, ratings and reward fit are the same computation, PPO is vmapped)."""
  import json

  kw = dict(env="cartpole", method="r4", ratings="simulated", protocol="offline", updates=4)
  both = r4_protocol.run(_tiny_config(), seeds=(0, 1), workdir=tmp_path / "both", **kw)
  alone = r4_protocol.run(_tiny_config(), seed=1, **kw)
  mine = both["per_seed"]["1"]
  assert set(mine) == set(alone) and mine["config"] == alone["config"]
  assert mine["heldout/kendall_tau"] == alone["heldout/kendall_tau"]
  assert mine["eval/true_return"] == pytest.approx(alone["eval/true_return"], rel=1e-4)
  for (s1, r1), (s2, r2) in zip(mine["curve"], alone["curve"], strict=True):
    assert s1 == s2 and r1 == pytest.approx(r2, rel=1e-4)
  assert both["seeds"] == [0, 1] and both["config"]["seeds"] == [0, 1]
  taus = [both["per_seed"][s]["heldout/kendall_tau"] for s in ("0", "1")]
  assert taus[0] != taus[1] and both["heldout/kendall_tau"] == pytest.approx(np.mean(taus))
  assert both["env"] == "cartpole" and "curve" not in both and "seed" not in both
  for seed in (0, 1):  # each seed's files in its own folder
    names = {p.name for p in (tmp_path / "both" / f"seed{seed}").iterdir()}
    assert names == {"trajectories.npz", "alignment.png", "agent.png"}
  written = json.loads((tmp_path / "both" / "summary.json").read_text())
  assert written["per_seed"]["1"]["heldout/kendall_tau"] == alone["heldout/kendall_tau"]


@pytest.mark.slow
def test_experiment_runs_offline_and_online(tmp_path):
  import json

  from programs import run_program

  small = ["--config.pool=128", "--config.heldout=64", "--config.reward.steps=200", "--steps=6"]
  for protocol in ("offline", "online"):
    wd = tmp_path / protocol
    args = [f"--workdir={wd}", f"--protocol={protocol}", "--config.online_rounds=2", *small]
    r = run_program("experiments.r4", args, tmp_path, timeout=1200)
    assert r.returncode == 0, r.stderr[-3000:]
    s = json.loads((wd / "summary.json").read_text())
    assert -1 <= s["heldout/kendall_tau"] <= 1 and np.isfinite(s["eval/true_return"])
    assert (wd / "agent.png").exists() and (wd / "alignment.png").exists()


# --- the held-out alignment (the studies: tests/test_studies.py) ---


def np_kendall_tau_b(x, y):
  """Kendall's tau-b by counting pairs (ties in x or y excluded from the normaliser)."""
  conc = disc = tx = ty = 0
  for i, j in itertools.combinations(range(len(x)), 2):
    dx, dy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
    if dx == 0 and dy == 0:
      continue
    if dx == 0:
      tx += 1
    elif dy == 0:
      ty += 1
    elif dx == dy:
      conc += 1
    else:
      disc += 1
  return (conc - disc) / np.sqrt((conc + disc + tx) * (conc + disc + ty))


def test_kendall_tau_matches_pair_count():
  rng = np.random.default_rng(4)
  true = rng.integers(0, 6, 40).astype(float)  # tied returns, as in MinAtar
  pred = true + rng.normal(size=40) * 2
  pred[:5] = pred[0]  # ties in the prediction too
  got = r4.alignment(pred, true)["kendall_tau"]
  assert got == pytest.approx(np_kendall_tau_b(pred, true), abs=1e-12)


def test_bt_teacher_sees_the_raters_noisy_returns():
  rng = np.random.default_rng(6)
  z = np.zeros((200, 5), np.float32)
  traj = r4_data.Trajectories(z[..., None], z, rng.normal(size=(200, 5)).astype(np.float32), z + 1)
  c = r4.get_config()
  c.noise = 0.5
  ids, rated, edges, seen = r4_protocol.rate(traj, c, jax.random.key(3), "simulated")
  np.testing.assert_array_equal(rated, np.searchsorted(edges, seen, side="right"))
  assert np.mean(seen != traj.true_return[ids]) > 0.9  # noisy, and not the true returns


def test_run_keywords_are_one_setting(monkeypatch):
  """``protocol.run``'s keywords build the Setting ``run_setting`` receives, and a Setting
  records what the keywords recorded."""
  seen = []
  monkeypatch.setattr(r4_protocol, "run_setting", lambda c, s, wd=None: seen.append((s, wd)))
  kw = dict(env="pendulum", method="bt", ratings="simulated", protocol="online", updates=7)
  r4_protocol.run(r4.get_config(), seed=3, workdir="w", **kw)
  r4_protocol.run(r4.get_config(), seeds=[1, "2"], **kw)
  assert seen == [
    (r4_protocol.Setting("pendulum", "bt", 7, "simulated", "online", (3,)), "w"),
    (r4_protocol.Setting("pendulum", "bt", 7, "simulated", "online", (1, 2)), None),
  ]
  s, c = seen[1][0], r4.get_config()
  assert s.several and s.rounds(c) == c.online_rounds and not seen[0][0].several
  rec = s.record(c, (2,))
  assert {k: rec[k] for k in ("env", "method", "protocol", "seed", "steps")} == {
    "env": "pendulum",
    "method": "bt",
    "protocol": "online",
    "seed": 2,
    "steps": 7,
  }
  assert s.record(c)["seeds"] == [1, 2] and rec["pool"] == c.pool and "seeds" not in rec
