"""The DiCode session loop (arXiv 2602.08194): plan, train PPO-GTrXL, score, evolve, commit.

One *session*: the curriculum plans what to train on (:mod:`curriculum`), the loop builds that
session's environment (:func:`pools.default_make_env`, its state counting per task the episodes of
the scoring window, :func:`counters.counted`), trains the SAME agent for ``U`` PPO updates through
``jaxlab.core.runtime.train`` (:mod:`training`: PPO's own gated update, one compiled program), and
the curriculum turns the window's counts into scores (learnability ``p (1 - p)``, :mod:`scoring`).
For ``dicode`` the archive is scored, candidates admitted and, every ``E`` sessions, an evolution
round proposes the next candidates (:mod:`evolution`). The end of a run (held-out evaluation,
summary.json, comparisons) is :mod:`reporting`.

State and resume: after every session the agent (the PPO ``TrainState`` and episode statistics) is
saved with ``jaxlab.core.checkpoint`` under ``<workdir>/agent`` and then ``loop_state.json`` (the
next session, the curriculum's state, the running original-game return, the per-session history)
is written atomically; that file is the commit point. The archive commits each change itself
(write-new-then-rename). A killed loop restarts the session it was in, from the last committed
agent; the archive keeps everything written before the kill, and candidates of an interrupted
evolution round that never trained are retired with the reason "interrupted".

Several seeds (:func:`run_together`; ``experiments.dicode --seeds``): one :class:`Loop` per seed,
each in its own workdir with its own curriculum, archive, pools and agent; a session of every
seed is one run of the runtime over a seed axis, and planning, scoring, evolution and commits stay
on the host, seed by seed. Seed ``k`` computes what its loop alone computes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import pathlib
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.core import checkpoint, metrics, provenance, runtime
from jaxlab.core import workdir as workdir_lib
from jaxlab.core.train_state import TrainState
from jaxlab.rl import ppo
from jaxlab.rl.dicode import curriculum as curriculum_lib
from jaxlab.rl.dicode import evolution, scoring, training
from jaxlab.rl.dicode.counters import NEVER, counted
from jaxlab.rl.dicode.pools import POOL_DIR, PoolCache, default_make_env, num_units

STATE_FILE = "loop_state.json"
AGENT_DIR = "agent"


@dataclasses.dataclass
class Hooks:
  """Replaceable parts (tests use small fakes; the experiment uses the defaults).

  make_env(plan, num_envs, config, original_return) -> VecEnv for a session plan.
  validate(sources) -> list of ``sandbox.Verdict``.
  """

  make_env: Callable | None = None
  validate: Callable | None = None


def _default_validate(config):
  from jaxlab.rl.dicode import sandbox

  def validate(sources):
    return sandbox.validate(
      sources, timeout_s=config.sandbox_timeout_s, memory_mb=config.sandbox_memory_mb
    )

  return validate


class Loop:
  """A resumable curriculum run in ``workdir`` (see the module docstring).

  ``curriculum``: a :class:`curriculum.Curriculum`; ``archive``/``proposer`` for ``dicode`` (else
  None); ``config``: ``jaxlab.rl.dicode.get_config()`` or a preset of it.
  """

  def __init__(
    self,
    workdir,
    config,
    curriculum,
    *,
    seed=0,
    archive=None,
    proposer=None,
    hooks: Hooks | None = None,
    log: Callable[[str], None] = print,
  ):
    self.workdir = pathlib.Path(workdir)
    self.config, self.curriculum, self.seed = config, curriculum, seed
    self.archive, self.proposer, self.log = archive, proposer, log
    hooks = hooks or Hooks()
    pools = PoolCache(config.pool_size, seed, self.workdir / POOL_DIR)
    self.make_env = hooks.make_env or functools.partial(default_make_env, pools=pools)
    self.validate = hooks.validate or _default_validate(config)
    self.ppo = training.ppo_config(config)
    self.key = jax.random.key(seed)
    self.state = {
      "session": 0,
      "original_return": 0.0,
      "original_success": {},
      "history": [],
      "evolution": [],
      "curriculum": {},
    }
    self.policy = None
    self.carried = None  # {"train": TrainState, "stats": dict} between sessions

  # -- persistence --

  def load(self) -> None:
    """Reads the committed loop state (a resume); ``run`` calls it."""
    path = self.workdir / STATE_FILE
    if not path.exists():
      return
    self.state = metrics.read_json(path)
    self.curriculum.load_state_dict(self.state["curriculum"])
    self.log(f"[dicode] resuming at session {self.state['session']} from {self.workdir}")

  def _commit(self, session: int, carried) -> None:
    mngr = checkpoint.manager(self.workdir / AGENT_DIR, keep=2)
    try:
      checkpoint.save(mngr, session, carried)
    finally:
      mngr.close()
    self.state["curriculum"] = self.curriculum.state_dict()
    self.state["session"] = session
    metrics.write_json(self.workdir / STATE_FILE, self.state)

  def _restore(self, like):
    session = self.state["session"]
    if session == 0:
      return None
    restored = checkpoint.restore(self.workdir / AGENT_DIR, like, step=session)
    return restored[0]

  # -- one session --

  def _session_env(self, plan, stop: int = NEVER):
    """The session's environment, counting from the scoring window (training) or, when playing
    for ``stop`` steps, from the first step."""
    c = self.config
    env = self.make_env(plan, c.ppo.num_envs, c, self.state["original_return"])
    start = max(0, c.updates_per_session - c.score_window) * c.ppo.num_steps
    return counted(env, num_units(plan, c), start if stop == NEVER else 0, stop)

  def program(self, env):
    """The PPO update for ``env``'s step (:func:`training.update_for`) and its jitted chunk."""
    if self.policy is None:
      self.policy = training.make_policy(env.num_actions, self.config)
    update = training.update_for(env, self.policy, self.ppo)
    return update, runtime.make_chunk_fn(update)

  def _agent_state(self, env, key):
    """The PPO state on ``env`` with the carried (or restored) agent."""
    state = training.init_state(env, self.policy, self.ppo, key)
    if self.carried is None:
      self.carried = self._restore({"train": state.train, "stats": state.stats})
    if self.carried is not None:
      state = state.replace(train=self.carried["train"], stats=self.carried["stats"])
    return state

  def _runtime_loop(self) -> runtime.Loop:
    c = self.config
    return runtime.Loop(
      c.updates_per_session,
      log_every=c.updates_per_session,
      ckpt_every=0,
      progress=False,
      tensorboard=False,
      plot=False,
    )

  def _chunk_len(self) -> int:
    """The chunk program's length (``max_len``) a session trains with: the runtime's first chunk
    of a fresh run is one step, so U updates are chunks of 1 and U - 1 (max_len U - 1)."""
    loop = self._runtime_loop()
    return runtime.chunk_length(loop)

  def play(self, plan, steps: int, key, until_done: bool = False):
    """The agent plays ``plan`` WITHOUT learning, through the training program, for ``steps``
    environment steps (rounded up to whole chunks of ``updates_per_session`` updates; episodes
    are recorded over exactly ``steps``); with ``until_done`` it stops once every environment's
    first episode has ended. Returns the final ``Counted`` state
    (:func:`training.play_together`)."""
    return training.play_together([self], [plan], steps, [key], until_done)[0]

  def plan_session(self, session: int):
    """The curriculum's plan of ``session`` (its random draws keyed by the seed and session)."""
    rng = np.random.default_rng([self.seed, session])
    plan = self.curriculum.plan(session, rng)
    self.log(f"[dicode] session {session}: training on {plan.size} {plan.kind}")
    return plan

  def record_session(self, plan, session: int, window: dict, info: dict) -> dict:
    """What the session taught: the original game's return, the curriculum's and the archive's
    scores, the history row (returned)."""
    stats = scoring.task_statistics(window, plan.names)
    original = plan.original_index()
    if original is not None and stats[original]["finished"]:
      self.state["original_return"] = stats[original]["mean_return"]
      rates = window["achievements"][original] / stats[original]["finished"]
      self.state["original_success"] = dict(zip(info["achievement_names"], map(float, rates)))
    self.curriculum.update(plan, window, session)
    if self.archive is not None:
      evolution.score_tasks(
        self.archive, self.curriculum, plan, stats, session, self.config, self.log
      )
    c = self.config
    env_steps = (session + 1) * c.updates_per_session * c.ppo.num_envs * c.ppo.num_steps
    row = {
      "session": session,
      "units": plan.size,
      "candidates": len(plan.candidates),
      "wall_s": round(info["wall_s"], 2),
      "env_steps": env_steps,
      "episode_return": info.get("train/episode_return", float("nan")),
      "original_return": self.state["original_return"],
      "mean_score": float(np.mean([s["score"] for s in stats])),
    }
    self.state["history"].append(row)
    self.log(
      f"[dicode] session {session}: {plan.size} {plan.kind}, "
      f"return {row['episode_return']:.3g}, original {row['original_return']:.3g}, "
      f"{row['wall_s']:.1f} s"
    )
    return row

  # -- the archive (dicode) --

  def evolve(self, session: int) -> dict:
    """One evolution round (:func:`evolution.evolve`), its record kept in the loop state."""
    context = {
      "session": session,
      "original_return": self.state["original_return"],
      "original_success": self.state.get("original_success", {}),
    }
    rng = np.random.default_rng([self.seed, session, 7])
    row = evolution.evolve(
      self.archive,
      self.curriculum,
      self.proposer,
      self.validate,
      self.config,
      context,
      rng,
      self.log,
    )
    self.state["evolution"].append(row)
    return row

  # -- the whole run --

  def run(self, sessions: int | None = None, stop_after: int | None = None) -> dict:
    """Runs (or resumes) up to ``sessions`` sessions; ``stop_after`` ends this call early after
    that many sessions (as a kill between sessions would, for tests). Returns the loop state."""
    return run_together([self], sessions, stop_after)[0]

  def after_session(self, session: int, total: int) -> None:
    """An evolution round when one is due, then the commit of the finished session."""
    last = session + 1 >= total  # children of the last session would never train
    if self._evolving() and not last and (session + 1) % self.config.evolve_every == 0:
      self.evolve(session)
    self._commit(session + 1, self.carried)

  def _evolving(self) -> bool:
    return self.archive is not None and self.proposer is not None

  def _check_archive(self) -> None:
    """On (re)start: the archive's tasks in use through the sandbox again, orphans retired."""
    if self.archive is not None:
      evolution.revalidate(self.archive, self.validate, self.log)
      evolution.reject_interrupted(self.archive, self.curriculum.candidates)

  def agent_params(self, env=None):
    """The current agent's parameters (restored, or freshly initialised before session 0)."""
    if self.carried is not None:
      return self.carried["train"].params
    if self.policy is None:
      self.policy = training.make_policy(env.num_actions, self.config)
    obs, _ = env.reset(jax.random.fold_in(self.key, -1 & 0x7FFFFFFF))
    n = obs.shape[0]
    reset = jnp.ones((1, n), bool)
    params = self.policy.init(self.key, self.policy.initial_carry(n), obs[None], reset)["params"]
    if self.state["session"] > 0:  # resuming: the committed agent
      tmpl = TrainState.create(self.policy, params, ppo.make_optimizer(self.ppo))
      stats = {"episode_return": jnp.zeros(()), "episode_length": jnp.zeros(())}
      stats["achievements"] = jnp.zeros((len(env.achievement_names),))
      self.carried = self._restore({"train": tmpl, "stats": stats})
      return self.carried["train"].params
    return params

  def score_levels(self, seeds) -> np.ndarray:
    """SFL's scores of original-game ``seeds``: the current policy plays them (no learning, the
    training program) for ``sfl_rollout_steps`` steps, ``units`` levels at a time, each drawn
    uniformly at every reset; achievement learnability of each level's finished episodes."""
    return training.score_levels_together([self], [seeds])[0]


