"""UHM tests (docs/uhm.md, "Checks"): winsorized closed forms, flow UHM on a Gaussian random walk,
the batch sampler, a jitted update of every agent variant, DTD's lambda-return, config errors and
checkpoints. The tabular oracle is in test_uhm_tabular.py; value-level targets in
test_uhm_targets.py."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxlab.core import checkpoint, runtime
from jaxlab.core.errors import ConfigError
from jaxlab.core.train_state import TrainState
from jaxlab.rl import uhm
from jaxlab.rl.uhm import horizon, offline_data
from jaxlab.rl.uhm.networks import VelocityField

GAMMA, LAM, KMAX = 0.9, 0.8, 5
FAST_COMPILE = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}


# -------------------------------------------------------------- (1) nu-operator identities, float64
def test_winsorized_weights_closed_forms():
  p_H = horizon.winsorized_p_H(LAM, GAMMA, KMAX)
  nu = horizon.winsorized_nu(LAM, GAMMA, KMAX)
  xi = horizon.xi_from_nu(nu, GAMMA)
  k = np.arange(1, KMAX + 1)
  xi_closed = LAM**k * GAMMA ** (k - 1.0)
  xi_closed[-1] = 0.0
  np.testing.assert_allclose(xi, xi_closed, rtol=0, atol=1e-12)
  assert abs(p_H.sum() - 1.0) < 1e-12
  w_xi, w_nu = horizon.target_weights(nu, xi, p_H)
  c_xi, c_nu = horizon.winsorized_weights(LAM, GAMMA, KMAX)
  np.testing.assert_allclose(w_xi, c_xi, rtol=0, atol=1e-12)
  np.testing.assert_allclose(w_nu, c_nu, rtol=0, atol=1e-12)
  # Untruncated TD(lam) with p_H = Geom(1 - lam*gamma) has constant weights: the GHM variant's.
  K = 60
  lg = LAM * GAMMA
  nu_inf = (1 - LAM) * lg ** np.arange(K)
  pg = (1 - lg) * lg ** np.arange(K)
  g_xi, g_nu = horizon.target_weights(nu_inf, horizon.xi_from_nu(nu_inf, GAMMA), pg)
  np.testing.assert_allclose(g_xi, horizon.ghm_weights(LAM, GAMMA)[0], atol=1e-12)
  np.testing.assert_allclose(g_nu, horizon.ghm_weights(LAM, GAMMA)[1], atol=1e-12)
  with pytest.raises(ValueError, match="p_H"):
    horizon.target_weights(nu, xi, np.r_[p_H[:-1], 0.0])


# ----------------------------------------------------------- (3) flow UHM on a Gaussian random walk
RW_K, RW_A0, RW_STEPS = 16, 0.05, 3000
RW_SCALE = float(np.sqrt(0.4**2 / 12 + 0.01))  # std of s' - s under the data distribution


@pytest.fixture(scope="module")
def random_walk_flow():
  """TD^2-CFM on s' = s + a + 0.1 eps, data a ~ U(-0.2, 0.2), policy a' = 0.05; displacements."""
  net = VelocityField((64, 64), 1, RW_K, 16, True)
  z = jnp.zeros((1, 1))
  params = net.init(jax.random.PRNGKey(0), jnp.zeros(1), z, z, z, jnp.ones(1, jnp.int32))["params"]
  tx = optax.adam(optax.cosine_decay_schedule(1e-3, RW_STEPS, 0.1))
  B, tau = 256, 0.05

  def step(model, key):
    k1, k2, k3, k4, k5 = jax.random.split(key, 5)
    s = jax.random.uniform(k1, (B, 1), minval=-2, maxval=2)
    a = jax.random.uniform(k2, (B, 1), minval=-0.2, maxval=0.2)
    sp = s + a + 0.1 * jax.random.normal(k3, (B, 1))
    ap = jnp.full((B, 1), RW_A0)
    n = uhm.model_horizons(k4, B, RW_K, 0.25)
    d = (sp - s) / RW_SCALE

    def loss_fn(p):
      v_online = lambda t, x: model(t, x, s, a, n, params=p)
      v_target = lambda t, x: model(t, x, sp, ap, jnp.maximum(n - 1, 1), params=model.target_params)
      loss = uhm.td_flow_loss(v_online, v_target, d, d, n == 1, k5, 5, "td2_cfm")
      return loss, loss

    model, loss = model.apply_loss(loss_fn)
    return model.update_target(tau), loss

  @jax.jit
  def train(model, key):
    return jax.lax.scan(step, model, jax.random.split(key, RW_STEPS))

  model, losses = train(TrainState.create(net, params, tx, target=True), jax.random.PRNGKey(1))
  return model, np.asarray(losses)


@pytest.mark.slow  # 3000 TD^2-CFM steps (tens of CPU seconds); value-level checks run by default
@pytest.mark.parametrize("n", [1, 4, 16])
def test_flow_uhm_random_walk_moments(random_walk_flow, n):
  model, losses = random_walk_flow
  assert np.isfinite(losses).all()
  M, s0 = 4000, 1.0
  s, a, n_M = jnp.full((M, 1), s0), jnp.full((M, 1), RW_A0), jnp.full((M,), n, jnp.int32)
  v = lambda t, x: model(t, x, s, a, n_M, params=model.target_params)
  y = uhm.flow_sample(v, jax.random.normal(jax.random.PRNGKey(n), (M, 1)), 5)
  x = np.asarray(s0 + RW_SCALE * y)[:, 0]
  mean, var = s0 + n * RW_A0, 0.01 * n  # exact law N(s + n a, 0.01 n) with a held at 0.05
  assert abs(x.mean() - mean) < 0.1 * mean, (x.mean(), mean)
  assert abs(x.mean() - mean) < 0.3 * np.sqrt(var), (x.mean(), mean)
  assert abs(x.var() / var - 1) < 0.1, (x.var(), var)


def test_euler_vs_midpoint_on_exact_gaussian_field():
  """Why the default solver is midpoint: 10 Euler steps shrink a Gaussian's variance by ~24%."""
  mu, sig = 0.3, 0.65

  def exact(t, x):  # exact marginal field of the independent-coupling path N(0,1) -> N(mu, sig^2)
    tt = t[:, None]
    return mu + (x - tt * mu) * (tt * sig**2 - (1 - tt)) / ((1 - tt) ** 2 + tt**2 * sig**2)

  x0 = jax.random.normal(jax.random.PRNGKey(0), (50_000, 1))
  eu = np.asarray(uhm.flow_sample(exact, x0, 10, solver="euler"))
  mid = np.asarray(uhm.flow_sample(exact, x0, 5, solver="midpoint"))
  ref = np.asarray(mu + sig * x0)  # pushforward is affine in x0: compare samples path-wise
  assert abs(eu.std() / ref.std() - 1) > 0.1
  assert abs(mid.std() / ref.std() - 1) < 0.005
  np.testing.assert_allclose(mid, ref, atol=0.01)


