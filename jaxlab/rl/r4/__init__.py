"""R4 (ranked return regression, arXiv 2601.09236): reward learning from trajectory ratings.

``from jaxlab.rl import r4`` gives the reward model and losses (:mod:`jaxlab.rl.r4.reward`) and the
defaults (:mod:`jaxlab.rl.r4.config`: ``get_config``, ``validate_config``, ``ppo_updates``);
submodules: ``softrank`` (permutahedron soft rank), ``data`` (rollouts, simulated raters, ratings
files), ``protocol`` (offline and online protocols with PPO: ``protocol.run``). See docs/r4.md.
"""

from jaxlab.rl.r4.config import (
  BT_PAIRS,
  PROTOCOLS,
  bt_pairs,
  check_memory,
  get_config,
  ppo_config,
  ppo_updates,
  reward_config,
  validate_config,
)
from jaxlab.rl.r4.reward import (
  METHODS,
  RewardConfig,
  RewardMLP,
  alignment,
  bt_loss,
  create,
  features,
  fit,
  make_dataset,
  make_update,
  member_apply,
  ood_term,
  predict_returns,
  rbrl_loss,
  returns,
  reward,
  rmse_loss,
  validate,
)

__all__ = [
  "BT_PAIRS",
  "bt_pairs",
  "METHODS",
  "PROTOCOLS",
  "RewardConfig",
  "RewardMLP",
  "alignment",
  "bt_loss",
  "check_memory",
  "create",
  "features",
  "fit",
  "get_config",
  "make_dataset",
  "make_update",
  "member_apply",
  "ood_term",
  "ppo_config",
  "ppo_updates",
  "predict_returns",
  "rbrl_loss",
  "returns",
  "reward",
  "reward_config",
  "rmse_loss",
  "validate",
  "validate_config",
]
