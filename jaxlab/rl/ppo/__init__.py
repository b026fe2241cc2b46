"""PPO (arXiv 1707.06347): the online RL core of UHM's siblings (DiCode, ITC, R4, QRIM).

``from jaxlab.rl import ppo`` gives the algorithm (:mod:`jaxlab.rl.ppo.agent`: ``PPOConfig``,
``init``, ``make_update``, ``rollout``, ``learn``), its defaults (:mod:`jaxlab.rl.ppo.config`:
``get_config``, ``gymnax_config``, ``validate_config``, ``num_updates``) and the command-line run
(:mod:`jaxlab.rl.ppo.runner`: ``train_run``, ``make_env``, ``make_policy``, ``loop_options``);
submodules: ``loss``, ``policies`` (MLP, GRU, GTrXL), ``rollouts`` (the one policy-rollout step,
shared with R4 and DiCode), ``evaluation`` (held-out episodes, Crafter score). See docs/ppo.md.
"""

from jaxlab.rl.ppo.agent import (
  PPOConfig,
  PPOState,
  crafter_score,
  episode_stats,
  init,
  init_seeds,
  is_recurrent,
  learn,
  make_optimizer,
  make_update,
  rollout,
  scan,
  state_sharding,
  validate,
)
from jaxlab.rl.ppo.config import (
  check_memory,
  estimate_bytes,
  get_config,
  gymnax_config,
  num_updates,
  validate_config,
)
from jaxlab.rl.ppo.runner import (
  RunOutput,
  check,
  check_env,
  check_fits,
  is_craftax,
  loop_options,
  make_env,
  make_policy,
  schedule,
  throughput,
  train_run,
  write_report,
)

__all__ = [
  "PPOConfig",
  "PPOState",
  "RunOutput",
  "check",
  "check_env",
  "check_fits",
  "check_memory",
  "crafter_score",
  "episode_stats",
  "estimate_bytes",
  "get_config",
  "gymnax_config",
  "init",
  "init_seeds",
  "is_craftax",
  "is_recurrent",
  "learn",
  "loop_options",
  "make_env",
  "make_optimizer",
  "make_policy",
  "make_update",
  "num_updates",
  "rollout",
  "scan",
  "schedule",
  "state_sharding",
  "throughput",
  "train_run",
  "validate",
  "validate_config",
  "write_report",
]
