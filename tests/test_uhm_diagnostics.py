"""jaxlab.rl.uhm.diagnostics: the held-out batch, the Monte-Carlo returns, the baselines, and (on a
known random walk) that the horizon-model error falls below the current-state baseline after
training while a mutated model target (level n bootstrapped through n) does not."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core import runtime
from jaxlab.rl.uhm import agent, diagnostics, offline_data


def _mc_reference(r, m, term, gamma):
  """Forward sums G_i = sum_k gamma^k r_{i+k} prod_{j<k} m_{i+j}, stopping at the episode end."""
  n = len(r)
  G = np.zeros(n)
  for i in range(n):
    acc, disc, k = 0.0, 1.0, i
    while True:
      acc += disc * r[k]
      if term[k] or k == n - 1:
        break
      disc *= gamma * m[k]
      k += 1
    G[i] = acc
  return G


def test_mc_returns_match_forward_sums_with_masks_and_episode_ends():
  rng = np.random.default_rng(0)
  n = 23
  r, m = rng.normal(size=n), (rng.uniform(size=n) > 0.2).astype(float)
  term = np.zeros(n, bool)
  term[[6, 15]] = True
  G = diagnostics.mc_returns(r, m, term, 0.9)
  np.testing.assert_allclose(G, _mc_reference(r, m, term, 0.9), rtol=1e-12, atol=1e-12)


def _walk(episodes, length, rng, drift=0.5, noise=0.1):
  """1-D walk s' = s + a + noise eps, behaviour action a = drift (+ tiny jitter); reward 0."""
  obs, act, nxt, term = [], [], [], []
  for _ in range(episodes):
    s = rng.uniform(-1, 1)
    for t in range(length):
      a = drift + 0.01 * rng.normal()
      s2 = s + a + noise * rng.normal()
      obs.append([s])
      act.append([a])
      nxt.append([s2])
      term.append(t == length - 1)
      s = s2
  n = len(obs)
  return dict(
    observations=np.array(obs),
    actions=np.array(act),
    rewards=np.zeros(n),
    masks=np.ones(n),
    terminals=np.array(term),
    next_observations=np.array(nxt),
  )


def _config(**kw):
  c = agent.get_config()
  c.update(
    batch_size=64,
    actor_hidden_dims=(32, 32),
    value_hidden_dims=(32, 32),
    model_hidden_dims=(64, 64),
    reward_hidden_dims=(16,),
    k_max=4,
    flow_steps=3,
    discount=0.9,
    model_tau=0.05,
    lr=1e-3,
    alpha_actor=10.0,
    alpha_critic=0.0,
    **kw,
  )
  return agent.validate_config(c)


def test_heldout_batch_baselines_and_critic_error_match_numpy():
  rng = np.random.default_rng(1)
  train, held = _walk(6, 12, rng), _walk(3, 12, rng)
  c = _config()
  h = diagnostics.make_heldout(held, train, k_max=4, discount=0.9, batch_size=10)
  # every start has 4 real successors inside its own episode
  idx = [int(np.argmin(np.abs(held["observations"][:, 0] - s))) for s in h.observations[:, 0]]
  for i, fut in zip(idx, h.futures):
    assert not held["terminals"][i : i + 3].any()
    np.testing.assert_allclose(fut[:, 0], held["next_observations"][i : i + 4, 0], rtol=1e-6)
  data = offline_data.make_offline_data(train)
  state = agent.create(jax.random.key(0), 1, 1, c, obs_stats=offline_data.obs_stats(data))
  out = jax.device_get(diagnostics.make_diagnostics_fn(c, h)(state, jax.random.key(0)))
  std = float(state.obs_std[0])
  n = np.arange(1, 5)
  true_disp = h.futures[:, :, 0] - h.observations[:, :1]
  np.testing.assert_allclose(out["model_err_state"], np.sqrt((true_disp**2).mean(0)) / std, 1e-5)
  mean_disp = h.mean_displacement[:, 0]
  np.testing.assert_allclose(mean_disp, 0.5 * n, atol=0.1)  # the walk's drift
  ref = np.sqrt(((true_disp - mean_disp) ** 2).mean(0)) / std
  np.testing.assert_allclose(out["model_err_mean"], ref, rtol=1e-5)
  q = np.asarray(agent.q_values(state, jnp.asarray(h.observations), jnp.asarray(h.actions)))
  np.testing.assert_allclose(out["q_mae"], np.abs(q.mean(0) - h.mc_return).mean(), rtol=1e-5)
  assert out["model_err"].shape == (4,) and np.isfinite(out["model_err"]).all()
  row = diagnostics.summarize(out)
  assert {"model_err_n4", "model_err_state_n4", "model_err_mean_n4", "q_mae", "q_corr"} <= set(row)


def _mutated_uhm_model_loss(params, state, batch, key):
  """The UHM model loss with level n bootstrapped through level n (instead of n - 1)."""
  c = state.config
  kn, kl = jax.random.split(key)
  n = agent.model_horizons(kn, batch["rewards"].shape[0], c.k_max, c.model_base_frac)
  return agent._flow_model_loss(params, state, batch, kl, n, n == 1, n)


def _train_model_error(c, train, h, steps):
  data = offline_data.make_offline_data(train)
  state = agent.create(jax.random.key(0), 1, 1, c, obs_stats=offline_data.obs_stats(data))
  loop = runtime.Loop(num_steps=steps, log_every=steps, ckpt_every=0, progress=False, plot=False)
  update = lambda s, b, k: agent.update(s, b, k)  # noqa: E731  (a fresh trace per call)
  state, _ = runtime.train(
    state, update, loop, key=jax.random.key(1), data=data, sample_fn=agent.make_sample_fn(c)
  )
  out = jax.device_get(diagnostics.make_diagnostics_fn(c, h)(state, jax.random.key(2)))
  return out["model_err"], out["model_err_state"]


@pytest.mark.slow  # two short trainings of a tiny UHM (~1 min on 2 loaded cores)
def test_random_walk_model_beats_the_current_state_baseline_and_a_mutated_target_does_not(
  monkeypatch,
):
  rng = np.random.default_rng(2)
  train, held = _walk(40, 25, rng), _walk(8, 25, rng)
  c = _config()
  h = diagnostics.make_heldout(held, train, k_max=4, discount=0.9)
  err, base = _train_model_error(c, train, h, 800)
  assert err[3] < 0.5 * base[3], (err, base)  # n = 4
  spec = dataclasses.replace(agent.AGENT_SPECS["uhm"], model_loss=_mutated_uhm_model_loss)
  monkeypatch.setitem(agent.AGENT_SPECS, "uhm", spec)
  err_bad, base_bad = _train_model_error(c, train, h, 800)
  assert err_bad[3] >= base_bad[3], (err_bad, base_bad)


def test_moved_names_the_figures_whose_error_fell():
  first = dict(model_err_n4=1.0, model_err_state_n4=0.8, q_mae=50.0, q_base_mae=10.0)
  last = dict(model_err_n4=0.5, model_err_state_n4=0.8, q_mae=48.0, q_base_mae=10.0)
  moved = diagnostics.moved(first, last, n=4)
  assert list(moved) == ["horizon_model.png"] and moved["horizon_model.png"][1:] == (1.0, 0.5, 0.8)
  last["q_mae"] = 40.0
  assert set(diagnostics.moved(first, last, n=4)) == {"horizon_model.png", "critic.png"}
