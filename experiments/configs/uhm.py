"""Presets of `experiments.uhm` (big_vision-style config file: ``--config=<this file>:<preset>``).

Every preset starts from the agent's `jaxlab.rl.uhm.get_config()` (every field is commented there)
and changes only the fields below; discount and ReBRAC's alphas stay unset there, so each run takes
its task's values (`jaxlab.rl.uhm.task_defaults`) unless --config.<field> sets them.

Presets:
  (none)  the command-line default: 3x256 actor / critic / flow networks (a CPU's budget; FQL's
          4x512 is `paper`), everything else the library's.
  paper   the library config unchanged: FQL's ReBRAC sizes (4x512 networks), for a GPU.
  cpu     a smoke-test size (2x64 networks, batch 64, 2 flow steps): seconds per 100 updates.
  pilot   the CPU pilot of docs/uhm.md (2x128 networks, batch 128, 3 flow steps): sized so that
          UHM and ReBRAC with 3 vmapped seeds each fit in about an hour of a shared 2-core CPU.

Commands (from the repository root):
  python -m experiments.uhm --env=ogbench
  python -m experiments.uhm --env=ogbench --config=experiments/configs/uhm.py:paper --steps=1000000
  python -m experiments.uhm --env=ogbench --config=experiments/configs/uhm.py:cpu --steps=100
"""

from __future__ import annotations

import ml_collections

from jaxlab.rl import uhm

PRESETS = ("paper", "cpu", "pilot")


def get_config(preset: str | None = None) -> ml_collections.ConfigDict:
  """The ``preset`` config of `experiments.uhm` (None: the command-line default)."""
  if preset not in (None, "", *PRESETS):
    raise ValueError(f"unknown preset {preset!r}; allowed: {', '.join(PRESETS)}")
  c = uhm.get_config()
  if not preset:
    c.actor_hidden_dims = c.value_hidden_dims = c.model_hidden_dims = (256, 256, 256)
  elif preset == "pilot":
    c.actor_hidden_dims = c.value_hidden_dims = c.model_hidden_dims = (128, 128)
    c.reward_hidden_dims = (128,)
    c.batch_size = 128
    c.flow_steps = 3
  elif preset == "cpu":
    c.actor_hidden_dims = c.value_hidden_dims = c.model_hidden_dims = (64, 64)
    c.reward_hidden_dims = (64,)
    c.batch_size = 64
    c.flow_steps = 2
  return c
