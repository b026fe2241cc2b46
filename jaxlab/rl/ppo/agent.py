"""PPO (arXiv 1707.06347) for vectorised JAX environments, one jitted update per iteration.

One call of ``update(state, batch, key) -> (state, metrics)`` is a whole PPO iteration in the
PureJaxRL order: a rollout of ``num_steps`` steps in ``num_envs`` environments, GAE
(arXiv 1506.02438), then ``epochs`` x ``minibatches`` gradient steps on the clipped loss. The
environments, their observations and the policy's recurrent carry live in :class:`PPOState`, so
``jaxlab.core.runtime.train`` runs it like any other update (``batch`` is unused), chunked,
checkpointed and resumable bit for bit::

    c = ppo.get_config()
    env = jaxlab.envs.gymnax.make("cartpole", 16)
    policy = ppo.make_policy("mlp", env, c)  # c.mlp's sizes
    config = PPOConfig.from_config(c, num_envs=16, num_steps=128, num_updates=250)
    state = ppo.init(env, policy, config, key)
    state, result = runtime.train(state, ppo.make_update(env, policy, config), Loop(250), key=key)

Data parallelism: every per-environment array (environment state, observations, carry, rollout)
carries the logical ``batch`` axis on its environment dimension, so on a mesh
(:func:`state_sharding`) each device steps its share of the environments and XLA averages the
gradients of the global minibatch mean across devices. Minibatches are drawn so that no example
crosses devices and the result does not depend on the device count (see :func:`_minibatches`).
See docs/ppo.md.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from jaxlab.core import sharding
from jaxlab.core.errors import require
from jaxlab.core.train_state import TrainState
from jaxlab.rl.ppo import policies, rollouts
from jaxlab.rl.ppo.loss import LOSS_PARTS, LossTerms, gae, ppo_loss

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class PPOConfig:
  """PPO hyperparameters, without defaults: build it with :meth:`from_config` from
  :func:`jaxlab.rl.ppo.get_config` (the one declaration of the defaults, documented there)."""

  num_envs: int  # environments stepped in parallel (split over the mesh's batch axes)
  num_steps: int  # rollout length per environment and iteration
  epochs: int  # passes over each rollout
  minibatches: int  # gradient steps per epoch
  gamma: float  # discount
  gae_lambda: float  # GAE lambda
  clip_eps: float  # ratio clip (and value clip) epsilon
  ent_coef: float  # entropy bonus weight
  vf_coef: float  # value loss weight
  max_grad_norm: float  # global gradient-norm clip
  lr: float  # Adam learning rate (eps 1e-5)
  anneal_lr: bool  # decay the learning rate linearly to 0 over num_updates iterations
  num_updates: int  # iterations of the whole run (the length of the decay; needed to anneal)
  normalize_advantages: bool  # per-minibatch advantage normalisation
  clip_value: bool  # PureJaxRL's clipped value loss
  unroll: bool  # unroll the epoch and minibatch loops (CNN policies on CPU; see get_config)

  @classmethod
  def from_config(cls, config: Mapping[str, Any], **overrides) -> PPOConfig:
    """The fields of a (ml_collections) config that PPO knows, then ``overrides``; other fields
    are ignored. ``num_updates``, when neither field nor override, is
    ``total_timesteps // (num_envs * num_steps)`` (:func:`jaxlab.rl.ppo.config.num_updates`).

    ``PPOConfig.from_config(ppo.get_config(), num_envs=16, lr=1e-3)`` is the default config
    with two changes.
    """
    from jaxlab.rl.ppo.config import num_updates

    names = [f.name for f in dataclasses.fields(cls)]
    kw = {k: config[k] for k in config.keys() if k in names}
    kw.update(overrides)
    if "num_updates" not in kw and "total_timesteps" in config:
      kw["num_updates"] = num_updates({"total_timesteps": config["total_timesteps"], **kw})
    missing = [n for n in names if n not in kw]
    if missing:
      raise TypeError(f"PPOConfig.from_config: no value for {', '.join(missing)}")
    return cls(**kw)


def validate(config: PPOConfig, recurrent: bool, prefix: str = "config") -> None:
  """Raises ConfigError naming the bad field (``config.num_steps`` etc.)."""
  c = config
  for name in ("num_envs", "num_steps", "epochs", "minibatches"):
    require(getattr(c, name) >= 1, f"{prefix}.{name}", f"must be >= 1, got {getattr(c, name)}")
  require(
    c.num_updates >= 1 or not c.anneal_lr,
    f"{prefix}.num_updates",
    f"must be >= 1 (the run's iterations, the length of the learning-rate decay) when "
    f"anneal_lr is set, got {c.num_updates}",
  )
  for name in ("lr", "max_grad_norm", "clip_eps"):
    require(getattr(c, name) > 0, f"{prefix}.{name}", f"must be > 0, got {getattr(c, name)}")
  for name in ("gamma", "gae_lambda"):
    v = getattr(c, name)
    require(0 <= v <= 1, f"{prefix}.{name}", f"must be in [0, 1], got {v}")
  for name in ("ent_coef", "vf_coef"):
    require(getattr(c, name) >= 0, f"{prefix}.{name}", f"must be >= 0, got {getattr(c, name)}")
  if recurrent:  # minibatches are whole sequences of num_envs / minibatches environments
    require(
      c.num_envs % c.minibatches == 0,
      f"{prefix}.minibatches",
      f"a recurrent policy splits the {c.num_envs} environments into minibatches; "
      f"{c.minibatches} does not divide them",
    )
  else:  # minibatches are num_steps / minibatches steps of every environment
    require(
      c.num_steps % c.minibatches == 0,
      f"{prefix}.minibatches",
      f"{c.minibatches} does not divide num_steps={c.num_steps}",
    )


@struct.dataclass
class PPOState:
  """Everything a PPO run carries between iterations (checkpointed as one pytree)."""

  train: TrainState  # the policy network, its parameters and optimizer
  env_state: Any  # the batched environment state (with running episode statistics)
  obs: Array  # [N, *obs_shape] current observations
  reset: Array  # bool[N]: obs starts an episode (recurrent memory is cleared before it)
  carry: Any  # the policy's recurrent state for the N environments (() for an MLP)
  stats: dict  # last known episode statistics (kept when a rollout finishes no episode)


def is_recurrent(policy) -> bool:
  # from the carry's shapes: built eagerly, a carry is a few small XLA programs
  return jax.tree.leaves(jax.eval_shape(lambda: policy.initial_carry(1))) != []


def make_optimizer(config: PPOConfig) -> optax.GradientTransformation:
  """Adam with global-norm clipping; the learning rate decays linearly per iteration."""
  per_update = config.epochs * config.minibatches

  def schedule(count):
    frac = 1.0 - (count // per_update) / max(config.num_updates, 1)
    return config.lr * jnp.clip(frac, 0.0, 1.0)

  lr = schedule if config.anneal_lr else config.lr
  return optax.chain(optax.clip_by_global_norm(config.max_grad_norm), optax.adam(lr, eps=1e-5))


def init(env, policy, config: PPOConfig, key: Array) -> PPOState:
  """Resets the environments and initialises the network (``key``: raw uint32[2] or typed).

  Runs as one compiled program (cached per ``(env, policy, config)``): called eagerly, the
  environments' reset ran op by op, which for Craftax's world generation took minutes on a CPU
  (139 s vs 39 s compiled, 64 environments). The result is the same bits as op by op (tested);
  XLA:CPU's lowest backend optimisation level would halve the compile time but changes bits.
  """
  validate(config, is_recurrent(policy))
  require(
    env.num_envs == config.num_envs,
    "config.num_envs",
    f"{config.num_envs} but the environment was made with {env.num_envs}",
  )
  state = _compiled_init(env, policy, config)(key)
  # TrainState.create's step is the Python int 0; a compiled program can only return an array.
  return state.replace(train=state.train.replace(step=0))


def init_seeds(env, policy, config: PPOConfig, keys: Array) -> PPOState:
  """:func:`init` of every seed's key (``keys``: ``[seeds, 2]``) as one compiled program: the
  states stacked on a leading seed axis, seed ``i`` the state ``init(..., keys[i])`` gives."""
  validate(config, is_recurrent(policy))
  state = jax.jit(jax.vmap(lambda key: _init(env, policy, config, key)))(keys)
  return state.replace(train=state.train.replace(step=jnp.zeros(keys.shape[0], jnp.int32)))


_INIT_FNS: dict = {}
_INIT_FNS_KEPT = 8  # the newest few: environments' closures may hold arrays


def _compiled_init(env, policy, config: PPOConfig) -> Callable:
  fn = jax.jit(lambda key: _init(env, policy, config, key))
  try:
    cache_key = (env, policy, config)
    return _INIT_FNS.setdefault(cache_key, fn)
  except TypeError:  # an unhashable environment or policy: compiled for this call only
    return fn
  finally:
    while len(_INIT_FNS) > _INIT_FNS_KEPT:
      _INIT_FNS.pop(next(iter(_INIT_FNS)))


def _init(env, policy, config: PPOConfig, key: Array) -> PPOState:
  k_env, k_net = jax.random.split(key)
  obs, env_state = env.reset(k_env)
  reset = jnp.ones((config.num_envs,), bool)
  carry = policy.initial_carry(config.num_envs)
  params = policy.init(k_net, carry, obs[None], reset[None])["params"]
  stats = {
    "episode_return": jnp.zeros((), jnp.float32),
    "episode_length": jnp.zeros((), jnp.float32),
  }
  if env.achievement_names:
    stats["achievements"] = jnp.zeros((len(env.achievement_names),), jnp.float32)
  train = TrainState.create(policy, params, make_optimizer(config))
  return PPOState(train=train, env_state=env_state, obs=obs, reset=reset, carry=carry, stats=stats)


def state_sharding(state: PPOState, mesh, num_envs: int) -> PPOState:
  """Shardings for :class:`PPOState`: per-environment leaves split along ``batch``, the rest
  (network, optimizer, statistics) replicated."""

  def per_env(x):
    names = ("batch",) + (None,) * (x.ndim - 1) if x.ndim and x.shape[0] == num_envs else None
    return sharding.named_sharding(mesh, names)

  rep = lambda _: sharding.replicated(mesh)
  return PPOState(
    train=jax.tree.map(rep, state.train),
    env_state=jax.tree.map(per_env, state.env_state),
    obs=per_env(state.obs),
    reset=per_env(state.reset),
    carry=jax.tree.map(per_env, state.carry),
    stats=jax.tree.map(rep, state.stats),
  )


def _constrain(tree, axis: int, mesh):
  """Pins the environment dimension ``axis`` of every leaf to the ``batch`` logical axis."""
  if mesh is None:
    return tree

  def leaf(x):
    names = (None,) * axis + ("batch",) + (None,) * (x.ndim - axis - 1)
    return sharding.constrain(x, names, mesh)

  return jax.tree.map(leaf, tree)


def rollout(state: PPOState, env, config: PPOConfig, key: Array):
  """``num_steps`` real environment steps -> ``(state, trajectory)``; the trajectory is a dict of
  ``[T, N]`` records (``obs, reset, action, log_prob, value, reward, done, info``)."""
  init = (state.env_state, state.obs, state.reset, state.carry)
  act = rollouts.policy_actor(state.train)
  (env_state, obs, reset, pcarry), traj = rollouts.rollout(
    env.step, act, init, key, config.num_steps
  )
  traj = {**traj, "reward": traj["reward"].astype(jnp.float32)}
  return state.replace(env_state=env_state, obs=obs, reset=reset, carry=pcarry), traj


def _minibatches(data: dict, carry0: Any, config: PPOConfig, recurrent: bool, key: Array):
  """Splits a rollout ``[T, N, ...]`` into ``minibatches`` shuffled parts (leading axis M).

  Feed-forward: every minibatch holds ``T / M`` steps of EVERY environment, the steps drawn by an
  independent permutation per environment. Recurrent: environments are grouped in blocks of M
  neighbours and each block sends one (random) member to each minibatch, which gets whole
  ``T``-step sequences and their initial carry. Either way an example never leaves the device of
  its environment (the ``batch`` sharding of N is kept; for the recurrent case when N is a
  multiple of M x devices) and the minibatches do not depend on the device count, unlike a global
  shuffle of all ``T x N`` examples (PureJaxRL), which moves the whole rollout between devices.
  """
  t_len, n, m = config.num_steps, config.num_envs, config.minibatches
  if not recurrent:
    perm = jax.vmap(lambda k: jax.random.permutation(k, t_len))(jax.random.split(key, n)).T

    def split_time(x):
      idx = perm.reshape(perm.shape + (1,) * (x.ndim - 2))
      x = jnp.take_along_axis(x, idx, axis=0)
      return x.reshape((m, t_len // m) + x.shape[1:])

    return jax.tree.map(split_time, data), carry0
  perm = jax.vmap(lambda k: jax.random.permutation(k, m))(jax.random.split(key, n // m))

  def split_envs(x, env_axis):
    x = x.reshape(x.shape[:env_axis] + (n // m, m) + x.shape[env_axis + 1 :])
    shape = (1,) * env_axis + perm.shape + (1,) * (x.ndim - env_axis - 2)
    x = jnp.take_along_axis(x, perm.reshape(shape), axis=env_axis + 1)
    return jnp.moveaxis(x, env_axis + 1, 0)

  data = jax.tree.map(lambda x: split_envs(x, 1), data)
  return data, jax.tree.map(lambda x: split_envs(x, 0), carry0)


def _loss_fn(params, batch: dict, train: TrainState, config: PPOConfig):
  _, dist, value = train(batch["carry"], batch["obs"], batch["reset"], params=params)
  log_prob, entropy = policies.log_prob_entropy(dist, batch["action"])
  terms = LossTerms(
    log_prob=log_prob,
    value=value,
    entropy=entropy,
    old_log_prob=batch["log_prob"],
    old_value=batch["value"],
    advantage=batch["advantage"],
    target=batch["target"],
  )
  return ppo_loss(
    terms,
    config.clip_eps,
    config.vf_coef,
    config.ent_coef,
    config.normalize_advantages,
    config.clip_value,
  )


def scan(f, carry, xs, unroll: bool):
  """``lax.scan``, or with ``unroll`` a Python loop (no XLA loop at all, even for length 1)."""
  return (_unrolled_scan if unroll else jax.lax.scan)(f, carry, xs)


def _unrolled_scan(f, carry, xs):
  ys = []
  for i in range(jax.tree.leaves(xs)[0].shape[0]):
    carry, y = f(carry, jax.tree.map(lambda x: x[i], xs))
    ys.append(y)
  return carry, jax.tree.map(lambda *y: jnp.stack(y), *ys)


def episode_stats(stats: dict, info: dict, env) -> tuple[dict, dict]:
  """Episode statistics of a real rollout's ``info`` (see :func:`make_update`'s metrics): means
  over the episodes that finished in this rollout (previous values if none did)."""
  done = info["returned_episode"].astype(jnp.float32)
  count = jnp.sum(done)
  have, denom = count > 0, jnp.maximum(count, 1.0)
  mean = lambda x: jnp.sum(x.astype(jnp.float32)) / denom
  new = {
    "episode_return": jnp.where(have, mean(info["episode_return"]), stats["episode_return"]),
    "episode_length": jnp.where(have, mean(info["episode_length"]), stats["episode_length"]),
  }
  metrics = {**new, "episodes": count}
  if "achievements" in stats:
    rates = jnp.sum(info["achievements"] * done[..., None], axis=(0, 1)) / denom
    new["achievements"] = jnp.where(have, rates, stats["achievements"])
    metrics["score"] = crafter_score(new["achievements"])
  if env.max_return:
    metrics["return_pct"] = 100.0 * new["episode_return"] / env.max_return
  return new, metrics


def crafter_score(success_rates):
  """Crafter score (Hafner 2021, arXiv 2109.06780): ``exp(mean_i ln(1 + s_i)) - 1``, s_i in %.

  ``success_rates`` are fractions in [0, 1] (episodes unlocking achievement i at least once).
  """
  xp = jnp if isinstance(success_rates, jax.Array) else np
  s = 100.0 * xp.asarray(success_rates, dtype=xp.float32)
  return xp.exp(xp.mean(xp.log1p(s))) - 1.0


def learn(
  train: TrainState,
  traj: dict,
  carry0,
  last_value,
  config: PPOConfig,
  key,
  *,
  mesh=None,
  recurrent: bool | None = None,
):
  """GAE then ``epochs`` x ``minibatches`` PPO steps on a rollout GIVEN AS DATA.

  The hook for agents that train on rollouts not stepped here, e.g. imagined by a world model
  (``jaxlab.rl.itc``). ``traj``: ``[T, N]`` records ``obs, reset, action, log_prob, value, reward,
  done`` (``config.num_steps = T``, ``config.num_envs = N``); ``carry0``: the policy's carry
  before ``traj["obs"][0]``; ``last_value``: ``V`` of the state after the last step ``[N]``.
  Returns ``(train, mean loss parts)``.
  """
  if recurrent is None:
    recurrent = jax.tree.leaves(carry0) != []
  adv, target = gae(
    traj["reward"], traj["value"], traj["done"], last_value, config.gamma, config.gae_lambda
  )
  keep = ("obs", "reset", "action", "log_prob", "value")
  data = {**{k: traj[k] for k in keep}, "advantage": adv, "target": target}

  # the loops call their bodies directly (no frame between a loop and its body)
  loop = _unrolled_scan if config.unroll else jax.lax.scan

  def epoch(train, k):
    mbs, carries = _minibatches(data, carry0, config, recurrent, k)
    mbs, carries = _constrain(mbs, 2, mesh), _constrain(carries, 1, mesh)

    def minibatch(train, xs):
      # an MLP's carry is () and the same for every minibatch: only a recurrent one is scanned
      mb, carry = xs if recurrent else (xs, carries)
      grad_fn = jax.value_and_grad(_loss_fn, has_aux=True)
      (_, parts), grads = grad_fn(train.params, {**mb, "carry": carry}, train, config)
      # one stacked vector, not one stacked scalar per part: each is an update per minibatch
      return train.apply_gradients(grads=grads), jnp.stack([parts[k] for k in LOSS_PARTS])

    return loop(minibatch, train, (mbs, carries) if recurrent else mbs)

  train, parts = loop(epoch, train, jax.random.split(key, config.epochs))
  means = jnp.mean(parts, axis=(0, 1))
  return train, {k: means[i] for i, k in enumerate(LOSS_PARTS)}


def make_update(env, policy, config: PPOConfig, mesh=None, *, gated: bool = False) -> Callable:
  """The PPO iteration as ``update(state, batch, key) -> (state, metrics)`` (``batch`` unused).

  Metrics: loss parts (means over the epochs' minibatches), ``episode_return`` and
  ``episode_length`` of the episodes finished in this rollout, their count ``episodes``,
  ``env_steps`` so far, and for Craftax ``score`` / ``return_pct``.

  ``gated``: ``batch`` is a bool scalar and the learning step runs under ``lax.cond`` only when it
  is True (the same keys and numbers as the ungated update); when False the iteration is a
  rollout that leaves the network and optimizer as they were (loss parts 0). Training and every
  rollout without learning (DiCode's held-out evaluation and level scoring) then run ONE
  compiled program, with the flag as data.
  """
  recurrent = is_recurrent(policy)
  validate(config, recurrent)
  env_steps_per_update = config.num_envs * config.num_steps

  # jitted, with everything it reads as arguments, so that the gated update's shape probe and
  # its cond branch share ONE trace of the learning step; XLA inlines the call
  @jax.jit
  def fit(train, traj, carry0, last_value, key):
    return learn(train, traj, carry0, last_value, config, key, mesh=mesh, recurrent=recurrent)

  def update(state: PPOState, batch, key):
    k_roll, k_learn = jax.random.split(key)
    carry0 = state.carry
    state, traj = rollout(state, env, config, k_roll)
    traj = _constrain(traj, 1, mesh)
    _, _, last_value = state.train(state.carry, state.obs[None], state.reset[None])
    if not gated:
      train, parts = learn(
        state.train, traj, carry0, last_value[0], config, k_learn, mesh=mesh, recurrent=recurrent
      )
    else:
      used = {k: traj[k] for k in ("obs", "reset", "action", "log_prob", "value", "reward", "done")}
      args = (state.train, used, carry0, last_value[0], k_learn)
      shapes = jax.eval_shape(fit, *args)[1]
      skip = lambda train, *_: (train, jax.tree.map(lambda p: jnp.zeros(p.shape, p.dtype), shapes))
      train, parts = jax.lax.cond(batch, fit, skip, *args)
    stats, episode = episode_stats(state.stats, traj["info"], env)
    iteration = train.step // (config.epochs * config.minibatches)
    env_steps = iteration.astype(jnp.float32) * env_steps_per_update
    metrics = {**parts, **episode, "env_steps": env_steps}
    return state.replace(train=train, stats=stats), metrics

  return update
