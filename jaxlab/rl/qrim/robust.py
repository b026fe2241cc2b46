"""Robust PPO whose inner minimum over physical parameters is found by simulated quantum search.

Part of the QRIM reconstruction (see :mod:`jaxlab.rl.qrim` and docs/qrim.md; not the paper's
algorithm, which is not public). The uncertainty set U is a grid of physical parameters of a
gymnax task (CartPole: pole half-length and pole mass; Pendulum: mass and length). The outer RL is
jaxlab's PPO, unchanged: every ``phase`` updates it trains on the environment at the current
worst-case parameter ``u* = argmin_u J(pi, u)``, where ``J(pi, u)`` is the policy's mean return
under ``u`` (``episodes`` rollouts). The argmin is the quantum minimum finding of
:func:`jaxlab.rl.qrim.make_minimizer` (or exhaustive), and its oracle queries are counted. The
policy is evaluated on held-out parameters: the midpoints between grid points. :func:`robust_ppo`
runs it and the same PPO on the nominal parameters (part 3 of ``python -m experiments.qrim``).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxlab.core import runtime
from jaxlab.core.errors import ConfigError
from jaxlab.envs import gymnax as gymnax_envs
from jaxlab.envs import vec
from jaxlab.rl import ppo
from jaxlab.rl.ppo import evaluation as ppo_eval
from jaxlab.rl.ppo import policies
from jaxlab.rl.qrim import search as qrim_search

Array = jax.Array

# name -> (parameter names, low, high): ranges around gymnax's nominal values
GRIDS = {
  "cartpole": (("length", "masspole"), (0.3, 0.05), (0.9, 0.3)),
  "pendulum": (("l", "m"), (0.6, 0.6), (1.4, 1.4)),
}
NOMINAL = {"cartpole": (0.5, 0.1), "pendulum": (1.0, 1.0)}  # gymnax's default parameters


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
  env, base = gymnax_envs.import_gymnax().make(gymnax_envs.resolve(name))
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


ARMS = ("nominal", "random", "robust")  # train on: the nominal u | a uniform u | the worst u


def robust_ppo(env_name: str, search, config, set_size: int, updates: int, key: Array) -> dict:
  """Robust PPO (trained at the worst case over the ``set_size`` grid, found by the simulated
  minimiser every ``updates / config.phases`` updates) and nominal PPO, both evaluated on the
  held-out cell midpoints -> ``{"nominal": {...}, "robust": {...}}`` (:func:`train_arm` each).

  ``search``: a :class:`jaxlab.rl.qrim.SearchConfig`; ``config``: :func:`jaxlab.rl.qrim.get_config`
  (``phases``, ``episodes``, ``ppo``)."""
  return {
    arm: train_arm(env_name, search, config, set_size, updates, key, arm)
    for arm in ("nominal", "robust")
  }


def train_arm(
  env_name: str, search, config, set_size: int, updates: int, key: Array, arm: str
) -> dict:
  """One arm of the comparison: ``updates`` PPO updates in ``config.phases`` phases, each phase
  on one parameter: the nominal one (``"nominal"``), a uniform draw from the grid U
  (``"random"``: the control with robust's schedule but no worst-case selection) or the
  minimiser's argmin of ``J(pi, u)`` over U (``"robust"``); then ``J`` on the held-out cell
  midpoints. Every arm starts from the same initial policy and PPO keys for one ``key``."""
  if arm not in ARMS:
    raise ConfigError("arm", f"must be one of {', '.join(ARMS)}, got {arm!r}")
  pc = ppo.PPOConfig.from_config(config.ppo, num_updates=updates)
  grid_u = grid(env_name, set_size)
  held = grid(env_name, set_size, held_out=True)
  nominal = np.asarray([NOMINAL[check_env(env_name)]], np.float32)
  mini = jax.jit(qrim_search.make_minimizer(search))
  mlp = dict(hidden=tuple(config.ppo.mlp.hidden), activation=config.ppo.mlp.activation)

  def evaluator(policy, thetas, episodes):
    env = make(env_name, np.repeat(thetas, episodes, 0))
    ev = ppo_eval.make_evaluate(env, policy, config.ppo.eval_steps, greedy=config.ppo.eval_greedy)
    return lambda params, k: returns_per_param(ev, params, k, len(thetas), episodes)

  per_phase = max(1, updates // config.phases)
  env = make(env_name, np.repeat(nominal, pc.num_envs, 0))
  policy = policies.make("mlp", env.num_actions, env.action_dim, **mlp)
  state = ppo.init(env, policy, pc, key)
  update = jax.jit(ppo.make_update(env, policy, pc))
  on_grid = evaluator(policy, grid_u, config.episodes)
  on_held = evaluator(policy, held, config.episodes)
  queries, chosen, exact, done, phase = [], [], [], 0, 0
  while done < updates:
    if arm == "robust":
      j = on_grid(state.train.params, jax.random.fold_in(key, 100 + phase))
      u, info = mini(jnp.asarray(j, jnp.float32), jax.random.fold_in(key, 200 + phase))
      u = int(u)
      queries.append((int(info["queries"]), int(info["measurements"])))
      exact.append(bool(j[u] <= j.min()))  # a tie with the minimum is as good as the argmin
    elif arm == "random":
      u = int(jax.random.randint(jax.random.fold_in(key, 200 + phase), (), 0, set_size))
    if arm != "nominal":
      chosen.append(u)
      state = state.replace(env_state=set_theta(state.env_state, grid_u[u]))
    n = min(per_phase, updates - done)
    loop = runtime.Loop(n, log_every=n, ckpt_every=0, progress=False, tensorboard=False, plot=False)
    state, _ = runtime.train(state, update, loop, key=jax.random.fold_in(key, 300 + phase))
    done, phase = done + n, phase + 1
  ret = on_held(state.train.params, jax.random.fold_in(key, 999))
  out = {
    "heldout_mean_return": float(ret.mean()),
    "heldout_worst_return": float(ret.min()),
    "heldout_returns": ret.tolist(),
    "train_env_steps": updates * pc.num_envs * pc.num_steps,
    "phase_parameters": [grid_u[u].tolist() for u in chosen],
  }
  if arm == "robust":
    q = np.asarray(queries, float)
    out["inner_oracle_queries"] = float(q[:, 0].mean())
    out["inner_classical_checks"] = float(q[:, 1].mean())
    out["inner_queries_exhaustive"] = set_size
    out["inner_exact_fraction"] = float(np.mean(exact))  # u* as bad as the exhaustive argmin
    out["selections"] = len(queries)
    out["selection_rollouts"] = len(queries) * set_size * config.episodes  # J(pi, u) estimates
  print(f"{arm} PPO: held-out mean {ret.mean():.4g}, worst {ret.min():.4g}", flush=True)
  return out
