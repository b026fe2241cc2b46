"""jaxlab.lm.model's world-model options: block-causal mask, spatio-temporal RoPE, dropout.

Each check compares against an independent NumPy transcription; the options off must leave the
LM's output bit-for-bit as it was before they existed (values recorded from that code).
"""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core.errors import ConfigError
from jaxlab.lm import config as lm_config
from jaxlab.lm import model as M


def _cfg(**kw):
  return M.LMConfig.from_config(lm_config.get_config(), **kw)


SMALL = dict(vocab_size=32, d_model=16, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8, mlp_dim=32)


def _logits(cfg, tokens, key=0):
  # Jitted init + apply: one compilation each instead of hundreds of eager op compilations.
  m = M.Transformer(cfg)
  params = jax.jit(m.init)(jax.random.key(key), tokens)
  return jax.jit(m.apply)(params, tokens)


# Logits [0, (0, 5, 11), :4] and sum |logits| of the LM before the options were added.
BEFORE = {
  True: (
    [
      [-1.0587918, 0.7612064, -0.95758855, -1.2681662],
      [0.43913588, -0.478865, -0.15649058, -0.9850078],
      [0.7690989, -0.21915881, 1.0289149, 0.39866182],
    ],
    315.2344665527344,
  ),
  False: (
    [
      [-1.7846761, 1.1480625, -0.11869555, 0.17148335],
      [1.1952136, 1.0184354, -0.334483, 0.21219721],
      [-1.1482906, 0.909149, 0.11787635, 0.09471601],
    ],
    319.4538879394531,
  ),
}


