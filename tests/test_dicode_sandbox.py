"""DiCode's sandbox for generated task programs, and the on-disk archive.

One sandboxed worker (module fixture) runs every hostile program that gets past the static check,
so the default suite pays for one jax import; seed tasks and full world checks are `slow`.
"""

import os
import pathlib
import re
import signal
import subprocess
import sys
import textwrap
import time
from unittest import mock

import pytest

from jaxlab.rl.dicode import archive as archive_lib
from jaxlab.rl.dicode import sandbox
from jaxlab.rl.dicode import task as task_lib

HEADER = 'NAME = "t"\nRELEVANT_ACHIEVEMENTS = ("COLLECT_WOOD",)\n'
WORLD = "\ndef generate_world(wb, key):\n  return wb\n"


def program(body: str = "", world: str = WORLD) -> str:
  return HEADER + textwrap.dedent(body) + world


# ---- static check ------------------------------------------------------------------------------

STATIC = {  # hostile program -> words its reason must contain
  "import os": program("import os\n"),
  "from-import": program("from os import system\n"),
  "open": program("X = open('/etc/passwd')\n"),
  "class walk": program("X = ().__class__.__bases__[0].__subclasses__()\n"),
  "globals walk": program(world="\ndef generate_world(wb, key):\n  g = wb.split.__globals__\n"),
  "getattr": program("X = getattr(1, '__cl' + 'ass__')\n"),
  "builtins": program("X = __builtins__\n"),
  "exec": program("X = exec('1')\n"),
  "eval": program("X = eval('1+1')\n"),
  "compile": program("X = compile('1', 'f', 'eval')\n"),
  "vars": program("X = vars()\n"),
  "while": program(world="\ndef generate_world(wb, key):\n  while True:\n    pass\n"),
  "try": program(
    world="\ndef generate_world(wb, key):\n  try:\n    return wb\n  except:\n    return wb\n"
  ),
  "class": program("class A:\n  pass\n"),
  "global": program(world="\ndef generate_world(wb, key):\n  global X\n  return wb\n"),
  "lambda default": program("F = lambda x=().__class__: x\n"),
  "def default": program("def f(x=1):\n  return x\n"),
  "kwargs": program("def f(**kw):\n  return kw\n"),
  "star call": program("X = dict(**{'a': 1})\n"),
  "fstring": program("X = f'{1:>999999999}'\n"),
  "percent": program("X = '%999999999d' % 1\n"),
  "pow": program("X = range(10**9)\n"),
  "big int": program("X = range(1000000000)\n"),
  "str repeat": program("X = 'a' * 10**5\n"),
  "shift": program("X = 1 << 40\n"),
  "big literal": program("X = '" + "a" * 5000 + "'\n"),
  "attribute": program(world="\ndef generate_world(wb, key):\n  return wb.state\n"),
  "private attribute": program(world="\ndef generate_world(wb, key):\n  return wb._state\n"),
  "unknown name": program("X = os\n"),
  "module loop": "for i in range(3):\n  pass\n" + program(),
  "decorator": program("def d(f):\n  return f\n@d\ndef g(a):\n  return a\n"),
  "annotation": program(world="\ndef generate_world(wb, key) -> int:\n  return wb\n"),
  "nesting": program("X = " + "[" * 60 + "1" + "]" * 60 + "\n"),
  "size": program("X = 1\n" * 5000),
  "missing": 'NAME = "t"\n',
  "attribute store": program(
    world="\ndef generate_world(wb, key):\n  wb.split = wb.build\n  return wb\n"
  ),
  "attribute augassign": program(
    world="\ndef generate_world(wb, key):\n  wb.split += 1\n  return wb\n"
  ),
  "computed repeat": program("N = 1000\nX = 'a' * N * N\n"),
  "list repeat by name": program("def f(n):\n  return [0] * n\nX = f(10)\n"),
  "computed format": program("FMT = '%*d'\nW = 1000\nX = FMT % (W * W, 1)\n"),
  "subscript augassign": program("def f(x):\n  x[0] += x[0]\n  return x\n"),
  "set iteration": program(
    world="\ndef generate_world(wb, key):\n  for b in {'TREE', 'STONE'}:\n"
    "    wb = wb.place_randomly(key, b)\n  return wb\n"
  ),
  "set order branch": program("X = 1 if sorted({s for s in ('a', 'b')})[0] == 'a' else 2\n"),
  "hash": program("X = hash('a') % 2\n"),
}
REASON_WORDS = {
  "import os": "import", "from-import": "import", "open": "'open'", "class walk": "__",
  "globals walk": "__globals__", "getattr": "'getattr'", "builtins": "__builtins__",
  "exec": "'exec'", "eval": "'eval'", "compile": "'compile'", "vars": "'vars'", "while": "while",
  "try": "try", "class": "class", "global": "global", "lambda default": "default",
  "def default": "default", "kwargs": "**kwargs", "star call": "**", "fstring": "f-string",
  "percent": "%-formatting", "pow": "exceeds", "big int": "exceeds", "str repeat": "repetition",
  "shift": "shift", "big literal": "string literal", "attribute": ".state",
  "private attribute": "private", "unknown name": "unknown name 'os'",
  "module loop": "module level",
  "decorator": "decorator", "annotation": "annotation", "nesting": "nest", "size": "characters",
  "missing": "RELEVANT_ACHIEVEMENTS", "attribute store": "assigning or deleting attributes",
  "attribute augassign": "assigning or deleting attributes",
  "computed repeat": "repeated by an integer literal",
  "list repeat by name": "repeated by an integer literal", "computed format": "'%' in string",
  "subscript augassign": "x[i] +=", "set iteration": "sets are allowed only",
  "set order branch": "sets are allowed only", "hash": "'hash'",
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(STATIC))
def test_static_check_rejects_with_reason(case):
  reasons = sandbox.check_source(STATIC[case])
  assert reasons, case
  assert REASON_WORDS[case] in " ".join(reasons), (case, reasons)


