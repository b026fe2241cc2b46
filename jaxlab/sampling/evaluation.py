"""What `python -m experiments.dasbs` reports after training: an MCMC reference, model samples
scored against it (and, for Ising at h = 0, against the exact Ferdinand–Fisher values), the
per-stage energy check, the plots and summary.json.

From a notebook (the program's run at a tiny size; docs/dasbs.md, "Use from Python")::

    from jaxlab.sampling import dasbs, evaluation
    ev = evaluation.get_config()
    state, result = dasbs.train(config, key, workdir=workdir, loop=loop, record=config,
                                eval_fn=evaluation.stage_eval(spec, key3, ev.stage_eval_samples))
    summary = evaluation.report(workdir, state, result, key, ev)

With several training seeds (``train_and_report(..., seeds=(0, 1, 2))``, the program's
``--seeds``) the seeds train vmapped in one compiled program, the per-stage check scores every seed
in one vmapped sampler, and the final report scores each seed against its own MCMC reference, as
its solo run does: summary.json holds the means over seeds and each seed's numbers under
``per_seed``.
"""

from __future__ import annotations

import math
import pathlib
import time
from collections.abc import Callable
from typing import Any

import jax
import ml_collections
import numpy as np

from jaxlab.core import plots, resources, runtime
from jaxlab.core import seeds as seeds_lib
from jaxlab.core.errors import check_config
from jaxlab.core.metrics import jsonable
from jaxlab.sampling import dasbs, exact, mcmc, metrics


def get_config() -> ml_collections.ConfigDict:
  """Evaluation sizes (the program's --eval_samples, --stage_eval_samples and --mcmc_* flags)."""
  c = ml_collections.ConfigDict()
  # The energy per spin of critical 4 x 4 Ising has a standard deviation of 0.50: 8192 samples
  # measure its mean to +/- 0.0055 (1024: 0.016, too coarse for a 0.05 target).
  c.eval_samples = 8192  # model samples for the final metrics (>= 1)
  c.stage_eval_samples = 1024  # model samples scored after every stage (0: off)
  c.mcmc_chains = 64  # MCMC reference chains (>= 1)
  c.mcmc_samples = 32  # kept samples per chain (>= 1)
  c.mcmc_burn_in = 200  # burn-in sweeps per chain (>= 0)
  c.mcmc_thin = 5  # sweeps between kept samples (>= 1)
  return c


def validate_config(ev) -> ml_collections.FrozenConfigDict:
  """ConfigError naming the field as the program's flag (``eval_samples``, ``mcmc_thin``, ...)."""
  positive = ("eval_samples", "mcmc_chains", "mcmc_samples", "mcmc_thin")
  table = {k: "positive" for k in positive} | {"stage_eval_samples": "nonneg"}
  check_config(ev, table | {"mcmc_burn_in": "nonneg"}, prefix="")
  return ml_collections.FrozenConfigDict(ev)


def check_memory(spec, ev, devices=1, seeds: int = 1) -> None:
  """Training and evaluation sizes that cannot fit are refused before anything is built: the
  model (`dasbs.check_memory`) on --eval_samples / --stage_eval_samples paths, and the MCMC
  reference's kept samples (chains x samples x sites). ``seeds`` sample at once (one vmapped
  sampler), so their samples must fit together (refused naming ``seeds``); training seeds that do
  not fit together train in sequential groups (`jaxlab.core.runtime.train`)."""
  dasbs.check_memory(spec, ev.eval_samples, "eval_samples", devices=devices)
  dasbs.check_memory(spec, ev.stage_eval_samples, "stage_eval_samples", devices=devices)
  if seeds > 1:
    params, _, sample_row = dasbs.memory_model(spec)
    for num in (ev.eval_samples, ev.stage_eval_samples):
      at_once = min(num, spec.batch_size * spec.num_repl)
      nbytes = seeds * (params + at_once * sample_row + num * spec.target.D * 4 * 8)
      what = f"{seeds} seeds sampling {at_once} paths at a time each (one vmapped sampler)"
      resources.check_fits(nbytes, "seeds", what, devices=devices)
  for field in ("mcmc_chains", "mcmc_samples"):
    resources.check_int32(field, ev[field])
  D = spec.target.D
  what = f"{ev.mcmc_chains} MCMC chains x {ev.mcmc_samples} kept samples of {D} sites"
  field = "mcmc_samples" if ev.mcmc_samples > ev.mcmc_chains else "mcmc_chains"
  resources.check_fits(4 * 4 * ev.mcmc_chains * (ev.mcmc_samples + 2) * D, field, what)


