"""DASBS formulas checked one by one: the Girsanov term of tau-leaping against an enumeration of
every (x0, x1) pair, tau-leaping with x64 enabled, the EMA warm-up of the authors' code, corr-TM
without replicated pairs, and the order of the printed result."""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.sampling import dasbs, losses, sampler
from jaxlab.sampling import reference as ref_lib

N, D = 3, 2
SCHED = ref_lib.Schedule("log_linear", 1.0, 0.5)
ONE_LEAP = ref_lib.Schedule("log_linear", 0.4, 0.5)  # Gamma(0, 1) = 0.4 ln 3: every row valid
STATES = np.array(list(itertools.product(range(N), repeat=D)))  # index = x_0 * N + x_1
TABLE = np.random.default_rng(0).normal(scale=0.4, size=(len(STATES), D, N))  # log phi(x)_{d,n}


def _log_phi(t_B, x_BxD):
  del t_B
  return jnp.asarray(TABLE, jnp.float32)[x_BxD[:, 0] * N + x_BxD[:, 1]]


def _np_one_leap(x0, x1, gam):
  """One tau-leap over [0, 1] (Gamma = gam) from x0 to x1, written from the equations
  (docs/dasbs.md): log p_u, log p_r and the continuous-time Girsanov log dP^u/dP^r."""
  phi = np.exp(TABLE[x0[0] * N + x0[1]])
  a, b = (1 - math.exp(-gam)) / N, (1 + (N - 1) * math.exp(-gam)) / N
  lpu = lpr = 0.0
  girsanov = gam / N * D * (N - 1)
  for d in range(D):
    off = [n for n in range(N) if n != x0[d]]
    girsanov -= gam / N * sum(phi[d, n] for n in off)
    if x1[d] == x0[d]:
      lpu += math.log(1 - sum(gam / N * phi[d, n] for n in off))
      lpr += math.log(b)
    else:
      lpu += math.log(gam / N * phi[d, x1[d]])
      lpr += math.log(a)
      girsanov += math.log(phi[d, x1[d]])
  return lpu, lpr, girsanov


def test_girsanov_and_path_likelihoods_against_enumeration():
  """Every (x0, x1) pair reached by one leap gets the enumerated log p_u, log p_r and Girsanov
  term; the empirical law of x1 matches exp(log p_u) (so the sampler draws from what it scores)."""
  gam = float(ONE_LEAP.Gamma(0.0, 1.0))
  x0 = jnp.asarray(np.repeat(STATES, 2000, 0), jnp.int32)
  out = sampler.tau_leap(jax.random.PRNGKey(0), _log_phi, x0, ONE_LEAP, N, 1)
  assert float(out["invalid_frac"]) == 0.0
  x0n, x1n = np.asarray(x0), np.asarray(out["x1"])
  want = np.array([_np_one_leap(a, b, gam) for a, b in zip(x0n, x1n)])
  got = np.stack([np.asarray(out[k]) for k in ("log_p_u", "log_p_r", "log_dp_star_dp_r")], 1)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(
    np.asarray(out["log_rnd"]), want[:, 2] + want[:, 1] - want[:, 0], rtol=1e-5, atol=1e-5
  )
  for i in (0, 5):  # two starting states: empirical x1 law vs the enumerated p_u
    rows = x1n[i * 2000 : (i + 1) * 2000]
    emp = np.bincount(rows[:, 0] * N + rows[:, 1], minlength=len(STATES)) / len(rows)
    p_u = np.exp([_np_one_leap(STATES[i], y, gam)[0] for y in STATES])
    assert abs(p_u.sum() - 1) < 1e-9
    assert 0.5 * np.abs(emp - p_u).sum() < 0.04


def test_tau_leap_runs_with_x64_enabled():
  x0 = jnp.zeros((8, D), jnp.int32)
  with jax.enable_x64(True):
    out = sampler.tau_leap(jax.random.PRNGKey(1), _log_phi, x0, SCHED, N, 6)
    assert out["log_rnd"].dtype == jnp.float32 and np.all(np.isfinite(out["log_rnd"]))
    assert out["x1"].shape == (8, D) and float(out["invalid_frac"]) == 0.0


