"""R4's equal-label Bradley-Terry baseline (config.bt_pairs) and the r4/pendulum study's spec."""

import importlib
from types import SimpleNamespace

import jax
import numpy as np
import pytest

from jaxlab.core.errors import ConfigError
from jaxlab.rl import r4
from jaxlab.rl.r4 import data as r4_data
from jaxlab.rl.r4 import protocol as r4_protocol

r4_reward = importlib.import_module("jaxlab.rl.r4.reward")


def _pool(n=300, length=5, seed=0):
  rng = np.random.default_rng(seed)
  z = np.zeros((n, length), np.float32)
  reward = rng.normal(size=(n, length)).astype(np.float32)
  obs = rng.normal(size=(n, length, 3)).astype(np.float32)
  return r4_data.Trajectories(obs, z.astype(np.int32), reward, z + 1)


def test_default_is_fresh_pairs_and_bad_values_are_refused():
  c = r4.get_config()
  assert c.bt_pairs == "fresh"
  c.bt_pairs = "all"
  with pytest.raises(ConfigError) as e:
    r4.validate_config(c, method="bt", ratings="simulated", protocol="offline", updates=5)
  assert e.value.field == "config.bt_pairs"


def test_matched_pairs_count_and_labels_follow_the_noisy_rater():
  traj = _pool()
  c = r4.get_config()
  c.noise = 0.5
  ids, rated, _, seen = r4_protocol.rate(traj, c, jax.random.key(3), "simulated")
  pairs, label = r4_data.matched_pairs(seen, jax.random.key(4))
  assert pairs.shape == (len(rated), 2) and label.shape == (len(rated),)  # one label per rating
  assert np.all(pairs[:, 0] != pairs[:, 1]) and pairs.min() >= 0 and pairs.max() < len(seen)
  want = np.sign(seen[pairs[:, 0]] - seen[pairs[:, 1]]) / 2 + 0.5
  np.testing.assert_array_equal(label, want)
  # the rater's noise reaches the labels: some pairs are ordered against their true returns
  g = traj.true_return[ids]
  clean = np.sign(g[pairs[:, 0]] - g[pairs[:, 1]]) / 2 + 0.5
  assert 0.03 < np.mean(label != clean) < 0.5


def test_matched_dataset_holds_as_many_pairs_as_ratings(monkeypatch):
  traj = _pool()
  c = r4.get_config()
  c.noise = 0.5
  ids, rated, _, seen = r4_protocol.rate(traj, c, jax.random.key(3), "simulated")
  monkeypatch.setattr(r4_protocol, "fit", lambda rc, data, key: (None, SimpleNamespace(summary={})))

  def data_of(method, pairs):
    rc = r4.RewardConfig.from_config(c.reward, method=method)
    return r4_protocol.fit_reward(rc, traj, ids, rated, 2, jax.random.key(1), seen, pairs)[1]

  data = data_of("bt", "matched")
  assert data["pairs"].shape == (2, len(ids)) and data["pair_label"].shape == (len(ids),)
  assert "pairs" not in data_of("bt", "fresh")
  assert "pairs" not in data_of("r4", "matched")  # the setting is Bradley-Terry's alone


def test_matched_loss_reads_only_the_pair_labels():
  """With fixed pairs the loss is Bradley-Terry's on their labels; the continuous returns the
  fresh-pair teacher compares no longer enter."""
  traj = _pool(n=40)
  c = r4.get_config()
  ids, rated, _, seen = r4_protocol.rate(traj, c, jax.random.key(3), "simulated")
  rc = r4.RewardConfig.from_config(c.reward, method="bt", hidden=(4,), ensemble=1, ood_beta=0.0)
  data = r4_protocol.dataset(
    traj.take(ids), r4_data.dense_classes(rated), 2, seen, jax.random.key(5)
  )
  p = r4_reward.create(rc, data["feats"].shape[-1], jax.random.key(0)).params
  p = jax.tree.map(lambda x: x[0], p)
  apply = r4_reward.member_apply(rc)

  f = jax.jit(lambda d: r4_reward._member_loss(p, d, jax.random.key(7), apply, rc)[1]["loss"])
  loss = lambda d: float(f(d))  # one compile: the three datasets share their shapes

  base = loss(data)
  assert loss({**data, "prefer": -data["prefer"]}) == base
  flipped = loss({**data, "pair_label": 1.0 - data["pair_label"]})
  assert flipped != pytest.approx(base, abs=1e-6)
  # the value: bt_loss over the drawn pairs (the same key draws the same pairs)
  k_idx = jax.random.split(jax.random.key(7), 3)[0]
  j = jax.random.randint(k_idx, (rc.batch,), 0, data["pair_label"].shape[0])
  a, b = data["pairs"][:, j]
  g = lambda i: r4_reward.returns(apply(p, data["feats"][i]), data["mask"][i])
  want = r4.bt_loss(g(a), g(b), data["pair_label"][j])
  assert base == pytest.approx(float(want), rel=1e-5)


def test_pendulum_study_declares_equal_labels_and_non_inferiority():
  from jaxlab import studies
  from jaxlab.studies import r4 as r4_studies

  s = studies.get("r4/pendulum")
  assert s.budget["labels"] == r4.get_config().pool == 512
  assert not set(s.seeds) & set(s.tuning_seeds) and len(s.seeds) == 10
  assert [(t.kind, t.metric, t.margin, t.comparisons) for t in s.tests] == [
    ("non_inferiority", "heldout/kendall_tau", 0.02, 8),
    ("non_inferiority", "eval/true_return", 23.2, 8),
  ]
  # 10 % of the probe, to 0.1
  assert r4_studies.RETURN_MARGIN == round(0.1 * abs(r4_studies.TRUE_RETURN_PROBE), 1)
  assert len(s.pairs) * len(s.tests) == 8  # the comparisons actually made
  for arm in s.arms:
    c = r4_studies.config("pendulum", arm)
    assert c.bt_pairs == "matched" and c.imbalance == 0.0  # every rated trajectory is kept
  # the earlier studies ran before the field existed, with fresh pairs
  assert r4.bt_pairs(r4_studies.config("cartpole", "bt_noise0.5")) == "fresh"
