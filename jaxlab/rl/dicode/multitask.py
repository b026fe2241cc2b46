"""The DiCode multitask Craftax environment, and the 12 task multipliers applied to craftax's step.

`session_env(...)` returns an `jaxlab.envs.vec.VecEnv` over `Craftax-Symbolic-v1` (Mitsides, Faldor,
Cully, "Dreaming in Code", arXiv 2602.08194, Sec. 3) that is data-driven: everything task-specific
is a `TaskTable` carried in the environment state (K units, padded with units that are never
drawn): per unit a POOL of P pre-built starting worlds (`build_pool`: world i is exactly
`world.generate(task, key_i)`), the 12 multipliers, the relevant-achievement row, the static
bonus, the one-hot slot and the reset weight. A reset draws a unit by weight and a pool index,
and copies that world. The environment's functions never close over tasks, so every task set of
the same shape runs the same compiled program (`session_fns` is built once per shape; tested by
counting traces). `make(...)` is the one-call form: it builds the tasks' pools and the table.

Approximation: each task starts its episodes from a finite pool of P worlds (`pool_size`,
default 8), not from a fresh world per reset as in the paper's implementation, which regenerates
the task's world at every reset. With `fresh_worlds=True` a unit marked `fresh` (the unmodified
game) generates new craftax worlds in the step instead (`resets` per step, as
`jaxlab.envs.craftax`); the DiCode loop does not use that (a world generator inside the step is
most of its compile time) and gives the original game a pool of fresh worlds every session.
A reset draws a unit by weight and a pool index, or, with `TaskTable.first >= 0`, puts
environment i in world `first + i` of the table (the held-out evaluation plays each world once).

Success is "every relevant achievement unlocked" and the episode terminates on craftax's own
conditions (time limit, death, boss beaten) or on success; since every task program declares its
success as an achievement set, success and termination are table lookups.

Observation: craftax's symbolic observation with a one-hot of length `num_slots` appended; task i
sets slot `slots[i]` (the archive's stable slot, reused when a task leaves the archive).
Reward: craftax's reward (every achievement counts, plus 0.1 per health point gained or lost)
plus `1[success] * bonus` on the step that completes the task, with
  dynamic:  bonus = max(bonus_k * R_original, bonus_floor)   (the reference default)
  static:   bonus = max(bonus_k * sum of the relevant achievements' rewards, bonus_floor)
`R_original` is the running return of the original game, measured by the curriculum loop and
written into the table with `set_original_return` or `build_table(original_return=...)` (the
reference implementation also sets it from outside each training session); it starts at 0, so the
bonus starts at the floor.
`info` adds `task` (int32 index into `tasks` of the episode that finished or is running) and
`success` (bool). Resets are optimistic, as in `jaxlab.envs.craftax` (whose helper this reuses).

The multipliers. craftax's `EnvParams` has none of them, so `game_step` re-composes craftax's step
from craftax's own component functions, in craftax's order and with its random keys, and acts on
the state around individual components. With every multiplier at its default it equals
`craftax_step` exactly (tested). How each one acts (docs/dicode.md, "Task parameters"):
  needs_depletion, health_recover, health_loss, mana_recover: craftax's `update_player_intrinsics`
    transcribed with the factors where the reference puts them (hunger, thirst and waking fatigue
    increments; the recovery counter's increment with all needs met / its decrement without;
    the mana coefficient 1 + 0.25 (intelligence - 1) * m, so at intelligence 1 it has no effect,
    as in the reference). Exact.
  growing_plants_age: craftax's `update_plants` transcribed with the ripening age as a parameter.
    Exact.
  mob_damage: the player's health lost inside `update_mobs` (melee hits and mob projectiles) is
    scaled by m. Exact for damage, except that a hit with m = 0 still wakes a sleeping player.
  mob_health: mobs spawned during the episode start with m times craftax's health. Exact for
    spawned mobs; mobs placed by the task program keep craftax's health.
  passive_spawn, melee_spawn, ranged_spawn: for m <= 1 each newly spawned mob is kept with
    probability m, which is exact (craftax spawns at most one mob per class per step). For m > 1
    a second spawn attempt runs and its mob is kept with probability m - 1: the per-step spawn
    probability becomes p (1 + (m - 1)(1 - p)) instead of m p (an approximation, close for the
    small p craftax uses).
  monsters_killed_to_clear_level: the true kill counts are kept in the task state; craftax sees
    a counter that crosses its own threshold (8) exactly when the true count reaches the task's
    threshold, so ladders, the observation's "ladder open" bit and the tripled spawn rate on
    uncleared floors follow the task's threshold. Exact.
  melee_trigger_distance: NOT applied (craftax hard-codes the chase distance 10 inside
    `update_mobs`); the value is validated, clamped and stored but has no effect.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from craftax.craftax import constants as C
from craftax.craftax import game_logic as gl
from craftax.craftax.renderer import render_craftax_symbolic
from flax import struct

from jaxlab.core.errors import ConfigError
from jaxlab.core.sharding import to_device as _to_device
from jaxlab.envs import craftax, vec
from jaxlab.rl.dicode import task as task_lib
from jaxlab.rl.dicode import world

PARAM_ORDER = tuple(task_lib.MULTIPLIERS)
_P = {name: i for i, name in enumerate(PARAM_ORDER)}
BONUS_TYPES = ("dynamic", "static")


@struct.dataclass
class TaskTable:
  """Everything task-specific, as data: `K` units (the session's tasks, padded), each with a pool
  of `P` starting worlds. It lives in the environment state, so one compiled step serves every
  task set of the same shape."""

  pool: object  # craftax EnvState, leaves [K, P, ...]: each unit's pre-built starting worlds
  fresh: jax.Array  # bool[K]: the unit is the unmodified game; its worlds are generated fresh
  mults: jax.Array  # float32[K, 12]: the multipliers (PARAM_ORDER)
  relevant: jax.Array  # bool[K, A]: the achievements success needs
  static_bonus: jax.Array  # float32[K]: the static success bonus
  slot: jax.Array  # int32[K]: the one-hot conditioning slot
  logits: jax.Array  # float32[K]: log reset probability (-inf: never drawn, e.g. padding)
  original_return: jax.Array  # float32: running original-game return (dynamic bonus)
  # int32: -1: a reset draws units by weight; w >= 0: `reset` puts environment i in world w + i
  # (unit (w + i) // P, pool index (w + i) % P), so held-out worlds are each played once
  first: jax.Array = struct.field(default_factory=lambda: jnp.int32(-1))


@struct.dataclass
class TaskState:
  """The batch of environments: craftax states plus what the task layer needs."""

  game: object  # craftax EnvState [N]; `monsters_killed` holds the counter craftax sees
  task: jax.Array  # int32[N], the unit (index into the table / `tasks`)
  kills: jax.Array  # int32[N, num_levels], true monsters killed per floor
  table: TaskTable  # shared by the batch (no leading N)


def effective_kills(kills, threshold):
  """The kill counter craftax sees: >= craftax's threshold (8) iff `kills >= threshold`."""
  base = C.MONSTERS_KILLED_TO_CLEAR_LEVEL
  return jnp.where(kills >= threshold, jnp.maximum(kills, base), jnp.minimum(kills, base - 1))


def _thin_new_mobs(before, after, key, keep_prob, health_mult):
  """Keeps each mob that appeared between `before` and `after` with probability `keep_prob` and
  scales its health; a dropped mob's slot and map cell are restored."""
  mob_map = after.mob_map
  changes = {}
  for i, field in enumerate(("passive_mobs", "melee_mobs", "ranged_mobs")):
    old, new = getattr(before, field), getattr(after, field)
    appeared = new.mask & ~old.mask
    keep = jax.random.uniform(jax.random.fold_in(key, i), appeared.shape) < keep_prob[i]
    drop = appeared & ~keep
    new = new.replace(health=jnp.where(appeared & keep, new.health * health_mult, new.health))

    def restore(a, b, drop=drop):
      return jnp.where(drop.reshape(drop.shape + (1,) * (a.ndim - drop.ndim)), b, a)

    changes[field] = jax.tree.map(restore, new, old)
    levels = jnp.broadcast_to(jnp.arange(drop.shape[0])[:, None], drop.shape)
    pos = new.position
    cleared = jnp.zeros(mob_map.shape, jnp.int32).at[levels, pos[..., 0], pos[..., 1]].max(drop)
    mob_map = mob_map & (cleared == 0)
  return after.replace(mob_map=mob_map, **changes)


def _spawn(state, key, params, static, m):
  """craftax's `spawn_mobs` with the spawn multipliers and the spawn-health multiplier: a first
  spawn attempt kept with probability min(m, 1), then a second kept with probability m - 1.

  The two attempts are one `lax.scan` of length 2 (keys and probabilities as its inputs, the
  same for each attempt as written out twice): craftax's spawn is about a tenth of the step's
  program, and written out it was there twice."""
  spawn = jnp.stack([m[_P["passive_spawn"]], m[_P["melee_spawn"]], m[_P["ranged_spawn"]]])
  health = m[_P["mob_health"]]
  spawn_keys = jnp.stack([key, jax.random.fold_in(key, 2)])
  thin_keys = jnp.stack([jax.random.fold_in(key, 1), jax.random.fold_in(key, 3)])
  probs = jnp.stack([jnp.minimum(spawn, 1.0), jnp.clip(spawn - 1.0, 0.0, 1.0)])

  def attempt(state, xs):
    k_spawn, k_thin, prob = xs
    after = gl.spawn_mobs(state, k_spawn, params, static)
    return _thin_new_mobs(state, after, k_thin, prob, health), None

  return jax.lax.scan(attempt, state, (spawn_keys, thin_keys, probs))[0]


def _update_plants(state, static, ripe_age):
  """craftax's `update_plants` with the ripening age (600 in craftax) as a parameter."""
  age = (state.growing_plants_age + 1) * state.growing_plants_mask
  finished = age >= ripe_age

  def set_block(level_map, i):
    r, c = state.growing_plants_positions[i]
    block = jax.lax.select(finished[i], C.BlockType.RIPE_PLANT.value, level_map[r, c])
    return level_map.at[r, c].set(block), None

  level_map, _ = jax.lax.scan(set_block, state.map[0], jnp.arange(static.max_growing_plants))
  return state.replace(map=state.map.at[0].set(level_map), growing_plants_age=age)


def _sleep_and_rest(state, action):
  """The first half of craftax's `update_player_intrinsics` (unchanged)."""
  start_sleep = (action == C.Action.SLEEP.value) & (state.player_energy < gl.get_max_energy(state))
  sleeping = state.is_sleeping | start_sleep
  waking = (state.player_energy >= gl.get_max_energy(state)) & sleeping
  wake = C.Achievement.WAKE_UP.value
  state = state.replace(
    is_sleeping=sleeping & ~waking,
    achievements=state.achievements.at[wake].set(state.achievements[wake] | waking),
  )
  max_health = gl.get_max_health(state)
  resting = state.is_resting | (
    (action == C.Action.REST.value) & (state.player_health < max_health)
  )
  stop = resting & (
    (state.player_health >= max_health) | (state.player_food <= 0) | (state.player_drink <= 0)
  )
  return state.replace(is_resting=resting & ~stop)


def _update_intrinsics(state, action, static, m):
  """craftax's `update_player_intrinsics` with the needs / recovery / mana multipliers."""
  state = _sleep_and_rest(state, action)
  needs, sel, s = m[_P["needs_depletion"]], jax.lax.select, state
  not_boss = jnp.logical_not(gl.is_fighting_boss(s, static))
  decay = 1.0 - (0.125 * (s.player_dexterity - 1))
  hunger = s.player_hunger + sel(s.is_sleeping, 0.5, 1.0) * decay * needs
  food = sel(hunger > 25, jnp.maximum(s.player_food - 1 * not_boss, 0), s.player_food)
  hunger = sel(hunger > 25, 0.0, hunger)
  thirst = s.player_thirst + sel(s.is_sleeping, 0.5, 1.0) * decay * needs
  drink = sel(thirst > 20, jnp.maximum(s.player_drink - 1 * not_boss, 0), s.player_drink)
  thirst = sel(thirst > 20, 0.0, thirst)
  fatigue = sel(
    s.is_sleeping, jnp.minimum(s.player_fatigue - 1, 0), s.player_fatigue + decay * needs
  )
  energy = sel(fatigue > 30, jnp.maximum(s.player_energy - 1 * not_boss, 0), s.player_energy)
  fatigue = sel(fatigue > 30, 0.0, fatigue)
  energy = sel(fatigue < -10, jnp.minimum(s.player_energy + 1, gl.get_max_energy(s)), energy)
  fatigue = sel(fatigue < -10, 0.0, fatigue)
  s = s.replace(
    player_hunger=hunger,
    player_food=food,
    player_thirst=thirst,
    player_drink=drink,
    player_fatigue=fatigue,
    player_energy=energy,
  )
  all_needs = (s.player_food > 0) & (s.player_drink > 0) & ((s.player_energy > 0) | s.is_sleeping)
  gain = sel(s.is_sleeping, 2.0, 1.0) * m[_P["health_recover"]]
  loss = sel(s.is_sleeping, -0.5, -1.0) * not_boss * m[_P["health_loss"]]
  recover = s.player_recover + sel(all_needs, gain, loss)
  health = sel(
    recover > 25, jnp.minimum(s.player_health + 1, gl.get_max_health(s)), s.player_health
  )
  recover = sel(recover > 25, 0.0, recover)
  health = sel(recover < -15, s.player_health - 1, health)
  recover = sel(recover < -15, 0.0, recover)
  coeff = 1 + 0.25 * (s.player_intelligence - 1) * m[_P["mana_recover"]]
  mana_counter = sel(s.is_sleeping, s.player_recover_mana + 2, s.player_recover_mana + 1) * coeff
  mana = sel(mana_counter > 30, s.player_mana + 1, s.player_mana)
  mana_counter = sel(mana_counter > 30, 0.0, mana_counter)
  return s.replace(
    player_recover=recover,
    player_health=health,
    player_recover_mana=mana_counter,
    player_mana=mana,
  )


def _act(rng, state, action, params, static):
  """craftax's step up to and including the player's movement (unchanged)."""
  state = gl.change_floor(state, action, params, static)
  state = gl.do_crafting(state, action)
  rng, _rng = jax.random.split(rng)
  state = gl.do_action(_rng, state, action, static)
  state = gl.place_block(state, action, static)
  state = gl.shoot_projectile(state, action, static)
  state = gl.cast_spell(state, action, static)
  state = gl.drink_potion(state, action)
  rng, _rng = jax.random.split(rng)
  state = gl.read_book(_rng, state, action)
  rng, _rng = jax.random.split(rng)
  state = gl.enchant(_rng, state, action)
  state = gl.boss_logic(state, static)
  state = gl.level_up_attributes(state, action, params)
  return rng, gl.move_player(state, action, params)


def game_step(rng, state, kills, action, m, params, static):
  """craftax's `craftax_step` with the task multipliers `m` (float32[12], PARAM_ORDER).

  `kills` are the true per-floor kill counts; returns `(state, kills, reward)`.
  """
  threshold = m[_P["monsters_killed_to_clear_level"]].astype(jnp.int32)
  seen = effective_kills(kills, threshold)
  state = state.replace(monsters_killed=seen)
  init_achievements, init_health = state.achievements, state.player_health
  action = jax.lax.select(state.is_sleeping, C.Action.NOOP.value, action)
  action = jax.lax.select(state.is_resting, C.Action.NOOP.value, action)
  rng, state = _act(rng, state, action, params, static)
  rng, _rng = jax.random.split(rng)
  health = state.player_health
  state = gl.update_mobs(_rng, state, params, static)
  lost = jnp.maximum(health - state.player_health, 0.0)
  state = state.replace(player_health=state.player_health + (1.0 - m[_P["mob_damage"]]) * lost)
  rng, _rng = jax.random.split(rng)
  state = _spawn(state, _rng, params, static, m)
  state = _update_plants(state, static, m[_P["growing_plants_age"]].astype(jnp.int32))
  state = _update_intrinsics(state, action, static, m)
  state = gl.clip_inventory_and_intrinsics(state, params)
  state = gl.calculate_inventory_achievements(state)
  gained = state.achievements.astype(int) - init_achievements.astype(int)
  reward = (gained * C.ACHIEVEMENT_REWARD_MAP).sum() + (state.player_health - init_health) * 0.1
  rng, _rng = jax.random.split(rng)
  state = state.replace(
    timestep=state.timestep + 1,
    light_level=gl.calculate_light_level(state.timestep + 1, params),
    state_rng=_rng,
  )
  kills = kills + (state.monsters_killed - seen)
  return state.replace(monsters_killed=effective_kills(kills, threshold)), kills, reward


def set_original_return(state: vec.VecState, value) -> vec.VecState:
  """The env state with the running original-game return (dynamic bonus) set to `value`."""
  table = state.env.table
  value = jnp.asarray(value, jnp.float32).reshape(())
  return state.replace(env=state.env.replace(table=table.replace(original_return=value)))


def relevant_table(tasks) -> np.ndarray:
  """bool[num_tasks, num_achievements]: the achievements each task needs for success."""
  ids = task_lib.achievement_ids()
  table = np.zeros((len(tasks), len(ids)), bool)
  for i, t in enumerate(tasks):
    table[i, [ids[n] for n in t.relevant]] = True
  return table


def static_bonus(tasks, bonus_k: float, bonus_floor: float) -> np.ndarray:
  """The static success bonus per task: max(bonus_k * relevant achievements' reward, floor)."""
  reward = (relevant_table(tasks) * np.asarray(C.ACHIEVEMENT_REWARD_MAP)).sum(-1)
  return np.maximum(bonus_k * reward, bonus_floor).astype(np.float64)


def _check(tasks, num_slots, slots, bonus, bonus_k, bonus_floor, weights):
  if not tasks or not all(isinstance(t, task_lib.Task) for t in tasks):
    raise ConfigError("tasks", "must be a non-empty sequence of task.Task")
  if isinstance(num_slots, bool) or not isinstance(num_slots, int) or num_slots < 1:
    raise ConfigError("num_slots", f"must be an integer >= 1, got {num_slots!r}")
  slots = list(slots)
  if len(slots) != len(tasks):
    raise ConfigError("slots", f"needs one slot per task ({len(tasks)}), got {len(slots)}")
  if any(not isinstance(s, (int, np.integer)) or not 0 <= s < num_slots for s in slots):
    raise ConfigError("slots", f"must be integers in 0..{num_slots - 1}, got {slots}")
  if len(set(slots)) != len(slots):
    raise ConfigError("slots", f"two tasks share a slot: {slots}")
  if bonus not in BONUS_TYPES:
    raise ConfigError("bonus", f"must be one of {', '.join(BONUS_TYPES)}, got {bonus!r}")
  for field, value in (("bonus_k", bonus_k), ("bonus_floor", bonus_floor)):
    if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
      raise ConfigError(field, f"must be a finite number >= 0, got {value!r}")
  if weights is not None:
    w = np.asarray(weights, np.float64)
    if w.shape != (len(tasks),) or not np.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
      raise ConfigError("weights", "must be one finite weight >= 0 per task, not all zero")


# --- task pools: each task's starting worlds, built once per task ---


@functools.cache
def _apply_fn(task):
  """`world.apply_task` for `task`, vmapped and jitted once per task program (per process)."""
  return jax.jit(jax.vmap(functools.partial(world.apply_task, task)))


def pool_keys(key, pool_size: int):
  """The per-world keys of a pool: world i of a task is `world.generate(task, keys[i])`."""
  keys = jax.random.split(key, pool_size)
  halves = jax.vmap(jax.random.split)(keys)
  return keys, halves[:, 0], halves[:, 1]


_pool_keys = jax.jit(pool_keys, static_argnums=1)  # one program, not four small eager ones


def build_pool(task: task_lib.Task, key, pool_size: int, base=None):
  """`pool_size` starting worlds of `task` (leaves [P, ...]): world i equals
  `world.generate(task, pool_keys(key, P)[0][i])`. `base` (worlds [P, ...]) replaces craftax's
  generator, for tests; otherwise the base worlds come from `world.base_worlds` (compiled once)."""
  _, k_base, k_task = _pool_keys(key, pool_size)
  if base is None:
    base = world.base_worlds(k_base)
  return _apply_fn(task)(base, k_task)


def _key_leaf(spec) -> bool:
  return jax.dtypes.issubdtype(spec.dtype, jax.dtypes.prng_key)


def _host_stack(xs):
  """`jnp.stack(xs)` through numpy: an eager stack compiles one XLA program per leaf shape."""
  if _key_leaf(xs[0]):
    data = np.stack([np.asarray(jax.random.key_data(x)) for x in xs])
    return jax.random.wrap_key_data(data, impl=jax.random.key_impl(xs[0]))
  return _to_device(np.stack([np.asarray(x) for x in xs]))


def pool_to_arrays(pool) -> dict[str, np.ndarray]:
  """A pool as plain numpy arrays (typed keys as their key data), for `np.savez`."""
  leaves = jax.tree.leaves(pool)
  raw = [jax.random.key_data(x) if _key_leaf(x) else x for x in leaves]
  return {f"leaf{i:03d}": np.asarray(x) for i, x in enumerate(raw)}


def pool_from_arrays(arrays, pool_size: int):
  """The inverse of `pool_to_arrays`; ValueError if a leaf's shape or dtype is not a pool's."""
  ref = jax.eval_shape(world.base_world, jax.random.key(0))
  specs, treedef = jax.tree.flatten(ref)
  leaves = []
  for i, spec in enumerate(specs):
    x = np.asarray(arrays[f"leaf{i:03d}"])
    if _key_leaf(spec):
      x = jax.random.wrap_key_data(_to_device(x.astype(np.uint32)))
    elif x.shape != (pool_size, *spec.shape) or x.dtype != spec.dtype:
      raise ValueError(f"pool leaf {i}: {x.shape}/{x.dtype}, expected {spec.shape}/{spec.dtype}")
    else:
      x = _to_device(x)
    leaves.append(x)
  if len(arrays) != len(specs):
    raise ValueError(f"pool has {len(arrays)} leaves, expected {len(specs)}")
  return jax.tree.unflatten(treedef, leaves)


# --- the data-driven session environment ---


def build_table(
  tasks: Sequence[task_lib.Task],
  pools: Sequence,
  slots: Sequence[int],
  num_units: int,
  *,
  fresh: Sequence[bool] | None = None,
  weights: Sequence[float] | None = None,
  bonus_k: float,
  bonus_floor: float,
  original_return: float = 0.0,
  first: int = -1,
) -> TaskTable:
  """The table of `tasks` (with their `pools`), padded to `num_units` units that are never drawn.

  `fresh[i]`: task i is the unmodified game (its program returns the builder unchanged and
  pre-grants nothing), so its episodes start in freshly generated worlds instead of its pool.
  """
  k = len(tasks)
  if k > num_units:
    raise ConfigError("tasks", f"{k} tasks do not fit in {num_units} units")
  pad = num_units - k
  w = np.ones(k) if weights is None else np.asarray(weights, np.float64)
  logits = np.where(w > 0, np.log(np.maximum(w / w.sum(), 1e-30)), -np.inf)
  fresh = np.zeros(k, bool) if fresh is None else np.asarray(fresh, bool)
  mults = np.asarray([[t.params[n] for n in PARAM_ORDER] for t in tasks], np.float32)

  def padded(x, fill):
    x = np.asarray(x)
    return np.concatenate([x, np.full((pad, *x.shape[1:]), fill, x.dtype)])

  pool = jax.tree.map(lambda *xs: _host_stack(xs + (xs[0],) * pad), *pools)
  return TaskTable(
    pool=pool,
    fresh=_to_device(padded(fresh, False)),
    mults=_to_device(padded(mults, 1.0)),
    relevant=_to_device(padded(relevant_table(tasks), False)),
    static_bonus=_to_device(
      padded(static_bonus(tasks, bonus_k, bonus_floor), 0.0).astype(np.float32)
    ),
    slot=_to_device(padded(np.asarray(slots, np.int32), 0)),
    logits=_to_device(padded(logits, -np.inf).astype(np.float32)),
    original_return=_to_device(np.float32(original_return)),
    first=_to_device(np.int32(first)),
  )


@functools.lru_cache(maxsize=8)
def session_fns(
  num_envs: int,
  num_slots: int,
  bonus: str,
  bonus_k: float,
  bonus_floor: float,
  reset_ratio: int,
  fresh_worlds: bool,
):
  """`(reset(key, table), step)` of the multitask environment: built (and `reset` compiled) once
  per shape, whatever the tasks, because every task-specific value is read from `table`."""
  params, static = world.env_params(), world.static_params()
  resets = max(1, num_envs // reset_ratio)
  no_achievements = np.zeros(len(task_lib.achievement_ids()), bool)  # a constant, not a program

  def start(table, key, n, in_order=False):
    """`n` new episodes: unit by the table's weights (or in table order from `table.first`),
    then a pool world or, for a `fresh` unit, a freshly generated one."""
    k_unit, k_index, k_fresh = jax.random.split(key, 3)
    size = jax.tree.leaves(table.pool)[0].shape[1]
    unit = jax.random.categorical(k_unit, table.logits, shape=(n,)).astype(jnp.int32)
    index = jax.random.randint(k_index, (n,), 0, size)
    if in_order:
      w = table.first + jnp.arange(n, dtype=jnp.int32)
      unit = jnp.where(table.first >= 0, (w // size) % table.logits.shape[0], unit)
      index = jnp.where(table.first >= 0, w % size, index)
    game = jax.tree.map(lambda x: x[unit, index], table.pool)
    if fresh_worlds:  # the unmodified game: world.generate of an identity program, fresh
      _, k_base, _ = pool_keys(k_fresh, n)
      new = jax.vmap(lambda k: world.finalize(world.base_world(k), no_achievements))(k_base)
      game = vec.select(table.fresh[unit], new, game)
    kills = game.monsters_killed
    threshold = table.mults[unit, _P["monsters_killed_to_clear_level"]].astype(jnp.int32)[:, None]
    game = game.replace(monsters_killed=effective_kills(kills, threshold))
    return game, unit, kills

  def observe(table, game, unit):
    one_hot = jax.nn.one_hot(table.slot[unit], num_slots, dtype=jnp.float32)
    obs = jax.vmap(render_craftax_symbolic)(game).astype(jnp.float32)
    return jnp.concatenate([obs.reshape(obs.shape[0], -1), one_hot], axis=-1)

  @jax.jit
  def reset(key, table):
    game, unit, kills = start(table, key, num_envs, in_order=True)
    return observe(table, game, unit), vec.init_state(TaskState(game, unit, kills, table), num_envs)

  def one_step(table, key, game, unit, kills, action):
    game, kills, reward = game_step(key, game, kills, action, table.mults[unit], params, static)
    success = jnp.all(game.achievements | ~table.relevant[unit])
    done = gl.is_game_over(game, params, static) | success
    dynamic = jnp.maximum(bonus_k * table.original_return, bonus_floor)
    paid = dynamic if bonus == "dynamic" else table.static_bonus[unit]
    return game, kills, reward + jnp.where(success, paid, 0.0), done, success

  def step(state: vec.VecState, action, key):
    k_step, k_reset = jax.random.split(key)
    ts = state.env
    table = ts.table
    game, kills, reward, done, success = jax.vmap(one_step, in_axes=(None, 0, 0, 0, 0, 0))(
      table, jax.random.split(k_step, num_envs), ts.game, ts.task, ts.kills, action
    )
    stepped = (game, ts.task, kills)
    if fresh_worlds:  # generating worlds is costly: `resets` per step, shared (craftax's way)
      g, u, k = craftax.optimistic_reset(done, start(table, k_reset, resets), stepped)
    else:  # pool worlds are a gather: one per environment
      g, u, k = vec.select(done, start(table, k_reset, num_envs), stepped)
    obs = observe(table, g, u)  # after the reset: one render per step, not two
    reward = reward.astype(jnp.float32)
    new_state, info = vec.track(state, TaskState(g, u, k, table), reward, done)
    info["achievements"] = jnp.where(done[:, None], game.achievements, False).astype(jnp.float32)
    info["task"] = ts.task
    info["success"] = success
    return obs, new_state, reward, done, info

  return reset, step


def session_env(
  base: str,
  num_envs: int,
  num_slots: int,
  table: TaskTable,
  *,
  bonus: str,
  bonus_k: float,
  bonus_floor: float,
  reset_ratio: int,
  fresh_worlds: bool = True,
) -> vec.VecEnv:
  """The multitask environment over `table` (see `build_table`). Environments of the same shape
  share `reset` and `step`, so a new table (a new task set) compiles nothing new."""
  env_id, classic, pixels = craftax.resolve(base, "base")
  if classic or pixels:
    raise ConfigError("base", f"DiCode tasks need the full symbolic game, got {base!r}")
  craftax._check_int("num_envs", num_envs)
  craftax._check_int("reset_ratio", reset_ratio)
  if bonus not in BONUS_TYPES:
    raise ConfigError("bonus", f"must be one of {', '.join(BONUS_TYPES)}, got {bonus!r}")
  reset, step = session_fns(
    num_envs, num_slots, bonus, float(bonus_k), float(bonus_floor), reset_ratio, fresh_worlds
  )
  obs_dim = _obs_dim(table.pool)
  return vec.VecEnv(
    name=f"dicode:{env_id}",
    num_envs=num_envs,
    obs_shape=(obs_dim + num_slots,),
    num_actions=len(C.Action),
    action_dim=0,
    achievement_names=craftax.achievement_names(False),
    max_return=craftax.MAX_RETURN[False],
    reset=functools.partial(reset, table=table),
    step=step,
  )


def make(
  base: str,
  num_envs: int,
  tasks: Sequence[task_lib.Task],
  num_slots: int,
  slots: Sequence[int],
  *,
  bonus: str,
  bonus_k: float,
  bonus_floor: float,
  reset_ratio: int,
  weights: Sequence[float] | None = None,
  pool_size: int,
  pool_key=None,
  fresh: Sequence[bool] | None = None,
) -> vec.VecEnv:
  """The multitask environment over `tasks` (see module docstring): builds each task's pool of
  `pool_size` worlds (keys from `pool_key`, default `key(0)` folded with the task index) and
  returns `session_env` over their table."""
  _check(tasks, num_slots, slots, bonus, bonus_k, bonus_floor, weights)
  craftax._check_int("pool_size", pool_size)
  key = jax.random.key(0) if pool_key is None else pool_key
  pools = [build_pool(t, jax.random.fold_in(key, i), pool_size) for i, t in enumerate(tasks)]
  table = build_table(
    tasks,
    pools,
    slots,
    len(tasks),
    fresh=fresh,
    weights=weights,
    bonus_k=bonus_k,
    bonus_floor=bonus_floor,
  )
  return session_env(
    base,
    num_envs,
    num_slots,
    table,
    bonus=bonus,
    bonus_k=bonus_k,
    bonus_floor=bonus_floor,
    reset_ratio=reset_ratio,
    fresh_worlds=fresh is not None and any(fresh),
  )


_OBS_DIMS: dict = {}


def _obs_dim(pool) -> int:
  """The rendered observation's length, from the shapes of a pool's worlds (leaves [K, P, ...]):
  tracing craftax's world generator for one world's shapes (`jax.eval_shape`) is a second trace
  of the generator on every run (about a second), and the table already holds such worlds."""
  spec = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[2:], x.dtype), pool)
  leaves, treedef = jax.tree.flatten(spec)
  key = (treedef, tuple((x.shape, str(x.dtype)) for x in leaves))
  if key not in _OBS_DIMS:
    _OBS_DIMS[key] = int(np.prod(jax.eval_shape(render_craftax_symbolic, spec).shape))
  return _OBS_DIMS[key]
