"""Discrete ASBS presets: the six settings of the authors' README (arXiv 2602.08243), L = 24 / 16.

Pick one with the config argument; override any field with `--config.<field>=...` (the fields and
their meaning are `jaxlab.sampling.dasbs.get_config`):

  # Ising at beta_c, L = 24, 5 x (400 + 200) steps: GPU intended (hours on 2 CPU cores).
  python -m experiments.dasbs --config=experiments/configs/dasbs.py:ising_critical
  # Potts q = 4 at low temperature, batch split over every device.
  python -m experiments.dasbs --config=experiments/configs/dasbs.py:potts_low --mesh=data:-1
  # Reduced CPU run of the critical preset (~8-13 min on 2 shared cores, 300 steps).
  python -m experiments.dasbs --config=experiments/configs/dasbs.py:ising_critical \
      --config.L=8 --config.num_stages=2 --config.ctrl_steps=100 --config.corr_steps=50 \
      --config.sampling_steps=50 --config.num_repl=4 --config.lr=2e-3

Without an argument (or without --config) the preset is `ising_critical`.
"""

from __future__ import annotations

from jaxlab.sampling import dasbs

# The authors' README table (their batch sizes are per GPU of 2). Every preset uses log-linear noise
# with alpha = 0.5, 5 stages and the ropesit controller / corrector (hidden 32, 6 blocks).
PRESETS = {
  "ising_high": dict(
    target="ising",  # Ising, N = 2
    beta=0.28,  # high temperature (beta < beta_c = 0.4407)
    L=24,  # 24 x 24 periodic lattice
    batch_size=64,  # pairs per step
    num_repl=8,  # t draws per pair
    buffer_size=512,  # replay buffer (pairs)
    ctrl_steps=400,  # controller steps per stage
    corr_steps=200,  # corrector steps per stage
    lr=1e-3,  # AdamW learning rate
    resample_freq=20,  # steps between buffer refills
    sampling_steps=200,  # tau-leaping steps
    ctrl_loss="tm",  # controller: target (adjoint) matching
    corr_loss="tm",  # corrector: target matching (needs the uniform source)
    source="uniform",  # beta_init = 0
    gamma=1.0,  # reference rate scale
  ),
  "ising_critical": dict(
    target="ising",  # Ising, N = 2
    beta=0.4407,  # beta_c = ln(1 + sqrt 2) / 2
    L=24,  # 24 x 24 periodic lattice
    batch_size=64,  # pairs per step
    num_repl=8,  # t draws per pair
    buffer_size=512,  # replay buffer (pairs)
    ctrl_steps=400,  # controller steps per stage
    corr_steps=200,  # corrector steps per stage
    lr=5e-4,  # AdamW learning rate
    resample_freq=20,  # steps between buffer refills
    sampling_steps=200,  # tau-leaping steps
    ctrl_loss="tm",  # controller: target (adjoint) matching
    corr_loss="dm",  # corrector: denoising matching
    source="constant",  # beta_init = inf: the two ground states
    gamma=1.0,  # reference rate scale
  ),
  "ising_low": dict(
    target="ising",  # Ising, N = 2
    beta=0.6,  # low temperature
    L=24,  # 24 x 24 periodic lattice
    batch_size=64,  # pairs per step
    num_repl=8,  # t draws per pair
    buffer_size=512,  # replay buffer (pairs)
    ctrl_steps=500,  # controller steps per stage
    corr_steps=250,  # corrector steps per stage
    lr=5e-4,  # AdamW learning rate
    resample_freq=20,  # steps between buffer refills
    sampling_steps=200,  # tau-leaping steps
    ctrl_loss="tm",  # controller: target (adjoint) matching
    corr_loss="dm",  # corrector: denoising matching
    source="constant",  # beta_init = inf: the two ground states
    gamma=0.25,  # slower reference: P(site unchanged over [0, 1]) = 0.88
  ),
  "potts_high": dict(
    target="potts",  # Potts, N = q
    q=4,  # colours
    beta=0.9,  # high temperature (beta < beta_c = ln 3)
    L=16,  # 16 x 16 periodic lattice
    batch_size=128,  # pairs per step
    num_repl=16,  # t draws per pair
    buffer_size=512,  # replay buffer (pairs)
    ctrl_steps=500,  # controller steps per stage
    corr_steps=250,  # corrector steps per stage
    lr=1e-3,  # AdamW learning rate
    resample_freq=20,  # steps between buffer refills
    sampling_steps=100,  # tau-leaping steps
    ctrl_loss="tm",  # controller: target (adjoint) matching
    corr_loss="tm",  # corrector: target matching (needs the uniform source)
    source="uniform",  # beta_init = 0
    gamma=1.0,  # reference rate scale
  ),
  "potts_critical": dict(
    target="potts",  # Potts, N = q
    q=4,  # colours
    beta=1.0986,  # beta_c = ln(1 + sqrt q) = ln 3
    L=16,  # 16 x 16 periodic lattice
    batch_size=128,  # pairs per step
    num_repl=16,  # t draws per pair
    buffer_size=4096,  # replay buffer (pairs)
    ctrl_steps=200,  # controller steps per stage
    corr_steps=100,  # corrector steps per stage
    lr=5e-4,  # AdamW learning rate
    resample_freq=10,  # steps between buffer refills
    sampling_steps=100,  # tau-leaping steps
    ctrl_loss="tm",  # controller: target (adjoint) matching
    corr_loss="dm",  # corrector: denoising matching
    source="constant",  # beta_init = inf: the q ground states
    gamma=1.0,  # reference rate scale
  ),
  "potts_low": dict(
    target="potts",  # Potts, N = q
    q=4,  # colours
    beta=1.3,  # low temperature
    L=16,  # 16 x 16 periodic lattice
    batch_size=128,  # pairs per step
    num_repl=16,  # t draws per pair
    buffer_size=4096,  # replay buffer (pairs)
    ctrl_steps=500,  # controller steps per stage
    corr_steps=250,  # corrector steps per stage
    lr=1e-3,  # AdamW learning rate
    resample_freq=20,  # steps between buffer refills
    sampling_steps=100,  # tau-leaping steps
    ctrl_loss="tm",  # controller: target (adjoint) matching
    corr_loss="dm",  # corrector: denoising matching
    source="constant",  # beta_init = inf: the q ground states
    gamma=0.25,  # slower reference: P(site unchanged over [0, 1]) = 0.82
  ),
}

# Shared by the six presets.
COMMON = dict(
  noise="log_linear",  # gamma(t) = gamma / (alpha + t)
  alpha=0.5,  # log-linear offset
  num_stages=5,  # IPF-like stages
  model="ropesit",  # transformer controller and corrector
  hidden=32,  # width
  depth=6,  # blocks
)


def get_config(arg: str | None = None):
  """The preset named `arg` (default `ising_critical`) on top of `dasbs.get_config()`."""
  name = arg or "ising_critical"
  if name not in PRESETS:
    from jaxlab.core import experiment

    experiment.fail("config", f"unknown preset {name!r}; presets: {', '.join(PRESETS)}")
  config = dasbs.get_config()
  config.update(**COMMON, **PRESETS[name])
  return config
