"""The DiCode session loop (arXiv 2602.08194): sample tasks, train PPO-GTrXL, score, evolve.

One *session*: the curriculum plans what to train on (:mod:`curriculum`), the loop builds that
session's vectorised environment (the multitask environment over the session's tasks, a level
environment over original-game seeds, or the plain game), trains the SAME agent for ``U`` PPO
updates through ``jaxlab.core.runtime.train`` (``jaxlab.rl.ppo`` with ``policies.GTrXLPolicy``),
and counts, per task, the episodes that finished in the last ``W`` updates (the scoring window),
their successes, returns and achievements (:func:`counted`). The curriculum turns the counts into
scores (learnability ``p (1 - p)``, :mod:`scoring`). For ``dicode``, every ``E`` sessions an
evolution round runs: parents from the archive's frontier -> proposer (model or offline mutation)
-> ``sandbox.validate`` (rejections are recorded with their reason and never stop the run) ->
the survivors become *candidates*: they train in the next session next to the replayed tasks,
are scored there (the reference code's way of evaluating new tasks "briefly", within the session
budget), and are then admitted by score: with room in the active set when the score reaches
``min_entry_score``, else in place of the lowest-scored active task when they beat it
(compare-and-swap), else retired with the reason.

State and resume: after every session the agent (the PPO ``TrainState`` and episode statistics) is
saved with ``jaxlab.core.checkpoint`` under ``<workdir>/agent`` and then ``loop_state.json`` (the
next session, the curriculum's state, the running original-game return, the per-session history)
is written atomically; that file is the commit point. The archive commits each change itself
(write-new-then-rename). A killed loop restarts the session it was in, from the last committed
agent; the archive keeps everything written before the kill, and candidates of an interrupted
evolution round that never trained are retired with the reason "interrupted".

Cost: every session builds the same XLA program. The multitask environment reads everything
task-specific (each task's pool of starting worlds, multipliers, success set, bonus, slot, weight)
from a table in its state (``multitask.session_env``), padded to ``max(tasks_per_session, size)``
units; the level environment keeps its level seeds in its state; the per-unit counters have a
fixed size. A new task set is new data: ``runtime.train`` traces the PPO update again (its chunk
is jitted per call), the lowering is identical, and JAX's persistent compilation cache
(``jaxlab.core.experiment.enable_compile_cache``, on in every program) returns the executable
compiled in the first session. What a new task costs is its pool: ``pool_size`` worlds of its
program (``multitask.build_pool``: the program's world function compiled once, on top of the
once-compiled craftax generator), kept in memory and under ``<workdir>/pools/``
(:class:`PoolCache`).
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxlab.core import checkpoint, metrics, runtime
from jaxlab.core import workdir as workdir_lib
from jaxlab.envs import vec
from jaxlab.rl import ppo
from jaxlab.rl.dicode import curriculum as curriculum_lib
from jaxlab.rl.dicode import scoring
from jaxlab.rl.dicode.config import validate_config  # noqa: F401  (loop.validate_config)
from jaxlab.rl.ppo import policies

Array = jax.Array
STATE_FILE = "loop_state.json"
AGENT_DIR = "agent"
POOL_DIR = "pools"


# --- per-task episode counters over the scoring window ---


@struct.dataclass
class Counted:
  """An environment state plus per-unit counts of the episodes finished in the window."""

  inner: Any
  t: Array  # int32: environment steps of this session so far
  start: Array  # int32: steps before the scoring window opens
  finished: Array  # float32[K]
  success: Array  # float32[K]
  ret: Array  # float32[K]: sum of the finished episodes' returns
  achievements: Array  # float32[K, A]: finished episodes unlocking each achievement


def counted(env: vec.VecEnv, num_units: int, window_start: int) -> vec.VecEnv:
  """``env`` whose state also counts, per unit ``info["task"]`` (0 when absent), the episodes
  that end at or after environment step ``window_start`` of the session."""
  a = len(env.achievement_names)
  k = num_units

  def reset(key):
    obs, inner = env.reset(key)
    z = jnp.zeros((k,), jnp.float32)
    return obs, Counted(
      inner, jnp.int32(0), jnp.int32(window_start), z, z, z, jnp.zeros((k, a), jnp.float32)
    )

  def step(state: Counted, action, key):
    obs, inner, reward, done, info = env.step(state.inner, action, key)
    n = done.shape[0]
    task = info.get("task", jnp.zeros((n,), jnp.int32))
    success = info.get("success", jnp.zeros((n,), bool)).astype(jnp.float32)
    on = (info["returned_episode"] & (state.t >= state.start)).astype(jnp.float32)
    hot = jax.nn.one_hot(task, k, dtype=jnp.float32) * on[:, None]  # [N, K]
    ach = info.get("achievements", jnp.zeros((n, a), jnp.float32))
    new = Counted(
      inner=inner,
      t=state.t + 1,
      start=state.start,
      finished=state.finished + hot.sum(0),
      success=state.success + hot.T @ success,
      ret=state.ret + hot.T @ info["episode_return"],
      achievements=state.achievements + hot.T @ ach,
    )
    return obs, new, reward, done, info

  return dataclasses.replace(env, reset=reset, step=step)


def counts(state: Counted) -> dict[str, np.ndarray]:
  s = jax.device_get(state)
  return {
    "finished": np.asarray(s.finished),
    "success": np.asarray(s.success),
    "return": np.asarray(s.ret),
    "achievements": np.asarray(s.achievements),
  }


# --- original-game levels named by seed (PLR / SFL) ---


@struct.dataclass
class LevelState:
  inner: vec.VecState
  levels: Array  # uint32[L, 2]: world-generation keys
  weights: Array  # float32[L]: probability of each level at a reset
  level: Array  # int32[N]: the level each environment is playing


@functools.lru_cache(maxsize=8)
def _level_fns(name: str, num_envs: int, reset_ratio: int):
  """``(reset(key, levels, weights), step)`` of the level environment, built once per shape so
  every session (and every SFL scoring rollout) of the same size reuses the compiled code."""
  from craftax.craftax_env import make_craftax_env_from_name

  from jaxlab.envs import craftax

  env_id, _, _ = craftax.resolve(name, "config.env")
  env = make_craftax_env_from_name(env_id, False)
  params = env.default_params
  pool = max(1, num_envs // reset_ratio)

  def generate(levels, weights, key, count):
    idx = jax.random.categorical(key, jnp.log(weights), shape=(count,)).astype(jnp.int32)
    obs, st = jax.vmap(env.reset_env, in_axes=(0, None))(levels[idx], params)
    return idx, obs.astype(jnp.float32), st

  @jax.jit
  def reset(key, levels, weights):
    idx, obs, st = generate(levels, weights, key, num_envs)
    return obs, LevelState(vec.init_state(st, num_envs), levels, weights, idx)

  def step(state: LevelState, action, key):
    k_step, k_reset = jax.random.split(key)
    obs_st, env_st, reward, done, _ = jax.vmap(env.step_env, in_axes=(0, 0, 0, None))(
      jax.random.split(k_step, num_envs), state.inner.env, action, params
    )
    done = done.astype(bool)
    idx, obs_re, env_re = generate(state.levels, state.weights, k_reset, pool)
    slot = jnp.where(done, (jnp.cumsum(done) - 1) % pool, 0)
    obs = vec.select(done, obs_re[slot], obs_st)
    env_state = vec.select(done, jax.tree.map(lambda x: x[slot], env_re), env_st)
    inner, info = vec.track(state.inner, env_state, reward, done)
    info["achievements"] = jnp.where(done[:, None], env_st.achievements, False).astype(jnp.float32)
    info["task"] = state.level
    level = jnp.where(done, idx[slot], state.level)
    new = LevelState(inner, state.levels, state.weights, level)
    return obs, new, reward.astype(jnp.float32), done, info

  return reset, step


def level_env(name: str, num_envs: int, levels, weights, reset_ratio: int) -> vec.VecEnv:
  """Craftax whose episodes start in worlds generated from ``levels`` (uint32[L, 2] keys) drawn
  by ``weights``; ``info["task"]`` is the level index of a finished episode. The levels live in
  the state, so one compiled step serves every level set of the same size. Optimistic resets as
  in ``jaxlab.envs.craftax``: each step generates ``num_envs // reset_ratio`` worlds for the
  finished."""
  from jaxlab.envs import craftax

  base = craftax.make(name, num_envs, reset_ratio=reset_ratio, field="config.env")
  reset_fn, step = _level_fns(name, num_envs, reset_ratio)
  levels = jnp.asarray(levels, jnp.uint32)
  weights = jnp.asarray(weights, jnp.float32)
  return dataclasses.replace(base, reset=lambda key: reset_fn(key, levels, weights), step=step)


def make_rollout(step, policy, num_steps: int):
  """``rollout(params, state, obs, key) -> state``: ``num_steps`` policy steps, no learning."""

  @jax.jit
  def rollout(params, state, obs, key):
    n = obs.shape[0]

    act = ppo.rollouts.policy_actor(lambda *a: policy.apply({"params": params}, *a))
    init = (state, obs, jnp.ones((n,), bool), policy.initial_carry(n))
    return ppo.rollouts.rollout(step, act, init, key, num_steps, records=False)[0][0]

  return rollout


# --- the loop ---


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


@functools.lru_cache(maxsize=4)
def base_env(name: str, num_envs: int, reset_ratio: int) -> vec.VecEnv:
  """The unmodified game (its jitted reset reused by every session)."""
  from jaxlab.envs import craftax

  env = craftax.make(name, num_envs, reset_ratio=reset_ratio, field="config.env")
  return dataclasses.replace(env, reset=jax.jit(env.reset))


class PoolCache:
  """Each task program's pool of starting worlds (``multitask.build_pool``), built once per run:
  kept in memory and, with a ``root``, as ``<root>/<sha256 of the source>.npz`` so a resumed run
  does not rebuild them. Pool keys come from ``seed`` and the program's hash."""

  def __init__(self, pool_size: int, seed: int = 0, root=None):
    self.pool_size, self.seed = pool_size, seed
    self.root = None if root is None else pathlib.Path(root)
    self._tasks: dict[str, Any] = {}
    self._pools: dict[str, Any] = {}

  @staticmethod
  def digest(source: str) -> str:
    import hashlib

    return hashlib.sha256(source.encode()).hexdigest()

  def task(self, source: str):
    from jaxlab.rl.dicode import sandbox

    h = self.digest(source)
    if h not in self._tasks:
      self._tasks[h] = sandbox.load(source)
    return self._tasks[h]

  def pool(self, source: str):
    from jaxlab.rl.dicode import multitask

    h = self.digest(source)
    if h in self._pools:
      return self._pools[h]
    path = None if self.root is None else self.root / f"{h[:32]}.npz"
    pool = None
    if path is not None and path.exists():
      try:
        with np.load(path, allow_pickle=False) as f:
          pool = multitask.pool_from_arrays(dict(f), self.pool_size)
      except (OSError, ValueError, KeyError):
        pool = None  # unreadable or another pool size: rebuilt below
    if pool is None:
      key = jax.random.fold_in(jax.random.key(self.seed), int(h[:7], 16))
      pool = jax.block_until_ready(multitask.build_pool(self.task(source), key, self.pool_size))
      if path is not None:
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp.npz")
        np.savez_compressed(tmp, **multitask.pool_to_arrays(pool))
        tmp.replace(path)
    self._pools[h] = pool
    return pool


