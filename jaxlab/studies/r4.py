"""R4's studies (docs/r4.md): R4 against RbRL, Bradley-Terry and the true reward, one per task.

``r4/pendulum`` tests "matches or outperforms" as non-inferiority with every learner given the
same 512 labels by the same noisy rater; ``r4/cartpole`` and ``r4/asterix`` test superiority at 3
seeds with Bradley-Terry's fresh pairs (``bt_pairs`` absent: "fresh").

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
  # PPO settings chosen on the tuning seeds (docs/results/r4/notes.md): with the CartPole
  # defaults (discount 0.99, clipped value loss) PPO barely leaves random play on Pendulum's
  # returns of -1000s; Bradley-Terry gets R4's label count (config.bt_pairs).
  "pendulum": dict(
    updates=64,
    fields={
      "ppo.gamma": 0.9,
      "ppo.epochs": 10,
      "ppo.minibatches": 8,
      "ppo.ent_coef": 0.0,
      "ppo.clip_value": False,
      "bt_pairs": "matched",
    },
  ),
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
  c = with_fields(r4.get_config(), {**SHRUNK, **TASKS[env]["fields"], "noise": noise})
  if "bt_pairs" not in TASKS[env]["fields"]:
    del c["bt_pairs"]  # recorded before the field existed; absent, it runs "fresh" (r4.bt_pairs)
  return c


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


# --- r4/pendulum: "matches or outperforms" as declared non-inferiority, equal label counts ---
#
# On Pendulum-v1 every episode lasts 200 steps and the per-step cost depends on the state and
# action, so which trajectories a reward ranks higher decides the policy (on CartPole any positive
# per-step reward is optimal). Every learner gets 512 labels from the same noisy rater: R4 and
# RbRL 512 ratings, Bradley-Terry 512 pairs of the same rated trajectories compared on the returns
# that rater perceived (config.bt_pairs = "matched").
PENDULUM_NOISES = (0.1, 0.5)
PENDULUM_ARMS = ("true", *(f"{m}_noise{n:g}" for n in PENDULUM_NOISES for m in LEARNERS))
PENDULUM_PAIRS = tuple(
  (f"r4_noise{n:g}", f"{b}_noise{n:g}") for n in PENDULUM_NOISES for b in ("rbrl", "bt")
)
PENDULUM_COMPARISONS = 2 * len(PENDULUM_PAIRS)  # 4 pairs x (tau, return) = 8
TAU_MARGIN = 0.02
# 10 % of the true-reward arm's mean eval return on the tuning seeds at this budget
# (docs/results/r4/notes.md, the probe), fixed before any held-out seed ran.
TRUE_RETURN_PROBE = -232.2  # seeds 100, 101: -184.7, -279.8 (64 updates, these PPO settings)
RETURN_MARGIN = 23.2  # 0.1 x |TRUE_RETURN_PROBE|, to 0.1
PENDULUM_TESTS = (
  stats.Test(
    "non_inferiority", "heldout/kendall_tau", margin=TAU_MARGIN, comparisons=PENDULUM_COMPARISONS
  ),
  stats.Test(
    "non_inferiority", "eval/true_return", margin=RETURN_MARGIN, comparisons=PENDULUM_COMPARISONS
  ),
)
PENDULUM_STATUS = (
  " Budget cut to 2 CPU cores: PPO 1.3e5 environment steps, reward fit 200 Adam steps (the "
  "authors' 1500), one evaluation of 16 episodes."
)
PENDULUM_SEEDS = tuple(range(10))
PENDULUM_TUNING_SEEDS = (100, 101)


def _pendulum() -> Study:
  task = TASKS["pendulum"]
  updates, ppo = task["updates"], {k[4:]: v for k, v in task["fields"].items() if k[:4] == "ppo."}
  return Study(
    name="r4/pendulum",
    claim=(
      "A reward learned from trajectory ratings by ranked return regression (R4) matches or "
      "outperforms rating-based (RbRL) and preference-based (Bradley-Terry) reward learning "
      "given the same number of labels from the same rater (Kharyal, Muslimani, Taylor, "
      "arXiv 2601.09236)."
    ),
    arms=PENDULUM_ARMS,
    control="rbrl_noise0.1",
    pairs=PENDULUM_PAIRS,
    seeds=PENDULUM_SEEDS,
    tuning_seeds=PENDULUM_TUNING_SEEDS,
    budget={
      "ppo_updates": updates,
      "env_steps": updates * ppo.get("num_envs", 16) * ppo.get("num_steps", 128),
      "reward_steps": 200,
      "labels": 512,
    },
    tests=PENDULUM_TESTS,
    metrics=METRICS,
    cell=functools.partial(cell, "pendulum"),
    note=(
      "pendulum: arms `<learner>_noise<n>` learn a reward from 512 labels of a simulated rater "
      "with noise n (x the pool's return std): 512 ratings (r4, rbrl) or 512 pairs of the rated "
      "trajectories compared on the returns the rater perceived (bt); `true` is PPO on the true "
      "reward. PPO's discount, epochs, minibatches, entropy and value clipping, the updates and "
      "the return margin were chosen on tuning seeds 100 and 101 (docs/results/r4/notes.md); "
      "the held-out seeds are 0-9." + PENDULUM_STATUS
    ),
  )


STUDIES = (
  _study("r4/cartpole", "cartpole"),
  _study("r4/asterix", "asterix-minatar"),
  _pendulum(),
)
