"""benchmarks.seeds: vmapped seeds against sequential runs, timed through the runtime's chunks."""

import jax
import jax.numpy as jnp
import pytest
from programs import run_program

from benchmarks import seeds as bench
from jaxlab.core import seeds as seeds_lib


def _update(state, batch, key):
  del batch
  w = state["w"] - 0.1 * (state["w"] - jax.random.normal(key, state["w"].shape))
  return {"w": w}, {"loss": jnp.sum(w**2)}


def test_compare_times_both_sides_and_reports_the_ratios():
  keys = seeds_lib.seed_keys((0, 1, 2))
  states = seeds_lib.init(lambda k: {"w": jax.random.normal(k, (8,))}, keys)
  t = bench.compare(_update, states, keys, length=5, reps=1)
  assert set(t) == {"compile_v", "compile_1", "run_v", "run_seq"}
  assert all(0 < v < 60 for v in t.values())
  line = bench.report("toy", {"compile_v": 2, "compile_1": 1, "run_v": 1, "run_seq": 3}, 3, 10, "u")
  # 30 units in 1 s vmapped vs 3 s sequential; from nothing 3 s vs 3 x 1 + 3 = 6 s
  assert "u 30 vmapped vs 10 sequential = 3.00x" in line and "6.0 s 3 processes" in line
  assert "= 2.00x" in line


@pytest.mark.parametrize(
  "args, flag",
  [
    (["--seeds=1"], "--seeds"),
    (["--seeds=0"], "--seeds"),
    (["--num_envs=0"], "--num_envs"),
    (["--reps=0"], "--reps"),
    (["--workdir=x"], "--workdir"),
  ],
)
def test_bad_flags_exit_2_before_timing(tmp_path, args, flag):
  r = run_program("benchmarks.seeds", args, tmp_path, timeout=120)
  assert r.returncode == 2, r.stderr[-2000:]
  assert r.stderr.startswith(f"error: {flag}") and len(r.stderr.strip().splitlines()) == 1
