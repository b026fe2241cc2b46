"""Discrete ASBS presets: the six settings of the authors' README (arXiv 2602.08243), L = 24 / 16,
and `ising_critical_cpu` / `ising_critical_cpu_memoryless`, 4 x 4 CPU presets of ours.

Pick one with the config argument; override any field with `--config.<field>=...` (the fields and
their meaning are `jaxlab.sampling.dasbs.get_config`):

  # Ising at beta_c, L = 24, 5 x (400 + 200) steps: GPU intended (hours on 2 CPU cores).
  python -m experiments.dasbs --config=experiments/configs/dasbs.py:ising_critical
  # Potts q = 4 at low temperature, batch split over every device.
  python -m experiments.dasbs --config=experiments/configs/dasbs.py:potts_low --mesh=data:-1
  # The CPU preset: Ising at beta_c on 4 x 4, 1250 steps (about 7 min with two runs sharing 2 CPU
  # cores; per-seed unweighted energy errors: docs/results/dasbs/notes.md, "The CPU presets on
  # seeds 0–9"); `..._memoryless`:
  # without corrector (4 min).
  python -m experiments.dasbs --config=experiments/configs/dasbs.py:ising_critical_cpu

Without an argument (or without --config) the preset is `ising_critical`. `ising_critical_cpu`
is the CPU preset (big_vision's `runlocal`).
"""

from __future__ import annotations

from jaxlab.sampling import dasbs