# --- one or several seeds: one Loop per seed, their PPO vmapped in one program ---


def run_together(loops, sessions: int | None = None, stop_after: int | None = None) -> list:
  """:meth:`Loop.run` of every loop (one per seed, each in its own workdir with its own curriculum,
  archive and agent), the seeds' sessions trained TOGETHER: each session's PPO of every seed is one
  vmapped program (:func:`training.session_inputs`), the curricula plan, score and evolve on the
  host, seed by seed. Seeds that a killed run left at different sessions train in groups by
  session until they meet. Returns each loop's state; ``stop_after`` as in :meth:`Loop.run`
  (rounds of sessions).
  """
  loops = list(loops)
  total = loops[0].config.sessions if sessions is None else sessions
  with contextlib.ExitStack() as stack:
    for lp in loops:
      stack.enter_context(workdir_lib.session(lp.workdir, None))
    provenance.announce()
    for lp in loops:
      lp.load()
      lp._check_archive()
    done = 0
    while True:
      behind = [lp for lp in loops if lp.state["session"] < total]
      if not behind:
        break
      session = min(lp.state["session"] for lp in behind)
      group = [lp for lp in behind if lp.state["session"] == session]
      plans = plan_together(group, session)
      update, state, key, seeds, envs = training.session_inputs(group, plans, session)
      t0 = time.perf_counter()
      state, result = runtime.train(
        state, update, group[0]._runtime_loop(), key=key, data=training.flag(True), seeds=seeds
      )
      wall = time.perf_counter() - t0
      trained = training.session_results(group, plans, envs, state, result, seeds, wall)
      for lp, plan, (window, info) in zip(group, plans, trained):
        lp.record_session(plan, session, window, info)
        lp.after_session(session, total)
      done += 1
      if stop_after is not None and done >= stop_after:
        break
  return [lp.state for lp in loops]


