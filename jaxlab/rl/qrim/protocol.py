"""The three parts of ``python -m experiments.qrim`` as library functions (a notebook calls them).

1. :func:`query_scaling`: oracle queries of one minimisation vs |U| = 2^4..2^max_log2 (``trials``
   random sets each, 95% intervals over them) against the exhaustive |U|; :func:`query_slopes`
   fits the log-log slopes and :func:`query_plot` draws them;
2. :func:`tabular`: robust value iteration on a random (s,a)-rectangular robust MDP with the
   simulated minimiser vs exhaustive minimisation, queries per backup;
3. :func:`jaxlab.rl.qrim.robust.robust_ppo`: robust vs nominal PPO on held-out parameters.

:func:`run` is all of them with the summary and plot writing. See docs/qrim.md.
"""

from __future__ import annotations

import pathlib
import time
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.core import plots, runtime
from jaxlab.core import workdir as workdir_lib
from jaxlab.rl.ppo import evaluation as ppo_eval
from jaxlab.rl.qrim import config as qrim_config
from jaxlab.rl.qrim import robust
from jaxlab.rl.qrim import search as qrim_search

Array = jax.Array


def _interval(x: np.ndarray) -> tuple[float, float, float]:
  m, se = float(np.mean(x)), float(np.std(x) / np.sqrt(len(x)))
  return m, m - 1.96 * se, m + 1.96 * se


def query_scaling(search, config, key: Array, say=None) -> list[dict]:
  """Per |U|: ``{"n", "success", "queries": (mean, lo, hi), "measurements": (mean, lo, hi)}``
  (one compilation: the sets are padded with inf). ``config``: ``max_log2``, ``trials``.
  ``say``: called with a progress line after each size (each takes seconds to a minute)."""
  sizes = [2**e for e in range(4, config.max_log2 + 1)]
  length = sizes[-1]
  mini = jax.jit(jax.vmap(qrim_search.make_minimizer(search)))
  # one program per size for the sets (op by op, each size compiled five small programs)
  sets = jax.jit(_random_sets, static_argnums=(2, 3, 4))
  rows = []
  for i, n in enumerate(sizes):
    start = time.perf_counter()
    width = n if search.mode == "statevector" else length
    f, run_keys = sets(key, i, n, width, config.trials)
    idx, info = mini(f, run_keys)
    found = np.asarray(jnp.take_along_axis(f, idx[:, None], 1)[:, 0] == 0)
    intervals = {k: _interval(np.asarray(v, float)) for k, v in info.items()}
    rows.append({"n": n, "success": float(found.mean()), **intervals})
    if say is not None:
      say(
        f"  |U| = {n}: {intervals['queries'][0]:.1f} oracle queries on average "
        f"({time.perf_counter() - start:.0f} s)"
      )
  return rows


def _random_sets(key: Array, i, n: int, width: int, trials: int) -> tuple[Array, Array]:
  """``trials`` random orderings of ``0..n-1`` padded with inf to ``width`` (the absent
  elements; the minimum is 0), and the search's keys, from the ``i``-th key of ``key``."""
  k_f, k_run = jax.random.split(jax.random.fold_in(key, i))
  perm = jax.vmap(lambda k: jax.random.permutation(k, n))(jax.random.split(k_f, trials))
  f = jnp.full((trials, width), jnp.inf).at[:, :n].set(perm)
  return f.astype(jnp.float32), jax.random.split(k_run, trials)


def query_slopes(rows: list[dict]) -> tuple[float, float]:
  """Log-log slopes of the mean oracle queries, and of queries + classical checks, against |U|."""
  ns = [r["n"] for r in rows]
  slope = qrim_search.fit_slope(ns, [r["queries"][0] for r in rows])
  total = qrim_search.fit_slope(ns, [r["queries"][0] + r["measurements"][0] for r in rows])
  return slope, total


