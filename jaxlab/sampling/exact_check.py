"""The exact Schrödinger-bridge controller of Discrete ASBS (constant source, Ising, h = 0) on
lattices up to 4 x 4, and a trained DASBS controller measured against it (what
`python -m experiments.dasbs_exact` prints; docs/dasbs.md)::

    from jaxlab.sampling import exact_check
    c = exact_check.get_config()
    spec = exact_check.flag_spec(c)  # or exact_check.run_spec(workdir) of a dasbs run
    result = exact_check.run(spec, samples=c.samples, seeds=c.seeds, seed=0)  # result["err_u"]
    ctrl, step = exact_check.restore_controller(workdir, spec)  # run(..., ctrl=ctrl, step=step)

`exact_floor`: tau-leaping with the exact controller (`exact.constant_source_sb_log_phi`), the
sampler's discretisation floor. `compare_trained`: the trained controller's leave rates at t = 0
and along its own paths, and the ctrl-TM target at t = 0, against the exact controller's.
"""

from __future__ import annotations

import json
import pathlib
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import orbax.checkpoint as ocp

from jaxlab.core import checkpoint, resources
from jaxlab.core.errors import ConfigError, check_config, require
from jaxlab.sampling import dasbs, exact, losses, sampler


def get_config() -> ml_collections.ConfigDict:
  """The lattice and reference of the exact check without a run (the program's flags): the CPU
  preset's setting (experiments/configs/dasbs.py:ising_critical_cpu)."""
  base = dasbs.get_config()
  c = ml_collections.ConfigDict()
  c.L = 4  # lattice side: 3 or 4 (2^(L*L) states are enumerated)
  c.beta = base.beta  # inverse temperature (beta_c)
  c.gamma = 0.25  # reference rate scale of the log-linear schedule
  c.alpha = base.alpha  # log-linear offset: gamma(t) = gamma / (alpha + t)
  c.steps = 50  # tau-leaping steps
  c.samples = 8192  # paths per seed (and for the trained sampler)
  c.seeds = 4  # seeds of the exact controller's tau-leaping
  return c


def validate_config(c) -> ml_collections.FrozenConfigDict:
  """ConfigError naming the field as the program's flag (``L``, ``beta``, ``samples``, ...)."""
  msg = f"must be 3 or 4 (2^(L*L) states are enumerated), got {c.L}"
  require(c.L in (3, 4), "L", msg)
  table = dict.fromkeys(("beta", "gamma", "alpha", "steps", "samples", "seeds"), "positive")
  check_config(c, table, prefix="")
  check_sizes(c.L * c.L, 2, c.steps, c.samples, "steps")
  return ml_collections.FrozenConfigDict(c)


def check_sizes(D: int, N: int, steps: int, samples: int, steps_field: str = "steps") -> None:
  """Refuses what cannot fit before anything is built: the exact controller's table log phi_t
  (steps x N^D, float64) and the paths (samples x D x N per step, float32). ``steps_field`` names
  where the steps come from (the flag, or the --workdir run's config)."""
  S = N**D
  resources.check_int32(steps_field, steps, "the tau-leaping steps")
  resources.check_int32("samples", samples, "the number of paths")
  what = f"the exact controller's table log phi_t ({steps} steps x {S} states, float64)"
  resources.check_fits(2 * 8 * steps * S, steps_field, what)
  what = f"{samples} paths of {D} sites x {N} values (and the trained controller's per step)"
  resources.check_fits(16 * 4 * samples * D * N, "samples", what)


def flag_spec(c) -> dasbs.Spec:
  """The Spec of ``c`` (`get_config` fields): Ising, J = 1, h = 0, constant source, log-linear
  noise."""
  validate_config(c)
  config = dasbs.get_config()
  config.update(
    target="ising",
    L=c.L,
    beta=c.beta,
    gamma=c.gamma,
    alpha=c.alpha,
    noise="log_linear",
    h=0.0,
    source="constant",
    sampling_steps=c.steps,
  )
  return dasbs.make_spec(config)


