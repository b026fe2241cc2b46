"""PPO (arXiv 1707.06347): the online RL core of UHM's siblings (DiCode, ITC, R4, QRIM).

``from jaxlab.rl import ppo`` gives the algorithm (:mod:`jaxlab.rl.ppo.agent`: ``PPOConfig``,
``init``, ``make_update``, ``rollout``, ``learn``); submodules: ``loss``, ``policies`` (MLP, GRU,
GTrXL), ``evaluation`` (held-out episodes, Crafter score). See docs/ppo.md.
"""

from jaxlab.rl.ppo.agent import *  # noqa: F403
from jaxlab.rl.ppo.config import get_config  # noqa: E402,F401
