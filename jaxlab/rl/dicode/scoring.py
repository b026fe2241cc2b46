"""DiCode task scoring and prioritised replay (arXiv 2602.08194, the curriculum loop).

Learnability (the paper's default priority, from SFL, arXiv 2408.15099): a task whose success rate
over a scoring window is ``p`` gets ``p (1 - p)``; it peaks at 0.25 for ``p = 0.5`` and is 0 for a
task the agent always or never solves, and for a task that finished no episode in the window.

Replay weights (PLR, arXiv 2010.03934, eq. 2 and the staleness mixture): over the active tasks,

    w = (1 - rho) * w_rank + rho * w_staleness,
    w_rank[i] ∝ (1 / rank_i) ** (1 / T)         (rank 1 = highest score; ties by position),
    w_staleness[i] ∝ sessions since task i was last trained (uniform if all are 0),

with DiCode's ``rho = 0.3`` and ``T = 1``; each part is normalised to sum 1 before mixing. In a
session the original game takes the share ``original_proportion`` (0.2) of the environments'
episodes and the curriculum tasks split the rest equally (:func:`episode_weights`). Everything
here is host-side NumPy: it runs between sessions, not inside ``jit``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from jaxlab.core.errors import require


def success_rate(successes, finished) -> np.ndarray:
  """``successes / finished`` per task, and -1 where no episode finished (the paper's marker)."""
  s = np.asarray(successes, np.float64)
  n = np.asarray(finished, np.float64)
  return np.where(n > 0, s / np.maximum(n, 1.0), -1.0)


def learnability(success, finished) -> np.ndarray:
  """``p (1 - p)`` with ``p = clip(success, 0, 1)``; 0 where ``finished`` is 0 (or ``success``
  is the -1 "no episode" marker). Works elementwise on arrays or scalars."""
  rate = np.asarray(success, np.float64)
  n = np.asarray(finished, np.float64)
  p = np.clip(rate, 0.0, 1.0)
  return np.where((n > 0) & (rate >= 0), p * (1.0 - p), 0.0)


def ranks(scores) -> np.ndarray:
  """1-based ranks, highest score first; equal scores ranked by position (stable)."""
  scores = np.asarray(scores, np.float64)
  order = np.argsort(-scores, kind="stable")
  r = np.empty(len(scores), np.int64)
  r[order] = np.arange(1, len(scores) + 1)
  return r


def rank_weights(scores, temperature: float) -> np.ndarray:
  """``(1 / rank) ** (1 / T)``, normalised."""
  require(temperature > 0, "temperature", f"must be > 0, got {temperature}")
  w = (1.0 / ranks(scores)) ** (1.0 / temperature)
  return w / w.sum()


def staleness_weights(last_trained, session: int) -> np.ndarray:
  """Sessions since each task was last trained, normalised (uniform when all are 0)."""
  stale = np.maximum(0.0, session - np.asarray(last_trained, np.float64))
  total = stale.sum()
  return stale / total if total > 0 else np.full(len(stale), 1.0 / len(stale))


def replay_weights(
  scores,
  last_trained,
  session: int,
  staleness_coef: float,
  temperature: float,
) -> np.ndarray:
  """``(1 - rho) * w_rank + rho * w_staleness`` over the active tasks; sums to 1."""
  require(
    0.0 <= staleness_coef <= 1.0, "staleness_coef", f"must be in [0, 1], got {staleness_coef}"
  )
  scores = np.asarray(scores, np.float64)
  if len(scores) == 0:
    return np.zeros(0)
  w = (1.0 - staleness_coef) * rank_weights(scores, temperature)
  w = w + staleness_coef * staleness_weights(last_trained, session)
  return w / w.sum()


def sample(rng: np.random.Generator, weights, n: int) -> np.ndarray:
  """``min(n, len(weights))`` distinct indices drawn by ``weights`` (without replacement)."""
  weights = np.asarray(weights, np.float64)
  k = min(n, len(weights))
  if k == 0:
    return np.zeros(0, np.int64)
  return rng.choice(len(weights), size=k, replace=False, p=weights / weights.sum())


def episode_weights(num_tasks: int, original_index: int | None, original_proportion: float):
  """Per-task reset probabilities of a session: ``original_proportion`` for the original game
  (when it is in the session) and equal shares of the rest for the other tasks."""
  require(num_tasks >= 1, "num_tasks", f"must be >= 1, got {num_tasks}")
  w = np.ones(num_tasks, np.float64)
  if original_index is not None and num_tasks > 1:
    w[:] = (1.0 - original_proportion) / (num_tasks - 1)
    w[original_index] = original_proportion
  return w / w.sum()


def task_statistics(counters: dict, names: Sequence[str]) -> list[dict]:
  """Per-task window statistics from the loop's counters (host arrays of length K).

  ``counters``: ``finished``, ``success``, ``return`` (sum of finished episodes' returns) and
  ``achievements`` (``[K, A]`` counts of finished episodes unlocking each achievement).
  """
  fin = np.asarray(counters["finished"], np.float64)
  rate = success_rate(counters["success"], fin)
  score = learnability(rate, fin)
  mean_ret = np.where(fin > 0, np.asarray(counters["return"]) / np.maximum(fin, 1.0), 0.0)
  out = []
  for i, name in enumerate(names):
    out.append(
      {
        "name": name,
        "finished": int(fin[i]),
        "success_rate": float(rate[i]),
        "score": float(score[i]),
        "mean_return": float(mean_ret[i]),
      }
    )
  return out
