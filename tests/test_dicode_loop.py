"""DiCode's scoring, replay, curricula and session loop (jaxlab.rl.dicode), and its experiment.

The loop tests run the real loop (PPO-GTrXL through the runtime, the on-disk archive, the LLM
proposer talking to a fake OpenAI-compatible server on localhost, the sandbox's static check and
task compilation, admission by score, kill and resume) on a tiny stand-in for the multitask
Craftax environment, so they compile in seconds; the Craftax end-to-end run is `slow`.
"""

from __future__ import annotations

import functools
import http.server
import json
import pathlib
import threading
import zlib

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from jaxlab.envs import vec
from jaxlab.rl.dicode import curriculum as curriculum_lib
from jaxlab.rl.dicode import scoring
from tests.programs import run_program

ROOT = pathlib.Path(__file__).resolve().parents[1]


# --- scoring ---


def test_learnability_peaks_at_half_and_is_zero_without_episodes():
  p = np.linspace(0.0, 1.0, 101)
  score = scoring.learnability(p, np.full(101, 10))
  assert int(np.argmax(score)) == 50 and score[50] == pytest.approx(0.25)
  np.testing.assert_allclose(score, p * (1 - p), atol=1e-12)
  assert score[0] == 0.0 and score[-1] == 0.0
  assert scoring.learnability(0.5, 0) == 0.0  # no finished episode
  assert scoring.learnability(-1.0, 5) == 0.0  # the "no episode" marker
  np.testing.assert_allclose(scoring.learnability([1.7, -0.2], [3, 3]), [0.0, 0.0])
  np.testing.assert_allclose(scoring.success_rate([3, 0], [4, 0]), [0.75, -1.0])


def _replay_reference(scores, last, session, rho, temp):
  """An independent loop transcription of PLR's rank + staleness mixture."""
  n = len(scores)
  rank = [
    1 + sum(1 for j in range(n) if scores[j] > scores[i] or (scores[j] == scores[i] and j < i))
    for i in range(n)
  ]
  w_rank = [(1.0 / r) ** (1.0 / temp) for r in rank]
  w_rank = [w / sum(w_rank) for w in w_rank]
  stale = [max(0, session - t) for t in last]
  w_stale = [s / sum(stale) for s in stale] if sum(stale) > 0 else [1.0 / n] * n
  return np.array([(1 - rho) * a + rho * b for a, b in zip(w_rank, w_stale)])


def test_replay_weights_sum_to_one_follow_rank_and_match_the_formula():
  rng = np.random.default_rng(0)
  for _ in range(5):
    scores = rng.random(7) * 0.25
    last = rng.integers(0, 6, size=7)
    w = scoring.replay_weights(scores, last, 6, 0.3, 1.0)
    assert w.sum() == pytest.approx(1.0)
    np.testing.assert_allclose(w, _replay_reference(scores, last, 6, 0.3, 1.0), rtol=1e-12)
    np.testing.assert_allclose(
      scoring.replay_weights(scores, last, 6, 0.5, 2.0),
      _replay_reference(scores, last, 6, 0.5, 2.0),
    )
  # equal staleness: the order of the weights is the order of the scores, (1/rank) apart
  scores = np.array([0.1, 0.25, 0.0, 0.2])
  w = scoring.replay_weights(scores, [3, 3, 3, 3], 5, 0.3, 1.0)
  assert list(np.argsort(-w)) == [1, 3, 0, 2]
  ranks = np.array([3, 1, 4, 2])
  expected = 0.7 * (1 / ranks) / np.sum(1 / ranks) + 0.3 / 4
  np.testing.assert_allclose(w, expected)
  # only staleness: proportional to sessions since last trained
  np.testing.assert_allclose(
    scoring.replay_weights(scores, [4, 2, 5, 0], 5, 1.0, 1.0), [1 / 9, 3 / 9, 0, 5 / 9]
  )


def test_episode_weights_give_the_original_game_its_share():
  w = scoring.episode_weights(5, 4, 0.2)
  np.testing.assert_allclose(w, [0.2, 0.2, 0.2, 0.2, 0.2])
  w = scoring.episode_weights(9, 8, 0.2)
  assert w[8] == pytest.approx(0.2) and w[:8] == pytest.approx(np.full(8, 0.1))
  np.testing.assert_allclose(scoring.episode_weights(3, None, 0.2), np.full(3, 1 / 3))


def test_level_score_and_plr_buffer():
  counts = np.array([[2, 0], [4, 4], [0, 0]])
  finished = np.array([4, 4, 0])
  # level 0: q = (0.5, 0) -> (0.25 + 0) / 2; level 1: q = (1, 1) -> 0; level 2: no episode
  np.testing.assert_allclose(curriculum_lib.level_score(counts, finished), [0.125, 0.0, 0.0])
  plr = curriculum_lib.PLR(2, 3, replay_prob=0.0, min_fill=0.5, staleness_coef=0.3, temperature=1.0)
  rng = np.random.default_rng(0)
  for session in range(3):  # replay_prob 0: new levels every session
    plan = plr.plan(session, rng)
    assert plan.kind == "levels" and plan.levels.shape == (2, 2) and plan.size == 2
    stats = {"achievements": np.array([[1, 0], [2, 2]]), "finished": np.array([2, 2])}
    plr.update(plan, stats, session)
  assert len(plr.buffer) == 3  # capacity: the lowest scores left
  assert [v["score"] for v in plr.buffer.values()] == [0.125] * 3  # the 0-scored levels left
  plr.replay_prob = 1.0
  replayed = plr.plan(3, rng)  # filled, replay_prob 1: buffer levels
  assert {int(n.split("_")[1]) for n in replayed.names} <= set(plr.buffer)
  clone = curriculum_lib.PLR(2, 3, 1.0, 0.5, 0.3, 1.0)
  clone.load_state_dict(json.loads(json.dumps(plr.state_dict())))
  assert clone.buffer == plr.buffer


# --- a tiny stand-in for the multitask environment ---

NUM_SLOTS = 16
EPISODE = 3


def _success_prob(name: str, source: str) -> float:
  """A fixed success probability per task program (0 for the original game)."""
  if name == "original":
    return 0.0
  return 0.15 + 0.7 * (zlib.crc32(source.encode()) % 1000) / 1000.0


