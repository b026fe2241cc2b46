"""jaxlab.rl.uhm.diagnostics: the held-out batch, the Monte-Carlo returns, the baselines, and (on a
known random walk) that the horizon-model error falls below the current-state baseline after
training while a mutated model target (level n bootstrapped through n) does not."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core import runtime
from jaxlab.rl.uhm import agent, critic_eval, diagnostics, offline_data


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


# ------------------------------------------------- the critic against the actor's own returns


def _return_to_go_reference(r, gamma):
  """Forward sums G_t = sum_{k=t}^{T-1} gamma^(k-t) r_k."""
  return np.array([sum(gamma ** (k - t) * r[k] for k in range(t, len(r))) for t in range(len(r))])


@pytest.mark.parametrize("gamma, tail", [(0.9, 0.1), (0.5, 0.25), (0.8, 1e-2)])
def test_returns_to_go_and_scored_steps_match_a_forward_loop(gamma, tail):
  rng = np.random.default_rng(3)
  r = rng.normal(size=30)
  np.testing.assert_allclose(
    critic_eval.returns_to_go(r, gamma), _return_to_go_reference(r, gamma), rtol=1e-12, atol=1e-12
  )
  for T in (1, 5, 30):
    every = critic_eval.scored_steps(T, True, gamma, tail)
    np.testing.assert_array_equal(every, np.arange(T))
    # truncated at T: the unsummed tail of G_t is gamma^(T - t) V(s_T)
    kept = critic_eval.scored_steps(T, False, gamma, tail)
    np.testing.assert_array_equal(kept, [t for t in range(T) if gamma ** (T - t) <= tail])


def _episodes(gamma, rng):
  """Three episodes (two truncated, one terminated) whose observation column 0 is G^pi_t, so a
  critic reading that column is exact."""
  eps = []
  for T, terminated in ((12, False), (4, True), (2, False)):
    r = rng.uniform(-1, 0, size=T)
    obs = np.stack([_return_to_go_reference(r, gamma), rng.normal(size=T)], 1)
    eps.append(dict(observations=obs.astype(np.float32), rewards=r, terminated=terminated))
  return eps


def test_qpi_of_an_exact_and_a_shifted_critic():
  gamma, tail = 0.5, 1e-2  # H = 7: the 12-step episode keeps t = 0..5, the 2-step one none
  eps = _episodes(gamma, np.random.default_rng(4))
  obs, G = critic_eval.targets(eps, gamma, tail)
  assert len(G) == 6 + 4
  np.testing.assert_allclose(obs[:, 0], G, rtol=1e-6)
  exact = critic_eval.critic_vs_returns(None, eps, gamma, tail, q_fn=lambda s, o: o[:, 0])
  assert exact["qpi_n"] == 10 and exact["qpi_mae"] < 1e-6 and abs(exact["qpi_bias"]) < 1e-6
  assert exact["qpi_corr"] == pytest.approx(1.0, abs=1e-6)
  assert exact["qpi_base_mae"] == pytest.approx(np.mean(np.abs(G - G.mean())), rel=1e-12)
  shifted = critic_eval.critic_vs_returns(None, eps, gamma, tail, q_fn=lambda s, o: o[:, 0] + 0.7)
  assert shifted["qpi_bias"] == pytest.approx(0.7, abs=1e-6)
  assert shifted["qpi_mae"] == pytest.approx(0.7, abs=1e-6)
  assert shifted["qpi_base_mae"] == exact["qpi_base_mae"]
  none = critic_eval.critic_vs_returns(None, eps[2:], gamma, tail, q_fn=lambda s, o: o[:, 0])
  assert none["qpi_n"] == 0 and all(np.isnan(none[k]) for k in critic_eval.COLUMNS[:-1])


def test_q_at_actor_is_the_ensemble_min_at_the_actor_action_in_padded_chunks():
  c = _config(agent="rebrac")
  state = agent.create(jax.random.key(0), 3, 2, c)
  obs = np.random.default_rng(5).normal(size=(7, 3)).astype(np.float32)
  q = critic_eval.q_at_actor(state, obs, chunk=3)
  o = jnp.asarray(obs)
  ref = np.asarray(agent.q_values(state, o, agent.policy(state, o))).min(0)
  np.testing.assert_allclose(q, ref, rtol=1e-5, atol=1e-6)


def test_eval_rows_carry_qpi_per_seed_in_the_real_env():
  """make_eval_fn on the embedded task (two stacked seeds, untrained): each seed's qpi_* equal
  critic_vs_returns on that seed's own episodes, and og.evaluate's default result is unchanged."""
  pytest.importorskip("ogbench")
  from jaxlab.envs import ogbench as og
  from jaxlab.rl import uhm

  c = uhm.get_config()
  c.update(agent="rebrac", batch_size=16, discount=0.5)  # H = 7 steps left to be scored
  c.actor_hidden_dims = c.value_hidden_dims = (8,)
  task = uhm.load_task(c, verbose=False)
  state = agent.create_seeds(jax.random.key(0), 2, task.obs_dim, task.act_dim, task.config)
  eval_fn = uhm.make_eval_fn(task, 2, seeds=(3, 4), max_episode_steps=10)
  row = eval_fn(state, 0)
  assert set(critic_eval.COLUMNS) <= set(row)
  assert all(np.shape(row[k]) == (2,) for k in critic_eval.COLUMNS)
  np.testing.assert_array_equal(row["qpi_n"], [8, 8])  # 2 truncated episodes x t = 0..3
  act = jax.jit(agent.sample_actions)
  for i in range(2):
    s_i = uhm.seed_slice(state, i)
    run = lambda ret, s_i=s_i: og.evaluate(  # noqa: E731
      task.env_name,
      lambda o: act(s_i, o),
      num_episodes=2,
      seed=uhm.EVAL_SEED,
      env=task.env,
      max_episode_steps=10,
      return_episodes=ret,
    )
    with_eps, plain = run(True), run(False)
    assert "episodes" not in plain and plain["return"] == with_eps["return"]
    eps = with_eps["episodes"]
    assert [len(e["rewards"]) for e in eps] == [10, 10] and not any(e["terminated"] for e in eps)
    assert sum(e["rewards"].sum() for e in eps) / 2 == pytest.approx(plain["return"])
    ref = critic_eval.critic_vs_returns(s_i, eps, 0.5)
    for k in critic_eval.COLUMNS:
      np.testing.assert_allclose(row[k][i], ref[k], rtol=1e-6)