# The authors' README table (their batch sizes are per GPU of 2). Every preset uses what
# `dasbs.get_config()` holds for: log-linear noise with alpha = 0.5 and gamma = 1, 5 stages, the
# ropesit controller / corrector (hidden 32, 6 blocks), ctrl-TM, a buffer refill every 20 steps;
# below are only the fields a preset changes.
ISING = dict(L=24)  # 24 x 24 periodic lattice; batch 64 x 8 t draws, buffer 512, 200 tau-leaps
POTTS = dict(
  target="potts",  # Potts, N = q = 4 colours
  L=16,  # 16 x 16 periodic lattice
  batch_size=128,  # pairs per step
  num_repl=16,  # t draws per pair
  buffer_size=4096,  # replay buffer (pairs)
  sampling_steps=100,  # tau-leaping steps
)
# High temperature starts from the uniform source (beta_init = 0), where the corrector can use
# target matching; critical and low temperature start from the ground states (beta_init = inf, the
# library's source='constant') and use denoising matching (corr_loss='dm'). Low temperature slows
# the reference: P(site unchanged over [0, 1]) = 0.82. Steps per stage: 400 controller / 200
# corrector (the library's), LONG: 500 / 250.
UNIFORM = dict(source="uniform", corr_loss="tm")
LONG = dict(ctrl_steps=500, corr_steps=250)  # controller / corrector steps per stage
PRESETS = {
  "ising_high": dict(**ISING, **UNIFORM, beta=0.28, lr=1e-3),  # beta < beta_c = 0.4407
  "ising_critical": dict(ISING),  # the library's beta = 0.4407 = ln(1 + sqrt 2) / 2, lr 5e-4
  "ising_low": {**ISING, **LONG, "beta": 0.6, "gamma": 0.25},
  "potts_high": {**POTTS, **UNIFORM, **LONG, "beta": 0.9, "lr": 1e-3, "buffer_size": 512},
  "potts_critical": {  # beta_c = ln(1 + sqrt q) = ln 3
    **POTTS,
    "beta": 1.0986,
    "ctrl_steps": 200,
    "corr_steps": 100,
    "resample_freq": 10,
  },
  "potts_low": {**POTTS, **LONG, "beta": 1.3, "lr": 1e-3, "gamma": 0.25},
}
# CPU presets (not authors' settings): Ising at beta_c on a 4 x 4 lattice, 1250 steps, 4-7 min on
# 2 busy CPU cores (docs/results/dasbs/notes.md, "The CPU presets on seeds 0–9").
# `ising_critical_cpu` (the default CPU run) alternates controller and corrector phases as the GPU
# presets, with gamma = 0.25 (as the low-temperature presets): with gamma = 1 a site of the
# reference leaves its ground state w.p. 1/3 over [0, 1] and the sampler stays 0.13-0.17 per spin
# too disordered; gamma = 0.1 leaves it 0.26 too ordered. resample_freq = 5: with 20, a phase trains
# on 192-320 distinct buffer pairs, reused 20-50 times, and seeds 3 and 4 went 0.30-0.40 per spin
# into disorder in the last stage. No corrector EMA: with it seeds 0-4 ended 0.065-0.18 off at
# batch 64.
# Batch 128. Without path weights the samples drift into disorder (seeds 0-9: signed mean +0.044
# per spin, < 0.05 on 5 of 10): training on the sampler's own pairs is a fixed-point iteration
# that approaches the SB from the disordered side. path_weights = 'target' (ours: each pair's
# exact weight against the SB of this source) removes that lag; with it the corrector needs its
# t = 0 target (corr_dm_eps = 1, the Rao-Blackwellised corr-DM target), and a cosine lr cuts the
# seed-to-seed noise of the last stage. Per-seed errors of each step: docs/results/dasbs/notes.md,
# "The drift is the lag of a fixed-point iteration; path weights remove it".
# `ising_critical_cpu_memoryless` is the memoryless setting of the authors' code (`memoryless: true`
# with ctrl-TM): alpha = 0.01 and gamma = 1, so a site keeps its source value over [0, 1] w.p.
# (1 + 1/101) / 2 = 0.505 and the reference's terminal law is uniform to within 1 %; the corrector
# is 0 (no corrector phases) and the controller regresses onto the target's own discrete score. The
# lr decays (cosine) to 1e-4. Their tau-leaping grid starts at t = 0.01, ours at 0. Energy errors
# of the same size (too ordered), a far lower target ESS and an unbalanced +/- phase split
# (docs/results/dasbs/notes.md, "`ising_critical_cpu_memoryless`").
_CPU = {**PRESETS["ising_critical"], "L": 4, "resample_freq": 5}
_CPU |= {"sampling_steps": 50, "num_repl": 4, "lr": 1e-3}
CPU_PRESETS = {
  "ising_critical_cpu": {
    **_CPU,
    "ctrl_steps": 150,
    "corr_steps": 100,
    "gamma": 0.25,
    "batch_size": 128,  # 2 x the data per step: half the seed-to-seed spread; the drift stays
    "buffer_size": 1024,  # 8 refills, as at batch 64
    "corr_ema": False,  # docs/results/dasbs/notes.md, "Corrector EMA and the late-stage drift"
    "path_weights": "target",  # the SB's coupling, not the sampler's own (ours)
    "corr_dm_eps": 1.0,  # corr-DM at t = 0: same minimiser, less variance (ours)
    "lr_schedule": "cosine",  # 1e-3 -> 1e-4 over each network's updates
  },
  "ising_critical_cpu_memoryless": {
    **_CPU,
    "alpha": 0.01,  # memoryless reference (the authors' check: alpha <= 0.01); gamma = 1
    "ctrl_steps": 250,
    "corr_steps": 0,  # no corrector: memoryless
    "lr_schedule": "cosine",  # to lr * lr_end_frac = 1e-4
  },
}


def get_config(arg: str | None = None):
  """The preset named `arg` (default `ising_critical`) on top of `dasbs.get_config()`."""
  name = arg or "ising_critical"
  presets = {**PRESETS, **CPU_PRESETS}
  if name not in presets:
    from jaxlab.core import experiment

    experiment.fail("config", f"unknown preset {name!r}; presets: {', '.join(presets)}")
  config = dasbs.get_config()
  unknown = sorted(set(presets[name]) - set(config))
  assert not unknown, f"preset {name} sets fields the library config lacks: {unknown}"
  config.update(**presets[name])  # a preset only changes fields of the library config
  return config