def plan_together(loops, session: int) -> list:
  """Each loop's plan of ``session``. SFL's refresh plays the candidate levels with the current
  policy: the loops due for one play theirs together (:func:`training.score_levels_together`) before
  planning, on the very levels their plan then draws."""
  due = [
    lp
    for lp in loops
    if isinstance(lp.curriculum, curriculum_lib.SFL) and lp.curriculum.refresh_due(session)
  ]
  if len(due) < 2:
    return [lp.plan_session(session) for lp in loops]
  # the draws of each plan's own generator (plan_session makes the same one): the same levels
  drawn = [lp.curriculum.draw_candidates(np.random.default_rng([lp.seed, session])) for lp in due]
  scores = training.score_levels_together(due, drawn)
  kept = [lp.curriculum.score_levels for lp in due]
  try:
    for lp, levels, got in zip(due, drawn, scores):
      lp.curriculum.score_levels = functools.partial(_scored, levels, got)
    return [lp.plan_session(session) for lp in loops]
  finally:
    for lp, fn in zip(due, kept):
      lp.curriculum.score_levels = fn


def _scored(levels: list, scores: np.ndarray, asked) -> np.ndarray:
  if list(asked) != list(levels):
    raise RuntimeError("SFL asked for other levels than the ones scored before its plan")
  return scores
