"""The DiCode session loop (arXiv 2602.08194): sample tasks, train PPO-GTrXL, score, evolve.

One *session*: the curriculum plans what to train on (:mod:`curriculum`), the loop builds that
session's vectorised environment (always the multitask environment: over the session's tasks,
over original-game levels, or with every unit the plain game), trains the SAME agent for ``U``
PPO updates through ``jaxlab.core.runtime.train`` (``jaxlab.rl.ppo``; ``policies.GTrXLPolicy`` by
default, ``config.policy``), and counts, per task, the episodes that finished in the last ``W``
updates (the scoring window), their successes, returns and achievements (:func:`counted`). The
curriculum turns the counts into scores (learnability ``p (1 - p)``, :mod:`scoring`). For
``dicode``, every ``E`` sessions an evolution round runs: parents from the archive's frontier ->
proposer (model or offline mutation) -> ``sandbox.validate`` (rejections are recorded with their
reason and never stop the run) -> the survivors become *candidates*: they train in the next
session next to the replayed tasks, are scored there (the reference code's way of evaluating new
tasks "briefly", within the session budget), and are then admitted by score: with room in the
active set when the score reaches ``min_entry_score``, else in place of the lowest-scored active
task when they beat it (compare-and-swap), else retired with the reason.

State and resume: after every session the agent (the PPO ``TrainState`` and episode statistics) is
saved with ``jaxlab.core.checkpoint`` under ``<workdir>/agent`` and then ``loop_state.json`` (the
next session, the curriculum's state, the running original-game return, the per-session history)
is written atomically; that file is the commit point. The archive commits each change itself
(write-new-then-rename). A killed loop restarts the session it was in, from the last committed
agent; the archive keeps everything written before the kill, and candidates of an interrupted
evolution round that never trained are retired with the reason "interrupted".

Cost: ONE compiled program per run trains, evaluates and scores. :func:`make_update` is PPO's
iteration with its learning step under ``lax.cond`` on a flag passed as data, so a session
(learning), the held-out evaluation and SFL's level scoring (:meth:`Loop.play`, no learning) call
the same jitted chunk. Everything task-specific is data in the environment state
(``multitask.session_env``: each unit's pool of starting worlds, multipliers, success set, bonus,
slot, weight, padded to ``num_units`` units; the evaluation's held-out worlds are one more such
table, played in order), and the per-unit counters have a fixed size, so a new task set, a level
set or the evaluation is new data for the same executable (traced once per process; a new
process gets it from JAX's persistent compilation cache, ``enable_compile_cache``). No world is
generated inside that program: craftax's world generator is compiled once, for ``pool_size``
worlds (``world.base_worlds``), and makes the task pools' base worlds, the original game's fresh
worlds (drawn anew every session, :meth:`PoolCache.fresh`), the levels' worlds and the held-out
worlds. What a new task costs is its pool (``multitask.build_pool``: the program's world
function, compiled once per program), kept in memory and under ``<workdir>/pools/``
(:class:`PoolCache`).

Several seeds (:func:`run_together`; ``experiments.dicode --seeds``): one :class:`Loop` per seed,
each in its own workdir with its own curriculum, archive, pools and agent. Because the task set is
data, the seeds' session environments share one step function, so a session of every seed is one
run of the runtime over a seed axis (:func:`train_together`: the chunk above, vmapped), and so
are the evaluation and SFL's scoring (:func:`play_together`); planning, scoring, evolution and
commits stay on the host, seed by seed. Seed ``k`` computes what its loop alone computes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import pathlib
import time
import types
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxlab.core import checkpoint, metrics, provenance, runtime
from jaxlab.core import seeds as seeds_lib
from jaxlab.core import workdir as workdir_lib
from jaxlab.core.sharding import to_device as _host
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

NEVER = 2**31 - 1  # a step count no session reaches


@struct.dataclass
class Counted:
  """An environment state plus per-unit counts of the episodes finished in the window, and each
  environment's first episode up to step ``stop`` (the evaluation's record)."""

  inner: Any
  t: Array  # int32: environment steps of this session so far
  start: Array  # int32: steps before the scoring window opens
  finished: Array  # float32[K]
  success: Array  # float32[K]
  ret: Array  # float32[K]: sum of the finished episodes' returns
  achievements: Array  # float32[K, A]: finished episodes unlocking each achievement
  stop: Array  # int32: the first episodes are recorded for this many steps
  first_done: Array  # bool[N]: the environment's first episode has ended
  first_ret: Array  # float32[N]: its return (so far, while it runs)
  first_len: Array  # int32[N]
  first_ach: Array  # float32[N, A]: its achievements, once it has ended


@functools.lru_cache(maxsize=16)
def _counted_step(step: Callable, k: int, a: int) -> Callable:
  """One wrapped step per inner step function: sessions over the same environment code share
  it, so the PPO program built on it is traced once per run (the task set is state)."""

  def counted_step(state: Counted, action, key):
    obs, inner, reward, done, info = step(state.inner, action, key)
    n = done.shape[0]
    task = info.get("task", jnp.zeros((n,), jnp.int32))
    success = info.get("success", jnp.zeros((n,), bool)).astype(jnp.float32)
    on = (info["returned_episode"] & (state.t >= state.start)).astype(jnp.float32)
    hot = jax.nn.one_hot(task, k, dtype=jnp.float32) * on[:, None]  # [N, K]
    ach = info.get("achievements", jnp.zeros((n, a), jnp.float32))
    live = ~state.first_done & (state.t < state.stop)
    ends = done & live
    new = Counted(
      inner=inner,
      t=state.t + 1,
      start=state.start,
      finished=state.finished + hot.sum(0),
      success=state.success + hot.T @ success,
      ret=state.ret + hot.T @ info["episode_return"],
      achievements=state.achievements + hot.T @ ach,
      stop=state.stop,
      first_done=state.first_done | ends,
      first_ret=state.first_ret + jnp.where(live, reward.astype(jnp.float32), 0.0),
      first_len=state.first_len + live.astype(jnp.int32),
      first_ach=jnp.where(ends[:, None], ach, state.first_ach),
    )
    return obs, new, reward, done, info

  return counted_step


def counted(env: vec.VecEnv, num_units: int, window_start: int, stop: int = NEVER) -> vec.VecEnv:
  """``env`` whose state also counts, per unit ``info["task"]`` (0 when absent), the episodes
  that end at or after environment step ``window_start`` of the session, and records each
  environment's first episode over the first ``stop`` steps (:func:`first_episodes`)."""
  a = len(env.achievement_names)
  k = num_units

  def reset(key):
    obs, inner = env.reset(key)
    n = obs.shape[0]
    z = _zeros((k,), np.float32)
    return obs, Counted(
      inner,
      _host(np.int32(0)),
      _host(np.int32(window_start)),
      z,
      z,
      z,
      _zeros((k, a), np.float32),
      _host(np.int32(stop)),
      _zeros((n,), bool),
      _zeros((n,), np.float32),
      _zeros((n,), np.int32),
      _zeros((n, a), np.float32),
    )

  return dataclasses.replace(env, reset=reset, step=_counted_step(env.step, k, a))