def _tiny(**kw):
  c = dasbs.get_config()
  c.update(
    L=3,
    beta=0.44,
    model="tabular",
    knots=2,
    batch_size=8,
    num_repl=3,
    buffer_size=16,
    resample_freq=2,
    sampling_steps=3,
    num_stages=1,
    ctrl_steps=3,
    corr_steps=2,
  )
  c.update(**kw)
  return dasbs.make_spec(c)


def test_ema_warm_up_matches_the_authors_counter():
  """The authors' EMA increments its counter before use: update n (1, 2, ...) has decay
  min(cap, (1 + n)/(10 + n)), the first 2/11 (not 1/10)."""
  spec = _tiny()
  state = dasbs.init_state(spec, jax.random.PRNGKey(0))
  update = jax.jit(dasbs.make_update(spec))
  ema = state.ctrl.target_params
  for n in (1, 2):
    new, _ = update(state, None, jax.random.PRNGKey(n))
    decay = min(spec.ema_decay, (1 + n) / (10 + n))
    want = jax.tree.map(lambda e, p: decay * e + (1 - decay) * p, ema, new.ctrl.params)
    for a, b in zip(jax.tree.leaves(new.ctrl.target_params), jax.tree.leaves(want)):
      np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-7)
    state, ema = new, new.ctrl.target_params
  assert float(dasbs._ema_decay(spec, 1)) == pytest.approx(2 / 11)


def test_corrector_ema_as_the_authors_code():
  """The corrector has its own EMA (the authors' `ema_corrector`): its n-th update has decay
  min(cap, (1 + n)/(10 + n)), n counting corrector steps over all stages, and the corrector takes
  the EMA weights at the end of each corrector phase. `corr_ema=False` keeps the raw weights."""
  leaves = lambda t: [np.asarray(a, np.float64) for a in jax.tree.leaves(t)]

  def run(spec, check):
    update = jax.jit(dasbs.make_update(spec))
    state = dasbs.init_state(spec, jax.random.PRNGKey(0))
    for i in range(spec.total_steps):
      new, _ = update(state, None, jax.random.PRNGKey(10 + i))
      check(i % spec.phase_steps - spec.ctrl_steps, state, new)
      state = new
    return state

  n = [0]

  def check_ema(local, old, new):
    if local < 0:  # controller phase: the corrector is untouched
      for a, b in zip(leaves(new.corr.params), leaves(old.corr.params)):
        np.testing.assert_array_equal(a, b)
      return
    n[0] += 1
    decay = min(spec.ema_decay, (1 + n[0]) / (10 + n[0]))
    ema, got = leaves(old.corr.target_params), leaves(new.corr.target_params)
    if local == spec.corr_steps - 1:  # end of the phase: the corrector is its EMA
      for a, b in zip(leaves(new.corr.params), got):
        np.testing.assert_array_equal(a, b)
    else:
      for a, b, e in zip(leaves(new.corr.params), got, ema):
        np.testing.assert_allclose(b, decay * e + (1 - decay) * a, rtol=1e-5, atol=1e-7)
        assert not np.allclose(b, a)  # an average, not a copy

  spec = _tiny(num_stages=2, ctrl_steps=1, corr_steps=3)
  state = run(spec, check_ema)
  assert int(state.corr.step) == n[0] == spec.num_stages * spec.corr_steps

  def check_raw(local, old, new):
    for a, b in zip(leaves(new.corr.params), leaves(new.corr.target_params)):
      np.testing.assert_array_equal(a, b)  # no averaging: the EMA copy is the raw weights

  run(_tiny(num_stages=1, ctrl_steps=1, corr_steps=3, corr_ema=False), check_raw)


