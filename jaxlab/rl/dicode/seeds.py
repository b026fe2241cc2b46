"""Seed task programs: collecting, crafting, combat, survival, and the original game.

They follow the reference implementation's seed tasks (arXiv 2602.08194; the public code's
`tasks/seed_tasks/{collecting,crafting,combat,survive,original}.py`) translated to the program
format of `task.py`: the same objectives, scaffolding and multipliers. `original` leaves the world
unchanged and lists every achievement as relevant, so it is the unmodified game (success would
need all of them; the episode ends on craftax's own conditions).
"""

from __future__ import annotations

COLLECTING = """
NAME = "collect_coal"
DESCRIPTION = (
  "Collect coal. The player starts with a wooden pickaxe and sword; 5 coal blocks lie 4-8 tiles "
  "away and 3 cows 4-8 tiles away. Needs deplete at half speed; few hostile mobs."
)
RELEVANT_ACHIEVEMENTS = ("COLLECT_COAL",)
COMPLETED_ACHIEVEMENTS = ("MAKE_WOOD_PICKAXE", "MAKE_WOOD_SWORD")
TASK_PARAMS = dict(needs_depletion=0.5, passive_spawn=1.0, melee_spawn=0.2, ranged_spawn=0.2)


def generate_world(wb, key):
  k_cows, k_coal = wb.split(key)
  wb = wb.set_player_inventory(pickaxe=1, sword=1)
  wb = wb.add_mobs_randomly_near(k_cows, "COW", count=3, distance=8, min_distance=4)
  wb = wb.place_randomly_near(
    k_coal, "COAL", count=5, distance=8, min_distance=4, on=("GRASS", "STONE")
  )
  return wb
"""

CRAFTING = """
NAME = "craft_wood_pickaxe"
DESCRIPTION = (
  "Collect wood, place a table and make a wooden pickaxe. The player starts with a wooden sword; "
  "3 cows 4-8 tiles away. Needs deplete at half speed; hostile mobs are rare."
)
RELEVANT_ACHIEVEMENTS = ("COLLECT_WOOD", "PLACE_TABLE", "MAKE_WOOD_PICKAXE")
COMPLETED_ACHIEVEMENTS = ("MAKE_WOOD_SWORD",)
TASK_PARAMS = dict(needs_depletion=0.5, passive_spawn=1.0, melee_spawn=0.1, ranged_spawn=0.05)


def generate_world(wb, key):
  wb = wb.set_player_inventory(sword=1)
  wb = wb.add_mobs_randomly_near(key, "COW", count=3, distance=8, min_distance=4)
  return wb
"""

COMBAT = """
NAME = "defeat_zombie"
DESCRIPTION = (
  "Defeat a zombie. The player starts with a wooden sword; one zombie and 3 cows are 4-8 tiles "
  "away. Health recovers 5 times faster; ranged mobs are rare."
)
RELEVANT_ACHIEVEMENTS = ("DEFEAT_ZOMBIE",)
COMPLETED_ACHIEVEMENTS = ("MAKE_WOOD_SWORD",)
TASK_PARAMS = dict(
  needs_depletion=1.0, passive_spawn=1.0, melee_spawn=1.0, ranged_spawn=0.2, health_recover=5.0
)


def generate_world(wb, key):
  k_zombie, k_cows = wb.split(key)
  wb = wb.set_player_inventory(sword=1)
  wb = wb.add_mobs_randomly_near(k_zombie, "ZOMBIE", count=1, distance=8, min_distance=4)
  wb = wb.add_mobs_randomly_near(k_cows, "COW", count=3, distance=8, min_distance=4)
  return wb
"""

SURVIVAL = """
NAME = "survive_needs"
DESCRIPTION = (
  "Eat a cow, drink water and sleep until waking up. 3 cows are 4-8 tiles away; hostile mobs "
  "are very rare; needs deplete at the default rate."
)
RELEVANT_ACHIEVEMENTS = ("EAT_COW", "COLLECT_DRINK", "WAKE_UP")
TASK_PARAMS = dict(needs_depletion=1.0, passive_spawn=1.0, melee_spawn=0.05, ranged_spawn=0.05)


def generate_world(wb, key):
  return wb.add_mobs_randomly_near(key, "COW", count=3, distance=8, min_distance=4)
"""


def _original() -> str:
  from jaxlab.rl.dicode.task import achievement_ids

  names = ",\n".join(f'  "{name}"' for name in achievement_ids())
  return f"""
NAME = "original"
DESCRIPTION = "The original Craftax game: unmodified world and mechanics, every achievement counts."
RELEVANT_ACHIEVEMENTS = (
{names},
)


def generate_world(wb, key):
  return wb
"""


def load_seed_tasks() -> dict[str, str]:
  """Seed task name -> program source (collecting, crafting, combat, survival, original)."""
  return {
    "collect_coal": COLLECTING,
    "craft_wood_pickaxe": CRAFTING,
    "defeat_zombie": COMBAT,
    "survive_needs": SURVIVAL,
    "original": _original(),
  }
