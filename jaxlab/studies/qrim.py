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