def toy_env(plan, num_envs: int, config, original_return: float) -> vec.VecEnv:
  """Episodes of EPISODE steps; a unit's episode succeeds with its fixed probability."""
  del config, original_return
  k = plan.size
  if plan.kind == "tasks":
    probs = jnp.asarray([_success_prob(n, s) for n, s in zip(plan.names, plan.sources)])
    slots = jnp.asarray(plan.slots, jnp.int32)
  else:
    probs, slots = jnp.full((k,), 0.3), jnp.zeros((k,), jnp.int32)
  logw = jnp.log(jnp.asarray(plan.weights, jnp.float32))

  def observe(task, t):
    hot = jax.nn.one_hot(slots[task], NUM_SLOTS)
    return jnp.concatenate([hot, (t / EPISODE)[:, None]], axis=1)

  def reset(key):
    task = jax.random.categorical(key, logw, shape=(num_envs,)).astype(jnp.int32)
    t = jnp.zeros((num_envs,), jnp.float32)
    return observe(task, t), vec.init_state({"task": task, "t": t}, num_envs)

  def step(state, action, key):
    k_new, k_succ = jax.random.split(key)
    task, t = state.env["task"], state.env["t"] + 1
    done = t >= EPISODE
    success = done & (jax.random.uniform(k_succ, (num_envs,)) < probs[task])
    reward = success.astype(jnp.float32) + 0.01 * (action == 1)
    new_task = jax.random.categorical(k_new, logw, shape=(num_envs,)).astype(jnp.int32)
    nxt = {"task": jnp.where(done, new_task, task), "t": jnp.where(done, 0.0, t)}
    vstate, info = vec.track(state, nxt, reward, done)
    info["task"], info["success"] = task, success
    ach = jnp.stack([success, ~success], axis=1) & done[:, None]
    info["achievements"] = ach.astype(jnp.float32)
    return observe(nxt["task"], nxt["t"]), vstate, reward, done, info

  return vec.VecEnv("toy", num_envs, (NUM_SLOTS + 1,), 2, 0, ("win", "lose"), 2.0, reset, step)


def light_validate(sources):
  """The sandbox's static check and task compilation, without building Craftax worlds."""
  from jaxlab.rl.dicode import sandbox, task

  out = []
  for src in sources:
    reasons = sandbox.check_source(src)
    if reasons:
      out.append(sandbox.Verdict(False, reasons[0]))
      continue
    try:
      t = task.compile_task(src)
    except task.TaskError as e:
      out.append(sandbox.Verdict(False, str(e)))
      continue
    out.append(sandbox.Verdict(True, "", t.name, {}))
  return out


def tiny_config(**overrides) -> ml_collections.ConfigDict:
  from jaxlab.rl import dicode

  c = dicode.get_config()
  c.sessions, c.updates_per_session, c.score_window = 2, 2, 2
  c.tasks_per_session, c.evolve_every, c.proposals, c.parents = 5, 1, 3, 2
  c.capacity, c.num_slots = 7, NUM_SLOTS
  c.ppo.num_envs, c.ppo.num_steps, c.ppo.minibatches = 8, 6, 2
  g = c.ppo.gtrxl
  g.embed, g.num_heads, g.window, g.ffn, g.head_hidden = 8, 1, 4, 8, (8,)
  for k, v in overrides.items():
    c[k] = v
  return c


# --- a fake OpenAI-compatible model server ---

GOOD = """NAME = "wood_{i}"
DESCRIPTION = "Trees two tiles away; collect wood (variant {i})."
RELEVANT_ACHIEVEMENTS = ("COLLECT_WOOD",)
TASK_PARAMS = dict(needs_depletion={m})


def generate_world(wb, key):
  k1, k2 = wb.split(key)
  return wb.place_randomly_near(k1, "TREE", count=3, distance=2)
"""
BAD = (
  'import os\nNAME = "evil"\nRELEVANT_ACHIEVEMENTS = ("COLLECT_WOOD",)\n\n'
  "def generate_world(wb, key):\n  return wb\n"
)


class FakeModel(http.server.BaseHTTPRequestHandler):
  calls: list = []

  def log_message(self, *args):
    del args

  def _reply(self, body: dict):
    data = json.dumps(body).encode()
    self.send_response(200)
    self.send_header("Content-Type", "application/json")
    self.send_header("Content-Length", str(len(data)))
    self.end_headers()
    self.wfile.write(data)

  def do_GET(self):
    self._reply({"data": [{"id": "fake-model"}]})

  def do_POST(self):
    body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
    FakeModel.calls.append(body)
    i = len(FakeModel.calls)
    program = BAD if i % 3 == 0 else GOOD.format(i=i, m=0.25 * (i % 4 + 1))
    text = f"Here is the child.\n```python\n{program}```\n"
    self._reply({"choices": [{"message": {"role": "assistant", "content": text}}]})


@pytest.fixture(scope="module")
def fake_model():
  server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeModel)
  thread = threading.Thread(target=server.serve_forever, daemon=True)
  thread.start()
  yield f"http://127.0.0.1:{server.server_address[1]}/v1"
  server.shutdown()
  server.server_close()


def _make_loop(workdir, url, config, hooks_make_env=toy_env, validate=light_validate):
  from jaxlab.rl.dicode import evolution, loop, proposers, seeds

  sources = seeds.load_seed_tasks()
  archive = evolution.open_archive(workdir / "archive", sources, config.num_slots)
  cur = curriculum_lib.DiCode(
    archive,
    sources["original"],
    config.tasks_per_session,
    config.original_proportion,
    config.staleness_coef,
    config.temperature,
    original_slot=config.num_slots - 1,
  )
  proposer = proposers.make_proposer(
    "llm",
    llm_url=url,
    llm_model="fake-model",
    llm_api_key="k",
    llm_timeout_s=config.llm_timeout_s,
    llm_retries=config.llm_retries,
  )
  hooks = loop.Hooks(make_env=hooks_make_env, validate=validate)
  return loop.Loop(
    workdir,
    config,
    cur,
    seed=0,
    archive=archive,
    proposer=proposer,
    hooks=hooks,
    log=lambda s: None,
  )