def test_static_check_accepts_valid_programs():
  from jaxlab.rl.dicode import proposers

  assert sandbox.check_source(proposers.EXAMPLE) == []
  ok = program(
    "def helper(n):\n  return [i * 2 for i in range(n)]\nX = helper(3)\nY = 2 ** 3 + -4\n",
    world="\ndef generate_world(wb, key):\n  for k in wb.split(key, 3):\n    wb = wb\n"
    "  return wb\n",
  )
  assert sandbox.check_source(ok) == []


def test_forbidden_names_are_not_safe_builtins():
  assert not set(task_lib.SAFE_BUILTINS) & sandbox.FORBIDDEN_NAMES
  assert not any(a.startswith("_") for a in task_lib.ALLOWED_ATTRIBUTES)


def test_second_layer_without_the_static_check():
  # Even if the AST check were bypassed, programs run without __import__ or open.
  with pytest.raises(task_lib.TaskError, match="__import__"):
    task_lib.compile_task(program("import os\n"))
  with pytest.raises(task_lib.TaskError, match="open"):
    task_lib.compile_task(program("X = open('/etc/passwd')\n"))
  with pytest.raises(task_lib.TaskError):  # `load` never runs an unchecked program
    sandbox.load(program("import os\n"))


def test_membership_sets_and_percent_in_docstrings_pass():
  ok = program(
    '"""50% of the trees."""\nX = 1 if 2 in {1, 2} else 0\n',
    world='\ndef generate_world(wb, key):\n  """Keeps 100% of wb."""\n  return wb\n',
  )
  assert sandbox.check_source(ok) == []


@pytest.mark.parametrize(
  "body, words",
  [
    ("S = 'ab'\nN = 1000\nT = S * N * N\n", "limit 100000"),  # through names: at run time
    ("def f(x):\n  for i in range(40):\n    x += x\n  return x\nX = f([1])\n", "`+`"),
    ("X = sum([[1], [2]], [])\n", "sum()"),
  ],
)
def test_computed_sizes_are_bounded_at_run_time(body, words):
  source = program(body)
  assert sandbox.check_source(source) == []
  with pytest.raises(task_lib.TaskError, match=re.escape(words)):
    sandbox.load(source)


def test_guarded_operators_keep_their_meaning():
  t = sandbox.load(program("def f(x):\n  y = x\n  y += [2]\n  return x\nX = f([1]) * 2 + [3]\n"))
  assert t.name == "t"  # `+=` on a list still extends it in place; + and * still concatenate
  ns = {"__builtins__": task_lib.SAFE_BUILTINS, **task_lib._GUARDS}
  exec(
    task_lib._guarded_code("def f(x):\n  y = x\n  y += [2]\n  return x\nX = f([1]) * 2 + [3]\n"), ns
  )
  assert ns["X"] == [1, 2, 1, 2, 3]


