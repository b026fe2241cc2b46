"""The paper's UHM task list as a sweep, and its three result tables in the paper's layout.

  python -m experiments.uhm_sweep --suite=standard --agents=rebrac,mbtd,dtd,ghm,uhm --seeds=0,1,2,3 \\
      --root=runs/uhm_sweep                       # writes runs/uhm_sweep/commands.sh (one run a line)
  bash runs/uhm_sweep/commands.sh                 # or hand its lines to launch.slurm / launch.tpu / a job array
  python -m experiments.uhm_sweep --suite=standard --root=runs/uhm_sweep --table   # collect -> table.md/.csv
  python -m experiments.uhm_sweep --suite=standard --run      # run every line here, sequentially, then table

Each run is `python -m experiments.uhm --env=ogbench --env_name=<env>-singletask-task<k>-v0 --agent=<a>
--seed=<s> --steps=<steps> --workdir=<root>/<env>/task<k>/<a>/seed<s>`; a cell of the table is the mean
success over the 5 tasks, mean ± std over seeds, as in the paper. Environment lists and the per-env
discount (0.995 for giant/humanoid mazes and antsoccer, as in FQL) follow `../shared/research/rl.md` §1.3.
Runs that need data not available offline (ant/humanoid mazes, antsoccer) need the OGBench files in
--dataset_dir; see envs/ogbench.py.
"""

from __future__ import annotations

import csv
import json
import pathlib
import shlex
import subprocess
import sys

import numpy as np
from absl import app, flags

SUITES = {
  "standard": [
    "antmaze-large-navigate",
    "antmaze-giant-navigate",
    "humanoidmaze-medium-navigate",
    "humanoidmaze-large-navigate",
    "antsoccer-arena-navigate",
    "cube-single-play",
    "cube-double-play",
    "scene-play",
    "puzzle-3x3-play",
    "puzzle-4x4-play",
  ],
  "noisy": [
    "antmaze-medium-explore",
    "antmaze-large-explore",
    "cube-double-noisy",
    "scene-noisy",
    "puzzle-4x4-noisy",
  ],
  "long": [
    "cube-triple-play",
    "cube-quadruple-play",
    "puzzle-4x5-play",
    "puzzle-4x6-play",
    "humanoidmaze-giant-navigate",
  ],
}
AGENT_COLUMNS = {
  "rebrac": "ReBRAC†",
  "mbtd": "MBTD(λ)",
  "dtd": "DTD(λ)",
  "ghm": "GHM",
  "uhm": "UHM",
}
# Paper averages (success %, project-page tables) for a side-by-side line under each table.
PAPER_AVERAGE = {
  "standard": {"rebrac": 35, "mbtd": 45, "dtd": 52, "ghm": 48, "uhm": 55},
  "noisy": {"rebrac": 23, "mbtd": 32, "dtd": 23, "ghm": 38, "uhm": 39},
  "long": {"rebrac": 5, "mbtd": 5, "dtd": 13, "ghm": 16, "uhm": 22},
}

flags.DEFINE_enum("suite", "standard", list(SUITES) + ["all"], "Which of the paper's task sets.")
flags.DEFINE_list("agents", list(AGENT_COLUMNS), "Agents (columns).")
flags.DEFINE_list("seeds", ["0", "1", "2", "3"], "Seeds per task.")
flags.DEFINE_list("tasks", ["1", "2", "3", "4", "5"], "Task ids per environment.")
flags.DEFINE_integer("steps", 1_000_000, "Updates per run (the paper's protocol: 1M).")
flags.DEFINE_string("root", "runs/uhm_sweep", "Root of the run directories and the tables.")
flags.DEFINE_string("dataset_dir", None, "Passed to every run (OGBench data folder).")
flags.DEFINE_string("extra", "", "Extra flags appended to every run, e.g. '--mesh=data:-1'.")
flags.DEFINE_bool("run", False, "Run every command here, sequentially (a GPU box), then the table.")
flags.DEFINE_bool("table", False, "Only collect summaries under --root into table.md / table.csv.")
FLAGS = flags.FLAGS