@pytest.fixture(scope="module")
def dicode_run(tmp_path_factory, fake_model):
  """Session 0 and an evolution round, a 'kill' (the process stops between sessions, and an
  orphan candidate is planted as an interrupted round would leave it), a resume for session 1."""
  workdir = tmp_path_factory.mktemp("dicode")
  config = tiny_config()
  first = _make_loop(workdir, fake_model, config)
  first.run(stop_after=1)
  before = {r["id"]: dict(r) for r in first.archive.records()}
  params_before = jax.device_get(first.carried["train"].params)
  # an evolution round killed after the archive wrote a candidate, before the loop committed
  from jaxlab.rl.dicode import sandbox

  orphan = first.archive.add(GOOD.format(i=99, m=1.0), 0, 1, sandbox.Verdict(True, "", "wood_99"))
  second = _make_loop(workdir, fake_model, config)
  second.load()
  restored = second.agent_params(
    toy_env(second.curriculum.plan(1, np.random.default_rng(0)), 8, config, 0.0)
  )
  state = second.run()
  return dict(
    workdir=workdir,
    first=first,
    second=second,
    before=before,
    state=state,
    params_before=params_before,
    restored=restored,
    orphan=orphan,
  )


def test_fake_model_drives_propose_validate_evaluate_admit(dicode_run):
  second, state = dicode_run["second"], dicode_run["state"]
  assert state["session"] == 2 and len(state["history"]) == 2
  assert len(FakeModel.calls) == 3  # one request per proposal, one round (none after the last)
  records = second.archive.records()
  proposed = [r for r in records if r["generation"] > 0 and r["id"] != dicode_run["orphan"]]
  rejected = [r for r in proposed if r["status"] == "rejected"]
  assert any("import" in r["reason"] for r in rejected), [r["reason"] for r in rejected]
  admitted = [r for r in proposed if r["status"] in ("admitted", "retired")]
  assert admitted, [(r["status"], r["reason"]) for r in proposed]
  for r in admitted:
    assert r["parent"] is not None and r["scores"], r
    assert all(0.0 <= s["score"] <= 0.25 for s in r["scores"])
    assert (dicode_run["workdir"] / "archive" / r["dir"] / "task.py").read_text().startswith("NAME")
  # every trained archive task carries its learnability from the session's counts
  trained = [r for r in records if r.get("finished")]
  assert trained and all(
    r["score"] == pytest.approx(scoring.learnability(r["success_rate"], r["finished"]))
    for r in trained
  )
  assert any(r["score"] > 0 for r in trained)
  index = json.loads((dicode_run["workdir"] / "archive" / "archive.json").read_text())
  assert len(index["tasks"]) == len(records)


def test_killed_loop_resumes_with_its_archive_intact(dicode_run):
  before, second = dicode_run["before"], dicode_run["second"]
  after = {r["id"]: r for r in second.archive.records()}
  for task_id, rec in before.items():  # nothing written before the kill is lost
    assert task_id in after
    assert after[task_id]["scores"][: len(rec["scores"])] == rec["scores"]
    assert after[task_id]["dir"] == rec["dir"]
  orphan = after[dicode_run["orphan"]]
  assert orphan["status"] == "rejected" and "interrupted" in orphan["reason"]
  # the agent restored at session 2 is the one committed by the first process
  same = jax.tree.map(
    lambda a, b: np.array_equal(np.asarray(a), np.asarray(b)),
    dicode_run["params_before"],
    dicode_run["restored"],
  )
  assert all(jax.tree.leaves(same))
  sessions = [h["session"] for h in dicode_run["state"]["history"]]
  assert sessions == [0, 1]
  state_file = json.loads((dicode_run["workdir"] / "loop_state.json").read_text())
  assert state_file["session"] == 2


def test_resume_checks_accept_a_real_run(dicode_run):
  from jaxlab.rl.dicode import runner

  workdir = dicode_run["workdir"]
  assert (workdir / "archive" / "tasks").is_dir() and dicode_run["state"]["session"] == 2
  runner.check_resume(workdir, "dicode", 2, NUM_SLOTS)  # the loop's own files pass: no false alarm


def test_dicode_plan_mixes_candidates_replay_and_the_original_game(dicode_run):
  cur = dicode_run["second"].curriculum
  cur.candidates = [r["id"] for r in cur.archive.records() if r["status"] == "rejected"][:1]
  plan = cur.plan(9, np.random.default_rng(1))
  assert plan.names[-1] == "original" and plan.weights[-1] == pytest.approx(0.2)
  assert plan.weights.sum() == pytest.approx(1.0) and plan.size <= 5
  assert plan.ids[0] == cur.candidates[0] and plan.candidates == cur.candidates
  assert len(set(plan.slots)) == plan.size and plan.slots[-1] == NUM_SLOTS - 1
  cur.candidates = []


# --- the experiment program ---


@pytest.mark.parametrize(
  "args,flag",
  [
    (["--curriculum=bogus"], "curriculum"),
    (["--proposer=llm"], "llm_url"),
    (["--steps=5"], "steps"),
    (["--seeds=0"], "seeds"),
    (["--seeds=1,1"], "seeds"),
  ],
)
def test_bad_flags_exit_2_with_one_line(tmp_path, args, flag):
  r = run_program("experiments.dicode", args, tmp_path, timeout=300)
  assert r.returncode == 2, r.stderr[-2000:]
  lines = [ln for ln in r.stderr.strip().splitlines() if ln.startswith("error:")]
  assert lines and lines[-1].startswith(f"error: --{flag}:"), r.stderr[-2000:]
  assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
  "field,value",
  [
    ("score_window", 99),
    ("staleness_coef", float("nan")),
    ("original_proportion", 1.5),
    ("num_slots", 8),
    ("ppo.minibatches", 3),
    ("ppo.gtrxl.num_heads", 3),
    ("bonus", "sometimes"),
    ("ppo.gtrxl.head_hidden", (0,)),
    ("llm_timeout_s", float("inf")),
  ],
)
def test_config_validation_names_the_field(field, value):
  from jaxlab.core.errors import ConfigError
  from jaxlab.rl import dicode

  config = tiny_config()
  dicode.validate_config(config, "dicode")  # the test config itself is valid
  *parents, leaf = field.split(".")
  node = config
  for p in parents:
    node = node[p]
  node[leaf] = value
  with pytest.raises(ConfigError) as e:
    dicode.validate_config(config, "dicode")
  assert e.value.field == f"config.{field}"