# ----------------------------------------------------------------------------- offline data sampler
def _toy_dataset(N=40, O=3, A=2, traj=10, seed=0):
  rng = np.random.default_rng(seed)
  obs = rng.normal(size=(N + 1, O)).astype(np.float32)
  term = np.zeros(N)
  term[traj - 1 :: traj] = 1
  masks = np.ones(N)
  masks[3] = 0.0  # a true terminal inside the first trajectory
  return dict(
    observations=obs[:-1],
    next_observations=obs[1:],
    actions=rng.uniform(-1, 1, (N, A)).astype(np.float32),
    rewards=np.arange(N, dtype=np.float32),
    masks=masks,
    terminals=term,
  )


def test_sampler_windows_follow_trajectories():
  d = _toy_dataset()
  data = offline_data.make_offline_data(d)
  K = 4
  b = jax.jit(lambda dd, k: offline_data.sample(dd, k, batch_size=64, k_max=K))(
    data, jax.random.PRNGKey(0)
  )
  idx = np.asarray(b["rewards"]).astype(int)  # rewards are the indices
  np.testing.assert_array_equal(np.asarray(b["observations"]), d["observations"][idx])
  for row, i in enumerate(idx):
    end = (i // 10) * 10 + 9
    for k in range(K):
      j = min(i + k, end)
      assert b["window_valid"][row, k] == float(i + k <= end)
      assert b["window_rewards"][row, k] == j
      np.testing.assert_array_equal(b["window_observations"][row, k], d["next_observations"][j])
      np.testing.assert_array_equal(b["window_actions"][row, k], d["actions"][min(i + k + 1, end)])
    np.testing.assert_array_equal(b["next_actions"][row], d["actions"][min(i + 1, end)])
  with pytest.raises(ValueError, match="masks"):
    offline_data.make_offline_data({k: v for k, v in d.items() if k != "masks"})


# ------------------------------------------------------- (5) every agent variant: one jitted update
NETWORKS = ("ac", "flow", "reward")


def _tiny_config(agent):
  c = uhm.get_config()
  c.agent, c.batch_size, c.k_max, c.flow_steps = agent, 16, 3, 2
  c.actor_hidden_dims = c.value_hidden_dims = c.model_hidden_dims = (16, 16)
  c.reward_hidden_dims = (16,)
  c.horizon_emb_dim = 4
  return c


def _moved(new, old):
  return max(jax.tree.leaves(jax.tree.map(lambda x, y: float(jnp.abs(x - y).max()), new, old)))


@pytest.mark.parametrize("agent", uhm.AGENTS)
def test_update_every_agent(agent):
  d = _toy_dataset(N=60)
  data = offline_data.make_offline_data(d)
  c = _tiny_config(agent)
  state = uhm.create(jax.random.PRNGKey(0), 3, 2, c, offline_data.obs_stats(data))
  batch = jax.jit(uhm.make_sample_fn(c))(data, jax.random.PRNGKey(1))
  assert ("window_observations" in batch) == (agent == "dtd")
  key = jax.random.PRNGKey(2)
  # Unoptimised XLA compile: this checks values, not speed, and cuts compile CPU time ~2x.
  update = jax.jit(uhm.update).lower(state, batch, key).compile(FAST_COMPILE)
  new, metrics = update(state, batch, key)
  assert metrics and all(np.isfinite(float(v)) for v in metrics.values()), metrics
  has_model = agent in uhm.FLOW_AGENTS
  assert (state.flow is not None) == has_model and (state.reward is not None) == has_model
  for name in NETWORKS:
    if getattr(state, name) is not None:
      assert _moved(getattr(new, name).params, getattr(state, name).params) > 0, name
  # Update 1 is not a full one (FQL: i % actor_freq == 0): the actor and both targets stay; the
  # flow model's EMA target moves every update.
  assert _moved(new.ac.params["actor"], state.ac.params["actor"]) == 0
  assert _moved(new.ac.target_params, state.ac.target_params) == 0
  if has_model:
    assert _moved(new.flow.target_params, state.flow.target_params) > 0
  assert int(new.step) == 1
  assert ("flow_loss" in metrics) == has_model
  act = uhm.sample_actions(new, batch["observations"])
  assert act.shape == (16, 2) and float(jnp.abs(act).max()) <= 1.0


def test_config_errors_name_the_field():
  c = uhm.get_config()
  c.agent = "sac"
  with pytest.raises(ValueError, match=r"config\.agent.*uhm"):
    uhm.validate_config(c)
  c = uhm.get_config()
  c.flow_loss = "td_cfm"
  with pytest.raises(ValueError, match=r"config\.flow_loss.*td2_cfm"):
    uhm.validate_config(c)
  c = uhm.get_config()
  c.lam = 1.5
  with pytest.raises(ValueError, match=r"config\.lam"):
    uhm.validate_config(c)
  c = uhm.get_config()
  c.reward_source = "fn"
  with pytest.raises(ValueError, match="reward_fn"):
    uhm.create(jax.random.PRNGKey(0), 3, 2, c)


def test_dtd_target_is_truncated_lambda_return():
  """DTD's nu-weighted window target equals the recursive lambda-return, truncated at k_max or at
  the trajectory end (full bootstrap there) and cut by true terminals (masks)."""
  d = _toy_dataset(N=60)
  d["rewards"] = np.random.default_rng(5).normal(size=60).astype(np.float32)
  data = offline_data.make_offline_data(d)
  c = _tiny_config("dtd")
  c.k_max, c.lam, c.actor_noise, c.batch_size = 4, 0.7, 0.0, 64
  state = uhm.create(jax.random.PRNGKey(0), 3, 2, c, offline_data.obs_stats(data))
  # Sample a batch with indices recoverable from the observations.
  key = jax.random.PRNGKey(3)
  batch = offline_data.sample(data, key, batch_size=64, k_max=4)
  idx = np.asarray(jax.random.randint(key, (64,), 0, 60))
  G, _ = jax.jit(uhm.value_target)(state, batch, jax.random.PRNGKey(4))
  S = d["next_observations"]
  A_ = np.asarray(uhm.policy(state, S, state.ac.target_params))
  Q = np.asarray(jnp.min(uhm.q_values(state, S, A_, state.ac.target_params), 0))
  Q = Q.astype(np.float64)
  # unset discount: validate_config gives NO_TASK_VALUES; the agent uses state.config
  r, m, g, lam = d["rewards"].astype(np.float64), d["masks"], state.config.discount, c.lam
  for row, i in enumerate(idx):
    end = (i // 10) * 10 + 9
    K = min(4, end - i + 1)  # states s_1..s_K exist: s_k = next_observations[i+k-1]
    V = Q[i + K - 1]  # full bootstrap at the last state
    for k in range(K - 1, 0, -1):  # V_k = (1-lam) Q_k + lam (r_k + gamma m_k V_{k+1})
      V = (1 - lam) * Q[i + k - 1] + lam * (r[i + k] + g * m[i + k] * V)
    ref = r[i] + g * m[i] * V
    np.testing.assert_allclose(float(G[row]), ref, rtol=1e-5, atol=1e-5)


def test_truncated_lambda_tables_match_closed_forms():
  """Row j of DTD's tables is TD(lam) fully bootstrapping at step j: nu = (1-lam)(lam g)^{k-1} for
  k < j, (lam g)^{j-1} at j; xi = lam^k g^{k-1} for k < j; both 0 after j (and rows sum like nu)."""
  nu, xi = horizon.truncated_lambda_tables(LAM, GAMMA, KMAX)
  lg = LAM * GAMMA
  for j in range(1, KMAX + 1):
    k = np.arange(1, KMAX + 1)
    nu_ref = np.where(k < j, (1 - LAM) * lg ** (k - 1.0), np.where(k == j, lg ** (j - 1.0), 0))
    xi_ref = np.where(k < j, LAM**k * GAMMA ** (k - 1.0), 0.0)
    np.testing.assert_allclose(nu[j - 1], nu_ref, rtol=0, atol=1e-12)
    np.testing.assert_allclose(xi[j - 1], xi_ref, rtol=0, atol=1e-12)
  np.testing.assert_allclose(nu[-1], horizon.winsorized_nu(LAM, GAMMA, KMAX), rtol=0, atol=1e-15)


def test_every_agent_has_one_table_row():
  assert set(uhm.AGENT_SPECS) == set(uhm.AGENTS) == {"uhm", "rebrac", "ghm", "dtd", "mbtd"}
  assert set(uhm.FLOW_AGENTS) == {"uhm", "ghm", "mbtd"}
  assert [a for a, s in uhm.AGENT_SPECS.items() if s.windows] == ["dtd"]


def test_config_errors_are_typed_and_reject_non_finite():
  c = uhm.get_config()
  c.lr = float("nan")
  with pytest.raises(ConfigError) as e:
    uhm.validate_config(c)
  assert e.value.field == "config.lr"
  c = uhm.get_config()
  c.model_hidden_dims = (16, 0)
  with pytest.raises(ConfigError) as e:
    uhm.validate_config(c)
  assert e.value.field == "config.model_hidden_dims"


@pytest.mark.parametrize("agent", ["uhm", "rebrac"])
def test_state_checkpoint_round_trip(agent, tmp_path):
  """A saved state restores into a freshly created one (rebrac has no flow/reward networks)."""
  c = _tiny_config(agent)
  state = uhm.create(jax.random.PRNGKey(0), 3, 2, c)
  mngr = checkpoint.manager(tmp_path)
  checkpoint.save(mngr, 7, state)
  mngr.close()
  like = uhm.create(jax.random.PRNGKey(1), 3, 2, c)
  restored, step = checkpoint.restore(tmp_path, like)
  assert step == 7 and (restored.flow is None) == (agent == "rebrac")
  # Leaf by leaf: the optimizers of two created states are distinct (static) closures.
  leaves, saved = jax.tree.leaves(restored), jax.tree.leaves(state)
  assert len(leaves) == len(saved)
  for x, y in zip(leaves, saved):
    np.testing.assert_array_equal(x, y)
  fresh = zip(jax.tree.leaves(like.ac.params), jax.tree.leaves(state.ac.params))
  assert not all(np.array_equal(x, y) for x, y in fresh)  # the restore did replace values
  act = uhm.sample_actions(restored, jnp.zeros((4, 3)))
  np.testing.assert_array_equal(act, uhm.sample_actions(state, jnp.zeros((4, 3))))


def test_vmapped_seeds_equal_separate_runs():
  """--seeds: seeds trained in one vmapped program (the runtime's seed axis, UHM's seed_vmap)
  equal each seed trained alone with its own keys."""
  from jaxlab.core import seeds as seeds_lib

  data = offline_data.make_offline_data(_toy_dataset(N=60))
  c = uhm.validate_config(_tiny_config("rebrac"))
  seeds = (4, 9)
  keys = seeds_lib.seed_keys(seeds)
  loop = runtime.Loop(4, log_every=2, progress=False, tensorboard=False, plot=False)
  kw = dict(data=data, sample_fn=uhm.make_sample_fn(c))
  states = uhm.create_stacked(seeds_lib.stream(keys, 0), 3, 2, c)
  states, result = runtime.train(
    states, uhm.update, loop, key=keys, seeds=seeds, seed_vmap=uhm.seed_vmap, **kw
  )
  for i in range(len(seeds)):
    alone = uhm.create(jax.random.fold_in(keys[i], 0), 3, 2, c)
    alone, solo = runtime.train(alone, uhm.update, loop, key=keys[i], **kw)
    got = jax.tree.map(lambda x: x[i], states.ac.params)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6), got, alone.ac.params)
    assert result.per_seed[seeds[i]]["train/critic_loss"] == pytest.approx(
      solo.summary["train/critic_loss"], rel=1e-5
    )
  diff = jax.tree.map(lambda a: float(jnp.abs(a[0] - a[1]).max()), states.ac.params)
  assert max(jax.tree.leaves(diff)) > 1e-3  # the seeds differ


