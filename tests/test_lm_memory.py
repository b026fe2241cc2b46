"""LM memory: the line fit and cap solve, XLA's compiled analysis of a training step, and the
memory properties of the attention kernels (no L x L buffer inside a layer scan, ring attention's
backward holding local activations, UPipe below Ulysses)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from jaxlab.core.mesh import make_mesh
from jaxlab.lm import attention, memory, train
from jaxlab.lm.config import get_config
from jaxlab.lm.model import LMConfig


def test_fit_line_recovers_slope_and_intercept_and_solves_the_cap():
  lengths = np.array([8192, 16384, 32768, 65536])
  noise = np.array([3.0, -5.0, 4.0, -2.0])
  slope, icpt = memory.fit_line(lengths, 3.5 * lengths + 1000 + noise)
  assert abs(slope - 3.5) < 1e-3 and abs(icpt - 1000) < 10
  assert memory.longest_under(1000 + 3.5 * 50_000, 3.5, 1000) == 50_000
  assert memory.longest_under(1000 + 3.5 * 50_000, 3.5, 1000, multiple=1024) == 48 * 1024
  assert memory.longest_under(999, 3.5, 1000) == 0  # not even the intercept fits
  with pytest.raises(ValueError):
    memory.longest_under(1e9, 0.0, 1000)
  with pytest.raises(ValueError):
    memory.fit_line([8192, 8192], [1.0, 2.0])


TINY = LMConfig.from_config(
  get_config(), vocab_size=64, d_model=32, n_layers=1, n_heads=4, n_kv_heads=2, head_dim=8,
  mlp_dim=64,
)  # fmt: skip


def test_step_memory_is_xlas_analysis_of_the_update():
  """The helper (abstract state, nothing allocated) reports what XLA reports for a real state."""
  got = memory.step_memory(TINY, seq_len=16, batch=2)
  tx = train.make_optimizer(3e-4, 10, 1000, 0.0)
  state = train.create_state(TINY, tx, jax.random.key(0), seq_len=16)
  batch = {"tokens": jnp.zeros((2, 17), jnp.int32)}
  stats = jax.jit(train.update, donate_argnums=(0,)).lower(state, batch).compile()
  stats = stats.memory_analysis()
  assert got["argument"] == stats.argument_size_in_bytes
  assert got["output"] == stats.output_size_in_bytes
  assert got["alias"] == stats.alias_size_in_bytes > 0  # the donated state is written in place
  assert got["temp"] == stats.temp_size_in_bytes > 0
  assert got["peak"] == got["argument"] + got["output"] - got["alias"] + got["temp"]


def test_blockwise_attention_inside_a_layer_scan_keeps_no_score_matrix():
  """Differentiated inside lax.scan (the model's layer scan), the kernel needs what it needs
  alone; JAX used to hoist the position-only masks out of the loop, all L x L of them."""
  seq, h, block = 2048, 2, 256
  q = jax.ShapeDtypeStruct((1, seq, h, 16), jnp.float32)
  pos = jnp.broadcast_to(jnp.arange(seq), (1, seq))
  layer = lambda x: attention.flash_attention(x, x, x, pos, pos, block)[0]
  scanned = lambda x: jnp.sum(lax.scan(lambda c, _: (layer(c), None), x, None, length=2)[0])
  temp = lambda f: jax.jit(jax.grad(f)).lower(q).compile().memory_analysis().temp_size_in_bytes
  alone, in_scan = temp(lambda x: jnp.sum(layer(layer(x)))), temp(scanned)
  assert in_scan < 1.5 * alone, (in_scan, alone)
  assert in_scan < seq * seq * h * 4 / 4  # a quarter of one float32 score matrix


def test_ring_backward_holds_less_than_all_gather():
  """Ring attention's own backward keeps this device's q/k/v/o; all-gather holds every key and
  value (multi-head: as large as the queries), and a differentiated ring scan held ring-size
  copies of the output accumulator."""
  mesh = make_mesh("context:8")
  temp = lambda impl: memory.attention_layer_memory(impl, mesh, 2048, 8, 8, 16, 32, block=64)
  assert temp("ring") < 0.6 * temp("allgather")


def test_unzigzag_is_the_inverse_permutation_without_gathering_the_sequence():
  mesh = make_mesh("data:2,context:4")
  x = jax.random.normal(jax.random.key(0), (2, 32, 3))
  perm = attention.zigzag_permutation(32, 4)
  fn = jax.jit(lambda x: attention.unzigzag(x, mesh))
  np.testing.assert_array_equal(fn(x[:, perm]), x)
  assert "all-gather" not in fn.lower(x).compile().as_text()


@pytest.mark.slow
def test_upipe_step_peak_below_ulysses():
  """Full training step on 8 devices: UPipe's chunked projections and attention keep less live."""
  mesh = make_mesh("context:8")
  kw = dict(
    vocab_size=64, d_model=128, n_layers=1, n_heads=16, n_kv_heads=8, head_dim=8, mlp_dim=64
  )
  peak = {
    impl: memory.step_memory(
      LMConfig.from_config(get_config(), attention=impl, attention_block=64, **kw), 1024, 1, mesh
    )["peak"]
    for impl in ("ulysses", "upipe")
  }
  assert peak["upipe"] < 0.95 * peak["ulysses"], peak