def mcmc_method(target) -> str:
  """Swendsen–Wang where it applies (h = 0, J > 0), else single-site Metropolis."""
  return "sw" if target.h == 0.0 and target.J > 0 else "metropolis"


def mcmc_reference(target, key, ev, method: str | None = None) -> dict:
  """MCMC samples of the target (ev.mcmc_*): x, energies (samples x chains), tau_int of the energy
  in kept samples, wall seconds (compilation included)."""
  t0 = time.perf_counter()
  method = method or mcmc_method(target)
  xs, es, _ = mcmc.run_chains(
    key, target, ev.mcmc_chains, ev.mcmc_samples, ev.mcmc_burn_in, ev.mcmc_thin, method
  )
  es = np.asarray(es)
  return {
    "x": xs,
    "energies": es,
    "tau": mcmc.integrated_autocorr(es),
    "method": method,
    "wall_s": time.perf_counter() - t0,
  }


def _exact_obs(tgt) -> dict | None:
  if tgt.kind == "ising" and tgt.h == 0.0:
    return exact.ising_exact_observables(tgt.L, tgt.beta, tgt.J)
  return None


def evaluate(state, key, mesh, num: int, mc: dict):
  """Model samples, then every metric against MCMC and (Ising, h = 0) the exact values."""
  return score(state.spec, dasbs.sample_paths(state, key, num, mesh), mc)


def score(spec, out: dict, mc: dict):
  """`evaluate` of the sampler's output ``out`` (`dasbs.sample_paths`): (metrics, model energies
  per spin, MCMC energies per spin)."""
  tgt = spec.target
  e_ref = np.asarray(mc["energies"]).ravel()
  exact_obs = _exact_obs(tgt)
  res = metrics.summarize(tgt, spec.sched, spec.source, out, e_ref=e_ref, exact_obs=exact_obs)
  ref_stats = metrics.lattice_stats(tgt, mc["x"])
  res.update({f"mcmc/{k}": v for k, v in ref_stats.items()})
  res["mcmc/tau_int_energy"] = mc["tau"]
  if exact_obs is not None:
    res.update({f"exact/{k}": v for k, v in exact_obs.items()})
    res["mcmc/abs_err_u_per_spin"] = abs(ref_stats["u_per_spin_mean"] - exact_obs["u_per_spin"])
  e_model = np.asarray(tgt.energy(out["x1"])) / tgt.D
  return res, e_model, e_ref / tgt.D


def stage_eval(spec, key, num: int, mesh=None, seeds: bool = False):
  """eval_fn for the runtime: the sampler after each stage (it only changes in controller phases).
  One compiled sampler for every stage; keys fold in the step, apart from the training keys.

  ``seeds``: the state has a seed axis and ``key`` one key per seed; every seed is sampled in one
  vmapped program and the results are arrays ``[seeds]``."""
  tgt = spec.target
  exact_obs = _exact_obs(tgt)
  exact_u = None if exact_obs is None else exact_obs["u_per_spin"]
  one = lambda ctrl, k: dasbs.simulate(spec, ctrl, ctrl.target_params, k, num, mesh)["x1"]
  sim = jax.jit(jax.vmap(one) if seeds else one)
  fold = jax.vmap(jax.random.fold_in, in_axes=(0, None)) if seeds else jax.random.fold_in
  energy = jax.vmap(tgt.energy) if seeds else tgt.energy

  def eval_fn(state, step):
    u = np.mean(np.asarray(energy(sim(state.ctrl, fold(key, step)))), axis=-1)
    u = u if seeds else float(u)
    out = {"stage_u_per_spin": u / tgt.D}
    if exact_u is not None:
      out["stage_err_u_signed"] = u / tgt.D - exact_u
    return out

  return eval_fn


def energy_bins(*energies_per_spin: np.ndarray) -> np.ndarray:
  """One bin per energy level (energies live on a lattice), or 60 bins when there are too many."""
  allv = np.concatenate(energies_per_spin)
  lo, hi = allv.min(), allv.max()
  levels = np.unique(allv)
  step = np.min(np.diff(levels)) if levels.size > 1 else 1.0
  if (hi - lo) / step <= 200:
    return np.arange(lo - step / 2, hi + step, step)
  return np.linspace(lo, hi, 60)


