"""DiCode tasks and environment: programs, world builder, multipliers, multitask env."""

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from craftax.craftax import constants as C
from craftax.craftax import game_logic as gl

from jaxlab.rl import dicode
from jaxlab.rl.dicode import multitask, seeds, world
from jaxlab.rl.dicode import task as T

GRASS, STONE, TREE = (C.BlockType[n].value for n in ("GRASS", "STONE", "TREE"))
_P = multitask._P
CFG = dicode.get_config()  # DiCode's defaults: the success bonus and pool size below
BONUS = {"bonus_k": CFG.bonus_k, "bonus_floor": CFG.bonus_floor}


def _grass_world():
  """A hand-made state: every floor grass, player at (24, 24) on floor 0, no mobs or items."""
  shape = jax.eval_shape(world.base_world, jax.random.key(0))

  def zeros(s):
    if jax.dtypes.issubdtype(s.dtype, jax.dtypes.prng_key):
      return jax.random.key(0)
    return jnp.zeros(s.shape, s.dtype)

  s = jax.tree.map(zeros, shape)
  inv = s.inventory
  return s.replace(
    map=jnp.full(s.map.shape, GRASS, s.map.dtype),
    player_position=jnp.array([24, 24], jnp.int32),
    up_ladders=jnp.tile(jnp.array([[5, 7]], jnp.int32), (9, 1)),
    player_health=jnp.float32(9.0),
    player_food=jnp.int32(9),
    player_drink=jnp.int32(9),
    player_energy=jnp.int32(9),
    player_mana=jnp.int32(9),
    player_dexterity=jnp.int32(1),
    player_strength=jnp.int32(1),
    player_intelligence=jnp.int32(1),
    inventory=inv,
  )


def _assert_same(a, b):
  def same(x, y):
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
      x, y = jax.random.key_data(x), jax.random.key_data(y)
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))

  jax.tree.map(same, a, b)


@pytest.fixture(scope="module")
def grass():
  return _grass_world()


def _program(body="  return wb", **defs):
  head = {
    "NAME": '"t"',
    "RELEVANT_ACHIEVEMENTS": '("COLLECT_DIAMOND",)',
  }
  head.update(defs)
  lines = [f"{k} = {v}" for k, v in head.items() if v is not None]
  return "\n".join(lines) + f"\n\ndef generate_world(wb, key):\n{body}\n"


# ---- task programs ----------------------------------------------------------------------------


def test_clamp_task_params_ranges_and_defaults():
  out = T.clamp_task_params({"melee_spawn": 9.0, "mob_health": -3, "growing_plants_age": 77.6})
  assert out["melee_spawn"] == 2.0 and out["mob_health"] == 0.1
  assert out["growing_plants_age"] == 78.0
  assert out["needs_depletion"] == 1.0 and len(out) == 12
  assert all(T.MULTIPLIERS[k][1] <= v <= T.MULTIPLIERS[k][2] for k, v in out.items())
  with pytest.raises(T.TaskError, match="unknown task parameter 'speed'"):
    T.clamp_task_params({"speed": 1.0})
  with pytest.raises(T.TaskError, match="finite"):
    T.clamp_task_params({"mob_damage": float("nan")})
  with pytest.raises(T.TaskError, match="number"):
    T.clamp_task_params({"mob_damage": "2"})


def test_compile_task_reads_definitions():
  t = T.compile_task(
    _program(
      COMPLETED_ACHIEVEMENTS='("make_wood_sword",)',
      TASK_PARAMS="dict(needs_depletion=7.0)",
      RELEVANT_ACHIEVEMENTS='("COLLECT_WOOD", "defeat_orc_soldier")',
    )
  )
  assert t.name == "t" and t.relevant == ("COLLECT_WOOD", "DEFEAT_ORC_SOLIDER")
  assert t.completed == ("MAKE_WOOD_SWORD",) and t.params["needs_depletion"] == 5.0


