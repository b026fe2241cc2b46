"""Token world model: a GPT-2 style transformer over (frame tokens, action) blocks.

The backbone of Dedieu et al. 2025 (arXiv 2502.01591) as in ITC's code (arXiv 2605.16457,
``nets/world_model.py``): a sequence is ``T`` blocks of ``L + 1`` tokens (the ``L = 81`` tokens of
a frame, then the action taken in it). A BLOCK-CAUSAL mask lets every token see all tokens of its
own and earlier blocks, so one forward pass predicts every token of the next frame in parallel
(block teacher forcing). As in the authors' code the last ``L`` outputs of block ``t`` (frame
tokens 2..L and the action) give the logits of the ``L`` tokens of frame ``t + 1``, and the action
token's output gives the reward (2 classes, label ``1[r >= 0.5]``) and termination logits. Heads
are 2-layer MLPs. Loss: ``CE(next tokens) + reward_coef CE(reward) + termination_coef CE(done)``.

Positions (``rope``): ``"1d"`` rotates queries and keys by the flat token index (the baseline);
``"spatiotemporal"`` splits each head into rotary groups over (time, x, y), time advancing by 2 per
frame and the action token sitting at time + 1 at the grid centre. The split of the head
dimension between the three groups is not in the public material: this module gives x and y
``2 * (head_dim // 6)`` dimensions each and time the rest (a reconstruction). ``absolute_embedding``
adds a learned embedding per position in the block. Actions have their own embedding table
(the authors share GPT-2's token table between codes and actions).

Why not ``jaxlab.lm.model``'s blocks: their attention derives its causal mask from the same
positions that drive RoPE (``q_pos >= k_pos``), so a block-causal mask together with 3-axis RoPE
positions cannot be expressed, and they are RMSNorm/SwiGLU blocks without dropout. The rotation
itself is ``jaxlab.lm.model.rope``. No KV cache: imagination re-runs the fixed-length context
each step (correct by block causality, ``max_blocks`` times the work of a cached decoder).
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from jaxlab.core.errors import check_choice, require
from jaxlab.lm.model import rope

Array = jax.Array
ROPES = ("1d", "spatiotemporal")


@dataclasses.dataclass(frozen=True)
class WorldModelConfig:
  """Defaults: ITC's Craftax-Classic world model (``configs.py``: ``WorldModelParams``)."""

  vocab_size: int = 4096  # codebook size
  num_actions: int = 17
  grid: tuple[int, int] = (9, 9)  # token grid (rows, cols): L = rows * cols
  max_blocks: int = 20  # frames in the context
  embed: int = 128
  layers: int = 3
  heads: int = 8
  mlp_ratio: int = 4
  dropout: float = 0.1  # embedding, attention and residual dropout
  rope: str = "1d"  # "1d" | "spatiotemporal"
  rope_theta: float = 10000.0
  absolute_embedding: bool = False  # learned embedding per position in the block
  reward_coef: float = 1.0
  termination_coef: float = 1.0

  @classmethod
  def from_config(cls, c, num_actions: int) -> WorldModelConfig:
    """The world model of an experiment config (`experiments/configs/itc.py` field names)."""
    return cls(
      vocab_size=c.codebook_size,
      num_actions=num_actions,
      max_blocks=c.max_blocks,
      embed=c.wm_embed,
      layers=c.wm_layers,
      heads=c.wm_heads,
      dropout=c.wm_dropout,
      rope=c.rope,
      absolute_embedding=c.absolute_embedding,
    )

  @property
  def tokens_per_frame(self) -> int:
    return self.grid[0] * self.grid[1]

  @property
  def tokens_per_block(self) -> int:
    return self.tokens_per_frame + 1

  def validate(self, prefix: str = "config.wm") -> WorldModelConfig:
    check_choice(f"{prefix}.rope", self.rope, ROPES)
    for name in ("vocab_size", "num_actions", "max_blocks", "embed", "layers", "heads"):
      require(getattr(self, name) >= 1, f"{prefix}.{name}", "must be >= 1")
    require(self.embed % self.heads == 0, f"{prefix}.heads", "must divide embed")
    hd = self.embed // self.heads
    require(hd % 2 == 0, f"{prefix}.embed", "embed / heads must be even (RoPE)")
    if self.rope == "spatiotemporal":
      require(hd >= 6, f"{prefix}.embed", "embed / heads must be >= 6 for 3-axis RoPE")
    require(0 <= self.dropout < 1, f"{prefix}.dropout", "must be in [0, 1)")
    return self


