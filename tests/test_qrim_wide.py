"""QRIM's wide study: the force axis, the held-out set outside the grid, the exhaustive arm, the
declared tuning rule and the study's cell (library calls replaced by fakes where they train)."""

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core.errors import ConfigError
from jaxlab.rl import qrim
from jaxlab.rl.qrim import robust


def test_force_scale_multiplies_the_push():
  """From rest (upright, still), the cart's acceleration is linear in the force: scale 2 doubles
  the velocity change of one step, and the pole parameters are those of the first two axes."""
  env, base = gymnax.make("CartPole-v1")
  one = robust._params("cartpole_force", base, jnp.array([0.5, 0.1, 1.0]))
  two = robust._params("cartpole_force", base, jnp.array([0.7, 0.2, 2.0]))
  assert float(one.force_mag) == pytest.approx(10.0) and float(two.force_mag) == pytest.approx(20)
  assert float(two.polemass_length) == pytest.approx(0.14) and float(
    two.total_mass
  ) == pytest.approx(1.2)
  state = env.reset(jax.random.key(0), base)[1].replace(x=0.0, x_dot=0.0, theta=0.0, theta_dot=0.0)
  dv = []
  for p in (one, robust._params("cartpole_force", base, jnp.array([0.5, 0.1, 2.0]))):
    st = env.step_env(jax.random.key(1), state, 1, p)[1]
    dv.append(float(st.x_dot))
  assert dv[0] > 0 and dv[1] == pytest.approx(2 * dv[0], rel=1e-5)
  # the two-axis CartPole keeps gymnax's force
  assert float(robust._params("cartpole", base, jnp.array([0.5, 0.1])).force_mag) == 10.0


def test_three_axis_grid_and_the_points_outside_it():
  u = robust.grid("cartpole_force", 512)
  assert u.shape == (512, 3) and len(np.unique(u, axis=0)) == 512
  np.testing.assert_allclose(u.min(0), (0.25, 0.05, 0.5))
  np.testing.assert_allclose(u.max(0), (1.0, 0.5, 1.5))
  assert robust.grid("cartpole_force", 8, held_out=True).shape == (1, 3)
  with pytest.raises(ConfigError) as e:
    robust.grid("cartpole_force", 500)
  assert e.value.field == "set_size"
  held = robust.outside("cartpole_force", 1.5)
  assert held.shape == (26, 3) and len(np.unique(held, axis=0)) == 26
  out = (held < u.min(0) - 1e-6) | (held > u.max(0) + 1e-6)
  assert out.any(1).all()  # every point extrapolates in at least one coordinate
  assert sorted(np.bincount(out.sum(1))[1:]) == [6, 8, 12]  # faces, edges, corners
  np.testing.assert_allclose(held.min(0), (0.25 / 1.5, 0.05 / 1.5, 0.5 / 1.5), rtol=1e-6)
  np.testing.assert_allclose(held.max(0), (1.5, 0.75, 2.25), rtol=1e-6)
  with pytest.raises(ConfigError) as e:
    robust.outside("cartpole_force", 1.0)
  assert e.value.field == "factor"


@pytest.mark.slow  # ~30 s of compiling a tiny PPO
def test_exhaustive_arm_counts_u_and_matches_the_quantum_arm(tmp_path):
  """Both robust arms train on an argmin of J estimates: the simulated minimiser finds a minimum
  every time (exact fraction 1; among ties it may pick another u); exhaustive counts |U|."""
  c = qrim.get_config()
  c.phases, c.episodes = 2, 1
  c.ppo.num_envs, c.ppo.num_steps, c.ppo.minibatches, c.ppo.eval_steps = 4, 8, 1, 30
  s = qrim.search_config(c)
  held = robust.outside("cartpole_force", 1.5)
  key = jax.random.key(0)[None]
  kw = dict(held_out=held, held_episodes=2)
  q = robust.train_arm_seeds("cartpole_force", s, c, 27, 4, key, "robust", **kw)[0]
  e = robust.train_arm_seeds("cartpole_force", s, c, 27, 4, key, "exhaustive", **kw)[0]
  assert e["inner_total_queries"] == 27 and e["inner_exact_fraction"] == 1.0
  assert q["inner_exact_fraction"] == 1.0 and len(q["phase_parameters"]) == 2
  assert q["inner_total_queries"] == q["inner_oracle_queries"] + q["inner_classical_checks"]
  assert len(q["heldout_returns"]) == 26