@pytest.mark.parametrize(
  "source, reason",
  [
    ('NAME = "t"\nRELEVANT_ACHIEVEMENTS = ("COLLECT_WOOD",)\n', "does not define generate_world"),
    ("def generate_world(wb, key):\n  return wb\n", "NAME, RELEVANT_ACHIEVEMENTS"),
    (_program(NAME='"Bad Name"'), "NAME must match"),
    (_program(RELEVANT_ACHIEVEMENTS='("FLY",)'), "unknown achievement 'FLY'"),
    (_program(RELEVANT_ACHIEVEMENTS="()"), "at least one"),
    (_program(COMPLETED_ACHIEVEMENTS='("COLLECT_DIAMOND",)'), "both relevant and pre-completed"),
    (_program(TASK_PARAMS="dict(gravity=2.0)"), "unknown task parameter"),
    (
      'NAME = "t"\nRELEVANT_ACHIEVEMENTS = ("COLLECT_WOOD",)\ngenerate_world = 3\n',
      "two arguments",
    ),
    ("x = open('f')\n", "NameError"),
    ("def f(:\n", "syntax error"),
  ],
)
def test_compile_task_rejects_with_reason(source, reason):
  with pytest.raises(T.TaskError, match=reason):
    T.compile_task(source)


def test_allowed_attributes_are_the_builders_public_names():
  public = {n for n, _ in inspect.getmembers(world.WorldBuilder) if not n.startswith("_")}
  assert T.ALLOWED_ATTRIBUTES == public
  assert "open" not in T.SAFE_BUILTINS and "getattr" not in T.SAFE_BUILTINS


# ---- world builder: each operation on a hand-checked case --------------------------------------


def test_place_block_and_fill_area(grass):
  wb = world.WorldBuilder(grass)
  s = wb.place_block("stone", (3, 4)).place_block("TREE", (99, 0)).build()
  assert int(s.map[0, 3, 4]) == STONE and int((s.map[0] != GRASS).sum()) == 1
  s = wb.fill_area("WATER", (2, 5), (0, 3), level=2).build()
  changed = np.argwhere(np.asarray(s.map) != GRASS)
  assert {tuple(x) for x in changed} == {(2, r, c) for r in range(3) for c in range(3, 6)}
  assert int((grass.map != GRASS).sum()) == 0  # the builder is functional
  with pytest.raises(T.TaskError, match="unknown block 'GOLD'"):
    wb.place_block("GOLD", (0, 0))


def test_place_randomly_near_and_adjacent(grass):
  wb = world.WorldBuilder(grass).fill_area("STONE", (0, 0), (47, 20))
  s = wb.place_randomly_near(jax.random.key(1), "TREE", count=5, distance=2).build()
  trees = np.argwhere(np.asarray(s.map[0]) == TREE)
  assert len(trees) == 5
  dist = np.abs(trees - 24).sum(1)
  assert (dist >= 1).all() and (dist <= 2).all()
  # more than the 12 valid cells: every valid cell, nothing else
  s = wb.place_randomly_near(jax.random.key(2), "TREE", count=20, distance=2).build()
  assert int((s.map[0] == TREE).sum()) == 12
  s = wb.place_adjacent_to_existing(jax.random.key(3), "CRAFTING_TABLE", "STONE", count=3)
  s = s.build()
  tables = np.argwhere(np.asarray(s.map[0]) == C.BlockType.CRAFTING_TABLE.value)
  assert len(tables) == 3 and (tables[:, 1] == 21).all()  # the grass column next to the stone
  s = wb.place_randomly(jax.random.key(4), "COAL", count=4, on=("STONE",)).build()
  coal = np.argwhere(np.asarray(s.map[0]) == C.BlockType.COAL.value)
  assert len(coal) == 4 and (coal[:, 1] <= 20).all()
  with pytest.raises(T.TaskError, match="count must be a Python int"):
    wb.place_randomly(jax.random.key(4), "COAL", count=0)


