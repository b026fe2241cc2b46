"""dasbs's studies (docs/dasbs.md): each a claim of its paper, declared before it runs.

``dasbs/ising4_time``: critical 4 x 4 Ising (β_c, periodic), four arms scored against the exact
law (enumeration of the 2^16 states) at matched CPU time:

- ``dasbs_paper``: Discrete ASBS with the authors' method options (no path weights, corr-DM with
  t ~ U[0, 0.99], constant lr, corrector EMA) and the CPU preset's sizes;
- ``dasbs_preset_oracle``: the CPU preset ``ising_critical_cpu``'s options: the target path
  weights, which use the Schrödinger bridge's closed-form coupling for this source (an oracle the
  paper's method does not have), corr-DM at t = 0, a cosine lr, no corrector EMA;
- ``metropolis`` and ``sw``: checkerboard Metropolis and Swendsen–Wang, 64 chains.

The two DASBS arms train every seed of the arm together, vmapped in one program
(``dasbs.train(..., seeds=...)``), on the schedule ``SCHEDULE`` (the preset's 5 stages with 150
steps in all instead of its 1250: the preset's schedule x 5 seeds x 2 arms does not fit the
study's CPU budget on 2 shared cores); a seed's seconds are the run's process CPU time
(compilation included, the per-stage checks excluded) plus that of drawing its ``EVAL_SAMPLES``
samples, divided by the seeds. An MCMC seed runs for ``MCMC_SECONDS`` of process CPU time
(compilation and burn-in included), less than any DASBS seed's time, so the MCMC arms are at most
time-matched: a shorter run can only hurt them.
"""

from __future__ import annotations

import pathlib
import time

from jaxlab.core import stats
from jaxlab.studies.spec import Study

CLAIM = (
  "Discrete ASBS samples Ising models with advantages in training efficiency over MCMC "
  "baselines (Guo et al., arXiv 2602.08243): at equal time its samples are closer to the target."
)
# `ising_critical_cpu` of experiments/configs/dasbs.py: the sizes (shared by both DASBS arms) and
# the options that make it jaxlab's preset (tests/test_dasbs_study.py checks both against it).
SIZES = {
  "L": 4,
  "beta": 0.4407,
  "gamma": 0.25,
  "batch_size": 128,
  "buffer_size": 1024,
  "num_repl": 4,
  "resample_freq": 5,
  "sampling_steps": 50,
  "lr": 1e-3,
}
ORACLE = {
  "path_weights": "target",
  "corr_dm_eps": 1.0,
  "lr_schedule": "cosine",
  "corr_ema": False,
}
PAPER = {"path_weights": "none", "corr_dm_eps": 0.01, "lr_schedule": "constant", "corr_ema": True}
SCHEDULE = {"num_stages": 5, "ctrl_steps": 20, "corr_steps": 10}  # the preset: 5 x (150 + 100)
EVAL_SAMPLES = 2048  # final samples per DASBS seed (the mean energy per spin to +/- 0.011)
STAGE_SAMPLES = 256  # per-stage check (the curve against seconds; its time is not counted)
MCMC_SECONDS = 10.0
MCMC = {"num_chains": 64, "sweeps_per_chunk": 100, "burn_in": 100}
ARMS = ("dasbs_paper", "dasbs_preset_oracle", "metropolis", "sw")
METRICS = ("energy_w1", "abs_err_u", "signed_err_u", "ess", "ess_per_s", "seconds")
# 1000-1002 ran first (vmapped together), 1003-1004 next: each DASBS cell trains the seeds it is
# given together, and a seed's result does not depend on which seeds share its program.
HELD_OUT = (1000, 1001, 1002, 1003, 1004)
TUNING = tuple(range(10))  # seeds 0-9 chose the preset's options and its learning-rate schedule


def dasbs_config(arm: str):
  """The `dasbs.get_config()` a DASBS arm trains."""
  from jaxlab.sampling import dasbs

  c = dasbs.get_config()
  c.update(**SIZES, **SCHEDULE, **(ORACLE if arm == "dasbs_preset_oracle" else PAPER))
  return c


def _target():
  from jaxlab.sampling import energies

  return energies.Lattice("ising", SIZES["L"], SIZES["beta"])


def _scores(e_per_spin, levels, probs) -> dict:
  """W1 to the exact energy law and the mean energy's error (per spin)."""
  import numpy as np

  from jaxlab.sampling import metrics

  u = float(np.dot(levels, probs))
  signed = float(np.mean(e_per_spin)) - u
  w1 = metrics.wasserstein1(e_per_spin, levels, None, probs)
  return {"energy_w1": w1, "abs_err_u": abs(signed), "signed_err_u": signed}


