"""R4's offline and online protocols (arXiv 2601.09236, Section 5) on gymnax with jaxlab's PPO.

Offline: rate a pool of behaviour trajectories, learn the reward (:func:`jaxlab.rl.r4.fit`), then
train PPO (:mod:`jaxlab.rl.ppo`, unchanged) on the learned reward through :func:`reward_env`, a
:class:`jaxlab.envs.vec.VecEnv` wrapper whose reward is the ensemble-mean learned reward divided by its
standard deviation over the rated steps (a positive scale keeps the order of returns, and no
shift: a shift would change which episode lengths pay). The wrapper's state carries the reward
parameters, so the online protocol swaps in a new reward model between PPO phases without
recompiling. ``episode_return`` of the PPO metrics stays the TRUE return (the inner environment
tracks it). Online: rounds of (roll out the current policy, rate the new trajectories, refit the
reward ensemble on all ratings so far, continue PPO). See docs/r4.md.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxlab.envs import vec
from jaxlab.rl import r4
from jaxlab.rl.ppo import policies
from jaxlab.rl.r4 import data as r4_data

Array = jax.Array


@struct.dataclass
class RewardEnvState:
  inner: Any  # the wrapped environment's VecState
  obs: Array  # the current observations (the reward is r(s_t, a_t))
  params: Any  # reward-ensemble parameters
  scale: Array  # 1 / std of the learned reward over the rated steps


def reward_env(env: vec.VecEnv, config: r4.RewardConfig, params, scale) -> tuple[vec.VecEnv, Any]:
  """``env`` with the learned reward; returns the wrapper and a function ``set_reward(state,
  params, scale)`` that swaps the reward model in a running state."""
  apply = r4.member_apply(config)

  def learned(params, obs, action):
    x = r4.features(obs, action, env.num_actions)
    return jnp.mean(jax.vmap(lambda p: apply(p, x))(params), axis=0)

  def reset(key):
    obs, inner = env.reset(key)
    return obs, RewardEnvState(inner, obs, params, jnp.asarray(scale, jnp.float32))

  def step(state: RewardEnvState, action, key):
    obs, inner, _, done, info = env.step(state.inner, action, key)
    rew = learned(state.params, state.obs, action) * state.scale
    return obs, state.replace(inner=inner, obs=obs), rew.astype(jnp.float32), done, info

  def set_reward(state: RewardEnvState, params, scale):
    return state.replace(params=params, scale=jnp.asarray(scale, jnp.float32))

  wrapped = dataclasses.replace(env, name=f"{env.name}+learned-reward", reset=reset, step=step)
  return wrapped, set_reward


def features_of(traj: r4_data.Trajectories, num_actions: int) -> np.ndarray:
  return np.asarray(r4.features(jnp.asarray(traj.obs), jnp.asarray(traj.action), num_actions))


def dataset(traj, ratings, num_actions: int, prefer=None) -> dict:
  """The training arrays of :func:`r4.make_dataset` from trajectories and dense ratings; the OOD
  box is the range of the observed features (actions uniform); Bradley-Terry's teacher compares
  ``prefer`` (default: the true returns)."""
  feats = features_of(traj, num_actions)
  flat = feats.reshape(-1, feats.shape[-1])[traj.mask.reshape(-1) > 0]
  prefer = traj.true_return if prefer is None else prefer
  return r4.make_dataset(feats, traj.mask, ratings, prefer, flat.min(0), flat.max(0), num_actions)


def reward_scale(state, data: dict) -> float:
  """``1 / std`` of the learned per-step reward over the rated (unmasked) steps."""
  x = data["feats"].reshape(-1, data["feats"].shape[-1])
  r = np.asarray(r4.reward(state, state.params, x))[np.asarray(data["mask"]).reshape(-1) > 0]
  return float(1.0 / max(np.std(r), 1e-6))


def policy_actor(policy, params):
  """``actor(obs[N, ...], key)`` sampling a (feed-forward) PPO policy, for rating rollouts."""

  def actor(obs, key):
    carry = policy.initial_carry(obs.shape[0])
    reset = jnp.ones((1, obs.shape[0]), bool)
    _, dist, _ = policy.apply({"params": params}, carry, obs[None], reset)
    return policies.sample(jax.tree.map(lambda x: x[0], dist), key)

  return actor
