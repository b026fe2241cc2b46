"""Task proposers: programs that write new task programs from parents (DiCode's evolution step).

Both follow DiCode's "small, incremental evolution" rule (arXiv 2602.08194, Sec. 3; the reference
prompt asks for ONE primary change per child: expand the frontier, adjust scaffolding, or adjust
difficulty):

- `OfflineProposer` rewrites a parent's AST: one multiplier in TASK_PARAMS, one placement count, one
  placement distance, one starting-inventory count, or the achievement set (add the next
  achievement in craftax's order, drop one, or move one to the pre-completed set). Children are
  deterministic given `seed`, pass `sandbox.check_source`, and get a new NAME and a DESCRIPTION
  saying what changed. No network, no key: the whole loop runs offline with it. This mutation
  operator is a reconstruction (the paper mutates with a language model only).
- `LLMProposer` asks a model behind an OpenAI-compatible `/v1/chat/completions` endpoint, using the
  standard library's `urllib` only. The prompt holds a summary of the game's rules, the WorldBuilder
  API (generated from its signatures and docstrings), the sandbox's rules, a seed example, the
  parents' programs and metrics and the agent's success rates on the original game; the program
  is taken from the reply's ```python block. Every request has a deadline; transient failures
  (timeouts, 429, 5xx) are retried with exponential backoff; an unreachable endpoint or an
  authentication failure is a one-line `ConfigError("llm_url", ...)`.
"""

from __future__ import annotations

import ast
import hashlib
import http.client
import inspect
import ipaddress
import json
import os
import random
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Protocol

from jaxlab.core.errors import ConfigError
from jaxlab.rl.dicode import sandbox
from jaxlab.rl.dicode import task as task_lib


class Proposer(Protocol):
  def propose(self, parents: list[dict], context: dict, n: int, seed: int) -> list[str]:
    """Up to `n` new task programs (source text) from `parents` (dicts with at least "source")."""


EXAMPLE = """NAME = "collect_wood_near"
DESCRIPTION = "Three trees within two tiles of the player; collect wood."
RELEVANT_ACHIEVEMENTS = ("COLLECT_WOOD",)
COMPLETED_ACHIEVEMENTS = ()
TASK_PARAMS = dict(needs_depletion=0.5, melee_spawn=0.5)


def generate_world(wb, key):
  k1, k2 = wb.split(key)
  wb = wb.place_randomly_near(k1, "TREE", count=3, distance=2)
  wb = wb.add_mobs_randomly_near(k2, "COW", count=2, distance=6, min_distance=3)
  return wb.set_player_inventory(wood=0)
"""


def _parents_or_seeds(parents: list[dict], context: dict) -> list[dict]:
  if parents:
    return [p for p in parents if isinstance(p.get("source"), str)]
  seeds = context.get("seeds")
  if seeds is None:
    try:
      from jaxlab.rl.dicode import seeds as seeds_lib

      seeds = seeds_lib.load_seed_tasks()
    except ImportError:
      seeds = {"example": EXAMPLE}
  return [{"name": k, "source": v} for k, v in seeds.items()]


# ---- offline: one AST rewrite per child --------------------------------------------------------


def _achievement_order(classic: bool) -> list[str]:
  return list(task_lib.achievement_ids(classic))


def _module_assign(tree: ast.Module, name: str) -> ast.Assign | None:
  for stmt in tree.body:
    if isinstance(stmt, ast.Assign) and any(
      isinstance(t, ast.Name) and t.id == name for t in stmt.targets
    ):
      return stmt
  return None


