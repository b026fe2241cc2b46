"""UHM studies as sweeps: the paper's task lists and a low-budget multi-seed study, resumable,
aggregated into one table with 95 % intervals and learning curves (per update and per second).

  python -m experiments.uhm_sweep --suite=lowbudget                  # writes <root>/commands.sh
  python -m experiments.uhm_sweep --suite=lowbudget --run            # runs what is not finished
  python -m experiments.uhm_sweep --suite=lowbudget --table          # table.md/.csv + curves
  python -m experiments.uhm_sweep --suite=standard --steps=1000000 --net=paper --data_seeds=0 \\
      --episodes=0 --dataset_dir=~/.ogbench/data                     # the paper's protocol (GPU)
  python -m experiments.uhm_sweep --suite=lowbudget --agents=rebrac --alpha_grid=0.1:0,0.3:0,1:0

One command line per run: `python -m experiments.uhm --env_name=<env>-singletask-task<k>-v0
--agent=<a> --data_seed=<d> --seed=<s> ...` in `<root>/<env>/task<k>/<a>/d<d>/s<s>` (with
--vmap_seeds: one process trains all --seeds, vmapped, in `.../d<d>/s<first>-<last>`). --run skips
runs whose summary.json reached --steps and resumes the others from their checkpoints, so an
interrupted sweep is continued by running it again. Networks: --net=cpu runs experiments.uhm's
default config (3x256), --net=paper its `experiments/configs/uhm.py:paper` preset (4x512).

Table: a replicate is one (data seed, training seed) pair, its score the success rate averaged over
the tasks; a cell is the mean over replicates with a 95 % Student-t interval (`mean [lo, hi] (n)`).
Curves: success against updates and against wall-clock seconds, mean and 95 % band over
replicates, one line per agent. Planning and aggregation: `jaxlab.rl.uhm.study`.

Suites: `standard`, `noisy`, `long` are the paper's task lists (UHM, arXiv 2605.15603, Tables 1-3;
its averages are printed under each table). `lowbudget` (our study, not the paper's): the five
cube-single tasks plus puzzle-3x3 task 4 (FQL's default puzzle task), generated data sets of
--episodes episodes per --data_seed, --steps updates. Discount (0.995 for giant / humanoid mazes
and antsoccer, FQL's README) and ReBRAC's alphas are each task's (`uhm.task_defaults`) unless
--alpha_grid sweeps them. `pilot`: cube-single task 2 (the CPU pilot of docs/uhm.md); `cube`: the
five cube-single tasks (benchmarks/uhm_study_gpu.sh). The table adds, per agent, success and the
held-out diagnostics at the last step (jaxlab.rl.uhm.diagnostics), each a 95 % t-interval over
replicates, and curves of the model and critic errors. Data: docs/ogbench.md.
"""

from __future__ import annotations

from absl import flags

from jaxlab.core import experiment
from jaxlab.core import workdir as workdir_lib
from jaxlab.core.errors import require
from jaxlab.rl.uhm import study

flags.DEFINE_string(
  "suite", "lowbudget", f"Task set: {', '.join(study.SUITES)}, all (the paper's three)."
)
flags.DEFINE_list("agents", list(study.AGENT_COLUMNS), "Agents (columns).")
flags.DEFINE_list("seeds", ["0", "1", "2"], "Training seeds (integers >= 0).")
flags.DEFINE_list("data_seeds", ["0", "1"], "Data seeds of the generated sets (--episodes > 0).")
flags.DEFINE_list("tasks", [], "Task ids 1..5 (default: 1..5, lowbudget puzzle: 4).")
flags.DEFINE_integer("episodes", 100, "Generated episodes per data set; 0 = the standard files.")
flags.DEFINE_enum(
  "net",
  "cpu",
  list(study.NET_PRESETS),
  "Networks: cpu = experiments.uhm's default config (3x256), paper = its paper preset (4x512), "
  "pilot = its pilot preset (2x128, batch 128).",
)
flags.DEFINE_bool("vmap_seeds", False, "One process per data seed trains all --seeds vmapped.")
flags.DEFINE_list("alpha_grid", [], "ReBRAC alpha_actor:alpha_critic pairs to sweep (rebrac only).")
flags.DEFINE_integer("eval_every", 0, "Steps between evaluations (0: 10 points per run).")
flags.DEFINE_integer("eval_episodes", 20, "Evaluation episodes per evaluation and seed.")
flags.DEFINE_string("dataset_dir", None, "Folder of the OGBench / generated data sets.")
flags.DEFINE_string("extra", "", "Extra flags appended to every run, e.g. '--mesh=data:-1'.")
flags.DEFINE_bool("run", False, "Run every unfinished command here, one after the other.")
flags.DEFINE_bool("table", False, "Only aggregate the runs under --workdir (table + curves).")
FLAGS = flags.FLAGS


def main(argv):
  del argv
  run = experiment.common(
    "uhm_sweep",
    default_steps=20_000,
    unused=("seed", "mesh", "keep", "ckpt_every", "log_every", "profile"),
  )
  sweep = study.make_sweep(
    run.workdir,
    run.steps,
    FLAGS.suite,
    agents=FLAGS.agents,
    seeds=FLAGS.seeds,
    data_seeds=FLAGS.data_seeds,
    tasks=FLAGS.tasks,
    episodes=FLAGS.episodes,
    net=FLAGS.net,
    vmap_seeds=FLAGS.vmap_seeds,
    alpha_grid=FLAGS.alpha_grid,
    eval_every=FLAGS.eval_every,
    eval_episodes=FLAGS.eval_episodes,
    dataset_dir=FLAGS.dataset_dir,
    extra=FLAGS.extra,
    config_file=experiment.config_path("uhm"),
  )
  all_runs = study.plan(sweep)
  if FLAGS.table and not FLAGS.run:
    require(run.workdir.is_dir(), "workdir", f"{run.workdir} holds no sweep to aggregate")
  # the root: locked, and one sweep's (another setting exits 2 naming --workdir)
  with workdir_lib.session(run.workdir, study.record(sweep)):
    if not FLAGS.table:
      path = study.write_commands(sweep, all_runs)
      print(f"{len(all_runs)} runs -> {path}")
      if FLAGS.run:
        study.execute(sweep, all_runs)
    if FLAGS.table or FLAGS.run:
      study.write_tables(sweep, all_runs)


if __name__ == "__main__":
  experiment.run(main)