# ------------------------------------------------------ (6) cost structure of the update (jaxprs)
def _subjaxprs(eqn):
  for v in eqn.params.values():
    for item in v if isinstance(v, (tuple, list)) else (v,):
      inner = getattr(item, "jaxpr", item)  # a ClosedJaxpr holds its jaxpr
      if hasattr(inner, "eqns"):
        yield inner


def _conds(jaxpr):
  """Every lax.cond in a jaxpr, nested ones included."""
  found = [eqn for eqn in jaxpr.eqns if eqn.primitive.name == "cond"]
  return found + [c for eqn in jaxpr.eqns for sub in _subjaxprs(eqn) for c in _conds(sub)]


def _count(jaxpr, name):
  n = sum(eqn.primitive.name == name for eqn in jaxpr.eqns)
  return n + sum(_count(sub, name) for eqn in jaxpr.eqns for sub in _subjaxprs(eqn))


@pytest.mark.parametrize("seeds", [1, 2])
def test_critic_only_steps_skip_the_actor_backward_pass(seeds):
  """As FQL (one jit per value of full_update): a critic-only update runs no actor backward pass
  and no target update; under seed_vmap the step stays a branch (not both branches + select)."""
  data = offline_data.make_offline_data(_toy_dataset(N=60))
  c = uhm.validate_config(_tiny_config("rebrac"))
  states = uhm.create_seeds(jax.random.PRNGKey(0), seeds, 3, 2, c)
  sample = uhm.make_sample_fn(c)
  if seeds > 1:
    keys = jax.random.split(jax.random.PRNGKey(2), seeds)
    step = uhm.seed_vmap(lambda st, k: uhm.update(st, sample(data, k), k))
    jaxpr = jax.make_jaxpr(step)(states, keys).jaxpr
  else:
    batch = sample(data, jax.random.PRNGKey(1))
    jaxpr = jax.make_jaxpr(uhm.update)(states, batch, jax.random.PRNGKey(2)).jaxpr
  conds = _conds(jaxpr)
  assert len(conds) == 1, "the actor-critic step is one lax.cond on the step"
  critic_only, full = (b.jaxpr for b in conds[0].params["branches"])  # index 0: predicate False
  # Full: critic and actor forward + backward; critic-only: the actor forward (its metrics) only.
  assert _count(critic_only, "dot_general") < _count(full, "dot_general")
  # Full: also the transpose of the actor's layers and the Polyak update of both targets.
  assert _count(critic_only, "dot_general") + 6 <= _count(full, "dot_general")