def test_main_process_load_is_time_limited():
  import resource

  before = resource.getrlimit(resource.RLIMIT_AS)
  looping = RUNTIME["python loop"][0]  # validated or not: the main process never hangs on it
  assert sandbox.check_source(looping) == []
  start = time.monotonic()
  with pytest.raises(task_lib.TaskError, match="time limit"):
    sandbox.load(looping, cpu_s=0.5)
  assert time.monotonic() - start < 10
  assert signal.getitimer(signal.ITIMER_PROF) == (0.0, 0.0)
  assert resource.getrlimit(resource.RLIMIT_AS) == before


def test_main_process_load_is_memory_limited():
  import resource

  before = resource.getrlimit(resource.RLIMIT_AS)
  hog = program("Z = [0] * 1000\nX = [Z * 100 for i in range(100000)]\n")
  with pytest.raises(task_lib.TaskError, match="MemoryError"):
    sandbox.load(hog, memory_mb=256)
  assert resource.getrlimit(resource.RLIMIT_AS) == before


def test_worker_runs_with_one_hash_seed():
  assert sandbox.child_env("/tmp/x")["PYTHONHASHSEED"] == "0"


def test_child_env_drops_secrets():
  secrets = {"OPENAI_API_KEY": "sk-x", "DICODE_API_KEY": "k", "GITHUB_TOKEN": "t",
             "AWS_SECRET_ACCESS_KEY": "a", "HF_TOKEN": "h"}  # fmt: skip
  with mock.patch.dict(os.environ, secrets):
    env = sandbox.child_env("/tmp/x")
  assert not set(secrets) & set(env)
  assert env["JAX_PLATFORMS"] == "cpu" and env["HOME"] == "/tmp/x"


# ---- the worker: one batch of hostile programs that pass the static check ----------------------

RUNTIME = {  # name -> (program, words the reason must contain)
  "python loop": (
    program(
      "def f(n):\n  t = 0\n  for i in range(n):\n    for j in range(n):\n"
      "      t = t + 1\n  return t\nX = f(100000)\n"
    ),  # fmt: skip
    "time limit",
  ),
  "exponential recursion": (
    program("def g(n):\n  return 0 if n == 0 else g(n - 1) + g(n - 1)\nX = g(60)\n"),
    "time limit",
  ),
  "infinite recursion": (program("def h(n):\n  return h(n + 1)\nX = h(0)\n"), "recursion"),
  # each piece within the run-time bound on `*`; together past the worker's address space. Filling
  # 3 GB takes 1-3 CPU seconds, so on a busy machine the CPU limit may stop it first: either
  # limit is a rejection with its reason
  "huge list": (
    program(
      "def big(n):\n  z = [0] * 1000\n  return [z * 100 for i in range(n)]\nX = big(100000)\n"
    ),
    ("memory", "time limit"),
  ),
  "huge string": (
    program(
      "def big(n):\n  z = 'ab' * 1000\n  return [z * 50 for i in range(n)]\nX = big(100000)\n"
    ),
    ("memory", "time limit"),
  ),
  "bad name": (program('NAME = "Bad Name!"\n'), "NAME"),
  "unknown achievement": (program('RELEVANT_ACHIEVEMENTS = ("FLY",)\n'), "unknown achievement"),
  # sum() over a range runs in C without checking signals: RLIMIT_CPU kills the worker. Last,
  # so the batch needs no second worker (the slow test checks that the rest carry on).
  "native loop": (program("def s(n):\n  return sum(range(n * n * n))\nX = s(100000)\n"), "killed"),
}
SECRETS = {"OPENAI_API_KEY": "sk-sandbox-test", "DICODE_API_KEY": "dk", "GITHUB_TOKEN": "gt"}
MEMORY_MB = 3072
TIMEOUT_S = 3.0
PASSING_MB = 6144  # the address space of the workers whose programs must pass