def test_random_placement_traces_under_jit_vmap(grass):
  def gen(key):
    wb = world.WorldBuilder(grass)
    k1, k2 = wb.split(key)
    wb = wb.place_randomly_near(k1, "TREE", count=3, distance=3)
    return wb.add_mobs_randomly_near(k2, "ZOMBIE", count=2, distance=4, min_distance=2).build()

  s = jax.jit(jax.vmap(gen))(jax.random.split(jax.random.key(0), 3))
  assert (np.asarray(s.map[:, 0]) == TREE).sum(axis=(1, 2)).tolist() == [3, 3, 3]
  assert np.asarray(s.melee_mobs.mask[:, 0]).sum(1).tolist() == [2, 2, 2]
  assert not np.array_equal(np.asarray(s.map[0]), np.asarray(s.map[1]))


def test_mobs(grass):
  wb = world.WorldBuilder(grass).add_mob("skeleton", (20, 20)).add_mob("COW", (20, 20))
  s = wb.build()
  assert bool(s.ranged_mobs.mask[0, 0]) and int(s.ranged_mobs.type_id[0, 0]) == 0
  assert float(s.ranged_mobs.health[0, 0]) == float(C.MOB_TYPE_HEALTH_MAPPING[0, 2])
  assert not bool(s.passive_mobs.mask.any())  # the cell was taken
  assert bool(s.mob_map[0, 20, 20]) and int(s.mob_map.sum()) == 1
  s = world.WorldBuilder(grass).add_mob("TROLL", (1, 2), level=5).build()
  assert int(s.melee_mobs.type_id[5, 0]) == 5 and s.melee_mobs.position[5, 0].tolist() == [1, 2]
  s = world.WorldBuilder(grass).add_mobs_randomly_near(jax.random.key(0), "COW", count=4).build()
  assert int(s.passive_mobs.mask[0].sum()) == 3  # three passive slots per floor
  with pytest.raises(T.TaskError, match="unknown mob 'DRAGON'"):
    world.WorldBuilder(grass).add_mob("DRAGON", (1, 1))


def test_player_setters(grass):
  wb = world.WorldBuilder(grass)
  s = wb.set_player_inventory(wood=200, sword=9, armour=(1, 2, 5, 0), potions=3).build()
  assert int(s.inventory.wood) == 99 and int(s.inventory.sword) == 4
  assert s.inventory.armour.tolist() == [1, 2, 2, 0] and s.inventory.potions.tolist() == [3] * 6
  with pytest.raises(T.TaskError, match="unknown item 'gold'"):
    wb.set_player_inventory(gold=1)
  s = wb.set_player_stats(strength=3, health=50, food=0, dexterity=9).build()
  assert int(s.player_strength) == 3 and float(s.player_health) == 11.0
  assert int(s.player_food) == 0 and int(s.player_dexterity) == 5
  s = wb.set_weapon_enchantments(sword=1, bow=7).set_armour_enchantments(boots=2).build()
  assert int(s.sword_enchantment) == 1 and int(s.bow_enchantment) == 2
  assert s.armour_enchantments.tolist() == [0, 0, 0, 2]
  s = wb.set_learned_spells(iceball=True).set_monsters_killed(3, 5).build()
  assert s.learned_spells.tolist() == [False, True] and int(s.monsters_killed[3]) == 5
  s = wb.set_starting_floor(2).build()
  assert int(s.player_level) == 2 and s.player_position.tolist() == [5, 7]
  with pytest.raises(T.TaskError, match="level must be in 0..8"):
    wb.set_starting_floor(9)


def test_finalize_pregrants_completed_and_implied(grass):
  wb = world.WorldBuilder(grass).set_player_inventory(pickaxe=1).set_starting_floor(2)
  done = np.zeros(len(C.Achievement), bool)
  done[C.Achievement.EAT_COW.value] = True
  s = world.finalize(wb.build(), jnp.asarray(done))
  got = {C.Achievement(i).name for i in np.nonzero(np.asarray(s.achievements))[0]}
  assert got == {"EAT_COW", "MAKE_WOOD_PICKAXE", "ENTER_DUNGEON", "ENTER_GNOMISH_MINES"}


# ---- the multipliers --------------------------------------------------------------------------


def _defaults():
  return jnp.asarray([T.MULTIPLIERS[n][0] for n in multitask.PARAM_ORDER], jnp.float32)


def _with(**kw):
  m = _defaults()
  for k, v in kw.items():
    m = m.at[_P[k]].set(v)
  return m