def run_spec(workdir: pathlib.Path) -> dasbs.Spec:
  """The Spec of an `experiments.dasbs` run from its config.json (unknown fields are ignored)."""
  path = workdir / "config.json"
  require(path.exists(), "workdir", f"{workdir} has no config.json: not a dasbs run directory")
  try:
    record = json.loads(path.read_text())
    c = dasbs.get_config()
    c.update(**{k: v for k, v in record.items() if k in c})
    spec = dasbs.make_spec(c)
  except (ValueError, KeyError, TypeError, AttributeError) as e:  # ConfigError is a ValueError
    why = e.message if isinstance(e, ConfigError) else f"{type(e).__name__}: {e}"
    raise ConfigError("workdir", f"{path} is not the config of a dasbs run ({why})") from None
  tgt = spec.target
  require(
    tgt.kind == "ising" and tgt.h == 0.0 and spec.source == "constant" and tgt.L <= 4,
    "workdir",
    "the exact controller needs Ising, h = 0, source='constant' and L <= 4; the run has "
    f"{tgt.kind}, h={tgt.h}, source={spec.source!r}, L={tgt.L}",
  )
  return spec


def restore_controller(workdir: pathlib.Path, spec: dasbs.Spec):
  """The controller (a TrainState) with the EMA weights of the run's latest checkpoint, and its
  step. Only ctrl.target_params is read, so runs saved before later state fields (e.g. buf_logw)
  were added still load."""
  require(
    (workdir / checkpoint.CKPT_DIR).is_dir(), "workdir", f"{workdir} has no checkpoints/ folder"
  )
  ctrl = dasbs.init_state(spec, jax.random.PRNGKey(0)).ctrl
  item = {"ctrl": {"target_params": jax.tree.map(ocp.utils.to_shape_dtype_struct, ctrl.params)}}
  mngr = checkpoint.manager(workdir, read_only=True)  # reads: creates, prunes, saves nothing
  try:
    step = mngr.latest_step()
    require(step is not None, "workdir", f"{workdir} has no checkpoint")
    args = ocp.args.PyTreeRestore(
      item=item,
      restore_args=ocp.checkpoint_utils.construct_restore_args(item),
      partial_restore=True,
    )
    try:
      restored = mngr.restore(step, args=ocp.args.Composite(state=args))
    except Exception as e:  # orbax raises many types, with very long messages
      first = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
      raise ConfigError(
        "workdir", f"the controller of checkpoint {step} cannot be restored ({first})"
      ) from None
    checkpoint.verify(mngr, step, restored["state"])  # the arrays read, against their digest
  finally:
    mngr.close()
  return ctrl.replace(target_params=restored["state"]["ctrl"]["target_params"]), int(step)


def settings(spec, *, samples: int, seeds: int, seed: int, workdir=None, step=None) -> dict:
  """What decides a result: recorded in the --out JSON, so a re-run knows it is the same one."""
  tgt, sched = spec.target, spec.sched
  return {
    "L": tgt.L,
    "beta": tgt.beta,
    "gamma": sched.gamma,
    "alpha": sched.alpha,
    "steps": spec.sampling_steps,
    "samples": samples,
    "seeds": seeds,
    "seed": seed,
    "workdir": None if workdir is None else str(workdir),
    "step": step,
  }


def previous_result(out, record: dict) -> dict | None:
  """The result already in ``out`` for these ``settings`` (a re-run rewrites nothing), None when
  ``out`` does not exist; ``ConfigError('out')`` when it holds anything else (never overwritten)."""
  out = pathlib.Path(out)
  if not out.exists():
    return None
  try:
    old = json.loads(out.read_text())
    recorded = old["settings"]
  except (OSError, ValueError, KeyError, TypeError) as e:
    why = f"{type(e).__name__}: {e}"
    raise ConfigError("out", f"{out} exists and is not a dasbs_exact result ({why})") from None
  new = json.loads(json.dumps(record))
  diff = [f"{k}: {recorded.get(k)} -> {v}" for k, v in new.items() if recorded.get(k) != v]
  if diff:
    raise ConfigError(
      "out", f"{out} holds a result of other settings ({'; '.join(diff[:4])}); choose a new --out"
    )
  return old


def tau_grid(steps: int) -> np.ndarray:
  """The times at which `sampler.tau_leap` calls the controller."""
  return np.linspace(0.0, 1.0, steps + 1)[:-1]


def _mean_se(v) -> tuple[float, float]:
  v = np.asarray(v, np.float64)
  return float(v.mean()), float(v.std(ddof=1) / np.sqrt(v.size)) if v.size > 1 else float("nan")


