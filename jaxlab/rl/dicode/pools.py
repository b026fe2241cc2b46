"""Starting worlds and the session environment (DiCode, arXiv 2602.08194).

No world is generated inside the compiled training program: craftax's world generator is compiled
once, for ``pool_size`` worlds (``world.base_worlds``), and makes the task pools' base worlds,
the original game's fresh worlds (drawn anew every session, :meth:`PoolCache.fresh`), the levels'
worlds (PLR, SFL) and the held-out worlds. A task program costs its pool
(``multitask.build_pool``: the program's world function, compiled once per program), kept in
memory and under ``<workdir>/pools/`` (:class:`PoolCache`). :func:`default_make_env` turns a
session plan into the multitask environment over those pools: every curriculum, session and the
evaluation are data (a table of ``num_units`` units) for one environment step.
"""

from __future__ import annotations

import functools
import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.envs import vec
from jaxlab.rl.dicode import curriculum as curriculum_lib

POOL_DIR = "pools"


# Key arithmetic as one program: eagerly, a split and the unpacking of its result are separate
# small programs (threefry is integer arithmetic: the same keys either way).
@functools.partial(jax.jit, static_argnums=(1, 2))
def _split_rows(key, rows: int, cols: int):
  """``split(key, rows * cols).reshape(rows, cols)`` as a tuple of its rows."""
  return tuple(jax.random.split(key, rows * cols).reshape(rows, cols))


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