def num_units(plan, config) -> int:
  """Units of a session's environment: fixed per run, so every session has the same shapes."""
  if plan.kind == "tasks":
    return max(config.tasks_per_session, plan.size)
  return plan.size


def is_original(name: str, source: str) -> bool:
  """The unmodified game (the seed program ``original``): its worlds are generated fresh."""
  from jaxlab.rl.dicode import seeds

  return name == curriculum_lib.ORIGINAL and source == seeds.load_seed_tasks()[name]


def default_make_env(
  plan, num_envs: int, config, original_return: float, pools: PoolCache | None = None
) -> vec.VecEnv:
  """The session's environment: plain Craftax, the level environment, or the multitask one (one
  compiled program per run: the session's tasks are data, see ``multitask.session_env``)."""
  if plan.kind == "base":
    return base_env(config.env, num_envs, config.ppo.reset_ratio)
  if plan.kind == "levels":
    return level_env(config.env, num_envs, plan.levels, plan.weights, config.ppo.reset_ratio)
  from jaxlab.rl.dicode import multitask

  pools = pools or PoolCache(config.pool_size)
  table = multitask.build_table(
    [pools.task(s) for s in plan.sources],
    [pools.pool(s) for s in plan.sources],
    plan.slots,
    num_units(plan, config),
    fresh=[is_original(n, s) for n, s in zip(plan.names, plan.sources)],
    weights=[float(w) for w in plan.weights],
    bonus_k=config.bonus_k,
    bonus_floor=config.bonus_floor,
    original_return=original_return if config.bonus == "dynamic" else 0.0,
  )
  return multitask.session_env(
    config.env,
    num_envs,
    config.num_slots,
    table,
    bonus=config.bonus,
    bonus_k=config.bonus_k,
    bonus_floor=config.bonus_floor,
    reset_ratio=config.ppo.reset_ratio,
  )


