"""A functional, jittable world builder over craftax's full-game `EnvState` (Craftax-Symbolic-v1).

DiCode task programs (arXiv 2602.08194, Sec. 3) edit a freshly generated Craftax world through a
`WorldBuilder`: every method returns a NEW builder, names of blocks, mobs and achievements are
strings (craftax's enum names, case-insensitive; an unknown name is a `TaskError`), and everything
traces under `jit`/`vmap`: random placement samples cells without replacement from a masked
distribution (Gumbel top-k over the valid cells, which equals repeated masked categorical draws),
and no Python control flow depends on traced values. Counts (`count=`) must be Python ints because
they fix array shapes. Placements that find no valid cell (or no free mob slot) are skipped.

The builder starts from craftax's own `generate_world`, so a program that returns `wb` unchanged
gives exactly the original game (the reference implementation starts from a variant of craftax's
generator). `generate(task, key)` is the full per-task world function that the multitask
environment and `task.check_task` use: base world -> program -> `finalize` (pre-granted
achievements, achievements implied by the starting inventory and floor). Craftax-Classic is not
supported.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

# craftax builds jnp constants at import time: import it here, never first inside a trace.
from craftax.craftax import constants as _constants
from craftax.craftax import craftax_state as _craftax_state
from craftax.craftax.game_logic import calculate_inventory_achievements
from craftax.craftax.world_gen.world_gen import generate_world as _generate_world

from jaxlab.rl.dicode.task import TaskError

MAX_COUNT = 64
_MOBS = {  # name -> (class attribute, craftax MobType value, type id)
  "COW": ("passive_mobs", 0, 0),
  "BAT": ("passive_mobs", 0, 1),
  "SNAIL": ("passive_mobs", 0, 2),
  "ZOMBIE": ("melee_mobs", 1, 0),
  "GNOME_WARRIOR": ("melee_mobs", 1, 1),
  "ORC_SOLDIER": ("melee_mobs", 1, 2),
  "LIZARD": ("melee_mobs", 1, 3),
  "KNIGHT": ("melee_mobs", 1, 4),
  "TROLL": ("melee_mobs", 1, 5),
  "PIGMAN": ("melee_mobs", 1, 6),
  "FROST_TROLL": ("melee_mobs", 1, 7),
  "SKELETON": ("ranged_mobs", 2, 0),
  "GNOME_ARCHER": ("ranged_mobs", 2, 1),
  "ORC_MAGE": ("ranged_mobs", 2, 2),
  "KOBOLD": ("ranged_mobs", 2, 3),
  "ARCHER": ("ranged_mobs", 2, 4),
  "DEEP_THING": ("ranged_mobs", 2, 5),
  "FIRE_ELEMENTAL": ("ranged_mobs", 2, 6),
  "ICE_ELEMENTAL": ("ranged_mobs", 2, 7),
}
_INVENTORY_MAX = {"pickaxe": 4, "sword": 4, "bow": 1}  # tool tiers; everything else caps at 99
_INVENTORY_CAP = 99
_GROUND = ("GRASS", "SAND", "PATH", "FIRE_GRASS", "ICE_GRASS")  # walkable, items can go here


def _game():
  return _constants, _craftax_state


def env_params():
  return _game()[1].EnvParams()


def static_params():
  return _game()[1].StaticEnvParams()


def block_id(name) -> int:
  """craftax BlockType value of a block name (TaskError if unknown)."""
  blocks = _game()[0].BlockType
  if not isinstance(name, str) or name.upper() not in blocks.__members__:
    raise TaskError(f"unknown block {name!r}")
  return blocks[name.upper()].value


def mob_spec(name) -> tuple[str, int, int]:
  if not isinstance(name, str) or name.upper() not in _MOBS:
    raise TaskError(f"unknown mob {name!r}; allowed: {', '.join(_MOBS)}")
  return _MOBS[name.upper()]


def _count(count) -> int:
  if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_COUNT:
    raise TaskError(f"count must be a Python int in 1..{MAX_COUNT}, got {count!r}")
  return count


def _pair(value, what: str):
  try:
    arr = jnp.asarray(value)
  except Exception as e:
    raise TaskError(f"{what} must be a (row, col) pair: {e}") from None
  if arr.shape != (2,):
    raise TaskError(f"{what} must be a (row, col) pair, got shape {arr.shape}")
  return arr.astype(jnp.int32)


def _sample_cells(key, mask, count: int):
  """`count` distinct cells drawn uniformly from `mask`: flat indices, and which are valid."""
  gumbel = jax.random.gumbel(key, mask.shape)
  scores = jnp.where(mask, gumbel, -jnp.inf).reshape(-1)
  top, idx = jax.lax.top_k(scores, count)
  return idx, jnp.isfinite(top)


class WorldBuilder:
  """Functional edits of a craftax `EnvState` (see module docstring)."""

  def __init__(self, state):
    self._state = state

  # ---- read-only facts -------------------------------------------------------------------------
  @property
  def player_position(self):
    return self._state.player_position

  @property
  def player_level(self):
    return self._state.player_level

  @property
  def map_size(self) -> tuple[int, int]:
    return tuple(self._state.map.shape[1:])

  @property
  def num_levels(self) -> int:
    return int(self._state.map.shape[0])

  def split(self, key, num: int = 2):
    if isinstance(num, bool) or not isinstance(num, int) or not 1 <= num <= MAX_COUNT:
      raise TaskError(f"split: num must be a Python int in 1..{MAX_COUNT}, got {num!r}")
    return tuple(jax.random.split(key, num))

  def build(self):
    return self._state

  # ---- helpers ---------------------------------------------------------------------------------
  def _with(self, **changes) -> WorldBuilder:
    return WorldBuilder(self._state.replace(**changes))

  def _level(self, level):
    if level is None:
      return self._state.player_level
    if isinstance(level, bool) or not isinstance(level, int):
      return jnp.clip(jnp.asarray(level, jnp.int32), 0, self.num_levels - 1)
    if not 0 <= level < self.num_levels:
      raise TaskError(f"level must be in 0..{self.num_levels - 1}, got {level}")
    return level

  def _in_bounds(self, pos):
    h, w = self.map_size
    return (pos[0] >= 0) & (pos[0] < h) & (pos[1] >= 0) & (pos[1] < w)

  def _free_ground(self, level, on):
    """Cells of `level` whose block is one of `on`, with no item, no mob and not the player."""
    on = (on,) if isinstance(on, str) else on
    if on is not None and not isinstance(on, (tuple, list)):
      raise TaskError(f"on= must be a block name or a tuple of block names, got {on!r}")
    ids = jnp.asarray([block_id(b) for b in (on or _GROUND)])
    s = self._state
    mask = jnp.isin(s.map[level], ids) & (s.item_map[level] == 0) & ~s.mob_map[level]
    player = jnp.zeros(self.map_size, bool).at[tuple(s.player_position)].set(True)
    return mask & ~(player & (level == s.player_level))

  def _near(self, distance, min_distance):
    h, w = self.map_size
    rows, cols = jnp.arange(h)[:, None], jnp.arange(w)[None, :]
    pos = self._state.player_position
    dist = jnp.abs(rows - pos[0]) + jnp.abs(cols - pos[1])
    return (dist >= min_distance) & (dist <= distance)

  def _set_cells(self, level, block, idx, valid):
    level_map = self._state.map[level].reshape(-1)
    level_map = level_map.at[idx].set(jnp.where(valid, block_id(block), level_map[idx]))
    new_map = self._state.map.at[level].set(level_map.reshape(self.map_size))
    return self._with(map=new_map)

  # ---- player ----------------------------------------------------------------------------------
  def set_starting_floor(self, level):
    """Starts the player on `level` (0 = overworld), on that floor's up-ladder when level > 0."""
    level = self._level(level)
    s = self._state
    pos = jnp.where(jnp.asarray(level) > 0, s.up_ladders[level], s.player_position)
    return self._with(player_level=jnp.asarray(level, jnp.int32), player_position=pos)

  def set_player_inventory(self, **items):
    """Sets inventory counts (clipped to the game's bounds); `armour`/`potions`: int or tuple."""
    inv = self._state.inventory
    changes = {}
    for name, value in items.items():
      if name in ("armour", "potions"):
        old = getattr(inv, name)
        new = (
          jnp.broadcast_to(jnp.asarray(value, jnp.int32), old.shape)
          if jnp.ndim(value) == 0
          else jnp.asarray(value, jnp.int32)
        )
        if new.shape != old.shape:
          raise TaskError(f"set_player_inventory: {name} needs {old.shape[0]} values")
        changes[name] = jnp.clip(new, 0, 2 if name == "armour" else _INVENTORY_CAP).astype(
          old.dtype
        )
      elif name in inv.__dataclass_fields__:
        high = _INVENTORY_MAX.get(name, _INVENTORY_CAP)
        changes[name] = jnp.clip(jnp.asarray(value, jnp.int32), 0, high)
      else:
        allowed = ", ".join(inv.__dataclass_fields__)
        raise TaskError(f"set_player_inventory: unknown item {name!r}; allowed: {allowed}")
    return self._with(inventory=inv.replace(**changes))

  def set_player_stats(self, **stats):
    """Attributes (dexterity, strength, intelligence: 1..5) and intrinsics (health, food, drink,
    energy, mana: 0..their maximum, health at least 1)."""
    attrs = ("dexterity", "strength", "intelligence")
    needs = ("health", "food", "drink", "energy", "mana")
    unknown = sorted(set(stats) - set(attrs) - set(needs))
    if unknown:
      raise TaskError(f"set_player_stats: unknown stat {unknown[0]!r}; allowed: {attrs + needs}")
    s = self._state
    for name in attrs:
      if name in stats:
        s = s.replace(**{f"player_{name}": jnp.clip(jnp.asarray(stats[name], jnp.int32), 1, 5)})
    maxima = {
      "health": 8 + s.player_strength,
      "food": 7 + 2 * s.player_dexterity,
      "drink": 7 + 2 * s.player_dexterity,
      "energy": 7 + 2 * s.player_dexterity,
      "mana": 6 + 3 * s.player_intelligence,
    }
    for name in needs:
      if name in stats:
        old = getattr(s, f"player_{name}")
        low = 1 if name == "health" else 0
        value = jnp.clip(jnp.asarray(stats[name]), low, maxima[name]).astype(old.dtype)
        s = s.replace(**{f"player_{name}": value})
    return WorldBuilder(s)

  def set_weapon_enchantments(self, sword=0, bow=0):
    """0 = none, 1 = fire, 2 = ice."""
    return self._with(
      sword_enchantment=jnp.clip(jnp.asarray(sword, jnp.int32), 0, 2),
      bow_enchantment=jnp.clip(jnp.asarray(bow, jnp.int32), 0, 2),
    )

  def set_armour_enchantments(self, helmet=0, chestplate=0, leggings=0, boots=0):
    """0 = none, 1 = fire, 2 = ice, per armour piece."""
    values = jnp.stack([jnp.asarray(v, jnp.int32) for v in (helmet, chestplate, leggings, boots)])
    return self._with(armour_enchantments=jnp.clip(values, 0, 2))

  def set_learned_spells(self, fireball=False, iceball=False):
    spells = jnp.stack([jnp.asarray(fireball, bool), jnp.asarray(iceball, bool)])
    return self._with(learned_spells=spells)

  def set_monsters_killed(self, level, count):
    """Monsters counted as killed on `level` (the next floor opens at the task's threshold)."""
    level = self._level(level)
    count = jnp.maximum(jnp.asarray(count, jnp.int32), 0)
    return self._with(monsters_killed=self._state.monsters_killed.at[level].set(count))

  # ---- blocks ----------------------------------------------------------------------------------
  def place_block(self, block, position, level=None):
    """Sets one cell (absolute row, col); out-of-map positions are ignored."""
    level, pos = self._level(level), _pair(position, "place_block: position")
    h, w = self.map_size
    idx = jnp.clip(pos[0], 0, h - 1) * w + jnp.clip(pos[1], 0, w - 1)
    return self._set_cells(level, block, idx[None], self._in_bounds(pos)[None])

  def fill_area(self, block, top_left, bottom_right, level=None):
    """Sets every cell of the rectangle spanned by two corners (inclusive, clipped to the map)."""
    level = self._level(level)
    a, b = _pair(top_left, "fill_area: top_left"), _pair(bottom_right, "fill_area: bottom_right")
    h, w = self.map_size
    rows, cols = jnp.arange(h)[:, None], jnp.arange(w)[None, :]
    lo, hi = jnp.minimum(a, b), jnp.maximum(a, b)
    mask = (rows >= lo[0]) & (rows <= hi[0]) & (cols >= lo[1]) & (cols <= hi[1])
    level_map = jnp.where(mask, block_id(block), self._state.map[level])
    return self._with(map=self._state.map.at[level].set(level_map))

  def place_randomly(self, key, block, count=1, level=None, on=None):
    """`count` cells anywhere on the level whose block is in `on` (default: open ground)."""
    level, count = self._level(level), _count(count)
    idx, valid = _sample_cells(key, self._free_ground(level, on), count)
    return self._set_cells(level, block, idx, valid)

  def place_randomly_near(
    self, key, block, count=1, distance=3, min_distance=1, level=None, on=None
  ):
    """`count` cells at Manhattan distance min_distance..distance from the player."""
    level, count = self._level(level), _count(count)
    mask = self._free_ground(level, on) & self._near(distance, jnp.maximum(min_distance, 1))
    idx, valid = _sample_cells(key, mask, count)
    return self._set_cells(level, block, idx, valid)

  def place_adjacent_to_existing(self, key, block, target, count=1, level=None, on=None):
    """`count` cells 4-adjacent to an existing `target` block."""
    level, count = self._level(level), _count(count)
    is_target = jnp.pad(self._state.map[level] == block_id(target), 1)
    adjacent = (
      is_target[:-2, 1:-1] | is_target[2:, 1:-1] | is_target[1:-1, :-2] | is_target[1:-1, 2:]
    )
    idx, valid = _sample_cells(key, self._free_ground(level, on) & adjacent, count)
    return self._set_cells(level, block, idx, valid)

  # ---- mobs ------------------------------------------------------------------------------------
  def _put_mob(self, mob, level, pos, ok):
    field, mob_class, type_id = mob_spec(mob)
    constants = _game()[0]
    s = self._state
    mobs = getattr(s, field)
    slot = jnp.argmin(mobs.mask[level])
    ok = ok & ~mobs.mask[level, slot] & self._in_bounds(pos)
    h, w = self.map_size
    pos = jnp.stack([jnp.clip(pos[0], 0, h - 1), jnp.clip(pos[1], 0, w - 1)])
    ok = ok & ~s.mob_map[level, pos[0], pos[1]]
    health = constants.MOB_TYPE_HEALTH_MAPPING[type_id, mob_class]

    def put(arr, value):
      return arr.at[level, slot].set(jnp.where(ok, value, arr[level, slot]))

    mobs = mobs.replace(
      position=put(mobs.position, pos),
      health=put(mobs.health, health),
      mask=put(mobs.mask, True),
      attack_cooldown=put(mobs.attack_cooldown, 0),
      type_id=put(mobs.type_id, type_id),
    )
    mob_map = s.mob_map.at[level, pos[0], pos[1]].set(s.mob_map[level, pos[0], pos[1]] | ok)
    return self._with(**{field: mobs}, mob_map=mob_map)

  def add_mob(self, mob, position, level=None):
    """One mob at an absolute position (skipped if the cell is taken or the class is full)."""
    return self._put_mob(mob, self._level(level), _pair(position, "add_mob: position"), True)

  def add_mobs_randomly_near(self, key, mob, count=1, distance=5, min_distance=1, level=None):
    """Up to `count` mobs on open ground at Manhattan distance min_distance..distance."""
    level, count = self._level(level), _count(count)
    mob_spec(mob)
    mask = self._free_ground(level, None) & self._near(distance, jnp.maximum(min_distance, 1))
    idx, valid = _sample_cells(key, mask, count)
    w = self.map_size[1]
    wb = self
    for i in range(count):
      wb = wb._put_mob(mob, level, jnp.stack([idx[i] // w, idx[i] % w]), valid[i])
    return wb


def base_world(key):
  """craftax's own world for `key` (the unmodified game)."""
  return _generate_world(key, env_params(), static_params())


def finalize(state, completed_mask):
  """Pre-grants `completed_mask` and the achievements the starting inventory and floor imply, so
  a task never pays reward for what it starts with."""
  constants = _game()[0]
  state = calculate_inventory_achievements(
    state.replace(achievements=state.achievements | completed_mask)
  )
  levels = jnp.arange(constants.LEVEL_ACHIEVEMENT_MAP.shape[0])
  reached = (levels >= 1) & (levels <= state.player_level)
  floor_done = jnp.zeros(state.achievements.shape, jnp.int32)
  floor_done = floor_done.at[constants.LEVEL_ACHIEVEMENT_MAP].max(reached.astype(jnp.int32)) > 0
  return state.replace(achievements=state.achievements | floor_done)


def _like(new, ref):
  """`new` with the base state's dtypes and shapes (TaskError if a program changed a shape)."""

  def cast(a, b):
    a = jnp.asarray(a)
    if a.shape != jnp.shape(b):
      raise TaskError(f"generate_world changed a state shape: {a.shape} != {jnp.shape(b)}")
    return a.astype(jnp.asarray(b).dtype)

  return jax.tree.map(cast, new, ref)


def apply_task(task, base, key):
  """`task`'s program applied to a base world, then `finalize` (jittable, vmappable)."""
  from jaxlab.rl.dicode.task import achievement_ids

  out = task.generate_world(WorldBuilder(base), key)
  if isinstance(out, WorldBuilder):
    out = out.build()
  if type(out) is not type(base):
    raise TaskError(f"generate_world must return the builder, got {type(out).__name__}")
  ids = achievement_ids()
  done = np.zeros(len(ids), bool)
  done[[ids[n] for n in task.completed]] = True
  return finalize(_like(out, base), jnp.asarray(done))


def generate(task, key):
  """The world of `task` for `key`: base world -> task program -> `finalize` (jittable)."""
  k_base, k_task = jax.random.split(key)
  return apply_task(task, base_world(k_base), k_task)


@functools.cache
def _base_worlds_fn():
  return jax.jit(jax.vmap(base_world))


def base_worlds(keys):
  """`base_world` for a batch of keys, compiled once per process and batch size (generating a
  full Craftax world compiles slowly; task programs are compiled separately on top of it)."""
  return _base_worlds_fn()(keys)


def validate(states, relevant, num_worlds: int) -> None:
  """Host-side checks of a batch of built worlds (see `task.check_task`); TaskError on failure."""
  from jaxlab.rl.dicode.task import achievement_ids

  constants = _game()[0]
  ref = jax.eval_shape(base_world, jax.random.key(0))
  for (path, leaf), spec in zip(
    jax.tree_util.tree_leaves_with_path(states), jax.tree.leaves(ref), strict=True
  ):
    where = jax.tree_util.keystr(path)
    if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
      leaf = jax.random.key_data(leaf)
      spec = jax.ShapeDtypeStruct(spec.shape + leaf.shape[-1:], leaf.dtype)
    leaf = np.asarray(leaf)
    if leaf.shape != (num_worlds, *spec.shape) or leaf.dtype != spec.dtype:
      raise TaskError(f"state field {where} has shape/dtype {leaf.shape}/{leaf.dtype}")
    if leaf.dtype.kind == "f" and not np.isfinite(leaf).all():
      raise TaskError(f"state field {where} is not finite")
  _check_ranges(states, constants)
  _check_player(states, constants)
  ids = achievement_ids()
  done = np.asarray(states.achievements)[:, [ids[n] for n in relevant]]
  if done.any():
    names = sorted({relevant[j] for j in np.nonzero(done)[1]})
    raise TaskError(f"relevant achievements already complete at reset: {', '.join(names)}")


def _check_ranges(s, constants) -> None:
  def within(x, low, high, what):
    x = np.asarray(x)
    if x.size and (x.min() < low or x.max() > high):
      raise TaskError(f"{what} out of range [{low}, {high}]: min {x.min()}, max {x.max()}")

  within(s.map, 0, len(constants.BlockType) - 1, "block id")
  within(s.item_map, 0, len(constants.ItemType) - 1, "item id")
  within(s.player_level, 0, s.map.shape[1] - 1, "player level")
  for field in ("melee_mobs", "ranged_mobs", "passive_mobs"):
    mobs = getattr(s, field)
    mask = np.asarray(mobs.mask)
    within(np.asarray(mobs.type_id)[mask], 0, 7, f"{field} type id")
    within(np.asarray(mobs.position)[mask], 0, max(s.map.shape[2:]) - 1, f"{field} position")
  for name, value in vars(s.inventory).items():
    within(value, 0, 2 if name == "armour" else _INVENTORY_MAX.get(name, _INVENTORY_CAP), name)
  within(s.player_health, 1e-6, 8 + np.asarray(s.player_strength).max(), "player health")
  for name in ("food", "drink", "energy", "mana", "dexterity", "strength", "intelligence"):
    within(getattr(s, f"player_{name}"), 0, 99, f"player {name}")


def _check_player(s, constants) -> None:
  solid = np.asarray(constants.SOLID_BLOCK_MAPPING)
  pos, level = np.asarray(s.player_position), np.asarray(s.player_level)
  h, w = s.map.shape[2:]
  for i in range(pos.shape[0]):
    r, c = pos[i]
    if not (0 <= r < h and 0 <= c < w):
      raise TaskError(f"player position {(int(r), int(c))} is outside the map")
    block = int(np.asarray(s.map)[i, level[i], r, c])
    if solid[block] or block in (constants.BlockType.WATER.value, constants.BlockType.LAVA.value):
      name = constants.BlockType(block).name
      raise TaskError(f"the player starts inside a {name} block at {(int(r), int(c))}")
    if np.asarray(s.mob_map)[i, level[i], r, c]:
      raise TaskError(f"a mob occupies the player's starting tile {(int(r), int(c))}")