def test_unreachable_model_endpoint_exits_2_before_writing(tmp_path):
  import socket

  with socket.socket() as s:  # a port nothing listens on
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  args = [
    "--proposer=llm",
    f"--llm_url=http://127.0.0.1:{port}/v1",
    "--llm_model=m",
    f"--workdir={tmp_path / 'run'}",
  ]
  r = run_program("experiments.dicode", args, tmp_path, timeout=300)
  assert r.returncode == 2 and "error: --llm_url:" in r.stderr, r.stderr[-2000:]
  assert not (tmp_path / "run").exists()


class _NotFound(http.server.BaseHTTPRequestHandler):
  """A web server that is not an OpenAI-compatible endpoint: every path is a 404."""

  def do_GET(self):
    self.send_response(404)
    self.end_headers()
    self.wfile.write(b"no such page")

  do_POST = do_GET

  def log_message(self, *args):
    pass


def _snapshot(root: pathlib.Path) -> dict:
  return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _one_error(r, flag: str) -> None:
  errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
  assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
  assert len(errors) == 1 and errors[0].startswith(f"error: --{flag}:"), r.stderr[-2000:]


@pytest.mark.parametrize("case", ["port", "404"])
def test_wrong_model_endpoint_exits_2_writing_nothing_not_even_a_cache(tmp_path, case):
  server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NotFound)
  threading.Thread(target=server.serve_forever, daemon=True).start()
  port = "abc" if case == "port" else server.server_address[1]
  home = tmp_path / "home"
  home.mkdir()
  args = ["--proposer=llm", f"--llm_url=http://127.0.0.1:{port}/v1", "--llm_model=m"]
  try:
    r = run_program(
      "experiments.dicode",
      [*args, f"--workdir={tmp_path / 'run'}"],
      tmp_path,
      env={"HOME": str(home)},
      drop=("XDG_CACHE_HOME", "JAXLAB_COMPILE_CACHE"),
      timeout=120,
    )
  finally:
    server.shutdown()
  _one_error(r, "llm_url")
  assert ("numeric port" if case == "port" else "HTTP 404") in r.stderr
  assert sorted(p.name for p in tmp_path.iterdir()) == ["home"] and not any(home.iterdir())


@pytest.mark.parametrize("content", ["not json {", "{}", '{"eval/return": "high"}'])
def test_compare_checks_every_summary_before_writing(tmp_path, content):
  good, bad = tmp_path / "good", tmp_path / "bad"
  for d in (good, bad / "seed0"):
    d.mkdir(parents=True)
  (good / "summary.json").write_text(json.dumps({"eval/return": 1.0, "eval/return_pct": 0.5}))
  (bad / "seed0" / "summary.json").write_text(content)
  out = tmp_path / "out"
  args = [f"--compare={good},{bad}", f"--workdir={out}"]
  r = run_program("experiments.dicode", args, tmp_path, timeout=120)
  _one_error(r, "compare")
  assert "seed0/summary.json" in r.stderr and not out.exists()


def _archived(workdir: pathlib.Path, source: str, **meta) -> None:
  d = workdir / "archive" / "tasks" / "00000-seed"
  d.mkdir(parents=True)
  (d / "task.py").write_text(source)
  record = {"id": 0, "name": "seed", "dir": "tasks/00000-seed", "parent": None, "generation": 0}
  record.update(status="admitted", reason="", info={}, slot=0, score=0.0, scores=[])
  (d / "meta.json").write_text(json.dumps({**record, **meta}))


def _seed_source() -> str:
  from jaxlab.rl.dicode import seeds

  return next(v for k, v in sorted(seeds.load_seed_tasks().items()) if k != "original")


@pytest.mark.parametrize(
  "case", ["state_not_json", "state_lacks_session", "no_agent", "meta", "slot", "rejected"]
)
def test_resume_of_a_damaged_workdir_exits_2_and_changes_nothing(tmp_path, case):
  """Each file a resume relies on is read and checked before anything runs or is written."""
  from jaxlab.rl.dicode import runner

  wd = tmp_path / "run"
  wd.mkdir()
  state = {"session": 0, "original_return": 0.0, "original_success": {}, "history": []}
  state.update(evolution=[], curriculum={})
  if case == "state_not_json":
    (wd / "loop_state.json").write_text("{ truncated")
  elif case == "no_agent":
    (wd / "loop_state.json").write_text(json.dumps({**state, "session": 2}))
  elif case == "state_lacks_session":
    (wd / "loop_state.json").write_text(
      json.dumps({k: v for k, v in state.items() if k != "session"})
    )
  else:
    (wd / "loop_state.json").write_text(json.dumps(state))
  source = _seed_source()
  if case == "meta":
    _archived(wd, source)
    meta = wd / "archive" / "tasks" / "00000-seed" / "meta.json"
    meta.write_text(
      json.dumps({k: v for k, v in json.loads(meta.read_text()).items() if k != "status"})
    )
  elif case == "slot":
    _archived(wd, source, slot=10**30)
  elif case == "rejected":
    _archived(wd, "import os\n" + source)
  before = _snapshot(wd)
  with pytest.raises(runner.ConfigError) as e:  # in-process: the check itself
    runner.check_resume(wd, "dicode", 3, NUM_SLOTS)
  assert e.value.field == "workdir"
  name = {"meta": "meta.json", "slot": "meta.json", "rejected": "task.py"}.get(
    case, "loop_state.json"
  )
  assert name in e.value.message
  if case == "rejected":  # and through the program: one line, nothing changed
    r = run_program("experiments.dicode", [f"--workdir={wd}"], tmp_path, timeout=120)
    _one_error(r, "workdir")
    assert "task.py" in r.stderr
  assert _snapshot(wd) == before


@pytest.mark.parametrize("where", ["dotdot", "absolute", "link"])
def test_archive_paths_stay_inside_the_workdir(tmp_path, where):
  """A meta.json (or a task directory) pointing out of the archive is refused before any write."""
  from jaxlab.core.errors import ConfigError
  from jaxlab.rl.dicode import evolution, seeds

  wd, outside = tmp_path / "run", tmp_path / "outside"
  outside.mkdir()
  if where == "link":
    (wd / "archive" / "tasks").mkdir(parents=True)
    (wd / "archive" / "tasks" / "00000-seed").symlink_to(outside, target_is_directory=True)
    (outside / "task.py").write_text(_seed_source())
    (outside / "stale.tmp").write_text("kept")
  else:
    target = "tasks/../../../outside" if where == "dotdot" else str(outside)
    _archived(wd, _seed_source(), dir=target)
  with pytest.raises(ConfigError) as e:
    evolution.open_archive(wd / "archive", seeds.load_seed_tasks(), NUM_SLOTS)
  assert e.value.field == "workdir" and "00000-seed" in e.value.message
  assert "\n" not in str(e.value)
  assert sorted(p.name for p in outside.iterdir()) == ([] if where != "link" else
                                                      ["stale.tmp", "task.py"])  # fmt: skip


