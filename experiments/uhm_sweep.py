"""The paper's UHM task list as a sweep, and its three result tables in the paper's layout.

  python -m experiments.uhm_sweep --suite=standard --agents=rebrac,mbtd,dtd,ghm,uhm --seeds=0,1,2,3
      writes runs/uhm_sweep/commands.sh (one run a line; --workdir chooses another root)
  bash runs/uhm_sweep/commands.sh                 # or hand its lines to launch.slurm / launch.tpu
  python -m experiments.uhm_sweep --suite=standard --table   # collect summaries -> table.md/.csv
  python -m experiments.uhm_sweep --suite=standard --run     # run every line here, then the table

Each run is `python -m experiments.uhm --env=ogbench --env_name=<env>-singletask-task<k>-v0
--agent=<a> --seed=<s> --steps=<steps> --workdir=<root>/<env>/task<k>/<a>/seed<s>`; a cell of the
table is the mean success over the tasks, mean ± std over seeds, as in the paper (UHM, arXiv
2605.15603, Tables 1-3: 50 standard, 25 noisy and 25 long-horizon tasks). The per-env discount
(0.995 for giant/humanoid mazes and antsoccer) follows FQL's commands (arXiv 2502.02538). Runs need
the OGBench files in --dataset_dir (generate the ones that can be made offline with
`python -m envs.ogbench_generate`, or add --extra=--generate_missing); see docs/ogbench.md.
"""

from __future__ import annotations

import csv
import dataclasses
import pathlib
import shlex
import subprocess
import sys

import numpy as np
from absl import flags

from jaxlab.core import experiment, metrics
from jaxlab.core.errors import ConfigError, require

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

flags.DEFINE_string(
  "suite", "standard", f"Which of the paper's task sets: {', '.join(SUITES)}, all."
)
flags.DEFINE_list("agents", list(AGENT_COLUMNS), "Agents (columns).")
flags.DEFINE_list("seeds", ["0", "1", "2", "3"], "Seeds per task (integers >= 0).")
flags.DEFINE_list("tasks", ["1", "2", "3", "4", "5"], "Task ids per environment (1..5).")
flags.DEFINE_string("dataset_dir", None, "Passed to every run (OGBench data folder).")
flags.DEFINE_string("extra", "", "Extra flags appended to every run, e.g. '--mesh=data:-1'.")
flags.DEFINE_bool("run", False, "Run every command here, sequentially (a GPU box), then the table.")
flags.DEFINE_bool(
  "table", False, "Only collect summaries under --workdir into table.md / table.csv."
)
FLAGS = flags.FLAGS


def discount(env: str) -> float:
  return 0.995 if ("giant" in env or "humanoidmaze" in env or "antsoccer" in env) else 0.99


@dataclasses.dataclass(frozen=True)
class Sweep:
  """The validated flags of a sweep."""

  root: pathlib.Path
  steps: int
  suites: list[str]
  agents: list[str]
  seeds: list[int]
  tasks: list[int]
  extra: list[str]


def _int_list(flag: str, values: list[str], lo: int, hi: int | None = None) -> list[int]:
  allowed = f">= {lo}" if hi is None else f"in {lo}..{hi}"
  out = []
  for v in values:
    ok = v.strip().isdigit() and int(v) >= lo and (hi is None or int(v) <= hi)
    require(ok, flag, f"got {v!r}; each must be an integer {allowed}")
    out.append(int(v))
  require(bool(out), flag, f"give at least one integer {allowed}")
  return out


def parse_flags() -> Sweep:
  """Validates every flag (ConfigError naming it) before anything is written."""
  run = experiment.common(
    "uhm_sweep",
    default_steps=1_000_000,
    unused=("seed", "mesh", "keep", "ckpt_every", "log_every", "profile"),
  )
  suite = experiment.check_choice("suite", FLAGS.suite, [*SUITES, "all"])
  try:
    extra = shlex.split(FLAGS.extra)
  except ValueError as e:
    raise ConfigError("extra", f"cannot split {FLAGS.extra!r} into flags: {e}") from None
  return Sweep(
    root=run.workdir,
    steps=run.steps,
    suites=list(SUITES) if suite == "all" else [suite],
    agents=experiment.check_list("agents", FLAGS.agents, AGENT_COLUMNS),
    seeds=_int_list("seeds", FLAGS.seeds, 0),
    tasks=_int_list("tasks", FLAGS.tasks, 1, 5),
    extra=extra,
  )


def runs(sweep: Sweep, suite: str):
  """(env, task, agent, seed, workdir, argv) for every run of a suite."""
  for env in SUITES[suite]:
    for task in sweep.tasks:
      for agent in sweep.agents:
        for seed in sweep.seeds:
          wd = sweep.root / env / f"task{task}" / agent / f"seed{seed}"
          argv = [
            "python",
            "-m",
            "experiments.uhm",
            "--env=ogbench",
            f"--env_name={env}-singletask-task{task}-v0",
            f"--agent={agent}",
            f"--seed={seed}",
            f"--steps={sweep.steps}",
            f"--workdir={wd}",
            f"--config.discount={discount(env)}",
            "--eval_every=100000",
            "--eval_episodes=50",
          ]
          if FLAGS.dataset_dir:
            argv.append(f"--dataset_dir={FLAGS.dataset_dir}")
          yield env, task, agent, seed, wd, argv + sweep.extra


def _successes(sweep: Sweep, suite: str) -> dict:
  """{(env, agent, seed): [success % per task]} from the summaries the runs wrote."""
  cells: dict = {}
  for env, _, agent, seed, wd, _ in runs(sweep, suite):
    if (wd / "summary.json").exists():
      success = metrics.read_json(wd / "summary.json").get("eval/success")
      if success is not None:
        cells.setdefault((env, agent, seed), []).append(100 * success)
  return cells


def table(sweep: Sweep, suite: str) -> tuple[str, list[list[str]]]:
  """Markdown table (env rows x agent columns, mean ± std over seeds of the per-task mean)."""
  cells = _successes(sweep, suite)
  header = [f"env ({len(sweep.tasks)} tasks each)"] + [AGENT_COLUMNS[a] for a in sweep.agents]
  rows, per_agent_env = [], {a: [] for a in sweep.agents}
  for env in SUITES[suite]:
    row = [env]
    for agent in sweep.agents:
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
  rows.append(["Average (paper)"] + [str(PAPER_AVERAGE[suite].get(a, "–")) for a in sweep.agents])
  md = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  md += ["| " + " | ".join(r) + " |" for r in rows]
  return "\n".join(md), [header] + rows


def write_tables(sweep: Sweep) -> None:
  out = []
  for s in sweep.suites:
    md, rows = table(sweep, s)
    out.append(f"### {s}\n\n{md}\n")
    with open(sweep.root / f"table_{s}.csv", "w", newline="") as f:
      csv.writer(f).writerows(rows)
  (sweep.root / "table.md").write_text("\n".join(out))
  print("\n".join(out))


def main(argv):
  del argv
  sweep = parse_flags()
  sweep.root.mkdir(parents=True, exist_ok=True)
  if not FLAGS.table:
    lines = [shlex.join(r[-1]) for s in sweep.suites for r in runs(sweep, s)]
    (sweep.root / "commands.sh").write_text("\n".join(lines) + "\n")
    print(f"{len(lines)} runs -> {sweep.root / 'commands.sh'}")
    if FLAGS.run:
      for line in lines:
        print(line, flush=True)
        subprocess.run([sys.executable] + shlex.split(line)[1:], check=False)
  if FLAGS.table or FLAGS.run:
    write_tables(sweep)


if __name__ == "__main__":
  experiment.run(main)
