"""ITC's defaults, declared once: the baseline of ITC's code (Dedieu et al. 2025's agent as
reimplemented by ITC's authors, ``configs.py``; Craftax-Classic, pixels) at the paper's scale.

``experiments/configs/itc.py`` holds the presets (the paper's three arms, ``tiny``, ``cpu``) as
changes of this config. :func:`validate_config` checks a config and returns the agent's
:class:`dyna.DynaConfig`.
"""

from __future__ import annotations

import jax
import ml_collections

from jaxlab.core import resources
from jaxlab.core.errors import check_config, require
from jaxlab.rl import ppo
from jaxlab.rl.itc import dyna

NUM_ACTIONS = 17  # Craftax-Classic's action count


def get_config() -> ml_collections.ConfigDict:
  """The ``baseline_reproduced`` arm of ITC (arXiv 2605.16457) at 1M steps: a GPU run."""
  c = ml_collections.ConfigDict()
  c.env = "craftax-classic-pixels"  # the game: Craftax-Classic, 63 x 63 RGB frames
  c.env_steps = 1_000_000  # real environment steps of the run (iterations = env_steps // batch)
  c.decode = "sample"  # imagined frames: sample | argmax | itc | itc_hungarian
  c.picture_steps = 10  # frames of the real vs imagined rollout.png written at the end

  # PPO on real and imagined data (ITC's agent settings where they differ from ppo.get_config();
  # epochs 4, minibatches 8, clip_eps 0.2, ent_coef 0.01 and reset_ratio 16 are PPO's). On CPU
  # the PPO loops are unrolled (PPOConfig.unroll, set by dyna_config from the backend).
  c.ppo = ppo.get_config()
  c.ppo.num_envs = 48  # real environments per iteration
  c.ppo.num_steps = 96  # real steps per environment and iteration
  c.ppo.gamma = 0.925  # discount
  c.ppo.gae_lambda = 0.625  # GAE lambda
  c.ppo.vf_coef = 2.0  # value-loss weight
  c.ppo.lr = 4.5e-4  # Adam learning rate (constant)
  c.ppo.anneal_lr = False  # no learning-rate decay
  c.ppo.max_grad_norm = 0.5  # global gradient-norm clip

  # The agent (jaxlab.rl.ppo.policies.ImpalaRNNPolicy): IMPALA CNN + GRU, residual MLP towers.
  c.policy = ml_collections.ConfigDict()
  c.policy.channels = (64, 64, 128)  # CNN channels per IMPALA stage
  c.policy.embed = 256  # Dense projection of the CNN features before the GRU
  c.policy.hidden = 256  # GRU state size
  c.policy.head_hidden = 2048  # width of the actor and critic residual towers

  # Tokenizer (tokenizer.TokenizerConfig): nearest-neighbour patch codebook.
  c.tokenizer = ml_collections.ConfigDict()
  c.tokenizer.patch = 7  # patch side in pixels
  c.tokenizer.grid = (9, 9)  # patches per (column, row): 63 x 63 frames; also the model's grid
  c.tokenizer.channels = 3  # RGB
  c.tokenizer.codebook_size = 4096  # maximum number of codes (the world model's vocabulary)
  c.tokenizer.threshold = 0.75  # squared L2 distance beyond which a patch becomes a new code
  c.tokenizer.max_candidates = 1024  # new codes inserted per grow call at most

  # World model (world_model.WorldModelConfig): jaxlab.lm blocks, block-causal over frames.
  c.wm = ml_collections.ConfigDict()
  c.wm.max_blocks = 20  # frames of context
  c.wm.embed = 128  # model width
  c.wm.layers = 3  # transformer blocks
  c.wm.heads = 8  # attention heads (must divide embed)
  c.wm.mlp_ratio = 4  # SwiGLU hidden size / embed
  c.wm.dropout = 0.1  # embedding and residual dropout, in [0, 1)
  c.wm.rope = "1d"  # 1d (flat token index) | spatiotemporal (time, row, column)
  c.wm.rope_theta = 10000.0  # RoPE base
  c.wm.absolute_embedding = False  # learned embedding per position in the block
  c.wm.reward_coef = 1.0  # weight of the reward cross-entropy
  c.wm.termination_coef = 1.0  # weight of the termination cross-entropy

  # ITC decoding (decode.ITCConfig; config/itc.yaml's Craftax-Classic values).
  c.itc = ml_collections.ConfigDict()
  c.itc.inventory_rows = 2  # bottom token rows showing the inventory (never copied)
  c.itc.num_dummy = 81  # generate rows = trash columns; must equal the grid's token count
  c.itc.distance_coef = 0.6  # alpha_d: cost per squared cell of a copy's move
  c.itc.trash_cost = 0.3  # tau_trash: the copy bonus
  c.itc.max_sq_dist = 4.1  # squared moves beyond this are forbidden (cost 100)
  c.itc.epsilon = 1e-5  # Sinkhorn entropic regularisation, relative to the cost's std
  c.itc.greedy_passes = 82  # rounding passes (tokens per block)

  # The Dyna loop (dyna.DynaConfig).
  c.replay_size = 128_000  # real steps kept in the replay (split evenly over the environments)
  c.warmup_steps = 200_000  # real steps before imagination starts
  c.imag_updates = 150  # imagined rollouts (+ one PPO epoch each) per iteration
  c.imag_batch = 48  # imagined rollouts in parallel (reconstruction: the real batch)
  c.imag_minibatches = 8  # PPO minibatches per imagined epoch
  c.horizon = 20  # imagined steps per rollout (<= wm.max_blocks)
  c.burn_in = 5  # real frames that warm the policy's memory before imagining
  c.wm_updates = 1500  # world-model steps per iteration (500 updates x 3 minibatches)
  c.wm_batch = 16  # sequences per world-model step (reconstruction)
  c.wm_lr = 1e-3  # world-model Adam learning rate
  c.wm_max_grad_norm = 0.5  # world-model gradient-norm clip
  c.tok_passes = 25  # tokenizer growth passes per iteration
  return c


