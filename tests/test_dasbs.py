"""Discrete ASBS (jaxlab.sampling): exact checks on tiny lattices (docs/dasbs.md, "Checks")."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.sampling import energies, exact, losses
from jaxlab.sampling import reference as ref_lib


# ---------------------------------------------------------------------------- layer 1: exact pieces
def test_scores_match_brute_force_and_kaufman_matches_enumeration():
  key = jax.random.PRNGKey(0)
  for tgt in (energies.Lattice("ising", 3, 0.44, h=0.3), energies.Lattice("potts", 4, 1.1, q=4)):
    x = jax.random.randint(key, (5, tgt.D), 0, tgt.N)
    np.testing.assert_allclose(
      tgt.score(x), energies.brute_force_score(tgt.log_prob_unnorm, x, tgt.N), atol=1e-5
    )
  enum = exact.enumerated_observables(energies.Lattice("ising", 3, 0.4407))
  assert abs(enum["log_z"] - 9.020405) < 2e-6 and abs(enum["u_per_site"] + 1.611289) < 2e-6
  assert abs(enum["abs_m"] - 0.871087) < 2e-6 and abs(enum["m2"] - 0.809451) < 2e-6
  potts = exact.enumerated_observables(energies.Lattice("potts", 3, 1.0986, q=4))
  assert abs(potts["log_z"] - 21.688966) < 2e-6 and abs(potts["majority"] - 0.905523) < 2e-6
  # docs/dasbs.md reference table (enumeration) for Kaufman / Ferdinand–Fisher at L = 3 and 4
  for L, beta, logz, u in [(3, 0.4407, 9.020405, -1.611289), (4, 0.6, 20.056533, -1.908070)]:
    ff = exact.ising_exact_observables(L, beta)
    assert abs(ff["log_z"] - logz) < 2e-6 and abs(ff["u_per_spin"] - u) < 2e-6
  # docs/dasbs.md reference values (Ferdinand–Fisher, L = 24)
  ff = exact.ising_exact_observables(24, 0.4407)
  assert abs(ff["f_per_spin"] + 2.112153) < 1e-6 and abs(ff["u_per_spin"] + 1.440249) < 1e-6
  with pytest.raises(ValueError, match="L must be >= 3"):
    energies.Lattice("ising", 2, 0.3)


def test_bridge_is_exact_conditional():
  """p(x_t | x0, x1) = p_{t|0}(x_t|x0) p_{1|t}(x1|x_t) / p_{1|0}(x1|x0), for both schedules."""
  with jax.enable_x64(True):
    N, D, t = 3, 2, 0.3
    st = jnp.asarray(exact.enumerate_states(N, D))
    for sched in (ref_lib.Schedule("log_linear", 1.0, 0.5), ref_lib.Schedule("const", 0.7)):
      P0t = ref_lib.transition_matrix(sched, st, 0.0, t, N)
      Pt1 = ref_lib.transition_matrix(sched, st, t, 1.0, N)
      P01 = ref_lib.transition_matrix(sched, st, 0.0, 1.0, N)
      np.testing.assert_allclose(P0t @ Pt1, P01, rtol=1e-12)
      x0 = jnp.repeat(st, 9, 0)
      x1 = jnp.tile(st, (9, 1))
      lg = ref_lib.bridge_logits(sched, x0, x1, jnp.full((81,), t), N)  # 81 x D x N
      pb = jnp.exp(lg[:, 0, st[:, 0]] + lg[:, 1, st[:, 1]])  # 81 x 9
      want = (P0t[:, None, :] * Pt1.T[None, :, :] / P01[:, :, None]).reshape(81, 9)
      np.testing.assert_allclose(pb, want, rtol=1e-12)


def test_sb_identities_z3_squared():
  """The ctrl-TM, ctrl-DM, corr-TM and corr-DM targets' conditional means under the exact SB equal
  the exact Schrödinger ratios (docs/dasbs.md, "The equations as implemented"; 9 states, uniform
  mu, random nu, gamma = 1, t = 0.4)."""
  with jax.enable_x64(True):
    N, D, S, t = 3, 2, 9, 0.4
    sched = ref_lib.Schedule("log_linear", 1.0, 0.5)
    st_np = exact.enumerate_states(N, D)
    st = jnp.asarray(st_np)
    nu = np.random.default_rng(0).random(S) + 0.05
    nu /= nu.sum()
    mu = np.full(S, 1.0 / S)
    P01 = np.asarray(ref_lib.transition_matrix(sched, st, 0.0, 1.0, N))
    Pt1 = np.asarray(ref_lib.transition_matrix(sched, st, t, 1.0, N))
    pot = exact.sinkhorn_sb(mu, nu, P01)
    np.testing.assert_allclose(pot["phi1"] * pot["hphi1"], nu, rtol=1e-12)
    nb = exact.neighbour_index(st_np, N)  # S x D x N
    ratio = lambda v: jnp.asarray(v[nb] / v[:, None, None])
    phit = Pt1 @ pot["phi1"]
    # joint weight w[i0, i1, it] = pi(x0, x1) * bridge(x_t | x0, x1)
    i0, i1, it = (
      a.ravel() for a in np.meshgrid(np.arange(S), np.arange(S), np.arange(S), indexing="ij")
    )
    x0, x1, xt = st[i0], st[i1], st[it]
    tt = jnp.full((i0.size,), t)
    lg = ref_lib.bridge_logits(sched, x0, x1, tt, N)
    pbr = jnp.exp(jnp.take_along_axis(lg, xt[..., None], -1)[..., 0].sum(-1))
    w = (pot["hphi0"][i0] * P01[i0, i1] * pot["phi1"][i1]) * pbr

    def cond_mean(vals, by):
      num = jax.ops.segment_sum(w[:, None, None] * vals, by, S)
      return num / jax.ops.segment_sum(w, by, S)[:, None, None]

    score = lambda x: (
      jnp.asarray(np.log(nu))[exact.state_index(x, N)][:, None, None] * 0
      + (
        jnp.log(jnp.asarray(nu))[jnp.asarray(nb)[exact.state_index(x, N)]]
        - jnp.log(jnp.asarray(nu))[exact.state_index(x, N)][:, None, None]
      )
    )
    log_hphi1 = lambda x: jnp.log(ratio(pot["hphi1"]))[exact.state_index(x, N)]
    log_phi0 = lambda x: jnp.log(ratio(pot["phi0"]))[exact.state_index(x, N)]
    checks = {
      "ctrl-TM": (losses.ctrl_tm_log_target(score(x1), log_hphi1(x1), x1, xt), it, ratio(phit)),
      "ctrl-DM": (losses.ctrl_dm_log_target(sched, x1, xt, tt, N), it, ratio(phit)),
      "corr-TM": (
        losses.corr_tm_log_target(jnp.zeros_like(lg), log_phi0(x0), x0, x1),
        i1,
        ratio(pot["hphi1"]),
      ),
      "corr-DM": (losses.corr_dm_log_target(sched, x1, xt, tt, N), i1, ratio(pot["hphi1"])),
    }
    for name, (lt, by, want) in checks.items():
      got = cond_mean(jnp.exp(lt), jnp.asarray(by))
      err = float(jnp.max(jnp.abs(got / want - 1)))
      assert err < 1e-10, (name, err)
    # without the Z_N shift (or with the DM exponent's sign flipped) the identities fail: the test
    # can fail
    no_shift = score(x1) - log_hphi1(x1)
    flipped = -losses.ctrl_dm_log_target(sched, x1, xt, tt, N)
    for bad in (no_shift, flipped):
      assert (
        float(jnp.max(jnp.abs(cond_mean(jnp.exp(bad), jnp.asarray(it)) / ratio(phit) - 1))) > 1e-2
      )


# ----------------------------------------------------------------------------- layer 2: MCMC
def _exact_sampler_tv(states, pmf, n, reps=4):
  rng = np.random.default_rng(0)
  tvs = [
    exact.tv_distance(
      states[rng.choice(len(pmf), n, p=pmf)], pmf, 2 if states.max() < 2 else int(states.max()) + 1
    )
    for _ in range(reps)
  ]
  return float(np.mean(tvs)), float(np.std(tvs))


@pytest.fixture(scope="module")
def ising3():
  tgt = energies.Lattice("ising", 3, 0.4407)
  states, pmf, _ = exact.exact_pmf(tgt)
  return tgt, states, pmf


@pytest.mark.parametrize("method,thin", [("sw", 3), ("metropolis", 4)])
def test_mcmc_matches_enumeration_3x3(ising3, method, thin):
  from jaxlab.sampling import mcmc

  tgt, states, pmf = ising3
  xs, es, _ = mcmc.run_chains(jax.random.PRNGKey(0), tgt, 64, 120, 30, thin, method)
  tv = exact.tv_distance(xs, pmf, 2)
  m, s = _exact_sampler_tv(states, pmf, xs.shape[0])
  assert tv < m + 5 * s + 0.01, (method, tv, m, s)
  u_exact = exact.enumerated_observables(tgt)["u_per_site"]
  assert abs(float(es.mean()) / tgt.D - u_exact) < 0.03
  # a wrong temperature is detected: the test can fail
  assert (
    exact.tv_distance(xs, exact.exact_pmf(energies.Lattice("ising", 3, 0.3))[1], 2)
    > m + 5 * s + 0.03
  )


# ----------------------------------------------------------------------------- layer 3: tau-leaping
def test_tau_leaping_tv_falls_with_steps(ising3):
  from jaxlab.sampling import sampler

  tgt, states, pmf = ising3
  sched = ref_lib.Schedule("log_linear", 1.0, 0.5)
  log_phi, info = exact.exact_sb_rates(tgt, sched)
  st = jnp.asarray(states)
  tv = {}
  for steps in (4, 16, 64):  # exact law of the tau-leaping chain: no sampling noise
    p = np.asarray(sampler.exact_tau_leap_marginal(log_phi, st, info["mu"], sched, 2, steps))
    tv[steps] = 0.5 * np.abs(p - pmf).sum()
  assert tv[4] > tv[16] > tv[64]
  assert 2.5 < tv[4] / tv[16] < 6 and 2.5 < tv[16] / tv[64] < 6, tv  # ~ 1/steps
  assert tv[64] < 0.02
  # the sampler draws from that law, and its log-RND variance shrinks with the step count
  run = jax.jit(
    lambda k, x, steps: sampler.tau_leap(k, log_phi, x, sched, 2, steps), static_argnums=2
  )
  x0 = sampler.sample_source(jax.random.PRNGKey(1), "uniform", 8000, tgt.D, 2)
  out8, out64 = run(jax.random.PRNGKey(2), x0, 8), run(jax.random.PRNGKey(3), x0, 64)
  m, s = _exact_sampler_tv(states, pmf, 8000)
  assert exact.tv_distance(out64["x1"], pmf, 2) < m + tv[64] + 5 * s
  assert float(jnp.var(out64["log_rnd"])) < 0.2 * float(jnp.var(out8["log_rnd"]))
  assert float(sampler.ess(out64["log_rnd"])) > 0.95 and float(out64["invalid_frac"]) == 0.0
  # path importance sampling gives an unbiased Z even at 8 coarse steps (metrics.is_observables)
  from jaxlab.sampling import metrics

  logz = exact.exact_pmf(tgt)[2]
  for out in (out8, out64):
    obs = metrics.is_observables(
      tgt, metrics.path_is_log_weights(tgt, sched, "uniform", out), out["x1"]
    )
    assert abs(obs["log_z_is"] - logz) < 0.03, (obs, logz)


# ----------------------------------------------------------------------------- layer 4: training
def _tabular_config():
  from jaxlab.sampling import dasbs

  c = dasbs.get_config()
  c.update(
    L=3,
    beta=0.28,
    model="tabular",
    source="uniform",
    corr_loss="tm",
    batch_size=512,
    num_repl=4,
    buffer_size=4096,
    resample_freq=20,
    sampling_steps=32,
    num_stages=8,
    ctrl_steps=1000,
    corr_steps=300,
    lr=0.005,
    knots=16,
  )
  return c


@pytest.fixture(scope="module")
def tabular_run():
  from jaxlab.sampling import dasbs

  state, _ = dasbs.train(_tabular_config(), jax.random.PRNGKey(0))
  return state


def test_tabular_3x3_ising_converges_to_exact_pmf(tabular_run):
  """End to end (tables instead of networks): tau-leaping samples of the trained controller are as
  close to the exact pmf as an exact sampler with the same sample count."""
  from jaxlab.sampling import dasbs

  _, pmf, _ = exact.exact_pmf(tabular_run.spec.target)
  states = exact.enumerate_states(2, 9)
  n = 8000
  x, log_rnd = dasbs.sample(tabular_run, jax.random.PRNGKey(1), n, steps=64)
  tv = exact.tv_distance(x, pmf, 2)
  m, s = _exact_sampler_tv(states, pmf, n)
  print(f"tabular TV {tv:.4f}; exact sampler {m:.4f} +- {s:.4f}")
  assert tv < m + 3 * s, (tv, m, s)  # within sampling noise of the exact sampler
  assert float(jnp.mean(x)) == pytest.approx(0.5, abs=0.03)  # +- symmetry (h = 0)
  # the untrained sampler (reference: uniform terminal law) is far off: the test can fail
  assert 0.5 * np.abs(pmf - 1 / 512).sum() > m + 0.3


def test_tabular_3x3_constant_source_corr_dm_learns_the_target():
  """End to end on the path of the critical / low-temperature presets: constant source (the two
  ground states), ctrl-TM, corr-DM, log-linear noise, 3x3 Ising at beta_c, tables for networks.

  Measured (seed 0, 8000 samples): TV 0.065 and |U - U_exact| 0.053 per spin (0.07 and 0.07
  without the corrector EMA); the same schedule
  without corrector steps gives TV 0.13 and 0.15, the untrained sampler (the reference from the
  ground states) TV 0.7 and 1.4, so a corrector or controller loss that stops working fails here.
  Four IPF-like stages leave a residual bias (eight halve it only slowly), hence 0.1, not the
  exact sampler's noise level."""
  from jaxlab.sampling import dasbs

  c = dasbs.get_config()
  c.update(
    L=3,
    model="tabular",
    knots=8,
    batch_size=256,
    num_repl=4,
    buffer_size=2048,
    resample_freq=10,
    sampling_steps=32,
    num_stages=4,
    ctrl_steps=300,
    corr_steps=150,
    lr=0.05,
  )
  spec = dasbs.make_spec(c)
  assert (spec.source, spec.ctrl_loss, spec.corr_loss, spec.sched.kind) == (
    "constant",
    "tm",
    "dm",
    "log_linear",
  )
  state, _ = dasbs.train(spec, jax.random.PRNGKey(0))
  tgt = spec.target
  states, pmf, _ = exact.exact_pmf(tgt)
  u_exact = exact.enumerated_observables(tgt)["u_per_site"]
  x, _ = dasbs.sample(state, jax.random.PRNGKey(1), 8000, steps=64)
  tv = exact.tv_distance(x, pmf, 2)
  err_u = abs(float(jnp.mean(tgt.energy(x))) / tgt.D - u_exact)
  print(f"constant-source tabular TV {tv:.4f}, |U - U_exact| {err_u:.4f} per spin")
  assert tv < 0.1 and err_u < 0.1, (tv, err_u)
  assert float(jnp.mean(x)) == pytest.approx(0.5, abs=0.04)  # both ground states are sources
  # the untrained sampler's terminal law (the reference from the ground states) is far off
  p_ref = np.exp(np.asarray(ref_lib.log_marginal(spec.sched, "constant", jnp.asarray(states), 2)))
  assert abs(p_ref.sum() - 1) < 1e-4
  assert 0.5 * np.abs(p_ref - pmf).sum() > 0.5


