"""DiCode task proposers: offline AST mutation and an OpenAI-compatible model on a fake server."""

import ast
import http.server
import json
import os
import socket
import threading
import time
from unittest import mock

import pytest

from jaxlab.core.errors import ConfigError
from jaxlab.rl import dicode
from jaxlab.rl.dicode import proposers, sandbox
from jaxlab.rl.dicode import task as task_lib

CFG = dicode.get_config()  # DiCode's endpoint and sandbox limits, as the loop passes them
LLM = {"llm_timeout_s": CFG.llm_timeout_s, "llm_retries": CFG.llm_retries}
SANDBOX = {"timeout_s": CFG.sandbox_timeout_s, "memory_mb": 6144}  # as these tests were run

# ---- offline ----------------------------------------------------------------------------------


def _features(source: str) -> dict:
  """What a mutation may change: multipliers, achievement sets and every int keyword."""
  tree = ast.parse(source)
  out = {"params": proposers._task_params(tree)}
  out["relevant"] = tuple(proposers._str_tuple(tree, "RELEVANT_ACHIEVEMENTS"))
  out["completed"] = tuple(proposers._str_tuple(tree, "COMPLETED_ACHIEVEMENTS"))
  ints = [(c.func.attr, kw.arg, kw.value.value) for c, kw in proposers._int_keywords(tree, None)]
  out["ints"] = ints
  return out


def _parents():
  scaffold = proposers.EXAMPLE.replace(
    'RELEVANT_ACHIEVEMENTS = ("COLLECT_WOOD",)',
    'RELEVANT_ACHIEVEMENTS = ("COLLECT_WOOD", "PLACE_TABLE")',
  )
  return [{"name": "a", "source": proposers.EXAMPLE}, {"name": "b", "source": scaffold}]


def test_offline_is_deterministic_and_valid():
  p = proposers.OfflineProposer()
  kids = p.propose(_parents(), {}, 24, seed=3)
  assert kids == p.propose(_parents(), {}, 24, seed=3)
  assert kids != p.propose(_parents(), {}, 24, seed=4)
  assert len(kids) == 24 and len(set(kids)) == 24
  for kid in kids:
    assert sandbox.check_source(kid) == []
    t = sandbox.load(kid)  # compiles: names, achievements and clamped multipliers are valid
    assert t.name.endswith(tuple("0123456789abcdef")) and "Change:" in t.description


def test_offline_makes_one_primary_change():
  p = proposers.OfflineProposer()
  kinds = set()
  for parent_dict in _parents():
    parent = _features(parent_dict["source"])
    for kid in p.propose([parent_dict], {}, 20, seed=0):
      child = _features(kid)
      changed = [k for k in ("params", "relevant", "completed") if child[k] != parent[k]]
      ints = sum(a != b for a, b in zip(child["ints"], parent["ints"]))
      assert len(child["ints"]) == len(parent["ints"])
      if changed == ["relevant", "completed"]:  # moved to the pre-completed set: one change
        changed = ["scaffold"]
      assert len(changed) + ints == 1, (kid, changed, ints)
      kinds.add(changed[0] if changed else "ints")
      if changed == ["params"]:
        for name, value in child["params"].items():
          _, low, high = task_lib.MULTIPLIERS[name]
          assert low <= value <= high
          assert (
            value != parent["params"].get(name, task_lib.MULTIPLIERS[name][0])
            or name in (parent["params"])
          )
  assert {"params", "relevant", "ints"} <= kinds, kinds


def test_offline_falls_back_to_seeds():
  kids = proposers.OfflineProposer().propose([], {"seeds": {"x": proposers.EXAMPLE}}, 3, seed=0)
  assert len(kids) == 3


# ---- LLM behind a fake OpenAI-compatible server -----------------------------------------------

REPLY_PROGRAM = proposers.EXAMPLE.replace("collect_wood_near", "collect_wood_far").replace(
  "distance=2", "distance=4"
)
HOSTILE_PROGRAM = proposers.EXAMPLE + "\nimport os\n"


