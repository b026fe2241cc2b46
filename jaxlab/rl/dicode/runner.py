"""A whole DiCode run from a config, as ``python -m experiments.dicode`` does it.

``run(workdir, config, curriculum, proposer=proposer_settings("offline"), seed=0)`` builds the
seed tasks, the proposer, the archive and the curriculum, runs (or resumes) the session loop
(:class:`jaxlab.rl.dicode.loop.Loop`), evaluates on held-out worlds and writes summary.json;
``loop.compare(dirs, out)`` charts finished runs side by side (:func:`check_run_dirs` first).
"""

from __future__ import annotations

import os
import pathlib
import urllib.parse

from jaxlab.core.errors import check_choice, require
from jaxlab.rl.dicode import curriculum as curriculum_lib
from jaxlab.rl.dicode import loop as loop_lib

KEY_ENV = ("DICODE_API_KEY", "OPENAI_API_KEY")  # where an unset API key is looked up, in order


def proposer_settings(
  kind: str, url: str = "", model: str = "", api_key: str | None = None
) -> dict:
  """The checked proposer: ``offline``, or ``llm`` with an http(s) URL, a model and a key (from
  ``$DICODE_API_KEY`` / ``$OPENAI_API_KEY`` when ``api_key`` is None; empty for vLLM)."""
  check_choice("proposer", kind, ("offline", "llm"))
  if kind == "offline":
    return {"kind": "offline"}
  parsed = urllib.parse.urlparse(url)
  require(bool(url), "llm_url", "is required with --proposer=llm (e.g. http://localhost:8000/v1)")
  require(
    parsed.scheme in ("http", "https") and bool(parsed.netloc),
    "llm_url",
    f"must be an http(s) URL such as http://localhost:8000/v1, got {url!r}",
  )
  require(bool(model), "llm_model", "is required with --proposer=llm")
  if api_key is None:
    api_key = next((os.environ[k] for k in KEY_ENV if os.environ.get(k)), "")
  return {"kind": "llm", "url": url, "model": model, "api_key": api_key}


def check_run_dirs(dirs) -> list[pathlib.Path]:
  """Finished run directories for :func:`loop.compare` (a dir of seed*/ runs counts)."""
  dirs = [pathlib.Path(d) for d in dirs]
  require(bool(dirs), "compare", "give at least one run directory")
  for d in dirs:
    ok = (d / "summary.json").exists() or any(d.glob("seed*/summary.json"))
    require(ok, "compare", f"{d} holds no finished run (summary.json, or seed*/summary.json)")
  return dirs


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


def run(workdir, config, curriculum: str, proposer: dict, seed: int = 0, hooks=None) -> dict:
  """Validates, builds everything, runs (or resumes) the loop, evaluates; returns the summary.

  ``proposer``: :func:`proposer_settings` (used by ``dicode`` only). Nothing is written before
  the config is validated and the proposer (an LLM endpoint) answered.
  """
  from jaxlab.core import workdir as workdir_lib
  from jaxlab.rl.dicode import seeds

  check_choice("curriculum", curriculum, curriculum_lib.CURRICULA)
  loop_lib.validate_config(config, curriculum)
  if curriculum != "dicode":
    proposer = {"kind": None}
  sources = seeds.load_seed_tasks()
  made = make_proposer(proposer, config) if curriculum == "dicode" else None
  workdir = pathlib.Path(workdir)
  with workdir_lib.session(workdir, recorded_config(config, curriculum, proposer, seed)):
    pass  # creates the workdir, refuses a resume with another config, records config.json
  archive = None
  if curriculum == "dicode":
    archive = loop_lib.open_archive(workdir / "archive", sources, config.num_slots)
  cur = make_curriculum(config, curriculum, sources, archive)
  session_loop = loop_lib.Loop(
    workdir, config, cur, seed=seed, archive=archive, proposer=made, hooks=hooks
  )
  if curriculum == "sfl":
    cur.score_levels = session_loop.score_levels
  state = session_loop.run()
  return loop_lib.finish(session_loop, state, curriculum)