def discount(env: str) -> float:
  return 0.995 if ("giant" in env or "humanoidmaze" in env or "antsoccer" in env) else 0.99


def runs(suite: str):
  """(env, task, agent, seed, workdir, argv) for every run of a suite."""
  root = pathlib.Path(FLAGS.root)
  for env in SUITES[suite]:
    for task in FLAGS.tasks:
      for agent in FLAGS.agents:
        for seed in FLAGS.seeds:
          wd = root / env / f"task{task}" / agent / f"seed{seed}"
          argv = [
            "python",
            "-m",
            "experiments.uhm",
            "--env=ogbench",
            f"--env_name={env}-singletask-task{task}-v0",
            f"--agent={agent}",
            f"--seed={seed}",
            f"--steps={FLAGS.steps}",
            f"--workdir={wd}",
            f"--config.discount={discount(env)}",
            "--eval_every=100000",
            "--eval_episodes=50",
          ]
          if FLAGS.dataset_dir:
            argv.append(f"--dataset_dir={FLAGS.dataset_dir}")
          argv += shlex.split(FLAGS.extra)
          yield env, task, agent, seed, wd, argv


def table(suite: str) -> tuple[str, list[list[str]]]:
  """Markdown table (env rows x agent columns, mean ± std over seeds of the 5-task mean)."""
  cells: dict = {}
  for env, task, agent, seed, wd, _ in runs(suite):
    s = wd / "summary.json"
    if s.exists():
      success = json.loads(s.read_text()).get("eval/success")
      if success is not None:
        cells.setdefault((env, agent, seed), []).append(100 * success)
  header = ["env (5 tasks each)"] + [AGENT_COLUMNS.get(a, a) for a in FLAGS.agents]
  rows, per_agent_env = [], {a: [] for a in FLAGS.agents}
  for env in SUITES[suite]:
    row = [env]
    for agent in FLAGS.agents:
      per_seed = [np.mean(v) for (e, a, _), v in cells.items() if e == env and a == agent]
      if per_seed:
        row.append(f"{np.mean(per_seed):.0f}±{np.std(per_seed):.0f}")
        per_agent_env[agent].append(np.mean(per_seed))
      else:
        row.append("–")
    rows.append(row)
  rows.append(
    ["**Average (ours)**"]
    + [
      f"{np.mean(v):.0f}" if len(v) == len(SUITES[suite]) else ("partial" if v else "–")
      for v in per_agent_env.values()
    ]
  )
  rows.append(["Average (paper)"] + [str(PAPER_AVERAGE[suite].get(a, "–")) for a in FLAGS.agents])
  md = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  md += ["| " + " | ".join(r) + " |" for r in rows]
  return "\n".join(md), [header] + rows


def main(argv):
  del argv
  suites = list(SUITES) if FLAGS.suite == "all" else [FLAGS.suite]
  bad = [a for a in FLAGS.agents if a not in AGENT_COLUMNS]
  if bad:
    print(f"error: --agents: unknown {bad}; allowed: {', '.join(AGENT_COLUMNS)}", file=sys.stderr)
    sys.exit(2)
  root = pathlib.Path(FLAGS.root)
  root.mkdir(parents=True, exist_ok=True)
  if not FLAGS.table:
    lines = [shlex.join(r[-1]) for s in suites for r in runs(s)]
    (root / "commands.sh").write_text("\n".join(lines) + "\n")
    print(f"{len(lines)} runs -> {root / 'commands.sh'}")
    if FLAGS.run:
      for line in lines:
        print(line, flush=True)
        subprocess.run([sys.executable] + shlex.split(line)[1:], check=False)
  if FLAGS.table or FLAGS.run:
    out = []
    for s in suites:
      md, rows = table(s)
      out.append(f"### {s}\n\n{md}\n")
      with open(root / f"table_{s}.csv", "w", newline="") as f:
        csv.writer(f).writerows(rows)
    (root / "table.md").write_text("\n".join(out))
    print("\n".join(out))


if __name__ == "__main__":
  app.run(main)