def test_corr_tm_draws_each_pair_once():
  """corr-TM has no t to draw: a batch of batch_size distinct pairs, not num_repl copies."""
  spec = _tiny(source="uniform", corr_loss="tm")
  state = dasbs.init_state(spec, jax.random.PRNGKey(0))
  state = state.replace(
    buf_x0=jnp.arange(16 * 9).reshape(16, 9) % 2,
    buf_x1=jnp.arange(16 * 9).reshape(16, 9) % 2,
    buf_count=jnp.array(16, jnp.int32),
  )
  x0, x1, _, _, _ = dasbs._draw(spec, None, state, jax.random.PRNGKey(0), 1)
  assert x0.shape == (spec.batch_size, 9)
  x0, _, _, _, _ = dasbs._draw(spec, None, state, jax.random.PRNGKey(0))
  assert x0.shape == (spec.batch_size * spec.num_repl, 9)
  # a corrector step on corr-TM runs and gives a finite loss
  _, loss = jax.jit(lambda s, k: dasbs._corr_step(spec, None, s, k))(state, jax.random.PRNGKey(2))
  assert np.isfinite(float(loss))


def test_cosine_lr_schedule_per_network():
  """lr_schedule='cosine': update k (0-based) of a network uses lr * (f + (1 - f) (1 + cos(pi k /
  K)) / 2), K = num_stages x its phase steps, f = lr_end_frac (then f lr); Adam on a constant
  gradient moves a parameter by exactly that lr, so the steps show the schedule."""
  spec = _tiny(lr=0.1, lr_schedule="cosine", lr_end_frac=0.2, num_stages=2, ctrl_steps=3)
  const = _tiny(lr=0.1, num_stages=2, ctrl_steps=3)

  def lrs(tx, n):
    p, out = jnp.zeros(()), []
    opt = tx.init(p)
    for _ in range(n):
      upd, opt = tx.update(jnp.ones(()), opt, p)
      out.append(-float(upd))
      p = p + upd
    return out

  cos = lambda k, K: 0.1 * (0.2 + 0.8 * (1 + math.cos(math.pi * min(k, K) / K)) / 2)
  for tx, K in zip(dasbs.optimizers(spec), (6, 4)):  # 2 x 3 controller, 2 x 2 corrector updates
    np.testing.assert_allclose(lrs(tx, K + 2), [cos(k, K) for k in range(K + 2)], rtol=1e-4)
  for tx in dasbs.optimizers(const):
    np.testing.assert_allclose(lrs(tx, 8), [0.1] * 8, rtol=1e-4)


def test_corr_dm_at_t0_is_the_bridge_average_of_corr_dm():
  """Rao-Blackwell identity behind `corr_dm_eps=1`: averaged over the reference bridge
  x_t ~ p(. | x0, x1), the corr-DM ratio p_{1|t}(x1^{d<-n} | x_t) / p_{1|t}(x1 | x_t) is
  p_{1|0}(x1^{d<-n} | x0) / p_{1|0}(x1 | x0), its value at t = 0, for every t: the same
  conditional mean given x1 (so the same corrector minimiser), less variance. Exact: entry (d, n)
  depends on x_t^d only, so the bridge average is a sum over x_t^d's N values."""
  with jax.enable_x64(True):
    N, D = 3, 2
    st = jnp.asarray(list(itertools.product(range(N), repeat=D)))
    x0, x1 = jnp.repeat(st, len(st), 0), jnp.tile(st, (len(st), 1))
    B = x0.shape[0]
    for sched in (ref_lib.Schedule("log_linear", 0.25, 0.5), ref_lib.Schedule("const", 0.7)):
      at0 = jnp.exp(losses.corr_dm_log_target(sched, x1, x0, jnp.zeros(B), N))
      for t in (0.2, 0.7, 0.95):
        tB = jnp.full((B,), t)
        p_BxDxN = jnp.exp(ref_lib.bridge_logits(sched, x0, x1, tB, N))
        avg = sum(
          p_BxDxN[..., v, None]
          * jnp.exp(losses.corr_dm_log_target(sched, x1, jnp.full_like(x0, v), tB, N))
          for v in range(N)
        )
        np.testing.assert_allclose(avg, at0, rtol=1e-10)
        # the identity is not vacuous: at t > 0 single bridge draws scatter around the mean
        one = jnp.exp(losses.corr_dm_log_target(sched, x1, jnp.zeros_like(x0), tB, N))
        assert float(jnp.max(jnp.abs(one - at0))) > 0.1


