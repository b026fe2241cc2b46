"""QRIM's studies (docs/qrim.md): robust against nominal PPO, and the inner minimum's queries.

``qrim/robust``: :func:`jaxlab.rl.qrim.robust.train_arm` per arm and seed on CartPole with U an
8 x 8 grid of pole length x mass: ``nominal`` (PPO on gymnax's parameters), ``random`` (each phase
on a uniform draw from U: robust's schedule without the worst-case selection, the control that
isolates the selection) and ``robust`` (each phase on the simulated Duerr-Hoyer minimiser's
argmin of J(pi, u) over U), evaluated on the 49 held-out cell midpoints. The arms of a seed share
the initial policy and PPO keys (the key of ``protocol.run``'s part 3), so the pairs are paired.

``qrim/queries``: per seed, the oracle queries of one inner minimum for |U| = 2^4 .. 2^14 with the
fitted log-log slope, and tabular robust value iteration at |U| = 16 .. 1024 (queries per backup
and the accuracy against exhaustive minimisation): one arm, no test (the claim is a rate).

``qrim/robust_wide``: the same comparison on a wider set with a third axis, and held out where
the grid does not reach: CartPole with U an 8 x 8 x 8 grid of pole half-length x pole mass x push
force (|U| = 512), evaluated on the 26 points outside the grid's range (:func:`wide_held_out`,
16 rollouts each), with a fourth arm, ``robust_exhaustive`` (the classical argmin over U), against
which ``robust_quantum`` is tested for non-inferiority. The extrapolation distance and the margin
were chosen on the tuning seeds (:func:`tune`, ``docs/results/qrim/robust_wide/tuning.json``)
before any held-out seed ran.

Each seed's record is in ``<workdir>/seed<k>`` (config.json, summary.json): a finished seed is
read back. A ``qrim/robust`` cell trains the arm for all its unfinished seeds in one call, their
PPO vmapped in one compiled program (:func:`jaxlab.rl.qrim.robust.train_arm_seeds`; each seed
draws the keys of its run alone).
"""

from __future__ import annotations

import pathlib

from jaxlab.core import stats
from jaxlab.studies import runner
from jaxlab.studies.spec import Study

CLAIM = (
  "Quantum minimum finding over the uncertainty set makes the inner minimisation of robust RL "
  "take O(sqrt |U|) oracle queries instead of |U| while the outer RL is unchanged and robust "
  "(Lee, Kim, Yoon, Quantum Robust Inner Minimization, ICML 2026; public only as an abstract, "
  "no arXiv id; reconstructed)."
)
ENV, SET_SIZE, UPDATES = "cartpole", 64, 200
BACKUP_SIZES = (16, 64, 256, 1024)
ARMS = ("nominal", "random", "robust")


def _search(config):
  from jaxlab.rl.qrim import config as qrim_config

  config = qrim_config.validate_config(config, max(SET_SIZE, *BACKUP_SIZES))
  search = qrim_config.search_config(config)
  for n in (SET_SIZE, *BACKUP_SIZES):
    qrim_config.check_memory(config, ENV, n)
  return search


def arm_cell(arm: str, seeds: tuple[int, ...], workdir: pathlib.Path) -> dict[int, dict]:
  """``robust.train_arm_seeds`` of ``arm`` for the seeds not finished in ``workdir``, in one
  call (their PPO vmapped), then each seed's record (``runner.once``)."""
  import jax
  import jax.numpy as jnp

  from jaxlab.core import workdir as workdir_lib
  from jaxlab.rl import qrim
  from jaxlab.rl.qrim import robust

  config = qrim.get_config()
  search = _search(config)
  base = {**config.to_dict(), "env": ENV, "set_size": SET_SIZE, "steps": UPDATES, "arm": arm}
  recs = {seed: {**base, "seed": seed} for seed in seeds}
  dirs = {seed: pathlib.Path(workdir) / f"seed{seed}" for seed in seeds}
  todo = [seed for seed in seeds if not (dirs[seed] / "summary.json").exists()]
  for seed in todo:  # another setting in a seed's folder is refused before anything trains
    workdir_lib.check_config(dirs[seed], recs[seed])
  done = {}
  if todo:
    # protocol.run's part-3 key of each seed
    keys = jnp.stack([jax.random.fold_in(jax.random.key(seed), 2) for seed in todo])
    outs = robust.train_arm_seeds(ENV, search, config, SET_SIZE, UPDATES, keys, arm)
    done = dict(zip(todo, outs, strict=True))
  return {seed: runner.once(dirs[seed], recs[seed], lambda s=seed: done[s]) for seed in seeds}