def _zeros(shape, dtype):
  return _host(np.zeros(shape, dtype))


# Key arithmetic as one program each: eagerly, a split and the unpacking of its result are
# separate small programs (threefry is integer arithmetic: the same keys either way).
_split2 = jax.jit(lambda key: tuple(jax.random.split(key)))


@functools.partial(jax.jit, static_argnums=(1, 2))
def _split_rows(key, rows: int, cols: int):
  """``split(key, rows * cols).reshape(rows, cols)`` as a tuple of its rows."""
  return tuple(jax.random.split(key, rows * cols).reshape(rows, cols))


def counts(state: Counted) -> dict[str, np.ndarray]:
  s = jax.device_get(state)
  return {
    "finished": np.asarray(s.finished),
    "success": np.asarray(s.success),
    "return": np.asarray(s.ret),
    "achievements": np.asarray(s.achievements),
  }


def first_episodes(state: Counted) -> dict[str, np.ndarray]:
  """Each environment's first episode, as ``jaxlab.rl.ppo.evaluation.summarize`` reads it."""
  s = jax.device_get(state)
  return {
    "return": np.asarray(s.first_ret),
    "length": np.asarray(s.first_len),
    "finished": np.asarray(s.first_done),
    "achievements": np.asarray(s.first_ach),
  }


# --- one program that trains and evaluates ---