@pytest.fixture(scope="module")
def batch():
  names = list(RUNTIME)
  sources = [RUNTIME[n][0] for n in names] + [STATIC["import os"]]
  report: dict = {}
  start = time.monotonic()
  with mock.patch.dict(os.environ, SECRETS):
    verdicts = sandbox.validate(
      sources, timeout_s=TIMEOUT_S, memory_mb=MEMORY_MB, probes=["env", "fork"], report=report
    )
  seconds = time.monotonic() - start
  return dict(zip(names + ["static"], verdicts)), report, seconds


@pytest.mark.parametrize("case", sorted(RUNTIME))
def test_worker_rejects_with_reason(batch, case):
  verdict = batch[0][case]
  assert not verdict.ok
  words = RUNTIME[case][1]
  words = (words,) if isinstance(words, str) else words
  assert any(w in verdict.reason for w in words), (case, verdict.reason)
  assert "\n" not in verdict.reason


def test_validate_keeps_order_and_static_reasons(batch):
  verdicts, _, seconds = batch
  assert "import" in verdicts["static"].reason
  # the loops are stopped at the limit, not when they end (they would take years)
  assert seconds < 200, seconds


def test_worker_limits(batch):
  _, report, _ = batch
  limits = report["limits"]
  assert limits["as"] == MEMORY_MB << 20  # jax imported under this limit (the batch ran)
  assert limits["fsize"] == 0 and limits["core"] == 0
  assert 0 < limits["nofile"] <= 256
  assert 0 < limits["cpu"] < 10_000
  assert 0 < limits["nproc"] < 100_000  # set (RLIM_INFINITY is -1 or 2**63 - 1)


def test_worker_sees_no_secrets(batch):
  env = batch[1]["probes"]["env"]
  assert not set(SECRETS) & set(env)
  assert "JAX_PLATFORMS" in env


def test_fork_bomb_is_stopped(batch):
  _, report, _ = batch
  fork = report["probes"]["fork"]
  if report["uid"] == 0:
    pytest.skip("the worker runs as root here (`nobody` cannot reach this interpreter); "
                "the kernel exempts root from RLIMIT_NPROC")  # fmt: skip
  assert fork["refused"] is not None, fork  # the kernel refused a fork before 5000
  assert fork["forked"] <= 32 and fork["limit"] <= report["limits"]["nproc"]


def test_crashing_worker_never_raises(monkeypatch):
  monkeypatch.setattr(sandbox, "WORKER_ARGV", [sys.executable, "-c", "import os; os._exit(3)"])
  start = time.monotonic()
  verdicts = sandbox.validate(
    [program(), program()], timeout_s=5, memory_mb=PASSING_MB, startup_s=30
  )
  assert [v.ok for v in verdicts] == [False, False]
  assert all("failed twice" in v.reason and "code 3" in v.reason for v in verdicts), verdicts
  assert time.monotonic() - start < 30


@pytest.mark.slow
def test_seed_tasks_pass():
  from jaxlab.rl.dicode import seeds

  sources = seeds.load_seed_tasks()
  verdicts = sandbox.validate(list(sources.values()), timeout_s=120.0, memory_mb=PASSING_MB)
  for name, v in zip(sources, verdicts):
    assert v.ok, (name, v.reason)
    assert v.info["num_worlds"] == 4


@pytest.mark.slow
def test_programs_after_a_killed_worker_still_get_verdicts():
  native = RUNTIME["native loop"][0]
  verdicts = sandbox.validate(
    [native, RUNTIME["bad name"][0]], timeout_s=TIMEOUT_S, memory_mb=PASSING_MB
  )
  assert "killed" in verdicts[0].reason
  assert "NAME" in verdicts[1].reason  # checked by a fresh worker


@pytest.mark.slow
def test_generate_world_time_limit_during_tracing():
  loop = "\ndef generate_world(wb, key):\n  for i in range(100000):\n    for j in range(100000):\n"
  loop += "      wb = wb\n  return wb\n"
  (verdict,) = sandbox.validate([program(world=loop)], timeout_s=60, memory_mb=PASSING_MB)
  assert not verdict.ok and "time limit" in verdict.reason


# ---- archive -----------------------------------------------------------------------------------


def _verdict(ok=True, name="t", reason="ok"):
  return sandbox.Verdict(ok, reason, name, {"num_worlds": 4})