def _random_buffer(spec, seed: int):
  """A fresh state whose 16-pair buffer holds random Ising pairs (3 x 3)."""
  state = dasbs.init_state(spec, jax.random.PRNGKey(0))
  rng = np.random.default_rng(seed)
  return state.replace(
    buf_x0=jnp.asarray(rng.integers(0, 2, (16, 9))),
    buf_x1=jnp.asarray(rng.integers(0, 2, (16, 9))),
    buf_count=jnp.array(16, jnp.int32),
  )


def test_corr_dm_at_t0_draws_each_pair_once(monkeypatch):
  """With corr_dm_eps = 1 the corrector step regresses on the t = 0 target (x_t = x0) and draws
  batch_size distinct pairs, not num_repl identical copies."""
  spec = _tiny(corr_dm_eps=1.0)
  assert (spec.source, spec.corr_loss) == ("constant", "dm")
  state = _random_buffer(spec, 0)
  repls, draw = [], dasbs._draw
  monkeypatch.setattr(dasbs, "_draw", lambda *a: repls.append(a[-1]) or draw(*a))
  key = jax.random.PRNGKey(3)
  _, loss = dasbs._corr_step(spec, None, state, key)
  assert repls == [1]
  x0, x1, _, _, _ = draw(spec, None, state, key, 1)
  target = losses.corr_dm_log_target(spec.sched, x1, x0, jnp.zeros(x0.shape[:1]), 2)
  want = losses.masked_loss(target, state.corr(x1), x1, spec.bregman)
  np.testing.assert_allclose(float(loss), float(want), rtol=1e-6)


def test_exact_corrector_of_the_constant_source_against_transition_probabilities():
  """`exact_log_corr` (the diagnostic's closed form) against log sum_g p_{1|0}(y | g...g) from the
  reference's transition matrix, for y = x and every single-site change of x (Potts q = 3)."""
  spec = _tiny(target="potts", q=3, beta=1.0, exact_corrector=True, gamma=0.25, model="ropesit")
  N, D = 3, 9
  rng = np.random.default_rng(0)
  x_BxD = jnp.asarray(rng.integers(0, N, (4, D)))
  x_BxD = x_BxD.at[0].set(1).at[1, :7].set(2)  # a source state and one next to another
  got = np.asarray(dasbs.exact_log_corr(spec, x_BxD))
  sources = jnp.repeat(jnp.arange(N)[:, None], D, 1)
  for b in range(4):
    ys = [x_BxD[b]] + [x_BxD[b].at[d].set(n) for d in range(D) for n in range(N)]
    P = ref_lib.transition_matrix(
      spec.sched, jnp.concatenate([sources, jnp.stack(ys)]), 0.0, 1.0, N
    )
    log_phi = np.log(np.asarray(P[:N, N:]).sum(0))  # hat-phi_1 up to a constant
    want = (log_phi[1:] - log_phi[0]).reshape(D, N)
    np.testing.assert_allclose(got[b], want, atol=2e-5)


