"""Robust PPO whose inner minimum over physical parameters is found by simulated quantum search.

Part of the QRIM reconstruction (see :mod:`jaxlab.rl.qrim` and docs/qrim.md; not the paper's
algorithm, which is not public). The uncertainty set U is a grid of physical parameters of a
gymnax task (CartPole: pole half-length and pole mass; Pendulum: mass and length). The outer RL is
jaxlab's PPO, unchanged: every ``phase`` updates it trains on the environment at the current
worst-case parameter ``u* = argmin_u J(pi, u)``, where ``J(pi, u)`` is the policy's mean return
under ``u`` (``episodes`` rollouts). The argmin is the quantum minimum finding of
:func:`jaxlab.rl.qrim.make_minimizer` (or exhaustive), and its oracle queries are counted. The
policy is evaluated on held-out parameters: the midpoints between grid points. :func:`robust_ppo`
runs it and the same PPO on the nominal parameters (part 3 of ``python -m experiments.qrim``);
:func:`robust_ppo_seeds` and :func:`train_arm_seeds` train several seeds' PPO vmapped in one
compiled program, each seed with the keys of its run alone.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

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

# name -> (parameter names, low, high): ranges around gymnax's nominal values. "cartpole_force"
# is CartPole with a wider pole range and a third axis, the push force as a multiple of gymnax's
# force_mag (10 N): three axes a robust policy must cover at once (the gymnax task is CartPole-v1).
GRIDS = {
  "cartpole": (("length", "masspole"), (0.3, 0.05), (0.9, 0.3)),
  "cartpole_force": (("length", "masspole", "force_scale"), (0.25, 0.05, 0.5), (1.0, 0.5, 1.5)),
  "pendulum": (("l", "m"), (0.6, 0.6), (1.4, 1.4)),
}
NOMINAL = {  # gymnax's default parameters
  "cartpole": (0.5, 0.1),
  "cartpole_force": (0.5, 0.1, 1.0),
  "pendulum": (1.0, 1.0),
}
GYMNAX = {"cartpole_force": "cartpole"}  # the gymnax task of a parameter set named otherwise


def check_env(name: str) -> str:
  if name not in GRIDS:
    raise ConfigError("env", f"no parameter grid for {name!r}; allowed: {', '.join(GRIDS)}")
  return name


def grid(name: str, set_size: int, held_out: bool = False) -> np.ndarray:
  """``[set_size, 2]`` parameters on an ``a x b`` grid (``a * b = set_size``, ``a`` the largest
  divisor <= sqrt); ``held_out``: the ``(a-1) x (b-1)`` cell midpoints instead. Three axes:
  ``[set_size, 3]`` on an ``a x a x a`` grid (``set_size`` a cube)."""
  names, lo, hi = GRIDS[check_env(name)]
  if len(names) == 3:
    return _grid3(name, set_size, held_out)
  a = max(d for d in range(1, int(math.isqrt(set_size)) + 1) if set_size % d == 0)
  b = set_size // a
  xs, ys = np.linspace(lo[0], hi[0], a), np.linspace(lo[1], hi[1], b)
  if held_out:
    xs, ys = (xs[1:] + xs[:-1]) / 2 if a > 1 else xs, (ys[1:] + ys[:-1]) / 2 if b > 1 else ys
  return np.stack(np.meshgrid(xs, ys, indexing="ij"), -1).reshape(-1, 2).astype(np.float32)


def _grid3(name: str, set_size: int, held_out: bool) -> np.ndarray:
  _, lo, hi = GRIDS[name]
  a = round(set_size ** (1 / 3))
  if a**3 != set_size:
    raise ConfigError("set_size", f"{name} has 3 parameters: must be a cube, got {set_size}")
  axes = []
  for lo_i, hi_i in zip(lo, hi, strict=True):
    xs = np.linspace(lo_i, hi_i, a)
    axes.append((xs[1:] + xs[:-1]) / 2 if held_out and a > 1 else xs)
  return np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, 3).astype(np.float32)


def outside(name: str, factor: float) -> np.ndarray:
  """Held-out parameters beyond the grid's range: every combination of ``{low / factor, nominal,
  high * factor}`` per axis except all-nominal (``3^d - 1`` points, ``[3^d - 1, d]``), so each
  point lies outside the training range in 1 to d of its coordinates (an extrapolation)."""
  _, lo, hi = GRIDS[check_env(name)]
  if not factor > 1:
    raise ConfigError("factor", f"must be > 1 to lie outside the grid, got {factor}")
  axes = [
    (lo_i / factor, nom, hi_i * factor)
    for lo_i, nom, hi_i in zip(lo, NOMINAL[name], hi, strict=True)
  ]
  pts = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, len(lo))
  nominal = np.asarray(NOMINAL[name])
  return pts[~np.all(pts == nominal, axis=1)].astype(np.float32)


def _params(name: str, base, theta):
  if name in ("cartpole", "cartpole_force"):
    length, mp = theta[0], theta[1]
    base = base.replace(
      length=length, masspole=mp, polemass_length=mp * length, total_mass=base.masscart + mp
    )
    # force_scale multiplies gymnax's force_mag (a base that is not a tracer: read it once)
    return base.replace(force_mag=base.force_mag * theta[2]) if name == "cartpole_force" else base
  return base.replace(l=theta[0], m=theta[1])


@struct.dataclass
class ParamState:
  inner: vec.VecState
  theta: Array  # [N, 2] physical parameters of each environment


def make(name: str, thetas) -> vec.VecEnv:
  """A VecEnv of ``len(thetas)`` environments, environment i with parameters ``thetas[i]``;
  :func:`set_theta` changes them in a running state (episodes in flight continue under them)."""
  task = GYMNAX.get(name, name)
  env, base = gymnax_envs.import_gymnax().make(gymnax_envs.resolve(task))
  thetas = jnp.asarray(thetas, jnp.float32)
  n = thetas.shape[0]
  proto = gymnax_envs.make(task, n)
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


# train on: the nominal u | a uniform u | the worst u (simulated quantum minimiser) | the worst u
# (classical argmin over U, |U| evaluations of f: the exhaustive reference)
ARMS = ("nominal", "random", "robust", "exhaustive")


def robust_ppo(env_name: str, search, config, set_size: int, updates: int, key: Array) -> dict:
  """Robust PPO (trained at the worst case over the ``set_size`` grid, found by the simulated
  minimiser every ``updates / config.phases`` updates) and nominal PPO, both evaluated on the
  held-out cell midpoints -> ``{"nominal": {...}, "robust": {...}}`` (:func:`train_arm` each).

  ``search``: a :class:`jaxlab.rl.qrim.SearchConfig`; ``config``: :func:`jaxlab.rl.qrim.get_config`
  (``phases``, ``episodes``, ``ppo``)."""
  return robust_ppo_seeds(env_name, search, config, set_size, updates, key[None])[0]


def robust_ppo_seeds(
  env_name: str, search, config, set_size: int, updates: int, keys: Array
) -> list[dict]:
  """:func:`robust_ppo` of every key of ``keys`` (one per seed, ``[seeds]``), each arm's PPO
  trained for all seeds vmapped in one compiled program: entry ``i`` is
  ``robust_ppo(..., keys[i])`` up to float rounding. The arms share their compiled programs."""
  setup = _Setup.build(env_name, search, config, set_size, updates, keys)
  arms = {arm: _train_arm(setup, arm) for arm in ("nominal", "robust")}
  return [{arm: arms[arm][i] for arm in arms} for i in range(len(keys))]


def train_arm(
  env_name: str, search, config, set_size: int, updates: int, key: Array, arm: str
) -> dict:
  """One arm of the comparison: ``updates`` PPO updates in ``config.phases`` phases, each phase
  on one parameter: the nominal one (``"nominal"``), a uniform draw from the grid U
  (``"random"``: the control with robust's schedule but no worst-case selection) or the
  minimiser's argmin of ``J(pi, u)`` over U (``"robust"``); then ``J`` on the held-out cell
  midpoints. Every arm starts from the same initial policy and PPO keys for one ``key``."""
  return train_arm_seeds(env_name, search, config, set_size, updates, key[None], arm)[0]


def train_arm_seeds(
  env_name: str,
  search,
  config,
  set_size: int,
  updates: int,
  keys: Array,
  arm: str,
  held_out=None,
  held_episodes: int | None = None,
) -> list[dict]:
  """:func:`train_arm` of every key of ``keys`` (one per seed, ``[seeds]``): the seeds' PPO
  phases train vmapped in one compiled program (:mod:`jaxlab.core.seeds`), their ``J(pi, u)``
  estimates and held-out evaluations are one vmapped program each, and the robust arm's
  minimisations run one seed after another (host side). Entry ``i`` is
  ``train_arm(..., keys[i], arm)`` up to the float rounding of batched kernels, which PPO
  amplifies over tens of updates; one key runs without a seed axis, exactly as ``train_arm``.

  ``held_out``: ``[points, d]`` evaluation parameters instead of the cell midpoints (e.g.
  :func:`outside`), each evaluated by ``held_episodes`` rollouts (default ``config.episodes``).
  The ``exhaustive`` arm is ``robust`` with the classical argmin (``|U|`` evaluations of f)."""
  if arm not in ARMS:
    raise ConfigError("arm", f"must be one of {', '.join(ARMS)}, got {arm!r}")
  setup = _Setup.build(
    env_name,
    search,
    config,
    set_size,
    updates,
    keys,
    held_out=held_out,
    held_episodes=held_episodes,
  )
  return _train_arm(setup, arm)


@dataclasses.dataclass
class _Setup:
  """What every arm of one comparison shares: the grids, the environments, the policy, the
  compiled PPO update and evaluations, the initial state, and the seeds' keys."""

  config: Any
  set_size: int
  updates: int
  pc: ppo.PPOConfig
  grid_u: np.ndarray
  mini: Any
  update: Any
  on_grid: Any  # (params, keys) -> J on U: [U], or [seeds, U]
  on_held: Any  # the same on the held-out cell midpoints
  state: Any  # the initial PPO state (copied by each arm: a chunk may donate its input)
  keys: Array  # [seeds], or one key (no seed axis)
  seeds: int
  fold: Any  # (keys, i) -> the stream i of every seed's key

  @classmethod
  def build(
    cls, env_name, search, config, set_size, updates, keys, held_out=None, held_episodes=None
  ) -> _Setup:
    several = len(keys) > 1
    pc = ppo.PPOConfig.from_config(config.ppo, num_updates=updates)
    nominal = np.asarray([NOMINAL[check_env(env_name)]], np.float32)
    mlp = dict(hidden=tuple(config.ppo.mlp.hidden), activation=config.ppo.mlp.activation)
    env = make(env_name, np.repeat(nominal, pc.num_envs, 0))
    policy = policies.make("mlp", env.num_actions, env.action_dim, **mlp)
    if several:
      state = ppo.init_seeds(env, policy, pc, keys)
    else:
      keys = keys[0]
      state = ppo.init(env, policy, pc, keys)

    def evaluator(thetas, episodes):
      env = make(env_name, np.repeat(thetas, episodes, 0))
      ev = ppo_eval.make_evaluate(env, policy, config.ppo.eval_steps, greedy=config.ppo.eval_greedy)
      if not several:
        return lambda params, k: returns_per_param(ev, params, k, len(thetas), episodes)
      ev_seeds = jax.jit(jax.vmap(ev))

      def on(params, k):  # each seed's row as returns_per_param computes it alone
        out = np.asarray(ev_seeds(params, k)["return"])
        return np.stack([r.reshape(len(thetas), episodes).mean(1) for r in out])

      return on

    grid_u = grid(env_name, set_size)
    return cls(
      config=config,
      set_size=set_size,
      updates=updates,
      pc=pc,
      grid_u=grid_u,
      mini=jax.jit(qrim_search.make_minimizer(search)),
      update=jax.jit(ppo.make_update(env, policy, pc)),
      on_grid=evaluator(grid_u, config.episodes),
      on_held=evaluator(
        grid(env_name, set_size, held_out=True) if held_out is None else np.asarray(held_out),
        held_episodes or config.episodes,
      ),
      state=state,
      keys=keys,
      seeds=len(keys) if several else 1,
      fold=jax.vmap(jax.random.fold_in, in_axes=(0, None)) if several else jax.random.fold_in,
    )


def _train_arm(setup: _Setup, arm: str) -> list[dict]:
  """:func:`train_arm_seeds` of ``arm`` on a built setup."""
  c, keys, fold, n_seeds = setup.config, setup.keys, setup.fold, setup.seeds
  grid_u, updates, set_size = setup.grid_u, setup.updates, setup.set_size
  several = n_seeds > 1
  state = jax.tree.map(lambda x: jnp.copy(x) if isinstance(x, jax.Array) else x, setup.state)
  per_phase = max(1, updates // c.phases)
  runs = [{"queries": [], "chosen": [], "exact": []} for _ in range(n_seeds)]
  done, phase = 0, 0
  while done < updates:
    if arm != "nominal":
      if arm in ("robust", "exhaustive"):
        js = np.reshape(setup.on_grid(state.train.params, fold(keys, 100 + phase)), (n_seeds, -1))
      ks = fold(keys, 200 + phase)
      ks = list(ks) if several else [ks]
      us = []
      for i, r in enumerate(runs):
        if arm in ("robust", "exhaustive"):
          j = js[i]
          if arm == "robust":
            u, info = setup.mini(jnp.asarray(j, jnp.float32), ks[i])
          else:  # every f(u) evaluated classically: |U| queries (search.exhaustive's count)
            u, info = qrim_search.exhaustive(jnp.asarray(j, jnp.float32))
          u = int(u)
          r["queries"].append((int(info["queries"]), int(info["measurements"])))
          r["exact"].append(bool(j[u] <= j.min()))  # a tie with the minimum is as good as argmin
        else:
          u = int(jax.random.randint(ks[i], (), 0, set_size))
        r["chosen"].append(u)
        us.append(u)
      if several:
        thetas = jnp.asarray(grid_u[np.asarray(us)])
        state = state.replace(env_state=jax.vmap(set_theta)(state.env_state, thetas))
      else:
        state = state.replace(env_state=set_theta(state.env_state, grid_u[us[0]]))
    n = min(per_phase, updates - done)
    loop = runtime.Loop(n, log_every=n, ckpt_every=0, progress=False, tensorboard=False, plot=False)
    labels = tuple(range(n_seeds)) if several else None  # in memory: no per-seed files
    state, _ = runtime.train(state, setup.update, loop, key=fold(keys, 300 + phase), seeds=labels)
    done, phase = done + n, phase + 1
  rets = np.reshape(setup.on_held(state.train.params, fold(keys, 999)), (n_seeds, -1))
  outs = []
  for ret, r in zip(rets, runs, strict=True):
    out = {
      "heldout_mean_return": float(ret.mean()),
      "heldout_worst_return": float(ret.min()),
      "heldout_returns": ret.tolist(),
      "train_env_steps": updates * setup.pc.num_envs * setup.pc.num_steps,
      "phase_parameters": [grid_u[u].tolist() for u in r["chosen"]],
    }
    if arm in ("robust", "exhaustive"):
      q = np.asarray(r["queries"], float)
      out["inner_oracle_queries"] = float(q[:, 0].mean())
      out["inner_classical_checks"] = float(q[:, 1].mean())
      out["inner_total_queries"] = float(q.sum(1).mean())  # oracle queries + classical checks
      out["inner_queries_exhaustive"] = set_size
      out["inner_exact_fraction"] = float(np.mean(r["exact"]))  # as bad as the exhaustive argmin
      out["selections"] = len(r["queries"])
      out["selection_rollouts"] = len(r["queries"]) * set_size * c.episodes  # J estimates
    outs.append(out)
  means = f"held-out mean {rets.mean(1).mean():.4g}, worst {rets.min(1).mean():.4g}"
  print(f"{arm} PPO: {means}" + (f" (means over {n_seeds} seeds)" if several else ""), flush=True)
  return outs