@pytest.mark.parametrize("scan", [True, False])
def test_options_off_leave_the_lm_unchanged(scan):
  tokens = (jnp.arange(12).reshape(1, 12) * 7) % 32
  out = np.asarray(_logits(_cfg(**SMALL, scan_layers=scan), tokens))
  rows, total = BEFORE[scan]
  np.testing.assert_allclose(out[0, [0, 5, 11], :4], rows, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(np.abs(out).sum(), total, rtol=1e-5)


def _numpy_block_mask(length, block):
  idx = np.arange(length)
  return (idx[:, None] // block) >= (idx[None, :] // block)


# One layer: output q depends on input k exactly where q may attend k.
ONE_LAYER = dict(SMALL, n_layers=1)
LENGTH, BLOCK = 10, 3  # three whole blocks and a partial one


@pytest.fixture(scope="module")
def dependence():
  """``[L, L]`` bool: does output row q change with input embedding k (block-causal model)."""
  cfg = _cfg(**ONE_LAYER, block_size=BLOCK, rope_mode="1d")
  m = M.Transformer(cfg)
  tokens = jnp.arange(LENGTH)[None] % 32
  params = jax.jit(m.init)(jax.random.key(0), tokens)
  emb = jax.random.normal(jax.random.key(1), (1, LENGTH, cfg.d_model))
  f = lambda e: m.apply(params, tokens, embeds_BxLxD=e)[0].sum(-1)  # [L]
  jac = jax.jit(jax.jacrev(f))(emb)[:, 0]  # [L_out, L_in, D]
  return np.asarray(jnp.abs(jac).max(-1) > 0)


def test_block_causal_mask_matches_numpy(dependence):
  np.testing.assert_array_equal(dependence, _numpy_block_mask(LENGTH, BLOCK))
  for wrong in (BLOCK - 1, BLOCK + 1):  # another block size is a different mask
    assert not np.array_equal(dependence, _numpy_block_mask(LENGTH, wrong))


def test_no_dependence_on_later_frames_but_on_own_frame(dependence):
  # Token 4 is the middle of frame 1 (tokens 3..5).
  assert not dependence[4, 6:].any()  # later frames
  assert dependence[4, 3] and dependence[4, 5]  # earlier and later tokens of its own frame
  assert dependence[4, :3].all()  # earlier frames


def test_block_size_one_is_token_causal():
  tokens = (jnp.arange(12).reshape(1, 12) * 5) % 32
  plain = _logits(_cfg(**ONE_LAYER), tokens)
  block1 = _logits(_cfg(**ONE_LAYER, block_size=1), tokens)
  np.testing.assert_allclose(np.asarray(block1), np.asarray(plain), rtol=1e-5, atol=1e-5)


def _numpy_st_rope(x, block, rows, cols, theta):
  """Independent transcription of spatio-temporal RoPE on ``x [L, D]`` (flat positions 0..L-1)."""
  length, d = x.shape
  n, extra = rows * cols, block - rows * cols
  g = 2 * (d // 6)
  out = np.empty_like(x)
  for i in range(length):
    t, k = divmod(i, block)
    if k < n:
      axes = [(1 + extra) * t, k // cols, k % cols]
    else:
      axes = [(1 + extra) * t + 1 + (k - n), rows // 2, cols // 2]
    start = 0
    for p, size in zip(axes, [d - 2 * g, g, g], strict=True):
      h = size // 2
      for j in range(h):
        a = p * theta ** (-2.0 * j / size)
        x1, x2 = x[i, start + j], x[i, start + h + j]
        out[i, start + j] = x1 * np.cos(a) - x2 * np.sin(a)
        out[i, start + h + j] = x2 * np.cos(a) + x1 * np.sin(a)
      start += size
  return out


def test_spatiotemporal_rope_matches_numpy():
  rows, cols, block, d = 2, 3, 8, 14  # 6 frame tokens + 2 extra; groups (time 6, row 4, col 4)
  cfg = _cfg(
    **dict(SMALL, head_dim=d, n_heads=2, n_kv_heads=2),
    block_size=block,
    rope_mode="spatiotemporal",
    frame_shape=(rows, cols),
    rope_theta=7.0,  # small theta: every frequency turns noticeably over a few positions
  )
  length = 3 * block
  x = np.asarray(jax.random.normal(jax.random.key(0), (1, length, 2, d)))
  pos = jnp.arange(length)[None]
  got = np.asarray(M.rotate(jnp.asarray(x), pos, cfg))
  for h in range(2):
    want = _numpy_st_rope(x[0, :, h].astype(np.float64), block, rows, cols, 7.0)
    np.testing.assert_allclose(got[0, :, h], want, rtol=1e-4, atol=1e-5)
  assert M.rope_split(d) == (6, 4, 4)


def test_spatiotemporal_model_runs_block_causal():
  cfg = _cfg(
    **dict(ONE_LAYER, head_dim=12, n_heads=2, n_kv_heads=2),
    block_size=5,
    rope_mode="spatiotemporal",
    frame_shape=(2, 2),
  )
  tokens = jax.random.randint(jax.random.key(0), (2, 15), 0, 32)
  m = M.Transformer(cfg)
  params = jax.jit(m.init)(jax.random.key(1), tokens)
  apply = jax.jit(m.apply)
  out = apply(params, tokens)
  out2 = apply(params, tokens.at[:, 12].set((tokens[:, 12] + 1) % 32))  # a token of block 2
  np.testing.assert_array_equal(np.asarray(out[:, :10]), np.asarray(out2[:, :10]))
  assert float(jnp.abs(out[:, 10:] - out2[:, 10:]).max()) > 0


class _Stack(nn.Module):
  cfg: M.LMConfig

  @nn.compact
  def __call__(self, x, train):
    return M.blocks(self.cfg, None, x, jnp.arange(x.shape[1])[None], train=train)


def test_dropout_only_when_training():
  cfg = _cfg(**ONE_LAYER, block_size=2, dropout=0.5)
  x = jax.random.normal(jax.random.key(0), (1, 6, cfg.d_model))
  params = jax.jit(_Stack(cfg).init, static_argnums=2)(jax.random.key(1), x, False)
  off = _Stack(cfg).apply(params, x, False)
  no_dropout = _Stack(_cfg(**ONE_LAYER, block_size=2)).apply(params, x, True)
  on = _Stack(cfg).apply(params, x, True, rngs={"dropout": jax.random.key(2)})
  np.testing.assert_array_equal(np.asarray(off), np.asarray(no_dropout))
  assert float(jnp.abs(on - off).max()) > 1e-3


@pytest.mark.parametrize(
  "kw, field",
  [
    (dict(block_size=4, attention="ring"), "config.attention"),
    (
      dict(rope_mode="spatiotemporal", attention="ulysses", block_size=4, frame_shape=(2, 2)),
      "config.attention",
    ),
    (dict(rope_mode="spatiotemporal", block_size=3, frame_shape=(2, 2)), "config.block_size"),
    (dict(rope_mode="spatiotemporal", block_size=4, frame_shape=(0, 2)), "config.frame_shape"),
    (
      dict(rope_mode="spatiotemporal", block_size=4, frame_shape=(2, 2), head_dim=4),
      "config.head_dim",
    ),
    (dict(rope_mode="xy"), "config.rope_mode"),
    (dict(block_size=-1), "config.block_size"),
    (dict(dropout=float("nan")), "config.dropout"),
  ],
)
def test_bad_options_raise_config_error(kw, field):
  with pytest.raises(ConfigError) as e:
    _cfg(**{**SMALL, **kw})
  assert e.value.field == field