def exact_floor(spec, log_phi, key, samples: int, seeds: int, u_exact: float) -> dict:
  """Tau-leaping from the source with the exact controller: signed energy error per spin per seed,
  and seed 0's (x0, x1) pairs."""
  tgt, steps = spec.target, spec.sampling_steps

  def one(k):
    k0, k1 = jax.random.split(k)
    x0 = sampler.sample_source(k0, spec.source, samples, tgt.D, tgt.N)
    x1 = sampler.tau_leap(k1, log_phi, x0, spec.sched, tgt.N, steps)["x1"]
    return x0, x1, tgt.energy(x1).mean() / tgt.D

  run = jax.jit(one)
  errs, pairs = [], None
  for s in range(seeds):
    x0, x1, u = run(jax.random.fold_in(key, s))
    errs.append(float(u) - u_exact)
    pairs = pairs or (x0, x1)
  mean, se = _mean_se(errs)
  if seeds == 1:  # the standard error of the one seed's mean
    e = np.asarray(tgt.energy(pairs[1]), np.float64) / tgt.D
    se = float(e.std() / np.sqrt(e.size))
  return {"err_u": mean, "err_u_se": se, "err_u_per_seed": errs, "pairs": pairs}


def _ratio(a: float, b: float) -> float:
  return float(a / b) if b > 0 else float("nan")  # nan: no such sites at this step


def leave_rates(log_phi_BxDxN, x_BxD):
  """Per site, the summed rate ratio to the reference of leaving x^d (BxD)."""
  off = losses.off_mask(x_BxD, log_phi_BxDxN.shape[-1])
  return jnp.where(off, jnp.exp(log_phi_BxDxN), 0.0).sum(-1)


def tm_target_t0(log_phi1_S, x0_BxD, x1_BxD, N: int) -> float:
  """Mean over pairs, sites and jumps n != x0^d of the ctrl-TM target at t = 0 (x_t = x0) with the
  exact corrector: [S_nu - log hat phi_1](x1) = the log phi_1 ratios at x1, Z_N-shifted to x0."""
  r1 = exact.neighbour_log_ratios(log_phi1_S, x1_BxD, N)
  target = losses.ctrl_tm_log_target(r1, jnp.zeros_like(r1), x1_BxD, x0_BxD)
  off = losses.off_mask(x0_BxD, N)
  return float(jnp.where(off, jnp.exp(target), 0.0).sum() / off.sum())


def trained_paths(spec, ctrl, exact_fn, key, num: int):
  """The trained sampler's tau-leaping paths (as `dasbs.simulate`: same keys, same steps) and, at
  each step, the summed leave rates of trained and exact controllers on its states, split by
  whether the flip lowers |m|."""
  tgt, steps = spec.target, spec.sampling_steps
  ts = jnp.linspace(0.0, 1.0, steps + 1)
  params = ctrl.target_params
  k0, k1 = jax.random.split(key)
  x0 = sampler.sample_source(k0, spec.source, num, tgt.D, tgt.N)

  def body(x, i):
    t_B = jnp.full((num,), ts[i])
    lp_nn = ctrl(x, t_B, params=params).astype(jnp.float32)
    r_nn, r_ex = leave_rates(lp_nn, x), leave_rates(exact_fn(t_B, x), x)
    s = 2.0 * x - 1.0
    m = s.sum(-1, keepdims=True)
    dis = s * m > 0  # flipping this site lowers |m| (none when m = 0)
    stats = {
      "abs_m": jnp.abs(m).mean() / tgt.D,
      "nn_dis": jnp.where(dis, r_nn, 0.0).sum(),
      "ex_dis": jnp.where(dis, r_ex, 0.0).sum(),
      "nn_ord": jnp.where(dis, 0.0, r_nn).sum(),
      "ex_ord": jnp.where(dis, 0.0, r_ex).sum(),
    }
    logp, _ = sampler.step_log_probs(lp_nn, x, spec.sched.Gamma(ts[i], ts[i + 1]))
    new = jax.random.categorical(jax.random.fold_in(k1, i), logp, axis=-1).astype(x.dtype)
    return new, stats

  x1, stats = jax.lax.scan(body, x0, jnp.arange(steps))
  return x0, x1, stats