def test_intrinsics_multipliers(grass):
  s = grass.replace(
    player_hunger=jnp.float32(10.0),
    player_thirst=jnp.float32(3.0),
    player_fatigue=jnp.float32(2.0),
    player_recover=jnp.float32(1.0),
    player_health=jnp.float32(5.0),
    player_dexterity=jnp.int32(3),
    player_intelligence=jnp.int32(3),
    player_recover_mana=jnp.float32(4.0),
  )
  static = world.static_params()
  noop = C.Action.NOOP.value
  ref = gl.update_player_intrinsics(s, noop, static)
  got = multitask._update_intrinsics(s, noop, static, _defaults())
  _assert_same(got, ref)
  m = _with(needs_depletion=0.5, health_recover=3.0, mana_recover=2.0)
  got = multitask._update_intrinsics(s, noop, static, m)
  decay = 1.0 - 0.125 * (3 - 1)
  assert float(got.player_hunger) == pytest.approx(10.0 + 0.5 * decay)
  assert float(got.player_thirst) == pytest.approx(3.0 + 0.5 * decay)
  assert float(got.player_fatigue) == pytest.approx(2.0 + 0.5 * decay)
  assert float(got.player_recover) == pytest.approx(1.0 + 3.0)
  assert float(got.player_recover_mana) == pytest.approx((4.0 + 1) * (1 + 0.25 * 2 * 2.0))
  starving = s.replace(player_food=jnp.int32(0))
  got = multitask._update_intrinsics(starving, noop, static, _with(health_loss=2.5))
  assert float(got.player_recover) == pytest.approx(1.0 - 2.5)


def test_plants_ripen_at_task_age(grass):
  pos = jnp.zeros((10, 2), jnp.int32).at[0].set(jnp.array([3, 3]))
  s = grass.replace(
    map=grass.map.at[0, 3, 3].set(C.BlockType.PLANT.value),
    growing_plants_positions=pos,
    growing_plants_age=jnp.zeros(10, jnp.int32).at[0].set(49),
    growing_plants_mask=jnp.zeros(10, bool).at[0].set(True),
  )
  static = world.static_params()
  ripe = C.BlockType.RIPE_PLANT.value
  assert int(multitask._update_plants(s, static, 50).map[0, 3, 3]) == ripe
  assert int(multitask._update_plants(s, static, 51).map[0, 3, 3]) == C.BlockType.PLANT.value
  ref = gl.update_plants(s.replace(growing_plants_age=s.growing_plants_age + 550), static)
  got = multitask._update_plants(
    s.replace(growing_plants_age=s.growing_plants_age + 550), static, 600
  )
  _assert_same(got, ref)


def test_kill_threshold_and_spawn_thinning(grass):
  kills = jnp.array([0, 3, 8, 12])
  assert multitask.effective_kills(kills, 8).tolist() == [0, 3, 8, 12]
  assert multitask.effective_kills(kills, 3).tolist() == [0, 8, 8, 12]
  assert multitask.effective_kills(kills, 12).tolist() == [0, 3, 7, 12]
  after = world.WorldBuilder(grass).add_mob("ZOMBIE", (2, 2)).add_mob("COW", (4, 4)).build()
  keep = multitask._thin_new_mobs(grass, after, jax.random.key(0), jnp.array([1.0, 1.0, 1.0]), 2.0)
  assert float(keep.melee_mobs.health[0, 0]) == 2 * float(after.melee_mobs.health[0, 0])
  drop = multitask._thin_new_mobs(grass, after, jax.random.key(0), jnp.array([1.0, 0.0, 1.0]), 1.0)
  assert not bool(drop.melee_mobs.mask.any()) and bool(drop.passive_mobs.mask[0, 0])
  assert not bool(drop.mob_map[0, 2, 2]) and bool(drop.mob_map[0, 4, 4])
  # thinning probability: the fraction of kept spawns over many keys matches keep_prob
  keys = jax.random.split(jax.random.key(1), 400)
  thin = jax.vmap(lambda k: multitask._thin_new_mobs(grass, after, k, jnp.full(3, 0.3), 1.0))
  frac = float(jax.jit(lambda k: thin(k).melee_mobs.mask[:, 0, 0].mean())(keys))
  assert abs(frac - 0.3) < 0.07