def dasbs_cell(arm: str, seeds: tuple[int, ...], workdir: pathlib.Path) -> dict[int, dict]:
  """One vmapped `dasbs.train` of every seed, then ``EVAL_SAMPLES`` samples per seed."""
  import jax
  import numpy as np

  from jaxlab.core import runtime
  from jaxlab.core import seeds as seeds_lib
  from jaxlab.core.metrics import jsonable
  from jaxlab.sampling import dasbs, exact, metrics, sampler

  seeds = tuple(seeds)
  config = dasbs_config(arm)
  spec = dasbs.make_spec(config)
  tgt = spec.target
  levels, probs = exact.energy_law(tgt)
  keys = seeds_lib.seed_keys(seeds)
  if len(seeds) == 1:  # dasbs.train's seed axis needs two seeds; one trains as its solo run
    keys = keys[0]
  many = len(seeds) > 1
  one = lambda ctrl, k: dasbs.simulate(spec, ctrl, ctrl.target_params, k, STAGE_SAMPLES)["x1"]  # noqa: E731
  sim = jax.jit(jax.vmap(one) if many else one)
  fold = jax.vmap(jax.random.fold_in, in_axes=(0, None)) if many else jax.random.fold_in
  clock, t0 = time.process_time, time.process_time()
  stages, spent = [], [0.0]

  def eval_fn(state, step):
    t = clock()
    x1 = np.asarray(sim(state.ctrl, fold(seeds_lib.stream(keys, 3) if many else keys, step)))
    e = np.asarray(jax.vmap(tgt.energy)(x1) if many else tgt.energy(x1)) / tgt.D
    e = e.reshape(len(seeds), -1)
    stages.append((step, t - t0 - spent[0], [_scores(ei, levels, probs) for ei in e]))
    spent[0] += clock() - t
    w1 = np.asarray([s["energy_w1"] for s in stages[-1][2]])
    return {"stage_w1": w1 if many else float(w1[0])}

  loop = runtime.Loop(
    num_steps=spec.total_steps,
    log_every=spec.phase_steps,
    ckpt_every=0,
    eval_every=spec.phase_steps,
    progress=False,
    tensorboard=False,
    plot=False,
  )
  k_train = seeds_lib.stream(keys, 0) if many else jax.random.fold_in(keys, 0)
  state, _ = dasbs.train(spec, k_train, loop=loop, seeds=seeds if many else None, eval_fn=eval_fn)
  jax.block_until_ready(state)
  train_s = clock() - t0 - spent[0]
  t1 = clock()
  k_eval = seeds_lib.stream(keys, 1) if many else jax.random.fold_in(keys, 1)
  outs = jax.block_until_ready(dasbs.sample_paths(state, k_eval, EVAL_SAMPLES))
  sample_s = clock() - t1
  seconds = (train_s + sample_s) / len(seeds)
  rec = jsonable(config)
  out = {}
  for i, seed in enumerate(seeds):
    o = seeds_lib.take(outs, i) if many else outs
    e = np.asarray(tgt.energy(o["x1"])) / tgt.D
    frac = float(sampler.ess(metrics.path_is_log_weights(tgt, spec.sched, spec.source, o)))
    out[seed] = {
      "config": {**rec, "seed": seed, "train_seeds_together": list(seeds)},
      **_scores(e, levels, probs),
      "ess": frac * EVAL_SAMPLES,  # target importance weights: exact samples they are worth
      "ess_target_frac": frac,
      "ess_per_s": frac * EVAL_SAMPLES / seconds,
      "seconds": seconds,
      "train_s": train_s / len(seeds),
      "sample_s": sample_s / len(seeds),
      "clock": "process CPU time",
      "samples": EVAL_SAMPLES,
      "curve_s": [s / len(seeds) for _, s, _ in stages],  # per seed, as `seconds`
      "curve_step": [int(st) for st, _, _ in stages],
      "curve_energy_w1": [sc[i]["energy_w1"] for _, _, sc in stages],
      "curve_signed_err_u": [sc[i]["signed_err_u"] for _, _, sc in stages],
    }
  return out


def mcmc_cell(arm: str, seeds: tuple[int, ...], workdir: pathlib.Path) -> dict[int, dict]:
  """Per seed, `mcmc.run_for` for ``MCMC_SECONDS`` of process CPU time; scores at every chunk."""
  import jax
  import numpy as np

  from jaxlab.sampling import exact, mcmc

  tgt = _target()
  levels, probs = exact.energy_law(tgt)
  out = {}
  for seed in seeds:
    run = mcmc.run_for(jax.random.key(seed), tgt, MCMC_SECONDS, arm, **MCMC)
    e = run["energies"] / tgt.D
    tau = mcmc.integrated_autocorr(e)
    ess = e.size / tau
    picks = np.unique(np.geomspace(1, len(run["chunk_s"]), 12).astype(int)) - 1
    picks = [int(j) for j in picks if run["chunk_sweeps"][j] > 0]
    out[seed] = {
      "config": {"method": arm, "seed": seed, "seconds": MCMC_SECONDS, **MCMC, "L": tgt.L},
      **_scores(e, levels, probs),
      "ess": ess,
      "tau_int_energy": tau,
      "ess_per_s": ess / run["seconds"],
      "seconds": run["seconds"],
      "clock": "process CPU time",
      "samples": int(e.size),
      "curve_s": [float(run["chunk_s"][j]) for j in picks],
      "curve_energy_w1": [
        _scores(e[: run["chunk_sweeps"][j]], levels, probs)["energy_w1"] for j in picks
      ],
    }
  return out


