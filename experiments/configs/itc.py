"""Configurations of `experiments.itc`: the three control runs of ITC (arXiv 2605.16457) and a
tiny CPU scale.

``get_config()`` holds the baseline (Dedieu et al. 2025's agent as reimplemented by ITC's
authors, ``configs.py``); ``PRESETS`` are the overrides of the authors' three YAML files:

- ``baseline_reproduced``: the baseline as is (``config/baseline_reproduced.yaml``);
- ``baseline_our_hyperparams``: warm-up 50k and 300 imagination updates
  (``config/baseline_our_hyperparams.yaml``);
- ``itc``: those plus spatio-temporal RoPE, the absolute in-block embedding and ITC decoding with
  ``num_dummy=81, distance_coef=0.6, trash_cost=0.3`` (``config/itc.yaml``).

``TINY`` shrinks every size so that a run finishes on a laptop CPU in minutes; it changes no
rule of the method, only its scale (see docs/itc.md). ``CPU`` is ``TINY`` with more
environments per iteration and a 50k-step default: the reduced-budget run of docs/itc.md,

  python -m experiments.itc --config.scale=cpu    # 50 iterations, about 30 min on 2 CPU cores

(measured: docs/results/itc_cpu/; the PPO loops are unrolled on CPU, see ``ppo.PPOConfig``).
"""

from __future__ import annotations

import ml_collections


def get_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.preset = "itc"  # baseline_reproduced | baseline_our_hyperparams | itc | none
  c.scale = "auto"  # auto (paper if env_steps >= 200k, else tiny) | paper | tiny | cpu
  c.decode = "sample"  # sample | argmax | itc | itc_hungarian (the --decode flag wins)
  c.env_steps = 1_000_000  # real environment steps (the --env_steps flag wins)
  c.reset_ratio = 16  # Craftax optimistic resets
  # Real rollouts and PPO (ITC's agent settings).
  c.num_envs = 48
  c.num_steps = 96
  c.epochs = 4
  c.minibatches = 8
  c.gamma = 0.925
  c.gae_lambda = 0.625
  c.clip_eps = 0.2
  c.vf_coef = 2.0
  c.ent_coef = 0.01
  c.lr = 4.5e-4
  c.max_grad_norm = 0.5
  # Policy: IMPALA CNN + GRU (policies.ImpalaRNNPolicy).
  c.channels = (64, 64, 128)
  c.policy_embed = 256
  c.policy_hidden = 256
  c.head_hidden = 2048
  # Tokenizer.
  c.codebook_size = 4096
  c.threshold = 0.75
  c.max_candidates = 1024
  c.tok_passes = 25
  # World model.
  c.wm_embed = 128
  c.wm_layers = 3
  c.wm_heads = 8
  c.wm_dropout = 0.1
  c.max_blocks = 20
  c.rope = "1d"
  c.absolute_embedding = False
  c.wm_lr = 1e-3
  c.wm_updates = 1500
  c.wm_batch = 16
  # Dyna.
  c.replay_size = 128_000
  c.warmup_steps = 200_000
  c.imag_updates = 150
  c.imag_batch = 48
  c.imag_minibatches = 8
  c.horizon = 20
  c.burn_in = 5
  # ITC decoding.
  c.num_dummy = 81
  c.distance_coef = 0.6
  c.trash_cost = 0.3
  c.sinkhorn_epsilon = 1e-5
  # Picture of a real vs imagined rollout at the end.
  c.picture_steps = 10
  return c


PRESETS = {
  "none": {},
  "baseline_reproduced": {"decode": "sample"},
  "baseline_our_hyperparams": {"decode": "sample", "warmup_steps": 50_000, "imag_updates": 300},
  "itc": {
    "decode": "itc",
    "warmup_steps": 50_000,
    "imag_updates": 300,
    "rope": "spatiotemporal",
    "absolute_embedding": True,
  },
}

TINY = {
  "env_steps": 1536,
  "reset_ratio": 4,
  "num_envs": 8,
  "num_steps": 32,
  "epochs": 2,
  "minibatches": 2,
  "channels": (8, 16, 16),
  "policy_embed": 32,
  "policy_hidden": 32,
  "head_hidden": 64,
  "codebook_size": 512,
  "max_candidates": 256,
  "tok_passes": 2,
  "wm_embed": 48,
  "wm_layers": 1,
  "wm_heads": 4,
  "max_blocks": 8,
  "wm_updates": 20,
  "wm_batch": 4,
  "replay_size": 2048,
  "warmup_steps": 256,
  "imag_updates": 2,
  "imag_batch": 8,
  "imag_minibatches": 2,
  "horizon": 6,
  "burn_in": 2,
  "picture_steps": 6,
}

# TINY sizes, 1000 real steps per iteration (50 iterations for the default 50k steps).
CPU = {
  **TINY,
  "env_steps": 50_000,
  "num_envs": 20,
  "num_steps": 50,
  "replay_size": 4000,
  "warmup_steps": 5000,
  "wm_updates": 10,
  "imag_updates": 1,
}

SCALES = {"tiny": TINY, "cpu": CPU}