def query_plot(path, rows: list[dict], title: str) -> None:
  ns = np.asarray([r["n"] for r in rows])
  curves = {
    "exhaustive (|U|)": (ns, ns.astype(float)),
    "quantum: oracle queries": tuple(np.asarray([[r["n"], *r["queries"]] for r in rows]).T),
    "quantum: + classical checks": (
      ns,
      np.asarray([r["queries"][0] + r["measurements"][0] for r in rows]),
    ),
  }
  plots.lines(path, curves, "|U|", "queries per inner minimum", logx=True, logy=True, title=title)


def tabular(search, config, set_size: int, key: Array, say=None) -> dict:
  """Robust value iteration with the simulated minimiser vs exhaustive minimisation on a random
  robust MDP (``config``: ``states``, ``actions``, ``gamma``, ``sweeps``). ``say``: called with a
  progress line before each of the two value iterations."""
  say = say or (lambda line: None)
  p, r = qrim_search.random_robust_mdp(key, config.states, config.actions, set_size)
  k = jax.random.fold_in(key, 1)
  start = time.perf_counter()
  say(f"  exhaustive minimisation: {config.sweeps} sweeps ...")
  v_ex, _, st_ex = qrim_search.robust_value_iteration(p, r, config.gamma, config.sweeps, k)
  jax.block_until_ready(v_ex)
  say(f"  simulated minimiser ({time.perf_counter() - start:.0f} s so far): same sweeps ...")
  mini = qrim_search.make_minimizer(search)
  v_q, _, st_q = qrim_search.robust_value_iteration(p, r, config.gamma, config.sweeps, k, mini)
  return {
    "max_abs_value_error": float(jnp.max(jnp.abs(v_q - v_ex))),
    "mismatch_rate": float(jnp.mean(st_q["mismatch"])),
    "queries_per_backup_quantum": float(jnp.mean(st_q["queries"])),
    "classical_checks_per_backup_quantum": float(jnp.mean(st_q["measurements"])),
    "queries_per_backup_exhaustive": float(jnp.mean(st_ex["queries"])),
  }


def run(
  config,
  *,
  env: str,
  set_size: int,
  updates: int,
  seed: int = 0,
  workdir: str | pathlib.Path | None = None,
  seeds: Sequence[int] | None = None,
) -> dict:
  """The three parts of ``python -m experiments.qrim`` -> its summary.

  ``config``: :func:`jaxlab.rl.qrim.get_config`; ``env``: cartpole | pendulum; ``set_size``: |U|;
  ``updates``: PPO updates of part 3 (the program's default: :func:`jaxlab.rl.qrim.ppo_updates`;
  ``config.robust_ppo=False`` or 0 skips part 3). Validated first (ConfigError naming the field;
  sizes that cannot fit: :func:`jaxlab.rl.qrim.config.check_memory`); writes summary.json and
  queries.png to ``workdir`` (``None``: nothing is written) through
  ``jaxlab.core.workdir.session`` (locked; another recorded config is refused naming
  ``--workdir``; a finished run's record is returned with every file unchanged).

  ``seeds`` (more than one; default ``(seed,)``): parts 1 and 2 run one seed after another and
  part 3 trains each arm's PPO for all seeds vmapped in one compiled program
  (:func:`jaxlab.rl.qrim.robust.robust_ppo_seeds`). Seed ``k`` there draws the keys of
  ``seed=k`` alone: parts 1 and 2 are its, part 3 up to float rounding (amplified by PPO).
  The summary then holds ``seeds``, ``per_seed`` (each seed's summary as its own run returns
  it) and, at the top level, what the seeds share and the means of the numbers that differ;
  each seed's queries.png goes to ``<workdir>/seed<k>/``."""
  seeds = (seed,) if seeds is None else tuple(int(s) for s in seeds)
  several = len(seeds) > 1
  robust.check_env(env)
  config = qrim_config.validate_config(config, set_size)
  search = qrim_config.search_config(config)
  qrim_config.check_memory(config, env, set_size, seeds=len(seeds))
  if config.robust_ppo:  # a set size the grid cannot take (cartpole_force: a cube) fails now
    robust.grid(env, set_size)
  if workdir is not None:  # before computing: a read-only folder fails now, not after the run
    workdir_lib.check_writable(workdir, "workdir")
  updates = updates if config.robust_ppo else 0
  which = {"seed": seeds[0]} if not several else {"seeds": list(seeds)}
  recorded = {**config.to_dict(), "env": env, "set_size": set_size, **which, "steps": updates}
  with workdir_lib.session(None if workdir is None else pathlib.Path(workdir), recorded) as wd:
    record = workdir_lib.finished(wd)
    if record is not None:  # a finished run: its record, every file left as it is
      print(f"{wd} holds this finished run; its record (nothing rewritten)", flush=True)
      return record
    parts = _parts(search, config, env=env, set_size=set_size, updates=updates, seeds=seeds)
    if wd is not None:
      title = f"{search.mode} simulation, 95% CI over {config.trials} sets"
      for s, (_, rows) in zip(seeds, parts, strict=True):
        out = wd if not several else wd / f"seed{s}"
        out.mkdir(exist_ok=True)
        query_plot(out / "queries.png", rows, title + (f", seed {s}" if several else ""))
    if several:
      per_seed = {str(s): summary for s, (summary, _) in zip(seeds, parts, strict=True)}
      summary = {
        **ppo_eval.seed_means(list(per_seed.values())),
        "seeds": list(seeds),
        "per_seed": per_seed,
      }
    else:
      summary = parts[0][0]
    if wd is not None:
      runtime.write_summary(wd, summary)
  return summary