def _cpu_preset_on_tables(**overrides) -> float:
  """Signed energy error per spin (8192 samples) of `ising_critical_cpu` moved to 3 x 3 with
  lookup tables for networks, lr 0.05 (constant) and `overrides`; train key 0, sample key 1."""
  import pathlib
  import sys

  sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
  from experiments.configs import dasbs as presets
  from jaxlab.sampling import dasbs

  c = presets.get_config("ising_critical_cpu")
  c.update(L=3, model="tabular", knots=8, lr=0.05, lr_schedule="constant", **overrides)
  state, _ = dasbs.train(c, jax.random.PRNGKey(0))
  tgt = state.spec.target
  x, _ = dasbs.sample(state, jax.random.PRNGKey(1), 8192)
  return float(jnp.mean(tgt.energy(x))) / tgt.D - exact.enumerated_observables(tgt)["u_per_site"]


@pytest.mark.slow
def test_tabular_3x3_rao_blackwellized_corrector_shrinks_the_drift():
  """The CPU preset's path (constant source, ctrl-TM / corr-DM, gamma = 0.25, 4 -> 3 x 3, tables
  for networks, 8 stages, batch 1024 x 8 times): with corr-DM's t ~ U[0, 0.99] the samples settle
  too disordered; with t = 0 (`corr_dm_eps=1`, the bridge average of the same target: same
  minimiser, less variance) the drift shrinks. Measured through the program, seeds 0-2 (8192
  samples): +0.049, +0.064, +0.043 against +0.012, +0.028, +0.015 per spin (docs/results/dasbs/
  notes.md, "The corrector target at t = 0"). 3 min 54 s with two other runs on the 2 cores."""
  kw = dict(batch_size=1024, buffer_size=8192, num_repl=8, num_stages=8, ctrl_steps=300)
  kw |= dict(corr_steps=150, sampling_steps=32, path_weights="none")
  errs = {eps: _cpu_preset_on_tables(corr_dm_eps=eps, **kw) for eps in (0.01, 1.0)}
  print(f"signed err_u: t ~ U[0, 0.99] {errs[0.01]:+.4f}, t = 0 {errs[1.0]:+.4f}")
  assert errs[0.01] > 0.03, errs  # the drift into disorder is there (standard error 0.006)
  assert abs(errs[1.0]) < errs[0.01] - 0.02, errs


