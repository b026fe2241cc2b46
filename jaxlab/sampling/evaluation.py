"""What `python -m experiments.dasbs` reports after training: an MCMC reference, model samples
scored against it (and, for Ising at h = 0, against the exact Ferdinand–Fisher values), the
per-stage energy check, the plots and summary.json.

From a notebook (the program's run at a tiny size; docs/dasbs.md, "Use from Python")::

    from jaxlab.sampling import dasbs, evaluation
    ev = evaluation.get_config()
    state, result = dasbs.train(config, key, workdir=workdir, loop=loop, record=config,
                                eval_fn=evaluation.stage_eval(spec, key3, ev.stage_eval_samples))
    summary = evaluation.report(workdir, state, result, key, ev)
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
from jaxlab.core.errors import check_config
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


def validate_config(ev) -> ml_collections.ConfigDict:
  """ConfigError naming the field as the program's flag (``eval_samples``, ``mcmc_thin``, ...)."""
  positive = ("eval_samples", "mcmc_chains", "mcmc_samples", "mcmc_thin")
  table = {k: "positive" for k in positive} | {"stage_eval_samples": "nonneg"}
  check_config(ev, table | {"mcmc_burn_in": "nonneg"}, prefix="")
  return ev


def check_memory(spec, ev, devices=1) -> None:
  """Training and evaluation sizes that cannot fit are refused before anything is built: the
  model (`dasbs.check_memory`) on --eval_samples / --stage_eval_samples paths, and the MCMC
  reference's kept samples (chains x samples x sites)."""
  dasbs.check_memory(spec, ev.eval_samples, "eval_samples", devices=devices)
  dasbs.check_memory(spec, ev.stage_eval_samples, "stage_eval_samples", devices=devices)
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
  tgt = state.spec.target
  out = dasbs.sample_paths(state, key, num, mesh)
  e_ref = np.asarray(mc["energies"]).ravel()
  exact_obs = _exact_obs(tgt)
  res = metrics.summarize(
    tgt, state.spec.sched, state.spec.source, out, e_ref=e_ref, exact_obs=exact_obs
  )
  ref_stats = metrics.lattice_stats(tgt, mc["x"])
  res.update({f"mcmc/{k}": v for k, v in ref_stats.items()})
  res["mcmc/tau_int_energy"] = mc["tau"]
  if exact_obs is not None:
    res.update({f"exact/{k}": v for k, v in exact_obs.items()})
    res["mcmc/abs_err_u_per_spin"] = abs(ref_stats["u_per_spin_mean"] - exact_obs["u_per_spin"])
  e_model = np.asarray(tgt.energy(out["x1"])) / tgt.D
  return res, e_model, e_ref / tgt.D


def stage_eval(spec, key, num: int, mesh=None):
  """eval_fn for the runtime: the sampler after each stage (it only changes in controller phases).
  One compiled sampler for every stage; keys fold in the step, apart from the training keys."""
  tgt = spec.target
  exact_obs = _exact_obs(tgt)
  exact_u = None if exact_obs is None else exact_obs["u_per_spin"]
  sim = jax.jit(lambda ctrl, k: dasbs.simulate(spec, ctrl, ctrl.target_params, k, num, mesh)["x1"])

  def eval_fn(state, step):
    u = float(np.mean(np.asarray(tgt.energy(sim(state.ctrl, jax.random.fold_in(key, step))))))
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
) -> dict:
  """MCMC reference, model samples, curves.png, energy_hist.png, summary.json and the printed
  lines; returns the summary. ``key``: the run's key (folds 1 and 2 as the program's)."""
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
):
  """The program's run: `dasbs.train` with the per-stage check (``ev.stage_eval_samples``, every
  ``loop.eval_every`` steps), then `report`. ``key``: raw key data; returns (state, summary)."""
  spec = dasbs.make_spec(config)
  validate_config(ev)
  n_stage = ev.stage_eval_samples
  eval_fn = stage_eval(spec, jax.random.fold_in(key, 3), n_stage, mesh) if n_stage else None
  t0 = time.perf_counter()
  state, result = dasbs.train(
    spec,
    jax.random.fold_in(key, 0),
    mesh=mesh,
    workdir=workdir,
    loop=loop,
    record=config,
    eval_fn=eval_fn,
  )
  train_s = time.perf_counter() - t0
  return state, report(workdir, state, result, key, ev, mesh=mesh, train_s=train_s, log=log)
