"""The curricula DiCode is compared with, and DiCode's own task sampling (arXiv 2602.08194).

Every curriculum answers two questions per training session: what to train on
(:meth:`Curriculum.plan` -> :class:`SessionPlan`) and what it learnt from the session's per-unit
statistics (:meth:`Curriculum.update`). A *unit* is a task (a compiled task program, trained in the
multitask environment) or a *level* (one procedurally generated world of the original game, named
by its PRNG seed). All state is host-side and JSON-serialisable (``state_dict`` /
``load_state_dict``), so the loop resumes a curriculum exactly.

- ``none``: PPO-GTrXL on the unmodified game; every episode is a fresh random world.
- ``dr``: domain randomisation over the TASK space: each session trains on the hand-written seed
  tasks plus the original game, drawn uniformly per episode, with no scoring, no replay and no
  evolution. (The reference repository's DR is its PLR script with ``replay_prob=0``: uniformly
  random original-game worlds. Here every reset already draws a fresh random world, so that
  definition is ``none``; the task-space version is the informative baseline.)
- ``plr``: Prioritized Level Replay (arXiv 2010.03934) over original-game levels, as in the
  reference repository's baselines: a buffer of level seeds with scores; a session replays levels
  sampled by rank + staleness weights with probability ``replay_prob`` once the buffer is filled to
  ``min_fill`` of its capacity, else trains on new random levels; the lowest-scored levels leave
  a full buffer. Simplified: a level's score is the mean over achievements of ``q (1 - q)``
  (``q`` = fraction of the level's finished episodes unlocking it) instead of MaxMC / positive
  value loss, and levels are replayed per session (the whole batch), not per environment reset.
- ``sfl``: Sampling For Learnability (arXiv 2408.15099): every ``sfl_every`` sessions the current
  policy is rolled out (no learning) on ``sfl_candidates`` random levels, which are scored by the
  same achievement learnability, and the best ``buffer_size`` form the learnability set; a session
  trains on that set with probability ``replay_prob`` and on fresh random levels otherwise.
  Simplified: the reference scores levels by the variance of the return over 5 rollouts (a
  Gaussian-weighted proxy); here by achievement learnability, over one rollout budget.
- ``dicode``: tasks from an on-disk archive (``archive.Archive``). A session holds the candidates
  proposed by the last evolution round (scored in this session, admitted afterwards by score),
  replayed active tasks drawn by :func:`scoring.replay_weights`, and the original game, which gets
  ``original_proportion`` of the episodes (see :func:`scoring.episode_weights`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from jaxlab.core.errors import check_choice, require
from jaxlab.rl.dicode import scoring

CURRICULA = ("none", "dr", "plr", "sfl", "dicode")
ORIGINAL = "original"


@dataclasses.dataclass
class SessionPlan:
  """What one session trains on.

  kind: ``"base"`` (the unmodified game, one unit), ``"levels"`` (``levels``: uint32 seeds, one
    unit each), ``"tasks"`` (``sources``: task programs, one unit each, conditioned on
    ``slots``) or ``"worlds"`` (``pools`` of the unmodified game: the held-out evaluation).
  names: one display name per unit; weights: the probability of each unit at an episode reset.
  ids: archive id per task (None for tasks not in the archive, e.g. the original game).
  candidates: archive ids of the new tasks evaluated in this session.
  """

  kind: str
  names: list[str]
  weights: np.ndarray
  sources: list[str] = dataclasses.field(default_factory=list)
  slots: list[int] = dataclasses.field(default_factory=list)
  ids: list[Any] = dataclasses.field(default_factory=list)
  levels: np.ndarray | None = None
  candidates: list[Any] = dataclasses.field(default_factory=list)
  session: int = 0  # the session (keys the original game's fresh worlds)
  pools: list | None = None  # kind "worlds": given pools of the unmodified game (evaluation)
  first: int = -1  # >= 0: environment i starts in world first + i of the pools (in order)

  @property
  def size(self) -> int:
    return len(self.names)

  def original_index(self) -> int | None:
    return self.names.index(ORIGINAL) if ORIGINAL in self.names else None


def level_score(achievement_counts, finished) -> np.ndarray:
  """Per level: mean over achievements of ``q (1 - q)``, ``q`` = fraction of the level's finished
  episodes unlocking the achievement; 0 for a level with no finished episode."""
  counts = np.asarray(achievement_counts, np.float64)
  fin = np.asarray(finished, np.float64)
  q = counts / np.maximum(fin, 1.0)[:, None]
  return np.where(fin > 0, np.mean(q * (1.0 - q), axis=1), 0.0)


def _view(archive, meta: dict) -> dict:
  score = meta.get("score")
  return {
    **meta,
    "source": archive.source(meta["id"]),
    "score": 0.0 if score is None else float(score),
    "last_trained": int(meta.get("last_trained", meta.get("generation", 0))),
    "success_rate": float(meta.get("success_rate", -1.0)),
  }


def record(archive, task_id) -> dict:
  """One ``archive.Archive`` task with its program (``source``), ``score`` (0 before the first
  session), ``last_trained`` (session; its generation before it trained) and ``success_rate``."""
  return _view(archive, archive.get(task_id))


def active_records(archive) -> list[dict]:
  """The archive's admitted tasks, each as :func:`record` gives it."""
  return [_view(archive, m) for m in archive.active()]


