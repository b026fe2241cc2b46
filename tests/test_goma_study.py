"""The study goma/unbounded (jaxlab/studies/goma.py): its noise model, its arms, its spec.

* the oracle's variance grows with ||z - z*||² under multiplicative noise and is constant under
  additive noise (the unbounded- and bounded-variance regimes the study compares);
* the ``no_anchor`` arm is GOMA's update with the anchor weight 0, nothing else changed, and that
  update is the unanchored two-time-scale Popov step (NumPy transcription);
* DSEG's stochastic EG step with the study's constants against a NumPy transcription that replays
  the same oracle noise;
* the spec validates, declares 16 comparisons, and a tiny cell returns every declared metric at the
  budget's oracle-call count.
"""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab import studies
from jaxlab.core.errors import ConfigError
from jaxlab.optim.goma import compare, problems, vi
from jaxlab.studies import goma as goma_study

N = 8  # players' size of the noise-model game
SAMPLES = 4000


def _noise_variance(oracle, z):
  """E||g(z) - F(z)||² by Monte Carlo over SAMPLES keys."""
  keys = jax.random.split(jax.random.key(3), SAMPLES)
  g = jax.vmap(lambda k: oracle(z, k))(keys)
  return float(jnp.mean(jnp.sum((g - oracle.exact(z)) ** 2, -1)))


@pytest.fixture(scope="module")
def game():
  return problems.dseg_bilinear(jax.random.key(0), N)


def test_multiplicative_variance_grows_with_the_squared_distance(game):
  """[[0, E], [-E^T, 0]] d with E ~ N(0, 1): E||noise||² = sigma_C² N ||d||² (d = z - z*)."""
  oracle = problems.stochastic(game, sigma=0.0, sigma_mult=0.5)
  z = jax.random.normal(jax.random.key(1), (2 * N,))
  v1, v3 = _noise_variance(oracle, z), _noise_variance(oracle, 3.0 * z)
  want = 0.25 * N * float(jnp.sum(z**2))
  assert v1 == pytest.approx(want, rel=0.06)
  assert v3 / v1 == pytest.approx(9.0, rel=0.06)
  assert _noise_variance(oracle, jnp.zeros(2 * N)) == 0.0  # no noise at the solution


def test_additive_variance_does_not_depend_on_z(game):
  oracle = problems.stochastic(game, sigma=0.5, sigma_mult=0.0)
  z = jax.random.normal(jax.random.key(1), (2 * N,))
  for point in (z, 10.0 * z, jnp.zeros(2 * N)):
    assert _noise_variance(oracle, point) == pytest.approx(0.25 * 2 * N, rel=0.06)


def test_the_studys_settings_add_both_variances(game):
  """noise_grid's oracle (multiplicative flag on, sigma_C traced): sigma² 2N + sigma_C² N ||d||²;
  sigma_C = 0 is the additive oracle exactly."""
  z = jax.random.normal(jax.random.key(1), (2 * N,))
  both = problems.StochasticOracle(game, jnp.float32(0.1), jnp.float32(1.0), multiplicative=True)
  want = 0.01 * 2 * N + N * float(jnp.sum(z**2))
  assert _noise_variance(both, z) == pytest.approx(want, rel=0.06)
  zero = problems.StochasticOracle(game, jnp.float32(0.5), jnp.float32(0.0), multiplicative=True)
  add = problems.stochastic(game, sigma=0.5)
  key = jax.random.key(7)
  np.testing.assert_array_equal(zero(z, key), add(z, key))


# ------------------------------------------------------------------ the arms' updates ---------

STEP = {"goma": 0.4, "dseg": 0.2, "popov_1scale": 0.2}


def test_no_anchor_is_goma_with_the_anchor_weight_zero():
  g_method, g_hp = goma_study.arm_method("goma", STEP)
  n_method, n_hp = goma_study.arm_method("no_anchor", STEP)
  assert n_method == g_method == "goma_stochastic"
  assert n_hp == {**g_hp, "anchor": 0.0}
  assert vi.default_hparams("goma_stochastic")["anchor"] == 1.0