# --- qrim/robust_wide: wider U (3 axes, 512 points), held out outside the grid's range

WIDE_ENV, WIDE_SIZE, WIDE_UPDATES = "cartpole_force", 512, 200
WIDE_ARMS = {  # study arm -> robust.train_arm_seeds' arm
  "nominal": "nominal",
  "random": "random",
  "robust_quantum": "robust",
  "robust_exhaustive": "exhaustive",
}
WIDE_EPISODES = 16  # rollouts per held-out point (J on U keeps config.episodes = 4)
WIDE_SEEDS, WIDE_TUNING_SEEDS = (0, 1, 2, 3, 4), (100, 101)
# Candidate extrapolation factors (held out: low / factor, nominal, high * factor per axis). The
# rule, fixed before tuning: the smallest factor at which nominal PPO's held-out mean return,
# averaged over the tuning seeds, is below CEILING (clear of the 500-step cap).
FACTORS, CEILING = (1.25, 1.5, 2.0), 450.0
MARGIN_FRACTION = 0.05  # non-inferiority margin: 5 % of exhaustive's tuning-seed worst case
TUNING = pathlib.Path("docs", "results", "qrim", "robust_wide", "tuning.json")
# Chosen by tune() on the tuning seeds (tuning.json) before the held-out seeds ran.
WIDE_FACTOR = 1.25  # nominal's tuning-seed held-out mean: 372 (1.25), 323 (1.5), 237 (2.0)
WIDE_MARGIN = 13.26  # 0.05 x 265.2, exhaustive's tuning-seed held-out worst case at 1.25


def wide_held_out(factor: float | None = None):
  """The held-out parameters of ``qrim/robust_wide``: ``robust.outside`` at ``factor``."""
  from jaxlab.rl.qrim import robust

  return robust.outside(WIDE_ENV, WIDE_FACTOR if factor is None else factor)


def _keys(seeds):
  import jax
  import jax.numpy as jnp

  # protocol.run's part-3 key of each seed
  return jnp.stack([jax.random.fold_in(jax.random.key(seed), 2) for seed in seeds])


def choose(per_seed: dict) -> dict:
  """The declared rule on tuning results ``{arm: {seed: {factor: (mean, worst)}}}``: the factor
  (smallest with nominal's seed-mean held-out mean < CEILING, else the largest) and the margin
  (MARGIN_FRACTION x exhaustive's seed-mean held-out worst case at that factor)."""
  import numpy as np

  avg = lambda arm, f, i: float(np.mean([v[str(f)][i] for v in per_seed[arm].values()]))  # noqa: E731
  ok = [f for f in FACTORS if avg("nominal", f, 0) < CEILING]
  factor = min(ok) if ok else max(FACTORS)
  worst = avg("exhaustive", factor, 1)
  return {"factor": factor, "margin": round(MARGIN_FRACTION * worst, 2), "exhaustive_worst": worst}


