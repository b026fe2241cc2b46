"""Sandbox for model-written task programs: a static allow-list check, then a locked-down process.

Task programs (see `task.py`) are untrusted text, whoever wrote them (a language model or a
mutation). Two layers stand between such a program and the training process:

1. `check_source` parses the program and walks its AST against an ALLOW-list (anything not listed
   is rejected with a one-line reason). Module level holds only assignments, function definitions
   and a docstring. Not allowed: imports, classes, `global`/`nonlocal`, `try` (it could swallow the
   sandbox's time and memory limits), `with`, `raise`, `yield`, `await`, f-strings and
   `%`-formatting (format specs walk attributes or allocate), starred arguments and `**kwargs`
   (they hide what is passed), default argument values, decorators and annotations (code run at
   definition time), and `while` loops: a `while` loop's trip count cannot be bounded statically,
   and every loop a world generator needs is a `for` over a bounded `range`. No name or attribute
   starts with `__`; attributes are only `task.ALLOWED_ATTRIBUTES` (the WorldBuilder's public
   names); free names only `task.SAFE_BUILTINS` or names the program binds, never
   exec/eval/compile/getattr/open/vars/hash/... (`FORBIDDEN_NAMES`); attributes are never stored
   to or deleted (`wb.split = ...` would replace the builder's methods). Source size, AST node
   count, nesting depth, integer and string literals and constant products (`"a" * 10**9`,
   `10**9`, `1 << 40`) are bounded. Computed sizes: no string literal but a docstring holds `%`,
   so no string value can, and `%`-formatting never happens; a sequence literal, comprehension or
   list/tuple/sorted call is repeated only by an integer literal (`"a" * N * N` is rejected);
   `x[i] += ...` is rejected; what names carry (`S * N * N`) `task.compile_task` bounds at run
   time (`task.MAX_SEQUENCE`). Behaviour may not differ between processes: sets appear only
   after `in`/`not in` (their iteration order follows the per-process string hash), and
   set/frozenset/hash/id are not available; the worker also runs with PYTHONHASHSEED=0.
2. `validate` runs the programs that passed in ONE fresh interpreter
   (`python -m jaxlab.rl.dicode.sandbox_worker`) in its own process group, with a scrubbed
   environment built from an allow-list (no API keys, tokens or credentials: PATH, locale and
   JAX/XLA settings; HOME and the working directory are an empty temporary directory), on the CPU,
   under rlimits it sets before importing jax: address space (`memory_mb`), CPU seconds, processes
   and threads (against fork bombs), file size 0, few open files, no core dumps. When the parent
   is root, the worker drops to user `nobody` once its imports are done: the kernel never applies
   RLIMIT_NPROC to root (and programs have no way to fork anyway: no imports, no `os`). Inside the
   worker each program gets a CPU-time limit (SIGPROF, raised as a BaseException so no
   `except Exception` swallows it; CPU time, so a loaded machine does not reject good programs),
   then `task.compile_task` and `task.check_task` (traces under `jit(vmap)`, validates the
   worlds). A loop inside native code never returns to Python to see the signal: RLIMIT_CPU kills
   the worker a little later, and the parent's wall-clock deadline per program kills the whole
   process group as a last resort.

`load` compiles an admitted program in the calling (training) process, under a CPU-time limit
(SIGPROF in the main thread) and an address-space limit (RLIMIT_AS's soft limit lowered for the
duration of the load), so a program that behaves differently there still cannot hang it.

`validate` never raises for a bad program and never hangs: every program comes back as a `Verdict`
with a one-line reason. A worker that dies (memory, a native crash) marks the program it was
checking rejected; the rest are retried once in a fresh worker and rejected if that one dies too.
A program killed for time is rejected and the rest go on in a fresh worker.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import json
import math
import os
import pathlib
import queue
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence

from jaxlab.rl.dicode import sandbox_worker
from jaxlab.rl.dicode import task as task_lib

MAX_SOURCE_CHARS = 20_000
MAX_NODES = 4_000
MAX_DEPTH = 40  # AST nesting (module -> def -> for -> if -> call -> ... -> name)
MAX_INT = 100_000  # coordinates, counts and inventory are far smaller; this bounds range(...)
MAX_STR = 2_000  # characters of one string/bytes literal (DESCRIPTION is the longest)
MAX_POW_EXPONENT = 8

FORBIDDEN_NAMES = frozenset(
  {
    "exec", "eval", "compile", "getattr", "setattr", "delattr", "hasattr", "globals", "locals",
    "vars", "dir", "open", "input", "breakpoint", "help", "exit", "quit", "__import__", "type",
    "object", "super", "memoryview", "bytearray", "classmethod", "staticmethod", "property", "id",
    "print", "format", "repr", "ascii", "chr", "ord", "iter", "next", "callable", "isinstance",
    "issubclass", "hash", "set", "frozenset",
  }
)  # fmt: skip
# Never allowed as attributes, even if a future WorldBuilder named one of them: `format` walks
# attributes through its format string, the others reach frames, code objects and classes.
_NEVER_ATTRIBUTES = frozenset(
  {"format", "format_map", "mro", "gi_frame", "gi_code", "f_globals", "f_locals", "f_back",
   "f_builtins", "tb_frame", "cr_frame", "ag_frame", "func_globals", "im_func"}
)  # fmt: skip

_EXPR_NODES = (
  ast.BoolOp, ast.BinOp, ast.UnaryOp, ast.IfExp, ast.Dict, ast.Set, ast.ListComp, ast.SetComp,
  ast.DictComp, ast.GeneratorExp, ast.Compare, ast.Call, ast.Constant, ast.Attribute,
  ast.Subscript, ast.Name, ast.List, ast.Tuple, ast.Slice, ast.Lambda,
)  # fmt: skip
_STMT_NODES = (
  ast.FunctionDef, ast.Assign, ast.AugAssign, ast.Return, ast.If, ast.For, ast.Expr, ast.Pass,
  ast.Break, ast.Continue,
)  # fmt: skip
_OTHER_NODES = (
  ast.Module, ast.keyword, ast.comprehension, ast.arguments, ast.arg, ast.expr_context,
  ast.boolop, ast.operator, ast.unaryop, ast.cmpop,
)  # fmt: skip
_ALLOWED_NODES = _EXPR_NODES + _STMT_NODES + _OTHER_NODES
_WHY = {  # node type -> why it is rejected (the reason a model sees)
  ast.Import: "imports are not allowed (everything comes in through `wb`)",
  ast.ImportFrom: "imports are not allowed (everything comes in through `wb`)",
  ast.ClassDef: "class definitions are not allowed",
  ast.While: "`while` loops are not allowed (use `for i in range(n)` with a literal bound)",
  ast.Try: "try/except is not allowed (it could swallow the sandbox's limits)",
  ast.Global: "`global` is not allowed",
  ast.Nonlocal: "`nonlocal` is not allowed",
  ast.With: "`with` is not allowed",
  ast.Raise: "`raise` is not allowed",
  ast.Assert: "`assert` is not allowed",
  ast.Delete: "`del` is not allowed",
  ast.Yield: "generators (`yield`) are not allowed",
  ast.YieldFrom: "generators (`yield from`) are not allowed",
  ast.JoinedStr: "f-strings are not allowed",
  ast.Starred: "starred expressions (`*x`) are not allowed",
  ast.NamedExpr: "assignment expressions (`:=`) are not allowed",
  ast.AnnAssign: "annotations are not allowed (remove type hints)",
}
_SEQUENCE_BUILDERS = frozenset({"list", "tuple", "sorted"})
_SET_ORDER = (
  "sets are allowed only after `in`/`not in`: their order follows the per-process string hash"
)
_MODULE_LEVEL = (ast.Assign, ast.FunctionDef, ast.Expr)


def _one_line(text: str, limit: int = 300) -> str:
  text = " ".join(str(text).split())
  return text if len(text) <= limit else text[: limit - 3] + "..."


def _const_size(node) -> int | None:
  """Length of a literal sequence (str, bytes, list, tuple), or None if `node` is not one."""
  if isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)):
    return len(node.value)
  if isinstance(node, (ast.List, ast.Tuple)):
    return len(node.elts)
  return None


def _const_int(node) -> int | None:
  """Value of an integer literal (also negated, or a literal product/power), else None."""
  if isinstance(node, ast.Constant) and type(node.value) is int:
    return node.value
  if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
    v = _const_int(node.operand)
    return None if v is None else (-v if isinstance(node.op, ast.USub) else v)
  if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Pow, ast.Mult)):
    a, b = _const_int(node.left), _const_int(node.right)
    if a is None or b is None:
      return None
    if isinstance(node.op, ast.Mult):
      return a * b
    return a**b if 0 <= b <= 64 else None  # bounded: at most a 64-fold product of literals
  return None


def _sequence_expr(node) -> bool:
  """Whether `node` evidently builds a str/bytes/list/tuple (a literal, a comprehension, a
  list/tuple/sorted call, or a sum or product with one of those): never repeated by a computed
  count. Names are not followed; `task.compile_task` bounds what they build at run time."""
  if _const_size(node) is not None or isinstance(node, ast.ListComp):
    return True
  if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
    return node.func.id in _SEQUENCE_BUILDERS
  if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)):
    return _sequence_expr(node.left) or _sequence_expr(node.right)
  return False


class _Checker(ast.NodeVisitor):
  def __init__(self, allowed_attributes: frozenset[str], builtins: frozenset[str]):
    self.reasons: list[str] = []
    self.allowed_attributes = allowed_attributes - _NEVER_ATTRIBUTES
    self.builtins = builtins - FORBIDDEN_NAMES
    self.bound: set[str] = set()
    self.loaded: list[tuple[str, int]] = []

  def fail(self, node, message: str):
    line = getattr(node, "lineno", None)
    self.reasons.append(f"line {line}: {message}" if line else message)

  def generic_visit(self, node):
    if not isinstance(node, _ALLOWED_NODES):
      why = _WHY.get(type(node), f"`{type(node).__name__}` is not allowed")
      self.fail(node, why)
      return
    super().generic_visit(node)

  def visit_Name(self, node):
    self._identifier(node, node.id)
    if isinstance(node.ctx, ast.Load):
      self.loaded.append((node.id, node.lineno))
    else:
      self.bound.add(node.id)

  def _identifier(self, node, name: str):
    if name.startswith("__"):
      self.fail(node, f"names starting with '__' are not allowed: {name!r}")
    elif name in FORBIDDEN_NAMES:
      self.fail(node, f"{name!r} is not allowed")

  def visit_Attribute(self, node):
    if not isinstance(node.ctx, ast.Load):  # the builder's methods are not the program's to replace
      self.fail(node, f"assigning or deleting attributes is not allowed: .{node.attr}")
    if node.attr.startswith("_"):
      self.fail(node, f"private or dunder attributes are not allowed: .{node.attr}")
    elif node.attr not in self.allowed_attributes:
      self.fail(node, f"attribute .{node.attr} is not allowed (only WorldBuilder methods)")
    self.generic_visit(node)

  def visit_FunctionDef(self, node):
    self._identifier(node, node.name)
    self.bound.add(node.name)
    if node.decorator_list:
      self.fail(node, "decorators are not allowed")
    if node.returns is not None:
      self.fail(node, "annotations are not allowed (remove type hints)")
    self._arguments(node, node.args)
    for stmt in node.body:
      self.visit(stmt)

  def _arguments(self, node, args: ast.arguments):
    if args.defaults or args.kw_defaults:
      self.fail(node, "default argument values are not allowed")
    if args.vararg or args.kwarg:
      self.fail(node, "*args / **kwargs parameters are not allowed")
    for a in args.posonlyargs + args.args + args.kwonlyargs:
      self._identifier(a, a.arg)
      self.bound.add(a.arg)
      if a.annotation is not None:
        self.fail(a, "annotations are not allowed (remove type hints)")

  def visit_Lambda(self, node):
    self._arguments(node, node.args)
    self.visit(node.body)

  def visit_Call(self, node):
    for kw in node.keywords:
      if kw.arg is None:
        self.fail(node, "`**` unpacking in calls is not allowed")
      else:
        self._identifier(node, kw.arg)
    self.generic_visit(node)

  def visit_Compare(self, node):
    self.visit(node.left)
    for op, right in zip(node.ops, node.comparators):
      if isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, (ast.Set, ast.SetComp)):
        super().generic_visit(right)  # membership does not depend on the order
      else:
        self.visit(right)

  def visit_Set(self, node):
    self.fail(node, _SET_ORDER)

  def visit_SetComp(self, node):
    self.fail(node, _SET_ORDER)

  def visit_Expr(self, node):
    if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
      self._constant(node.value, docstring=True)  # never read: it may hold any text
      return
    self.generic_visit(node)

  def visit_AugAssign(self, node):
    if isinstance(node.op, (ast.Add, ast.Mult)) and not isinstance(node.target, ast.Name):
      self.fail(node, "`x[i] += ...` and `x[i] *= ...` are not allowed (write x[i] = x[i] + ...)")
    self.generic_visit(node)

  def visit_Dict(self, node):
    if any(k is None for k in node.keys):
      self.fail(node, "`**` unpacking in dicts is not allowed")
      return
    self.generic_visit(node)

  def visit_Constant(self, node):
    self._constant(node, docstring=False)

  def _constant(self, node, docstring: bool):
    v = node.value
    if isinstance(v, (str, bytes)) and len(v) > MAX_STR:
      self.fail(node, f"string literal longer than {MAX_STR} characters")
    elif isinstance(v, (str, bytes)) and ("%" in v if isinstance(v, str) else b"%" in v):
      if not docstring:  # no string value can hold '%', so `%`-formatting is impossible
        self.fail(node, "'%' in string literals is not allowed (it is %-formatting's code)")
    elif type(v) is int and abs(v) > MAX_INT:
      self.fail(node, f"integer literal {v} exceeds {MAX_INT}")
    elif isinstance(v, float) and not math.isfinite(v):
      self.fail(node, "non-finite float literal")
    elif isinstance(v, complex):
      self.fail(node, "complex literals are not allowed")

  def visit_BinOp(self, node):
    left, right = node.left, node.right
    if isinstance(node.op, ast.Pow):
      exp = _const_int(right)
      if exp is None and not (isinstance(right, ast.Constant) and type(right.value) is float):
        self.fail(node, "the exponent of ** must be a number literal")
      elif exp is not None and abs(exp) > MAX_POW_EXPONENT:
        self.fail(node, f"exponent {exp} of ** exceeds {MAX_POW_EXPONENT}")
      else:
        base = _const_int(left)
        if base is not None and exp is not None and exp > 0 and abs(base) > 1:
          if exp * math.log10(abs(base)) > math.log10(MAX_INT):
            self.fail(node, f"{base}**{exp} exceeds {MAX_INT}")
    elif isinstance(node.op, (ast.LShift, ast.RShift)):
      shift = _const_int(right)
      if shift is None or not 0 <= shift <= 16:
        self.fail(node, "shifts must be by a literal in 0..16")
    elif isinstance(node.op, ast.Mod) and isinstance(left, ast.Constant):
      if isinstance(left.value, (str, bytes)):
        self.fail(node, "%-formatting of strings is not allowed")
    elif isinstance(node.op, ast.Mult):
      for seq, times in ((left, right), (right, left)):
        size, n = _const_size(seq), _const_int(times)
        if size is not None and n is not None and size * n > MAX_STR:
          self.fail(node, f"sequence repetition builds {size * n} items (limit {MAX_STR})")
        elif _sequence_expr(seq) and n is None:
          self.fail(node, "a string/list/tuple may only be repeated by an integer literal")
    self.generic_visit(node)


def _depth(node, limit: int) -> int:
  """AST nesting depth, stopping once `limit` is passed (iterative: no recursion on deep input)."""
  deepest, stack = 0, [(node, 1)]
  while stack:
    n, d = stack.pop()
    deepest = max(deepest, d)
    if deepest > limit:
      return deepest
    stack.extend((c, d + 1) for c in ast.iter_child_nodes(n))
  return deepest


def check_source(source: str) -> list[str]:
  """Static allow-list check of a task program; the reasons it is rejected (empty = accepted)."""
  if not isinstance(source, str):
    return [f"the program must be a string, got {type(source).__name__}"]
  if len(source) > MAX_SOURCE_CHARS:
    return [f"the program has {len(source)} characters (limit {MAX_SOURCE_CHARS})"]
  try:
    tree = ast.parse(source, "<task>", "exec")
  except SyntaxError as e:
    return [f"syntax error on line {e.lineno}: {e.msg}"]
  except (ValueError, RecursionError, MemoryError) as e:  # null bytes, absurd nesting
    return [f"the program cannot be parsed: {type(e).__name__}"]
  nodes = sum(1 for _ in ast.walk(tree))
  if nodes > MAX_NODES:
    return [f"the program has {nodes} syntax nodes (limit {MAX_NODES})"]
  if _depth(tree, MAX_DEPTH) > MAX_DEPTH:
    return [f"the program nests deeper than {MAX_DEPTH} levels"]
  checker = _Checker(task_lib.ALLOWED_ATTRIBUTES, frozenset(task_lib.SAFE_BUILTINS))
  for stmt in tree.body:
    is_doc = isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
    if not isinstance(stmt, _MODULE_LEVEL) or (isinstance(stmt, ast.Expr) and not is_doc):
      why = _WHY.get(type(stmt), "module level may only hold assignments, defs and a docstring")
      checker.fail(stmt, why)
      continue
    checker.visit(stmt)
  for name, line in checker.loaded:
    if name not in checker.bound and name not in checker.builtins and name not in FORBIDDEN_NAMES:
      if not name.startswith("__"):
        checker.reasons.append(f"line {line}: unknown name {name!r}")
  if not checker.reasons:
    defined = {t.id for s in tree.body if isinstance(s, ast.Assign) for t in s.targets
               if isinstance(t, ast.Name)}  # fmt: skip
    defined |= {s.name for s in tree.body if isinstance(s, ast.FunctionDef)}
    missing = [n for n in task_lib.REQUIRED_NAMES if n not in defined]
    if missing:
      checker.reasons.append(f"the program does not define {', '.join(missing)} at module level")
  return list(dict.fromkeys(checker.reasons))  # unique, in order


LOAD_CPU_S = 10.0  # a program's module level is a few assignments: microseconds
LOAD_MEMORY_MB = 1024  # address space a load may add to this process


def load(
  source: str,
  classic: bool = False,
  *,
  cpu_s: float | None = None,
  memory_mb: int | None = None,
) -> task_lib.Task:
  """`check_source`, then `task.compile_task` in THIS process (for programs `validate` admitted),
  under a CPU-time limit (`cpu_s`, default LOAD_CPU_S) and an address-space limit (`memory_mb`
  more than this process uses, default LOAD_MEMORY_MB); TaskError with a one-line reason."""
  reasons = check_source(source)
  if reasons:
    raise task_lib.TaskError(reasons[0])
  task_lib.achievement_ids(classic)  # imports craftax outside the limits
  cpu_s = LOAD_CPU_S if cpu_s is None else float(cpu_s)
  try:
    with _cpu_limit(cpu_s), _memory_limit(LOAD_MEMORY_MB if memory_mb is None else memory_mb):
      return task_lib.compile_task(source, classic=classic)
  except sandbox_worker.TimeLimit:
    raise task_lib.TaskError(f"time limit: loading ran past {cpu_s:g} CPU seconds") from None


@contextlib.contextmanager
def _cpu_limit(cpu_s: float):
  """SIGPROF raises TimeLimit (a BaseException: the program cannot catch it, and compile_task's
  `except Exception` lets it through) after `cpu_s` CPU seconds. Signals reach the main thread
  only: elsewhere the load runs without this limit."""
  if threading.current_thread() is not threading.main_thread():
    yield
    return
  previous = signal.signal(signal.SIGPROF, sandbox_worker._on_alarm)
  old_timer = signal.setitimer(signal.ITIMER_PROF, cpu_s)
  try:
    yield
  finally:
    signal.setitimer(signal.ITIMER_PROF, *old_timer)
    signal.signal(signal.SIGPROF, previous)


@contextlib.contextmanager
def _memory_limit(memory_mb: int):
  """Lowers RLIMIT_AS's soft limit to what this process maps now plus `memory_mb` for the load:
  an allocation past it is a MemoryError (a rejection) instead of the machine's OOM killer."""
  try:
    with open("/proc/self/statm") as f:
      mapped = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
  except (OSError, ValueError):  # no /proc: the static bounds and the CPU limit only
    yield
    return
  limit = mapped + (int(memory_mb) << 20)
  if soft != resource.RLIM_INFINITY and soft <= limit:
    yield
    return
  resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
  try:
    yield
  finally:
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


