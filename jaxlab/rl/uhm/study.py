"""UHM studies as sweeps (`experiments.uhm_sweep`): plan the runs, run them, aggregate a table.

    sweep = make_sweep(root, steps=20_000, suite="lowbudget", config_file=".../configs/uhm.py")
    runs = plan(sweep)                       # one Run (workdir + command line) per process
    write_commands(sweep, runs); execute(sweep, runs)   # commands.sh; run what is unfinished
    write_tables(sweep, runs)                # table.md, table_<suite>.csv, curves_<suite>_*.png

One command line per run: `python -m experiments.uhm --env_name=<env>-singletask-task<k>-v0
--agent=<a> --data_seed=<d> --seed=<s> ...` in `<root>/<env>/task<k>/<a>/d<d>/s<s>` (with
vmap_seeds: one process trains all seeds, vmapped, in `.../d<d>/s<first>-<last>`). Discount and
ReBRAC's alphas are the program's task values (`jaxlab.rl.uhm.task_defaults`) unless an alpha grid
sweeps them.

Table: for each suite, environment and agent, a replicate is one (data seed, training seed) pair;
its score is the success rate averaged over the tasks; a cell is the mean over replicates with a
95 % Student-t interval (`mean [lo, hi] (n)`). Curves: success against updates and against
wall-clock seconds (steps / the run's median updates per second, compile excluded), mean and
95 % band over replicates, one line per agent.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import pathlib
import shlex
import subprocess
import sys
from collections.abc import Sequence

import numpy as np

from jaxlab.core import metrics, plots
from jaxlab.core.errors import ConfigError, check_choice, require
from jaxlab.core.metrics import t_interval  # re-exported: the sweep table's interval

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
  "lowbudget": ["cube-single-play", "puzzle-3x3-play"],
  # The CPU pilot (docs/uhm.md): one cube-single task; `cube`: its five tasks (the GPU study).
  "pilot": ["cube-single-play"],
  "cube": ["cube-single-play"],
}
# Tasks of an environment in a suite when --tasks is not given (lowbudget: one puzzle task).
SUITE_TASKS = {("lowbudget", "puzzle-3x3-play"): [4], ("pilot", "cube-single-play"): [2]}
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
# --net: the experiments.uhm config each run uses: cpu = its default (3x256 networks), paper = its
# `paper` preset (FQL's 4x512), pilot = its `pilot` preset (2x128, batch 128; the CPU pilot);
# sizes live in experiments/configs/uhm.py only.
NET_PRESETS = {"cpu": None, "paper": "paper", "pilot": "pilot"}


@dataclasses.dataclass(frozen=True)
class Sweep:
  """The validated flags of a sweep."""

  root: pathlib.Path
  steps: int
  suites: list[str]
  agents: list[str]
  seeds: list[int]
  data_seeds: list[int]
  tasks: list[int] | None
  alphas: list[tuple[float, float]]
  extra: list[str]
  episodes: int  # generated episodes per data set; 0 = the standard files
  net: str  # key of NET_PRESETS
  vmap_seeds: bool
  eval_every: int  # 0: 10 evaluations per run
  eval_episodes: int
  dataset_dir: str | None
  config_file: str  # experiments/configs/uhm.py (for the paper preset)


@dataclasses.dataclass(frozen=True)
class Run:
  """One process of the sweep: its cell of the table and its command line."""

  suite: str
  env: str
  task: int
  agent: str  # column label: an agent, or rebrac@<a_actor>:<a_critic> in an alpha grid
  data_seed: int
  seeds: tuple[int, ...]  # training seeds (several when vmapped)
  workdir: pathlib.Path
  argv: tuple[str, ...]


def _int_list(flag: str, values: list[str], lo: int, hi: int | None = None) -> list[int]:
  allowed = f">= {lo}" if hi is None else f"in {lo}..{hi}"
  out = []
  for v in values:
    ok = v.strip().isdigit() and int(v) >= lo and (hi is None or int(v) <= hi)
    require(ok, flag, f"got {v!r}; each must be an integer {allowed}")
    out.append(int(v))
  return out


def _alpha_grid(values: list[str]) -> list[tuple[float, float]]:
  out = []
  for v in values:
    try:
      a, c = (float(x) for x in v.split(":"))
    except ValueError:
      raise ConfigError("alpha_grid", f"got {v!r}; give alpha_actor:alpha_critic pairs") from None
    require(a >= 0 and c >= 0 and np.isfinite(a + c), "alpha_grid", f"{v!r}: must be >= 0")
    out.append((a, c))
  return out


def make_sweep(
  root,
  steps: int,
  suite: str,
  *,
  agents: Sequence[str],
  seeds: Sequence[str],
  data_seeds: Sequence[str],
  tasks: Sequence[str],
  episodes: int,
  net: str,
  vmap_seeds: bool,
  alpha_grid: Sequence[str],
  eval_every: int,
  eval_episodes: int,
  dataset_dir: str | None,
  extra: str,
  config_file: str,
) -> Sweep:
  """Validates a sweep's options as the flags give them (ConfigError naming the flag)."""
  check_choice("suite", suite, [*SUITES, "all"])
  try:
    extra_argv = shlex.split(extra)
  except ValueError as e:
    raise ConfigError("extra", f"cannot split {extra!r} into flags: {e}") from None
  require(episodes >= 0, "episodes", f"must be >= 0, got {episodes}")
  require(eval_every >= 0, "eval_every", f"must be >= 0, got {eval_every}")
  require(eval_episodes >= 1, "eval_episodes", f"must be >= 1, got {eval_episodes}")
  check_choice("net", net, NET_PRESETS)
  seed_list = _int_list("seeds", seeds, 0)
  require(bool(seed_list), "seeds", "give at least one training seed")
  contiguous = seed_list == list(range(seed_list[0], seed_list[0] + len(seed_list)))
  require(not vmap_seeds or contiguous, "seeds", "--vmap_seeds needs consecutive seeds")
  data_seed_list = _int_list("data_seeds", data_seeds, 0) if episodes else [0]
  require(bool(data_seed_list), "data_seeds", "give at least one data seed")
  alphas = _alpha_grid(alpha_grid)
  agent_list = [a.strip() for a in agents if a.strip()]
  bad = [a for a in agent_list if a not in AGENT_COLUMNS]
  require(
    agent_list and not bad,
    "agents",
    f"got {','.join(bad) or 'nothing'}; allowed: {', '.join(AGENT_COLUMNS)}",
  )
  require(
    not alphas or agent_list == ["rebrac"], "alpha_grid", "sweeps ReBRAC only: --agents=rebrac"
  )
  return Sweep(
    root=pathlib.Path(root),
    steps=steps,
    suites=["standard", "noisy", "long"] if suite == "all" else [suite],
    agents=agent_list,
    seeds=seed_list,
    data_seeds=data_seed_list,
    tasks=_int_list("tasks", tasks, 1, 5) or None,
    alphas=alphas,
    extra=extra_argv,
    episodes=episodes,
    net=net,
    vmap_seeds=vmap_seeds,
    eval_every=eval_every,
    eval_episodes=eval_episodes,
    dataset_dir=dataset_dir,
    config_file=config_file,
  )