@functools.lru_cache(maxsize=8)
def _agent_init(policy, config: ppo.PPOConfig, num_achievements: int) -> Callable:
  """``init(key, obs) -> (train, carry, reset, stats)``: the agent's part of ``ppo.init``'s state
  as ONE compiled program (the network's initialisation, the optimizer's zeros, the carry and
  the statistics op by op were a dozen small programs, each compiled or read from the cache)."""
  tx = ppo.make_optimizer(config)

  def init(key, obs):
    n = obs.shape[0]
    carry = policy.initial_carry(n)
    params = policy.init(key, carry, obs[None], jnp.ones((1, n), bool))["params"]
    stats = {
      "episode_return": jnp.zeros((), jnp.float32),
      "episode_length": jnp.zeros((), jnp.float32),
    }
    if num_achievements:
      stats["achievements"] = jnp.zeros((num_achievements,), jnp.float32)
    train = ppo.TrainState.create(policy, params, tx)
    return train, carry, jnp.ones((n,), bool), stats

  return jax.jit(init)


def init_state(env, policy, config: ppo.PPOConfig, key) -> ppo.PPOState:
  """``ppo.init``'s state (same keys, same values) without compiling the environment's reset
  into a program of its own: the session's reset already is one compiled program that takes the
  task table as an ARGUMENT, whereas a program around ``env.reset`` would capture the table (the
  pools' worlds, megabytes) as a constant and compile anew for every task set."""
  k_env, k_net = _split2(key)
  obs, env_state = env.reset(k_env)
  init = _agent_init(policy, config, len(env.achievement_names or ()))
  train, carry, reset, stats = init(k_net, obs)
  # TrainState.create's step is the Python int 0 (as ppo.init keeps it); a program returns arrays.
  return ppo.PPOState(
    train=train.replace(step=0), env_state=env_state, obs=obs, reset=reset, carry=carry, stats=stats
  )


_UPDATES: dict = {}  # (environment step, policy, PPOConfig) -> make_update