def iterations(config) -> int:
  """Dyna iterations of a run: ``env_steps // (ppo.num_envs * ppo.num_steps)``, at least 1."""
  return max(1, config.env_steps // (config.ppo.num_envs * config.ppo.num_steps))


def dyna_config(config, num_actions: int = NUM_ACTIONS) -> dyna.DynaConfig:
  """The agent of ``config``; PPO's loops are unrolled on CPU (see ``ppo.PPOConfig.unroll``)."""
  return dyna.DynaConfig.from_config(
    config,
    num_actions,
    num_updates=iterations(config),
    unroll=jax.default_backend() == "cpu",
  )


FRAME = (63, 63, 3)  # Craftax-Classic's pixel frame (height, width, RGB)
_POSITIVE = (
  "env_steps picture_steps ppo.num_envs ppo.num_steps ppo.reset_ratio "
  "policy.embed policy.hidden policy.head_hidden wm.mlp_ratio wm.rope_theta wm_max_grad_norm "
  "tokenizer.codebook_size tokenizer.max_candidates"
)
_NONNEG = "wm.reward_coef wm.termination_coef itc.inventory_rows"


def _sizes(field: str, value, example: str, n: int | None = None) -> tuple[int, ...]:
  """A tuple of positive ints (``n`` of them when given), else ConfigError(field)."""
  values = tuple(value) if isinstance(value, (list, tuple)) else (value,)
  ok = bool(values) and all(isinstance(v, int) and not isinstance(v, bool) for v in values)
  ok = ok and all(v >= 1 for v in values) and (n is None or len(values) == n)
  count = f"{n} " if n is not None else "one or more "
  require(ok, field, f"must be {count}positive integers, e.g. {example}; got {value!r}")
  return values


def check_shapes(config) -> None:
  """The game, the CNN, the frame grid and ITC's rows from the config alone (ConfigError naming
  a field)."""
  from jaxlab.envs import craftax

  _, classic, pixels = craftax.resolve(config.env, "config.env")
  require(
    classic and pixels,
    "config.env",
    f"ITC's agent plays Craftax-Classic from 63 x 63 pixels (craftax-classic-pixels), got "
    f"{config.env!r}",
  )
  _sizes("config.policy.channels", config.policy.channels, "(8, 16, 16)")
  rows, cols = _sizes("config.tokenizer.grid", config.tokenizer.grid, "(9, 9)", 2)
  p, (h, w, ch) = config.tokenizer.patch, FRAME
  require(
    isinstance(p, int) and p >= 1 and rows * p == h and cols * p == w,
    "config.tokenizer.patch",
    f"patch {p} x grid {(rows, cols)} must tile the {h} x {w} frame (e.g. patch 7, grid (9, 9))",
  )
  require(config.tokenizer.channels == ch, "config.tokenizer.channels", f"must be {ch} (RGB)")
  require(
    config.itc.inventory_rows < rows,
    "config.itc.inventory_rows",
    f"must be < the grid's {rows} rows, got {config.itc.inventory_rows}",
  )


def check_memory(config, devices: int = 1) -> None:
  """int32 counts and the bytes of the largest arrays (``resources.check_fits``, naming the
  field of the largest), before anything is allocated."""
  n, t = config.ppo.num_envs, config.ppo.num_steps
  for field, value, what in (
    ("config.env_steps", config.env_steps, "a step count"),
    ("config.replay_size", config.replay_size, "an array dimension"),
    ("config.ppo.num_envs", n * t, "num_envs x num_steps, a rollout's int32 size"),
    ("config.tokenizer.codebook_size", config.tokenizer.codebook_size, "an array dimension"),
    ("config.imag_batch", config.imag_batch * config.horizon, "imag_batch x horizon (int32)"),
  ):
    resources.check_int32(field, value, what)
  frame = FRAME[0] * FRAME[1] * FRAME[2]
  patch = config.tokenizer.patch**2 * FRAME[2]
  imagined = config.imag_batch * (config.horizon + config.burn_in + 1)
  tokens = config.tokenizer.grid[0] * config.tokenizer.grid[1] + 1  # a frame's tokens + action
  need = {
    "config.replay_size": (config.replay_size * frame, "the replay's uint8 frames"),
    "config.ppo.num_envs": (2 * n * t * frame * 4, "a real rollout's float32 frames"),
    "config.imag_batch": (imagined * frame * 4, "the imagined rollouts' float32 frames"),
    "config.tokenizer.codebook_size": (config.tokenizer.codebook_size * patch * 4, "the codebook"),
    "config.wm.max_blocks": (
      config.wm_batch * config.wm.heads * ((config.wm.max_blocks + 1) * tokens) ** 2 * 4,
      "the world model's attention scores over its context",
    ),
  }
  field = max(need, key=lambda k: need[k][0])
  total = sum(b for b, _ in need.values())
  what = f"{need[field][1]} and the run's other large arrays"
  resources.check_fits(total, field, what, devices=devices)


def validate_config(config) -> ml_collections.FrozenConfigDict:
  """Checks every field (ConfigError naming it, e.g. ``config.wm.heads``) and that the run fits
  in memory, before anything is built or compiled; returns the checked config, frozen (the typed
  agent: :func:`dyna_config`)."""
  checks = {k: "positive" for k in _POSITIVE.split()}
  checks.update({k: "nonneg" for k in _NONNEG.split()})
  check_config(config, checks)
  check_shapes(config)
  dyna_config(config).validate()
  check_memory(config)
  return ml_collections.FrozenConfigDict(config)
