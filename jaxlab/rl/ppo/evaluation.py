"""Evaluation of an online-RL policy on held-out environment seeds.

``make_evaluate(env, policy, max_steps)`` returns a jitted ``evaluate(params, key)`` that resets
``env.num_envs`` fresh environments from ``key`` and runs the policy until every environment has
finished its first episode or ``max_steps`` steps have passed. Each environment contributes
exactly that first episode (so short episodes are not over-counted); one still running at
``max_steps`` counts with its return so far. :func:`summarize` turns the result into the reported
numbers: mean return, return as % of ``env.max_return``, and for Craftax the per-achievement
success rates and the Crafter score.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.rl.ppo import crafter_score, rollouts


def make_evaluate(env, policy, max_steps: int, greedy: bool = False) -> Callable:
  """``evaluate(params, key) -> {"return", "length", "finished", "achievements"}`` per env."""
  n = env.num_envs
  num_ach = len(env.achievement_names)

  def step(carry):
    t, env_state, obs, reset, pcarry, out, params, key = carry
    act = rollouts.policy_actor(lambda *a: policy.apply({"params": params}, *a), greedy)
    (env_state, obs, done, pcarry), rec = rollouts.step_fn(env.step, act, key)(
      (env_state, obs, reset, pcarry), t
    )
    reward, info = rec["reward"], rec["info"]
    running = ~out["finished"]
    first_end = done & running
    out = {
      "return": out["return"] + jnp.where(running, reward, 0.0),
      "length": out["length"] + running.astype(jnp.int32),
      "finished": out["finished"] | done,
      "achievements": jnp.where(
        first_end[:, None], info.get("achievements", out["achievements"]), out["achievements"]
      ),
    }
    return t + 1, env_state, obs, done, pcarry, out, params, key

  def cond(carry):
    t, out = carry[0], carry[5]
    return (t < max_steps) & ~jnp.all(out["finished"])

  @jax.jit
  def evaluate(params, key):
    k_reset, k_run = jax.random.split(key)
    obs, env_state = env.reset(k_reset)
    out = {
      "return": jnp.zeros((n,), jnp.float32),
      "length": jnp.zeros((n,), jnp.int32),
      "finished": jnp.zeros((n,), bool),
      "achievements": jnp.zeros((n, num_ach), jnp.float32),
    }
    reset = jnp.ones((n,), bool)
    carry = (jnp.int32(0), env_state, obs, reset, policy.initial_carry(n), out, params, k_run)
    return jax.lax.while_loop(cond, step, carry)[5]

  return evaluate


def summarize(out: dict, env) -> tuple[dict[str, float], dict[str, float]]:
  """``(scalars, per_achievement)`` from :func:`make_evaluate`'s output (host numpy).

  scalars: ``return`` (mean over environments), ``return_std``, ``length``, ``finished`` (fraction
  of environments whose episode ended), and where defined ``return_pct`` (% of max_return) and
  ``score`` (Crafter score of the finished episodes). per_achievement: success rate in [0, 1] per
  achievement name (finished episodes only).
  """
  out = jax.device_get(out)
  ret = np.asarray(out["return"], np.float64)
  finished = np.asarray(out["finished"], bool)
  scalars = {
    "return": float(ret.mean()),
    "return_std": float(ret.std()),
    "length": float(np.mean(out["length"])),
    "finished": float(finished.mean()),
  }
  if env.max_return:
    scalars["return_pct"] = 100.0 * scalars["return"] / env.max_return
  rates = {}
  if env.achievement_names:
    ach = np.asarray(out["achievements"], np.float64)[finished]
    mean = ach.mean(axis=0) if len(ach) else np.zeros(len(env.achievement_names))
    rates = {name: float(r) for name, r in zip(env.achievement_names, mean)}
    scalars["score"] = float(crafter_score(mean))
  return scalars, rates


def summarize_seeds(out: dict, env, num_seeds: int) -> tuple[dict, dict[str, float]]:
  """:func:`summarize` of each seed of a vmapped evaluation (leading seed axis): the scalars as
  arrays ``[seeds]``; the achievement rates averaged over seeds."""
  out = jax.device_get(out)
  per = [summarize(jax.tree.map(lambda x: x[i], out), env) for i in range(num_seeds)]
  scalars = {k: np.array([p[0][k] for p in per]) for k in per[0][0]}
  rates = {k: float(np.mean([p[1][k] for p in per])) for k in per[0][1]}
  return scalars, rates


def seed_means(summaries, skip=("seed", "config")) -> dict:
  """One summary for several seeds' summaries (dicts of the same keys): a value every seed shares
  is kept, numbers that differ become their mean over the seeds, nested dicts are merged alike,
  and anything else that differs (lists such as curves, the names in ``skip``) is left to the
  per-seed summaries."""
  out = {}
  for k, v in summaries[0].items():
    vals = [s.get(k) for s in summaries]
    if k in skip:
      continue
    if all(isinstance(x, dict) for x in vals):
      out[k] = seed_means(vals, ())
    elif all(x == v for x in vals):
      out[k] = v
    elif all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in vals):
      out[k] = float(np.mean(vals))
  return out


def achievement_chart(path, rates, title: str = ""):
  """Success rate (%) of each achievement: fraction of evaluation episodes unlocking it."""
  from jaxlab.core import plots

  pct = {name.replace("_", " ").lower(): 100.0 * r for name, r in rates.items()}
  return plots.bars(path, pct, "success rate (% of episodes)", title=title, xlim=(0.0, 105.0))


def make_video(env, policy, max_steps: int, greedy: bool = False) -> Callable:
  """A jitted ``video(params, key) -> (frames uint8[N, T, H, W, 3], lengths int32[N])``: the
  first episode of each of ``env.num_envs`` environments (reset from ``key``), rendered in JAX by
  ``env.render`` at every step of one ``lax.scan`` of ``max_steps`` steps; after its episode ends
  an environment's clip repeats its last frame (:func:`jaxlab.core.videos.trim` cuts the tail)."""
  if env.render is None:
    raise ValueError(f"{env.name} has no renderer (VecEnv.render)")
  n = env.num_envs

  @jax.jit
  def video(params, key):
    k_reset, k_run = jax.random.split(key)
    obs, env_state = env.reset(k_reset)
    act = rollouts.policy_actor(lambda *a: policy.apply({"params": params}, *a), greedy)
    step = rollouts.step_fn(env.step, act, k_run)

    def body(carry, t):
      inner, finished, length, last = carry
      frame = jnp.where(finished[:, None, None, None], last, env.render(inner[0]))
      inner, rec = step(inner, t)
      length = length + (~finished).astype(jnp.int32)
      return (inner, finished | rec["done"], length, frame), frame

    inner = (env_state, obs, jnp.ones((n,), bool), policy.initial_carry(n))
    first = env.render(env_state)
    carry = (inner, jnp.zeros((n,), bool), jnp.zeros((n,), jnp.int32), first)
    (_, _, lengths, _), frames = jax.lax.scan(body, carry, jnp.arange(max_steps))
    return jnp.swapaxes(frames, 0, 1), lengths

  return video
