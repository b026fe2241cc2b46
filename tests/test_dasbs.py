"""Discrete ASBS (jaxlab.sampling): exact checks on tiny lattices (brief §3.8)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.sampling import energies, exact, losses
from jaxlab.sampling import reference as ref_lib


# ----------------------------------------------------------------------------- layer 1: exact pieces
def test_scores_match_brute_force_and_kaufman_matches_enumeration():
  key = jax.random.PRNGKey(0)
  for tgt in (energies.Lattice("ising", 3, 0.44, h=0.3), energies.Lattice("potts", 4, 1.1, q=4)):
    x = jax.random.randint(key, (5, tgt.D), 0, tgt.N)
    np.testing.assert_allclose(tgt.score(x), energies.brute_force_score(tgt.log_prob_unnorm, x, tgt.N),
                               atol=1e-5)
  for L, beta, logz, u in [(3, 0.4407, 9.020405, -1.611289), (4, 0.6, 20.056533, -1.908070)]:
    enum = exact.enumerated_observables(energies.Lattice("ising", L, beta))
    ff = exact.ising_exact_observables(L, beta)
    assert abs(enum["log_z"] - logz) < 2e-6 and abs(ff["log_z"] - logz) < 2e-6
    assert abs(enum["u_per_site"] - u) < 2e-6 and abs(ff["u_per_spin"] - u) < 2e-6
  # brief §3.7 (Ferdinand–Fisher, L = 24)
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
      lg = ref_lib.bridge_logits(sched, x0, x1, jnp.full((81,), t), N)        # 81 x D x N
      pb = jnp.exp(lg[:, 0, st[:, 0]] + lg[:, 1, st[:, 1]])                  # 81 x 9
      want = (P0t[:, None, :] * Pt1.T[None, :, :] / P01[:, :, None]).reshape(81, 9)
      np.testing.assert_allclose(pb, want, rtol=1e-12)


def test_sb_identities_z3_squared():
  """The ctrl-TM, ctrl-DM, corr-TM and corr-DM targets' conditional means under the exact SB equal the
  exact Schrödinger ratios (brief §3.4, 9 states, uniform mu, random nu, gamma = 1, t = 0.4)."""
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
    nb = exact.neighbour_index(st_np, N)                                       # S x D x N
    ratio = lambda v: jnp.asarray(v[nb] / v[:, None, None])
    phit = Pt1 @ pot["phi1"]
    # joint weight w[i0, i1, it] = pi(x0, x1) * bridge(x_t | x0, x1)
    i0, i1, it = (a.ravel() for a in np.meshgrid(np.arange(S), np.arange(S), np.arange(S), indexing="ij"))
    x0, x1, xt = st[i0], st[i1], st[it]
    tt = jnp.full((i0.size,), t)
    lg = ref_lib.bridge_logits(sched, x0, x1, tt, N)
    pbr = jnp.exp(jnp.take_along_axis(lg, xt[..., None], -1)[..., 0].sum(-1))
    w = (pot["hphi0"][i0] * P01[i0, i1] * pot["phi1"][i1]) * pbr
    def cond_mean(vals, by):
      num = jax.ops.segment_sum(w[:, None, None] * vals, by, S)
      return num / jax.ops.segment_sum(w, by, S)[:, None, None]
    score = lambda x: jnp.asarray(np.log(nu))[exact.state_index(x, N)][:, None, None] * 0 + (
        jnp.log(jnp.asarray(nu))[jnp.asarray(nb)[exact.state_index(x, N)]]
        - jnp.log(jnp.asarray(nu))[exact.state_index(x, N)][:, None, None])
    log_hphi1 = lambda x: jnp.log(ratio(pot["hphi1"]))[exact.state_index(x, N)]
    log_phi0 = lambda x: jnp.log(ratio(pot["phi0"]))[exact.state_index(x, N)]
    checks = {
        "ctrl-TM": (losses.ctrl_tm_log_target(score(x1), log_hphi1(x1), x1, xt), it, ratio(phit)),
        "ctrl-DM": (losses.ctrl_dm_log_target(sched, x1, xt, tt, N), it, ratio(phit)),
        "corr-TM": (losses.corr_tm_log_target(jnp.zeros_like(lg), log_phi0(x0), x0, x1), i1,
                    ratio(pot["hphi1"])),
        "corr-DM": (losses.corr_dm_log_target(sched, x1, xt, tt, N), i1, ratio(pot["hphi1"])),
    }
    for name, (lt, by, want) in checks.items():
      got = cond_mean(jnp.exp(lt), jnp.asarray(by))
      err = float(jnp.max(jnp.abs(got / want - 1)))
      assert err < 1e-10, (name, err)
    # without the Z_N shift (or with the DM exponent's sign flipped) the identities fail: the test can fail
    no_shift = score(x1) - log_hphi1(x1)
    flipped = -losses.ctrl_dm_log_target(sched, x1, xt, tt, N)
    for bad in (no_shift, flipped):
      assert float(jnp.max(jnp.abs(cond_mean(jnp.exp(bad), jnp.asarray(it)) / ratio(phit) - 1))) > 1e-2