def _affine(dim=6):
  rng = np.random.default_rng(0)
  a, b = rng.normal(size=(dim, dim)), rng.normal(size=(dim, dim))
  m = (a - a.T) + 0.3 * b @ b.T
  return m, rng.normal(size=dim), rng.normal(size=dim), float(np.linalg.norm(m, 2))


def _per_l(hp, L):
  """The study's step constants are in units of 1/L (as compare.noise_grid passes them)."""
  return {k: (v / L if k in ("eta", "gamma") else v) for k, v in hp.items()}


def test_anchor_zero_is_the_unanchored_two_time_scale_popov_step():
  """y_k = z_k - gamma_k F(y_{k-1}), z_{k+1} = z_k - eta_k F(y_k), y_{-1} = z_0 (float64);
  the anchored default differs (so the test can fail on an ignored anchor weight)."""
  m, c, z0, L = _affine()
  F = lambda z: m @ z + c  # noqa: E731
  steps, e, g = 7, 0.4 / L, 0.4 / L
  zs, y_prev = [z0], z0
  for k in range(steps):
    z = zs[-1]
    y = z - g / (k + 1) ** (1 / 3) * F(y_prev)
    zs.append(z - e / (k + 1) ** (2 / 3) * F(y))
    y_prev = y
  with jax.enable_x64(True):
    op = lambda z: jnp.asarray(m) @ z + jnp.asarray(c)  # noqa: E731
    z0j = jnp.asarray(z0, jnp.float64)
    hp = _per_l(goma_study.arm_method("no_anchor", STEP)[1], L)
    tr = vi.run("goma_stochastic", op, z0j, steps, L=L, **hp)
    anchored = vi.run("goma_stochastic", op, z0j, steps, L=L, eta=e, gamma=g)
    want = [float(np.sum(F(z) ** 2)) for z in zs]
    np.testing.assert_allclose(np.asarray(tr.residual_sq), want, rtol=1e-10)
    np.testing.assert_allclose(np.asarray(tr.z), zs[-1], rtol=1e-10)
    assert not np.allclose(np.asarray(anchored.residual_sq), want, rtol=1e-3)


def test_dseg_stochastic_step_matches_a_numpy_transcription():
  """X_{t+1/2} = X_t - gamma_t g_t(X_t), X_{t+1} = X_t - eta_t g'_t(X_{t+1/2}), gamma_t = gamma
  /(t+1)^{1/3}, eta_t = eta/(t+1)^{2/3} (Hsieh et al. 2020), with the study's constants and the
  oracle noise replayed from vi.run's keys (per iteration t: fold_in(k_steps, t), then one
  fold_in per call)."""
  m, c, z0, L = _affine()
  sigma, steps = 0.3, 6
  method, hp = goma_study.arm_method("dseg", STEP)
  with jax.enable_x64(True):
    key = jax.random.key(11)
    _, k_steps = jax.random.split(key)

    def noise(t, i):
      sub = jax.random.fold_in(jax.random.fold_in(k_steps, t), i)
      return np.asarray(jax.random.normal(sub, (len(z0),), jnp.float64))

    zs = [z0]
    for t in range(steps):
      x = zs[-1]
      gamma = STEP["dseg"] / L / (t + 1) ** (1 / 3)
      eta = STEP["dseg"] / L / (t + 1) ** (2 / 3)
      half = x - gamma * (m @ x + c + sigma * noise(t, 0))
      zs.append(x - eta * (m @ half + c + sigma * noise(t, 1)))
    mj, cj = jnp.asarray(m), jnp.asarray(c)
    oracle = lambda z, k: mj @ z + cj + sigma * jax.random.normal(k, z.shape, z.dtype)  # noqa: E731
    exact = lambda z: mj @ z + cj  # noqa: E731
    z0j = jnp.asarray(z0, jnp.float64)
    tr = vi.run(method, oracle, z0j, steps, key=key, exact=exact, L=L, **_per_l(hp, L))
    want = [float(np.sum((m @ z + c) ** 2)) for z in zs]
    np.testing.assert_allclose(np.asarray(tr.residual_sq), want, rtol=1e-10)
    np.testing.assert_allclose(np.asarray(tr.z), zs[-1], rtol=1e-10)
    assert int(tr.oracle_calls[-1]) == 2 * steps