def test_target_path_weights_remove_the_fixed_point_lag():
  """Controller-only training against the exact corrector (3 x 3 tables, gamma = 0.25, 2 x 60
  steps): on the sampler's own pairs the regression is a fixed-point iteration that approaches
  the SB from the disordered side (+0.17, +0.14 per spin on seeds 0, 1); with the 'target' path
  weights it regresses on the SB's coupling and lands on it (+0.013, +0.000; docs/results/dasbs/
  notes.md). About 8 s per run."""
  kw = dict(batch_size=256, buffer_size=1024, num_repl=4, num_stages=2, ctrl_steps=60)
  kw |= dict(corr_steps=0, exact_corrector=True, sampling_steps=16)
  errs = {w: _cpu_preset_on_tables(path_weights=w, **kw) for w in ("none", "target")}
  print(f"signed err_u: unweighted {errs['none']:+.4f}, target weights {errs['target']:+.4f}")
  assert errs["none"] > 0.08, errs
  assert abs(errs["target"]) < 0.04, errs


def _tiny_config(**kw):
  from jaxlab.sampling import dasbs

  c = dasbs.get_config()
  c.update(
    L=3,
    beta=0.44,
    model="tabular",
    knots=2,
    batch_size=16,
    num_repl=2,
    buffer_size=32,
    resample_freq=3,
    sampling_steps=4,
    num_stages=1,
    ctrl_steps=4,
    corr_steps=2,
  )
  c.update(**kw)
  return c


