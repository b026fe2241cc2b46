"""QRIM reconstruction: quantum minimum finding for robust RL's inner minimum, simulated.

``from jaxlab.rl import qrim`` gives the search (:mod:`jaxlab.rl.qrim.search`) and the defaults
(:mod:`jaxlab.rl.qrim.config`: ``get_config``, ``validate_config``, ``ppo_updates``); ``robust``
holds the parameter-grid environments and robust PPO (``robust.robust_ppo``); ``protocol`` the
parts of ``python -m experiments.qrim`` (``query_scaling``, ``tabular``, ``run``). See docs/qrim.md.
"""

from jaxlab.rl.qrim.config import (  # noqa: F401
  check_memory,
  get_config,
  ppo_config,
  ppo_updates,
  search_config,
  validate_config,
)
from jaxlab.rl.qrim.search import *  # noqa: F403