def test_spawn_scan_equals_the_two_attempts_written_out(grass):
  """`_spawn` runs its two spawn attempts as a length-2 scan; the same keys and probabilities
  written out twice (its earlier form) give the same worlds, bit for bit."""
  params, static = world.env_params(), world.static_params()

  def unrolled(state, key, m):
    spawn = jnp.stack([m[_P["passive_spawn"]], m[_P["melee_spawn"]], m[_P["ranged_spawn"]]])
    health = m[_P["mob_health"]]
    after = gl.spawn_mobs(state, key, params, static)
    keep = jnp.minimum(spawn, 1.0)
    state = multitask._thin_new_mobs(state, after, jax.random.fold_in(key, 1), keep, health)
    extra = gl.spawn_mobs(state, jax.random.fold_in(key, 2), params, static)
    prob = jnp.clip(spawn - 1.0, 0.0, 1.0)
    return multitask._thin_new_mobs(state, extra, jax.random.fold_in(key, 3), prob, health)

  m = _with(passive_spawn=1.9, melee_spawn=1.6, ranged_spawn=0.5, mob_health=1.5)
  keys = jax.random.split(jax.random.key(3), 16)
  # night on an uncleared floor: craftax's monster spawn chances are high enough to spawn
  state = grass.replace(light_level=jnp.float32(0.0))
  scanned = jax.jit(jax.vmap(lambda k: multitask._spawn(state, k, params, static, m)))(keys)
  written = jax.jit(jax.vmap(lambda k: unrolled(state, k, m)))(keys)
  _assert_same(scanned, written)
  assert int(scanned.passive_mobs.mask.sum()) > int(state.passive_mobs.mask.sum())


# ---- seed tasks and the multitask environment (full Craftax worlds) -----------------------------


@pytest.fixture(scope="module")
def seed_tasks():
  return [T.compile_task(src) for src in seeds.load_seed_tasks().values()]


def test_static_bonus_table(seed_tasks):
  bonus = multitask.static_bonus(seed_tasks, bonus_k=2.0, bonus_floor=20.0)
  # collect_coal: 1 reward point -> the floor; original: every achievement, 226 points -> 452
  assert bonus.tolist() == [20.0, 20.0, 20.0, 20.0, 452.0]
  assert multitask.static_bonus(seed_tasks[:1], bonus_k=30.0, bonus_floor=0.0).tolist() == [30.0]


@pytest.fixture(scope="module")
def small_worlds(grass):
  """Three hand-made worlds: grass with a stone band and some trees and water (cheap to compile,
  unlike craftax's generator, which the slow tests use)."""

  def one(key):
    wb = world.WorldBuilder(grass).fill_area("STONE", (0, 0), (47, 10), level=0)
    wb = wb.place_randomly(key, "TREE", count=20).place_randomly(key, "WATER", count=5)
    return wb.build()

  return jax.jit(jax.vmap(one))(jax.random.split(jax.random.key(5), 3))


def test_seed_tasks_build_and_pass_check(seed_tasks, small_worlds):
  names = [t.name for t in seed_tasks]
  assert names == [
    "collect_coal",
    "craft_wood_pickaxe",
    "defeat_zombie",
    "survive_needs",
    "original",
  ]
  for t in seed_tasks:
    info = T.check_task(t, jax.random.key(3), num_worlds=3, base=small_worlds)
    assert info["name"] == t.name and info["num_worlds"] == 3
  original = seed_tasks[-1]
  assert len(original.relevant) == len(C.Achievement) and original.params == T.clamp_task_params({})