def _tuning(nominal_means, exhaustive_worst):
  from jaxlab.studies import qrim as study

  per = {"nominal": {}, "exhaustive": {}}
  for s, means in enumerate(nominal_means):
    per["nominal"][str(s)] = {str(f): [m, 0.0] for f, m in zip(study.FACTORS, means)}
    per["exhaustive"][str(s)] = {str(f): [0.0, w] for f, w in zip(study.FACTORS, exhaustive_worst)}
  return study.choose(per)


def test_tuning_rule_picks_the_nearest_factor_below_the_ceiling_and_a_5_percent_margin():
  # nominal's seed mean: 480, 445, 300 -> the second factor is the first below 450
  got = _tuning([(490, 440, 310), (470, 450, 290)], (300.0, 200.0, 100.0))
  assert got["factor"] == 1.5 and got["margin"] == pytest.approx(10.0)
  got = _tuning([(400, 300, 200), (420, 300, 200)], (300.0, 200.0, 100.0))
  assert got["factor"] == 1.25 and got["margin"] == pytest.approx(15.0)
  got = _tuning([(500, 490, 480)], (300.0, 200.0, 100.0))  # never below: the largest
  assert got["factor"] == 2.0 and got["margin"] == pytest.approx(5.0)


def test_wide_cell_maps_arms_and_evaluates_outside_the_grid(tmp_path, monkeypatch):
  from jaxlab import studies
  from jaxlab.studies import qrim as study

  if study.WIDE_FACTOR is None:
    pytest.skip("qrim/robust_wide is not declared yet")
  calls = []

  def fake(env, search, config, set_size, updates, keys, arm, held_out=None, held_episodes=None):
    calls.append((env, set_size, updates, arm, np.asarray(held_out), held_episodes, len(keys)))
    return [{"heldout_worst_return": 1.0, "train_env_steps": updates * 2048} for _ in keys]

  monkeypatch.setattr(robust, "train_arm_seeds", fake)
  spec = studies.get("qrim/robust_wide")
  out = spec.cell("robust_quantum", (0, 1), tmp_path / "cell")
  env, size, updates, arm, held, episodes, n = calls[0]
  assert (env, size, arm, episodes, n) == ("cartpole_force", 512, "robust", 16, 2)
  assert updates == spec.budget["steps"] and out[1]["config"]["seed"] == 1
  np.testing.assert_array_equal(held, robust.outside("cartpole_force", study.WIDE_FACTOR))
  assert out[0]["config"]["factor"] == study.WIDE_FACTOR
  spec.cell("robust_exhaustive", (0,), tmp_path / "cell2")
  assert calls[1][3] == "exhaustive"
  spec.cell("robust_quantum", (0, 1), tmp_path / "cell")  # finished: nothing trains
  assert len(calls) == 2


def test_program_refuses_a_force_grid_that_is_not_a_cube(tmp_path):
  from programs import run_program

  args = ["--env=cartpole_force", "--set_size=256", f"--workdir={tmp_path / 'w'}"]
  r = run_program("experiments.qrim", args, tmp_path)
  assert r.returncode == 2 and "--set_size" in r.stderr and "cube" in r.stderr, r.stderr
  assert "Traceback" not in r.stderr and not (tmp_path / "w").exists()
  qrim.check_memory(qrim.get_config(), "cartpole_force", 512, seeds=5)  # the study's size fits
