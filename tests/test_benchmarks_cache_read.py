"""benchmarks.cache_read: it loads every entry of a cache folder and counts its YNNPACK fusions."""

import subprocess
import sys

import pytest
from programs import program_env, run_program

# One program with a matmul (XLA:CPU fuses dots into YNNPACK by default) in a fresh cache folder.
FILL = """
import sys, jax, jax.numpy as jnp
jax.config.update("jax_compilation_cache_dir", sys.argv[1])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
f = jax.jit(lambda a, b: jnp.tanh(a @ b) @ b)
f(jnp.ones((8, 64)), jnp.ones((64, 64))).block_until_ready()
"""
YNN_OFF = {"XLA_FLAGS": "--xla_cpu_experimental_ynn_fusion_type="}


def _filled(tmp_path, name, env):
  cache = tmp_path / name
  subprocess.run(
    [sys.executable, "-c", FILL, str(cache)],
    env=program_env({"JAX_PLATFORMS": "cpu", **env}),
    check=True,
    timeout=120,
  )
  return cache


def _ynn(stdout):
  rows = [line.split() for line in stdout.splitlines() if line.startswith("jit_")]
  return {r[0]: (int(r[-2]), int(r[-1])) for r in rows}  # program -> (instructions, YNN)


@pytest.mark.parametrize("env, fused", [({}, True), (YNN_OFF, False)], ids=["default", "ynn_off"])
def test_it_counts_the_ynn_fusions_the_flag_turns_off(tmp_path, env, fused):
  cache = _filled(tmp_path, "xla", env)
  # without --cache it reads the programs' folder ($JAXLAB_COMPILE_CACHE, as --compile_cache)
  args, where = ([], {"JAXLAB_COMPILE_CACHE": str(cache)}) if fused else ([f"--cache={cache}"], {})
  r = run_program("benchmarks.cache_read", args, tmp_path, env=where, timeout=120)
  assert r.returncode == 0, r.stderr[-2000:]
  counts = _ynn(r.stdout)
  assert "jit__lambda" in counts, r.stdout
  instructions, ynn = counts["jit__lambda"]
  assert instructions > 0
  assert (ynn == 2) if fused else (ynn == 0), r.stdout  # the two dots
  assert "load seconds of these entries" in r.stdout


def test_a_folder_without_entries_is_one_line_naming_the_flag(tmp_path):
  r = run_program("benchmarks.cache_read", [f"--cache={tmp_path}"], tmp_path, timeout=120)
  assert r.returncode == 2
  assert r.stderr.strip() == f"error: --cache: {tmp_path} holds no cache entry (<key>-cache)"
  assert "Traceback" not in r.stderr
