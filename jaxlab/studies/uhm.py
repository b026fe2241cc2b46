"""UHM's studies (docs/uhm.md): UHM against ReBRAC at equal updates on OGBench cube-single tasks.

An arm is an agent (``uhm``, ``rebrac``; in ``uhm/size`` also ``dtd``, the model-free multi-step
control) on a data set. A cell trains the arm's seeds together, vmapped, in ONE
:func:`jaxlab.rl.uhm.train` call per task in ``<workdir>/s<first>-<last>`` (a finished run is
not trained again), then reads each seed's final success and held-out diagnostics from the run's
files (:func:`per_seed`); ``uhm/size`` also re-evaluates the last checkpoint over 50 episodes per
seed (:func:`jaxlab.rl.uhm.evaluate_checkpoint`). Success is in %; evaluation episode i resets
with seed 10000 + i in every run.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import json
import pathlib
from typing import Any

from jaxlab.core import stats
from jaxlab.core.errors import require
from jaxlab.studies.spec import Study, with_fields

CLAIM = (
  "Universal horizon models, an n-step flow model bootstrapped into a multi-step critic target, "
  "make offline RL more sample-efficient and more successful than ReBRAC and model-free "
  "multi-step targets on OGBench (Chung, Lee, Oh, arXiv 2605.15603)."
)
ENV = "cube-single-play-singletask-task2-v0"
# The `pilot` preset of experiments/configs/uhm.py: 2x128 networks, batch 128, 3 flow steps.
PILOT = {
  "actor_hidden_dims": (128, 128),
  "value_hidden_dims": (128, 128),
  "model_hidden_dims": (128, 128),
  "reward_hidden_dims": (128,),
  "batch_size": 128,
  "flow_steps": 3,
}
# Held-out diagnostics kept per seed: (metric, key in diagnostics.jsonl, horizon index)
DIAGNOSTICS = (
  ("model_err_n1", "model_err", 0),
  ("model_err_n4", "model_err", 3),
  ("model_err_state_n4", "model_err_state", 3),
  ("model_err_mean_n4", "model_err_mean", 3),
  ("q_mae", "q_mae", None),
  ("q_base_mae", "q_base_mae", None),
  ("q_corr", "q_corr", None),
)


@dataclasses.dataclass(frozen=True)
class Setting:
  """One study's protocol: updates, evaluations, data set (episodes None: the embedded set), the
  cube-single tasks (a seed's score is its mean over them) and the agent config's fields."""

  steps: int
  eval_every: int
  eval_episodes: int
  episodes: int | None = None
  data_seed: int = 0
  reeval_episodes: int = 0  # > 0: the last checkpoint re-evaluated over this many episodes
  tasks: tuple[int, ...] = (2,)
  fields: tuple[tuple[str, Any], ...] = tuple(PILOT.items())
  dataset: str = "cube-single-play"  # OGBench data set; the tasks are its singletask tasks
  eval_seed: int = 10_000  # evaluation episode i resets with eval_seed + i (uhm.EVAL_SEED)
  last_evals: int = 1  # success_pct: each seed's mean over its last this-many evaluation points


def config(agent: str, setting: Setting | None = None):
  """The agent config of a cell (task values unset: each run takes its task's)."""
  from jaxlab.rl import uhm

  fields = dict(setting.fields) if setting is not None else PILOT
  return with_fields(uhm.get_config(), {**fields, "agent": agent})


def env_name(task: int, dataset: str = "cube-single-play") -> str:
  return f"{dataset}-singletask-task{task}-v0"


def _train(task, loop, seeds: tuple[int, ...], eval_episodes: int, workdir, eval_seed: int):
  """``uhm.train`` on ``seeds``, vmapped in one program (seed k equals a run of seed k alone)."""
  from jaxlab.rl import uhm

  return uhm.train(
    task, loop, seeds=seeds, eval_episodes=eval_episodes, workdir=workdir, eval_seed=eval_seed
  )


def _success(run_dir: pathlib.Path, seeds: tuple[int, ...], steps: int) -> dict[int, float]:
  """Each seed's in-training success at ``steps`` from eval.csv: a row per seed (a ``seed``
  column), or one row with a ``success_seed<k>`` column per seed, or one seed's ``success``."""
  with open(run_dir / "eval.csv", newline="") as f:
    rows = [r for r in csv.DictReader(f) if r.get("step") and float(r["step"]) == steps]
  require(bool(rows), "workdir", f"{run_dir} did not reach step {steps}")
  if "seed" in rows[0]:
    return {int(float(r["seed"])): float(r["success"]) for r in rows}
  col = lambda k: "success" if len(seeds) == 1 else f"success_seed{k}"  # noqa: E731
  return {k: float(rows[-1][col(k)]) for k in seeds}


QPI = ("qpi_mae", "qpi_bias", "qpi_corr", "qpi_base_mae", "qpi_n")


def _eval_columns(run_dir: pathlib.Path, steps: int, columns=QPI) -> dict[int, dict]:
  """``{seed: {column: value}}`` of eval.csv's per-seed rows at ``steps`` (columns present and
  non-empty; NaN stays NaN: no scored state)."""
  with open(run_dir / "eval.csv", newline="") as f:
    rows = [r for r in csv.DictReader(f) if r.get("step") and float(r["step"]) == steps]
  out = {}
  for r in rows:
    if r.get("seed") not in (None, ""):
      out[int(float(r["seed"]))] = {c: float(r[c]) for c in columns if r.get(c) not in (None, "")}
  return out


def _success_last(run_dir: pathlib.Path, seeds, steps: int, every: int, last: int) -> dict:
  """Each seed's mean success over its evaluations at ``steps``, ``steps - every``, ... (``last``
  points): one checkpoint's success swings, the mean of the last few does not as much."""
  points = [steps - i * every for i in range(last) if steps - i * every > 0]
  per = [_success(run_dir, seeds, p) for p in points]
  return {k: sum(p[k] for p in per) / len(per) for k in seeds}


def per_seed(
  run_dir, seeds: tuple[int, ...], steps: int, reeval_episodes: int = 0, last=(0, 1)
) -> dict:
  """``{seed: {"step", "success_pct", <diagnostics at the last step>}}`` from a finished run's
  eval.csv, diagnostics.jsonl and (with ``reeval_episodes``) its re-evaluation; the in-training
  evaluation's success is ``success_pct`` or, when re-evaluated, ``success_train_eval_pct``."""
  from jaxlab.rl.uhm import diagnostics

  run_dir = pathlib.Path(run_dir)
  every, n_last = last
  success = (
    _success_last(run_dir, seeds, steps, every, n_last)
    if n_last > 1
    else _success(run_dir, seeds, steps)
  )
  diag = diagnostics.read_diagnostics(run_dir).get(steps, {})
  qpi = _eval_columns(run_dir, steps)
  again = {}
  if reeval_episodes:
    path = run_dir / f"eval_step{steps}_n{reeval_episodes}.json"
    again = json.loads(path.read_text())
  out = {}
  for i, seed in enumerate(seeds):
    train_eval = 100 * success[seed]
    rec = {"step": steps}
    if again:
      rec["success_pct"] = 100 * float(again["success_per_seed"][i])
      rec["success_train_eval_pct"] = train_eval
    else:
      rec["success_pct"] = train_eval
    rec.update(qpi.get(seed, {}))
    d = diag.get(str(seed), {})
    for name, key, h in DIAGNOSTICS:
      if key in d:
        rec[name] = float(d[key][h] if h is not None else d[key])
    out[seed] = rec
  return out


def _run(setting: Setting, agent: str, task: int, seeds: tuple[int, ...], wd: pathlib.Path):
  """Trains (unless finished) and re-evaluates one task's run; returns its per-seed results."""
  from jaxlab.core import runtime
  from jaxlab.rl import uhm

  s, env = setting, env_name(task, setting.dataset)
  summary = wd / "summary.json"
  if not (summary.exists() and json.loads(summary.read_text()).get("step") == s.steps):
    cfg, sources = uhm.resolve_task_config(config(agent, s), env)
    uhm.check_memory(cfg, num_seeds=len(seeds))
    task_ = uhm.load_task(cfg, env, num_episodes=s.episodes, data_seed=s.data_seed, sources=sources)
    log_every = min(1000, s.eval_every)
    loop = runtime.Loop(
      num_steps=s.steps, log_every=log_every, ckpt_every=s.eval_every, eval_every=s.eval_every
    )
    _, result = _train(task_, loop, seeds, s.eval_episodes, wd, s.eval_seed)
    uhm.write_report(wd, task_, result, seeds)
  if s.reeval_episodes:
    uhm.evaluate_checkpoint(wd, s.steps, s.reeval_episodes)  # kept when already there
  return per_seed(wd, seeds, s.steps, s.reeval_episodes, (s.eval_every, s.last_evals))


def cell(setting: Setting, agent: str, seeds, workdir: pathlib.Path) -> dict[int, dict]:
  """Each task's run (``<workdir>/s<first>-<last>``, or ``<workdir>/task<k>/...`` with several
  tasks); with several tasks a seed's metrics are their means over the tasks and its config maps
  each task to its run's config."""
  seeds = tuple(seeds)
  name = f"s{seeds[0]}-{seeds[-1]}"
  many = len(setting.tasks) > 1
  runs, configs = [], {}
  for task in setting.tasks:
    wd = pathlib.Path(workdir) / (f"task{task}" if many else "") / name
    runs.append(_run(setting, agent, task, seeds, wd))
    configs[env_name(task, setting.dataset)] = json.loads((wd / "config.json").read_text())
  out = {}
  for seed in seeds:
    per_task = [r[seed] for r in runs]
    keys = [k for k in per_task[0] if all(k in r for r in per_task)]
    rec = {k: sum(r[k] for r in per_task) / len(per_task) for k in keys}
    rec["step"] = setting.steps
    config_ = configs if many else configs[env_name(setting.tasks[0], setting.dataset)]
    out[seed] = {**rec, "config": config_, **({"tasks": list(setting.tasks)} if many else {})}
  return out


def _arm_cell(settings: dict, arm: str, seeds, workdir):
  setting, agent = settings[arm]
  return cell(setting, agent, seeds, workdir)


PILOT_SETTING = Setting(steps=4000, eval_every=1000, eval_episodes=5)
SIZES = (100, 300, 1000)
SIZE_ARMS = {
  f"e{n}_{a}": (Setting(20_000, 5000, 5, episodes=n, reeval_episodes=50), a)
  for n in SIZES
  for a in (("uhm", "rebrac", "dtd") if n == 100 else ("uhm", "rebrac"))
}
_METRICS = ("success_pct", *(name for name, _, _ in DIAGNOSTICS))

# --- the five agents on noisy data (docs/uhm.md, "Against GHM on noisy data") ---
AGENTS = ("uhm", "ghm", "mbtd", "dtd", "rebrac")
NOISY = "scene-noisy"  # the paper's noisy table: ReBRAC 27, DTD 6, MBTD 42, GHM 57, UHM 61
NOISY_EPISODES = 200  # generated once by OGBench's noisy oracles (data seed 0), ~200 k transitions
TUNING_SEEDS = (100, 101)  # the pilot's training seeds; its episodes reset with 20000 + i
PILOT_TASKS = (1, 2)
NOISY_PILOT_ARMS = {
  f"{a}_t{t}": (
    Setting(
      5000, 2500, 10, episodes=NOISY_EPISODES, tasks=(t,), dataset=NOISY, eval_seed=20_000,
      last_evals=2,
    ),
    a,
  )
  for t in PILOT_TASKS
  for a in AGENTS
}  # fmt: skip
# The longer probe of the same tuning seeds: can 20 000 updates (uhm/noisy's budget) move success
# off 0 % on task 1, where every agent is at 0 % after 5000?
NOISY_PROBE_ARMS = {
  f"{a}_t1": (
    Setting(
      20_000, 5000, 10, episodes=NOISY_EPISODES, tasks=(1,), dataset=NOISY, eval_seed=20_000,
      last_evals=3,
    ),
    a,
  )
  for a in ("uhm", "ghm", "rebrac")
}  # fmt: skip
NOISY_TASK = 1  # chosen from the pilot (docs/uhm.md): the task whose arms are off 0 % and 100 %
# what has run of each study (the table says it too); "not run" until its results are committed
STATUS = {
  "uhm/noisy_pilot": "Ran 2026-12-07 on 2 CPU cores (about 50 min, shared).",
  "uhm/noisy_probe": "Ran 2026-12-07 on 2 CPU cores (about 16 min).",
  "uhm/noisy": "(This study has not run yet.)",
  "uhm/noisy_gpu": "Sized for one GPU job (benchmarks/uhm_study_gpu.sh); not run yet.",
}
K_MAX_LARGE = 64  # the winsorization ablation: the horizon cap far above the default 8


def noisy_setting(steps: int = 20_000, eval_every: int = 5000, eval_episodes: int = 50, **kw):
  """The main study's protocol: success over ``eval_episodes`` held-out episodes (resets 10000 +
  i), each seed's mean over its last 3 evaluation points."""
  return Setting(
    steps, eval_every, eval_episodes, episodes=NOISY_EPISODES, tasks=(NOISY_TASK,),
    dataset=NOISY, last_evals=3, **kw,
  )  # fmt: skip


def noisy_arms(setting: Setting) -> dict:
  arms = {a: (setting, a) for a in AGENTS}
  big = dataclasses.replace(setting, fields=(*setting.fields, ("k_max", K_MAX_LARGE)))
  arms[f"uhm_kmax{K_MAX_LARGE}"] = (big, "uhm")
  return arms


def _nets(fields) -> str:
  if fields == tuple(PILOT.items()):
    return "the `pilot` preset (2x128 networks, batch 128)"
  if fields == NET_3X256:
    return "experiments.uhm's default networks (3x256, batch 256)"
  return "uhm.get_config() with " + ", ".join(f"{k}={v}" for k, v in fields)


def noisy(setting: Setting | None = None, seeds=(0, 1, 2, 3, 4), name="uhm/noisy") -> Study:
  """UHM against GHM, MBTD, DTD(lambda) and ReBRAC at equal updates on scene-noisy (arms), plus
  UHM with a large horizon cap (the winsorization ablation); a CPU run, or a GPU one with other
  arguments (benchmarks/uhm_study_gpu.sh)."""
  setting = setting or noisy_setting()
  arms = noisy_arms(setting)
  pairs = (("uhm", "ghm"), ("uhm", "rebrac"), ("uhm", f"uhm_kmax{K_MAX_LARGE}"))
  return Study(
    name=name,
    claim=CLAIM,
    arms=tuple(arms),
    control="rebrac",
    pairs=pairs,
    seeds=seeds,
    tuning_seeds=TUNING_SEEDS,
    budget={"step": setting.steps},
    tests=(stats.Test("superiority", "success_pct", comparisons=len(pairs)),),
    metrics=("success_pct", "qpi_mae", "qpi_bias", "q_mae", "q_corr"),
    cell=functools.partial(_arm_cell, arms),
    note=(
      f"{env_name(setting.tasks[0], setting.dataset)}: {setting.episodes} episodes generated by "
      f"OGBench's noisy oracles (data seed {setting.data_seed}); {_nets(setting.fields)}, "
      f"{setting.steps} updates for every arm; `success_pct`: each seed's mean over its last "
      f"{setting.last_evals} evaluations (every {setting.eval_every} updates) of "
      f"{setting.eval_episodes} episodes that reset with seeds {setting.eval_seed} + i, never "
      "used to choose anything (the pilot, `uhm/noisy_pilot`, used "
      "training seeds 100-101 and episodes 20000 + i). Declared: UHM - GHM and UHM - ReBRAC, "
      "paired by seed, two-sided paired t (conservative for the one-sided claim), Holm over 3 "
      f"comparisons with the k_max ablation (`uhm_kmax{K_MAX_LARGE}`: p_H winsorized at "
      f"{K_MAX_LARGE} instead of 8). `qpi_*`: the critic against the actor's own returns at the "
      "last evaluation (states of successful episodes); `q_*`: against the data's returns. "
      + STATUS.get(name, "")
    ),
  )


# experiments.uhm's command-line default: 3x256 networks (FQL's 4x512 is uhm.get_config()'s)
NET_3X256 = (
  ("actor_hidden_dims", (256, 256, 256)),
  ("value_hidden_dims", (256, 256, 256)),
  ("model_hidden_dims", (256, 256, 256)),
)


def cube(
  steps: int = 15_000,
  eval_every: int = 5000,
  eval_episodes: int = 10,
  episodes: int = 60,
  fields: tuple[tuple[str, Any], ...] = NET_3X256,
) -> Study:
  """UHM against ReBRAC on the five cube-single tasks (``uhm/cube``, for a GPU; the arguments
  shrink it for a dry run on a CPU, benchmarks/uhm_study_gpu.sh --cpu)."""
  setting = Setting(
    steps, eval_every, eval_episodes, episodes=episodes, tasks=(1, 2, 3, 4, 5), fields=fields
  )
  nets = (
    "experiments.uhm's default networks (3x256, batch 256)"
    if fields == NET_3X256
    else "uhm.get_config() with " + ", ".join(f"{k}={v}" for k, v in fields)
  )
  return Study(
    name="uhm/cube",
    claim=CLAIM,
    arms=("uhm", "rebrac"),
    control="rebrac",
    seeds=(0, 1, 2),
    tuning_seeds=(),
    budget={"step": steps},
    tests=(stats.Test("superiority", "success_pct"),),
    metrics=_METRICS,
    cell=functools.partial(_arm_cell, {a: (setting, a) for a in ("uhm", "rebrac")}),
    note=(
      f"The five cube-single tasks, a generated set of {episodes} episodes (data seed 0); "
      f"{nets}, {steps} updates, success over "
      f"{eval_episodes} episodes per seed at the last step; a seed's numbers are its means over "
      "the five tasks. Prepared for one GPU job (benchmarks/uhm_study_gpu.sh); not run yet."
    ),
  )


# uhm/noisy sized for one GPU job (benchmarks/uhm_study_gpu.sh): the data set is copied to the
# GPU machine, and with the MuJoCo wheels and the repository it stays under 64 MiB, which leaves
# room for ~50 scene-noisy episodes (~0.19 MB each, stored without qvel, which training never
# reads).
GPU_NOISY_EPISODES = 50


def noisy_gpu_setting(
  steps: int = 20_000,
  eval_every: int = 10_000,
  eval_episodes: int = 20,
  episodes: int = GPU_NOISY_EPISODES,
  fields: tuple[tuple[str, Any], ...] = NET_3X256,
) -> Setting:
  """``uhm/noisy_gpu``'s protocol: 3x256 networks; evaluations only at the points it averages (the
  last two), since one evaluation point of 3 seeds x 20 episodes of up to 750 MuJoCo steps costs
  ~1.5 min of a CPU core; the arguments shrink it for a dry run on a CPU."""
  return Setting(
    steps, eval_every, eval_episodes, episodes=episodes, tasks=(NOISY_TASK,), dataset=NOISY,
    last_evals=2, fields=fields,
  )  # fmt: skip


STUDIES = (
  Study(
    name="uhm/pilot",
    claim=CLAIM,
    arms=("uhm", "rebrac"),
    control="rebrac",
    seeds=(0, 1, 2),
    tuning_seeds=(),
    budget={"step": PILOT_SETTING.steps, "batch_size": 128},
    tests=(stats.Test("superiority", "success_pct"),),
    metrics=_METRICS,
    cell=functools.partial(_arm_cell, {a: (PILOT_SETTING, a) for a in ("uhm", "rebrac")}),
    note=(
      f"{ENV}, the embedded data set (12 episodes, 12 k transitions; held out: its 2 validation "
      "episodes, 128 fixed start states); the `pilot` preset (2x128 networks, batch 128, 3 "
      "midpoint flow steps; everything else uhm.get_config()'s); 4000 updates, success over 5 "
      "episodes per seed at step 4000. Diagnostics at step 4000 on the held-out episodes: "
      "`model_err_n<k>` the horizon model's RMSE at n = k (training-set std units) against the "
      "current-state and mean-displacement baselines; `q_mae` the critic's mean |Q - G| against "
      "the data's Monte-Carlo returns G, `q_base_mae` the constant-G baseline, `q_corr` corr(Q, "
      "G). The raw `config` is this study's (the runs' config.json files were not kept). "
      "Nothing tuned."
    ),
  ),
  Study(
    name="uhm/size",
    claim=CLAIM,
    arms=tuple(SIZE_ARMS),
    control="e100_rebrac",
    pairs=(
      ("e100_uhm", "e100_rebrac"),
      ("e300_uhm", "e300_rebrac"),
      ("e1000_uhm", "e1000_rebrac"),
      ("e100_uhm", "e100_dtd"),
    ),
    seeds=(0, 1, 2),
    tuning_seeds=(),
    budget={"step": 20_000, "batch_size": 128},
    tests=(stats.Test("superiority", "success_pct"),),
    metrics=("success_pct", "success_train_eval_pct"),
    cell=functools.partial(_arm_cell, SIZE_ARMS),
    note=(
      f"{ENV}, data generated by OGBench's scripted oracles (data seed 0; `e<n>`: n training "
      "episodes of 1000 steps plus 10 % validation episodes); the `pilot` preset at 20 000 "
      "updates; `success_pct`: the step-20000 checkpoint re-evaluated over 50 episodes per seed, "
      "`success_train_eval_pct`: the in-training evaluation at step 20000 (5 episodes). "
      "`e100_dtd` is DTD(lambda), the model-free multi-step control (no horizon model). The "
      "held-out diagnostics of these runs are in their summary.json as means over the 3 seeds "
      "only (`runs/`). Nothing tuned."
    ),
  ),
  cube(),
  Study(
    name="uhm/noisy_pilot",
    claim=CLAIM,
    arms=tuple(NOISY_PILOT_ARMS),
    control="rebrac_t1",
    pairs=tuple((f"{a}_t{t}", f"rebrac_t{t}") for t in PILOT_TASKS for a in AGENTS[:-1]),
    seeds=TUNING_SEEDS,
    tuning_seeds=(),
    budget={"step": 5000},
    tests=(stats.Test("superiority", "success_pct"),),
    metrics=("success_pct", "qpi_bias", "qpi_mae", "qpi_base_mae", "q_mae"),
    cell=functools.partial(_arm_cell, NOISY_PILOT_ARMS),
    note=(
      f"The pilot that chooses the task of `uhm/noisy`: {NOISY}-singletask tasks "
      f"{', '.join(map(str, PILOT_TASKS))} ({NOISY_EPISODES} generated episodes, data seed 0), "
      "the five agents at 5000 updates, training seeds 100-101, 10 episodes resetting with 20000 "
      "+ i at 2500 and 5000 updates (`success_pct`: their mean). Its seeds and episodes are "
      "never used for the reported study. A pilot: its tests are not evidence. "
      + STATUS.get("uhm/noisy_pilot", "")
    ),
  ),
  Study(
    name="uhm/noisy_probe",
    claim=CLAIM,
    arms=tuple(NOISY_PROBE_ARMS),
    control="rebrac_t1",
    pairs=(("uhm_t1", "ghm_t1"), ("uhm_t1", "rebrac_t1")),
    seeds=TUNING_SEEDS,
    tuning_seeds=(),
    budget={"step": 20_000},
    tests=(stats.Test("superiority", "success_pct", comparisons=2),),
    metrics=("success_pct", "qpi_mae", "qpi_bias", "q_mae"),
    cell=functools.partial(_arm_cell, NOISY_PROBE_ARMS),
    note=(
      f"A probe on the tuning seeds 100-101 after `uhm/noisy_pilot` found every agent at 0 % at "
      f"5000 updates: UHM, GHM and ReBRAC on {NOISY}-singletask task 1 at `uhm/noisy`'s 20 000 "
      "updates (`pilot` preset), 10 episodes resetting with 20000 + i every 5000 updates, "
      "`success_pct` each seed's mean over the last 3. It decides whether `uhm/noisy` can show "
      "success at this budget; its tests are not evidence. " + STATUS.get("uhm/noisy_probe", "")
    ),
  ),
  noisy(),
  noisy(noisy_gpu_setting(), seeds=(0, 1, 2), name="uhm/noisy_gpu"),
)