RECONSTRUCTION = "Duerr-Hoyer minimum finding on BBHT search, simulated; not the paper's code"


def _say(line: str) -> None:
  print(line, flush=True)


def _parts(search, config, *, env: str, set_size: int, updates: int, seeds: tuple[int, ...]):
  """The three parts of :func:`run` for each seed -> ``[(summary, query-scaling rows)]``."""
  out = []
  for seed in seeds:
    key = jax.random.key(seed)
    where = f"seed {seed}: " if len(seeds) > 1 else ""
    print(
      f"[qrim] {where}part 1/3, query scaling: |U| = 16 .. {2**config.max_log2}, "
      f"{config.trials} random sets each ...",
      flush=True,
    )
    rows = query_scaling(search, config, jax.random.fold_in(key, 0), say=_say)
    slope, slope_total = query_slopes(rows)
    print(
      f"{where}oracle queries ~ |U|^{slope:.3f} (with the classical checks: ^{slope_total:.3f})"
    )
    print(
      f"[qrim] {where}part 2/3, robust value iteration: {config.states} states x "
      f"{config.actions} actions, |U| = {set_size} ...",
      flush=True,
    )
    tab = tabular(search, config, set_size, jax.random.fold_in(key, 1), say=_say)
    print(
      f"{where}robust VI: max |V_q - V_exhaustive| = {tab['max_abs_value_error']:.2e}, "
      f"queries/backup {tab['queries_per_backup_quantum']:.1f} vs {set_size}"
    )
    summary = {
      "reconstruction": RECONSTRUCTION,
      "env": env,
      "set_size": set_size,
      "seed": seed,
      "search": search.__dict__,
      "query_scaling": rows,
      "slope_oracle_queries": slope,
      "slope_with_checks": slope_total,
      "tabular_robust_vi": tab,
      "robust_ppo": {},
      "ppo_updates": updates,
    }
    out.append((summary, rows))
  if updates:
    print(
      f"[qrim] part 3/3, robust PPO against nominal PPO on {env}: {updates} updates ...",
      flush=True,
    )
    keys = jnp.stack([jax.random.fold_in(jax.random.key(s), 2) for s in seeds])
    arms = robust.robust_ppo_seeds(env, search, config, set_size, updates, keys)
    for (summary, _), rl in zip(out, arms, strict=True):
      summary["robust_ppo"] = rl
  return out