def test_check_task_rejects_bad_worlds(small_worlds):
  def check(body):
    program = T.compile_task(_program(body))
    T.check_task(program, jax.random.key(0), num_worlds=3, base=small_worlds)

  with pytest.raises(T.TaskError, match="starts inside a STONE block"):
    check('  return wb.fill_area("STONE", (20, 20), (28, 28))')
  with pytest.raises(T.TaskError, match="already complete at reset: COLLECT_DIAMOND"):
    check("  return wb.set_player_inventory(diamond=1)")
  with pytest.raises(T.TaskError, match="unknown mob 'DRAGON'"):
    check('  return wb.add_mob("DRAGON", (1, 1))')
  with pytest.raises(T.TaskError, match="must return the builder"):
    check("  return 3")
  with pytest.raises(T.TaskError, match="failed under jit"):
    check("  return wb if wb.player_position[0] > 3 else wb")  # Python control flow on a tracer


@pytest.mark.slow
def test_seed_tasks_on_craftax_worlds(seed_tasks):
  for t in seed_tasks:
    info = T.check_task(t, jax.random.key(3), num_worlds=3)
    assert info["name"] == t.name


@pytest.mark.slow
def test_game_step_equals_craftax_step_at_defaults():
  params, static = world.env_params(), world.static_params()
  state = world.base_world(jax.random.key(0))
  kills = state.monsters_killed
  step_ref = jax.jit(lambda k, s, a: gl.craftax_step(k, s, a, params, static))
  step = jax.jit(lambda k, s, n, a: multitask.game_step(k, s, n, a, _defaults(), params, static))
  ref = state
  for i in range(30):
    key = jax.random.fold_in(jax.random.key(1), i)
    action = i % len(C.Action)
    ref, r_ref = step_ref(key, ref, action)
    state, kills, r = step(key, state, kills, action)
    _assert_same(state, ref)
    assert float(r) == float(r_ref)


N_ENVS = 4


@pytest.fixture(scope="module")
def env(seed_tasks):
  tasks = [seed_tasks[0], seed_tasks[3]]  # collect_coal, survive_needs
  e = multitask.make(
    "craftax-symbolic",
    N_ENVS,
    tasks,
    num_slots=6,
    slots=[4, 1],
    reset_ratio=4,
    bonus=CFG.bonus,
    pool_size=CFG.pool_size,
    **BONUS,
  )
  return e, jax.jit(e.reset), jax.jit(e.step)


@pytest.mark.slow
def test_multitask_steps_stay_finite_with_task_slots(env):
  e, reset, step = env
  obs, state = reset(jax.random.key(0))
  assert obs.shape == (N_ENVS, *e.obs_shape)
  slot = np.asarray([4, 1])[np.asarray(state.env.task)]
  np.testing.assert_array_equal(np.asarray(obs[:, -6:]), np.eye(6)[slot])
  for i in range(50):
    action = jax.random.randint(jax.random.key(i), (N_ENVS,), 0, e.num_actions)
    obs, state, reward, done, info = step(state, action, jax.random.key(100 + i))
    assert np.isfinite(np.asarray(obs)).all() and np.isfinite(np.asarray(reward)).all()
  slot = np.asarray([4, 1])[np.asarray(state.env.task)]
  np.testing.assert_array_equal(np.asarray(obs[:, -6:]), np.eye(6)[slot])
  assert set(np.unique(np.asarray(state.env.task))) <= {0, 1}


@pytest.mark.slow
def test_multitask_success_bonus_and_termination(env):
  e, reset, step = env
  _, state = reset(jax.random.key(7))
  state = multitask.set_original_return(state, 30.0)  # dynamic bonus: max(2 * 30, 20) = 60
  tasks = np.asarray(state.env.task)
  coal = C.Achievement.COLLECT_COAL.value
  ach = state.env.game.achievements
  # env 0 gets every relevant achievement of its task by hand; the others do not
  relevant = [[coal], [C.Achievement[n].value for n in ("EAT_COW", "COLLECT_DRINK", "WAKE_UP")]]
  solved = state.replace(
    env=state.env.replace(
      game=state.env.game.replace(achievements=ach.at[0, jnp.asarray(relevant[tasks[0]])].set(True))
    )
  )
  noop = jnp.full((N_ENVS,), C.Action.NOOP.value, jnp.int32)  # strong int32: no recompile
  key = jax.random.key(11)
  _, s0, r0, d0, i0 = step(state, noop, key)
  obs1, s1, r1, d1, i1 = step(solved, noop, key)
  assert np.asarray(i1["success"]).tolist() == [True] + [False] * (N_ENVS - 1)
  assert not np.asarray(i0["success"]).any()
  assert bool(d1[0]) and bool(i1["returned_episode"][0]) and int(s1.episode_length[0]) == 0
  assert float(r1[0] - r0[0]) == pytest.approx(60.0)
  np.testing.assert_array_equal(np.asarray(r1[1:]), np.asarray(r0[1:]))
  assert int(i1["task"][0]) == tasks[0]