LOOPING = """NAME = "loops"
RELEVANT_ACHIEVEMENTS = ("COLLECT_WOOD",)


def spin(n):
  t = 0
  for i in range(n):
    for j in range(n):
      t = t + 1
  return t


X = spin(100000)


def generate_world(wb, key):
  return wb
"""


def test_resume_revalidates_archived_tasks_in_the_sandbox(tmp_path, fake_model):
  """A task the archive calls validated runs through the validator again (here: the in-process
  load with a small CPU limit standing in for the worker's) and stops the run with one line."""
  from jaxlab.core.errors import ConfigError
  from jaxlab.rl.dicode import sandbox

  asked = []

  def validate(sources):
    asked.extend(sources)
    out = []
    for src in sources:
      try:
        out.append(sandbox.Verdict(True, "", sandbox.load(src, cpu_s=0.5).name))
      except sandbox.task_lib.TaskError as e:
        out.append(sandbox.Verdict(False, str(e)))
    return out

  wd = tmp_path / "run"
  first = _make_loop(wd, fake_model, tiny_config(), validate=validate)
  task_id = first.archive.add(LOOPING, 0, 1, sandbox.Verdict(True, "", "loops"))
  second = _make_loop(wd, fake_model, tiny_config(), validate=validate)
  with pytest.raises(ConfigError) as e:
    second.run()
  assert asked == [LOOPING]  # the shipped seed tasks are not re-run
  assert e.value.field == "workdir" and "time limit" in e.value.message
  assert second.archive.get(task_id)["dir"] in e.value.message and "task.py" in e.value.message


def test_resume_check_loads_a_looping_task_under_a_cpu_limit(tmp_path, monkeypatch):
  from jaxlab.rl.dicode import runner, sandbox

  monkeypatch.setattr(sandbox, "LOAD_CPU_S", 0.5)
  wd = tmp_path / "run"
  _archived(wd, LOOPING, status="validated", slot=None)
  with pytest.raises(runner.ConfigError) as e:
    runner.check_resume(wd, "dicode", 3, NUM_SLOTS)
  assert e.value.field == "workdir" and "time limit" in e.value.message
  assert "task.py" in e.value.message


@pytest.mark.parametrize(
  "url", ["http://[::1/v1", "http://[zz]:80", "http://[::1]:99999/v1", "http://h:x/v1"]
)
def test_malformed_llm_url_is_one_config_error(url):
  from jaxlab.core.errors import ConfigError
  from jaxlab.rl.dicode import proposers, runner

  with pytest.raises(ConfigError) as e:
    runner.proposer_settings("llm", url, "m")
  assert e.value.field == "llm_url" and url in e.value.message
  with pytest.raises(ConfigError) as e:
    proposers.make_proposer("llm", llm_url=url, llm_model="m", llm_timeout_s=1, llm_retries=0)
  assert e.value.field == "llm_url"


def test_rerun_of_a_finished_run_reports_its_record_and_writes_nothing(tmp_path, capsys):
  from jaxlab.core import metrics
  from jaxlab.rl.dicode import runner

  config, settings = tiny_config(), runner.proposer_settings("offline")
  wd = tmp_path / "run"
  wd.mkdir()
  metrics.write_json(wd / "config.json", runner.recorded_config(config, "none", {"kind": None}, 0))
  (wd / "summary.json").write_text(json.dumps({"eval/return": 1.5, "eval/return_pct": 0.7}))
  (wd / "loop_state.json").write_text("{ a file a finished run no longer reads")
  before = _snapshot(wd)
  summary = runner.run(wd, config, "none", settings, 0)
  assert summary["eval/return"] == 1.5 and "unchanged" in capsys.readouterr().out
  assert _snapshot(wd) == before and sorted(p.name for p in wd.iterdir()) == sorted(before)


@pytest.mark.parametrize(
  "field,value,message",
  [("pool_size", 10**6, "needs about"), ("pool_size", 3 * 10**9, "overflows")],
)
def test_sizes_that_cannot_fit_are_refused_before_allocation(field, value, message):
  from jaxlab.core.errors import ConfigError
  from jaxlab.rl import dicode

  config = tiny_config(**{field: value})
  with pytest.raises(ConfigError) as e:
    dicode.validate_config(config, "dicode")
  assert e.value.field == f"config.{field}" and message in e.value.message


def test_busy_workdir_is_refused_before_anything_runs(tmp_path):
  import fcntl

  wd, home = tmp_path / "run", tmp_path / "home"
  wd.mkdir()
  home.mkdir()
  with open(wd / ".lock", "a+") as lock:  # another process's run holds the workdir
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    lock.write("12345")
    lock.flush()
    before = _snapshot(wd)
    r = run_program(
      "experiments.dicode",
      ["--curriculum=none", f"--workdir={wd}"],
      tmp_path,
      env={"HOME": str(home)},
      drop=("XDG_CACHE_HOME", "JAXLAB_COMPILE_CACHE"),
      timeout=120,
    )
  _one_error(r, "workdir")
  assert "in use" in r.stderr and _snapshot(wd) == before and not any(home.iterdir())


def test_pool_that_cannot_fit_exits_2_before_writing(tmp_path):
  r = run_program(
    "experiments.dicode", ["--config.pool_size=1000000", f"--workdir={tmp_path / 'w'}"], tmp_path
  )
  _one_error(r, "config.pool_size")
  assert "needs about" in r.stderr and list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_experiment_end_to_end_on_craftax(tmp_path):
  """The offline loop on Craftax-Symbolic at a tiny budget: archive, scores, evaluation."""
  args = [
    f"--workdir={tmp_path / 'run'}",
    "--config.sessions=2",
    "--config.updates_per_session=2",
    "--config.score_window=1",
    "--config.evolve_every=1",
    "--config.proposals=2",
    "--config.ppo.num_envs=8",
    "--config.ppo.num_steps=16",
    "--config.ppo.eval_envs=8",
    "--config.ppo.eval_steps=50",
    "--videos=0",  # test_experiment_writes_an_evaluation_video renders
  ]
  r = run_program("experiments.dicode", args, tmp_path, timeout=3600)
  assert r.returncode == 0, r.stderr[-3000:]
  summary = json.loads((tmp_path / "run" / "summary.json").read_text())
  assert summary["sessions"] == 2 and np.isfinite(summary["eval/return"])
  assert not (tmp_path / "run" / "videos").exists()
  assert summary["archive"]["by_status"]["admitted"] >= 1
  assert summary["archive"]["top"] and "score" in summary["archive"]["top"][0]
  assert (tmp_path / "run" / "achievements.png").exists()
  r = run_program(
    "experiments.dicode",
    [f"--compare={tmp_path / 'run'}", f"--workdir={tmp_path / 'cmp'}"],
    tmp_path,
  )
  assert r.returncode == 0 and (tmp_path / "cmp" / "comparison.png").exists(), r.stderr[-2000:]


