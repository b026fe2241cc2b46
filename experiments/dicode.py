r"""DiCode (arXiv 2602.08194): model-written Craftax task curricula, and the baselines it beats.

Trains PPO-GTrXL in sessions (``jaxlab.rl.dicode.loop``) under one curriculum
(``--curriculum=none|dr|plr|sfl|dicode``), evaluates it on held-out worlds of the original game
(mean return, % of the maximum 226, per-achievement success) and writes, in the workdir (default
``runs/dicode/<curriculum>/seed<k>``): summary.json (evaluation, per-session history, for
``dicode`` the archive: admitted / rejected with reasons / retired, top tasks with scores),
achievements.png, videos/eval_<env steps>.gif (the final agent playing one episode of the
original game, at most 100 steps; ``--videos=N`` episodes, 0 for none), loop_state.json + agent/
(resume state), and for ``dicode`` the browsable
archive/ (one directory per task with its program task.py and meta.json), and for ``dicode`` and
``dr`` pools/ (each task program's pre-built starting worlds). A killed run resumes
where it stopped when started again with the same flags.

``--seeds=N`` (or a list ``--seeds=0,3,7``) trains the seeds together: each session's PPO of every
seed is one vmapped program, and every seed keeps its own curriculum, archive and agent, planned,
scored and evolved on the host seed by seed. Seed ``k`` writes ``<workdir>/seed<k>`` (default
``runs/dicode/<curriculum>/seed<k>``, where ``--seed=k`` alone writes), the same files and numbers
as its solo run; ``--compare=<workdir>`` averages them. Every curriculum supports it.

``--proposer=offline`` (default) mutates task programs locally (no network, no key);
``--proposer=llm --llm_url=URL --llm_model=NAME`` asks an OpenAI-compatible endpoint (vLLM,
OpenAI, OpenRouter), key from ``--llm_api_key`` or ``$DICODE_API_KEY`` / ``$OPENAI_API_KEY``.
The curricula studies of docs/dicode.md are ``python -m experiments.study dicode/curricula_12k``
and ``dicode/curricula_123k`` (`jaxlab.studies.dicode`). ``--compare=DIR,DIR,...`` draws the
evaluation of finished runs side by side (comparison.png;
a DIR holding seed*/ runs is averaged over them). Defaults: ``jaxlab.rl.dicode.get_config()``
(the CPU budget); presets and runtimes: experiments/configs/dicode.py. See docs/dicode.md.

Commands (from the repository root):
  python -m experiments.dicode --proposer=offline
  python -m experiments.dicode --curriculum=none
  python -m experiments.dicode --curriculum=dr --seeds=3   # seeds 0-2 in one PPO program
  python -m experiments.dicode --curriculum=plr
  python -m experiments.dicode --proposer=llm --llm_url=http://localhost:8000/v1 \
      --llm_model=Qwen/Qwen3-235B-A22B-Thinking-2507-FP8
  python -m experiments.dicode --config=experiments/configs/dicode.py:paper --proposer=llm ...
  python -m experiments.dicode --compare=runs/dicode/none,runs/dicode/dicode
  python -m experiments.dicode --config=experiments/configs/dicode.py:learn --curriculum=dr
"""

from __future__ import annotations

from absl import flags

from jaxlab.core import experiment
from jaxlab.core.errors import require
from jaxlab.rl import dicode
from jaxlab.rl.dicode import curriculum as curriculum_lib
from jaxlab.rl.dicode import runner

flags.DEFINE_string("curriculum", "dicode", "Curriculum: none, dr, plr, sfl or dicode.")
flags.DEFINE_string("proposer", "offline", "Task proposer for --curriculum=dicode: offline | llm.")
flags.DEFINE_string("llm_url", "", "OpenAI-compatible endpoint, e.g. http://localhost:8000/v1.")
flags.DEFINE_string("llm_model", "", "Model name served at --llm_url.")
flags.DEFINE_string(
  "llm_api_key", None, "API key (default: $DICODE_API_KEY, then $OPENAI_API_KEY; none for vLLM)."
)
flags.DEFINE_string("compare", "", "Comma-separated finished run directories to chart together.")
FLAGS = flags.FLAGS

_CONFIG = experiment.define_config_file(experiment.config_path(__file__))
UNUSED_FLAGS = ("steps", "log_every", "ckpt_every", "keep", "profile", "mesh", "tracker")
_LLM_FLAGS = ("llm_url", "llm_model", "llm_api_key")


def proposer_flags(curriculum: str) -> dict:
  """``runner.proposer_settings`` from the flags; a proposer flag the run ignores is an error."""
  if curriculum != "dicode":
    for name in ("proposer", *_LLM_FLAGS):
      require(not FLAGS[name].present, name, "is used only with --curriculum=dicode")
  elif FLAGS.proposer == "offline":
    for name in _LLM_FLAGS:
      require(not FLAGS[name].present, name, "is used only with --proposer=llm")
  return runner.proposer_settings(FLAGS.proposer, FLAGS.llm_url, FLAGS.llm_model, FLAGS.llm_api_key)


def main(argv):
  del argv
  from jaxlab.rl.dicode import reporting

  if FLAGS.compare:
    dirs = runner.check_run_dirs(d.strip() for d in FLAGS.compare.split(",") if d.strip())
    run = experiment.common("dicode", variant=("compare",), unused=(*UNUSED_FLAGS, "videos"))
    reporting.compare(dirs, run.workdir)
    return
  experiment.check_choice("curriculum", FLAGS.curriculum, curriculum_lib.CURRICULA)
  dicode.validate_config(_CONFIG.value, FLAGS.curriculum)
  proposer = proposer_flags(FLAGS.curriculum)
  run = experiment.common(
    "dicode", variant=(FLAGS.curriculum, f"seed{FLAGS.seed}"), unused=UNUSED_FLAGS, seeds=True
  )
  # --videos=N: N episodes per seed in <workdir>/videos/eval_<step>.gif at the held-out evaluation
  videos = reporting.evaluation_videos(run.video_episodes(1))
  if len(run.seeds) == 1:
    # from here to PPO's loss: runner.run, loop.run_together, runtime.train, then PPO's gated
    # update (docs/dicode.md lists the frames)
    with videos:
      runner.run(run.workdir, _CONFIG.value, FLAGS.curriculum, proposer, run.seed)
    return
  # seed k in <workdir>/seed<k>, by default where its solo run goes: runs/dicode/<curriculum>/
  base = run.workdir if FLAGS.workdir else run.workdir.parent
  with videos:
    out = runner.run_seeds(base, _CONFIG.value, FLAGS.curriculum, proposer, run.seeds)
  returns = [out[s]["eval/return_pct"] for s in run.seeds]
  print(
    f"[dicode] {FLAGS.curriculum}, seeds {','.join(map(str, run.seeds))}: eval return "
    f"{sum(returns) / len(returns):.3g}% of max on average "
    f"({', '.join(f'{r:.3g}' for r in returns)}) -> {base}/seed*"
  )


if __name__ == "__main__":
  experiment.run(main)