# ---- the data-driven session environment: task pools in the state, one program per shape -------

POOL = 2


@pytest.fixture(scope="module")
def pooled(seed_tasks, small_worlds):
  """Pools of two seed tasks (collect_coal, survive_needs) over the hand-made worlds, and the
  tables of two different task sets over them."""
  base = jax.tree.map(lambda x: x[:POOL], small_worlds)
  tasks = [seed_tasks[0], seed_tasks[3]]
  pools = [multitask.build_pool(t, jax.random.key(i), POOL, base=base) for i, t in enumerate(tasks)]
  table_a = multitask.build_table(tasks, pools, [4, 1], 3, **BONUS)
  table_b = multitask.build_table(
    tasks[::-1], pools[::-1], [0, 2], 3, weights=[0.25, 0.75], original_return=5.0, **BONUS
  )
  return tasks, pools, table_a, table_b


def _env(table):
  return multitask.session_env(
    "craftax-symbolic",
    N_ENVS,
    6,
    table,
    bonus=CFG.bonus,
    reset_ratio=2,
    fresh_worlds=False,
    **BONUS,
  )


def _host(tree):
  def raw(x):
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
      x = jax.random.key_data(x)
    return np.asarray(x)

  return jax.tree.map(raw, tree)


def test_pool_keys_and_round_trip(pooled):
  _, pools, _, _ = pooled
  keys, k_base, k_task = multitask.pool_keys(jax.random.key(1), POOL)
  for i in range(POOL):  # world.generate's own split of each world's key
    want = jax.random.split(keys[i])
    np.testing.assert_array_equal(jax.random.key_data(k_base[i]), jax.random.key_data(want[0]))
    np.testing.assert_array_equal(jax.random.key_data(k_task[i]), jax.random.key_data(want[1]))
  arrays = multitask.pool_to_arrays(pools[1])
  _assert_same(multitask.pool_from_arrays(arrays, POOL), pools[1])
  with pytest.raises(ValueError, match="pool leaf"):
    multitask.pool_from_arrays(arrays, POOL + 1)
  coal = _host(pools[0])
  assert (coal.inventory.pickaxe == 1).all() and (coal.inventory.sword == 1).all()


def test_table_pads_with_units_never_drawn(pooled):
  tasks, _, table_a, table_b = pooled
  assert np.asarray(table_a.slot).tolist() == [4, 1, 0]
  assert np.isneginf(np.asarray(table_a.logits)[2])
  np.testing.assert_allclose(np.exp(np.asarray(table_b.logits)[:2]), [0.25, 0.75], rtol=1e-6)
  assert float(table_b.original_return) == 5.0
  np.testing.assert_array_equal(np.asarray(table_a.relevant)[:2], multitask.relevant_table(tasks))
  np.testing.assert_array_equal(
    np.asarray(table_b.relevant)[:2], multitask.relevant_table(tasks)[::-1]
  )
  coal = tasks[0].params
  np.testing.assert_allclose(
    np.asarray(table_a.mults)[0], [coal[n] for n in multitask.PARAM_ORDER], rtol=1e-6
  )
  assert jax.tree.leaves(table_a.pool)[0].shape[:2] == (3, POOL)


