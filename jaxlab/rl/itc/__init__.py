"""ITC (Identifiable Token Correspondence, arXiv 2605.16457) on a transformer world model agent.

Modules: `config` (``get_config()``: the defaults, ``validate_config``), `tokenizer`
(nearest-neighbour patch codebook), `world_model` (`jaxlab.lm`'s transformer blocks,
block-causal, over frame tokens and actions), `decode` (sample / argmax / ITC decoding),
`imagine` (imagined rollouts), `buffer` (replay), `dyna` (the Dyna loop on the core runtime),
`agent` (environment, policy and initial state from a config; the real vs imagined frames PNG),
`decoder_eval` and `objects` (decoders on a fixed world model: the studies `itc/decoders` and
`itc/objects`).
See docs/itc.md.
"""

from jaxlab.rl.itc.agent import create, make_policy, recorded, rollout_picture
from jaxlab.rl.itc.config import (
  FRAME,
  NUM_ACTIONS,
  dyna_config,
  get_config,
  iterations,
  validate_config,
)
from jaxlab.rl.itc.decode import METHODS

__all__ = [
  "FRAME",
  "METHODS",
  "NUM_ACTIONS",
  "create",
  "dyna_config",
  "get_config",
  "iterations",
  "make_policy",
  "recorded",
  "rollout_picture",
  "validate_config",
]