@pytest.mark.slow
def test_experiment_writes_an_evaluation_video(tmp_path):
  """By default the held-out evaluation writes videos/eval_<env steps>.gif: the final agent
  playing the original game, several frames (craftax's pixel renderer inside the rollout)."""
  from PIL import Image

  args = [
    f"--workdir={tmp_path / 'run'}",
    "--curriculum=none",
    "--config.sessions=1",
    "--config.updates_per_session=2",
    "--config.ppo.num_envs=8",
    "--config.ppo.num_steps=16",
    "--config.ppo.eval_envs=8",
    "--config.ppo.eval_steps=50",
  ]
  r = run_program("experiments.dicode", args, tmp_path, timeout=3600)
  assert r.returncode == 0, r.stderr[-3000:]
  summary = json.loads((tmp_path / "run" / "summary.json").read_text())
  gifs = list((tmp_path / "run" / "videos").glob("eval_*.gif"))
  assert [g.name for g in gifs] == [f"eval_{summary['env_steps']}.gif"], gifs
  with Image.open(gifs[0]) as gif:
    assert gif.n_frames > 1 and min(gif.size) > 1


def test_pool_cache_builds_each_program_once_and_keeps_it_on_disk(tmp_path, monkeypatch):
  """Pools are built once per program (in memory, then from <root>/<hash>.npz after a restart);
  a file of another pool size is rebuilt. `build_pool` is replaced by a counter over tiny
  arrays shaped like craftax worlds, so nothing compiles."""
  from jaxlab.rl.dicode import multitask, seeds, world
  from jaxlab.rl.dicode import pools as pools_lib

  ref = jax.eval_shape(world.base_world, jax.random.key(0))
  built = []

  def fake_build(task, key, pool_size, base=None):
    built.append((task.name, int(jax.random.key_data(key)[-1])))

    def leaf(s):
      if jax.dtypes.issubdtype(s.dtype, jax.dtypes.prng_key):
        return jax.random.split(key, pool_size)
      return jnp.full((pool_size, *s.shape), len(built), s.dtype)

    return jax.tree.map(leaf, ref)

  monkeypatch.setattr(multitask, "build_pool", fake_build)
  src = seeds.load_seed_tasks()["collect_coal"]
  cache = pools_lib.PoolCache(2, seed=3, root=tmp_path)
  pool = cache.pool(src)
  assert cache.pool(src) is pool and len(built) == 1
  again = pools_lib.PoolCache(2, seed=3, root=tmp_path).pool(src)  # a restarted run
  assert len(built) == 1
  np.testing.assert_array_equal(np.asarray(again.map), np.asarray(pool.map))
  assert pools_lib.PoolCache(3, seed=3, root=tmp_path).pool(src).map.shape[0] == 3
  assert len(built) == 2  # another pool size: rebuilt
  assert pools_lib.is_original("original", seeds.load_seed_tasks()["original"])
  assert not pools_lib.is_original("original", src)


@pytest.mark.slow
def test_sessions_with_different_task_sets_lower_to_one_program():
  """Two DiCode sessions over different task sets: the whole PPO chunk (GTrXL + the Craftax
  multitask step) lowers to the same text, so the persistent cache compiles it once per run."""
  from jaxlab.core import runtime
  from jaxlab.rl import ppo
  from jaxlab.rl.dicode import counters, pools, seeds, training

  c = tiny_config()
  c.num_slots, c.pool_size, c.ppo.num_envs, c.ppo.num_steps = 8, 2, 4, 2
  src = seeds.load_seed_tasks()
  cache = pools.PoolCache(c.pool_size)
  texts = []
  for name in ("collect_coal", "defeat_zombie"):
    plan = curriculum_lib.SessionPlan(
      "tasks", [name, "original"], np.array([0.8, 0.2]), [src[name], src["original"]], [0, 7]
    )
    env = pools.default_make_env(plan, c.ppo.num_envs, c, 1.0, cache)
    env = counters.counted(env, pools.num_units(plan, c), 0)
    policy = training.make_policy(env.num_actions, c)
    cfg = training.ppo_config(c)
    state = ppo.init(env, policy, cfg, jax.random.key(0))
    chunk = runtime.make_chunk_fn(ppo.make_update(env, policy, cfg))
    i32 = jax.ShapeDtypeStruct((), jnp.int32)
    texts.append(chunk.jitted.lower(state, None, jax.random.key(1), i32, i32, 2).as_text())
  assert texts[0] == texts[1]


# --- one program trains, evaluates and scores ---


@functools.lru_cache(maxsize=4)
def _data_step(num_envs: int):
  """A toy step whose task data (success probabilities, slots, weights) lives in the state, as
  in the multitask environment: one function, so one program, for every task set."""

  def step(state, action, key):
    k_new, k_succ = jax.random.split(key)
    e = state.env
    t = e["t"] + 1
    done = t >= EPISODE
    success = done & (jax.random.uniform(k_succ, (num_envs,)) < e["probs"][e["task"]])
    reward = success.astype(jnp.float32) + 0.01 * (action == 1)
    new_task = jax.random.categorical(k_new, e["logw"], shape=(num_envs,)).astype(jnp.int32)
    nxt = {**e, "task": jnp.where(done, new_task, e["task"]), "t": jnp.where(done, 0.0, t)}
    vstate, info = vec.track(state, nxt, reward, done)
    info["task"], info["success"] = e["task"], success
    info["achievements"] = (jnp.stack([success, ~success], 1) & done[:, None]).astype(jnp.float32)
    return _data_obs(nxt), vstate, reward, done, info

  return step


