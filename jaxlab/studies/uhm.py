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


def config(agent: str, setting: Setting | None = None):
  """The agent config of a cell (task values unset: each run takes its task's)."""
  from jaxlab.rl import uhm

  fields = dict(setting.fields) if setting is not None else PILOT
  return with_fields(uhm.get_config(), {**fields, "agent": agent})


def env_name(task: int) -> str:
  return f"cube-single-play-singletask-task{task}-v0"


def _train(task, loop, seeds: tuple[int, ...], eval_episodes: int, workdir):
  """``uhm.train`` on ``seeds``, vmapped in one program (seed k equals a run of seed k alone)."""
  from jaxlab.rl import uhm

  return uhm.train(task, loop, seeds=seeds, eval_episodes=eval_episodes, workdir=workdir)


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


def per_seed(run_dir, seeds: tuple[int, ...], steps: int, reeval_episodes: int = 0) -> dict:
  """``{seed: {"step", "success_pct", <diagnostics at the last step>}}`` from a finished run's
  eval.csv, diagnostics.jsonl and (with ``reeval_episodes``) its re-evaluation; the in-training
  evaluation's success is ``success_pct`` or, when re-evaluated, ``success_train_eval_pct``."""
  from jaxlab.rl.uhm import diagnostics

  run_dir = pathlib.Path(run_dir)
  success = _success(run_dir, seeds, steps)
  diag = diagnostics.read_diagnostics(run_dir).get(steps, {})
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

  s, env = setting, env_name(task)
  summary = wd / "summary.json"
  if not (summary.exists() and json.loads(summary.read_text()).get("step") == s.steps):
    cfg, sources = uhm.resolve_task_config(config(agent, s), env)
    uhm.check_memory(cfg, num_seeds=len(seeds))
    task_ = uhm.load_task(cfg, env, num_episodes=s.episodes, data_seed=s.data_seed, sources=sources)
    log_every = min(1000, s.eval_every)
    loop = runtime.Loop(
      num_steps=s.steps, log_every=log_every, ckpt_every=s.eval_every, eval_every=s.eval_every
    )
    _, result = _train(task_, loop, seeds, s.eval_episodes, wd)
    uhm.write_report(wd, task_, result, seeds)
  if s.reeval_episodes:
    uhm.evaluate_checkpoint(wd, s.steps, s.reeval_episodes)  # kept when already there
  return per_seed(wd, seeds, s.steps, s.reeval_episodes)


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
    configs[env_name(task)] = json.loads((wd / "config.json").read_text())
  out = {}
  for seed in seeds:
    per_task = [r[seed] for r in runs]
    keys = [k for k in per_task[0] if all(k in r for r in per_task)]
    rec = {k: sum(r[k] for r in per_task) / len(per_task) for k in keys}
    rec["step"] = setting.steps
    config_ = configs if many else configs[env_name(setting.tasks[0])]
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
      "the five tasks. Prepared for one GPU call (benchmarks/uhm_study_gpu.sh); not run yet."
    ),
  )


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
)
