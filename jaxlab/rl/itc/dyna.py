"""The Dyna loop of the transformer-world-model agent (Dedieu et al. 2025; ITC's ``train.py``).

One runtime step is one iteration:

1. ``num_envs x num_steps`` real steps with the current policy (`jaxlab.rl.ppo.rollout`);
2. PPO on them (`jaxlab.rl.ppo.learn`, ``epochs x minibatches``);
3. the transitions enter the replay; the tokenizer grows on the new frames (``tok_passes`` calls
   of `tokenizer.grow`; every replay frame was once a new frame and codes never change, so this
   sees the same patches as growing on replay samples); ``wm_updates`` world-model steps on
   replayed sequences of ``max_blocks + 1`` frames, re-tokenized with the current codebook;
4. once ``warmup_steps`` real steps are done, ``imag_updates`` times: an imagined rollout
   (`imagine.rollout`: ``burn_in`` real frames warm the policy's memory, ``horizon`` imagined
   steps from the next real frame) and one PPO epoch on it.

Everything runs inside one jitted update, so `jaxlab.core.runtime.train` checkpoints and resumes
the whole agent (policy, world model, codebook and the replay itself); several seeds train as
the runtime's seed axis, vmapped in that one program (:func:`init_seeds`, :func:`seed_vmap`), seed
``k`` the run of seed ``k`` alone. Episode metrics
(``return_pct``, ``score``) are those of the real training episodes, as the authors log them.
Sizes and rates of steps 3-4 that the public material does not give (world-model batch,
imagination batch) are choices of this reimplementation; see docs/itc.md.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxlab.core.errors import ConfigError, check_choice, require
from jaxlab.core.train_state import TrainState
from jaxlab.rl import ppo
from jaxlab.rl.itc import buffer as buffer_lib
from jaxlab.rl.itc import decode as decode_lib
from jaxlab.rl.itc import fields, imagine
from jaxlab.rl.itc import tokenizer as tok_lib
from jaxlab.rl.itc import world_model as wm_lib

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class DynaConfig:
  """The agent (values: ``jaxlab.rl.itc.get_config()``, built by :meth:`from_config`)."""

  ppo: ppo.PPOConfig  # PPO on real data (imagined batches: :meth:`imag_ppo`)
  wm: wm_lib.WorldModelConfig
  tokenizer: tok_lib.TokenizerConfig
  itc: decode_lib.ITCConfig
  decode: str  # sample | argmax | itc | itc_hungarian
  replay_size: int  # real steps kept (split evenly over the environments)
  warmup_steps: int  # real steps before imagination starts
  imag_updates: int  # imagined rollouts (+ one PPO epoch each) per iteration
  imag_batch: int  # imagined rollouts in parallel
  imag_minibatches: int  # PPO minibatches per imagined epoch
  horizon: int  # imagined steps
  burn_in: int  # real frames that warm the policy's memory
  wm_updates: int  # world-model steps per iteration
  wm_batch: int  # sequences per world-model step
  wm_lr: float  # world-model Adam learning rate
  wm_max_grad_norm: float  # world-model gradient-norm clip
  tok_passes: int  # tokenizer growth passes per iteration

  @classmethod
  def from_config(cls, c, num_actions: int, **ppo_overrides) -> DynaConfig:
    """From a ``jaxlab.rl.itc.get_config()`` config: ``c.ppo``, ``c.wm``, ``c.tokenizer``,
    ``c.itc`` and the Dyna fields; the tokenizer's grid and codebook size fix the world model's
    and ITC's. ``ppo_overrides`` go to ``PPOConfig.from_config`` (``num_updates``, ``unroll``)."""
    grid = tuple(c.tokenizer.grid)
    return fields.from_config(
      cls,
      c,
      ppo=ppo.PPOConfig.from_config(c.ppo, **ppo_overrides),
      wm=wm_lib.WorldModelConfig.from_config(
        c.wm, vocab_size=c.tokenizer.codebook_size, num_actions=num_actions, grid=grid
      ),
      tokenizer=tok_lib.TokenizerConfig.from_config(c.tokenizer),
      itc=decode_lib.ITCConfig.from_config(c.itc, grid=grid),
    )

  @property
  def steps_per_iteration(self) -> int:
    return self.ppo.num_envs * self.ppo.num_steps

  def imag_ppo(self) -> ppo.PPOConfig:
    return dataclasses.replace(
      self.ppo,
      num_envs=self.imag_batch,
      num_steps=self.horizon,
      epochs=1,
      minibatches=self.imag_minibatches,
    )

  def validate(self, prefix: str = "config") -> DynaConfig:
    check_choice(f"{prefix}.decode", self.decode, decode_lib.METHODS)
    self.wm.validate(f"{prefix}.wm")
    self.tokenizer.validate(f"{prefix}.tokenizer")
    self.itc.validate(f"{prefix}.itc")
    ppo.validate(self.ppo, True, f"{prefix}.ppo")
    for name in ("imag_batch", "imag_minibatches", "horizon", "wm_updates", "wm_batch"):
      require(
        getattr(self, name) >= 1, f"{prefix}.{name}", f"must be >= 1, got {getattr(self, name)}"
      )
    try:  # the imagined batches' PPO: its fields are imag_batch, horizon, imag_minibatches
      ppo.validate(self.imag_ppo(), True, prefix)
    except ConfigError as e:
      names = {"num_envs": "imag_batch", "num_steps": "horizon", "minibatches": "imag_minibatches"}
      leaf = e.field.rpartition(".")[2]
      raise ConfigError(f"{prefix}.{names.get(leaf, leaf)}", e.message) from None
    for name in ("warmup_steps", "imag_updates", "burn_in", "tok_passes"):
      require(getattr(self, name) >= 0, f"{prefix}.{name}", "must be >= 0")
    require(self.wm_lr > 0, f"{prefix}.wm_lr", "must be > 0")
    require(
      self.horizon <= self.wm.max_blocks,
      f"{prefix}.horizon",
      f"{self.horizon} exceeds the world model's context wm.max_blocks={self.wm.max_blocks}",
    )
    need = max(self.wm.max_blocks + 1, self.burn_in + 1)
    require(
      self.ppo.num_steps >= need,
      f"{prefix}.ppo.num_steps",
      f"the first iteration must fill sequences of {need} steps (wm.max_blocks + 1, burn_in + 1)",
    )
    cap = self.replay_size // self.ppo.num_envs
    require(
      cap >= self.ppo.num_steps,
      f"{prefix}.replay_size",
      f"{self.replay_size} keeps {cap} steps per environment, fewer than num_steps",
    )
    require(
      self.tokenizer.num_tokens == self.wm.tokens_per_frame,
      f"{prefix}.wm.grid",
      "must match the tokenizer's grid",
    )
    return self


