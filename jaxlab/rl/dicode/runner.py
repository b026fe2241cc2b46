"""A whole DiCode run from a config, as ``python -m experiments.dicode`` does it.

``run(workdir, config, curriculum, proposer=proposer_settings("offline"), seed=0)`` builds the
seed tasks, the proposer, the archive and the curriculum, runs (or resumes) the session loop
(:class:`jaxlab.rl.dicode.loop.Loop`), evaluates on held-out worlds and writes summary.json;
``reporting.compare(dirs, out)`` charts finished runs side by side (:func:`check_run_dirs` first).
``run_seeds(workdir, config, curriculum, proposer, seeds=(0, 1, 2))`` trains several seeds
together (one vmapped PPO program), each in ``<workdir>/seed<k>`` as ``run`` would.
"""

from __future__ import annotations

import json
import math
import os
import pathlib

from jaxlab.core.errors import ConfigError, check_choice, require
from jaxlab.rl.dicode import curriculum as curriculum_lib
from jaxlab.rl.dicode import evolution, reporting
from jaxlab.rl.dicode import loop as loop_lib
from jaxlab.rl.dicode.config import validate_config

KEY_ENV = ("DICODE_API_KEY", "OPENAI_API_KEY")  # where an unset API key is looked up, in order


def proposer_settings(
  kind: str, url: str = "", model: str = "", api_key: str | None = None
) -> dict:
  """The checked proposer: ``offline``, or ``llm`` with an http(s) URL, a model and a key (from
  ``$DICODE_API_KEY`` / ``$OPENAI_API_KEY`` when ``api_key`` is None; empty for vLLM)."""
  check_choice("proposer", kind, ("offline", "llm"))
  if kind == "offline":
    return {"kind": "offline"}
  from jaxlab.rl.dicode import proposers

  proposers.check_llm_url(url)
  require(bool(model), "llm_model", "is required with --proposer=llm")
  if api_key is None:
    api_key = next((os.environ[k] for k in KEY_ENV if os.environ.get(k)), "")
  return {"kind": "llm", "url": url, "model": model, "api_key": api_key}


COMPARED = ("eval/return", "eval/return_pct")  # what reporting.compare reads of each summary.json


def check_run_dirs(dirs) -> list[pathlib.Path]:
  """Finished run directories for :func:`reporting.compare` (a dir of seed*/ runs counts); every
  summary.json is read and checked here, before anything is written."""
  dirs = [pathlib.Path(d) for d in dirs]
  require(bool(dirs), "compare", "give at least one run directory")
  for d in dirs:
    paths = [d / "summary.json"] if (d / "summary.json").exists() else []
    paths = paths or sorted(d.glob("seed*/summary.json"))
    require(
      bool(paths), "compare", f"{d} holds no finished run (summary.json, or seed*/summary.json)"
    )
    for path in paths:
      summary = read_json(path, "compare", "a finished DiCode run's summary.json")
      for key in COMPARED:
        value = summary.get(key)
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        require(
          ok and math.isfinite(value),
          "compare",
          f"{path} is not a finished DiCode run's summary ({key} is {value!r}, not a number)",
        )
  return dirs


def read_json(path: pathlib.Path, field: str, what: str, keys=()) -> dict:
  """``path`` as a JSON object holding ``keys``; else ConfigError(field) naming the file."""
  try:
    data = json.loads(path.read_text())
  except (OSError, UnicodeDecodeError, ValueError) as e:
    raise ConfigError(field, f"{path} is not readable JSON ({type(e).__name__}: {e})") from None
  require(isinstance(data, dict), field, f"{path} is not {what} (a JSON object)")
  missing = [k for k in keys if k not in data]
  require(not missing, field, f"{path} lacks {', '.join(missing)}: not {what}")
  return data


STATE_KEYS = ("session", "original_return", "original_success", "history", "evolution")
META_KEYS = ("id", "name", "dir", "parent", "generation", "status", "reason", "info", "slot")
META_KEYS += ("score", "scores")