def _data_obs(e):
  hot = jax.nn.one_hot(e["slots"][e["task"]], NUM_SLOTS)
  return jnp.concatenate([hot, (e["t"] / EPISODE)[:, None]], axis=1)


def data_toy_env(plan, num_envs: int, config, original_return: float) -> vec.VecEnv:
  del original_return
  k = max(config.tasks_per_session, config.levels_per_session, plan.size)
  probs = np.zeros(k, np.float32)
  probs[: plan.size] = [_success_prob(n, s) for n, s in zip(plan.names, plan.sources)]
  slots = np.zeros(k, np.int32)
  slots[: plan.size] = plan.slots
  logw = np.full(k, -np.inf, np.float32)
  logw[: plan.size] = np.log(plan.weights)

  def reset(key):
    task = jax.random.categorical(key, logw, shape=(num_envs,)).astype(jnp.int32)
    e = {"task": task, "t": jnp.zeros((num_envs,), jnp.float32), "probs": jnp.asarray(probs)}
    e.update(slots=jnp.asarray(slots), logw=jnp.asarray(logw))
    return _data_obs(e), vec.init_state(e, num_envs)

  step = _data_step(num_envs)
  return vec.VecEnv("toy", num_envs, (NUM_SLOTS + 1,), 2, 0, ("win", "lose"), 2.0, reset, step)


def test_sessions_and_a_no_learning_play_run_one_compiled_program(tmp_path):
  from jaxlab.rl.dicode import loop as loop_lib
  from jaxlab.rl.dicode import seeds

  c = tiny_config()
  cur = curriculum_lib.DomainRandomization(seeds.load_seed_tasks())
  hooks = loop_lib.Hooks(make_env=data_toy_env, validate=light_validate)
  run = loop_lib.Loop(tmp_path / "r", c, cur, hooks=hooks, log=lambda s: None)
  traced = []

  def listen(event, duration, **kw):
    del duration
    if event == "/jax/core/compile/jaxpr_trace_duration" and kw.get("fun_name") == "chunk":
      traced.append(1)

  jax.monitoring.register_event_duration_secs_listener(listen)
  try:
    run.run()
    plan = cur.plan(2, np.random.default_rng(0))
    params = jax.device_get(run.carried["train"].params)
    played = run.play(plan, 2 * c.updates_per_session * c.ppo.num_steps, jax.random.key(5))
  finally:
    jax.monitoring.unregister_event_duration_listener(listen)
  assert len(traced) == 1  # two sessions and the play: the PPO chunk traced (compiled) once
  assert int(played.t) == 2 * c.updates_per_session * c.ppo.num_steps
  assert np.asarray(played.first_done).all()  # 3-step episodes all ended
  after = jax.device_get(run.carried["train"].params)
  jax.tree.map(np.testing.assert_array_equal, params, after)  # playing never learns


def test_update_with_learning_equals_ppo_and_without_leaves_the_agent():
  """The update DiCode runs, ``ppo.make_update(..., gated=True)``, is PPO's iteration (same
  keys, same numbers) when it learns, and a rollout that leaves the parameters and optimizer
  untouched when it does not."""
  from jaxlab.rl import ppo
  from jaxlab.rl.dicode import seeds, training

  c = tiny_config()
  cur = curriculum_lib.DomainRandomization(seeds.load_seed_tasks())
  env = data_toy_env(cur.plan(0, np.random.default_rng(0)), c.ppo.num_envs, c, 0.0)
  policy = training.make_policy(env.num_actions, c)
  cfg = training.ppo_config(c)
  state = ppo.init(env, policy, cfg, jax.random.key(0))
  key = jax.random.key(3)
  ours = ppo.make_update(env, policy, cfg, gated=True)
  got, m_got = jax.jit(ours)(state, jnp.asarray(True), key)
  want, m_want = jax.jit(ppo.make_update(env, policy, cfg))(state, None, key)
  jax.tree.map(
    lambda a, b: np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6),
    got.train.params,
    want.train.params,
  )
  assert set(m_got) == set(m_want)
  for name in m_want:
    np.testing.assert_allclose(np.asarray(m_got[name]), np.asarray(m_want[name]), rtol=1e-5)
  frozen, _ = jax.jit(ours)(state, jnp.asarray(False), key)
  jax.tree.map(np.testing.assert_array_equal, frozen.train.params, state.train.params)
  assert int(frozen.train.step) == int(state.train.step)
  jax.tree.map(np.testing.assert_array_equal, frozen.obs, want.obs)  # the same rollout


def test_first_episode_record_matches_a_numpy_transcription():
  """Counted's per-environment first episode (the evaluation's record): return and length up to
  the first end or ``stop`` steps, achievements at that end; later episodes ignored."""
  from jaxlab.rl.dicode import counters

  n, steps, stop = 3, 9, 7
  lengths = np.array([2, 4, 9])  # env 2 never ends within stop

  def reset(key):
    del key
    return jnp.zeros((n, 1)), vec.init_state({"t": jnp.zeros((n,), jnp.int32)}, n)

  def step(state, action, key):
    del key
    t = state.env["t"] + 1
    done = t >= jnp.asarray(lengths)
    reward = 0.5 * action.astype(jnp.float32) + 0.1 * t
    vstate, info = vec.track(state, {"t": jnp.where(done, 0, t)}, reward, done)
    info["achievements"] = jnp.stack([done, t % 2 == 0], 1).astype(jnp.float32)
    return jnp.zeros((n, 1)), vstate, reward, done, info

  env = counters.counted(vec.VecEnv("toy", n, (1,), 2, 0, ("a", "b"), 1.0, reset, step), 1, 0, stop)
  _, s = env.reset(jax.random.key(0))
  actions = np.arange(steps * n).reshape(steps, n) % 2
  for i in range(steps):
    _, s, _, _, _ = env.step(s, jnp.asarray(actions[i]), jax.random.key(i))
  got = counters.first_episodes(s)
  ret, length, done = np.zeros(n), np.zeros(n, int), np.zeros(n, bool)
  ach = np.zeros((n, 2))
  for e in range(n):
    t = 0
    for i in range(min(steps, stop)):
      t += 1
      ret[e] += 0.5 * actions[i, e] + 0.1 * t
      length[e] += 1
      if t >= lengths[e]:
        done[e], ach[e] = True, [1.0, float(t % 2 == 0)]
        break
  np.testing.assert_allclose(got["return"], ret, rtol=1e-6)
  np.testing.assert_array_equal(got["length"], length)
  np.testing.assert_array_equal(got["finished"], done)
  np.testing.assert_array_equal(got["achievements"], ach)


