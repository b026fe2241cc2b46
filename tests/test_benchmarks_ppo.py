"""benchmarks.ppo --peer=rejax: the functions timing rejax's PPO and jaxlab's, at toy sizes."""

import math

import pytest

from benchmarks import ppo as bench

pytestmark = pytest.mark.skipif(not bench.rejax_available(), reason="rejax not installed (bench)")


@pytest.fixture(scope="module")
def config():
  c = bench.bench_config("cartpole", 2, 8, 2 * 8 * 3)  # 3 iterations of 2 envs x 8 steps
  c.mlp.hidden = (8,)
  c.eval_envs, c.eval_steps = 4, 20
  return c


def test_rejax_and_jaxlab_runs_time_train_and_evaluate(config):
  sps, compile_s, ret, compiled = bench.rejax_run(config, "cartpole", 0)
  assert sps > 0 and compile_s > 0 and 1 <= ret <= 500
  # a second seed reuses the executable: no compile time, another policy
  sps1, compile1, _, _ = bench.rejax_run(config, "cartpole", 1, compiled)
  assert sps1 > 0 and compile1 == 0
  sps, compile_s, ret = bench.jaxlab_single_run(config, "cartpole", 0)
  assert sps > 0 and compile_s > 0 and 1 <= ret <= 20  # eval_steps bounds the return


def test_program_run_measures_the_whole_train_run(config, tmp_path):
  p = bench.program_run(config, "cartpole", 0, tmp_path / "run")
  assert p["wall"] > p["compile"] > 0 and p["sps"] > 0 and math.isfinite(p["eval"])
  assert (tmp_path / "run" / "metrics.csv").exists()


def test_done_env_merges_termination_and_truncation():
  import jax

  env, params = bench.gymnax_envs.import_gymnax().make("CartPole-v1")
  wrapped = bench._DoneEnv(env)
  obs, state = wrapped.reset(jax.random.key(0), params)
  out = wrapped.step(jax.random.key(1), state, 0, params)
  assert len(out) == 5 and out[3].dtype == bool
  assert wrapped.num_actions == env.num_actions  # everything else passes through


def test_seeds_rejax_compare_times_vmapped_and_sequential_seeds():
  from benchmarks import seeds as bench_seeds

  t = bench_seeds.rejax_compare(2, (0, 1), updates=1, reps=1)
  assert set(t) == {"compile_v", "compile_1", "run_v", "run_seq"}
  assert all(0 < v < 300 for v in t.values())