def test_every_arm_spends_the_same_oracle_calls():
  for arm in goma_study.ARMS:
    method, _ = goma_study.arm_method(arm, STEP)
    iters = compare.oracle_budget_iters(method, 1000)
    assert iters == (500 if arm == "dseg" else 999), arm


def test_per_setting_steps_run_each_setting_with_its_own_constant():
  """noise_grid vmaps a per-setting constant with its setting: row i equals the run of setting i
  alone with constant i (goma/unbounded_tuned's arms)."""
  settings = [(0.1, 0.5, 1.0), (0.5, 0.0, 10.0)]
  both, calls = compare.noise_grid(
    "goma_stochastic", {"eta": [0.2, 0.6], "gamma": 0.4}, settings, (0,), 40, 6
  )
  for i, c in enumerate((0.2, 0.6)):
    alone, _ = compare.noise_grid(
      "goma_stochastic", {"eta": c, "gamma": 0.4}, settings[i : i + 1], (0,), 40, 6
    )
    np.testing.assert_allclose(both[i], alone[0], rtol=1e-6)
  assert not np.allclose(both[0], both[1]) and int(calls[-1]) == 40
  method, hp = goma_study.arm_method("dseg", {"dseg": dict.fromkeys(goma_study.SETTINGS, 0.1)})
  assert method == "dseg" and hp["eta"] == [0.1] * len(goma_study.SETTINGS)


# ------------------------------------------------------------------ the spec and the cell -----


@pytest.mark.parametrize("name", ["goma/unbounded", "goma/unbounded_tuned"])
def test_the_spec_validates_and_declares_its_comparisons(name):
  s = studies.get(name)
  assert s.comparisons() == (("goma", "no_anchor"), ("goma", "dseg"))
  assert len(s.tests) * len(s.comparisons()) == 16
  assert all(not t.higher_is_better and t.kind == "superiority" for t in s.tests)
  assert not set(s.seeds) & set(s.tuning_seeds) and len(s.seeds) == 10
  assert s.budget == {"oracle_calls": goma_study.CALLS}
  assert all(v is not None for v in goma_study.STEP.values()), "declared before it runs"
  for arm, per in goma_study.STEP_PER_SETTING.items():
    assert set(per) == set(goma_study.SETTINGS), arm
    assert set(per.values()) <= set(goma_study.STEP_GRID_PER_SETTING), arm
  with pytest.raises(ConfigError):
    dataclasses.replace(s, tuning_seeds=(0,))


def test_a_tiny_cell_reports_every_metric_per_seed():
  out = goma_study.summaries("no_anchor", (0, 1), calls=300, step=STEP)
  s = studies.get("goma/unbounded")
  assert set(out) == {0, 1}
  for rec in out.values():
    assert rec["oracle_calls"] == 300 and rec["config"]["hparams"]["anchor"] == 0.0
    for metric in s.metrics:
      v = rec[metric]
      assert v is None or math.isfinite(v), metric
    assert set(rec["curve"]) == {"calls", *goma_study.SETTINGS}
  dseg = goma_study.summaries("dseg", (0,), calls=300, step=STEP)[0]
  assert dseg["oracle_calls"] == 300 and dseg["config"]["iterations"] == 150


def test_the_figure_is_drawn_from_raw_files(tmp_path):
  """figure.png comes from the raw per-seed records alone (arms without records are left out)."""
  from jaxlab.studies import runner

  s = studies.get("goma/unbounded")
  out = goma_study.summaries("goma", (0, 1), calls=200, step=STEP)
  runner.write_raw(
    dataclasses.replace(s, budget={"oracle_calls": 200}), tmp_path, "goma", (0, 1), out
  )
  path = goma_study.figure(tmp_path)
  assert path == tmp_path / "figure.png" and path.stat().st_size > 10_000