# ---- running programs in a worker process ------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Verdict:
  """The sandbox's answer for one program: admitted (`ok`) or rejected with a one-line `reason`."""

  ok: bool
  reason: str
  name: str | None = None
  info: dict = dataclasses.field(default_factory=dict)


WORKER_ARGV = (sys.executable, "-m", "jaxlab.rl.dicode.sandbox_worker")
_KEEP_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "XLA_FLAGS", "TF_CPP_MIN_LOG_LEVEL")
_DROP_JAX = ("JAX_PLATFORMS", "JAX_PLATFORM_NAME", "JAX_COMPILATION_CACHE_DIR")


def child_env(home: str) -> dict[str, str]:
  """The worker's environment: essentials and JAX/XLA settings only; no keys, tokens or credentials.

  It is built from an allow-list, so anything secret-looking (OPENAI_API_KEY, AWS_*, *_TOKEN, ...)
  is dropped whatever its name. jax runs on the CPU with one compute thread.
  """
  env = {k: os.environ[k] for k in _KEEP_ENV if k in os.environ}
  env.update(
    {
      k: v
      for k, v in os.environ.items()
      if k.startswith("JAX_")
      and k not in _DROP_JAX
      and not any(w in k for w in ("CACHE", "KEY", "TOKEN", "SECRET", "PASSWORD"))
    }
  )
  root = str(pathlib.Path(__file__).resolve().parents[3])  # the checkout: jaxlab/ and envs/
  env.update(
    HOME=home,
    TMPDIR=home,
    PYTHONPATH=root,
    PYTHONNOUSERSITE="1",
    PYTHONDONTWRITEBYTECODE="1",
    PYTHONHASHSEED="0",  # one string hash in every worker (the static check bans order on it)
    JAX_PLATFORMS="cpu",
    OMP_NUM_THREADS="1",
    MALLOC_ARENA_MAX="2",  # glibc reserves 64 MiB of address space per arena and thread
    TF_CPP_MIN_LOG_LEVEL=env.get("TF_CPP_MIN_LOG_LEVEL", "2"),
  )
  env.setdefault("PATH", "/usr/bin:/bin")
  return env