def loss_curves(path, history: dict, first_step: int):
  """Per-step curves; each loss only over the steps of its own phase (gaps elsewhere)."""
  n = len(history.get("loss", ()))
  if n == 0:  # nothing ran in this process (a finished run re-opened)
    return None
  steps = first_step + np.arange(n)
  by_phase = dasbs.loss_by_phase(history)
  series = [
    ("controller loss (controller phases)", steps, by_phase["ctrl_loss"]),
    ("corrector loss (corrector phases)", steps, by_phase["corr_loss"]),
    ("tau-leap log-RND ESS (last resample)", steps, history["ess"]),
    ("invalid tau-leap rows (last resample)", steps, history["invalid_frac"]),
  ]
  return plots.panels(path, [s for s in series if np.isfinite(s[2]).any()])


def report(
  workdir,
  state,
  result,
  key,
  ev,
  *,
  mesh=None,
  train_s: float = float("nan"),
  log: Callable[[str], Any] = print,
  seeds=None,
) -> dict:
  """MCMC reference, model samples, curves.png, energy_hist.png, summary.json and the printed
  lines; returns the summary. ``key``: the run's key (folds 1 and 2 as the program's).

  ``seeds`` (more than one): ``state`` has a seed axis and ``key`` one key per seed; each seed is
  scored against its own MCMC reference, as its solo run is."""
  if seeds is not None and len(seeds) > 1:
    return _report_seeds(workdir, state, result, key, ev, mesh, train_s, log, tuple(seeds))
  workdir = pathlib.Path(workdir)
  tgt = state.spec.target
  mc = mcmc_reference(tgt, jax.random.fold_in(key, 2), ev)
  res, e_model, e_ref = evaluate(state, jax.random.fold_in(key, 1), mesh, ev.eval_samples, mc)
  first = result.summary.get("resumed_from", 0) + 1
  loss_curves(workdir / "curves.png", result.history or {}, first)
  plots.histograms(
    workdir / "energy_hist.png",
    {f"MCMC ({mc['method']}, n={e_ref.size})": e_ref, f"DASBS (n={e_model.size})": e_model},
    xlabel="energy per spin",
    title=f"{tgt.kind} L={tgt.L} beta={tgt.beta}",
    bins=energy_bins(e_model, e_ref),
  )
  summary = {
    **result.summary,
    "train_wall_s": train_s,
    "mcmc_wall_s": mc["wall_s"],
    "mcmc/method": mc["method"],
    **{f"eval/{k}": v for k, v in res.items()},
  }
  stages = [result.evals[s] for s in sorted(result.evals)]
  if stages and "stage_err_u_signed" in stages[0]:
    summary["stage_err_u_signed"] = [ev_["stage_err_u_signed"] for ev_ in stages]
    errs = ", ".join(f"{e:+.3f}" for e in summary["stage_err_u_signed"])
    log(f"[dasbs] signed err_u after each stage (+ = too disordered; this process): {errs}")
  runtime.write_summary(workdir, summary)
  log(f"[dasbs] {metrics.result_line(res)} -> {workdir}/summary.json")
  return summary