def positions(cfg: WorldModelConfig, num_blocks: int) -> Array:
  """``[num_blocks * (L + 1), 3]`` integer positions: (flat index, 0, 0) or (time, x, y)."""
  rows, cols = cfg.grid
  n = cfg.tokens_per_block
  flat = jnp.arange(num_blocks * n)
  if cfg.rope == "1d":
    return jnp.stack([flat, jnp.zeros_like(flat), jnp.zeros_like(flat)], -1)
  block, k = jnp.divmod(flat, n)
  is_action = k == n - 1
  y, x = jnp.divmod(jnp.minimum(k, n - 2), cols)
  time = 2 * block + is_action
  x = jnp.where(is_action, cols // 2, x)
  y = jnp.where(is_action, rows // 2, y)
  return jnp.stack([time, x, y], -1)


def block_causal_mask(num_blocks: int, tokens_per_block: int) -> Array:
  """bool ``[S, S]``: query token q may attend key k iff block(k) <= block(q)."""
  b = jnp.arange(num_blocks * tokens_per_block) // tokens_per_block
  return b[None, :] <= b[:, None]


def _rotate(x: Array, pos: Array, cfg: WorldModelConfig) -> Array:
  """RoPE on ``x [B, S, H, D]`` with positions ``[S, 3]``."""
  b = x.shape[0]
  if cfg.rope == "1d":
    return rope(x, jnp.broadcast_to(pos[:, 0], (b, pos.shape[0])), cfg.rope_theta)
  d = x.shape[-1]
  g = 2 * (d // 6)
  sizes = (d - 2 * g, g, g)
  parts, start = [], 0
  for axis, size in enumerate(sizes):
    p = jnp.broadcast_to(pos[:, axis], (b, pos.shape[0]))
    parts.append(rope(x[..., start : start + size], p, cfg.rope_theta))
    start += size
  return jnp.concatenate(parts, -1)


class _Attention(nn.Module):
  cfg: WorldModelConfig

  @nn.compact
  def __call__(self, x, pos, mask, train: bool):
    c = self.cfg
    hd = c.embed // c.heads
    q, k, v = jnp.split(nn.DenseGeneral((3 * c.heads, hd), name="qkv")(x), 3, axis=-2)
    q, k = _rotate(q, pos, c), _rotate(k, pos, c)
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(hd).astype(x.dtype)
    logits = jnp.where(mask, logits, jnp.finfo(logits.dtype).min)
    w = nn.Dropout(c.dropout, deterministic=not train)(jax.nn.softmax(logits, -1))
    out = jnp.einsum("bhqk,bkhd->bqhd", w, v)
    return nn.DenseGeneral(c.embed, axis=(-2, -1), name="out")(out)


class _Block(nn.Module):
  """GPT-2 block: pre-LayerNorm attention and GELU MLP, residual dropout."""

  cfg: WorldModelConfig

  @nn.compact
  def __call__(self, x, pos, mask, train: bool):
    c = self.cfg
    drop = nn.Dropout(c.dropout, deterministic=not train)
    x = x + drop(_Attention(c, name="attn")(nn.LayerNorm(name="ln1")(x), pos, mask, train))
    h = nn.gelu(nn.Dense(c.mlp_ratio * c.embed, name="fc")(nn.LayerNorm(name="ln2")(x)))
    return x + drop(nn.Dense(c.embed, name="proj")(h))


def _head(x, hidden: int, out: int, name: str):
  return nn.Dense(out, name=f"{name}_out")(nn.gelu(nn.Dense(hidden, name=f"{name}_hidden")(x)))


class WorldModel(nn.Module):
  """``(tokens [B, T, L], actions [B, T]) -> (obs_logits [B, T, L, V], reward [B, T, 2],
  termination [B, T, 2])``: outputs of block ``t`` predict frame ``t + 1``."""

  cfg: WorldModelConfig

  @nn.compact
  def __call__(self, tokens, actions, train: bool = False):
    c = self.cfg
    b, t, n = tokens.shape
    tok = nn.Embed(c.vocab_size, c.embed, name="token_embed")(tokens)
    act = nn.Embed(c.num_actions, c.embed, name="action_embed")(actions)[:, :, None]
    x = jnp.concatenate([tok, act], axis=2)  # [B, T, L + 1, E]
    if c.absolute_embedding:
      x = x + self.param("block_pos", nn.initializers.normal(0.02), (n + 1, c.embed))
    x = x.reshape(b, t * (n + 1), c.embed)
    x = nn.Dropout(c.dropout, deterministic=not train)(x)
    pos, mask = positions(c, t), block_causal_mask(t, n + 1)
    for i in range(c.layers):
      x = _Block(c, name=f"block{i}")(x, pos, mask, train)
    x = nn.LayerNorm(name="ln_f")(x).reshape(b, t, n + 1, c.embed)
    obs = _head(x[:, :, 1:], c.embed, c.vocab_size, "obs")
    reward = _head(x[:, :, -1], c.embed, 2, "reward")
    done = _head(x[:, :, -1], c.embed, 2, "termination")
    return obs, reward, done


def loss(params, model: WorldModel, batch: dict, key: Array):
  """Block-teacher-forced loss on ``batch``: ``tokens [B, T+1, L]``, ``actions, reward, done``
  ``[B, T]`` (reward and done of the transition out of frame t). Returns ``(loss, metrics)``."""
  c = model.cfg
  obs, rew, term = model.apply(
    {"params": params},
    batch["tokens"][:, :-1],
    batch["actions"],
    train=True,
    rngs={"dropout": key},
  )
  target = batch["tokens"][:, 1:]
  obs_ce = optax.softmax_cross_entropy_with_integer_labels(obs, target).mean()
  rew_label = (batch["reward"] >= 0.5).astype(jnp.int32)
  rew_ce = optax.softmax_cross_entropy_with_integer_labels(rew, rew_label).mean()
  done_label = batch["done"].astype(jnp.int32)
  done_ce = optax.softmax_cross_entropy_with_integer_labels(term, done_label).mean()
  total = obs_ce + c.reward_coef * rew_ce + c.termination_coef * done_ce
  acc = jnp.mean(jnp.argmax(obs, -1) == target)
  return total, {
    "wm_loss": total,
    "wm_obs_ce": obs_ce,
    "wm_reward_ce": rew_ce,
    "wm_done_ce": done_ce,
    "wm_token_acc": acc,
  }