@pytest.fixture(scope="module")
def tiny_run():
  from jaxlab.sampling import dasbs

  return dasbs.train(_tiny_config(), jax.random.PRNGKey(3))


def _assert_same_state(a, b, **tol):
  for x, y in zip(
    jax.tree.leaves((a.ctrl.params, a.ctrl.target_params, a.corr.params, a.buf_x1, a.step)),
    jax.tree.leaves((b.ctrl.params, b.ctrl.target_params, b.corr.params, b.buf_x1, b.step)),
  ):
    if tol:
      np.testing.assert_allclose(np.asarray(x), np.asarray(y), **tol)
    else:
      np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_training_keys_and_runtime_paths_agree(tiny_run, tmp_path):
  """Step i uses fold_in(k_run, i) (k_init, k_run = split(key)), as a hand-written scan over
  `update` would; the in-memory run and a chunked run with a workdir give the same state and
  per-step history; the per-phase loss curves hide the inactive phase instead of showing 0."""
  from jaxlab.sampling import dasbs

  one, result = tiny_run
  spec = one.spec
  k_init, k_run = jax.random.split(jax.random.PRNGKey(3))
  update = dasbs.make_update(spec)

  def body(st, i):
    _, k_u = jax.random.split(jax.random.fold_in(k_run, i))
    return update(st, None, k_u)

  manual, per_step = jax.jit(lambda st: jax.lax.scan(body, st, jnp.arange(6)))(
    dasbs.init_state(spec, k_init)
  )
  _assert_same_state(one, manual)
  assert result.summary["step"] == 6 and not (tmp_path / "run").exists()

  loop = dasbs.default_loop(spec, log_every=3, ckpt_every=3, history=True, tensorboard=False)
  on_disk, res = dasbs.train(spec, jax.random.PRNGKey(3), workdir=tmp_path / "run", loop=loop)
  _assert_same_state(one, on_disk)
  np.testing.assert_allclose(res.history["loss"], per_step["loss"], rtol=1e-6)
  np.testing.assert_array_equal(res.history["phase"], [0, 0, 0, 0, 1, 1])
  curves = dasbs.loss_by_phase(res.history)
  assert np.isnan(curves["ctrl_loss"][4:]).all() and np.isfinite(curves["ctrl_loss"][:4]).all()
  assert np.isnan(curves["corr_loss"][:4]).all() and (curves["corr_loss"][4:] > 0).all()
  assert (tmp_path / "run" / "metrics.csv").exists()