def test_archive_layout_and_slots(tmp_path):
  a = archive_lib.Archive(tmp_path, num_slots=3)
  ids = [a.add(program(), None, 0, _verdict(name=f"t{i}")) for i in range(4)]
  bad = a.add("import os", ids[0], 1, _verdict(False, None, "line 1: imports are not allowed"))
  assert [a.admit(i, 0.1) for i in ids[:3]] == [0, 1, 2]
  with pytest.raises(ValueError, match="slots"):
    a.admit(ids[3])
  a.retire(ids[1])
  assert a.admit(ids[3], 0.2) == 1  # the retired task's slot is reused
  a.update_score(ids[3], 0.25, session=4, success_rate=0.5)
  assert [m["id"] for m in a.active()] == [ids[0], ids[2], ids[3]]
  meta = a.get(bad)
  assert meta["status"] == "rejected" and "import" in meta["reason"] and meta["parent"] == ids[0]
  d = tmp_path / meta["dir"]
  assert (d / "task.py").read_text() == "import os"
  assert "imports are not allowed" in (d / "meta.json").read_text()
  assert a.get(ids[3])["scores"][-1] == {"session": 4, "score": 0.25, "success_rate": 0.5}
  reopened = archive_lib.Archive(tmp_path, num_slots=3)
  assert reopened.records() == a.records()
  assert reopened.slot(ids[3]) == 1
  with pytest.raises(ValueError):
    reopened.slot(ids[1])


def test_archive_recovers_from_interrupted_writes(tmp_path, monkeypatch):
  a = archive_lib.Archive(tmp_path)
  first = a.add(program(), None, 0, _verdict(name="first"))
  a.admit(first, 0.1)
  # a kill between the task directory's rename and the index write
  calls = []
  real = archive_lib.metrics.write_json

  def crash_on_index(path, obj):
    calls.append(path)
    if pathlib.Path(path).name == "archive.json":
      raise KeyboardInterrupt("killed")
    real(path, obj)

  monkeypatch.setattr(archive_lib.metrics, "write_json", crash_on_index)
  with pytest.raises(KeyboardInterrupt):
    a.add(program(), first, 1, _verdict(name="second"))
  monkeypatch.setattr(archive_lib.metrics, "write_json", real)
  # leftovers of other interrupted writes
  (tmp_path / "tasks" / ".tmp-00007").mkdir()
  (tmp_path / "tasks" / ".tmp-00007" / "task.py").write_text("NAME = ")
  (tmp_path / "archive.json.tmp").write_text("{")
  (tmp_path / a.get(first)["dir"] / "meta.json.tmp").write_text("{")
  b = archive_lib.Archive(tmp_path)
  assert [m["name"] for m in b.records()] == ["first", "second"]
  assert b.get(first)["status"] == "admitted" and b.slot(first) == 0
  assert not list(tmp_path.rglob("*.tmp")) and not list(tmp_path.glob("tasks/.tmp-*"))
  index = archive_lib.metrics.read_json(tmp_path / "archive.json")
  assert [t["id"] for t in index["tasks"]] == [0, 1]


_WRITER = """
import sys
from jaxlab.rl.dicode import archive, sandbox
a = archive.Archive(sys.argv[1], num_slots=8)
i = 0
while True:
  t = a.add("NAME = 'x'\\n" * 50, None, i, sandbox.Verdict(True, "ok", f"t{i}", {}))
  a.admit(t, 0.5) if not i % 3 else a.reject(t, "low score")
  if len(a.active()) >= 8:
    a.retire(a.active()[0]["id"])
  print(i, flush=True)
  i += 1
"""


def test_archive_survives_kill(tmp_path):
  proc = subprocess.Popen(
    [sys.executable, "-c", _WRITER, str(tmp_path)], stdout=subprocess.PIPE, text=True
  )
  for _ in range(30):  # let it write a while, then kill it mid-write
    proc.stdout.readline()
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  a = archive_lib.Archive(tmp_path, num_slots=8)
  records = a.records()
  assert len(records) >= 30
  assert [m["id"] for m in records] == list(range(len(records)))
  dirs = sorted(p.name for p in (tmp_path / "tasks").iterdir())
  assert dirs == sorted(pathlib.Path(m["dir"]).name for m in records)
  for m in records:
    assert a.source(m["id"]).startswith("NAME = 'x'")
  slots = [m["slot"] for m in a.active()]
  assert len(slots) == len(set(slots)) <= 8
  new = a.add(program(), None, 99, _verdict(name="after"))
  assert new == len(records)