def compare_trained(spec, ctrl, exact_fn, info, exact_pairs, key, num, u_exact) -> dict:
  """The trained controller (EMA weights) against the exact one: see the module docstring."""
  tgt, steps = spec.target, spec.sampling_steps
  N, D = tgt.N, tgt.D
  ground = jnp.stack([jnp.zeros((D,), jnp.int32), jnp.ones((D,), jnp.int32)])
  t0 = jnp.zeros((2,))
  nn0 = leave_rates(ctrl(ground, t0, params=ctrl.target_params), ground).mean(-1)
  ex0 = leave_rates(exact_fn(t0, ground), ground).mean(-1)
  paths = jax.jit(lambda c, k: trained_paths(spec, c, exact_fn, k, num))
  x0, x1, stats = paths(ctrl, key)
  stats = {k: np.asarray(v, np.float64) for k, v in stats.items()}
  e = np.asarray(tgt.energy(x1), np.float64) / D
  ts = tau_grid(steps)
  rows = sorted({round(j * steps / 10) for j in range(10)} | {steps - 1})
  along = [
    {
      "t": float(ts[i]),
      "abs_m": float(stats["abs_m"][i]),
      "ratio_disorder": _ratio(stats["nn_dis"][i], stats["ex_dis"][i]),
      "ratio_order": _ratio(stats["nn_ord"][i], stats["ex_ord"][i]),
    }
    for i in rows
  ]
  return {
    "leave_t0_trained": [float(v) for v in nn0],  # all-0, all-1
    "leave_t0_exact": float(ex0[0]),
    "err_u_trained": float(e.mean() - u_exact),
    "err_u_trained_se": float(e.std() / np.sqrt(e.size)),
    "along_paths": along,
    "tm_target_t0_own": tm_target_t0(info["log_phi1"], x0, x1, N),
    "tm_target_t0_exact": tm_target_t0(info["log_phi1"], *exact_pairs, N),
  }


def run(
  spec,
  *,
  samples: int,
  seeds: int,
  seed: int,
  ctrl=None,
  step: int | None = None,
  log: Callable[[str], Any] = print,
) -> dict:
  """The exact floor and, with a trained ``ctrl`` (`restore_controller`), the comparison; logs the
  program's lines and returns every number (the program's --out JSON)."""
  tgt, sched, steps = spec.target, spec.sched, spec.sampling_steps
  t_start = time.perf_counter()
  check_sizes(tgt.D, tgt.N, steps, samples, "workdir" if ctrl is not None else "steps")
  key = jax.random.PRNGKey(seed)
  S = tgt.N**tgt.D
  log(f"[dasbs_exact] tabulating the exact controller on {steps} times x {S} states ...")
  u_exact = exact.ising_exact_observables(tgt.L, tgt.beta, tgt.J)["u_per_spin"]
  exact_fn, info = exact.constant_source_sb_log_phi(tgt, sched, tau_grid(steps))
  log(f"[dasbs_exact] tau-leaping {seeds} seed(s) x {samples} paths x {steps} steps ...")
  floor = exact_floor(spec, exact_fn, jax.random.fold_in(key, 0), samples, seeds, u_exact)
  per_seed = ", ".join(f"{v:+.4f}" for v in floor["err_u_per_seed"])
  log(
    f"[dasbs_exact] exact controller, {steps} tau-leaps: err_u {floor['err_u']:+.4f} "
    f"± {floor['err_u_se']:.4f} per spin (U = {u_exact:.4f}; {seeds} seeds x "
    f"{samples}: {per_seed}) [{time.perf_counter() - t_start:.0f} s]"
  )
  result = {
    "target": {"kind": tgt.kind, "L": tgt.L, "beta": tgt.beta},
    "sched": {"kind": sched.kind, "gamma": sched.gamma, "alpha": sched.alpha},
    "steps": steps,
    "u_exact": u_exact,
    **{k: v for k, v in floor.items() if k != "pairs"},
  }
  if ctrl is None:
    return result
  log(f"[dasbs_exact] the trained controller's {samples} paths x {steps} steps ...")
  cmp = compare_trained(
    spec, ctrl, exact_fn, info, floor["pairs"], jax.random.fold_in(key, 1), samples, u_exact
  )
  nn0 = cmp["leave_t0_trained"]
  log(
    f"[dasbs_exact] trained EMA controller (step {step}): err_u {cmp['err_u_trained']:+.4f} "
    f"± {cmp['err_u_trained_se']:.4f}; t=0 ground-state leave rate (mean over sites) trained "
    f"{nn0[0]:.4f} (all-0) / {nn0[1]:.4f} (all-1), exact {cmp['leave_t0_exact']:.4f}"
  )
  lines = ["[dasbs_exact] along the trained paths, summed leave rates trained / exact:"]
  lines.append("    t    |m|  disordering  ordering")
  for r in cmp["along_paths"]:
    lines.append(
      f"  {r['t']:.2f}  {r['abs_m']:.3f}  {r['ratio_disorder']:11.3f}  {r['ratio_order']:8.3f}"
    )
  log("\n".join(lines))
  log(
    f"[dasbs_exact] ctrl-TM target at t=0 (exact corrector), mean over pairs and sites: trained "
    f"sampler's own pairs {cmp['tm_target_t0_own']:.4f}, exact controller's "
    f"{cmp['tm_target_t0_exact']:.4f} [{time.perf_counter() - t_start:.0f} s]"
  )
  return result | {"checkpoint_step": step, **cmp}