def free_slots(archive, num_slots: int, count: int) -> list[int]:
  """The ``count`` lowest slots no admitted task holds (candidates train under these)."""
  used = {m["slot"] for m in archive.active()}
  free = [i for i in range(num_slots) if i not in used]
  return (free + free[-1:] * count)[:count] if free else [0] * count


class Curriculum:
  """Base class: ``plan(session, rng)`` then ``update(plan, stats, session)`` after training."""

  name = ""

  def plan(self, session: int, rng: np.random.Generator) -> SessionPlan:
    raise NotImplementedError

  def update(self, plan: SessionPlan, stats: dict, session: int) -> None:
    del plan, stats, session

  def state_dict(self) -> dict:
    return {}

  def load_state_dict(self, state: dict) -> None:
    del state


class NoCurriculum(Curriculum):
  name = "none"

  def plan(self, session, rng):
    del session, rng
    return SessionPlan("base", [ORIGINAL], np.ones(1))


class DomainRandomization(Curriculum):
  """Uniform over the seed tasks and the original game, every session (see module docstring)."""

  name = "dr"

  def __init__(self, seeds: dict[str, str]):
    require(ORIGINAL in seeds, "seeds", "the seed tasks must include 'original'")
    self.names = sorted(seeds)
    self.sources = [seeds[n] for n in self.names]

  def plan(self, session, rng):
    del session, rng
    k = len(self.names)
    return SessionPlan(
      "tasks", list(self.names), np.full(k, 1.0 / k), list(self.sources), list(range(k)), [None] * k
    )


def _new_seeds(rng: np.random.Generator, n: int) -> list[int]:
  return [int(s) for s in rng.integers(0, 2**31 - 1, size=n)]


def seed_keys(seeds: Sequence[int]) -> np.ndarray:
  """``jax.random.PRNGKey(seed)`` for each seed, as uint32[L, 2] (raw threefry keys)."""
  return np.stack([np.array([0, s], np.uint32) for s in seeds])


def _level_plan(seeds: Sequence[int]) -> SessionPlan:
  k = len(seeds)
  return SessionPlan(
    "levels", [f"level_{s}" for s in seeds], np.full(k, 1.0 / k), levels=seed_keys(seeds)
  )


class PLR(Curriculum):
  """Prioritized Level Replay over original-game levels (see module docstring)."""

  name = "plr"

  def __init__(
    self,
    levels_per_session: int,
    capacity: int,
    replay_prob: float,
    min_fill: float,
    staleness_coef: float,
    temperature: float,
  ):
    self.k, self.capacity, self.replay_prob = levels_per_session, capacity, replay_prob
    self.min_fill, self.rho, self.temperature = min_fill, staleness_coef, temperature
    self.buffer: dict[int, dict] = {}  # seed -> {"score", "last_trained"}

  def plan(self, session, rng):
    filled = len(self.buffer) >= max(self.k, self.min_fill * self.capacity)
    if filled and rng.random() < self.replay_prob:
      seeds = list(self.buffer)
      w = scoring.replay_weights(
        [self.buffer[s]["score"] for s in seeds],
        [self.buffer[s]["last_trained"] for s in seeds],
        session,
        self.rho,
        self.temperature,
      )
      chosen = [seeds[i] for i in scoring.sample(rng, w, self.k)]
    else:
      chosen = _new_seeds(rng, self.k)
    return _level_plan(chosen)

  def update(self, plan, stats, session):
    scores = level_score(stats["achievements"], stats["finished"])
    for name, score in zip(plan.names, scores):
      self.buffer[int(name.split("_")[1])] = {"score": float(score), "last_trained": session}
    while len(self.buffer) > self.capacity:
      worst = min(
        self.buffer, key=lambda s: (self.buffer[s]["score"], self.buffer[s]["last_trained"])
      )
      del self.buffer[worst]

  def state_dict(self):
    return {"buffer": {str(k): v for k, v in self.buffer.items()}}

  def load_state_dict(self, state):
    self.buffer = {int(k): dict(v) for k, v in state.get("buffer", {}).items()}