def _str_tuple(tree: ast.Module, name: str) -> list[str] | None:
  node = _module_assign(tree, name)
  if node is None:
    return []
  value = node.value
  if not isinstance(value, (ast.Tuple, ast.List)):
    return None
  out = [e.value for e in value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
  return out if len(out) == len(value.elts) else None


def _set_module(tree: ast.Module, name: str, value: ast.expr) -> None:
  node = _module_assign(tree, name)
  if node is not None:
    node.value = value
    return
  at = next(i for i, s in enumerate(tree.body) if isinstance(s, ast.FunctionDef))
  tree.body.insert(at, ast.Assign([ast.Name(name, ast.Store())], value, lineno=0))


def _int_keywords(tree: ast.Module, names: Sequence[str] | None, method: str | None = None) -> list:
  """(call, keyword): int-literal keywords `names` (None: any) of calls (to `.method` if given)."""
  out = []
  for node in ast.walk(tree):
    if not isinstance(node, ast.Call):
      continue
    if method and not (isinstance(node.func, ast.Attribute) and node.func.attr == method):
      continue
    for kw in node.keywords:
      if (
        (names is None or kw.arg in names)
        and isinstance(kw.value, ast.Constant)
        and type(kw.value.value) is int
      ):
        out.append((node, kw))
  return out


def _task_params(tree: ast.Module) -> dict[str, float] | None:
  node = _module_assign(tree, "TASK_PARAMS")
  if node is None:
    return {}
  v = node.value
  pairs = []
  if (
    isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "dict" and not v.args
  ):
    pairs = [(kw.arg, kw.value) for kw in v.keywords]
  elif isinstance(v, ast.Dict):
    pairs = [
      (k.value if isinstance(k, ast.Constant) else None, x) for k, x in zip(v.keys, v.values)
    ]
  else:
    return None
  out = {}
  for k, x in pairs:
    if (
      not isinstance(k, str) or not isinstance(x, ast.Constant) or type(x.value) not in (int, float)
    ):
      return None
    out[k] = float(x.value)
  return out


class OfflineProposer:
  """Mutates parents by AST rewriting, one primary change per child; deterministic given `seed`."""

  OPS = ("multiplier", "count", "distance", "inventory", "achievements")

  def __init__(self, classic: bool = False, max_count: int = 16, max_distance: int = 24):
    self.classic = classic
    self.max_count = max_count
    self.max_distance = max_distance

  def propose(self, parents: list[dict], context: dict, n: int, seed: int) -> list[str]:
    pool = _parents_or_seeds(parents, context or {})
    out: list[str] = []
    seen = {p["source"] for p in pool}
    for k in range(n):
      rng = random.Random(f"dicode-offline:{seed}:{k}")
      for _ in range(20):  # some ops do not apply to some parents
        parent = pool[rng.randrange(len(pool))] if pool else None
        child = self.mutate(parent["source"], rng) if parent else None
        if child is not None and child not in seen and not sandbox.check_source(child):
          out.append(child)
          seen.add(child)
          break
    return out

  def mutate(self, source: str, rng: random.Random) -> str | None:
    """One child of `source` (None if the drawn change does not apply)."""
    try:
      tree = ast.parse(source)
    except SyntaxError:
      return None
    op = rng.choice(self.OPS)
    what = getattr(self, f"_{op}")(tree, rng)
    if what is None:
      return None
    self._rename(tree, what)
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"

  def _multiplier(self, tree, rng):
    params = _task_params(tree)
    if params is None:
      return None
    name = rng.choice(sorted(task_lib.MULTIPLIERS))
    default, low, high = task_lib.MULTIPLIERS[name]
    old = params.get(name, default)
    new = old * rng.choice((0.5, 0.75, 1.5, 2.0)) if old else low + 0.25 * (high - low)
    new = min(max(new, low), high)
    new = float(round(new)) if name in task_lib.INTEGER_MULTIPLIERS else round(new, 3)
    if new == old:
      return None
    params[name] = new
    kws = [ast.keyword(k, ast.Constant(v)) for k, v in params.items()]
    _set_module(tree, "TASK_PARAMS", ast.Call(ast.Name("dict", ast.Load()), [], kws))
    return f"{name} {old:g} -> {new:g}"

  def _step_keyword(self, tree, rng, names, low, high, method=None):
    sites = _int_keywords(tree, names, method)
    if not sites:
      return None
    call, kw = rng.choice(sites)
    old = kw.value.value
    new = min(max(old + rng.choice((-2, -1, 1, 2)), low), high)
    if new == old:
      return None
    kw.value = ast.Constant(new)
    given = {k.arg: k.value.value for k in call.keywords if isinstance(k.value, ast.Constant)}
    if not given.get("min_distance", 1) <= given.get("distance", high):
      kw.value = ast.Constant(old)
      return None
    method = call.func.attr if isinstance(call.func, ast.Attribute) else "call"
    return f"{method} {kw.arg} {old} -> {new}"

  def _count(self, tree, rng):
    return self._step_keyword(tree, rng, ("count",), 1, self.max_count)

  def _distance(self, tree, rng):
    return self._step_keyword(tree, rng, ("distance", "min_distance"), 1, self.max_distance)

  def _inventory(self, tree, rng):
    return self._step_keyword(tree, rng, None, 0, 9, "set_player_inventory")

  def _achievements(self, tree, rng):
    relevant = _str_tuple(tree, "RELEVANT_ACHIEVEMENTS")
    completed = _str_tuple(tree, "COMPLETED_ACHIEVEMENTS")
    if not relevant or completed is None:
      return None
    order = _achievement_order(self.classic)
    known = [a for a in relevant if a.upper() in order]
    choice = rng.choice(("expand", "drop", "scaffold"))
    if choice == "expand" and known:
      last = max(order.index(a.upper()) for a in known)
      taken = {a.upper() for a in relevant + completed}
      new = next((a for a in order[last + 1 :] if a not in taken), None)
      if new is None or len(relevant) >= 4:
        return None
      relevant, what = relevant + [new], f"added {new}"
    elif choice in ("drop", "scaffold") and len(relevant) >= 2:
      gone = relevant[rng.randrange(len(relevant))]
      relevant = [a for a in relevant if a != gone]
      if choice == "scaffold":
        completed, what = completed + [gone], f"pre-completed {gone}"
      else:
        what = f"dropped {gone}"
    else:
      return None
    tup = lambda xs: ast.Tuple([ast.Constant(x) for x in xs], ast.Load())  # noqa: E731
    _set_module(tree, "RELEVANT_ACHIEVEMENTS", tup(relevant))
    if completed or _module_assign(tree, "COMPLETED_ACHIEVEMENTS"):
      _set_module(tree, "COMPLETED_ACHIEVEMENTS", tup(completed))
    return what

  def _rename(self, tree: ast.Module, what: str) -> None:
    name_node = _module_assign(tree, "NAME")
    old = name_node.value.value if name_node and isinstance(name_node.value, ast.Constant) else "t"
    base = re.sub(r"_m[0-9a-f]{6}$", "", str(old))[:40]
    digest = hashlib.sha256(ast.unparse(tree).encode()).hexdigest()[:6]
    _set_module(tree, "NAME", ast.Constant(f"{base}_m{digest}"))
    desc_node = _module_assign(tree, "DESCRIPTION")
    desc = desc_node.value.value if desc_node and isinstance(desc_node.value, ast.Constant) else ""
    desc = str(desc).split(" Change:")[0][:300]
    _set_module(tree, "DESCRIPTION", ast.Constant(f"{desc} Change: {what}.".strip()))


# ---- a model behind an OpenAI-compatible endpoint ------------------------------------------------

GAME_RULES = """Craftax (arXiv 2402.16801) is a 2-D, Minecraft-like survival game on 9 floors (0 =
overworld; ladders lead down to the Gnomish Mines, Dungeon, Sewers, Vault, Troll Mines, Fire Realm,
Ice Realm and the Graveyard). The player has health, food, drink, energy and mana; food, drink and
energy deplete over time and health recovers while they are high. The crafting chain is wood ->
crafting table -> wood pickaxe/sword -> stone -> stone pickaxe/sword -> furnace (needs coal) ->
iron tools and armour -> diamonds, sapphires and rubies -> enchantments. Mobs: cows, bats and snails
(food), zombies and skeletons (overworld and dungeon), gnomes, orcs, lizards, kobolds, knights,
archers, trolls, pigmen, deep things, fire/ice elementals and the necromancer. A floor's ladder
down opens after enough monsters on it are killed. The agent is rewarded for EVERY achievement it
unlocks in any task (226 in all, weighted by difficulty); a task's RELEVANT_ACHIEVEMENTS only decide
when its episode succeeds and ends. COMPLETED_ACHIEVEMENTS are granted at the start (no reward)."""

SANDBOX_RULES = """The program is checked before it runs: no imports, classes, while loops, try,
with, global, lambdas with defaults, f-strings, decorators or annotations; no names or attributes
starting with '_'; attributes only on `wb` (the methods below); builtins only: {builtins}. Integer
literals are at most {max_int}. No assignment to attributes; no '%' inside string literals; repeat
a string, list or tuple only by an integer literal; sets only after `in` / `not in` (never iterate,
sort or take min/max of a set); no `hash`, `set`, `frozenset`. generate_world must be jittable
and vmappable over `key`: use `wb.split` for randomness, Python ints for counts, and no Python `if`
on values from `wb`."""

OUTPUT_FORMAT = """Reply with exactly ONE ```python block holding the whole program: module-level
NAME ([a-z0-9_], at most 48 characters), DESCRIPTION, RELEVANT_ACHIEVEMENTS (tuple of achievement
names), optionally COMPLETED_ACHIEVEMENTS and TASK_PARAMS (a dict of multipliers), and
`def generate_world(wb, key):` returning the builder. Make ONE primary change relative to the parent
(a new dependency, more scaffolding, or a difficulty change): small, incremental evolution."""


def api_docs() -> str:
  """The WorldBuilder API as the model sees it: one line per public name, from the code itself."""
  from jaxlab.rl.dicode import world

  lines = []
  for name in sorted(task_lib.ALLOWED_ATTRIBUTES):
    member = inspect.getattr_static(world.WorldBuilder, name, None)
    if member is None:
      continue
    if isinstance(member, property):
      doc = inspect.getdoc(member) or ""
      lines.append(f"wb.{name}  (read-only)  {doc.splitlines()[0] if doc else ''}".rstrip())
      continue
    sig = str(inspect.signature(member)).replace("(self, ", "(").replace("(self)", "()")
    doc = " ".join((inspect.getdoc(member) or "").split())
    lines.append(f"wb.{name}{sig}  {doc}".rstrip())
  return "\n".join(lines)


def _names_help() -> str:
  from craftax.craftax.constants import BlockType

  from jaxlab.rl.dicode import world

  blocks = [b.name for b in BlockType if b.name not in ("INVALID", "OUT_OF_BOUNDS")]
  mobs = sorted(getattr(world, "MOBS", None) or getattr(world, "_MOBS", {}))
  params = ", ".join(f"{k} (default {d:g}, {lo:g}..{hi:g})" for k, (d, lo, hi) in
                     task_lib.MULTIPLIERS.items())  # fmt: skip
  return (
    f"Blocks: {', '.join(blocks)}\nMobs: {', '.join(mobs)}\n"
    f"Achievements: {', '.join(task_lib.achievement_ids(False))}\nTASK_PARAMS: {params}"
  )


def _metrics_text(parent: dict) -> str:
  keys = [k for k in parent if k not in ("source", "name", "dir", "scores", "info")]
  shown = {k: parent[k] for k in keys if isinstance(parent[k], (int, float, str, type(None)))}
  return json.dumps(shown, sort_keys=True, default=str)


def build_messages(parent: dict, context: dict, example: str) -> list[dict]:
  """The chat messages for one child of `parent`."""
  system = "\n\n".join(
    [
      "You design training tasks for a reinforcement-learning agent playing Craftax. Each task "
      "is a small Python program; the goal is better play on the ORIGINAL game.",
      "GAME RULES\n" + GAME_RULES,
      "API: `wb` is a WorldBuilder; every method returns a NEW builder.\n" + api_docs(),
      _names_help(),
      "RULES\n"
      + SANDBOX_RULES.format(
        builtins=", ".join(sorted(task_lib.SAFE_BUILTINS)), max_int=sandbox.MAX_INT
      ),
      "EXAMPLE\n```python\n" + example.strip() + "\n```",
      "OUTPUT\n" + OUTPUT_FORMAT,
    ]
  )
  rates = context.get("original_success") or {}
  weakest = sorted(rates.items(), key=lambda kv: kv[1])[:20]
  user = [
    f"Parent task {parent.get('name', '')!r} and its metrics (score = learnability p(1-p)):",
    _metrics_text(parent),
    "```python\n" + parent["source"].strip() + "\n```",
  ]
  if weakest:
    user.append("Success rates on the ORIGINAL game (weakest first): " + json.dumps(dict(weakest)))
  user.append("Write the child task.")
  return [{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(user)}]


_FENCE = re.compile(r"```[ \t]*(?:python|py)?[ \t]*\n(.*?)```", re.S | re.I)


def extract_program(text: str) -> str | None:
  """The program in a reply: the last ```python block with generate_world, else the last block."""
  text = re.sub(r"<think>.*?</think>", "", text or "", flags=re.S)
  blocks = _FENCE.findall(text)
  best = [b for b in blocks if "def generate_world" in b] or blocks
  if best:
    return best[-1].strip() + "\n"
  return text.strip() + "\n" if text.lstrip().startswith("NAME") else None


_URL = re.compile(r"https?://(\[[0-9a-fA-F:.]+\]|[^/:\s\[\]]+)(:[0-9]{1,5})?(/|$)")
_URL_EXAMPLE = "such as http://localhost:8000/v1"


def check_llm_url(url) -> str:
  """`url` if it is an http(s) URL with a host and, if any, a port in 1-65535; else
  ConfigError("llm_url", ...) with one line (never urllib's ValueError, e.g. for `http://[::1/v1`).
  """
  if not url:
    raise ConfigError("llm_url", "is required with --proposer=llm (e.g. http://localhost:8000/v1)")
  if not isinstance(url, str):
    raise ConfigError("llm_url", f"must be an http(s) URL {_URL_EXAMPLE}, got {url!r}")
  try:
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname
  except ValueError as e:
    raise ConfigError("llm_url", f"is not a valid URL ({e}) {_URL_EXAMPLE}, got {url!r}") from None
  if parts.scheme not in ("http", "https") or not parts.netloc:
    raise ConfigError("llm_url", f"must be an http(s) URL {_URL_EXAMPLE}, got {url!r}")
  try:
    port = parts.port
    if "[" in parts.netloc:  # older Pythons let a malformed bracketed host through
      ipaddress.IPv6Address(host or "")
  except ValueError:
    port = -1
  if not host or port in (-1, 0):
    raise ConfigError(
      "llm_url", f"needs a host and a numeric port (1-65535) {_URL_EXAMPLE}, got {url!r}"
    )
  return url


class LLMProposer:
  """A model behind an OpenAI-compatible endpoint (`url` is the base, e.g. http://host:8000/v1).

  `api_key` defaults to $DICODE_API_KEY, then $OPENAI_API_KEY (none: no Authorization header, as
  for a local server). Each request gives up after `timeout_s`; failures are retried `retries`
  times with exponential backoff from `backoff_s` (capped at 30 s).
  """

  def __init__(
    self,
    url: str,
    model: str,
    api_key: str | None = None,
    *,
    timeout_s: float,
    retries: int,
    backoff_s: float = 2.0,
    temperature: float = 0.6,
    top_p: float = 0.95,
    max_tokens: int = 8192,
  ):
    check_llm_url(url)
    if not _URL.match(url):
      raise ConfigError(
        "llm_url",
        f"must be an http(s) URL with a numeric port such as http://localhost:8000/v1, got {url!r}",
      )
    if not isinstance(model, str) or not model.strip():
      raise ConfigError("llm_model", "must name the model the endpoint serves")
    if timeout_s is None or retries is None:  # DiCode passes config.llm_timeout_s / llm_retries
      raise ConfigError("llm_url", "the request timeout_s and retries must be given")
    if not (timeout_s > 0 and retries >= 0 and backoff_s >= 0):
      raise ConfigError("llm_url", "timeout_s must be > 0, retries and backoff_s >= 0")
    url = url.rstrip("/")
    self.base = url[: -len("/chat/completions")] if url.endswith("/chat/completions") else url
    self.model = model
    self.api_key = api_key or os.environ.get("DICODE_API_KEY") or os.environ.get("OPENAI_API_KEY")
    self.timeout_s, self.retries, self.backoff_s = float(timeout_s), int(retries), float(backoff_s)
    self.sampling = {"temperature": temperature, "top_p": top_p, "max_tokens": max_tokens}
    self.example = EXAMPLE

  # ---- HTTP ------------------------------------------------------------------------------------
  def _once(self, path: str, body: dict | None, timeout_s: float) -> dict:
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if self.api_key:
      headers["Authorization"] = f"Bearer {self.api_key}"
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(self.base + path, data=data, headers=headers)
    deadline = time.monotonic() + timeout_s
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
      chunks, size = [], 0
      while True:  # a server that trickles bytes still meets the deadline
        left = deadline - time.monotonic()
        if left <= 0:
          raise TimeoutError(f"no complete reply within {timeout_s:g}s")
        chunk = resp.read1(1 << 16)  # one socket read (each bounded by the socket timeout)
        if not chunk:
          break
        chunks.append(chunk)
        size += len(chunk)
        if size > 16 << 20:
          raise ValueError("reply larger than 16 MiB")
    return json.loads(b"".join(chunks).decode("utf-8"))

  def request(self, path: str, body: dict | None = None, retries: int | None = None) -> dict:
    """One call with retries; ConfigError("llm_url", ...) when it cannot succeed."""
    retries = self.retries if retries is None else retries
    why = ""
    for attempt in range(retries + 1):
      wait = min(self.backoff_s * 2**attempt, 30.0)
      try:
        return self._once(path, body, self.timeout_s)
      except urllib.error.HTTPError as e:
        try:
          detail = " ".join(e.read(300).decode("utf-8", "replace").split())[:200]
        except OSError:
          detail = ""
        why = f"HTTP {e.code} {e.reason}" + (f": {detail}" if detail else "")
        if e.code in (401, 403):
          raise ConfigError(
            "llm_url", f"{self.base}{path} refused the API key ({why}); set --llm_api_key or "
            "DICODE_API_KEY"
          ) from None  # fmt: skip
        if e.code not in (408, 409, 425, 429) and e.code < 500:
          raise ConfigError("llm_url", f"{self.base}{path}: {why}") from None
        retry_after = e.headers.get("Retry-After") if e.headers else None
        if retry_after and retry_after.isdigit():
          wait = min(float(retry_after), 30.0)
      except (
        urllib.error.URLError,
        OSError,
        TimeoutError,
        ValueError,
        http.client.HTTPException,
      ) as e:
        reason = getattr(e, "reason", e)
        why = f"{type(reason).__name__}: {reason}" if str(reason) else type(reason).__name__
      if attempt < retries:
        time.sleep(wait)
    raise ConfigError("llm_url", f"cannot reach {self.base}{path} ({why}; {retries + 1} attempts)")

  def check(self) -> None:
    """Fails fast (ConfigError) when the endpoint is unreachable or refuses the key."""
    url = self.base + "/models"
    try:
      reply = self._once("/models", None, min(self.timeout_s, 10.0))
    except urllib.error.HTTPError as e:
      if e.code in (401, 403):
        raise ConfigError("llm_url", f"{self.base} refused the API key (HTTP {e.code})") from None
      raise ConfigError(
        "llm_url",
        f"{url} answered HTTP {e.code} {e.reason}: not an OpenAI-compatible endpoint (the base "
        "URL usually ends in /v1)",
      ) from None
    except (urllib.error.URLError, OSError, TimeoutError, http.client.HTTPException) as e:
      reason = getattr(e, "reason", e)
      raise ConfigError("llm_url", f"cannot reach {self.base} ({reason})") from None
    except ValueError:
      reply = None
    if not isinstance(reply, dict):  # an OpenAI-compatible server lists its models as JSON
      raise ConfigError(
        "llm_url", f"{url} did not answer a JSON model list: not an OpenAI-compatible endpoint"
      )

  # ---- proposing -------------------------------------------------------------------------------
  def complete(self, messages: list[dict], seed: int) -> str:
    body = {"model": self.model, "messages": messages, "seed": seed, **self.sampling}
    reply = self.request("/chat/completions", body)
    try:
      return reply["choices"][0]["message"]["content"] or ""
    except (KeyError, IndexError, TypeError):
      raise ConfigError("llm_url", f"{self.base}: not an OpenAI chat completion reply") from None

  def propose(self, parents: list[dict], context: dict, n: int, seed: int) -> list[str]:
    context = context or {}
    pool = _parents_or_seeds(parents, context)
    example = context.get("example") or self.example
    out = []
    for k in range(n):
      parent = pool[k % len(pool)] if pool else {"name": "example", "source": example}
      program = extract_program(self.complete(build_messages(parent, context, example), seed + k))
      if program is not None:
        out.append(program)
    return out


def make_proposer(
  kind: str,
  *,
  llm_url: str | None = None,
  llm_model: str | None = None,
  llm_api_key: str | None = None,
  llm_timeout_s: float | None = None,
  llm_retries: int | None = None,
  classic: bool = False,
  check: bool = True,
) -> Proposer:
  """The proposer for `--proposer=offline|llm`; an LLM endpoint is contacted once when `check`."""
  if kind == "offline":
    return OfflineProposer(classic=classic)
  if kind == "llm":
    if not llm_url:
      raise ConfigError("llm_url", "required with --proposer=llm (e.g. http://localhost:8000/v1)")
    proposer = LLMProposer(
      llm_url, llm_model or "", llm_api_key, timeout_s=llm_timeout_s, retries=llm_retries
    )
    if check:
      proposer.check()
    return proposer
  raise ConfigError("proposer", f"got {kind!r}; allowed: offline, llm")