def ppo_config(config) -> ppo.PPOConfig:
  total = config.sessions * config.updates_per_session
  return ppo.PPOConfig.from_config(config.ppo, num_updates=total)


def make_policy(num_actions: int, config):
  kw = {k: (tuple(v) if isinstance(v, list) else v) for k, v in config.ppo.gtrxl.items()}
  return policies.make("gtrxl", num_actions, 0, **kw)


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
    self.ppo = ppo_config(config)
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

  def _session_env(self, plan):
    c = self.config
    env = self.make_env(plan, c.ppo.num_envs, c, self.state["original_return"])
    start = max(0, c.updates_per_session - c.score_window) * c.ppo.num_steps
    return counted(env, num_units(plan, c), start)

  def train_session(self, plan, session: int):
    """Trains ``updates_per_session`` PPO updates on ``plan``; returns (window counts, metrics)."""
    c = self.config
    env = self._session_env(plan)
    if self.policy is None:
      self.policy = make_policy(env.num_actions, c)
    key = jax.random.fold_in(self.key, session)
    state = ppo.init(env, self.policy, self.ppo, jax.random.fold_in(key, 0))
    if self.carried is None:
      self.carried = self._restore({"train": state.train, "stats": state.stats})
    if self.carried is not None:
      state = state.replace(train=self.carried["train"], stats=self.carried["stats"])
    update = ppo.make_update(env, self.policy, self.ppo)
    loop = runtime.Loop(
      c.updates_per_session,
      log_every=c.updates_per_session,
      ckpt_every=0,
      progress=False,
      tensorboard=False,
      plot=False,
    )
    t0 = time.perf_counter()
    state, result = runtime.train(state, update, loop, key=jax.random.fold_in(key, 1))
    self.carried = {"train": state.train, "stats": state.stats}
    info = {
      "wall_s": time.perf_counter() - t0,
      "achievement_names": env.achievement_names,
      **result.summary,
    }
    window = {k: v[: plan.size] for k, v in counts(state.env_state).items()}
    return window, info

  def run_session(self, session: int) -> dict:
    rng = np.random.default_rng([self.seed, session])
    plan = self.curriculum.plan(session, rng)
    self.log(f"[dicode] session {session}: training on {plan.size} {plan.kind}")
    window, info = self.train_session(plan, session)
    stats = scoring.task_statistics(window, plan.names)
    original = plan.original_index()
    if original is not None and stats[original]["finished"]:
      self.state["original_return"] = stats[original]["mean_return"]
      rates = window["achievements"][original] / stats[original]["finished"]
      self.state["original_success"] = dict(zip(info["achievement_names"], map(float, rates)))
    self.curriculum.update(plan, window, session)
    if self.archive is not None:
      self._score_archive(plan, stats, session)
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

  def _score_archive(self, plan, stats, session: int) -> None:
    candidates = set(plan.candidates)
    for task_id, st in zip(plan.ids, stats):
      if task_id is None:
        continue
      status = self.archive.get(task_id)["status"]
      self.archive.update_score(
        task_id,
        st["score"],
        session,
        success_rate=st["success_rate"],
        finished=st["finished"],
        last_trained=session,
      )
      if task_id in candidates and status == "validated":
        self._admit(task_id, st["score"], session)
    self.curriculum.candidates = [c for c in self.curriculum.candidates if c not in candidates]

  def _admit(self, task_id, score: float, session: int) -> None:
    """Compare-and-swap: room and ``score >= min_entry_score``, or beat the worst active task."""
    c = self.config
    active = curriculum_lib.active_records(self.archive)
    room = len(active) < min(c.capacity, c.num_slots - 1)
    if room and score >= c.min_entry_score:
      self.archive.admit(task_id, score, session)
    elif room:
      self.archive.reject(
        task_id, f"score {score:.4g} below the entry threshold {c.min_entry_score}"
      )
    else:
      worst = min(active, key=lambda r: (r["score"], -r["last_trained"]))
      if score > worst["score"]:
        self.archive.retire(worst["id"])
        self.archive.admit(task_id, score, session)
        self.log(f"[dicode] task {task_id} (score {score:.3g}) replaced task {worst['id']}")
      else:
        self.archive.reject(
          task_id, f"score {score:.4g} does not beat the worst active task's {worst['score']:.4g}"
        )

  def evolve(self, session: int) -> dict:
    """One evolution round: frontier parents -> proposals -> sandbox -> candidates (see module).

    Each parent gets its share of ``proposals`` (so every child's parent is known). A proposer
    that fails (e.g. an endpoint that went away) or a rejected program costs that proposal only.
    """
    c = self.config
    parents = frontier(curriculum_lib.active_records(self.archive), c.parents)
    context = {
      "session": session,
      "original_return": self.state["original_return"],
      "original_success": self.state.get("original_success", {}),
    }
    rng = np.random.default_rng([self.seed, session, 7])
    shares = (
      [c.proposals // len(parents) + (i < c.proposals % len(parents)) for i in range(len(parents))]
      if parents
      else []
    )
    children: list[tuple[str, Any]] = []
    for parent, n in zip(parents, shares):
      if n == 0:
        continue
      try:
        sources = self.proposer.propose([parent], context, n, int(rng.integers(2**31 - 1)))
      except Exception as e:  # noqa: BLE001  (the run goes on without this parent's children)
        self.log(f"[dicode] proposer failed for parent {parent['id']}: {type(e).__name__}: {e}")
        sources = []
      children += [(src, parent["id"]) for src in sources]
    verdicts = self.validate([src for src, _ in children]) if children else []
    valid, rejected = [], []
    for (source, parent_id), verdict in zip(children, verdicts):
      task_id = self.archive.add(source, parent_id, session + 1, verdict)
      if verdict.ok:
        valid.append(task_id)
      else:
        rejected.append({"id": task_id, "reason": verdict.reason})
        self.log(f"[dicode] rejected proposal {task_id}: {verdict.reason}")
    self.curriculum.candidates = list(self.curriculum.candidates) + valid
    row = {
      "session": session,
      "parents": [p["id"] for p in parents],
      "proposed": len(children),
      "valid": valid,
      "rejected": rejected,
    }
    self.state["evolution"].append(row)
    self.log(
      f"[dicode] evolution after session {session}: {len(children)} proposed, "
      f"{len(valid)} passed the sandbox, {len(rejected)} rejected"
    )
    return row

  # -- the whole run --

  def run(self, sessions: int | None = None, stop_after: int | None = None) -> dict:
    """Runs (or resumes) up to ``sessions`` sessions; ``stop_after`` ends this call early after
    that many sessions (as a kill between sessions would, for tests). Returns the loop state."""
    total = self.config.sessions if sessions is None else sessions
    with workdir_lib.session(self.workdir, None):
      self.load()
      self._reject_interrupted()
      done = 0
      while self.state["session"] < total:
        session = self.state["session"]
        self.run_session(session)
        last = session + 1 >= total  # children of the last session would never train
        if self._evolving() and not last and (session + 1) % self.config.evolve_every == 0:
          self.evolve(session)
        self._commit(session + 1, self.carried)
        done += 1
        if stop_after is not None and done >= stop_after:
          break
    return self.state

  def _evolving(self) -> bool:
    return self.archive is not None and self.proposer is not None

  def _reject_interrupted(self) -> None:
    if self.archive is None:
      return
    keep = set(self.curriculum.candidates)
    for rec in candidate_records(self.archive):
      if rec["id"] not in keep:
        self.archive.reject(
          rec["id"], "interrupted: the loop stopped before its evaluation session"
        )

  def agent_params(self, env=None):
    """The current agent's parameters (restored, or freshly initialised before session 0)."""
    if self.carried is not None:
      return self.carried["train"].params
    if self.policy is None:
      self.policy = make_policy(env.num_actions, self.config)
    obs, _ = env.reset(jax.random.fold_in(self.key, -1 & 0x7FFFFFFF))
    n = obs.shape[0]
    reset = jnp.ones((1, n), bool)
    params = self.policy.init(self.key, self.policy.initial_carry(n), obs[None], reset)["params"]
    if self.state["session"] > 0:  # resuming: the committed agent
      tmpl = ppo.TrainState.create(self.policy, params, ppo.make_optimizer(self.ppo))
      stats = {"episode_return": jnp.zeros(()), "episode_length": jnp.zeros(())}
      stats["achievements"] = jnp.zeros((len(env.achievement_names),))
      self.carried = self._restore({"train": tmpl, "stats": stats})
      return self.carried["train"].params
    return params

  def score_levels(self, seeds) -> np.ndarray:
    """SFL's scores of original-game ``seeds``: the current policy plays them (no learning) for
    ``sfl_rollout_steps`` steps; achievement learnability of each level's finished episodes."""
    c = self.config
    n = len(seeds)
    levels = curriculum_lib.seed_keys(seeds)
    env = counted(level_env(c.env, n, levels, np.full(n, 1.0 / n), c.ppo.reset_ratio), n, 0)
    params = self.agent_params(env)
    if getattr(self, "_rollout", None) is None:
      self._rollout = make_rollout(env.step, self.policy, c.sfl_rollout_steps)
    key = jax.random.fold_in(self.key, 1_000_000 + self.state["session"])
    obs, state = env.reset(key)
    window = counts(self._rollout(params, state, obs, key))
    return curriculum_lib.level_score(window["achievements"], window["finished"])


def frontier(active: list[dict], k: int) -> list[dict]:
  """Parents for evolution: learnable active tasks (``0 < p < 1``) by score, then the rest by
  score. Simplified from the reference's lineage-aware frontier (no "superseded by a child"
  filter, no branching cap)."""
  learnable = [r for r in active if 0.0 < r.get("success_rate", -1.0) < 1.0]
  rest = [r for r in active if r not in learnable]
  ranked = sorted(learnable, key=lambda r: -r["score"]) + sorted(rest, key=lambda r: -r["score"])
  return ranked[:k]


def candidate_records(archive) -> list[dict]:
  """Archive tasks that passed the sandbox but were neither admitted nor retired yet."""
  return [m for m in archive.records() if m["status"] == "validated"]


def open_archive(root, seeds: dict[str, str], num_slots: int):
  """The run's archive (``num_slots - 1`` task slots: the last one is the original game's); on
  first use the seed tasks other than the original game are added and admitted."""
  from jaxlab.rl.dicode import archive as archive_lib
  from jaxlab.rl.dicode import sandbox

  archive = archive_lib.Archive(root, num_slots - 1)
  if len(archive) == 0:
    for name in sorted(seeds):
      if name != curriculum_lib.ORIGINAL:
        verdict = sandbox.Verdict(True, "seed task", name, {"seed": True})
        archive.admit(archive.add(seeds[name], None, 0, verdict))
  return archive


def archive_summary(archive, top: int = 10) -> dict:
  """Counts by status, rejection reasons (sandbox and admission), the top active tasks."""
  records = archive.records()
  counts_ = {s: sum(r["status"] == s for r in records) for s in archive_lib_statuses()}
  reasons: dict[str, int] = {}
  for r in records:
    if r["status"] == "rejected":
      reasons[r["reason"]] = reasons.get(r["reason"], 0) + 1
  active = sorted(curriculum_lib.active_records(archive), key=lambda r: -r["score"])
  keep = ("id", "name", "score", "success_rate", "slot", "parent", "generation", "dir")
  return {
    "tasks": len(records),
    "proposed": sum(r["generation"] > 0 or r.get("parent") is not None for r in records),
    "by_status": counts_,
    "admitted_proposals": sum(
      r["status"] == "admitted" and not r.get("info", {}).get("seed") for r in records
    ),
    "rejection_reasons": dict(sorted(reasons.items(), key=lambda kv: -kv[1])),
    "top": [{k: r.get(k) for k in keep} for r in active[:top]],
  }


def archive_lib_statuses() -> tuple[str, ...]:
  from jaxlab.rl.dicode import archive as archive_lib

  return archive_lib.STATUSES


# --- the end of a run: evaluation and summary ---


def evaluate(run: Loop, curriculum: str) -> tuple[dict, dict]:
  """Held-out original-game evaluation of the run's agent (see ``evaluation``)."""
  from jaxlab.rl.dicode import evaluation

  c = run.config
  slot = None  # the original game's conditioning slot, for task-conditioned agents
  if curriculum == "dicode":
    slot = c.num_slots - 1
  elif curriculum == "dr":
    slot = run.curriculum.names.index(curriculum_lib.ORIGINAL)
  suffix = evaluation.one_hot(c.num_slots, slot)
  env = base_env(c.env, c.ppo.eval_envs, c.ppo.reset_ratio)
  params = run.agent_params(evaluation.with_suffix(env, suffix))
  evaluate = evaluation.make_evaluator(
    c.env, c.ppo.eval_envs, c.ppo.eval_steps, run.policy, suffix, reset_ratio=c.ppo.reset_ratio
  )
  return evaluate(params)


def finish(run: Loop, state: dict, curriculum: str) -> dict:
  """Evaluates the agent, writes summary.json and achievements.png; returns the summary."""
  from jaxlab.core import provenance
  from jaxlab.rl.ppo import evaluation as ppo_eval

  t0 = time.perf_counter()
  scalars, rates = evaluate(run, curriculum)
  history = state["history"]
  summary = {
    "curriculum": curriculum,
    "sessions": state["session"],
    "env_steps": history[-1]["env_steps"] if history else 0,
    "train_wall_s": float(sum(h["wall_s"] for h in history)),
    "eval_wall_s": time.perf_counter() - t0,
    **{f"eval/{k}": v for k, v in scalars.items()},
    "achievements": rates,
    "history": history,
  }
  if run.archive is not None:
    summary["archive"] = archive_summary(run.archive)
    summary["evolution"] = state["evolution"]
  summary["provenance"] = provenance.collect()
  ppo_eval.achievement_chart(
    run.workdir / "achievements.png", rates, title=f"{curriculum}: held-out original-game worlds"
  )
  runtime.write_summary(run.workdir, summary)  # last: its presence means the run finished
  run.log(
    f"[dicode] {curriculum}: eval return {scalars['return']:.3g} "
    f"({scalars.get('return_pct', float('nan')):.3g}% of max) over {run.config.ppo.eval_envs} "
    f"held-out worlds -> {run.workdir}"
  )
  return summary


def compare(dirs, out) -> dict:
  """comparison.png / comparison.json over finished runs (a dir of seed*/ runs is averaged)."""
  from jaxlab.rl.dicode import evaluation

  out = workdir_lib.check_writable(out, "workdir")  # before anything is read or written
  results = {}
  for d in map(pathlib.Path, dirs):
    paths = (
      [d / "summary.json"]
      if (d / "summary.json").exists()
      else sorted(d.glob("seed*/summary.json"))
    )
    runs = [metrics.read_json(p) for p in paths]
    label = runs[0].get("curriculum", d.name)
    evals = [{k[5:]: v for k, v in r.items() if k.startswith("eval/")} for r in runs]
    results[label if label not in results else f"{label} ({d})"] = evaluation.aggregate(evals)
  workdir_lib.create(out)
  metrics.write_json(out / "comparison.json", results)
  evaluation.comparison_chart(
    out / "comparison.png", results, title="held-out original-game return by curriculum"
  )
  for label, r in results.items():
    print(
      f"{label:>12}: {r['return_pct']:.3g}% of max (±{r['return_pct_std']:.2g}, "
      f"{int(r['seeds'])} seed(s)), return {r['return']:.3g}"
    )
  return results