@struct.dataclass
class DynaState:
  ppo: ppo.PPOState
  wm: TrainState
  book: tok_lib.Codebook
  replay: buffer_lib.Replay
  iteration: Array  # int32


def init(env, policy, cfg: DynaConfig, key: Array) -> DynaState:
  """Resets the environments, initialises policy, world model, empty codebook and replay.

  Two compiled programs, no eager work: the world model, codebook and replay (:func:`_init_rest`,
  cached per config; it also splits ``key``, which eagerly is two more programs to look up) and
  `ppo.init` (the environments' reset and the policy; run op by op, Craftax's world generation
  alone dispatched 541 small programs, 17 minutes at load 25)."""
  k_ppo, wm, book, replay = _init_rest(cfg, tuple(env.obs_shape))(key)
  ps = ppo.init(env, policy, cfg.ppo, k_ppo)
  return DynaState(ppo=ps, wm=wm, book=book, replay=replay, iteration=jnp.int32(0))


def init_seeds(env, policy, cfg: DynaConfig, keys: Array) -> DynaState:
  """:func:`init` of every seed's key (``keys``: raw ``uint32[seeds, 2]``): the states stacked on a
  leading seed axis, seed ``i`` the state ``init(..., keys[i])`` gives (`ppo.init_seeds`)."""
  k_ppo, wm, book, replay = jax.jit(jax.vmap(_init_rest(cfg, tuple(env.obs_shape))))(keys)
  ps = ppo.init_seeds(env, policy, cfg.ppo, k_ppo)
  iteration = jnp.zeros(keys.shape[0], jnp.int32)
  return DynaState(ppo=ps, wm=wm, book=book, replay=replay, iteration=iteration)


