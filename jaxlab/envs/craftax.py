"""Craftax and Craftax-Classic behind the `jaxlab.envs.vec.VecEnv` interface, optimistic resets.

Craftax (Matthews et al., "Craftax: A Lightning-Fast Benchmark for Open-Ended Reinforcement
Learning", arXiv 2402.16801) is a JAX reimplementation of Crafter (Craftax-Classic) plus a larger
game (Craftax). Generating a world is far more expensive than a game step, and craftax's own
auto-reset (`auto_reset=True`) generates a world for EVERY environment at EVERY step and then keeps
it only where the episode ended. This module uses craftax's no-auto-reset environments and
OPTIMISTIC resets instead, as the authors' baselines do: each step generates a pool of
`max(1, N // reset_ratio)` fresh worlds and scatters them into the environments that finished.
The k-th finished environment of a step (in index order) gets pool world `k mod pool_size`, so all
finished environments get distinct worlds whenever at most `pool_size` finish at once; beyond that
worlds are shared (the "optimistic" assumption; random agents finish about 0.3-2 episodes per step
at N=64). `reset_ratio=1` generates a world per environment per step, which costs what craftax's
builtin auto-reset costs.

The returned observation of a finished environment is the first observation of its new world, and
the per-environment state (including craftax's `timestep`) is that of the new world.
`info["achievements"]` holds, for each environment whose episode ended, the achievements that
episode unlocked (float32[N, A], rows of unfinished environments are 0), in the order of
`achievement_names` (craftax's `Achievement` enum). `max_return` is the maximum episode return
from achievements: 226 for Craftax (achievements weighted 1/3/5/8 by difficulty), 22 for
Craftax-Classic (one per achievement). Health changes add small extra rewards.

Pixel variants need craftax's texture atlas, built once (~100 s) and cached. craftax caches it
inside its own package directory; here it is kept in `texture_cache_dir()`
(`$JAXLAB_CACHE_DIR/craftax`, default `~/.cache/jaxlab/craftax`), written atomically, so a
read-only install works and concurrent processes never read a half-written file. A cache that
craftax itself already wrote into its package directory is reused. See docs/online_envs.md.
"""

from __future__ import annotations

import importlib
import os
import pathlib

import jax
import jax.numpy as jnp

from jaxlab.core.errors import ConfigError
from jaxlab.envs import vec

# Friendly name -> (craftax id, classic, pixels). The craftax ids themselves are accepted too.
ENVS = {
  "craftax-symbolic": ("Craftax-Symbolic-v1", False, False),
  "craftax-pixels": ("Craftax-Pixels-v1", False, True),
  "craftax-classic-symbolic": ("Craftax-Classic-Symbolic-v1", True, False),
  "craftax-classic-pixels": ("Craftax-Classic-Pixels-v1", True, True),
}
MAX_RETURN = {False: 226.0, True: 22.0}  # by `classic`
# Optimistic resets of Craftax_Baselines: fresh worlds per step = max(1, num_envs // RESET_RATIO).
# The one declaration of this default (`jaxlab.rl.ppo.get_config().reset_ratio` reads it).
RESET_RATIO = 16
_TEXTURE_FILE = {False: "texture_cache.pbz2", True: "texture_cache_classic.pbz2"}


def resolve(name: str, field: str = "env") -> tuple[str, bool, bool]:
  """`(craftax id, classic, pixels)` of a friendly name or craftax id; ConfigError otherwise."""
  if name in ENVS:
    return ENVS[name]
  for spec in ENVS.values():
    if isinstance(name, str) and name.lower() == spec[0].lower():
      return spec
  raise ConfigError(field, f"unknown Craftax environment {name!r}; allowed: {', '.join(ENVS)}")


def _constants(classic: bool):
  pkg = "craftax.craftax_classic" if classic else "craftax.craftax"
  return importlib.import_module(f"{pkg}.constants")


def achievement_names(classic: bool) -> tuple[str, ...]:
  """Achievement names in craftax's order (the columns of `info["achievements"]`)."""
  enum = _constants(classic).Achievement
  return tuple(a.name.lower() for a in sorted(enum, key=lambda a: a.value))


def texture_cache_dir() -> pathlib.Path:
  """Where the pixel variants' texture atlas is cached (see module docstring)."""
  root = os.environ.get("JAXLAB_CACHE_DIR") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "jaxlab"
  )
  return pathlib.Path(root) / "craftax"