def test_vmapped_seeds_equal_each_seed_alone(tmp_path):
  """--seeds: seeds train in one compiled program (the step unbatched, so the phase and refill
  conds stay branches); seed 4 there equals the run of seed 4 alone through training, the
  per-stage check and the final report against its own MCMC reference."""
  from jaxlab.core import seeds as seeds_lib
  from jaxlab.sampling import dasbs, evaluation

  c = _tiny_config(num_stages=2)
  ev = evaluation.get_config()
  ev.update(eval_samples=64, stage_eval_samples=32, mcmc_chains=4, mcmc_samples=4)
  ev.update(mcmc_burn_in=5, mcmc_thin=1)
  spec = dasbs.make_spec(c)
  loop = dasbs.default_loop(spec, log_every=3, eval_every=6, history=True)
  quiet = lambda line: None
  both, vmapped = evaluation.train_and_report(
    c, ev, None, workdir=tmp_path / "v", loop=loop, seeds=(1, 4), log=quiet
  )
  key = jax.random.key_data(jax.random.key(4))  # what the program run with --seed=4 starts from
  alone, solo = evaluation.train_and_report(
    c, ev, key, workdir=tmp_path / "s", loop=loop, log=quiet
  )
  _assert_same_state(seeds_lib.take(both, 1), alone, rtol=1e-5, atol=1e-6)
  assert not np.allclose(both.ctrl.params["table"][0], both.ctrl.params["table"][1])
  mine = vmapped["per_seed"]["4"]
  for k in ("train/loss", "eval/stage_u_per_spin", "eval/energy_w2", "eval/abs_err_u_per_spin"):
    assert mine[k] == pytest.approx(solo[k], rel=1e-5, abs=1e-6), k
  assert mine["stage_err_u_signed"] == pytest.approx(solo["stage_err_u_signed"], abs=1e-6)
  assert len(mine["stage_err_u_signed"]) == 2 and vmapped["seeds"] == [1, 4]
  mean = (vmapped["per_seed"]["1"]["eval/energy_w2"] + mine["eval/energy_w2"]) / 2
  assert vmapped["eval/energy_w2"] == pytest.approx(mean)


