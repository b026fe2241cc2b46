"""PPO (arXiv 1707.06347): the online RL core of UHM's siblings (DiCode, ITC, R4, QRIM).

``from jaxlab.rl import ppo`` gives the algorithm (:mod:`jaxlab.rl.ppo.agent`: ``PPOConfig``,
``init``, ``make_update``, ``rollout``, ``learn``), its defaults (:mod:`jaxlab.rl.ppo.config`:
``get_config``, ``gymnax_config``, ``validate_config``, ``num_updates``) and the command-line run
(:mod:`jaxlab.rl.ppo.runner`: ``train_run``, ``make_env``, ``make_policy``, ``loop_options``);
submodules: ``loss``, ``policies`` (MLP, GRU, GTrXL), ``rollouts`` (the one policy-rollout step,
shared with R4 and DiCode), ``evaluation`` (held-out episodes, Crafter score). See docs/ppo.md.
"""

from jaxlab.rl.ppo.agent import *  # noqa: F403
from jaxlab.rl.ppo.config import (  # noqa: F401
  check_memory,
  estimate_bytes,
  get_config,
  gymnax_config,
  num_updates,
  validate_config,
)
from jaxlab.rl.ppo.runner import (  # noqa: F401
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
