"""QRIM reconstruction: simulated Duerr-Hoyer quantum minimum finding and robust RL with it."""

import functools
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core.errors import ConfigError
from jaxlab.rl import qrim
from jaxlab.rl.qrim import robust as qrim_robust


def _dense_grover(marked: np.ndarray, k: int) -> np.ndarray:
  """Independent transcription: explicit 2^q x 2^q matrices H^q, oracle, 2|0><0| - I."""
  n = marked.size
  q = int(math.log2(n))
  h1 = np.array([[1, 1], [1, -1]]) / math.sqrt(2)
  h = functools.reduce(np.kron, [h1] * q)
  oracle = np.diag(np.where(marked, -1.0, 1.0))
  zero = np.zeros((n, n))
  zero[0, 0] = 1
  grover = h @ (2 * zero - np.eye(n)) @ h @ oracle
  psi = h @ np.eye(n)[0]
  for _ in range(k):
    psi = grover @ psi
  return psi


def test_statevector_matches_dense_matrices_and_sin2():
  rng = np.random.default_rng(0)
  for k, t in itertools.product([0, 1, 2, 5], [1, 3]):
    marked = np.zeros(16, bool)
    marked[rng.choice(16, t, replace=False)] = True
    psi = np.asarray(qrim.grover_amplitudes(jnp.asarray(marked), k))
    np.testing.assert_allclose(psi, _dense_grover(marked, k), atol=1e-5)
    p_marked = float(np.sum(psi[marked] ** 2))
    assert p_marked == pytest.approx(float(qrim.success_probability(t, 16, k)), abs=1e-5)


def test_statevector_matches_cirq():
  cirq = pytest.importorskip("cirq")
  marked = np.zeros(8, bool)
  marked[[2, 5]] = True
  qs = cirq.LineQubit.range(3)
  diffusion = -np.eye(8)
  diffusion[0, 0] = 1
  ops = [cirq.H.on_each(*qs)]
  for _ in range(2):
    ops += [cirq.MatrixGate(np.diag(np.where(marked, -1.0, 1.0))).on(*qs), cirq.H.on_each(*qs)]
    ops += [cirq.MatrixGate(diffusion).on(*qs), cirq.H.on_each(*qs)]
  state = cirq.Simulator().simulate(cirq.Circuit(ops)).final_state_vector
  psi = np.asarray(qrim.grover_amplitudes(jnp.asarray(marked), 2))
  np.testing.assert_allclose(np.abs(state) ** 2, psi**2, atol=1e-5)


def test_measurement_frequencies_follow_theory():
  marked = jnp.zeros(16, bool).at[jnp.array([1, 7, 9])].set(True)
  keys = jax.random.split(jax.random.key(0), 4000)
  sv = jax.vmap(lambda k: qrim.measure_statevector(k, marked, 2))(keys)
  an = jax.vmap(lambda k: qrim.measure_analytic(k, 3, 16, 2))(keys)
  p = float(qrim.success_probability(3, 16, 2))
  sd = math.sqrt(p * (1 - p) / 4000)
  assert abs(float(jnp.mean(marked[sv])) - p) < 4 * sd
  assert abs(float(jnp.mean(an < 3)) - p) < 4 * sd  # ranks 0..t-1 are the marked states


def _search(**kw):
  """The library's search defaults (``qrim.get_config()``) with ``kw`` changed."""
  return qrim.SearchConfig.from_config(qrim.get_config(), **kw)


def _perms(n, trials, length, seed):
  rng = np.random.default_rng(seed)
  f = np.full((trials, length), np.inf, np.float32)
  for i in range(trials):
    f[i, :n] = rng.permutation(n)
  return jnp.asarray(f)


def _run(config, f, seed=0):
  mini = jax.jit(jax.vmap(qrim.make_minimizer(config)))
  idx, info = mini(f, jax.random.split(jax.random.key(seed), f.shape[0]))
  found = np.asarray(jnp.take_along_axis(f, idx[:, None], 1)[:, 0] == 0)
  return found, {k: np.asarray(v, float) for k, v in info.items()}


def test_query_slope_is_half():
  sizes = [2**e for e in range(4, 15, 2)]
  trials = 48
  f = jnp.concatenate([_perms(n, trials, 2**14, i) for i, n in enumerate(sizes)])
  found, info = _run(_search(), f)
  assert found.mean() >= 0.99
  queries = info["queries"].reshape(len(sizes), trials).mean(1)
  slope = qrim.fit_slope(sizes, queries)
  assert 0.45 <= slope <= 0.55, (slope, queries)
  assert queries[-1] < 0.1 * sizes[-1]  # far below the exhaustive n queries


def test_modes_agree():
  f = _perms(64, 120, 64, 1)
  found_sv, sv = _run(_search(mode="statevector"), f)
  found_an, an = _run(_search(mode="analytic"), f, seed=1)
  assert found_sv.mean() >= 0.97 and found_an.mean() >= 0.97
  se = math.sqrt((sv["queries"].var() + an["queries"].var()) / 120)
  assert abs(sv["queries"].mean() - an["queries"].mean()) < 4 * se