# --- several seeds trained together (runner.run_seeds, loop.run_together) ---


def any_plan_toy_env(plan, num_envs: int, config, original_return: float) -> vec.VecEnv:
  """`data_toy_env` for every kind of plan: a level (or the plain game) is a unit named by itself,
  its success probability drawn from its name."""
  import dataclasses

  if not plan.sources:
    plan = dataclasses.replace(plan, sources=list(plan.names), slots=[0] * plan.size)
  return data_toy_env(plan, num_envs, config, original_return)


def seeds_config():
  c = tiny_config()
  c.ppo.eval_envs, c.ppo.eval_steps = 8, 12
  c.sfl_candidates, c.sfl_rollout_steps = 8, 12
  return c


SEEDS_CURRICULA = curriculum_lib.CURRICULA  # after the first, each costs about a second


@pytest.fixture(scope="module")
def seeds_runs(tmp_path_factory):
  """Per curriculum: seeds 0 and 1 trained together (runner.run_seeds: the vmapped PPO program)
  and each seed alone (runner.run), on the data-as-state toy (one program for every task set);
  the held-out worlds are the toy's (it ignores pools). The programs compile once for all."""
  from jaxlab.rl.dicode import evaluation, runner
  from jaxlab.rl.dicode import loop as loop_lib

  root = tmp_path_factory.mktemp("seeds")
  hooks = loop_lib.Hooks(make_env=any_plan_toy_env, validate=light_validate)
  proposer = runner.proposer_settings("offline")
  out = {}
  with pytest.MonkeyPatch.context() as mp:
    mp.setattr(evaluation, "held_out_pools", lambda n, p: [None] * -(-n // p))
    for cur in SEEDS_CURRICULA:
      c = seeds_config()
      together = runner.run_seeds(root / cur / "together", c, cur, proposer, (0, 1), hooks=hooks)
      alone = {
        s: runner.run(root / cur / f"seed{s}", c, cur, proposer, s, hooks=hooks) for s in (0, 1)
      }
      out[cur] = dict(together=together, alone=alone, root=root / cur, config=c)
  return out


def _restored_params(workdir, config):
  """The agent a run committed after its last session, restored as a resume restores it."""
  from jaxlab.core import checkpoint
  from jaxlab.rl.dicode import loop as loop_lib
  from jaxlab.rl.dicode import training

  plan = curriculum_lib.SessionPlan("base", ["original"], np.ones(1))
  env = any_plan_toy_env(plan, config.ppo.num_envs, config, 0.0)
  policy = training.make_policy(env.num_actions, config)
  state = training.init_state(env, policy, training.ppo_config(config), jax.random.key(0))
  like = {"train": state.train, "stats": state.stats}
  restored, _ = checkpoint.restore(workdir / loop_lib.AGENT_DIR, like, step=config.sessions)
  return jax.device_get(restored["train"].params)


def _close(a, b, what: str) -> None:
  np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=what)


@pytest.mark.parametrize("curriculum", SEEDS_CURRICULA)
def test_vmapped_seeds_equal_each_seed_alone(seeds_runs, curriculum):
  got = seeds_runs[curriculum]
  root, together, alone = got["root"], got["together"], got["alone"]
  assert sorted(together) == [0, 1]
  for seed in (0, 1):
    a, b = together[seed], alone[seed]
    mine, solo = root / "together" / f"seed{seed}", root / f"seed{seed}"
    # the same files as the solo run, the same recorded config (its own seed)
    assert sorted(p.name for p in mine.iterdir()) == sorted(p.name for p in solo.iterdir())
    assert (mine / "config.json").read_text() == (solo / "config.json").read_text()
    for key in ("eval/return", "eval/length", "eval/finished", "eval/score"):
      _close(a[key], b[key], f"seed {seed} {key}")
    assert len(a["history"]) == len(b["history"]) == 2
    for row_a, row_b in zip(a["history"], b["history"]):
      for key in row_a.keys() - {"wall_s"}:
        _close(row_a[key], row_b[key], f"seed {seed} session {row_a['session']} {key}")
    state_a = json.loads((mine / "loop_state.json").read_text())
    state_b = json.loads((solo / "loop_state.json").read_text())
    assert state_a["curriculum"].keys() == state_b["curriculum"].keys()
    if curriculum == "sfl":  # the levels its refresh scored and kept, with its own policy
      assert state_a["curriculum"]["learnable"] == state_b["curriculum"]["learnable"]
      _close(state_a["curriculum"]["scores"], state_b["curriculum"]["scores"], "sfl scores")
    elif curriculum != "dicode":  # PLR's level buffer (scores from whole counts), or nothing
      assert state_a["curriculum"] == state_b["curriculum"]
    else:  # its own archive: the same proposals, verdicts, admissions and scores
      assert a["evolution"] == b["evolution"]
      assert a["archive"]["by_status"] == b["archive"]["by_status"]
      assert [t["id"] for t in a["archive"]["top"]] == [t["id"] for t in b["archive"]["top"]]
      _close(
        [t["score"] for t in a["archive"]["top"]], [t["score"] for t in b["archive"]["top"]], "top"
      )
    jax.tree.map(
      lambda x, y: _close(x, y, f"seed {seed} params"),
      _restored_params(mine, got["config"]),
      _restored_params(solo, got["config"]),
    )
  # and the two seeds are two runs, not one run twice
  assert together[0]["history"][0]["episode_return"] != together[1]["history"][0]["episode_return"]


def test_seeds_rerun_of_finished_seeds_writes_nothing(seeds_runs, capsys):
  from jaxlab.rl.dicode import runner

  got = seeds_runs["dicode"]
  base = got["root"] / "together"
  before = _snapshot(base)
  again = runner.run_seeds(
    base, got["config"], "dicode", runner.proposer_settings("offline"), (0, 1)
  )
  assert {s: r["eval/return"] for s, r in again.items()} == {
    s: r["eval/return"] for s, r in got["together"].items()
  }
  assert capsys.readouterr().out.count("unchanged") == 2
  assert _snapshot(base) == before
