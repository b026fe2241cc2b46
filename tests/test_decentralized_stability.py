"""Exact linear analysis of full-gradient decentralized SGD on least squares
(jaxlab.optim.decentralized.stability): stability limits that the simulator obeys, the
constant-step fixed point and its γ → 0 limit, and the sweep's identical-cell rule."""

import jax
import numpy as np
import pytest

from jaxlab.optim import decentralized as dec
from jaxlab.optim.decentralized import compare, stability


@pytest.fixture(scope="module")
def setup():
  g = dec.make_graph("barabasi_albert", 6, seed=0)
  prob = dec.least_squares(6, d=3, m=8, seed=1, batch_size=0)
  lam = dec.make_lambda("dirichlet", g, alpha=2.0, seed=0)
  return g, prob, lam


def test_quadratic_parts_are_the_gradients(setup):
  g, prob, lam = setup
  h, c = stability.quadratic_parts(prob)
  x = np.random.default_rng(0).normal(size=(6, 3))
  grads = dec.node_grads(prob, x.astype(np.float32), jax.random.key(0))
  np.testing.assert_allclose(np.asarray(grads), np.einsum("nde,ne->nd", h, x) - c, rtol=1e-4)
  # x* solves Σ λ_i ∇f_i = 0 and attains f*
  xs = stability.minimizer(prob, lam)
  np.testing.assert_allclose(lam @ (np.einsum("nde,e->nd", h, xs) - c), 0, atol=1e-10)
  f = float(prob.global_loss(xs.astype(np.float32), lam))
  assert f == pytest.approx(prob.f_star(lam), rel=1e-4)


@pytest.mark.parametrize("strategy", ["I", "II"])
def test_the_simulator_is_stable_below_the_limit_and_diverges_above(setup, strategy):
  g, prob, lam = setup
  lim = stability.largest_stable_lr(strategy, g, lam, prob)
  rho = lambda gamma: stability.spectral_radius(strategy, g, lam, prob, gamma)
  assert rho(0.99 * lim) < 1 < rho(1.02 * lim)
  below = dec.run(strategy, g, lam, prob, 3000, 0.9 * lim, key=jax.random.key(0))
  above = dec.run(strategy, g, lam, prob, 3000, 1.2 * lim, key=jax.random.key(0))
  assert below.diverged_at is None and abs(below.gap[-1] - below.gap[-200]) < 1e-4 * below.gap[0]
  assert above.diverged_at is not None or above.gap[-1] > 1e3 * above.gap[0]


@pytest.mark.parametrize("strategy", ["I", "II"])
def test_fixed_point_is_where_the_simulator_stops(setup, strategy):
  g, prob, lam = setup
  gamma = 0.5 * stability.largest_stable_lr(strategy, g, lam, prob)
  x = np.asarray(dec.run(strategy, g, lam, prob, 4000, gamma, key=jax.random.key(0)).x)
  fixed = stability.fixed_point(strategy, g, lam, prob, gamma)
  np.testing.assert_allclose(x, fixed, atol=2e-4 * np.abs(fixed).max())


@pytest.mark.parametrize("order", ["atc", "cta"])
def test_strategy_II_fixed_point_approaches_the_weighted_minimizer_as_gamma_vanishes(setup, order):
  """γ → 0: every node of (II)'s fixed point tends to x* = argmin Σ λ_i f_i, with an O(γ) bias;
  at a finite γ the bias is visible (the test can fail)."""
  g, prob, lam = setup
  xs = stability.minimizer(prob, lam)
  lim = stability.largest_stable_lr("II", g, lam, prob, order=order)
  errs = []
  for frac in (1e-1, 1e-2, 1e-3, 1e-4):
    fixed = stability.fixed_point("II", g, lam, prob, frac * lim, order=order)
    errs.append(np.abs(fixed - xs[None]).max())
  errs = np.array(errs)
  assert errs[0] > 1e-3 * np.abs(xs).max()  # a real constant-step bias
  np.testing.assert_allclose(errs[:-1] / errs[1:], 10.0, rtol=0.2)  # O(γ)
  assert errs[-1] < 1e-3 * np.abs(xs).max()


def test_identical_cells_are_uniform_lambda_with_A_equal_W():
  ring, star = dec.ring(6), dec.star(6)
  assert compare.identical_cell(ring, dec.make_lambda("uniform", ring))
  assert compare.identical_cell(ring, dec.make_lambda("degree", ring))  # regular: uniform λ
  assert compare.identical_cell(star, dec.make_lambda("uniform", star))
  assert not compare.identical_cell(star, dec.make_lambda("degree", star))
  assert not compare.identical_cell(ring, dec.make_lambda("dirichlet", ring, alpha=1.0))
  for topo in dec.IRREGULAR:
    g = dec.make_graph(topo, 16, seed=0)
    assert len(set(g.degrees.tolist())) > 1, topo
    assert not compare.identical_cell(g, dec.make_lambda("degree", g)), topo


def test_rate_rows_report_steps_limits_and_gaps(setup):
  g, prob, lam = setup
  comp = compare.compare(g, lam, prob, 120, key=jax.random.key(0), lr_policy="own")
  rows = compare.rate_rows(comp, "own", tail=0.1)
  assert [r["strategy"] for r in rows] == ["I", "II"] and np.isnan(comp.lr)
  for r in rows:
    assert r["lr"] == pytest.approx(0.5 * r["lr_max"]) and 0 < r["rho"] < 1
    assert r["gap@10"] > 0 and r["gap@100"] > 0 and r["gap@1000"] == "n/a"
    assert r["gap@100"] == pytest.approx(float(comp.results[r["strategy"]].gap[99]))
  same = compare.compare(g, lam, prob, 20, key=jax.random.key(0), lr=1e9)
  assert compare.gap_at(same.results["I"], 20) == "diverged"
  assert compare.rate_rows(same, "x", tail=0.1)[0]["gap_tail"] == "diverged"