@pytest.mark.slow
def test_budget_rule():
  f = _perms(64, 120, 64, 1)
  found_b, b = _run(_search(stop="budget"), f)
  assert found_b.mean() >= 0.5  # Duerr-Hoyer: success probability >= 1/2 within the budget
  assert np.all(b["queries"] + b["measurements"] >= qrim.dh_budget(64))


@pytest.mark.slow
def test_noise_degrades_gracefully():
  f = _perms(256, 100, 256, 2)
  found0, q0 = _run(_search(), f)
  found1, q1 = _run(_search(noise=0.5), f)
  assert found1.mean() >= 0.85
  assert q1["measurements"].mean() > q0["measurements"].mean()


@pytest.fixture(scope="module")
def mdp():
  return qrim.random_robust_mdp(jax.random.key(3), states=5, actions=2, set_size=64)


def test_robust_vi_matches_exhaustive(mdp):
  p, r = mdp
  v_ex, q_ex, st_ex = qrim.robust_value_iteration(p, r, 0.9, 60, jax.random.key(0))
  mini = qrim.make_minimizer(_search())
  v_q, q_q, st_q = qrim.robust_value_iteration(p, r, 0.9, 60, jax.random.key(0), mini)
  np.testing.assert_allclose(np.asarray(v_q), np.asarray(v_ex), atol=1e-6)
  assert float(jnp.max(st_q["mismatch"])) == 0.0
  assert float(jnp.mean(st_ex["queries"])) == 64
  # the exhaustive backup is the robust Bellman operator: V = max_a Q, and V is (nearly) its
  # fixed point after 60 sweeps (0.9^60 ~ 2e-3)
  np.testing.assert_allclose(np.asarray(v_ex), np.asarray(q_ex.max(1)), atol=1e-6)
  inner = jnp.einsum("usat,t->sau", p, v_ex)
  np.testing.assert_allclose(np.asarray(q_ex), np.asarray(r + 0.9 * inner.min(-1)), atol=3e-3)


def test_injected_failures_show_at_their_rate(mdp):
  p, r = mdp
  mini = qrim.make_minimizer(_search(fail_rate=0.2))
  _, _, st = qrim.robust_value_iteration(p, r, 0.9, 60, jax.random.key(1), mini)
  rate = float(jnp.mean(st["mismatch"][1:]))  # sweep 0: V = 0, every u ties
  assert abs(rate - 0.2) < 4 * math.sqrt(0.2 * 0.8 / 590), rate


def test_validation_errors():
  with pytest.raises(ConfigError) as e:
    qrim.validate(_search(mode="statevector"), 2**17)
  assert e.value.field == "set_size"
  with pytest.raises(ConfigError) as e:
    qrim.validate(_search(noise=1.5), 16)
  assert e.value.field == "config.noise"
  with pytest.raises(ConfigError):
    qrim_robust.check_env("breakout-minatar")


def test_parameter_grid_changes_dynamics():
  u = qrim_robust.grid("cartpole", 16)
  held = qrim_robust.grid("cartpole", 16, held_out=True)
  assert u.shape == (16, 2) and held.shape == (9, 2)
  assert not np.any(np.all(np.isclose(held[:, None], u[None]), -1))  # held out: not in U
  env = qrim_robust.make("cartpole", u[[0, -1]])
  obs, st = env.reset(jax.random.key(0))
  st = st.replace(inner=jax.tree.map(lambda x: x[:1].repeat(2, 0), st.inner))  # same start
  for _ in range(5):
    obs, st, *_ = env.step(st, jnp.zeros(2, jnp.int32), jax.random.key(1))
  assert not np.allclose(obs[0], obs[1])  # a long heavy pole falls differently


def test_experiment_bad_input_exits_2(tmp_path):
  from programs import run_program

  for args, flag in [
    (["--env=acrobot"], "--env"),
    (["--config.mode=statevector", "--set_size=131072"], "--set_size"),
    (["--config.trials=100000000"], "--config.trials: needs about"),  # memory estimate
    (["--set_size=1000000000"], "--set_size: needs about"),
    (["--set_size=3000000000"], "--set_size: 3000000000 overflows"),  # int32
    (["--config.episodes=1000000000"], "--config.episodes: needs about"),
    (["--config.ppo.mlp.hidden=(-5,)"], "--config.ppo.mlp.hidden"),
    (["--seeds=0"], "--seeds"),
    (["--seeds=1,1"], "--seeds"),
    (["--seeds=4096", "--set_size=65536"], "--seeds: needs about"),  # every seed's evaluation
  ]:
    r = run_program("experiments.qrim", [f"--workdir={tmp_path / 'run'}", *args], tmp_path)
    _exit_2(r, flag)
  assert list(tmp_path.iterdir()) == []