def prepare_textures(classic: bool) -> pathlib.Path:
  """Loads (building once, ~100 s) the texture atlas from our cache; returns the file used.

  Points craftax's module-level cache path away from site-packages before craftax's
  `load_all_textures` (memoised) first runs; a fresh build is written to a per-process temporary
  name and renamed into place.
  """
  consts = _constants(classic)
  if consts.load_all_textures.cache_info().currsize:
    return pathlib.Path(consts.TEXTURE_CACHE_FILE)  # already loaded in this process
  packaged = pathlib.Path(consts.TEXTURE_CACHE_FILE)
  if packaged.exists() and not os.environ.get("CRAFTAX_RELOAD_TEXTURES"):
    consts.load_all_textures()
    return packaged
  target = texture_cache_dir() / _TEXTURE_FILE[classic]
  if target.exists():
    consts.TEXTURE_CACHE_FILE = str(target)
    consts.load_all_textures()
    return target
  target.parent.mkdir(parents=True, exist_ok=True)
  tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
  consts.TEXTURE_CACHE_FILE = str(tmp)
  try:
    consts.load_all_textures()
    os.replace(tmp, target)
  finally:
    consts.TEXTURE_CACHE_FILE = str(target)
    if tmp.exists():
      tmp.unlink()
  return target


def _craftax_env(env_id: str, classic: bool, pixels: bool):
  if pixels:
    prepare_textures(classic)
  from craftax.craftax_env import make_craftax_env_from_name

  return make_craftax_env_from_name(env_id, False)  # no builtin auto-reset


def _check_int(field: str, value, low: int = 1) -> int:
  if not isinstance(value, int) or isinstance(value, bool) or value < low:
    raise ConfigError(field, f"must be an integer >= {low}, got {value!r}")
  return value


def optimistic_reset(done, fresh, stepped):
  """`stepped` (a batched pytree) with each finished environment replaced by a pool world.

  `fresh` is a pytree of `pool` freshly generated worlds (leading axis `pool`); the k-th finished
  environment (in index order) gets pool world `k mod pool` (see module docstring). Also used by
  `jaxlab.rl.dicode.multitask`.
  """
  pool = jax.tree.leaves(fresh)[0].shape[0]
  slot = jnp.where(done, (jnp.cumsum(done) - 1) % pool, 0)
  return vec.select(done, jax.tree.map(lambda x: x[slot], fresh), stepped)


def make(
  name: str, num_envs: int, reset_ratio: int = RESET_RATIO, *, field: str = "env"
) -> vec.VecEnv:
  """A batch of `num_envs` Craftax environments with optimistic resets (see module docstring)."""
  env_id, classic, pixels = resolve(name, field)
  _check_int("config.num_envs", num_envs)
  _check_int("config.reset_ratio", reset_ratio)
  env = _craftax_env(env_id, classic, pixels)
  params = env.default_params
  pool = max(1, num_envs // reset_ratio)
  obs_shape = tuple(jax.eval_shape(lambda k: env.reset_env(k, params)[0], jax.random.key(0)).shape)
  names = achievement_names(classic)

  def reset(key):
    obs, env_state = jax.vmap(env.reset_env, in_axes=(0, None))(
      jax.random.split(key, num_envs), params
    )
    return obs.astype(jnp.float32), vec.init_state(env_state, num_envs)

  def step(state: vec.VecState, action, key):
    k_step, k_reset = jax.random.split(key)
    obs_st, env_st, reward, done, _ = jax.vmap(env.step_env, in_axes=(0, 0, 0, None))(
      jax.random.split(k_step, num_envs), state.env, action, params
    )
    done = done.astype(bool)
    obs_re, env_re = jax.vmap(env.reset_env, in_axes=(0, None))(
      jax.random.split(k_reset, pool), params
    )
    obs, env_state = optimistic_reset(done, (obs_re, env_re), (obs_st, env_st))
    obs = obs.astype(jnp.float32)
    new_state, info = vec.track(state, env_state, reward, done)
    info["achievements"] = jnp.where(done[:, None], env_st.achievements, False).astype(jnp.float32)
    return obs, new_state, reward.astype(jnp.float32), done, info

  return vec.VecEnv(
    name=env_id,
    num_envs=num_envs,
    obs_shape=obs_shape,
    num_actions=int(env.action_space(params).n),
    action_dim=0,
    achievement_names=names,
    max_return=MAX_RETURN[classic],
    reset=reset,
    step=step,
    render=lambda state: jax.vmap(_renderer(classic))(state.env),
  )


_RENDERERS: dict = {}


def _renderer(classic: bool):
  """craftax's pixel renderer, made on first use (it loads the texture atlas)."""
  if classic not in _RENDERERS:
    from jaxlab.envs import render

    _RENDERERS[classic] = render.craftax(classic)
  return _RENDERERS[classic]