def make_update(env: vec.VecEnv, policy, config: ppo.PPOConfig) -> Callable:
  """PPO's iteration (``ppo.make_update``, composed from ppo's public ``rollout``, ``learn`` and
  ``episode_stats``) whose learning step runs only when ``batch`` (a bool scalar) is True.

  Training (``True``) and every rollout without learning (``False``: the held-out evaluation,
  SFL's level scoring) run the SAME compiled program: the environment step and the policy are
  compiled once per run instead of once per use.
  """
  # ppo.is_recurrent, from the carry's shapes: built eagerly it is two small XLA programs
  recurrent = jax.tree.leaves(jax.eval_shape(lambda: policy.initial_carry(1))) != []
  ppo.validate(config, recurrent)
  per_update = config.num_envs * config.num_steps

  # jitted, with everything it reads as arguments, so that the shape probe and the cond's branch
  # share ONE trace of the learning step (jax caches a jitted function's trace by argument
  # types); XLA inlines the call, so the program computes what the inline version did
  @jax.jit
  def fit(train, traj, carry0, last_value, key):
    return ppo.learn(train, traj, carry0, last_value, config, key, recurrent=recurrent)

  def update(state, learn, key):
    k_roll, k_learn = jax.random.split(key)
    carry0 = state.carry
    state, traj = ppo.rollout(state, env, config, k_roll)
    _, _, last_value = state.train(state.carry, state.obs[None], state.reset[None])
    used = {k: traj[k] for k in ("obs", "reset", "action", "log_prob", "value", "reward", "done")}
    args = (used, carry0, last_value[0], k_learn)
    parts = jax.eval_shape(fit, state.train, *args)[1]
    skip = lambda train, *_: (train, jax.tree.map(lambda p: jnp.zeros(p.shape, p.dtype), parts))
    train, parts = jax.lax.cond(learn, fit, skip, state.train, *args)
    stats, episode = ppo.episode_stats(state.stats, traj["info"], env)
    iteration = train.step // (config.epochs * config.minibatches)
    env_steps = iteration.astype(jnp.float32) * per_update
    metrics = {**parts, **episode, "env_steps": env_steps}
    return state.replace(train=train, stats=stats), metrics

  return update


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

  def fresh(self, key, count: int):
    """``count`` pools of freshly generated original-game worlds (leaves [count, P, ...]), drawn
    per session: the same generator program (``world.base_worlds`` on P keys) as the pools."""
    from jaxlab.rl.dicode import world

    pools = [world.base_worlds(k) for k in _split_rows(key, count, self.pool_size)]
    return [jax.block_until_ready(p) for p in pools]

  def levels(self, level_keys):
    """One pool per original-game level (uint32[L, 2] world-generation keys, PLR/SFL): the
    level's world, P times; generated P levels per call of the same generator program."""
    from jaxlab.rl.dicode import world

    keys = np.asarray(level_keys, np.uint32)
    n, p = keys.shape[0], self.pool_size
    keys = np.concatenate([keys, np.repeat(keys[:1], -n % p, axis=0)])
    wrap = jax.random.wrap_key_data
    batches = [world.base_worlds(wrap(keys[i : i + p])) for i in range(0, len(keys), p)]
    return [
      jax.tree.map(lambda x, j=j: _host_repeat(x, j, p), batches[i // p])
      for i, j in ((i, i % p) for i in range(n))
    ]


def _host_repeat(x, j: int, p: int):
  """``x[j]`` P times along the leading axis, built on the host (no eager XLA program)."""
  if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
    data = np.asarray(jax.random.key_data(x))[j]
    return jax.random.wrap_key_data(np.repeat(data[None], p, 0), impl=jax.random.key_impl(x))
  return jnp.asarray(np.repeat(np.asarray(x)[j][None], p, 0))


def num_units(plan, config) -> int:
  """Units of a session's environment: fixed per run (whatever the curriculum), so every session
  and the evaluation have the same shapes and run one compiled program."""
  return max(config.tasks_per_session, config.levels_per_session, plan.size)


def is_original(name: str, source: str) -> bool:
  """The unmodified game (the seed program ``original``): its worlds are generated fresh."""
  from jaxlab.rl.dicode import seeds

  return name == curriculum_lib.ORIGINAL and source == seeds.load_seed_tasks()[name]


def original_slot(config, curriculum: str, plan=None) -> int:
  """The conditioning slot of the original game: the last one (``dr``: its seed-task index)."""
  if curriculum == "dr" and plan is not None:
    return plan.slots[plan.names.index(curriculum_lib.ORIGINAL)]
  return config.num_slots - 1


def default_make_env(
  plan, num_envs: int, config, original_return: float, pools: PoolCache | None = None
) -> vec.VecEnv:
  """The session's environment: always the multitask environment, so every curriculum, session
  and the evaluation run ONE compiled program (the session's tasks are data, see
  ``multitask.session_env``). ``base`` (the plain game): every unit is the original game with
  its own pool of fresh worlds; ``levels``: a unit per level, its pool that level's world;
  ``tasks``: each task's pool, the original game's drawn fresh each session."""
  from jaxlab.rl.dicode import multitask, seeds

  pools = pools or PoolCache(config.pool_size)
  k = num_units(plan, config)
  key = jax.random.fold_in(jax.random.key(pools.seed), 1_000 + getattr(plan, "session", 0))
  original = seeds.load_seed_tasks()[curriculum_lib.ORIGINAL]
  if plan.kind == "base":
    tasks, slots = [pools.task(original)] * k, [config.num_slots - 1] * k
    units, weights = pools.fresh(key, k), [1.0] * k
  elif plan.kind == "worlds":  # given pools of the unmodified game (the held-out evaluation)
    tasks, slots = [pools.task(original)] * plan.size, list(plan.slots)
    units, weights = list(plan.pools), [float(w) for w in plan.weights]
  elif plan.kind == "levels":
    tasks, slots = [pools.task(original)] * plan.size, [config.num_slots - 1] * plan.size
    units, weights = pools.levels(plan.levels), [float(w) for w in plan.weights]
  else:
    tasks = [pools.task(s) for s in plan.sources]
    fresh = [is_original(n, s) for n, s in zip(plan.names, plan.sources)]
    new = iter(pools.fresh(key, sum(fresh)) if any(fresh) else [])
    units = [next(new) if f else pools.pool(s) for f, s in zip(fresh, plan.sources)]
    slots, weights = plan.slots, [float(w) for w in plan.weights]
  table = multitask.build_table(
    tasks,
    units,
    slots,
    k,
    weights=weights,
    bonus_k=config.bonus_k,
    bonus_floor=config.bonus_floor,
    original_return=original_return if config.bonus == "dynamic" else 0.0,
    first=getattr(plan, "first", -1),
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
    fresh_worlds=False,
  )


def ppo_config(config) -> ppo.PPOConfig:
  total = config.sessions * config.updates_per_session
  return ppo.PPOConfig.from_config(config.ppo, num_updates=total)


def make_policy(num_actions: int, config):
  """``config.policy`` (gtrxl | gru | mlp) with the sizes of ``config.ppo.<policy>``."""
  name = config.get("policy", "gtrxl")
  kw = {k: (tuple(v) if isinstance(v, (list, tuple)) else v) for k, v in config.ppo[name].items()}
  return policies.make(name, num_actions, 0, **kw)


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

  def _session_env(self, plan, stop: int = NEVER):
    """The session's environment, counting from the scoring window (training) or, when playing
    for ``stop`` steps, from the first step."""
    c = self.config
    env = self.make_env(plan, c.ppo.num_envs, c, self.state["original_return"])
    start = max(0, c.updates_per_session - c.score_window) * c.ppo.num_steps
    return counted(env, num_units(plan, c), start if stop == NEVER else 0, stop)

  def program(self, env):
    """The jitted chunk (``runtime.make_chunk_fn``) of :func:`make_update` for ``env``'s step:
    one per process and shape, shared by the sessions, the evaluation, SFL's scoring and the
    later runs of a study (a run in a new process loads it from the persistent cache)."""
    if self.policy is None:
      self.policy = make_policy(env.num_actions, self.config)
    key = (env.step, self.policy, self.ppo)
    if key not in _UPDATES:
      while len(_UPDATES) >= 4:  # the newest few (each holds a compiled program)
        _UPDATES.pop(next(iter(_UPDATES)))
      _UPDATES[key] = make_update(env, self.policy, self.ppo)
    update = _UPDATES[key]
    return update, runtime.make_chunk_fn(update)

  def _agent_state(self, env, key):
    """The PPO state on ``env`` with the carried (or restored) agent."""
    state = init_state(env, self.policy, self.ppo, key)
    if self.carried is None:
      self.carried = self._restore({"train": state.train, "stats": state.stats})
    if self.carried is not None:
      state = state.replace(train=self.carried["train"], stats=self.carried["stats"])
    return state

  def train_session(self, plan, session: int):
    """Trains ``updates_per_session`` PPO updates on ``plan``; returns (window counts, metrics)."""
    return train_together([self], [plan], session)[0]

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
    first episode has ended. Returns the final ``Counted`` state (:func:`play_together`)."""
    return play_together([self], [plan], steps, [key], until_done)[0]

  def run_session(self, session: int) -> dict:
    plan = self.plan_session(session)
    window, info = self.train_session(plan, session)
    return self.record_session(plan, session, window, info)

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
    return run_together([self], sessions, stop_after)[0]

  def after_session(self, session: int, total: int) -> None:
    """An evolution round when one is due, then the commit of the finished session."""
    last = session + 1 >= total  # children of the last session would never train
    if self._evolving() and not last and (session + 1) % self.config.evolve_every == 0:
      self.evolve(session)
    self._commit(session + 1, self.carried)

  def _evolving(self) -> bool:
    return self.archive is not None and self.proposer is not None

  def _revalidate_archive(self) -> None:
    """Every archived task still in use (admitted or validated) goes through the sandbox again
    before anything loads it here: its status is a file's word, not a verdict of this process.
    The shipped seed tasks are this program's own code. ConfigError("workdir") naming the file."""
    if self.archive is None:
      return
    from jaxlab.core.errors import ConfigError
    from jaxlab.rl.dicode import seeds

    shipped = set(seeds.load_seed_tasks().values())
    used = [r for r in self.archive.records() if r["status"] in ("admitted", "validated")]
    todo = [(r, self.archive.source(r["id"])) for r in used]
    todo = [(r, src) for r, src in todo if src not in shipped]
    if not todo:
      return
    self.log(f"[dicode] re-validating {len(todo)} archived task(s) in the sandbox")
    for (rec, _), verdict in zip(todo, self.validate([src for _, src in todo])):
      if not verdict.ok:
        path = self.archive.root / rec["dir"] / "task.py"
        raise ConfigError(
          "workdir",
          f"{path} ({rec['status']}) is rejected by the sandbox on resume: {verdict.reason}; "
          "fix or remove it, or choose a new --workdir",
        )

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
    """SFL's scores of original-game ``seeds``: the current policy plays them (no learning, the
    training program) for ``sfl_rollout_steps`` steps, ``units`` levels at a time, each drawn
    uniformly at every reset; achievement learnability of each level's finished episodes."""
    return score_levels_together([self], [seeds])[0]


# --- several seeds: one Loop per seed, their PPO vmapped in one program ---


def run_together(loops, sessions: int | None = None, stop_after: int | None = None) -> list:
  """:meth:`Loop.run` of every loop (one per seed, each in its own workdir with its own curriculum,
  archive and agent), the seeds' sessions trained TOGETHER: each session's PPO of every seed is one
  vmapped program (:func:`train_together`), the curricula plan, score and evolve on the host, seed
  by seed. Seeds that a killed run left at different sessions train in groups by session until
  they meet. Returns each loop's state; ``stop_after`` as in :meth:`Loop.run` (rounds of sessions).
  """
  loops = list(loops)
  total = loops[0].config.sessions if sessions is None else sessions
  with contextlib.ExitStack() as stack:
    for lp in loops:
      stack.enter_context(workdir_lib.session(lp.workdir, None))
    provenance.announce()
    for lp in loops:
      lp.load()
      lp._revalidate_archive()
      lp._reject_interrupted()
    done = 0
    while True:
      behind = [lp for lp in loops if lp.state["session"] < total]
      if not behind:
        break
      session = min(lp.state["session"] for lp in behind)
      group = [lp for lp in behind if lp.state["session"] == session]
      plans = plan_together(group, session)
      for lp, plan, (window, info) in zip(group, plans, train_together(group, plans, session)):
        lp.record_session(plan, session, window, info)
        lp.after_session(session, total)
      done += 1
      if stop_after is not None and done >= stop_after:
        break
  return [lp.state for lp in loops]


def plan_together(loops, session: int) -> list:
  """Each loop's plan of ``session``. SFL's refresh plays the candidate levels with the current
  policy: the loops due for one play theirs together (:func:`score_levels_together`) before
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
  scores = score_levels_together(due, drawn)
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


def _seed_axis(loops):
  """The seeds of ``loops`` as the runtime's seed axis (None for one loop: no axis)."""
  if len(loops) == 1:
    return None
  seeds = tuple(int(lp.seed) for lp in loops)
  if len(set(seeds)) != len(seeds):
    raise ValueError(f"loops trained together need distinct seeds, got {seeds}")
  return seeds


def _shared_update(loops, envs):
  """The one update (and so one program) of the loops' environments: each loop's
  :meth:`Loop.program`; environments of one shape share their step function."""
  updates = [lp.program(env)[0] for lp, env in zip(loops, envs)]
  if any(u is not updates[0] for u in updates):
    raise ValueError(
      "the seeds' session environments do not share one step function (make_env must return "
      "environments whose task set is data, as multitask.session_env does): they cannot be vmapped"
    )
  return updates[0]


def train_together(loops, plans, session: int) -> list[tuple[dict, dict]]:
  """:meth:`Loop.train_session` of each loop on its plan; several loops' PPO is ONE vmapped program
  (``runtime.train(..., seeds=...)``): seed ``k`` there computes what its loop alone would.
  Returns each loop's (window counts, metrics); every loop carries its trained agent."""
  seeds = _seed_axis(loops)
  envs, states, keys = [], [], []
  for lp, plan in zip(loops, plans):
    plan.session = session
    envs.append(lp._session_env(plan))
    lp.program(envs[-1])
    key = jax.random.fold_in(lp.key, session)
    states.append(lp._agent_state(envs[-1], jax.random.fold_in(key, 0)))
    keys.append(jax.random.fold_in(key, 1))
  update = _shared_update(loops, envs)
  loop = loops[0]._runtime_loop()
  data = _host(np.bool_(True))
  t0 = time.perf_counter()
  if seeds is None:
    state, result = runtime.train(states[0], update, loop, key=keys[0], data=data)
    per = [(state, result.summary)]
  else:
    state, result = runtime.train(
      seeds_lib.stack(states), update, loop, key=jnp.stack(keys), data=data, seeds=seeds
    )
    shared = {k: v for k, v in result.summary.items() if k not in ("seeds", "per_seed")}
    per = [
      (seeds_lib.take(state, i), {**shared, **result.per_seed[seed]})
      for i, seed in enumerate(seeds)
    ]
  wall = time.perf_counter() - t0
  out = []
  for lp, plan, env, (st, summary) in zip(loops, plans, envs, per):
    lp.carried = {"train": st.train, "stats": st.stats}
    info = {"wall_s": wall, "achievement_names": env.achievement_names, **summary}
    got = counts(st.env_state)
    window = {k: v[: plan.size] for k, v in got.items()}
    if plan.kind == "base":  # every unit is the original game
      window = {k: v.sum(0, keepdims=True) for k, v in got.items()}
    out.append((window, info))
  return out


def play_together(loops, plans, steps: int, keys, until_done: bool = False) -> list:
  """:meth:`Loop.play` of each loop (its plan, its key); several loops play through the vmapped
  training program. With ``until_done`` a seed's state is the one after the chunk in which all of
  its first episodes had ended (as its loop alone stops there), the others play on."""
  seeds = _seed_axis(loops)
  c = loops[0].config
  envs, states = [], []
  for lp, plan, key in zip(loops, plans, keys):
    envs.append(lp._session_env(plan, stop=steps))
    lp.program(envs[-1])
    states.append(lp._agent_state(envs[-1], jax.random.fold_in(key, 0)))
  update = _shared_update(loops, envs)
  if seeds is None:
    state, chunk = states[0], runtime.make_chunk_fn(update)
  else:
    # the chunk runtime.train(..., seeds=...) compiled for the sessions: the same program
    state, chunk = seeds_lib.stack(states), runtime.make_chunk_fn(update, seed_vmap=seeds_lib.vmap)
  per_chunk, u = c.updates_per_session * c.ppo.num_steps, c.updates_per_session
  # the U updates of a part in calls of the training's chunk program (its max_len), not a
  # program of U steps compiled for playing; the same key and step numbers as one U-step call
  m = loops[0]._chunk_len()
  flag = _host(np.bool_(False))
  n = len(loops)
  out: list = [None] * n
  for i in range(-(-steps // per_chunk)):
    k = [jax.random.fold_in(key, 1 + i) for key in keys]
    k = k[0] if seeds is None else jnp.stack(k)
    for start in range(0, u, m):
      state, _ = chunk(state, flag, k, start, min(m, u - start), m)
    if until_done:
      ended = np.asarray(state.env_state.first_done).reshape(n, -1).all(axis=1)
      for j in range(n):
        if ended[j] and out[j] is None:
          out[j] = _of_seed(state.env_state, seeds, j)
      if all(o is not None for o in out):
        break
  return [_of_seed(state.env_state, seeds, j) if o is None else o for j, o in enumerate(out)]


def _of_seed(tree, seeds, i: int):
  """Seed ``i`` of a stacked pytree (the tree itself without a seed axis)."""
  return tree if seeds is None else seeds_lib.take(tree, i)


def score_levels_together(loops, level_lists) -> list[np.ndarray]:
  """:meth:`Loop.score_levels` of each loop's levels (equally many per loop), played together."""
  c = loops[0].config
  level_lists = [list(levels) for levels in level_lists]
  k = num_units(curriculum_lib.SessionPlan("levels", [], np.ones(0)), c)
  scores: list[list] = [[] for _ in loops]
  for i in range(0, len(level_lists[0]), k):
    plans, keys = [], []
    for lp, levels in zip(loops, level_lists):
      part = levels[i : i + k]
      plan = curriculum_lib.SessionPlan(
        "levels",
        [f"level_{s}" for s in part],
        np.full(len(part), 1.0 / len(part)),
        levels=curriculum_lib.seed_keys(part),
      )
      plan.session = lp.state["session"]
      plans.append(plan)
      keys.append(jax.random.fold_in(lp.key, 1_000_000 + 1_000 * lp.state["session"] + i))
    played = play_together(loops, plans, c.sfl_rollout_steps, keys)
    for j, (plan, st) in enumerate(zip(plans, played)):
      window, n = counts(st), plan.size
      scores[j].append(
        curriculum_lib.level_score(window["achievements"][:n], window["finished"][:n])
      )
  return [np.concatenate(s) for s in scores]


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
  """Held-out original-game evaluation of the run's agent (see ``evaluation``), played through
  the run's training program without learning: ``eval_envs`` held-out worlds, ``num_envs`` at a
  time, each environment starting in its own world (``TaskTable.first``), its first episode
  recorded over ``eval_steps`` steps."""
  return evaluate_together([run], curriculum)[0]


def evaluate_together(loops, curriculum: str) -> list[tuple[dict, dict]]:
  """:func:`evaluate` of each loop's agent, on the same held-out worlds; several loops' agents
  play together through their vmapped training program (:func:`play_together`)."""
  from jaxlab.rl.dicode import evaluation, seeds
  from jaxlab.rl.ppo import evaluation as ppo_eval

  c = loops[0].config
  n, envs, p = c.ppo.eval_envs, c.ppo.num_envs, c.pool_size
  k = num_units(curriculum_lib.SessionPlan("worlds", [], np.ones(0)), c)
  pools = evaluation.held_out_pools(n, p)
  original = seeds.load_seed_tasks()[curriculum_lib.ORIGINAL]
  key = jax.random.key(evaluation.EVAL_SEED)
  outs: list[list] = [[] for _ in loops]
  for base in range(0, n, k * p):  # one table holds k * p worlds
    part = pools[base // p : base // p + k]
    plans = []
    for lp in loops:
      if curriculum == "dr":
        slot = lp.curriculum.names.index(curriculum_lib.ORIGINAL)
      else:
        slot = c.num_slots - 1
      plans.append(
        curriculum_lib.SessionPlan(
          "worlds",
          [curriculum_lib.ORIGINAL] * len(part),
          np.full(len(part), 1.0 / len(part)),
          [original] * len(part),
          [slot] * len(part),
          pools=part,
        )
      )
    for first in range(0, min(k * p, n - base), envs):
      for plan in plans:
        plan.first = first
      keys = [jax.random.fold_in(key, base + first)] * len(loops)
      played = play_together(loops, plans, c.ppo.eval_steps, keys, True)
      keep = min(envs, n - base - first)
      for out, state in zip(outs, played):
        out.append({name: v[:keep] for name, v in first_episodes(state).items()})
  env = types.SimpleNamespace(
    max_return=craftax_max_return(), achievement_names=craftax_achievement_names()
  )
  return [
    ppo_eval.summarize({name: np.concatenate([o[name] for o in out]) for name in out[0]}, env)
    for out in outs
  ]


def craftax_max_return() -> float:
  from jaxlab.envs import craftax

  return craftax.MAX_RETURN[False]


def craftax_achievement_names() -> tuple[str, ...]:
  from jaxlab.envs import craftax

  return craftax.achievement_names(False)


def finish(run: Loop, state: dict, curriculum: str) -> dict:
  """Evaluates the agent, writes summary.json and achievements.png; returns the summary."""
  return finish_together([run], [state], curriculum)[0]


def finish_together(loops, states, curriculum: str) -> list[dict]:
  """:func:`finish` of each loop (its own summary.json and achievements.png in its workdir), the
  agents evaluated together (:func:`evaluate_together`)."""
  from jaxlab.rl.ppo import evaluation as ppo_eval

  t0 = time.perf_counter()
  results = evaluate_together(loops, curriculum)
  eval_wall = time.perf_counter() - t0
  out = []
  for run, state, (scalars, rates) in zip(loops, states, results):
    history = state["history"]
    summary = {
      "curriculum": curriculum,
      "sessions": state["session"],
      "env_steps": history[-1]["env_steps"] if history else 0,
      "train_wall_s": float(sum(h["wall_s"] for h in history)),
      "eval_wall_s": eval_wall,
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
    out.append(summary)
  return out


def compare(dirs, out) -> dict:
  """comparison.png / comparison.json over finished runs (a dir of seed*/ runs is averaged), in
  the workdir ``out`` whose config.json records the compared runs."""
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
  # locked, and recorded with the runs it compares: a comparison of other runs is refused there
  # (choose another --workdir), one of the same runs rewrites the same bytes
  with workdir_lib.session(out, {"compare": [str(d) for d in dirs]}):
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