def _exit_2(r, flag):
  assert r.returncode == 2, r.stderr[-2000:]
  err = [line for line in r.stderr.splitlines() if line.startswith("error:")]
  assert len(err) == 1 and err[0].startswith(f"error: {flag}"), r.stderr[-2000:]
  assert "Traceback" not in r.stderr


def test_experiment_rerun_is_safe(tmp_path):
  """A finished run re-run: its record, every file byte-identical; another seed: exit 2."""
  import json

  from programs import run_program

  wd = tmp_path / "run"
  args = [f"--workdir={wd}", "--set_size=16", "--config.max_log2=5", "--config.trials=4"]
  args += ["--config.robust_ppo=False", "--config.sweeps=3", "--config.states=4"]
  r = run_program("experiments.qrim", args, tmp_path, timeout=600)
  assert r.returncode == 0, r.stderr[-3000:]
  files = lambda: {p.name: p.read_bytes() for p in sorted(wd.iterdir()) if p.name != ".lock"}
  before = files()
  assert {"summary.json", "config.json", "queries.png"} <= set(before)
  recorded = json.loads(before["config.json"])
  assert recorded["seed"] == 0 and recorded["set_size"] == 16 and recorded["env"] == "cartpole"
  r = run_program("experiments.qrim", args, tmp_path, timeout=600)
  assert r.returncode == 0 and "nothing rewritten" in r.stdout, r.stderr[-3000:]
  assert files() == before
  for extra in ("--seed=1", "--config.trials=8"):
    r = run_program("experiments.qrim", [*args, extra], tmp_path, timeout=600)
    _exit_2(r, "--workdir")
    assert files() == before


@pytest.mark.slow
def test_experiment_runs(tmp_path):
  import json

  from programs import run_program

  args = [f"--workdir={tmp_path / 'run'}", "--set_size=16", "--steps=4", "--config.max_log2=8"]
  args += ["--config.trials=16", "--config.phases=2", "--config.episodes=1"]
  r = run_program("experiments.qrim", args, tmp_path, timeout=1200)
  assert r.returncode == 0, r.stderr[-3000:]
  s = json.loads((tmp_path / "run" / "summary.json").read_text())
  assert s["tabular_robust_vi"]["max_abs_value_error"] < 1e-5
  assert set(s["robust_ppo"]) == {"nominal", "robust"}
  assert (tmp_path / "run" / "queries.png").exists()


@pytest.mark.slow  # a minute of compiling; PPO's and R4's seed tests cover the shared path fast
def test_vmapped_seeds_equal_each_seed_alone(tmp_path):
  """--seeds: each arm's PPO for the seeds in one compiled program; seed 1 there is the run
  seed=1 alone (parts 1 and 2 and the inner minimisations run seed by seed)."""
  from jaxlab.rl.qrim import protocol

  c = qrim.get_config()
  c.max_log2, c.trials, c.sweeps, c.states, c.phases, c.episodes = 5, 4, 3, 4, 2, 1
  c.ppo.num_envs, c.ppo.num_steps, c.ppo.minibatches, c.ppo.eval_steps = 4, 8, 1, 30
  kw = dict(env="cartpole", set_size=16, updates=4)
  both = protocol.run(c, seeds=(0, 1), workdir=tmp_path / "both", **kw)
  alone = protocol.run(c, seed=1, **kw)
  mine = both["per_seed"]["1"]
  assert set(mine) == set(alone)
  for k in ("query_scaling", "slope_oracle_queries", "tabular_robust_vi", "seed"):
    assert mine[k] == alone[k], k
  for arm in ("nominal", "robust"):
    a, b = mine["robust_ppo"][arm], alone["robust_ppo"][arm]
    assert a["phase_parameters"] == b["phase_parameters"]
    np.testing.assert_allclose(a["heldout_returns"], b["heldout_returns"], rtol=1e-4)
  assert (
    mine["robust_ppo"]["robust"]["inner_oracle_queries"]
    == (alone["robust_ppo"]["robust"]["inner_oracle_queries"])
  )
  assert both["seeds"] == [0, 1] and "seed" not in both and "query_scaling" not in both
  slopes = [both["per_seed"][s]["slope_oracle_queries"] for s in ("0", "1")]
  assert both["slope_oracle_queries"] == pytest.approx(np.mean(slopes))
  assert all((tmp_path / "both" / f"seed{s}" / "queries.png").exists() for s in (0, 1))


# --- the held-out grid of the robust arms ---


def test_heldout_points_are_not_training_points():
  u = qrim_robust.grid("cartpole", 64)
  held = qrim_robust.grid("cartpole", 64, held_out=True)
  assert u.shape == (64, 2) and held.shape == (49, 2)
  assert not np.any(np.all(np.isclose(held[:, None], u[None]), -1))
  lo, hi = u.min(0), u.max(0)
  assert np.all((held > lo) & (held < hi))  # interpolation inside the training range
