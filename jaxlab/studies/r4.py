"""R4's studies (docs/r4.md): R4 against RbRL, Bradley-Terry and the true reward, one per task.

An arm is a reward learner at a rater noise (``r4_noise0.5``: R4 with Gaussian noise of 0.5 x the
pool's return std before binning) or ``true`` (PPO on the true reward: the upper control, which
rates nothing). A cell runs :func:`jaxlab.rl.r4.protocol.run` (offline protocol, simulated
raters) once for all its seeds, their PPO vmapped in one compiled program, in
``<workdir>/seeds<a>-<b>...`` (one seed: ``<workdir>/seed<k>``; a finished run is read back, not
rerun); each seed's record is what its run alone returns.
Within a seed every arm sees the same behaviour pool, held-out trajectories, rater noise draw and
PPO seed (all derive from the seed), so the pairs isolate the reward-learning loss; every arm
trains PPO for the same updates.
"""

from __future__ import annotations

import functools
import pathlib

from jaxlab.core import stats
from jaxlab.studies.spec import Study, with_fields

CLAIM = (
  "A reward learned from trajectory ratings by ranked return regression (R4) orders held-out "
  "trajectories and trains policies better than RbRL and Bradley-Terry preference learning on the "
  "same ratings (Kharyal, Muslimani, Taylor, arXiv 2601.09236)."
)
NOISES = (0.0, 0.5)
LEARNERS = ("r4", "rbrl", "bt")
ARMS = ("true", *(f"{m}_noise{n:g}" for n in NOISES for m in LEARNERS))
PAIRS = tuple((f"r4_noise{n:g}", f"{b}_noise{n:g}") for n in NOISES for b in ("rbrl", "bt"))
TESTS = (
  stats.Test("superiority", "heldout/kendall_tau"),
  stats.Test("superiority", "eval/true_return"),
)
METRICS = ("heldout/kendall_tau", "heldout/spearman_rho", "eval/true_return")
# The budget, shrunk to 2 CPU cores (docs/r4.md): every other setting is r4.get_config()'s.
SHRUNK = {
  "reward.steps": 200,
  "eval_points": 1,
  "ppo.eval_envs": 16,
  "ppo.eval_steps": 500,
}
# Asterix: 68 % of the behaviour pool scores 0, so quantile edges collapse to 2 classes; fixed
# edges (classes 0, 1, >= 2 points) read off the pool's return histogram before any PPO run.
TASKS = {
  "cartpole": dict(updates=24, fields={}),
  "asterix-minatar": dict(updates=16, fields={"traj_len": 100, "bins": (0.5, 1.5)}),
}


def arm_setting(arm: str) -> tuple[str, float]:
  """``(method, rater noise)`` of an arm (``true`` rates nothing: noise 0)."""
  if arm == "true":
    return "true", 0.0
  method, noise = arm.split("_noise")
  return method, float(noise)


def config(env: str, arm: str):
  """The r4 config a cell of ``arm`` on ``env`` runs."""
  from jaxlab.rl import r4

  _, noise = arm_setting(arm)
  return with_fields(r4.get_config(), {**SHRUNK, **TASKS[env]["fields"], "noise": noise})


def cell(env: str, arm: str, seeds: tuple[int, ...], workdir: pathlib.Path) -> dict[int, dict]:
  """One :func:`jaxlab.rl.r4.protocol.run` of every seed (PPO vmapped over them) -> each seed's
  summary (``config`` included) as its run alone returns it."""
  from jaxlab.rl.r4 import protocol

  method, _ = arm_setting(arm)
  seeds = tuple(seeds)
  name = f"seed{seeds[0]}" if len(seeds) == 1 else "seeds" + "-".join(map(str, seeds))
  out = protocol.run(
    config(env, arm),
    env=env,
    method=method,
    ratings="simulated",
    protocol="offline",
    updates=TASKS[env]["updates"],
    seeds=seeds,
    workdir=pathlib.Path(workdir) / name,
  )
  if len(seeds) == 1:
    return {seeds[0]: out}
  return {seed: out["per_seed"][str(seed)] for seed in seeds}


def _study(name: str, env: str) -> Study:
  updates = TASKS[env]["updates"]
  return Study(
    name=name,
    claim=CLAIM,
    arms=ARMS,
    control="rbrl_noise0",
    pairs=PAIRS,
    seeds=(0, 1, 2),
    tuning_seeds=(),
    budget={"ppo_updates": updates, "env_steps": updates * 16 * 128, "reward_steps": 200},
    tests=TESTS,
    metrics=METRICS,
    cell=functools.partial(cell, env),
    note=(
      f"{env}: arms `<learner>_noise<n>` learn a reward from 512 simulated ratings with rater "
      "noise n (x the pool's return std); `true` is PPO on the true reward (the upper control). "
      "Nothing was tuned: r4.get_config() with the budget cut to 2 CPU cores (reward fit 200 "
      "steps, one evaluation of 16 x 500 steps)."
    ),
  )


STUDIES = (_study("r4/cartpole", "cartpole"), _study("r4/asterix", "asterix-minatar"))