def check_resume(workdir: pathlib.Path, curriculum: str, sessions: int, num_slots: int) -> None:
  """Reads (never writes) what a resume of ``workdir`` relies on: loop_state.json, and for
  ``dicode`` every archived task's meta.json and, for the tasks still in use, its program
  (the sandbox's checks, without running it). ConfigError("workdir") naming the file."""
  from jaxlab.core import checkpoint
  from jaxlab.rl.dicode import archive as archive_lib
  from jaxlab.rl.dicode import sandbox
  from jaxlab.rl.dicode import task as task_lib

  bad = "; fix or remove it, or choose a new --workdir"
  state_path = workdir / loop_lib.STATE_FILE
  if state_path.exists():
    state = read_json(state_path, "workdir", f"a DiCode loop state{bad}", STATE_KEYS)
    session = state["session"]
    require(
      isinstance(session, int) and 0 <= session <= sessions and isinstance(state["history"], list),
      "workdir",
      f"{state_path}: session {session!r} is not a session of this run (0-{sessions}){bad}",
    )
    agent = workdir / loop_lib.AGENT_DIR / checkpoint.CKPT_DIR / str(session)  # orbax's step dir
    require(
      session == 0 or agent.is_dir(),
      "workdir",
      f"{state_path} records session {session} but its agent checkpoint {agent} is missing{bad}",
    )
    require(
      isinstance(state.get("curriculum", {}), dict),
      "workdir",
      f"{state_path}: its curriculum state is not a JSON object{bad}",
    )
  tasks = workdir / "archive" / "tasks"
  if curriculum != "dicode" or not tasks.is_dir():
    return
  for meta_path in sorted(tasks.glob("*/meta.json")):
    meta = read_json(meta_path, "workdir", f"an archived task's meta.json{bad}", META_KEYS)
    require(
      meta["status"] in archive_lib.STATUSES and isinstance(meta["id"], int),
      "workdir",
      f"{meta_path}: status {meta['status']!r} / id {meta['id']!r} is not an archive task's{bad}",
    )
    slot, score, slots = meta["slot"], meta["score"], num_slots - 1
    require(
      slot is None or (isinstance(slot, int) and 0 <= slot < slots),
      "workdir",
      f"{meta_path}: slot {slot!r} is not one of the run's {slots} task slots{bad}",
    )
    number = isinstance(score, (int, float)) and not isinstance(score, bool)
    require(
      score is None or (number and math.isfinite(score)),
      "workdir",
      f"{meta_path}: score {score!r} is not a finite number{bad}",
    )
    program = meta_path.parent / "task.py"
    if meta["status"] in ("admitted", "validated") and program.exists():
      try:
        source = program.read_text()
      except (OSError, UnicodeDecodeError) as e:
        raise ConfigError("workdir", f"{program} is unreadable ({e}){bad}") from None
      try:
        sandbox.load(source)  # the allow-list check and its names, as the session will load it
      except task_lib.TaskError as e:
        raise ConfigError(
          "workdir", f"{program} ({meta['status']}) is rejected by the sandbox now: {e}{bad}"
        ) from None


def make_proposer(settings: dict, config):
  """The proposer; an LLM endpoint is contacted once here (unreachable -> ConfigError)."""
  from jaxlab.rl.dicode import proposers

  if settings["kind"] != "llm":
    return proposers.make_proposer("offline")
  return proposers.make_proposer(
    "llm",
    llm_url=settings["url"],
    llm_model=settings["model"],
    llm_api_key=settings["api_key"] or None,
    llm_timeout_s=config.llm_timeout_s,
    llm_retries=config.llm_retries,
  )


def make_curriculum(config, curriculum: str, sources: dict, archive=None):
  """The ``curriculum`` (none | dr | plr | sfl | dicode) with the config's settings."""
  c = config
  if curriculum == "dicode":
    return curriculum_lib.DiCode(
      archive,
      sources[curriculum_lib.ORIGINAL],
      c.tasks_per_session,
      c.original_proportion,
      c.staleness_coef,
      c.temperature,
      original_slot=c.num_slots - 1,
    )
  if curriculum == "dr":
    return curriculum_lib.DomainRandomization(sources)
  if curriculum == "plr":
    return curriculum_lib.PLR(
      c.levels_per_session,
      c.plr_capacity,
      c.plr_replay_prob,
      c.plr_min_fill,
      c.staleness_coef,
      c.temperature,
    )
  if curriculum == "sfl":
    return curriculum_lib.SFL(
      c.levels_per_session, c.sfl_buffer, c.sfl_candidates, c.sfl_every, c.sfl_replay_prob
    )
  return curriculum_lib.NoCurriculum()


def recorded_config(config, curriculum: str, settings: dict, seed: int) -> dict:
  """What a resume must match (the API key is never recorded)."""
  extra = {k: v for k, v in settings.items() if k != "api_key"}
  return {**config.to_dict(), "curriculum": curriculum, "proposer": extra, "seed": seed}