def test_data_parallel_training_equals_single_device(tiny_run):
  """The same schedule on mesh data:8 (batch sharded) and on one device gives the same state."""
  from jaxlab.core import mesh as mesh_lib
  from jaxlab.sampling import dasbs

  c = _tiny_config()
  one, _ = tiny_run
  mesh = mesh_lib.make_mesh({"data": 8})
  many, _ = dasbs.train(c, jax.random.PRNGKey(3), mesh=mesh)
  _assert_same_state(one, many, rtol=2e-4, atol=2e-5)
  moved = jax.tree.leaves(jax.tree.map(lambda p: float(jnp.abs(p).max()), one.corr.params))
  assert max(moved) > 0 and int(many.step) == 6


def test_data_parallel_training_with_path_weights_equals_single_device():
  """The weighted losses (softmax over the drawn pairs, which the mesh splits) on data:8 and on
  one device give the same state; the weights are not all equal."""
  from jaxlab.core import mesh as mesh_lib
  from jaxlab.sampling import dasbs

  c = _tiny_config(path_weights="target")
  one, _ = dasbs.train(c, jax.random.PRNGKey(3))
  assert float(jnp.std(one.buf_logw[: int(one.buf_count)])) > 0.1
  many, _ = dasbs.train(c, jax.random.PRNGKey(3), mesh=mesh_lib.make_mesh({"data": 8}))
  _assert_same_state(one, many, rtol=2e-4, atol=2e-5)
  plain, _ = dasbs.train(_tiny_config(), jax.random.PRNGKey(3))
  assert not np.allclose(
    np.asarray(plain.ctrl.params["table"]), np.asarray(one.ctrl.params["table"])
  )


