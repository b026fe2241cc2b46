"""Evaluation of a curriculum-trained agent on held-out worlds of the original game.

As in the DiCode paper's harness (arXiv 2602.08194; the reference evaluates 1024 worlds x 8192
steps from ``PRNGKey(0)``): ``num_envs`` worlds of the unmodified game generated from a FIXED key
(the same worlds for every curriculum and seed; training draws its worlds from other key streams),
one episode per world, capped at ``max_steps`` steps (an unfinished episode counts its return so
far). Reported: mean return, return as % of the maximum (226 for Craftax-Symbolic, the sum of the
achievement rewards), per-achievement success rate (fraction of episodes unlocking it) and the
Crafter score. A task-conditioned agent (``dr``, ``dicode``) sees the original game's one-hot slot
appended to the observation, as in training. :func:`comparison_chart` draws the curricula side by
side with ``jaxlab.core.plots.bars``.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.envs import vec
from jaxlab.rl.ppo import evaluation as ppo_eval

EVAL_SEED = 0  # the reference harness's PRNGKey(0)


def with_suffix(env: vec.VecEnv, suffix) -> vec.VecEnv:
  """``env`` whose observations have the constant vector ``suffix`` appended (task conditioning)."""
  suffix = jnp.asarray(suffix, jnp.float32)
  if suffix.size == 0:
    return env
  n = env.num_envs

  def add(obs):
    flat = obs.reshape((n, -1))
    return jnp.concatenate([flat, jnp.broadcast_to(suffix, (n, suffix.size))], axis=1)

  def reset(key):
    obs, state = env.reset(key)
    return add(obs), state

  def step(state, action, key):
    obs, state, reward, done, info = env.step(state, action, key)
    return add(obs), state, reward, done, info

  shape = (int(np.prod(env.obs_shape)) + suffix.size,)
  return dataclasses.replace(env, obs_shape=shape, reset=reset, step=step)


def one_hot(num_slots: int, slot: int | None) -> np.ndarray:
  """The conditioning vector of ``slot`` (empty for an unconditioned agent)."""
  if not num_slots or slot is None:
    return np.zeros(0, np.float32)
  v = np.zeros(num_slots, np.float32)
  v[slot] = 1.0
  return v


def make_evaluator(
  env_name: str, num_envs: int, max_steps: int, policy, suffix=(), *, reset_ratio: int
):
  """``evaluate(params) -> (scalars, per_achievement)`` on the fixed held-out worlds."""
  from jaxlab.envs import craftax

  env = with_suffix(craftax.make(env_name, num_envs, reset_ratio=reset_ratio), suffix)
  run = ppo_eval.make_evaluate(env, policy, max_steps)
  key = jax.random.PRNGKey(EVAL_SEED)

  def evaluate(params):
    scalars, rates = ppo_eval.summarize(run(params, key), env)
    return scalars, rates

  return evaluate


def comparison_chart(
  path, results: Mapping[str, Mapping[str, float]], metric: str = "return_pct", title: str = ""
) -> pathlib.Path:
  """Bars of ``metric`` per curriculum: ``results[label][metric]``; a ``<metric>_std`` entry
  (over seeds) is shown in the label."""
  from jaxlab.core import plots

  values = {}
  for label, r in results.items():
    std = r.get(f"{metric}_std")
    n = r.get("seeds")
    name = label if std is None else f"{label} (±{std:.2g}, n={int(n or 1)})"
    values[name] = float(r[metric])
  xlabel = "return (% of max)" if metric == "return_pct" else metric
  return plots.bars(path, values, xlabel, title=title)


def aggregate(summaries: list[Mapping]) -> dict[str, float]:
  """Mean and standard deviation over seeds of each evaluation scalar."""
  keys = sorted(set.intersection(*(set(s) for s in summaries))) if summaries else []
  out: dict[str, float] = {"seeds": float(len(summaries))}
  for k in keys:
    vals = np.asarray([float(s[k]) for s in summaries])
    out[k] = float(vals.mean())
    out[f"{k}_std"] = float(vals.std(ddof=1)) if len(vals) > 1 else 0.0
  return out