def tune(seeds=WIDE_TUNING_SEEDS, workdir=pathlib.Path("runs", "study", "qrim", "wide_tuning")):
  """Nominal and exhaustive PPO on the tuning seeds, evaluated at every candidate factor; writes
  TUNING with the per-seed values and :func:`choose`'s factor and margin. Resumable per arm."""
  import json

  import numpy as np

  from jaxlab.core import workdir as workdir_lib
  from jaxlab.rl import qrim
  from jaxlab.rl.qrim import robust

  config = qrim.get_config()
  search = qrim.search_config(qrim.validate_config(config, WIDE_SIZE))
  held = np.concatenate([wide_held_out(f) for f in FACTORS])
  n = len(held) // len(FACTORS)
  per = {}
  for arm in ("nominal", "exhaustive"):
    rec = {**config.to_dict(), "env": WIDE_ENV, "set_size": WIDE_SIZE, "steps": WIDE_UPDATES}
    rec.update(arm=arm, seeds=list(seeds), factors=list(FACTORS), episodes_held=WIDE_EPISODES)

    def compute(arm=arm):
      outs = robust.train_arm_seeds(
        WIDE_ENV, search, config, WIDE_SIZE, WIDE_UPDATES, _keys(seeds), arm,
        held_out=held, held_episodes=WIDE_EPISODES,
      )  # fmt: skip
      res = {}
      for seed, o in zip(seeds, outs, strict=True):
        r = np.asarray(o["heldout_returns"]).reshape(len(FACTORS), n)
        res[str(seed)] = {str(f): [float(x.mean()), float(x.min())] for f, x in zip(FACTORS, r)}
      return {"per_seed": res}

    per[arm] = runner.once(pathlib.Path(workdir) / arm, rec, compute)["per_seed"]
  out = {
    "rule": (
      f"factor: the smallest of {list(FACTORS)} with nominal's tuning-seed mean held-out mean "
      f"return < {CEILING}; margin: {MARGIN_FRACTION} x exhaustive's tuning-seed mean held-out "
      "worst-case return at that factor"
    ),
    "tuning_seeds": list(seeds),
    "per_seed": per,
    **choose(per),
  }
  TUNING.parent.mkdir(parents=True, exist_ok=True)
  workdir_lib.write_atomic(TUNING, json.dumps(out, indent=1) + "\n")
  return out


def wide_cell(arm: str, seeds: tuple[int, ...], workdir: pathlib.Path) -> dict[int, dict]:
  """``robust.train_arm_seeds`` of the arm for the unfinished seeds (their PPO vmapped), held
  out at :func:`wide_held_out`, then each seed's record (``runner.once``)."""
  import numpy as np

  from jaxlab.core import workdir as workdir_lib
  from jaxlab.rl import qrim
  from jaxlab.rl.qrim import robust

  config = qrim.get_config()
  search = qrim.search_config(qrim.validate_config(config, WIDE_SIZE))
  qrim.check_memory(config, WIDE_ENV, WIDE_SIZE, seeds=len(seeds))
  held = wide_held_out()
  base = {**config.to_dict(), "env": WIDE_ENV, "set_size": WIDE_SIZE, "steps": WIDE_UPDATES}
  base.update(arm=arm, factor=WIDE_FACTOR, episodes_held=WIDE_EPISODES, margin=WIDE_MARGIN)
  recs = {seed: {**base, "seed": seed} for seed in seeds}
  dirs = {seed: pathlib.Path(workdir) / f"seed{seed}" for seed in seeds}
  todo = [seed for seed in seeds if not (dirs[seed] / "summary.json").exists()]
  for seed in todo:
    workdir_lib.check_config(dirs[seed], recs[seed])
  done = {}
  if todo:
    outs = robust.train_arm_seeds(
      WIDE_ENV, search, config, WIDE_SIZE, WIDE_UPDATES, _keys(todo), WIDE_ARMS[arm],
      held_out=held, held_episodes=WIDE_EPISODES,
    )  # fmt: skip
    for o in outs:
      o["heldout_parameters"] = np.asarray(held).tolist()
    done = dict(zip(todo, outs, strict=True))
  return {seed: runner.once(dirs[seed], recs[seed], lambda s=seed: done[s]) for seed in seeds}