def cell(arm: str, seeds: tuple[int, ...], workdir: pathlib.Path) -> dict[int, dict]:
  return (dasbs_cell if arm.startswith("dasbs") else mcmc_cell)(arm, seeds, workdir)


# W1 of the energy per spin to the exact law: lower is better. Superiority, since the paper claims
# an advantage (not a match) over MCMC; the oracle pair asks whether the preset's options help.
TESTS = (stats.Test("superiority", "energy_w1", higher_is_better=False),)
PAIRS = (
  ("dasbs_paper", "metropolis"),
  ("dasbs_paper", "sw"),
  ("dasbs_preset_oracle", "metropolis"),
  ("dasbs_preset_oracle", "dasbs_paper"),
)

STUDIES = (
  Study(
    name="dasbs/ising4_time",
    claim=CLAIM,
    arms=ARMS,
    control="metropolis",
    pairs=PAIRS,
    seeds=HELD_OUT,
    tuning_seeds=TUNING,
    budget={"L": 4, "dasbs_steps": 150, "dasbs_samples": EVAL_SAMPLES, "mcmc_cpu_s": MCMC_SECONDS},
    tests=TESTS,
    metrics=METRICS,
    cell=cell,
    note=(
      "Critical 4 x 4 Ising, scored against the exact energy law (enumeration). Seconds: "
      "process CPU time per seed (compilation included; XLA single-threaded) on 2 CPU cores "
      "shared with other jobs at load 13-18. DASBS arms: 5 stages x (20 + 10) steps, 150 of the"
      " ising_critical_cpu preset's 1250 (its schedule did not fit the CPU time the study had),"
      " seeds vmapped (1000-1002 together, then 1003-1004), 2048 samples; `dasbs_preset_oracle`"
      " uses the target path weights (the bridge's closed-form coupling: an oracle outside the "
      "paper). MCMC arms (64 chains) get 10 CPU s per seed, less than every DASBS seed's time. "
      "ess: DASBS, the effective size of its samples' target importance weights; MCMC, kept "
      "samples / tau_int of the energy. energy_w1 against seconds: curves.md."
    ),
  ),
)


def write_curves(results=None) -> str:
  """``curves.md`` next to the table: each arm's energy W1 against its seconds, from the raw files
  (DASBS: after each stage, training seconds; MCMC: at chunk ends), mean over seeds. Returns it."""
  import json

  import numpy as np

  study = STUDIES[0]
  results = pathlib.Path(results) if results is not None else study.results
  lines = [
    f"# {study.name}: energy W1 against CPU seconds",
    "",
    'Built from `raw/` by `python -c "from jaxlab.studies import dasbs; dasbs.write_curves()"`.'
    " Seconds: process CPU time per seed. Mean over the seeds found.",
    "",
  ]
  for arm in study.arms:
    recs = [
      json.loads(p.read_text())
      for s in study.seeds
      if (p := results / "raw" / arm / f"seed{s}.json").exists()
    ]
    if not recs:
      continue
    lines += [f"## {arm} ({len(recs)} seeds)", "", "| seconds | energy W1 |", "|---|---|"]
    if arm.startswith("dasbs"):
      s = np.mean([r["curve_s"] for r in recs], 0)
      w = np.mean([r["curve_energy_w1"] for r in recs], 0)
      pts = list(zip(s, w)) + [(np.mean([r["seconds"] for r in recs]), np.nan)]
      final = np.mean([r["energy_w1"] for r in recs])
      lines += [f"| {a:.1f} (stage {i + 1}) | {b:.4f} |" for i, (a, b) in enumerate(pts[:-1])]
      lines += [f"| {pts[-1][0]:.1f} (with sampling; {recs[0]['samples']} samples) | {final:.4f} |"]
    else:
      for t in (0.1, 0.3, 1.0, 3.0, 10.0):
        w = [
          r["curve_energy_w1"][max(i for i, c in enumerate(r["curve_s"]) if c <= t)]
          for r in recs
          if any(c <= t for c in r["curve_s"])
        ]
        if w:
          lines.append(f"| ≤ {t:g} | {np.mean(w):.4f} ({len(w)} seeds) |")
    lines.append("")
  text = "\n".join(lines)
  (results / "curves.md").write_text(text)
  return text