def seed_vmap(fn):
  """The Dyna update's transform over the runtime's seed axis (``runtime.train(...,
  seed_vmap=...)``).

  Every seed is at the same iteration: passing it unbatched keeps the update's ``lax.cond`` on it
  (imagination only after ``warmup_steps``) a branch, where vmap would turn a cond on a batched
  predicate into both branches and a select, running the imagination during the warm-up too."""

  def batched(states, keys):
    iteration = states.iteration[0]
    return jax.vmap(lambda s, k: fn(s.replace(iteration=iteration), k))(states, keys)

  return batched


@functools.cache
def _init_rest(cfg: DynaConfig, obs_shape: tuple[int, ...]):
  def rest(key):
    k_ppo, k_wm = jax.random.split(key)
    wm = wm_lib.WorldModel(cfg.wm)
    t = cfg.wm.max_blocks
    tokens = jnp.zeros((1, t, cfg.wm.tokens_per_frame), jnp.int32)
    params = wm.init(k_wm, tokens, jnp.zeros((1, t), jnp.int32))["params"]
    tx = optax.chain(optax.clip_by_global_norm(cfg.wm_max_grad_norm), optax.adam(cfg.wm_lr))
    cap = cfg.replay_size // cfg.ppo.num_envs
    replay = buffer_lib.init(cfg.ppo.num_envs, cap, obs_shape)
    return k_ppo, TrainState.create(wm, params, tx), tok_lib.init(cfg.tokenizer), replay

  return jax.jit(rest)


def _grow(book, frames, cfg: DynaConfig):
  def one(book, _):
    return tok_lib.grow(book, frames, cfg.tokenizer), None

  book, _ = jax.lax.scan(one, book, None, length=cfg.tok_passes)
  return book


def train_world_model(wm: TrainState, book, replay, cfg: DynaConfig, key: Array):
  """``wm_updates`` world-model steps on replayed, re-tokenized sequences."""
  length = cfg.wm.max_blocks + 1

  def one(wm, k):
    k_s, k_d = jax.random.split(k)
    seq = buffer_lib.sample(replay, k_s, cfg.wm_batch, length)
    batch = {
      "tokens": tok_lib.encode(book, seq["obs"], cfg.tokenizer),
      "actions": seq["action"][:, :-1],
      "reward": seq["reward"][:, :-1],
      "done": seq["done"][:, :-1],
    }
    return wm.apply_loss(wm_lib.loss, wm.model_def, batch, k_d)

  wm, metrics = jax.lax.scan(one, wm, jax.random.split(key, cfg.wm_updates))
  return wm, jax.tree.map(jnp.mean, metrics)


