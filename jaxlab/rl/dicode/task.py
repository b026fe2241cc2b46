"""DiCode task programs: the 12 mechanics multipliers, compiling a program, validating its worlds.

A task program (Mitsides, Faldor, Cully, "Dreaming in Code", arXiv 2602.08194, Sec. 3) is Python
source text with no imports that defines, at module level:

  NAME = "collect_wood_near"                 # required: [a-z0-9_], 1..48 characters
  DESCRIPTION = "Trees nearby; collect wood."  # optional
  RELEVANT_ACHIEVEMENTS = ("COLLECT_WOOD",)  # required: success = all of these unlocked
  COMPLETED_ACHIEVEMENTS = ()                # optional: pre-granted at reset (earn no reward)
  TASK_PARAMS = dict(needs_depletion=0.5)    # optional: any subset of MULTIPLIERS

  def generate_world(wb, key):               # required: jittable and vmappable over key
    k1, k2 = wb.split(key)
    return wb.place_randomly_near(k1, "TREE", count=3, distance=2)

`generate_world` receives a `world.WorldBuilder` over a freshly generated Craftax world and returns
a builder (or the built `EnvState`). Achievement names are craftax's `Achievement` enum names.
The reference implementation writes a class with `get_task_params`/`generate_world` methods; this
module-level form carries the same information and is simpler to check statically. The source is
untrusted: the sandbox (`sandbox.check_source`) checks its AST before `compile_task` executes it
with only `SAFE_BUILTINS` available, and `check_task` runs it under `jit(vmap)` and validates the
worlds. See docs/dicode.md ("Task parameters") for how each multiplier acts on the game.
"""

from __future__ import annotations

import ast
import dataclasses
import math
import operator
import re
import time
from collections.abc import Callable

import jax
import numpy as np

# name -> (default, low, high). Values are clamped into [low, high]; the two counts are rounded.
MULTIPLIERS: dict[str, tuple[float, float, float]] = {
  "passive_spawn": (1.0, 0.0, 2.0),
  "melee_spawn": (1.0, 0.0, 2.0),
  "ranged_spawn": (1.0, 0.0, 2.0),
  "mob_health": (1.0, 0.1, 5.0),
  "mob_damage": (1.0, 0.0, 5.0),
  "melee_trigger_distance": (10.0, 1.0, 48.0),
  "monsters_killed_to_clear_level": (8.0, 0.0, 64.0),
  "needs_depletion": (1.0, 0.0, 5.0),
  "health_recover": (1.0, 0.01, 10.0),
  "health_loss": (1.0, 0.0, 5.0),
  "mana_recover": (1.0, 0.01, 10.0),
  "growing_plants_age": (600.0, 2.0, 5000.0),
}
INTEGER_MULTIPLIERS = frozenset(
  {"melee_trigger_distance", "monsters_killed_to_clear_level", "growing_plants_age"}
)
REQUIRED_NAMES = ("NAME", "RELEVANT_ACHIEVEMENTS", "generate_world")
OPTIONAL_NAMES = ("DESCRIPTION", "COMPLETED_ACHIEVEMENTS", "TASK_PARAMS")
MAX_DESCRIPTION = 2000
_NAME_RE = re.compile(r"[a-z0-9_]{1,48}")

SAFE_BUILTINS: dict[str, object] = {
  f.__name__: f
  for f in (
    range,
    len,
    min,
    max,
    abs,
    int,
    float,
    bool,
    tuple,
    list,
    dict,
    enumerate,
    zip,
    round,
    sum,
    sorted,
    reversed,
    any,
    all,
  )
}
SAFE_BUILTINS.update({"True": True, "False": False, "None": None})


class TaskError(ValueError):
  """Why a task program was rejected (one line)."""


# ---- sizes the static check cannot see: sequences built through names, bounded at run time ----

MAX_SEQUENCE = 100_000  # items of one str/bytes/list/tuple built by `+`, `*` or `sum`
_SEQUENCES = (str, bytes, list, tuple)


def _bounded(n: int, op: str) -> None:
  if n > MAX_SEQUENCE:
    raise TaskError(f"`{op}` builds a sequence of {n} items (limit {MAX_SEQUENCE})")


def _count(x) -> int | None:
  """`x` as a repetition count, or None when `seq * x` is not a repetition (e.g. an array)."""
  if isinstance(x, _SEQUENCES):
    return None
  try:
    return operator.index(x)
  except TypeError:
    return None


def _checked(op: str, a, b) -> None:
  if op == "*":
    for seq, times in ((a, b), (b, a)):
      n = _count(times) if isinstance(seq, _SEQUENCES) else None
      if n is not None:
        _bounded(len(seq) * n, op)
  elif isinstance(a, _SEQUENCES) and isinstance(b, _SEQUENCES):
    _bounded(len(a) + len(b), op)