class FakeServer:
  """An OpenAI-compatible server on localhost; `script` is a list of (status, program) replies."""

  def __init__(self, script=None, delay_s=0.0):
    self.requests = []
    self.script = list(script or [])
    outer = self

    class Handler(http.server.BaseHTTPRequestHandler):
      def log_message(self, *args):
        pass

      def _send(self, status, obj, headers=()):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers:
          self.send_header(k, v)
        self.end_headers()
        try:
          self.wfile.write(body)
        except BrokenPipeError:
          pass  # the client gave up (the timeout test)

      def do_GET(self):
        outer.requests.append(("GET", self.path, dict(self.headers), None))
        self._send(200, {"object": "list", "data": [{"id": "fake-model"}]})

      def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        outer.requests.append(("POST", self.path, dict(self.headers), body))
        time.sleep(delay_s)
        status, program = outer.script.pop(0) if outer.script else (200, REPLY_PROGRAM)
        if status != 200:
          self._send(status, {"error": {"message": "try later"}}, [("Retry-After", "0")])
          return
        text = f"<think>plan</think>Here it is:\n```python\n{program}```\nDone."
        self._send(200, {"choices": [{"message": {"role": "assistant", "content": text}}]})

    self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    self.server.daemon_threads = True
    self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
    threading.Thread(target=self.server.serve_forever, daemon=True).start()

  def close(self):
    self.server.shutdown()
    self.server.server_close()


@pytest.fixture
def server():
  s = FakeServer()
  yield s
  s.close()


def test_llm_proposes_through_fake_server(server):
  with mock.patch.dict(os.environ, {"DICODE_API_KEY": "dk-test", "OPENAI_API_KEY": "other"}):
    p = proposers.make_proposer("llm", llm_url=server.url, llm_model="fake-model", **LLM)
  parent = {"name": "collect_wood_near", "source": proposers.EXAMPLE, "score": 0.21}
  context = {"original_success": {"COLLECT_WOOD": 0.9, "DEFEAT_ZOMBIE": 0.1}}
  sources = p.propose([parent], context, 2, seed=7)
  assert sources == [REPLY_PROGRAM.strip() + "\n"] * 2
  posts = [r for r in server.requests if r[0] == "POST"]
  assert len(posts) == 2 and posts[0][1] == "/v1/chat/completions"
  headers, body = posts[0][2], posts[0][3]
  assert headers["Authorization"] == "Bearer dk-test"
  assert body["model"] == "fake-model" and body["seed"] == 7
  system, user = body["messages"][0]["content"], body["messages"][1]["content"]
  assert "wb.place_randomly_near(key, block, count=1, distance=3" in system  # API from the code
  assert "no imports" in system and "DEFEAT_ZOMBIE" in system
  assert "collect_wood_near" in user and "0.21" in user and '"DEFEAT_ZOMBIE": 0.1' in user
  # admitted by the sandbox's static check and compile (the full world check is `slow`)
  assert sandbox.load(sources[0]).name == "collect_wood_far"


def test_llm_hostile_reply_is_rejected_without_running():
  s = FakeServer([(200, HOSTILE_PROGRAM)])
  try:
    p = proposers.LLMProposer(
      s.url, "m", api_key="k", timeout_s=CFG.llm_timeout_s, retries=CFG.llm_retries
    )
    (src,) = p.propose([], {"seeds": {"x": proposers.EXAMPLE}}, 1, seed=0)
  finally:
    s.close()
  (verdict,) = sandbox.validate([src], **SANDBOX)
  assert not verdict.ok and "import" in verdict.reason


def test_llm_retries_with_backoff():
  s = FakeServer([(503, None), (429, None)])
  try:
    p = proposers.LLMProposer(
      s.url, "m", api_key="k", timeout_s=CFG.llm_timeout_s, retries=2, backoff_s=0.05
    )
    start = time.monotonic()
    assert len(p.propose([], {"seeds": {"x": proposers.EXAMPLE}}, 1, seed=0)) == 1
    assert time.monotonic() - start < 5
    assert sum(r[0] == "POST" for r in s.requests) == 3
  finally:
    s.close()