def _np_velocity(params, t, x, s, a, n):
  """NumPy transcription of VelocityField: Dense -> tanh-GELU -> LayerNorm on
  [x, t, sin(k pi t), cos(k pi t) (k = 1..8), s, a, embedding(n)], then a linear head."""
  p = jax.tree.map(np.asarray, params)
  k = np.arange(1, 9) * np.pi
  tf = np.concatenate([t[:, None], np.sin(t[:, None] * k), np.cos(t[:, None] * k)], -1)
  h = np.concatenate([x, tf, s, a, p["Embed_0"]["embedding"][n]], -1).astype(np.float64)
  mlp = p["MLP_0"]
  for i in range(sum(name.startswith("LayerNorm") for name in mlp)):
    h = h @ mlp[f"Dense_{i}"]["kernel"] + mlp[f"Dense_{i}"]["bias"]
    h = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h**3)))
    ln = mlp[f"LayerNorm_{i}"]
    h = (h - h.mean(-1, keepdims=True)) / np.sqrt(h.var(-1, keepdims=True) + 1e-6)
    h = h * ln["scale"] + ln["bias"]
  last = mlp[f"Dense_{i + 1}"]
  return h @ last["kernel"] + last["bias"]


def test_velocity_field_split_first_layer_is_one_dense_on_the_concatenation():
  """The conditioning's matmul is separate (XLA hoists it out of the ODE loop); the field is still
  one Dense on concat([x, t-features, s, a, emb(n)]), with the plain MLP's parameter names."""
  O, A, K, B = 3, 2, 4, 32
  net = VelocityField((16, 16), O, K, 4, True)
  rng = np.random.default_rng(0)
  t = rng.uniform(size=B).astype(np.float32)
  x, s = (rng.normal(size=(B, O)).astype(np.float32) for _ in range(2))
  a = rng.uniform(-1, 1, (B, A)).astype(np.float32)
  n = np.arange(B) % (K + 1)
  params = net.init(jax.random.PRNGKey(0), t, x, s, a, n)["params"]
  # Non-trivial biases and LayerNorm parameters, so a wrong offset or order shows.
  params = jax.tree.map(lambda v: v + 0.1 * jnp.arange(v.size).reshape(v.shape) / v.size, params)
  got = net.apply({"params": params}, t, x, s, a, n)
  np.testing.assert_allclose(got, _np_velocity(params, t, x, s, a, n), rtol=2e-5, atol=2e-5)
  assert sorted(params["MLP_0"]) == [f"Dense_{i}" for i in range(3)] + [
    f"LayerNorm_{i}" for i in range(2)
  ]
  assert params["MLP_0"]["Dense_0"]["kernel"].shape == (O + 17 + O + A + 4, 16)
