"""gymnax classic-control and MinAtar environments behind :class:`jaxlab.envs.vec.VecEnv`.

gymnax (Lange 2022, github.com/RobertTLange/gymnax) implements the environments in JAX. Its 1.0
`step` returns six values `(obs, state, reward, terminated, truncated, info)` and already resets a
finished environment (computing a fresh reset every step, which is cheap for these small
environments); this module vmaps it over N environments, turns `terminated | truncated` into
`done` and adds the episode statistics of `jaxlab.envs.vec`. Observations are float32 (MinAtar's
boolean frames included). Continuous actions are clipped to the action bounds by the environments
themselves. Names and layout: docs/online_envs.md.
"""

from __future__ import annotations

import importlib.util
import sys
import types

import jax
import jax.numpy as jnp

from jaxlab.core.errors import ConfigError
from jaxlab.envs import vec

# Friendly name -> gymnax id. The gymnax ids themselves are accepted too.
ENVS = {
  "cartpole": "CartPole-v1",
  "pendulum": "Pendulum-v1",
  "acrobot": "Acrobot-v1",
  "mountaincar": "MountainCar-v0",
  "mountaincar-continuous": "MountainCarContinuous-v0",
  "asterix-minatar": "Asterix-MinAtar",
  "breakout-minatar": "Breakout-MinAtar",
  "freeway-minatar": "Freeway-MinAtar",
  "seaquest-minatar": "Seaquest-MinAtar",
  "spaceinvaders-minatar": "SpaceInvaders-MinAtar",
  "catch-bsuite": "Catch-bsuite",
}


def resolve(name: str, field: str = "env") -> str:
  """The gymnax id of a friendly name (or of a gymnax id); ConfigError naming `field` otherwise."""
  if name in ENVS:
    return ENVS[name]
  ids = {v.lower(): v for v in ENVS.values()}
  if isinstance(name, str) and name.lower() in ids:
    return ids[name.lower()]
  raise ConfigError(field, f"unknown gymnax environment {name!r}; allowed: {', '.join(ENVS)}")


class _Deferred(types.ModuleType):
  """Stands in ``sys.modules`` for a package until one of its attributes is used, then imports
  it and hands the attribute over (later imports get the package itself)."""

  def __getattr__(self, attr):
    if sys.modules.get(self.__name__) is self:
      del sys.modules[self.__name__]
    return getattr(importlib.import_module(self.__name__), attr)


def import_gymnax():
  """``import gymnax``, with seaborn imported on its first use: gymnax's Pong imports seaborn at
  module level for rendering only, and seaborn with scipy.stats is about 1 s of every process's
  start on a CPU (``python -X importtime -c "import gymnax"``)."""
  if "seaborn" not in sys.modules:
    spec = importlib.util.find_spec("seaborn")
    if spec is not None:
      stub = sys.modules["seaborn"] = _Deferred("seaborn")
      stub.__spec__ = spec  # what the import system reads of a module it finds in sys.modules
  import gymnax  # late: `import gymnax` is slow and needs the `six` package

  return gymnax


def make(name: str, num_envs: int, *, field: str = "env") -> vec.VecEnv:
  """A batch of `num_envs` gymnax environments (see `jaxlab.envs.vec` for the contract)."""
  env_id = resolve(name, field)
  if not isinstance(num_envs, int) or isinstance(num_envs, bool) or num_envs < 1:
    raise ConfigError("config.num_envs", f"must be a positive integer, got {num_envs!r}")
  env, params = import_gymnax().make(env_id)
  space = env.action_space(params)
  discrete = hasattr(space, "n")
  num_actions = int(space.n) if discrete else 0
  action_dim = 0 if discrete else int(max(1, jnp.prod(jnp.asarray(space.shape))))
  obs_shape = tuple(jax.eval_shape(lambda k: env.reset(k, params)[0], jax.random.key(0)).shape)

  def reset(key):
    obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(key, num_envs), params)
    return obs.astype(jnp.float32), vec.init_state(env_state, num_envs)

  def step(state: vec.VecState, action, key):
    if not discrete:
      action = jnp.reshape(action, (num_envs, action_dim))
    keys = jax.random.split(key, num_envs)
    obs, env_state, reward, terminated, truncated, _ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
      keys, state.env, action, params
    )
    done = jnp.logical_or(terminated, truncated)
    new_state, info = vec.track(state, env_state, reward, done)
    return obs.astype(jnp.float32), new_state, reward.astype(jnp.float32), done, info

  return vec.VecEnv(
    name=env_id,
    num_envs=num_envs,
    obs_shape=obs_shape,
    num_actions=num_actions,
    action_dim=action_dim,
    achievement_names=(),
    max_return=None,
    reset=reset,
    step=step,
    render=_renderer(env_id, env, params),
  )


def _renderer(env_id: str, env, params):
  """``VecEnv.render`` of CartPole and the MinAtar games (:mod:`jaxlab.envs.render`); None for
  the other gymnax environments."""
  from jaxlab.envs import render

  if env_id == "CartPole-v1":
    one = lambda s: render.cartpole(s, params.x_threshold, 2.0 * params.length)
  elif env_id.endswith("-MinAtar"):
    one = lambda s: render.minatar(env.get_obs(s, params))
  else:
    return None
  return lambda state: jax.vmap(one)(state.env)