def _common_argv(sweep: Sweep, env: str, task: int, data_seed: int) -> list[str]:
  eval_every = sweep.eval_every or max(1, sweep.steps // 10)
  argv = [
    "python",
    "-m",
    "experiments.uhm",
    "--env=ogbench",
    f"--env_name={env}-singletask-task{task}-v0",
    f"--steps={sweep.steps}",
    f"--eval_every={eval_every}",
    f"--eval_episodes={sweep.eval_episodes}",
    f"--log_every={min(1000, eval_every)}",
    f"--ckpt_every={eval_every}",
  ]
  if NET_PRESETS[sweep.net] is not None:
    argv.append(f"--config={sweep.config_file}:{NET_PRESETS[sweep.net]}")
  if sweep.episodes:
    argv += [f"--episodes={sweep.episodes}", f"--data_seed={data_seed}"]
  if sweep.dataset_dir:
    argv.append(f"--dataset_dir={sweep.dataset_dir}")
  return argv


def _columns(sweep: Sweep):
  """(label, extra argv) per column: the agents, or ReBRAC at each grid point."""
  if sweep.alphas:
    return [
      (
        f"rebrac@{a}:{c}",
        ["--agent=rebrac", f"--config.alpha_actor={a}", f"--config.alpha_critic={c}"],
      )
      for a, c in sweep.alphas
    ]
  return [(a, [f"--agent={a}"]) for a in sweep.agents]


def runs(sweep: Sweep, suite: str):
  """Every Run of a suite, in a stable order."""
  seed_groups = [tuple(sweep.seeds)] if sweep.vmap_seeds else [(s,) for s in sweep.seeds]
  for env in SUITES[suite]:
    tasks = sweep.tasks or SUITE_TASKS.get((suite, env), [1, 2, 3, 4, 5])
    for task in tasks:
      for label, agent_argv in _columns(sweep):
        for d in sweep.data_seeds:
          for group in seed_groups:
            name = f"s{group[0]}" if len(group) == 1 else f"s{group[0]}-{group[-1]}"
            wd = sweep.root / env / f"task{task}" / label / f"d{d}" / name
            argv = _common_argv(sweep, env, task, d) + agent_argv + [f"--seed={group[0]}"]
            if len(group) > 1:
              argv.append(f"--num_seeds={len(group)}")
            argv += [f"--workdir={wd}"] + sweep.extra
            yield Run(suite, env, task, label, d, group, wd, tuple(argv))


def plan(sweep: Sweep) -> list[Run]:
  """Every Run of every suite of the sweep."""
  return [r for s in sweep.suites for r in runs(sweep, s)]


def finished(run: Run, steps: int) -> bool:
  path = run.workdir / "summary.json"
  return path.exists() and metrics.read_json(path).get("step") == steps


# ------------------------------------------------------------------------------------ aggregation
def replicates(run: Run) -> list[dict]:
  """Per training seed of a finished or partial run: final success %, its curve and updates/s."""
  wd = run.workdir
  if not (wd / "eval.csv").exists():
    return []
  ev = metrics.read_csv(wd / "eval.csv")
  sps = (
    metrics.read_csv(wd / "metrics.csv").get("steps_per_sec")
    if (wd / "metrics.csv").exists()
    else None
  )
  # The first chunk's rate includes compilation: the median of the others is the update cost.
  rate = (
    float(np.nanmedian(sps[1:] if sps is not None and len(sps) > 1 else sps))
    if sps is not None
    else np.nan
  )
  out = []
  for seed in run.seeds:
    col = "success" if len(run.seeds) == 1 else f"success_seed{seed}"
    if col in ev and len(ev[col]):
      out.append(dict(steps=ev["step"], success=100 * ev[col], rate=rate, seed=seed))
  return out


def _scores(sweep: Sweep, all_runs: list[Run], suite: str):
  """{env: {column: {(data_seed, seed): [final success % per task]}}} and the curves per column."""
  scores, curves = {}, {}
  for r in all_runs:
    if r.suite != suite:
      continue
    for rep in replicates(r):
      if rep["steps"][-1] != sweep.steps:  # unfinished: not in the table, nor in the curves
        continue
      key = (r.data_seed, rep["seed"])
      scores.setdefault(r.env, {}).setdefault(r.agent, {}).setdefault(key, []).append(
        rep["success"][-1]
      )
      curves.setdefault(r.agent, {}).setdefault(key, []).append(rep)
  return scores, curves


def table(sweep: Sweep, all_runs: list[Run], suite: str) -> tuple[str, list[list[str]], dict]:
  """Markdown and CSV rows: env x column cells `mean [lo, hi] (n)`, replicates = (data, train)
  seed pairs whose every task finished; the last rows pool the environments."""
  scores, curves = _scores(sweep, all_runs, suite)
  cols = [label for label, _ in _columns(sweep)]
  header = ["env"] + [AGENT_COLUMNS.get(c, c) for c in cols]
  rows, pooled = [], {c: {} for c in cols}
  for env in SUITES[suite]:
    n_tasks = len(sweep.tasks or SUITE_TASKS.get((suite, env), [1, 2, 3, 4, 5]))
    row = [env]
    for c in cols:
      reps = {k: v for k, v in scores.get(env, {}).get(c, {}).items() if len(v) == n_tasks}
      for k, v in reps.items():
        pooled[c].setdefault(k, []).append(np.mean(v))
      row.append(_cell([np.mean(v) for v in reps.values()]))
    rows.append(row)
  n_env = len(SUITES[suite])
  rows.append(
    ["**all envs**"]
    + [_cell([np.mean(v) for v in pooled[c].values() if len(v) == n_env]) for c in cols]
  )
  if suite in PAPER_AVERAGE and not sweep.alphas:
    rows.append(["paper (average)"] + [str(PAPER_AVERAGE[suite].get(c, "–")) for c in cols])
  md = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  md += ["| " + " | ".join(r) + " |" for r in rows]
  return "\n".join(md), [header] + rows, curves


def _cell(xs) -> str:
  if not xs:
    return "–"
  m, lo, hi = t_interval(xs)
  return f"{m:.0f} [{lo:.0f}, {hi:.0f}] ({len(xs)})" if np.isfinite(lo) else f"{m:.0f} (1)"


# Held-out diagnostics (jaxlab.rl.uhm.diagnostics) in the table: (column, key, horizon index)
DIAGNOSTIC_COLUMNS = (
  ("model RMSE n=1", "model_err", 0),
  ("model RMSE n=4", "model_err", 3),
  ("current-state baseline n=4", "model_err_state", 3),
  ("mean-displacement baseline n=4", "model_err_mean", 3),
  ("critic mean abs(Q - G)", "q_mae", None),
  ("constant-G baseline", "q_base_mae", None),
  ("corr(Q, G)", "q_corr", None),
)


def diagnostic_replicates(run: Run) -> dict:
  """{seed: {step: {column: value}}} of a run's diagnostics.jsonl ({} without one)."""
  path = run.workdir / "diagnostics.jsonl"
  if not path.exists():
    return {}
  out = {}
  for line in path.read_text().splitlines():
    if not line.strip():
      continue
    rec = json.loads(line)
    for seed, d in rec["seeds"].items():
      row = {}
      for col, key, i in DIAGNOSTIC_COLUMNS:
        if key in d:
          row[col] = float(d[key][i] if i is not None else d[key])
      out.setdefault(int(seed), {})[int(rec["step"])] = row
  return out


def diagnostic_table(sweep: Sweep, all_runs: list[Run], suite: str) -> tuple[str, dict]:
  """Markdown: one row per column (agent) of the sweep, success and the held-out diagnostics at
  the last step, each `mean [lo, hi] (n)` over replicates (a replicate's value: its mean over the
  tasks; only replicates whose every task finished). Also returns the curves of two diagnostics
  (model RMSE at n=4, critic error) per agent: {diagnostic: {agent: {replicate: {step: v}}}}."""
  cols = [label for label, _ in _columns(sweep)]
  n_tasks = {
    env: len(sweep.tasks or SUITE_TASKS.get((suite, env), [1, 2, 3, 4, 5])) for env in SUITES[suite]
  }
  per = {c: {} for c in cols}  # agent -> replicate -> list of per-task {column: value}
  curves = {"model RMSE n=4": {}, "critic mean abs(Q - G)": {}}
  for r in all_runs:
    if r.suite != suite:
      continue
    diag = diagnostic_replicates(r)
    success = {rep["seed"]: rep for rep in replicates(r)}
    for seed, by_step in diag.items():
      if sweep.steps not in by_step or seed not in success:
        continue
      row = dict(by_step[sweep.steps], success=float(success[seed]["success"][-1]))
      per[r.agent].setdefault((r.env, r.data_seed, seed), []).append(row)
      for name, c in curves.items():
        c.setdefault(r.agent, {}).setdefault((r.data_seed, seed), []).append(
          {s: v[name] for s, v in by_step.items() if name in v}
        )
  names = ["success (%)"] + [c for c, _, _ in DIAGNOSTIC_COLUMNS]
  md = ["| agent | " + " | ".join(names) + " |", "|" + "---|" * (len(names) + 1)]
  for c in cols:
    pooled = {}
    for (env, d, seed), rows in per[c].items():
      if len(rows) == n_tasks[env]:
        pooled.setdefault((d, seed), []).append({k: np.mean([x[k] for x in rows]) for k in rows[0]})
    reps = [{k: np.mean([x[k] for x in v]) for k in v[0]} for v in pooled.values()]
    cells = []
    for name in ["success"] + [n for n, _, _ in DIAGNOSTIC_COLUMNS]:
      xs = [rep[name] for rep in reps if name in rep]
      cells.append(_cell_precise(xs, 0 if name == "success" else 3))
    md.append(f"| {AGENT_COLUMNS.get(c, c)} | " + " | ".join(cells) + " |")
  return "\n".join(md), curves


def _cell_precise(xs, digits: int) -> str:
  if not xs:
    return "–"
  m, lo, hi = t_interval(xs)
  f = lambda v: f"{v:.{digits}g}" if digits else f"{v:.0f}"  # noqa: E731
  return f"{f(m)} [{f(lo)}, {f(hi)}] ({len(xs)})" if np.isfinite(lo) else f"{f(m)} (1)"


def plot_diagnostic_curves(path_stem: pathlib.Path, curves: dict) -> list[str]:
  """<stem>_model.png and <stem>_critic.png: mean and 95 % band over replicates per agent."""
  written = []
  for name, by_agent in curves.items():
    lines = {}
    for agent, reps in by_agent.items():
      # a replicate's curve: mean over its tasks at the steps they share
      per = []
      for tasks in reps.values():
        steps = sorted(set.intersection(*(set(t) for t in tasks)))
        per.append({s: np.mean([t[s] for t in tasks]) for s in steps})
      steps = sorted(set.intersection(*(set(p) for p in per)))
      if not steps:
        continue
      stats_ = [t_interval([p[s] for p in per]) for s in steps]
      m, lo, hi = (np.array(z) for z in zip(*stats_))
      lo, hi = np.where(np.isfinite(lo), lo, m), np.where(np.isfinite(hi), hi, m)
      lines[f"{AGENT_COLUMNS.get(agent, agent)} (n={len(per)})"] = (steps, m, lo, hi)
    if lines:
      tag = "model" if name.startswith("model") else "critic"
      path = f"{path_stem}_{tag}.png"
      plots.lines(path, lines, "update step", f"held-out {name}")
      written.append(path)
  return written


def plot_curves(path_stem: pathlib.Path, curves: dict) -> None:
  """Success vs updates and vs wall-clock seconds: mean and 95 % band over replicates."""
  by_step, by_time = {}, {}
  for col, reps in curves.items():
    # A replicate's curve: mean over its tasks (same evaluation steps across runs of a sweep).
    per = [np.mean([r["success"] for r in v], 0) for v in reps.values()]
    steps = next(iter(reps.values()))[0]["steps"]
    rate = np.nanmedian([r["rate"] for v in reps.values() for r in v])
    stats_ = [t_interval(x) for x in np.stack(per, 1)]
    m, lo, hi = (np.array(z) for z in zip(*stats_))
    lo, hi = np.where(np.isfinite(lo), lo, m), np.where(np.isfinite(hi), hi, m)
    label = f"{AGENT_COLUMNS.get(col, col)} (n={len(per)})"
    by_step[label] = (steps, m, lo, hi)
    by_time[label] = (steps / rate, m, lo, hi)
  plots.lines(f"{path_stem}_steps.png", by_step, "update step", "success rate (%)")
  plots.lines(
    f"{path_stem}_wallclock.png", by_time, "wall-clock seconds (training)", "success rate (%)"
  )


def record(sweep: Sweep) -> dict:
  """What defines a sweep (its root's config.json): a root holds one sweep's runs and table."""
  out = dataclasses.asdict(sweep)
  for k in ("root", "config_file"):  # where, not what
    out.pop(k)
  return out


def _holds(path: pathlib.Path, text: str) -> bool:
  return path.is_file() and path.read_bytes() == text.encode()


def _write_text(path: pathlib.Path, text: str) -> bool:
  """Writes ``text`` unless ``path`` holds it already (a re-run leaves the file as it is)."""
  if _holds(path, text):
    return False
  tmp = path.with_name(path.name + ".tmp")
  tmp.write_bytes(text.encode())
  tmp.replace(path)
  return True


def write_commands(sweep: Sweep, all_runs: list[Run]) -> pathlib.Path:
  """``<root>/commands.sh``: one command line per run (call inside ``workdir.session``)."""
  sweep.root.mkdir(parents=True, exist_ok=True)
  path = sweep.root / "commands.sh"
  _write_text(path, "".join(shlex.join(r.argv) + "\n" for r in all_runs))
  return path


def execute(sweep: Sweep, all_runs: list[Run]) -> None:
  """Runs every unfinished run, one after the other (a partial one resumes from its checkpoint)."""
  for r in all_runs:
    if finished(r, sweep.steps):
      print(f"done already: {r.workdir}", flush=True)
      continue
    print(shlex.join(r.argv), flush=True)
    subprocess.run([sys.executable, *r.argv[1:]], check=False)


def write_tables(sweep: Sweep, all_runs: list[Run]) -> str:
  """table.md, table_<suite>.csv and the curves of every suite; returns (and prints) table.md.

  When table.md and every suite's files already hold this aggregate, nothing is rewritten."""
  sweep.root.mkdir(parents=True, exist_ok=True)
  out, parts, diag_curves = [], [], {}
  for s in sweep.suites:
    md, rows, curves = table(sweep, all_runs, s)
    out.append(f"### {s}\n\n{md}\n")
    dmd, dcurves = diagnostic_table(sweep, all_runs, s)
    if any(dcurves.values()):
      out.append(f"#### {s}: success and held-out diagnostics at step {sweep.steps}\n\n{dmd}\n")
      diag_curves[s] = dcurves
    buf = io.StringIO(newline="")
    csv.writer(buf).writerows(rows)
    parts.append((s, buf.getvalue(), curves))
  text = "\n".join(out)
  stem = lambda s: sweep.root / f"curves_{s}"  # noqa: E731
  pngs = [f"{stem(s)}_{k}.png" for s, _, c in parts if c for k in ("steps", "wallclock")]
  table_md = sweep.root / "table.md"
  same = _holds(table_md, text) and all(pathlib.Path(p).exists() for p in pngs)
  same = same and all(_holds(sweep.root / f"table_{s}.csv", rows) for s, rows, _ in parts)
  if not same:
    for s, rows, curves in parts:
      _write_text(sweep.root / f"table_{s}.csv", rows)
      if curves:
        plot_curves(stem(s), curves)
      if s in diag_curves:
        plot_diagnostic_curves(stem(s), diag_curves[s])
    _write_text(table_md, text)  # last: the record that the files above are this aggregate
  print(text)
  return text
