"""Robust PPO whose inner minimum over physical parameters is found by simulated quantum search.

Part of the QRIM reconstruction (see :mod:`jaxlab.rl.qrim` and docs/qrim.md; not the paper's
algorithm, which is not public). The uncertainty set U is a grid of physical parameters of a
gymnax task (CartPole: pole half-length and pole mass; Pendulum: mass and length). The outer RL is
jaxlab's PPO, unchanged: every ``phase`` updates it trains on the environment at the current
worst-case parameter ``u* = argmin_u J(pi, u)``, where ``J(pi, u)`` is the policy's mean return
under ``u`` (``episodes`` rollouts). The argmin is the quantum minimum finding of
:func:`jaxlab.rl.qrim.make_minimizer` (or exhaustive), and its oracle queries are counted. The
policy is evaluated on held-out parameters: the midpoints between grid points.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxlab.core.errors import ConfigError
from jaxlab.envs import gymnax as gymnax_envs
from jaxlab.envs import vec

Array = jax.Array

# name -> (parameter names, low, high): ranges around gymnax's nominal values
GRIDS = {
  "cartpole": (("length", "masspole"), (0.3, 0.05), (0.9, 0.3)),
  "pendulum": (("l", "m"), (0.6, 0.6), (1.4, 1.4)),
}


def check_env(name: str) -> str:
  if name not in GRIDS:
    raise ConfigError("env", f"no parameter grid for {name!r}; allowed: {', '.join(GRIDS)}")
  return name


def grid(name: str, set_size: int, held_out: bool = False) -> np.ndarray:
  """``[set_size, 2]`` parameters on an ``a x b`` grid (``a * b = set_size``, ``a`` the largest
  divisor <= sqrt); ``held_out``: the ``(a-1) x (b-1)`` cell midpoints instead."""
  _, lo, hi = GRIDS[check_env(name)]
  a = max(d for d in range(1, int(math.isqrt(set_size)) + 1) if set_size % d == 0)
  b = set_size // a
  xs, ys = np.linspace(lo[0], hi[0], a), np.linspace(lo[1], hi[1], b)
  if held_out:
    xs, ys = (xs[1:] + xs[:-1]) / 2 if a > 1 else xs, (ys[1:] + ys[:-1]) / 2 if b > 1 else ys
  return np.stack(np.meshgrid(xs, ys, indexing="ij"), -1).reshape(-1, 2).astype(np.float32)


def _params(name: str, base, theta):
  if name == "cartpole":
    length, mp = theta[0], theta[1]
    return base.replace(
      length=length, masspole=mp, polemass_length=mp * length, total_mass=base.masscart + mp
    )
  return base.replace(l=theta[0], m=theta[1])


@struct.dataclass
class ParamState:
  inner: vec.VecState
  theta: Array  # [N, 2] physical parameters of each environment


def make(name: str, thetas) -> vec.VecEnv:
  """A VecEnv of ``len(thetas)`` environments, environment i with parameters ``thetas[i]``;
  :func:`set_theta` changes them in a running state (episodes in flight continue under them)."""
  import gymnax

  env, base = gymnax.make(gymnax_envs.resolve(name))
  thetas = jnp.asarray(thetas, jnp.float32)
  n = thetas.shape[0]
  proto = gymnax_envs.make(name, n)
  params_of = jax.vmap(lambda th: _params(name, base, th))

  def reset(key):
    p = params_of(thetas)
    obs, st = jax.vmap(env.reset)(jax.random.split(key, n), p)
    return obs.astype(jnp.float32), ParamState(vec.init_state(st, n), thetas)

  def step(state: ParamState, action, key):
    if not proto.discrete:
      action = jnp.reshape(action, (n, proto.action_dim))
    p = params_of(state.theta)
    obs, st, reward, term, trunc, _ = jax.vmap(env.step)(
      jax.random.split(key, n), state.inner.env, action, p
    )
    done = jnp.logical_or(term, trunc)
    inner, info = vec.track(state.inner, st, reward, done)
    return (
      obs.astype(jnp.float32),
      ParamState(inner, state.theta),
      reward.astype(jnp.float32),
      done,
      info,
    )

  return dataclasses.replace(proto, name=f"{proto.name}[params]", reset=reset, step=step)


def set_theta(state: ParamState, theta) -> ParamState:
  return state.replace(theta=jnp.broadcast_to(jnp.asarray(theta, jnp.float32), state.theta.shape))


def returns_per_param(evaluate, params, key, set_size: int, episodes: int) -> np.ndarray:
  """``J(pi, u)`` for every u: the mean first-episode return of ``episodes`` environments each
  (``evaluate`` from ``ppo_eval.make_evaluate`` on ``make(name, np.repeat(U, episodes, 0))``)."""
  out = evaluate(params, key)
  return np.asarray(out["return"]).reshape(set_size, episodes).mean(1)