def test_exact_corrector_enters_the_controller_target():
  """With exact_corrector the ctrl-TM step regresses on S_nu - exact_log_corr, not on the network
  corrector; configs the closed form does not cover are refused, naming the field."""
  spec = _tiny(exact_corrector=True, corr_steps=0)
  state = _random_buffer(spec, 1)
  key = jax.random.PRNGKey(4)
  _, loss = dasbs._ctrl_step(spec, None, state, key)
  x0, x1, k_t, k_b, _ = dasbs._draw(spec, None, state, key)
  t = jax.random.uniform(k_t, x0.shape[:1], maxval=1.0)
  xt = ref_lib.sample_bridge(k_b, spec.sched, x0, x1, t, 2)
  target = losses.ctrl_tm_log_target(spec.target.score(x1), dasbs.exact_log_corr(spec, x1), x1, xt)
  want = losses.masked_loss(target, state.ctrl(xt, t), xt, spec.bregman)
  np.testing.assert_allclose(float(loss), float(want), rtol=1e-6)
  plain = dasbs._ctrl_step(_tiny(), None, state, key)[1]  # the zero-initialised network corrector
  assert abs(float(plain) - float(loss)) > 1e-3
  from jaxlab.core.errors import ConfigError

  with pytest.raises(ConfigError, match="config.exact_corrector"):
    _tiny(exact_corrector=True, source="uniform", corr_loss="tm")


def _np_log_marginal_constant(x_BxD, gam: float, N: int):
  """log p^r_1(x) from the N ground states, written from the per-site jump / stay probabilities."""
  a, b = (1 - math.exp(-gam)) / N, (1 + (N - 1) * math.exp(-gam)) / N
  m = np.stack([(x_BxD == g).sum(-1) for g in range(N)], -1)
  return np.log((b**m * a ** (x_BxD.shape[-1] - m)).sum(-1) / N)


@pytest.fixture(scope="module")
def weighted_paths():
  """40 000 tau-leaping paths of a random tabular controller (3 x 3 Ising, gamma = 0.25), with the
  'target' path weights."""
  spec = _tiny(path_weights="target", gamma=0.25, sampling_steps=4)
  state = dasbs.init_state(spec, jax.random.PRNGKey(0))
  table = state.ctrl.params["table"]
  rand = jax.random.normal(jax.random.PRNGKey(1), table.shape) * 0.5
  ctrl = state.ctrl.replace(params={"table": rand})
  out = jax.jit(lambda k: dasbs.simulate(spec, ctrl, ctrl.params, k, 40_000))(jax.random.PRNGKey(2))
  return spec, out, np.asarray(dasbs.path_log_weights(spec, out), np.float64)


def test_target_path_weights_against_a_transcription(weighted_paths):
  """'target': log w = -beta E(x1) - log p^r_1(x1) + log p_r - log p_u (up to a constant)."""
  spec, out, lw = weighted_paths
  x1 = np.asarray(out["x1"])
  gam = float(spec.sched.Gamma(0.0, 1.0))
  e = np.asarray(spec.target.energy(jnp.asarray(x1)), np.float64)
  want = (
    -spec.target.beta * e
    - _np_log_marginal_constant(x1, gam, 2)
    + np.asarray(out["log_p_r"])
    - np.asarray(out["log_p_u"])
  )
  np.testing.assert_allclose(lw - lw.mean(), want - want.mean(), atol=2e-4)


def test_target_path_weights_reweight_to_the_sb_coupling(weighted_paths):
  """Self-normalised with the 'target' weights, paths of any controller give the SB coupling of
  the constant source, P*(x0, x1) = nu(x1) p^r(x0 | x1): its energy and how often x0 is the
  ground state x1 leans to (enumerated); unweighted, the random controller is far from both."""
  from jaxlab.sampling import exact

  spec, out, lw = weighted_paths
  tgt = spec.target
  states, pmf, _ = exact.exact_pmf(tgt)
  gam = float(spec.sched.Gamma(0.0, 1.0))
  a, b = (1 - math.exp(-gam)) / 2, (1 + math.exp(-gam)) / 2
  m0 = (states == 0).sum(-1)
  p0 = b**m0 * a ** (9 - m0) / (b**m0 * a ** (9 - m0) + a**m0 * b ** (9 - m0))  # p^r(x0=0 | x1)
  e_states = np.asarray(tgt.energy(jnp.asarray(states)), np.float64) / 9
  f_states = (m0 / 9) * p0  # E[1{x0 = 0} * fraction of zeros in x1 | x1]
  want_u, want_f = (pmf * e_states).sum(), (pmf * f_states).sum()
  x0, x1 = np.asarray(out["x0"]), np.asarray(out["x1"])
  u = np.asarray(tgt.energy(jnp.asarray(x1)), np.float64) / 9
  f = (x0[:, 0] == 0) * (x1 == 0).mean(-1)
  w = np.exp(lw - lw.max())
  w /= w.sum()
  ess = 1 / (w**2).sum()
  assert ess > 2000, ess
  se_u, se_f = u.std() / math.sqrt(ess), f.std() / math.sqrt(ess)
  assert abs((w * u).sum() - want_u) < 4 * se_u + 1e-3, ((w * u).sum(), want_u, se_u)
  assert abs((w * f).sum() - want_f) < 4 * se_f + 1e-3, ((w * f).sum(), want_f, se_f)
  assert abs(u.mean() - want_u) > 10 * se_u  # the check is not vacuous