def run_seeds(workdir, config, curriculum: str, proposer: dict, seeds, hooks=None) -> dict:
  """:func:`run` of each seed in ``<workdir>/seed<k>`` (each what ``run`` alone writes there: its
  own config.json, archive, agent, loop state and summary.json), the seeds trained TOGETHER: each
  session's PPO of every seed is one vmapped program, the curricula (planning, scoring, proposals,
  the sandbox, the archives) run on the host seed by seed, and the evaluation plays every agent in
  the same vmapped program (`loop.run_together`). Seed ``k``'s record is its solo run's. A
  finished seed returns its record unchanged; a killed run resumes every seed. Returns
  ``{seed: summary}``."""
  from jaxlab.core import workdir as workdir_lib
  from jaxlab.rl.dicode import seeds as seed_tasks

  seeds = tuple(int(s) for s in seeds)
  workdir = pathlib.Path(workdir)
  dirs = {s: workdir / f"seed{s}" for s in seeds}
  if len(seeds) == 1:
    extra = {} if hooks is None else {"hooks": hooks}
    return {seeds[0]: run(dirs[seeds[0]], config, curriculum, proposer, seeds[0], **extra)}
  check_choice("curriculum", curriculum, curriculum_lib.CURRICULA)
  validate_config(config, curriculum)
  require(len(set(seeds)) == len(seeds), "seeds", f"repeats a seed: {seeds}")
  if curriculum != "dicode":
    proposer = {"kind": None}
  recorded = {s: recorded_config(config, curriculum, proposer, s) for s in seeds}
  out: dict[int, dict] = {}
  for s, d in dirs.items():  # every seed's files are read and checked before anything runs
    if d.is_dir():
      workdir_lib.check_config(d, recorded[s])
      summary = workdir_lib.finished(d)
      if summary is not None:
        print(f"[dicode] {d} holds this finished run; its record is unchanged")
        out[s] = summary
        continue
      check_resume(d, curriculum, config.sessions, config.num_slots)
  todo = [s for s in seeds if s not in out]
  if not todo:
    return out
  workdir_lib.check_writable(workdir, "workdir")
  made = make_proposer(proposer, config) if curriculum == "dicode" else None
  for s in todo:
    with workdir_lib.session(dirs[s], recorded[s]):
      pass  # creates the seed's workdir, refuses a busy one, records its config.json
  sources = seed_tasks.load_seed_tasks()
  loops = []
  for s in todo:
    archive = None
    if curriculum == "dicode":
      archive = evolution.open_archive(dirs[s] / "archive", sources, config.num_slots)
    cur = make_curriculum(config, curriculum, sources, archive)
    lp = loop_lib.Loop(dirs[s], config, cur, seed=s, archive=archive, proposer=made, hooks=hooks)
    if curriculum == "sfl":
      cur.score_levels = lp.score_levels
    loops.append(lp)
  states = loop_lib.run_together(loops)
  for s, summary in zip(todo, reporting.finish_together(loops, states, curriculum)):
    out[s] = summary
  return {s: out[s] for s in seeds}


def run(workdir, config, curriculum: str, proposer: dict, seed: int = 0, hooks=None) -> dict:
  """Validates, builds everything, runs (or resumes) the loop, evaluates; returns the summary.

  ``proposer``: :func:`proposer_settings` (used by ``dicode`` only). Nothing is written before
  the config is validated and the proposer (an LLM endpoint) answered.
  """
  from jaxlab.core import workdir as workdir_lib
  from jaxlab.rl.dicode import seeds

  check_choice("curriculum", curriculum, curriculum_lib.CURRICULA)
  validate_config(config, curriculum)
  if curriculum != "dicode":
    proposer = {"kind": None}
  workdir = pathlib.Path(workdir)
  recorded = recorded_config(config, curriculum, proposer, seed)
  if workdir.is_dir():  # a resume or a re-run: its config and files, read before anything runs
    workdir_lib.check_config(workdir, recorded)
    summary = workdir_lib.finished(workdir)  # (summary.json is written atomically, last)
    if summary is not None:  # a finished run re-run: its record, and not one byte written
      print(f"[dicode] {workdir} holds this finished run; its record is unchanged")
      return summary
    check_resume(workdir, curriculum, config.sessions, config.num_slots)
  workdir_lib.check_writable(workdir, "workdir")
  # The endpoint is asked before anything runs JAX (which creates the compilation cache).
  made = make_proposer(proposer, config) if curriculum == "dicode" else None
  with workdir_lib.session(workdir, recorded):
    pass  # creates the workdir, refuses a busy one or another config, records config.json
  sources = seeds.load_seed_tasks()
  archive = None
  if curriculum == "dicode":
    archive = evolution.open_archive(workdir / "archive", sources, config.num_slots)
  cur = make_curriculum(config, curriculum, sources, archive)
  session_loop = loop_lib.Loop(
    workdir, config, cur, seed=seed, archive=archive, proposer=made, hooks=hooks
  )
  if curriculum == "sfl":
    cur.score_levels = session_loop.score_levels
  state = loop_lib.run_together([session_loop])[0]
  return reporting.finish(session_loop, state, curriculum)