def _imagination(train, wm, book, replay, cfg: DynaConfig, key: Array):
  """``imag_updates`` x (imagined rollout + one PPO epoch); returns (train, mean metrics).

  The imagined rollout (policy, world model re-run over its context, decoding, codebook lookup)
  and its PPO epoch are traced ONCE: a ``lax.scan`` over the updates, or a plain call for one
  update. Unrolling the updates (what this loop did on CPU before, with the PPO loops) copied
  the whole body ``imag_updates`` times into the program; inside the scan the imagined
  minibatches are scanned too, since their convolution gradients run in a loop either way
  (jax-ml/jax#12868), and a single update keeps ``ppo.unroll``.
  """
  imag_cfg = cfg.imag_ppo()
  if cfg.imag_updates > 1:
    imag_cfg = dataclasses.replace(imag_cfg, unroll=False)

  def one(train, k):
    k_s, k_r, k_l = jax.random.split(k, 3)
    seq = buffer_lib.sample(replay, k_s, cfg.imag_batch, cfg.burn_in + 1)
    start = {
      "obs": seq["obs"],
      "reset": seq["reset"],
      "done": seq["done"][:, -2] if cfg.burn_in else jnp.zeros((cfg.imag_batch,), bool),
    }
    traj, carry0, last_value = imagine.rollout(
      train,
      wm,
      book,
      start,
      k_r,
      horizon=cfg.horizon,
      method=cfg.decode,
      itc_cfg=cfg.itc,
      tok_cfg=cfg.tokenizer,
      max_blocks=cfg.wm.max_blocks,
    )
    traj = jax.tree.map(jax.lax.stop_gradient, traj)
    train, parts = ppo.learn(train, traj, carry0, last_value, imag_cfg, k_l, recurrent=True)
    parts = {f"imag_{k}": v for k, v in parts.items()}
    parts["imag_reward"] = jnp.mean(traj["reward"])
    parts["imag_done"] = jnp.mean(traj["done"].astype(jnp.float32))
    return train, parts

  keys = jax.random.split(key, cfg.imag_updates)
  return ppo.scan(one, train, keys, unroll=cfg.imag_updates == 1)


@functools.cache
def _traced_once(apply_fn):
  """``apply_fn`` jitted. The policy runs on ``[1, N]`` frames four times per iteration (the real
  rollout's step and last value, the imagined step and last value): jax traces and lowers a
  jitted function once per argument types, so the CNN is traced once for all four; XLA inlines
  the calls."""
  return jax.jit(apply_fn)


def make_update(env, cfg: DynaConfig):
  """``update(state, batch, key) -> (state, metrics)``: one Dyna iteration (module docstring)."""
  cfg.validate()

  def update(state: DynaState, batch: Any, key: Array):
    del batch
    k_roll, k_learn, k_wm, k_img = jax.random.split(key, 4)
    carry0 = state.ppo.carry
    train0 = state.ppo.train  # its apply_fn is put back at the end: the structure is kept
    policy = train0.replace(apply_fn=_traced_once(train0.apply_fn))
    ps, traj = ppo.rollout(state.ppo.replace(train=policy), env, cfg.ppo, k_roll)
    _, _, last_value = ps.train(ps.carry, ps.obs[None], ps.reset[None])
    train, parts = ppo.learn(
      ps.train, traj, carry0, last_value[0], cfg.ppo, k_learn, recurrent=True
    )
    stats, episode = ppo.episode_stats(ps.stats, traj["info"], env)
    replay = buffer_lib.add(state.replay, traj)
    frames = traj["obs"].reshape((-1,) + traj["obs"].shape[2:])
    book = _grow(state.book, frames, cfg)
    wm, wm_metrics = train_world_model(state.wm, book, replay, cfg, k_wm)
    iteration = state.iteration + 1
    env_steps = iteration * cfg.steps_per_iteration
    active = (env_steps > cfg.warmup_steps) & (cfg.imag_updates > 0)

    # Jitted so that the shape probe of its metrics (for the skipped branch's zeros) and the
    # cond share ONE trace of the imagination, the largest part of the update: jax caches a
    # jitted function's trace by argument types, XLA inlines the call.
    @jax.jit
    def run(train, wm, book, replay, key):
      train, m = _imagination(train, wm, book, replay, cfg, key)
      return train, jax.tree.map(jnp.mean, m)

    if cfg.imag_updates:
      ops = (wm, book, replay, k_img)
      zeros = jax.eval_shape(run, train, *ops)[1]
      zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), zeros)
      train, img = jax.lax.cond(active, lambda t: run(t, *ops), lambda t: (t, zeros), train)
    else:
      img = {}
    ps = ps.replace(train=train.replace(apply_fn=train0.apply_fn), stats=stats)
    metrics = {
      **parts,
      **episode,
      **wm_metrics,
      **img,
      "codebook_size": book.size.astype(jnp.float32),
      "imagining": active.astype(jnp.float32),
      "env_steps": env_steps.astype(jnp.float32),
    }
    new = DynaState(ppo=ps, wm=wm, book=book, replay=replay, iteration=iteration)
    return new, metrics

  return update