def _report_seeds(workdir, state, result, keys, ev, mesh, train_s, log, seeds) -> dict:
  """`report` of a run over ``seeds``: one vmapped sampler, one MCMC reference per seed; the
  summary's eval/ figures are means over seeds, each seed's own under ``per_seed``."""
  workdir = pathlib.Path(workdir)
  spec, tgt = state.spec, state.spec.target
  outs = dasbs.sample_paths(state, seeds_lib.stream(keys, 1), ev.eval_samples, mesh)
  scored, mcs = [], []
  for i in range(len(seeds)):
    mcs.append(mcmc_reference(tgt, jax.random.fold_in(keys[i], 2), ev))
    scored.append(score(spec, seeds_lib.take(outs, i), mcs[-1]))
  first = result.summary.get("resumed_from", 0) + 1
  loss_curves(workdir / "curves.png", result.history or {}, first)
  e_ref = scored[0][2]
  hist = {f"MCMC ({mcs[0]['method']}, seed {seeds[0]}, n={e_ref.size})": e_ref}
  hist |= {f"DASBS seed {s} (n={e.size})": e for s, (_, e, _) in zip(seeds, scored)}
  plots.histograms(
    workdir / "energy_hist.png",
    hist,
    xlabel="energy per spin",
    title=f"{tgt.kind} L={tgt.L} beta={tgt.beta}, seeds {', '.join(map(str, seeds))}",
    bins=energy_bins(*hist.values()),
  )
  per_seed = {str(s): dict(result.summary.get("per_seed", {}).get(str(s), {})) for s in seeds}
  for s, (res, _, _) in zip(seeds, scored):
    per_seed[str(s)].update({f"eval/{k}": v for k, v in res.items()})
  numbers = [k for k, v in scored[0][0].items() if isinstance(v, (int, float))]
  mean = {k: float(np.mean([res[k] for res, _, _ in scored])) for k in numbers}
  summary = {
    **result.summary,
    "train_wall_s": train_s,
    "mcmc_wall_s": sum(mc["wall_s"] for mc in mcs),
    "mcmc/method": mcs[0]["method"],
    **{f"eval/{k}": v for k, v in mean.items()},
    "per_seed": per_seed,
  }
  steps = sorted(result.evals_per_seed)
  if steps and "stage_err_u_signed" in result.evals[steps[0]]:
    summary["stage_err_u_signed"] = [result.evals[t]["stage_err_u_signed"] for t in steps]
    for s in seeds:
      errs = [result.evals_per_seed[t][s]["stage_err_u_signed"] for t in steps]
      per_seed[str(s)]["stage_err_u_signed"] = errs
      text = ", ".join(f"{e:+.3f}" for e in errs)
      log(f"[dasbs] seed {s}: signed err_u after each stage (+ = too disordered): {text}")
  runtime.write_summary(workdir, summary)
  for s, (res, _, _) in zip(seeds, scored):
    log(f"[dasbs] seed {s}: {metrics.result_line(res)}")
  line = metrics.result_line(mean)
  log(f"[dasbs] mean over {len(seeds)} seeds: {line} -> {workdir}/summary.json")
  return summary


def chunk_steps(spec) -> int:
  """Steps per jitted chunk: equal chunks (one compile), each inside one phase, i.e. a divisor of
  both phase lengths."""
  return math.gcd(spec.ctrl_steps, spec.corr_steps or spec.ctrl_steps)


def train_and_report(
  config,
  ev,
  key,
  *,
  workdir,
  loop: runtime.Loop,
  mesh=None,
  log: Callable[[str], Any] = print,
  seeds=None,
):
  """The program's run: `dasbs.train` with the per-stage check (``ev.stage_eval_samples``, every
  ``loop.eval_every`` steps), then `report`. ``key``: raw key data; returns (state, summary).

  ``seeds`` (more than one): those seeds train vmapped in one compiled program (one device);
  ``key`` is then ignored, each seed starting from ``jaxlab.core.seeds.seed_keys`` as the program
  run with ``--seed=<it>`` does, and ``config.json`` records the seeds."""
  spec = dasbs.make_spec(config)
  validate_config(ev)
  many = seeds is not None and len(seeds) > 1
  if many:
    seeds = tuple(seeds)
    key = seeds_lib.seed_keys(seeds)
    fold = seeds_lib.stream
    rec = jsonable(config)  # another seed set never continues this run
    record = {**rec, "seeds": list(seeds)} if isinstance(rec, dict) else {"config": rec}
    record["seeds"] = list(seeds)
  else:
    seeds, fold, record = None, jax.random.fold_in, config
  n_stage = ev.stage_eval_samples
  eval_fn = stage_eval(spec, fold(key, 3), n_stage, mesh, many) if n_stage else None
  t0 = time.perf_counter()
  state, result = dasbs.train(
    spec,
    fold(key, 0),
    mesh=mesh,
    workdir=workdir,
    loop=loop,
    record=record,
    eval_fn=eval_fn,
    seeds=seeds,
  )
  train_s = time.perf_counter() - t0
  if "mcmc/method" in result.summary:  # nothing trained: the record `report` already completed
    log(f"[dasbs] {workdir} holds this finished run (summary.json); nothing rewritten")
    return state, result.summary
  summary = report(
    workdir, state, result, key, ev, mesh=mesh, train_s=train_s, log=log, seeds=seeds
  )
  return state, summary
