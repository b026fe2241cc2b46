"""DASBS memory: the hand estimate (`dasbs.memory_model`) against XLA's memory analysis, and the
GPU preset (L = 24) refused on a machine it does not fit, before anything is compiled or written."""

import importlib
import os

import jax
import pytest
from programs import run_program

from jaxlab.core import resources, runtime
from jaxlab.core.errors import ConfigError
from jaxlab.sampling import dasbs, evaluation

GiB = 2**30
# XLA's memory analysis (runtime.chunk_bytes) of the default preset's training chunk, jax 0.10.2 on
# CPU: the size of the allocation that failed when the preset ran on a 23 GiB machine.
L24_CHUNK_BYTES = 58_822_790_672


def _preset(name="ising_critical", **fields):
  module = importlib.import_module("experiments.configs.dasbs")
  config = module.get_config(name)
  config.update(fields)
  return dasbs.make_spec(config)


def test_hand_estimate_of_the_gpu_preset_counts_the_backward_pass(monkeypatch):
  spec = _preset()
  assert spec.target.L == 24
  # the activations for the backward pass, attention's D x D arrays included (the estimate
  # before counted a quarter of them and let the preset through, to an XLA abort)
  assert dasbs.training_bytes(spec) == pytest.approx(L24_CHUNK_BYTES, rel=0.05)
  monkeypatch.setattr(resources, "device_memory", lambda: 23 * GiB)
  with pytest.raises(ConfigError) as e:
    dasbs.check_memory(spec)
  assert e.value.field == "config.batch_size" and "512 paths of 576 sites" in e.value.message
  dasbs.check_memory(_preset("ising_critical_cpu"))  # the CPU preset fits


def test_gpu_preset_exits_2_with_one_line_and_no_workdir(tmp_path):
  """The default command on a machine too small for it: one error line naming the field, quickly
  (the hand estimate refuses it before anything is compiled), and no workdir."""
  if resources.device_memory() > L24_CHUNK_BYTES:
    pytest.skip("the L = 24 preset fits on this machine")
  workdir = tmp_path / "run"
  r = run_program(
    "experiments.dasbs", [f"--workdir={workdir}"], tmp_path, drop=("XLA_FLAGS",), timeout=120
  )
  assert r.returncode == 2, (r.stdout, r.stderr[-1500:])
  err = [line for line in r.stderr.splitlines() if line.startswith("error:")]
  assert len(err) == 1 and err[0].startswith("error: --config.batch_size: needs about"), r.stderr
  assert "one training step" in err[0]  # the hand estimate, not the compiled program's analysis
  assert "Traceback" not in r.stderr
  assert not workdir.exists() and os.listdir(tmp_path) == []


@pytest.mark.slow
@pytest.mark.parametrize(
  "fields", [dict(L=4), dict(L=8, heads=8, hidden=64), dict(L=8, depth=3, batch_size=32)]
)
def test_hand_estimate_matches_xla_memory_analysis(fields):
  """Within 5 % of XLA's memory analysis of the compiled training chunk (about 25 s of
  compilation each on CPU) and of `simulate` on the training batch."""
  spec = _preset(**fields)
  state = dasbs.init_state(spec, jax.random.key(0))
  chunk = runtime.make_chunk_fn(dasbs.make_update(spec))
  key = jax.random.key_data(jax.random.key(1))
  xla = chunk.memory(state, None, key, evaluation.chunk_steps(spec))
  assert dasbs.training_bytes(spec) == pytest.approx(xla, rel=0.05)
  rows = spec.batch_size * spec.num_repl
  sim = jax.jit(lambda p, k: dasbs.simulate(spec, state.ctrl, p, k, rows))
  xla = runtime.chunk_bytes(sim.lower(state.ctrl.target_params, jax.random.key(2)).compile())
  params, _, sample_row = dasbs.memory_model(spec)
  assert params + rows * sample_row == pytest.approx(xla, rel=0.05)