NOBODY = 65534


def _nproc_limit(uid: int) -> int:
  """RLIMIT_NPROC counts all processes and threads of a user: what `uid` runs now, plus room for
  jax's own thread pools (created lazily), and nothing more."""
  try:
    count = sandbox_worker.tasks_of(uid)
  except OSError:  # no /proc
    count = 1024
  return count + 256 + 8 * (os.cpu_count() or 1)


class _Worker:
  """One worker process: JSON request on stdin, one JSON line per event on stdout."""

  def __init__(self, request: dict, opts: dict, temp: str):
    # As root, the worker drops to `nobody` once its imports are done: the kernel never applies
    # RLIMIT_NPROC to root, and `nobody` can write nowhere.
    drop_to = NOBODY if os.geteuid() == 0 else None
    n = len(request["order"])
    limits = {
      "memory_mb": opts["memory_mb"],
      "cpu_s": int(opts["startup_s"] + (opts["timeout_s"] + _CPU_GRACE_S) * n) + 1,
      "nproc": _nproc_limit(os.getuid() if drop_to is None else drop_to),
      "nofile": 256,
    }
    self.token = secrets.token_hex(16)  # the program cannot forge a result line without it
    self.lines: queue.Queue = queue.Queue()
    self.stderr: list[str] = []
    self.proc = subprocess.Popen(
      list(WORKER_ARGV),
      stdin=subprocess.PIPE,
      stdout=subprocess.PIPE,
      stderr=subprocess.PIPE,
      env=child_env(temp),
      cwd=temp,
      start_new_session=True,  # its own process group: killed as a whole
      close_fds=True,
    )
    threading.Thread(target=self._read, args=(self.proc.stdout, True), daemon=True).start()
    threading.Thread(target=self._read, args=(self.proc.stderr, False), daemon=True).start()
    message = {**request, "limits": limits, "token": self.token, "drop_to": drop_to}
    try:
      self.proc.stdin.write(json.dumps(message).encode())
      self.proc.stdin.close()
    except OSError:
      pass  # died at once; `next` reports it

  def _read(self, stream, is_stdout: bool):
    for raw in iter(stream.readline, b""):
      line = raw.decode("utf-8", "replace").rstrip("\n")
      if not is_stdout:
        self.stderr = (self.stderr + [line])[-20:]
        continue
      try:
        msg = json.loads(line)
      except ValueError:
        continue
      if isinstance(msg, dict) and msg.get("token") == self.token:
        self.lines.put(msg)
    if is_stdout:
      self.lines.put(None)

  def next(self, timeout_s: float):
    """The next message; None when the worker exited; "timeout" when `timeout_s` passed."""
    try:
      return self.lines.get(timeout=max(timeout_s, 0.0))
    except queue.Empty:
      return "timeout"

  def death(self) -> tuple[str, str | None]:
    """Why the worker stopped (after it stopped), and the signal's name if a signal ended it."""
    try:
      rc = self.proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
      return "the worker did not exit", None
    if rc < 0:
      name = signal.Signals(-rc).name if -rc in signal.Signals._value2member_map_ else str(-rc)
      why = {"SIGKILL": " (out of memory, or killed)", "SIGXCPU": " (CPU time limit)"}
      if name == "SIGABRT" and any("bad_alloc" in line for line in self.stderr):
        why["SIGABRT"] = " (out of memory in native code)"
      tail = f"; stderr: {_one_line(self.stderr[-1], 160)}" if self.stderr else ""
      return f"killed by {name}{why.get(name, '')}{tail}", name
    tail = _one_line(self.stderr[-1], 200) if self.stderr else "no output"
    return f"exited with code {rc}: {tail}", None

  def kill(self):
    try:
      os.killpg(self.proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
      pass
    try:
      self.proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
      pass


_CPU_GRACE_S = 2.0  # past a program's CPU limit, RLIMIT_CPU kills a worker stuck in native code


def _run_batch(
  pending: list[int], sources: Sequence[str], results: dict, opts: dict, temp: str
) -> tuple[list[int], str | None]:
  """Runs `pending` programs in one worker; fills `results`; returns (unfinished, why it died)."""
  request = {
    "sources": {str(i): sources[i] for i in pending},
    "order": [str(i) for i in pending],
    "cpu_grace_s": _CPU_GRACE_S,
    **{k: opts[k] for k in ("timeout_s", "num_worlds", "seed", "classic", "probes")},
  }
  worker = _Worker(request, opts, temp)
  left = list(pending)
  deadline = time.monotonic() + opts["startup_s"]
  limit = opts["timeout_s"]
  try:
    while left or not opts["started"]:
      msg = worker.next(deadline - time.monotonic())
      if msg == "timeout":
        worker.kill()
        if not opts["started"]:
          return left, f"the worker did not start within {opts['startup_s']:.0f}s"
        why = f"time limit: no answer within {opts['wall_s']:g}s wall-clock (killed)"
        results[left.pop(0)] = Verdict(False, why)
        return left, None  # the program's fault, not a crash: the rest go on
      if msg is None:
        why, sig = worker.death()
        if opts["started"] and left and sig == "SIGXCPU":
          why = f"time limit: ran past {limit:g} CPU seconds in native code (killed)"
          results[left.pop(0)] = Verdict(False, why)
          return left, None
        if opts["started"] and left:
          results[left.pop(0)] = Verdict(False, f"the sandbox worker died on this task: {why}")
        return left, why
      if msg.get("event") == "ready":
        opts["started"] = True
        opts["report"] = {k: msg.get(k) for k in ("limits", "probes", "uid")}
      elif msg.get("event") == "result":
        i = int(msg["key"])
        info = msg.get("info") if isinstance(msg.get("info"), dict) else {}
        results[i] = Verdict(bool(msg["ok"]), _one_line(msg["reason"]), msg.get("name"), info)
        left.remove(i)
      deadline = time.monotonic() + opts["wall_s"]
    return left, None
  finally:
    worker.kill()


def validate(
  sources: Sequence[str],
  *,
  timeout_s: float,
  memory_mb: int,
  classic: bool = False,
  num_worlds: int = 4,
  seed: int = 0,
  startup_s: float = 300.0,
  wall_timeout_s: float | None = None,
  probes: Sequence[str] = (),
  report: dict | None = None,
) -> list[Verdict]:
  """Checks each program statically, then compiles and builds its worlds in ONE sandboxed worker.

  `timeout_s` is each program's limit in CPU seconds of the worker (compile + trace + build; CPU
  time, so a loaded machine does not reject good programs); `wall_timeout_s` (default
  max(10 * timeout_s, timeout_s + 60)) the wall-clock backstop per program; `memory_mb` the
  worker's address space; `startup_s` the wall-clock limit on the worker's start (jax and
  craftax imports). `probes` (for tests: "env", "fork") and `report` (a dict filled with the
  worker's limits, uid and probe results) show the sandbox from inside. Never raises for a bad
  program; never hangs.
  """
  sources = list(sources)
  results: dict[int, Verdict] = {}
  pending = []
  for i, source in enumerate(sources):
    reasons = check_source(source)
    if reasons:
      more = f" (+{len(reasons) - 1} more)" if len(reasons) > 1 else ""
      results[i] = Verdict(False, _one_line(reasons[0]) + more)
    else:
      pending.append(i)
  wall_s = wall_timeout_s or max(10 * float(timeout_s), float(timeout_s) + 60)
  opts = dict(
    timeout_s=float(timeout_s),
    wall_s=float(wall_s),
    memory_mb=int(memory_mb),
    classic=bool(classic),
    num_worlds=int(num_worlds),
    seed=int(seed),
    startup_s=float(startup_s),
    probes=list(probes),
  )
  if pending or probes:
    temp = tempfile.mkdtemp(prefix="dicode-sandbox-")
    os.chmod(temp, 0o755)  # `nobody` may enter it; FSIZE 0 keeps it empty
    try:
      crashes = 0
      while pending or (probes and "report" not in opts):
        opts["started"] = False
        pending, why = _run_batch(pending, sources, results, opts, temp)
        crashes += why is not None
        if crashes > 1:  # one retry after a crash; then the rest are rejected
          for i in pending:
            results[i] = Verdict(False, _one_line(f"the sandbox worker failed twice: {why}"))
          break
    finally:
      shutil.rmtree(temp, ignore_errors=True)
  if report is not None:
    report.update(opts.get("report") or {})
  return [results[i] for i in range(len(sources))]