def backup(search, config, seed: int, sizes=BACKUP_SIZES) -> dict:
  """Queries of one inner minimum against |U| (and their slope), and of the tabular robust backup
  at ``sizes`` with its accuracy against exhaustive minimisation."""
  import jax

  from jaxlab.rl.qrim import protocol
  from jaxlab.rl.qrim import search as qrim_search

  key = jax.random.key(seed)
  rows = protocol.query_scaling(search, config, jax.random.fold_in(key, 0))
  slope, slope_total = protocol.query_slopes(rows)
  k_tab = jax.random.fold_in(key, 1)
  tab = [
    {"n": n, **protocol.tabular(search, config, n, jax.random.fold_in(k_tab, n))} for n in sizes
  ]
  queries = [t["queries_per_backup_quantum"] for t in tab]
  return {
    "query_scaling": rows,
    "slope_oracle_queries": slope,
    "slope_with_checks": slope_total,
    "tabular": tab,
    "slope_backup_queries": qrim_search.fit_slope(sizes, queries),
  }


def flat(summary: dict) -> dict:
  """The per-|U| numbers of :func:`backup` as flat metrics (``minimum/queries/U16``, ...)."""
  out = {}
  for r in summary["query_scaling"]:
    u = f"U{r['n']}"
    out[f"minimum/queries/{u}"] = r["queries"][0]  # mean over the seed's random sets
    out[f"minimum/checks/{u}"] = r["measurements"][0]
    out[f"minimum/success/{u}"] = r["success"]
  for t in summary["tabular"]:
    u = f"U{t['n']}"
    out[f"backup/queries/{u}"] = t["queries_per_backup_quantum"]
    out[f"backup/checks/{u}"] = t["classical_checks_per_backup_quantum"]
    out[f"backup/mismatch/{u}"] = t["mismatch_rate"]
    out[f"backup/value_error/{u}"] = t["max_abs_value_error"]
  # accuracy over every size at once: the counts are at the exhaustive minimum's accuracy when
  # every minimum was found and no backup was worse than the exhaustive one
  out["minimum/success_min"] = min(r["success"] for r in summary["query_scaling"])
  out["backup/mismatch_max"] = max(t["mismatch_rate"] for t in summary["tabular"])
  out["backup/value_error_max"] = max(t["max_abs_value_error"] for t in summary["tabular"])
  return out


def queries_cell(arm: str, seeds: tuple[int, ...], workdir: pathlib.Path) -> dict[int, dict]:
  from jaxlab.rl import qrim

  config = qrim.get_config()
  search = _search(config)
  out = {}
  for seed in seeds:
    rec = {**config.to_dict(), "env": ENV, "backup_sizes": list(BACKUP_SIZES), "seed": seed}
    s = runner.once(
      pathlib.Path(workdir) / f"seed{seed}", rec, lambda s=seed: backup(search, config, s)
    )
    out[seed] = {**s, **flat(s)}
  return out