def _mul(a, b):
  _checked("*", a, b)
  return a * b


def _add(a, b):
  _checked("+", a, b)
  return a + b


def _imul(a, b):
  _checked("*", a, b)
  return operator.imul(a, b)


def _iadd(a, b):
  _checked("+", a, b)
  return operator.iadd(a, b)


def _sum(iterable, start=0):
  if isinstance(start, _SEQUENCES):  # sum(lists, []) would concatenate without `+`
    raise TaskError("sum() adds numbers only, not lists or tuples")
  return sum(iterable, start)


SAFE_BUILTINS["sum"] = _sum


_GUARDS = {"__dicode_mul__": _mul, "__dicode_add__": _add}
_GUARDS |= {"__dicode_imul__": _imul, "__dicode_iadd__": _iadd}


class _Guard(ast.NodeTransformer):
  """Routes every `+`/`*` (and `+=`/`*=` on a name) through `_GUARDS`. The static check rejects
  names starting with `__`, so a program can neither call nor replace them."""

  _BIN = {ast.Mult: "__dicode_mul__", ast.Add: "__dicode_add__"}
  _AUG = {ast.Mult: "__dicode_imul__", ast.Add: "__dicode_iadd__"}

  def visit_BinOp(self, node):
    self.generic_visit(node)
    name = self._BIN.get(type(node.op))
    return node if name is None else self._call(node, name, node.left, node.right)

  def visit_AugAssign(self, node):
    self.generic_visit(node)
    name = self._AUG.get(type(node.op))
    if name is None or not isinstance(node.target, ast.Name):
      return node
    load = ast.copy_location(ast.Name(node.target.id, ast.Load()), node.target)
    call = self._call(node, name, load, node.value)
    return ast.copy_location(ast.Assign([node.target], call), node)

  @staticmethod
  def _call(node, name: str, a, b):
    fn = ast.copy_location(ast.Name(name, ast.Load()), node)
    return ast.copy_location(ast.Call(fn, [a, b], []), node)


def _guarded_code(source: str):
  tree = _Guard().visit(ast.parse(source, "<task>", "exec"))
  return compile(ast.fix_missing_locations(tree), "<task>", "exec")


# Every attribute a program may touch: the WorldBuilder's public methods and read-only properties
# (tests check this equals `world.WorldBuilder`'s public names).
ALLOWED_ATTRIBUTES: frozenset[str] = frozenset(
  {
    "split",
    "set_starting_floor",
    "set_player_inventory",
    "set_player_stats",
    "set_weapon_enchantments",
    "set_armour_enchantments",
    "set_learned_spells",
    "set_monsters_killed",
    "place_block",
    "fill_area",
    "add_mob",
    "add_mobs_randomly_near",
    "place_randomly",
    "place_randomly_near",
    "place_adjacent_to_existing",
    "build",
    "player_position",
    "player_level",
    "map_size",
    "num_levels",
  }
)


def clamp_task_params(params: dict) -> dict:
  """All 12 multipliers: the given ones clamped to their safe range, the rest at their defaults.

  Unknown names and non-finite or non-numeric values are a TaskError.
  """
  if not isinstance(params, dict):
    raise TaskError(f"TASK_PARAMS must be a dict, got {type(params).__name__}")
  out = {name: spec[0] for name, spec in MULTIPLIERS.items()}
  for name, value in params.items():
    if name not in MULTIPLIERS:
      raise TaskError(f"unknown task parameter {name!r}; allowed: {', '.join(sorted(MULTIPLIERS))}")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
      raise TaskError(f"task parameter {name!r} must be a number, got {value!r}")
    if not math.isfinite(value):
      raise TaskError(f"task parameter {name!r} must be finite, got {value!r}")
    _, low, high = MULTIPLIERS[name]
    value = min(max(float(value), low), high)
    out[name] = float(round(value)) if name in INTEGER_MULTIPLIERS else value
  return out


def achievement_ids(classic: bool = False) -> dict[str, int]:
  """Upper-case achievement name -> index in craftax's achievement vector."""
  from jaxlab.envs import craftax

  return {name.upper(): i for i, name in enumerate(craftax.achievement_names(classic))}


_ALIASES = {"DEFEAT_ORC_SOLDIER": "DEFEAT_ORC_SOLIDER"}  # craftax's spelling is "SOLIDER"


def resolve_achievements(names, field: str, classic: bool = False) -> tuple[str, ...]:
  """Validated, canonical upper-case achievement names (TaskError on unknown or repeated names)."""
  if isinstance(names, str) or not isinstance(names, (tuple, list)):
    raise TaskError(f"{field} must be a tuple of achievement names, got {names!r}")
  known = achievement_ids(classic)
  out = []
  for name in names:
    if not isinstance(name, str):
      raise TaskError(f"{field} must hold strings, got {name!r}")
    key = _ALIASES.get(name.upper(), name.upper())
    if key not in known:
      raise TaskError(f"{field}: unknown achievement {name!r}")
    if key in out:
      raise TaskError(f"{field}: achievement {name!r} is listed twice")
    out.append(key)
  return tuple(out)