def test_ropesit_starts_at_reference_and_gets_gradients():
  """The transformer controller outputs log phi = 0 (the reference) at init and 0 on the diagonal
  always; the ctrl-TM loss gives it a nonzero gradient; bad configs are rejected by name."""
  from jaxlab.sampling import dasbs

  c = dasbs.get_config()
  c.update(target="potts", L=4, beta=1.0, q=3, hidden=8, depth=1, heads=2)
  spec = dasbs.make_spec(c)
  ctrl, _ = dasbs.make_models(spec)
  x = jax.random.randint(jax.random.PRNGKey(1), (3, 16), 0, 3)
  t = jnp.full((3,), 0.3)

  @jax.jit  # one compile for init, forward and one SGD step
  def run(key):
    p = ctrl.init(key, x, t)
    target = losses.ctrl_tm_log_target(spec.target.score(x), jnp.zeros((3, 16, 3)), x, x)
    g = jax.grad(lambda p: losses.masked_loss(target, ctrl.apply(p, x, t), x))(p)
    p2 = jax.tree.map(lambda a, b: a - 0.1 * b, p, g)
    return ctrl.apply(p, x, t), ctrl.apply(p2, x, t)

  out0, out = run(jax.random.PRNGKey(0))
  assert float(jnp.abs(out0).max()) == 0.0
  assert float(jnp.abs(out).max()) > 0
  assert float(jnp.abs(jnp.where(x[..., None] == jnp.arange(3), out, 0.0)).max()) == 0.0
  from jaxlab.core.errors import ConfigError

  c.update(corr_loss="tm", source="constant")
  with pytest.raises(ConfigError) as e:
    dasbs.make_spec(c)
  assert e.value.field == "config.corr_loss"


def test_python_usage_snippet():
  """The README's "Use from Python" snippet for DASBS: train on a 3x3 lattice, sample, score."""
  import jax

  from jaxlab.sampling import dasbs, exact

  config = dasbs.get_config()  # Ising at beta_c, constant source, ctrl-TM / corr-DM
  config.update(
    L=3,
    model="tabular",
    knots=4,
    lr=0.1,
    batch_size=256,
    buffer_size=1024,
    sampling_steps=64,
    num_stages=2,
    ctrl_steps=300,
    corr_steps=100,
  )
  state, result = dasbs.train(config, jax.random.key(0))  # in memory; see result.summary
  x, log_rnd = dasbs.sample(state, jax.random.key(1), 4096)  # x: int32[4096, 9] in {0, 1}
  target = state.spec.target  # energies.Lattice: energy(x), score(x), magnetisation(x)
  u_model = float(target.energy(x).mean()) / target.D
  u_exact = exact.ising_exact_observables(target.L, target.beta)["u_per_spin"]
  print(f"U per spin: model {u_model:.3f}, exact {u_exact:.3f}")  # about -1.59 vs -1.611

  assert x.shape == (4096, 9) and log_rnd.shape == (4096,)
  assert abs(u_model - u_exact) < 0.06, (u_model, u_exact)
  # the untrained sampler is far off (the reference keeps half the sites of its constant start)
  x0, _ = dasbs.sample(dasbs.init_state(config, jax.random.key(0)), jax.random.key(1), 4096)
  assert abs(float(target.energy(x0).mean()) / target.D - u_exact) > 0.5