def test_llm_auth_error_is_config_error_without_retry():
  s = FakeServer([(401, None)])
  try:
    p = proposers.LLMProposer(
      s.url, "m", api_key="bad", timeout_s=CFG.llm_timeout_s, retries=3, backoff_s=5
    )
    start = time.monotonic()
    with pytest.raises(ConfigError) as e:
      p.propose([], {"seeds": {"x": proposers.EXAMPLE}}, 1, seed=0)
    assert e.value.field == "llm_url" and "API key" in e.value.message
    assert time.monotonic() - start < 3 and len(s.requests) == 1
    assert "\n" not in str(e.value)
  finally:
    s.close()


def _free_port() -> int:
  with socket.socket() as sock:
    sock.bind(("127.0.0.1", 0))
    return sock.getsockname()[1]


def test_unreachable_url_is_config_error_quickly():
  url = f"http://127.0.0.1:{_free_port()}/v1"
  start = time.monotonic()
  with pytest.raises(ConfigError) as e:
    proposers.make_proposer("llm", llm_url=url, llm_model="m", **LLM)
  assert e.value.field == "llm_url" and "cannot reach" in e.value.message
  p = proposers.LLMProposer(url, "m", timeout_s=CFG.llm_timeout_s, retries=2, backoff_s=0.05)
  with pytest.raises(ConfigError, match="3 attempts"):
    p.propose([], {"seeds": {"x": proposers.EXAMPLE}}, 1, seed=0)
  assert time.monotonic() - start < 5


def test_silent_server_times_out():
  s = FakeServer(delay_s=3.0)
  try:
    p = proposers.LLMProposer(s.url, "m", timeout_s=0.3, retries=1, backoff_s=0.05)
    start = time.monotonic()
    with pytest.raises(ConfigError, match="2 attempts"):
      p.propose([], {"seeds": {"x": proposers.EXAMPLE}}, 1, seed=0)
    assert time.monotonic() - start < 3
  finally:
    s.close()


def test_make_proposer_validates_flags():
  with pytest.raises(ConfigError) as e:
    proposers.make_proposer("gpt")
  assert e.value.field == "proposer"
  with pytest.raises(ConfigError) as e:
    proposers.make_proposer("llm")
  assert e.value.field == "llm_url"
  with pytest.raises(ConfigError) as e:
    proposers.make_proposer("llm", llm_url="ftp://x", llm_model="m")
  assert e.value.field == "llm_url"
  with pytest.raises(ConfigError) as e:
    proposers.make_proposer("llm", llm_url="http://localhost:1/v1", llm_model="", check=False)
  assert e.value.field == "llm_model"
  assert isinstance(proposers.make_proposer("offline"), proposers.OfflineProposer)


def test_extract_program():
  text = "<think>```python\nNAME = 'no'\ndef generate_world(wb, key): pass\n```</think>\n"
  text += (
    "```\nnot code\n```\n```python\nNAME = 'yes'\ndef generate_world(wb, key):\n  return wb\n```"
  )
  assert "yes" in proposers.extract_program(text) and "'no'" not in proposers.extract_program(text)
  assert proposers.extract_program("no code here") is None
  assert proposers.extract_program("```python\nX = 1\n```") == "X = 1\n"


def test_api_docs_cover_the_builder():
  docs = proposers.api_docs()
  for name in task_lib.ALLOWED_ATTRIBUTES:
    assert f"wb.{name}" in docs


@pytest.mark.slow
def test_fake_model_to_admitted_tasks(server):
  """propose (fake model) -> validate (sandbox, full world check) -> admitted sources."""
  p = proposers.LLMProposer(
    server.url, "fake-model", timeout_s=CFG.llm_timeout_s, retries=CFG.llm_retries
  )
  sources = p.propose([{"name": "p", "source": proposers.EXAMPLE}], {}, 1, seed=0)
  offline = proposers.OfflineProposer().propose([{"source": proposers.EXAMPLE}], {}, 3, seed=0)
  verdicts = sandbox.validate(sources + offline, **SANDBOX)
  assert [v.ok for v in verdicts] == [True] * 4, verdicts
  assert verdicts[0].name == "collect_wood_far"