STUDIES = (
  Study(
    name="qrim/robust",
    claim=CLAIM,
    arms=ARMS,
    control="nominal",
    pairs=(("robust", "nominal"), ("robust", "random")),
    seeds=(0, 1, 2, 3, 4),
    tuning_seeds=(),
    budget={"steps": UPDATES, "train_env_steps": UPDATES * 16 * 128},
    tests=(
      stats.Test("superiority", "heldout_mean_return"),
      stats.Test("superiority", "heldout_worst_return"),
    ),
    metrics=(
      "heldout_mean_return",
      "heldout_worst_return",
      "inner_oracle_queries",
      "inner_classical_checks",
    ),
    cell=arm_cell,
    note=(
      "CartPole, U = 8 x 8 grid of pole half-length 0.3-0.9 x pole mass 0.05-0.3; 200 PPO "
      "updates (409,600 env steps) in 10 phases per arm; held-out: the 49 cell midpoints, 4 "
      "rollouts each; worst = the minimum over them. The robust arm also runs 2,560 evaluation "
      "rollouts to choose u (not trained on); `inner_*`: its re-selections' oracle queries and "
      "classical checks (|U| = 64 classically; the fraction as good as the exhaustive argmin, "
      "`inner_exact_fraction`, is in the raw files). Settings: qrim.get_config(), nothing tuned."
    ),
  ),
  Study(
    name="qrim/robust_wide",
    claim=CLAIM,
    arms=tuple(WIDE_ARMS),
    control="nominal",
    pairs=(
      ("robust_quantum", "nominal"),
      ("robust_quantum", "random"),
      ("robust_quantum", "robust_exhaustive"),
    ),
    seeds=WIDE_SEEDS,
    tuning_seeds=WIDE_TUNING_SEEDS,
    budget={"steps": WIDE_UPDATES, "train_env_steps": WIDE_UPDATES * 16 * 128},
    tests=(
      stats.Test("superiority", "heldout_worst_return", comparisons=6),
      stats.Test("non_inferiority", "heldout_worst_return", margin=WIDE_MARGIN, comparisons=6),
    ),
    metrics=(
      "heldout_worst_return",
      "heldout_mean_return",
      "inner_total_queries",
      "inner_oracle_queries",
      "inner_classical_checks",
      "inner_exact_fraction",
    ),
    cell=wide_cell,
    note=(
      "CartPole, U = 8 x 8 x 8 grid of pole half-length 0.25-1.0 x pole mass 0.05-0.5 x push "
      "force 0.5-1.5 x 10 N (|U| = 512); 200 PPO updates (409,600 env steps) in 10 phases per "
      "arm. Held out: the 26 points {low / 1.25, nominal, high x 1.25} per axis except nominal, "
      "each outside the training range in 1-3 coordinates (extrapolation), 16 rollouts each "
      "(sampled actions, 500-step cap); worst = the minimum over them. Chosen on tuning seeds "
      "100, 101 before the held-out seeds ran (tuning.json): the factor 1.25 (the smallest of "
      "1.25, 1.5, 2 with nominal's held-out mean < 450; it was 372) and the non-inferiority "
      "margin 13.26 (5 % of robust_exhaustive's tuning worst case, 265.2). Both robust arms "
      "also run 10 x 512 x 4 = 20,480 evaluation rollouts to choose u (not trained on). "
      "`inner_total_queries`: oracle queries + classical checks per re-selection (|U| = 512 for "
      "the exhaustive argmin); `inner_exact_fraction`: re-selections as bad as the exhaustive "
      "argmin. Tests: superiority and non-inferiority on each of 3 pairs (6 comparisons, Holm); "
      "the declared claims are robust_quantum > nominal, > random, and >= robust_exhaustive - "
      "13.26."
    ),
  ),
  Study(
    name="qrim/queries",
    claim=CLAIM,
    arms=("quantum",),
    control="quantum",
    seeds=(0, 1, 2, 3, 4),
    tuning_seeds=(),
    budget={"trials": 100, "sweeps": 100},
    tests=(),
    metrics=(
      "slope_oracle_queries",
      "slope_with_checks",
      "slope_backup_queries",
      "minimum/queries/U16",
      "minimum/queries/U16384",
      "backup/queries/U1024",
      "minimum/success_min",
      "backup/mismatch_max",
      "backup/value_error_max",
    ),
    cell=queries_cell,
    note=(
      "Simulated Duerr-Hoyer minimum finding on BBHT search (qrim.get_config(): analytic mode, "
      "adaptive stop, no noise). `minimum/queries/U<n>`: oracle queries (Grover iterations) of "
      "one inner minimum, the mean over 100 random permutations of |U| = n values per seed; "
      "`slope_*`: the log-log slope of the seed's mean queries against |U| (2^4 .. 2^14; with "
      "the classical checks added; per tabular backup, 16 .. 1024; classical: 1); "
      "`backup/queries/U<n>`: queries per backup of tabular robust value iteration (20 states x "
      "4 actions x 100 sweeps). Accuracy: `minimum/success_min`, the smallest fraction of sets "
      "whose true minimum was returned over all sizes; `backup/mismatch_max`, the largest "
      "fraction of backups worse than exhaustive minimisation; `backup/value_error_max`, the "
      "largest max |V - V_exhaustive|. Every size (2^4 .. 2^14; tabular 16, 64, 256, 1024), "
      "with the classical checks, is in the raw files."
    ),
  ),
)