def test_rnd_path_weights_are_the_authors_log_dp_star_dp_u(weighted_paths):
  """'rnd' = the sampler's log-RND; in the memoryless setting log nu(x1) + log p_r - log p_u."""
  _, out, _ = weighted_paths
  spec = _tiny(path_weights="rnd")
  np.testing.assert_array_equal(dasbs.path_log_weights(spec, out), out["log_rnd"])
  spec = _tiny(path_weights="rnd", alpha=0.01, corr_steps=0)
  assert dasbs.memoryless(spec)
  want = spec.target.log_prob_unnorm(out["x1"]) + out["log_p_r"] - out["log_p_u"]
  np.testing.assert_allclose(dasbs.path_log_weights(spec, out), want, rtol=1e-6)
  assert not np.any(np.asarray(dasbs.path_log_weights(_tiny(), out)))  # 'none'


def test_path_weights_enter_both_losses():
  """Each drawn pair's loss is weighted by B * softmax(log w) over the drawn pairs, in the
  controller and the corrector step; 'target' is refused where it is not the SB's weight."""
  spec = _tiny(path_weights="target", corr_dm_eps=1.0)
  lw = jnp.asarray(np.random.default_rng(5).normal(size=16), jnp.float32)
  state = _random_buffer(spec, 2).replace(buf_logw=lw)
  key = jax.random.PRNGKey(6)
  x0, x1, k_t, k_b, w = dasbs._draw(spec, None, state, key)
  assert w.shape == (8 * 3,) and float(w.sum()) == pytest.approx(8 * 3, rel=1e-5)
  assert float(jnp.max(w) / jnp.min(w)) > 2
  t = jax.random.uniform(k_t, x0.shape[:1], maxval=1.0)
  xt = ref_lib.sample_bridge(k_b, spec.sched, x0, x1, t, 2)
  target = losses.ctrl_tm_log_target(spec.target.score(x1), state.corr(x1), x1, xt)
  want = losses.masked_loss(target, state.ctrl(xt, t), xt, spec.bregman, w)
  np.testing.assert_allclose(float(dasbs._ctrl_step(spec, None, state, key)[1]), float(want), 1e-6)
  unweighted = losses.masked_loss(target, state.ctrl(xt, t), xt, spec.bregman)
  assert abs(float(unweighted) - float(want)) > 1e-4
  x0, x1, _, _, w = dasbs._draw(spec, None, state, key, 1)
  target = losses.corr_dm_log_target(spec.sched, x1, x0, jnp.zeros(x0.shape[:1]), 2)
  want = losses.masked_loss(target, state.corr(x1), x1, spec.bregman, w)
  np.testing.assert_allclose(float(dasbs._corr_step(spec, None, state, key)[1]), float(want), 1e-6)
  from jaxlab.core.errors import ConfigError

  with pytest.raises(ConfigError, match="config.path_weights"):
    _tiny(path_weights="target", source="uniform", corr_loss="tm")
