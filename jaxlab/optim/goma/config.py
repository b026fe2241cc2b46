"""Defaults and validation of the GOMA comparison (`jaxlab.optim.goma.compare.run_comparison`,
`python -m experiments.goma`): one `get_config()`, one `validate_config()`."""

from __future__ import annotations

import math

import ml_collections

from jaxlab.core.errors import check_config, require

# Seeds of a comparison without --seeds: --seed ... --seed + 4. Seed k is one problem instance,
# start and noise stream (`jaxlab.core.seeds.seed_keys`), the same in any set of seeds.
NUM_SEEDS = 5


def get_config() -> ml_collections.ConfigDict:
  """Problem sizes, noise and fit range. ~20-40 s per command on 2 CPU cores (5 seeds, 10^4 iters).
  The seeds (instances, starts and noise streams, vmapped in one jit) are the shared --seeds flag.

  python -m experiments.goma --problem=bilinear --methods=eg,popov,eag_v,feg,apv,goma --steps=10000
  """
  c = ml_collections.ConfigDict()
  c.n = 40  # bilinear/quadratic: size of each player (T1: 40)
  c.smin = 1e-3  # bilinear: smallest singular value (log-spaced spectrum)
  c.smax = 1.0  # bilinear: largest singular value (= L)
  c.rank = 0  # bilinear: >0 zeroes all but the `rank` largest singular values
  c.d = 50  # stochastic_bilinear: size of each player (DSEG: 50, s ~ U[1, 2])
  c.sigma = 0.5  # stochastic_bilinear: additive Gaussian noise std (DSEG noise_std)
  c.sigma_mult = 0.1  # stochastic_bilinear, --noise=multiplicative: matrix noise std sigma_C
  c.omega = 0.5  # quadratic: ||A|| = ||B|| = omega
  c.fit_lo = 100  # slope fit range start (iterations)
  c.fit_hi = 10000  # slope fit range end (clipped to --steps)
  c.plot_points = 400  # log-spaced iterations kept in the plot and the CSV
  # Deterministic problems: deterministic GOMA (anchored Popov, constant eta = c/L) at each c, to
  # show where its lead over APV comes from (a larger stable step); "" skips the sweep.
  c.step_sweep = "0.1,0.2,0.3,0.4,0.5,0.6"
  return c


def sweep_factors(spec: str) -> list[float]:
  """config.step_sweep "0.2,0.4" -> [0.2, 0.4]: finite numbers > 0 ("" -> [])."""
  out = []
  for item in (s.strip() for s in spec.split(",")):
    if not item:
      continue
    try:
      c = float(item)
    except ValueError:
      c = float("nan")
    ok = math.isfinite(c) and c > 0
    require(ok, "config.step_sweep", f"needs finite numbers > 0, got {item!r}")
    out.append(c)
  return out


def validate_config(cfg) -> ml_collections.FrozenConfigDict:
  """Raises `ConfigError("config.<field>", ...)` for a bad field; returns ``cfg``, frozen."""
  check_config(
    cfg,
    {
      "n": "positive",
      "d": "positive",
      "smin": "positive",
      "smax": lambda v: None if v >= cfg.smin else f"must be >= config.smin={cfg.smin}, got {v}",
      "rank": lambda v: None if 0 <= v <= cfg.n else f"must be in [0, config.n={cfg.n}], got {v}",
      "sigma": "nonneg",
      "sigma_mult": "nonneg",
      "omega": "nonneg",
      "fit_lo": "positive",
      "fit_hi": lambda v: None if v > cfg.fit_lo else f"must be > config.fit_lo={cfg.fit_lo}",
      "plot_points": "positive",
    },
  )
  sweep_factors(cfg.step_sweep)
  return ml_collections.FrozenConfigDict(cfg)
