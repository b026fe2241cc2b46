r"""Presets of `experiments.itc`, chosen big_vision style:
``--config=experiments/configs/itc.py:<arg>``.

The defaults are ``jaxlab.rl.itc.get_config()``: the baseline of ITC's code (arXiv 2605.16457) at
the paper's scale. ``<arg>`` is an arm, a size, or ``<arm>,<size>``:

Arms (the authors' three YAML files, at the paper's scale: 1M steps, a GPU run):
  baseline_reproduced       the baseline as is (config/baseline_reproduced.yaml)
  baseline_our_hyperparams  warm-up 50k, 300 imagination updates (baseline_our_hyperparams.yaml)
  itc                       those plus spatio-temporal RoPE, the in-block embedding and ITC
                            decoding (config/itc.yaml)
Sizes (with the ``itc`` arm unless one is given):
  tiny  (default: no ``:<arg>``) every size shrunk so that a run finishes on a laptop CPU in
        minutes: 1536 env steps, 8 environments x 32 steps, one PPO epoch of one minibatch, a
        1-layer world model of width 48, 8 frames of context, 2 imagined rollouts of 6 steps;
        no rule of the method changes
  cpu   the tiny networks with 20 environments x 50 steps = 1000 real steps per iteration,
        2 PPO epochs x 2 minibatches, and 50k steps: the reduced-budget run of docs/itc.md
        (about 30 min on 2 CPU cores); the decoder study ``itc/decoders``
        (``python -m experiments.study itc/decoders``, `jaxlab.studies.itc`) uses this config

Commands (from the repository root):
  python -m experiments.itc
  python -m experiments.itc --decode=sample
  python -m experiments.itc --config=experiments/configs/itc.py:cpu
  python -m experiments.itc --config=experiments/configs/itc.py:itc
  python -m experiments.itc --config=experiments/configs/itc.py:baseline_reproduced
  python -m experiments.itc --config=experiments/configs/itc.py:baseline_reproduced,tiny

Any field is overridden with ``--config.<field>=<value>``, e.g. ``--config.env_steps=200000``.
"""

from __future__ import annotations

import ml_collections

from jaxlab.rl import itc

ARMS = ("baseline_reproduced", "baseline_our_hyperparams", "itc")
SIZES = ("tiny", "cpu")


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """``<arm>``, ``<size>`` or ``<arm>,<size>`` (module docstring); no ``arg``: ``tiny``."""
  parts = [p.strip() for p in (arg or "tiny").split(",") if p.strip()]
  arms = [p for p in parts if p in ARMS]
  sizes = [p for p in parts if p in SIZES]
  if len(arms) + len(sizes) != len(parts) or len(arms) > 1 or len(sizes) > 1:
    raise ValueError(
      f"unknown preset {arg!r}; allowed: an arm ({', '.join(ARMS)}), a size ({', '.join(SIZES)}) "
      "or <arm>,<size>"
    )
  c = itc.get_config()
  arm = arms[0] if arms else "itc"
  if arm in ("baseline_our_hyperparams", "itc"):
    c.warmup_steps = 50_000
    c.imag_updates = 300
  if arm == "itc":
    c.decode = "itc"
    c.wm.rope = "spatiotemporal"
    c.wm.absolute_embedding = True
  if sizes:
    _tiny(c)
  if sizes == ["cpu"]:
    c.env_steps = 50_000  # 50 iterations
    c.ppo.num_envs = 20
    c.ppo.num_steps = 50  # 1000 real steps per iteration
    c.ppo.epochs = 2  # 2 x 2 PPO steps per iteration (as in docs/results/itc_cpu)
    c.ppo.minibatches = 2
    c.replay_size = 4000
    c.warmup_steps = 5000
    c.wm_updates = 10
    c.imag_updates = 1
  return c


def _tiny(c: ml_collections.ConfigDict) -> None:
  c.env_steps = 1536  # 6 iterations
  c.picture_steps = 6
  c.ppo.reset_ratio = 4
  c.ppo.num_envs = 8
  c.ppo.num_steps = 32
  # One PPO epoch of one minibatch: on CPU PPO's loops are unrolled (`itc.dyna_config`), so each
  # epoch x minibatch is another copy of the IMPALA gradient in the compiled program.
  c.ppo.epochs = 1
  c.ppo.minibatches = 1
  c.policy.channels = (8, 16, 16)
  c.policy.embed = 32
  c.policy.hidden = 32
  c.policy.head_hidden = 64
  c.tokenizer.codebook_size = 512
  c.tokenizer.max_candidates = 256
  c.tok_passes = 2
  c.wm.embed = 48
  c.wm.layers = 1
  c.wm.heads = 4
  c.wm.max_blocks = 8
  c.wm_updates = 20
  c.wm_batch = 4
  c.replay_size = 2048
  c.warmup_steps = 256
  c.imag_updates = 2
  c.imag_batch = 8
  c.imag_minibatches = 2
  c.horizon = 6
  c.burn_in = 2
