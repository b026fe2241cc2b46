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

import pathlib
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np

EVAL_SEED = 0  # the reference harness's PRNGKey(0)


def held_out_keys(num_worlds: int):
  """The world keys of the held-out worlds: those the reference harness's ``reset(PRNGKey(0))``
  of ``num_worlds`` environments generates (``jaxlab.rl.ppo.evaluation.make_evaluate``'s reset
  key, split per environment), as typed keys."""
  k_reset, _ = jax.random.split(jax.random.PRNGKey(EVAL_SEED))
  return jax.random.wrap_key_data(jax.random.split(k_reset, num_worlds))


def held_out_pools(num_worlds: int, pool_size: int) -> list:
  """The held-out worlds as pools of ``pool_size`` (the last one padded with repeats), generated
  by the run's one world-generator program (``world.base_worlds`` on ``pool_size`` keys)."""
  from jaxlab.rl.dicode import world

  keys = held_out_keys(num_worlds)
  pad = -num_worlds % pool_size
  if pad:
    keys = jnp.concatenate([keys, jnp.broadcast_to(keys[:1], (pad,))])
  return [world.base_worlds(keys[i : i + pool_size]) for i in range(0, keys.shape[0], pool_size)]


def one_hot(num_slots: int, slot: int | None) -> np.ndarray:
  """The conditioning vector of ``slot`` (empty for an unconditioned agent)."""
  if not num_slots or slot is None:
    return np.zeros(0, np.float32)
  v = np.zeros(num_slots, np.float32)
  v[slot] = 1.0
  return v


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
