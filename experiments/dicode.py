r"""DiCode (arXiv 2602.08194): model-written Craftax task curricula, and the baselines it beats.

Trains PPO-GTrXL in sessions (``jaxlab.rl.dicode.loop``) under one curriculum
(``--curriculum=none|dr|plr|sfl|dicode``), evaluates it on held-out worlds of the original game
(mean return, % of the maximum 226, per-achievement success) and writes, in the workdir (default
``runs/dicode/<curriculum>/seed<k>``): summary.json (evaluation, per-session history, for
``dicode`` the archive: admitted / rejected with reasons / retired, top tasks with scores),
achievements.png, loop_state.json + agent/ (resume state), and for ``dicode`` the browsable
archive/ (one directory per task with its program task.py and meta.json), and for ``dicode`` and
``dr`` pools/ (each task program's pre-built starting worlds). A killed run resumes
where it stopped when started again with the same flags.

``--proposer=offline`` (default) mutates task programs locally (no network, no key);
``--proposer=llm --llm_url=URL --llm_model=NAME`` asks an OpenAI-compatible endpoint (vLLM,
OpenAI, OpenRouter), key from ``--llm_api_key`` or ``$DICODE_API_KEY`` / ``$OPENAI_API_KEY``.
``--compare=DIR,DIR,...`` draws the evaluation of finished runs side by side (comparison.png;
a DIR holding seed*/ runs is averaged over them). Commands and runtimes:
experiments/configs/dicode.py. See docs/dicode.md.
"""

from __future__ import annotations

import os
import pathlib
import urllib.parse

from absl import flags

from jaxlab.core import experiment
from jaxlab.core.errors import check_choice, require
from jaxlab.rl.dicode import curriculum as curriculum_lib

flags.DEFINE_string("curriculum", "dicode", "Curriculum: none, dr, plr, sfl or dicode.")
flags.DEFINE_string("proposer", "offline", "Task proposer for --curriculum=dicode: offline | llm.")
flags.DEFINE_string("llm_url", "", "OpenAI-compatible endpoint, e.g. http://localhost:8000/v1.")
flags.DEFINE_string("llm_model", "", "Model name served at --llm_url.")
flags.DEFINE_string(
  "llm_api_key", None, "API key (default: $DICODE_API_KEY, then $OPENAI_API_KEY; none for vLLM)."
)
flags.DEFINE_string("compare", "", "Comma-separated finished run directories to chart together.")
FLAGS = flags.FLAGS

_CONFIG = experiment.define_config_file(
  str(pathlib.Path(__file__).resolve().parent / "configs" / "dicode.py")
)
_UNUSED = ("steps", "log_every", "ckpt_every", "keep", "profile", "mesh")
KEY_ENV = ("DICODE_API_KEY", "OPENAI_API_KEY")


def proposer_settings(curriculum: str) -> dict:
  """The proposer's flags, checked: kind, and for ``llm`` the URL, model and key."""
  kind = check_choice("proposer", FLAGS.proposer, ("offline", "llm"))
  if curriculum != "dicode":
    for name in ("proposer", "llm_url", "llm_model", "llm_api_key"):
      require(not FLAGS[name].present, name, "is used only with --curriculum=dicode")
    return {"kind": None}
  if kind == "offline":
    for name in ("llm_url", "llm_model", "llm_api_key"):
      require(not FLAGS[name].present, name, "is used only with --proposer=llm")
    return {"kind": "offline"}
  url = FLAGS.llm_url
  parsed = urllib.parse.urlparse(url)
  require(bool(url), "llm_url", "is required with --proposer=llm (e.g. http://localhost:8000/v1)")
  require(
    parsed.scheme in ("http", "https") and bool(parsed.netloc),
    "llm_url",
    f"must be an http(s) URL such as http://localhost:8000/v1, got {url!r}",
  )
  require(bool(FLAGS.llm_model), "llm_model", "is required with --proposer=llm")
  key = FLAGS.llm_api_key
  if key is None:
    key = next((os.environ[k] for k in KEY_ENV if os.environ.get(k)), "")
  return {"kind": "llm", "url": url, "model": FLAGS.llm_model, "api_key": key}


def compare_dirs(spec: str) -> list[pathlib.Path]:
  dirs = [pathlib.Path(d.strip()) for d in spec.split(",") if d.strip()]
  require(bool(dirs), "compare", "give at least one run directory")
  for d in dirs:
    ok = (d / "summary.json").exists() or any(d.glob("seed*/summary.json"))
    require(ok, "compare", f"{d} holds no finished run (summary.json, or seed*/summary.json)")
  return dirs


def make_proposer(settings: dict, config):
  """The proposer; an LLM endpoint is contacted once here (unreachable -> exit 2)."""
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


def run_experiment(workdir, config, curriculum: str, settings: dict, seed: int, hooks=None):
  """Builds everything, runs (or resumes) the loop, evaluates; returns the summary."""
  from jaxlab.core import workdir as workdir_lib
  from jaxlab.rl.dicode import loop as loop_lib
  from jaxlab.rl.dicode import seeds

  sources = seeds.load_seed_tasks()
  proposer = make_proposer(settings, config) if curriculum == "dicode" else None
  workdir = pathlib.Path(workdir)
  with workdir_lib.session(workdir, recorded_config(config, curriculum, settings, seed)):
    pass  # creates the workdir, refuses a resume with another config, records config.json
  archive = None
  if curriculum == "dicode":
    archive = loop_lib.open_archive(workdir / "archive", sources, config.num_slots)
  cur = make_curriculum(config, curriculum, sources, archive)
  run = loop_lib.Loop(
    workdir, config, cur, seed=seed, archive=archive, proposer=proposer, hooks=hooks
  )
  if curriculum == "sfl":
    cur.score_levels = run.score_levels
  state = run.run()
  return loop_lib.finish(run, state, curriculum)


def main(argv):
  del argv
  from jaxlab.rl.dicode import loop as loop_lib

  if FLAGS.compare:
    dirs = compare_dirs(FLAGS.compare)
    run = experiment.common("dicode", variant=("compare",), unused=_UNUSED)
    loop_lib.compare(dirs, run.workdir)
    return
  curriculum = check_choice("curriculum", FLAGS.curriculum, curriculum_lib.CURRICULA)
  config = _CONFIG.value
  loop_lib.validate_config(config, curriculum)
  settings = proposer_settings(curriculum)
  run = experiment.common("dicode", variant=(curriculum, f"seed{FLAGS.seed}"), unused=_UNUSED)
  loop_lib.enable_compile_cache()
  run_experiment(run.workdir, config, curriculum, settings, run.seed)


if __name__ == "__main__":
  experiment.run(main)