@dataclasses.dataclass(frozen=True, eq=False)
class Task:
  """A compiled task program (see module docstring). `params` holds all 12 clamped multipliers."""

  name: str
  description: str
  source: str
  params: dict
  relevant: tuple[str, ...]
  completed: tuple[str, ...]
  generate_world: Callable
  classic: bool = False


def _read(namespace: dict, name: str, default=None):
  return namespace.get(name, default)


def compile_task(source: str, *, classic: bool = False) -> Task:
  """Executes an (already AST-checked) program with only SAFE_BUILTINS; validates its names."""
  if not isinstance(source, str):
    raise TaskError("the task program must be a string")
  namespace: dict = {"__builtins__": dict(SAFE_BUILTINS), **_GUARDS}
  try:
    code = _guarded_code(source)
    exec(code, namespace)  # noqa: S102 -- checked by the sandbox before it gets here
  except SyntaxError as e:
    raise TaskError(f"syntax error on line {e.lineno}: {e.msg}") from None
  except Exception as e:  # any failure of untrusted code is a rejection reason
    raise TaskError(f"executing the program failed: {type(e).__name__}: {e}") from None
  missing = [n for n in REQUIRED_NAMES if n not in namespace]
  if missing:
    raise TaskError(f"the program does not define {', '.join(missing)}")
  name = namespace["NAME"]
  if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
    raise TaskError(f"NAME must match [a-z0-9_]{{1,48}}, got {name!r}")
  description = _read(namespace, "DESCRIPTION", "")
  if not isinstance(description, str) or len(description) > MAX_DESCRIPTION:
    raise TaskError(f"DESCRIPTION must be a string of at most {MAX_DESCRIPTION} characters")
  relevant = resolve_achievements(
    namespace["RELEVANT_ACHIEVEMENTS"], "RELEVANT_ACHIEVEMENTS", classic
  )
  if not relevant:
    raise TaskError("RELEVANT_ACHIEVEMENTS must name at least one achievement")
  completed = resolve_achievements(
    _read(namespace, "COMPLETED_ACHIEVEMENTS", ()), "COMPLETED_ACHIEVEMENTS", classic
  )
  both = sorted(set(relevant) & set(completed))
  if both:
    raise TaskError(f"achievements both relevant and pre-completed: {', '.join(both)}")
  params = clamp_task_params(_read(namespace, "TASK_PARAMS", {}))
  fn = namespace["generate_world"]
  if not callable(fn) or getattr(fn, "__code__", None) is None or fn.__code__.co_argcount != 2:
    raise TaskError("generate_world must be a function of exactly two arguments (wb, key)")
  return Task(name, description, source, params, relevant, completed, fn, classic)


def check_task(task: Task, key, num_worlds: int = 4, classic: bool = False, base=None) -> dict:
  """Builds `num_worlds` worlds under `jit(vmap)` and validates them; TaskError with the reason.

  Checks: the state's structure, shapes and dtypes equal the base game's; floats are finite; block,
  item and mob ids are in range; the player stands on a walkable, mob-free tile inside the map;
  inventory and intrinsics are within the game's bounds; no relevant achievement is already done.
  Returns a small info dict (name, worlds, seconds to build). `base`: a batch of `num_worlds`
  starting states to build on instead of craftax's generated worlds (tests use small hand-made
  worlds, since compiling craftax's world generator takes tens of seconds on a CPU).
  """
  from jaxlab.rl.dicode import world

  if classic or task.classic:
    raise TaskError("Craftax-Classic task programs are not supported; use the full game")
  if not isinstance(num_worlds, int) or num_worlds < 1:
    raise TaskError(f"num_worlds must be a positive integer, got {num_worlds!r}")
  k_base, k_task = jax.random.split(key)
  if base is None:
    base = world.base_worlds(jax.random.split(k_base, num_worlds))
  start = time.perf_counter()
  try:
    build = jax.jit(jax.vmap(lambda b, k: world.apply_task(task, b, k)))
    states = jax.device_get(build(base, jax.random.split(k_task, num_worlds)))
  except TaskError:
    raise
  except Exception as e:  # tracing runs the untrusted program
    msg = " ".join(str(e).split())[:300]
    raise TaskError(f"generate_world failed under jit(vmap): {type(e).__name__}: {msg}") from None
  seconds = time.perf_counter() - start
  world.validate(states, task.relevant, num_worlds)
  return {
    "name": task.name,
    "num_worlds": num_worlds,
    "build_seconds": round(seconds, 3),
    "relevant": list(task.relevant),
    "completed": list(task.completed),
    "player_level": np.asarray(states.player_level).tolist(),
  }
