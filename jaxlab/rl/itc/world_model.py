"""Token world model: `jaxlab.lm.model`'s transformer blocks over (frame tokens, action) blocks.

The backbone of Dedieu et al. 2025 (arXiv 2502.01591) as in ITC's code (arXiv 2605.16457,
``nets/world_model.py``): a sequence is ``T`` blocks of ``L + 1`` tokens (the ``L = 81`` tokens of
a frame, then the action taken in it). A BLOCK-CAUSAL mask lets every token see all tokens of its
own and earlier blocks, so one forward pass predicts every token of the next frame in parallel
(block teacher forcing). As in the authors' code the last ``L`` outputs of block ``t`` (frame
tokens 2..L and the action) give the logits of the ``L`` tokens of frame ``t + 1``, and the action
token's output gives the reward (2 classes, label ``1[r >= 0.5]``) and termination logits. Heads
are 2-layer MLPs. Loss: ``CE(next tokens) + reward_coef CE(reward) + termination_coef CE(done)``.

The transformer is `jaxlab.lm.model.blocks` with the LM's world-model options (see that module):
``block_size = L + 1`` for the block-causal mask, ``rope_mode`` ``"1d"`` (RoPE on the flat token
index, the baseline) or ``"spatiotemporal"`` (rotary groups over time, row and column; frames at
time ``2t``, the action at ``2t + 1`` on the grid centre; the split of the head dimension is a
reconstruction, documented in `jaxlab.lm.model`), and residual dropout. Differences from the
authors' GPT-2 blocks: RMSNorm instead of LayerNorm, a SwiGLU MLP of hidden size
``mlp_ratio * embed`` instead of GELU, no attention-probability dropout. ``absolute_embedding``
adds a learned embedding per position in the block; actions have their own embedding table (the
authors share GPT-2's token table between codes and actions). Embedding dropout as in GPT-2.
No KV cache: imagination re-runs the fixed-length context each step (correct by block causality,
``max_blocks`` times the work of a cached decoder).
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from jaxlab.core.errors import ConfigError, check_choice, require
from jaxlab.lm import model as lm
from jaxlab.rl.itc import fields

Array = jax.Array
ROPES = lm.ROPE_MODES


@dataclasses.dataclass(frozen=True)
class WorldModelConfig:
  """The world model (values: ``jaxlab.rl.itc.get_config().wm``; the vocabulary is the codebook,
  the grid the tokenizer's, the actions the environment's)."""

  vocab_size: int  # codebook size
  num_actions: int  # actions of the environment
  grid: tuple[int, int]  # token grid (rows, cols): L = rows * cols
  max_blocks: int  # frames in the context
  embed: int  # model width
  layers: int  # transformer blocks
  heads: int  # attention heads (must divide embed)
  mlp_ratio: int  # SwiGLU hidden size / embed
  dropout: float  # embedding and residual dropout (none on attention probabilities)
  rope: str  # "1d" | "spatiotemporal"
  rope_theta: float  # RoPE base
  absolute_embedding: bool  # learned embedding per position in the block
  reward_coef: float  # weight of the reward cross-entropy
  termination_coef: float  # weight of the termination cross-entropy

  @classmethod
  def from_config(cls, config, **overrides) -> WorldModelConfig:
    """From ``config.wm`` (``jaxlab.rl.itc.get_config()``) and ``overrides``."""
    return fields.from_config(cls, config, **overrides)

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
    try:
      self.lm_config()
    except ConfigError as e:  # an LM field the checks above missed: name it under the prefix
      raise ConfigError(f"{prefix}.{e.field.removeprefix('config.')}", e.message) from None
    return self

  def lm_config(self) -> lm.LMConfig:
    """The `jaxlab.lm` transformer of this world model (one attention block: the whole context);
    fields not set here (dtype, attention kernel, remat, ...) are those of
    ``jaxlab.lm.config.get_config()``."""
    from jaxlab.lm import config as lm_config

    hd = self.embed // self.heads
    return lm.LMConfig.from_config(
      lm_config.get_config(),
      vocab_size=self.vocab_size,
      d_model=self.embed,
      n_layers=self.layers,
      n_heads=self.heads,
      n_kv_heads=self.heads,
      head_dim=hd,
      mlp_dim=self.mlp_ratio * self.embed,
      rope_theta=self.rope_theta,
      attention_block=self.max_blocks * self.tokens_per_block,
      block_size=self.tokens_per_block,
      rope_mode=self.rope,
      frame_shape=tuple(self.grid),
      dropout=self.dropout,
    )


def positions(cfg: WorldModelConfig, num_blocks: int) -> Array:
  """``[num_blocks * (L + 1), 3]`` RoPE positions: (flat index, 0, 0) or (time, row, col).

  For inspection: the model passes flat indices and `jaxlab.lm.model.rotate` derives these.
  """
  flat = jnp.arange(num_blocks * cfg.tokens_per_block)
  if cfg.rope == "1d":
    return jnp.stack([flat, jnp.zeros_like(flat), jnp.zeros_like(flat)], -1)
  return jnp.stack(lm.st_positions(flat, cfg.tokens_per_block, tuple(cfg.grid)), -1)


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
    pos = jnp.broadcast_to(jnp.arange(t * (n + 1), dtype=jnp.int32), (b, t * (n + 1)))
    x = lm.blocks(c.lm_config(), None, x, pos, train=train)
    x = lm.RMSNorm(name="ln_f")(x).reshape(b, t, n + 1, c.embed)
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