class SFL(Curriculum):
  """Sampling For Learnability over original-game levels (see module docstring).

  ``score_levels(seeds) -> scores`` rolls the current policy out on those levels (the loop
  provides it); it is called every ``every`` sessions.
  """

  name = "sfl"

  def __init__(
    self,
    levels_per_session: int,
    buffer_size: int,
    candidates: int,
    every: int,
    replay_prob: float,
    score_levels: Callable[[list[int]], np.ndarray] | None = None,
  ):
    self.k, self.buffer_size, self.candidates = levels_per_session, buffer_size, candidates
    self.every, self.replay_prob, self.score_levels = every, replay_prob, score_levels
    self.learnable: list[int] = []
    self.scores: list[float] = []

  def refresh_due(self, session: int) -> bool:
    """Whether ``plan(session, ...)`` scores new candidate levels first."""
    return self.score_levels is not None and session % self.every == 0

  def draw_candidates(self, rng) -> list[int]:
    """The candidate levels a refresh scores: the plan's first draws from ``rng``."""
    return _new_seeds(rng, self.candidates)

  def _refresh(self, rng) -> None:
    seeds = self.draw_candidates(rng)
    scores = np.asarray(self.score_levels(seeds), np.float64)
    best = np.argsort(-scores, kind="stable")[: self.buffer_size]
    self.learnable = [seeds[i] for i in best]
    self.scores = [float(scores[i]) for i in best]

  def plan(self, session, rng):
    if self.refresh_due(session):
      self._refresh(rng)
    if self.learnable and rng.random() < self.replay_prob:
      idx = rng.choice(len(self.learnable), size=self.k, replace=len(self.learnable) < self.k)
      return _level_plan([self.learnable[i] for i in idx])
    return _level_plan(_new_seeds(rng, self.k))

  def state_dict(self):
    return {"learnable": self.learnable, "scores": self.scores}

  def load_state_dict(self, state):
    self.learnable = [int(s) for s in state.get("learnable", [])]
    self.scores = [float(s) for s in state.get("scores", [])]


class DiCode(Curriculum):
  """Tasks from the archive: candidates + replayed active tasks + the original game.

  ``archive`` is an ``archive.Archive``; ``original_source`` the original game's program.
  Scores and last-trained sessions live in the archive's records (``update`` writes them), so the
  archive on disk is the whole curriculum state.
  """

  name = "dicode"

  def __init__(
    self,
    archive,
    original_source: str,
    tasks_per_session: int,
    original_proportion: float,
    staleness_coef: float,
    temperature: float,
    original_slot: int = 0,
  ):
    self.archive, self.original_source = archive, original_source
    self.n, self.original_proportion = tasks_per_session, original_proportion
    self.rho, self.temperature, self.original_slot = staleness_coef, temperature, original_slot
    self.candidates: list[Any] = []  # archive ids proposed but not yet scored

  def plan(self, session, rng):
    budget = max(0, self.n - 1)
    new = list(self.candidates[:budget])
    active = [r for r in active_records(self.archive) if r["id"] not in new]
    w = scoring.replay_weights(
      [r["score"] for r in active],
      [r["last_trained"] for r in active],
      session,
      self.rho,
      self.temperature,
    )
    replay = [active[i] for i in scoring.sample(rng, w, budget - len(new))]
    records = [record(self.archive, i) for i in new] + replay
    names = [r["name"] for r in records] + [ORIGINAL]
    sources = [r["source"] for r in records] + [self.original_source]
    temp = free_slots(self.archive, self.original_slot, len(new))
    slots = temp + [int(r["slot"]) for r in replay] + [self.original_slot]
    ids = [r["id"] for r in records] + [None]
    weights = scoring.episode_weights(len(names), len(names) - 1, self.original_proportion)
    return SessionPlan("tasks", names, weights, sources, slots, ids, candidates=new)

  def state_dict(self):
    return {"candidates": list(self.candidates)}

  def load_state_dict(self, state):
    self.candidates = list(state.get("candidates", []))


def make(name: str, **kwargs) -> Curriculum:
  """A curriculum by name; ``kwargs`` are its constructor's arguments."""
  check_choice("curriculum", name, CURRICULA)
  cls = {
    "none": NoCurriculum,
    "dr": DomainRandomization,
    "plr": PLR,
    "sfl": SFL,
    "dicode": DiCode,
  }[name]
  return cls(**kwargs)