def test_reset_draws_pool_worlds_of_its_units(pooled):
  _, pools, table_a, table_b = pooled
  env_a, env_b = _env(table_a), _env(table_b)
  assert env_a.step is env_b.step  # one step function for every task set of this shape
  for table, env, order in ((table_a, env_a, (0, 1)), (table_b, env_b, (1, 0))):
    obs, state = env.reset(jax.random.key(3))
    units = np.asarray(state.env.task)
    assert set(units.tolist()) <= {0, 1}  # the padding unit is never drawn
    slots = np.asarray(table.slot)[units]
    np.testing.assert_array_equal(np.asarray(obs[:, -6:]), np.eye(6)[slots])
    games, kills = _host(state.env.game), np.asarray(state.env.kills)
    for i, u in enumerate(units):
      pool = _host(pools[order[u]])
      game = jax.tree.map(lambda x, i=i: x[i], games)
      found = []
      for j in range(POOL):
        ref = jax.tree.map(lambda x, j=j: x[j], pool)
        true_kills = ref.monsters_killed
        ref = ref.replace(monsters_killed=np.asarray(multitask.effective_kills(true_kills, 8)))
        same = jax.tree.leaves(jax.tree.map(np.array_equal, game, ref))
        found.append(all(same) and np.array_equal(kills[i], true_kills))
      assert any(found)


def test_new_task_set_reuses_the_traced_step(pooled):
  """A new task set is new data in the same program: the jitted step traces once, and its
  lowering (the HLO the persistent compilation cache keys on) is the same text."""
  _, _, table_a, table_b = pooled
  env_a, env_b = _env(table_a), _env(table_b)
  traces = []

  def step(state, action, key):
    traces.append(1)  # a Python side effect: runs once per trace
    return env_a.step(state, action, key)

  jitted = jax.jit(step)
  action = jnp.zeros((N_ENVS,), jnp.int32)
  _, state_a = env_a.reset(jax.random.key(0))
  _, state_b = env_b.reset(jax.random.key(1))
  text_a = jitted.lower(state_a, action, jax.random.key(2)).as_text()
  text_b = jitted.lower(state_b, action, jax.random.key(2)).as_text()
  assert len(traces) == 1 and text_a == text_b
  assert env_a.reset.func._cache_size() == 1  # reset compiled once for both tables


@pytest.mark.slow
def test_pools_and_fresh_worlds_equal_generated_worlds_and_step_exactly(seed_tasks):
  """On craftax's own generator: a pool world is `world.generate(task, key_i)`; a fresh unit's
  reset is `world.generate(original, key)`; one step equals `game_step` on those worlds."""
  coal, original = seed_tasks[0], seed_tasks[-1]
  key = jax.random.key(4)
  pool = multitask.build_pool(coal, key, 2)
  keys, _, _ = multitask.pool_keys(key, 2)
  gen = jax.jit(lambda k: world.generate(coal, k))
  for i in range(2):
    _assert_same(jax.tree.map(lambda x, i=i: x[i], pool), gen(keys[i]))
  table = multitask.build_table([original], [pool], [2], 1, fresh=[True], **BONUS)
  env = multitask.session_env(
    "craftax-symbolic", N_ENVS, 3, table, bonus=CFG.bonus, reset_ratio=N_ENVS, **BONUS
  )
  k_reset = jax.random.key(9)
  _, state = env.reset(k_reset)
  world_keys, _, _ = multitask.pool_keys(jax.random.split(k_reset, 3)[2], N_ENVS)
  want = jax.jit(jax.vmap(lambda k: world.generate(original, k)))(world_keys)
  kills = want.monsters_killed
  _assert_same(state.env.game, want.replace(monsters_killed=multitask.effective_kills(kills, 8)))
  action = jnp.arange(N_ENVS, dtype=jnp.int32) % 5
  k_step = jax.random.key(10)
  _, stepped, reward, done, _ = jax.jit(env.step)(state, action, k_step)
  params, static = world.env_params(), world.static_params()
  mults = jnp.broadcast_to(_defaults(), (N_ENVS, len(multitask.PARAM_ORDER)))
  ref, _, ref_reward = jax.jit(
    jax.vmap(lambda k, s, n, a, m: multitask.game_step(k, s, n, a, m, params, static))
  )(jax.random.split(jax.random.split(k_step)[0], N_ENVS), state.env.game, kills, action, mults)
  assert not np.asarray(done).any()
  _assert_same(stepped.env.game, ref)
  np.testing.assert_array_equal(np.asarray(reward), np.asarray(ref_reward))
