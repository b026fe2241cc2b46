"""QRIM reconstruction: quantum minimum finding for robust RL's inner minimum, simulated.

``from jaxlab.rl import qrim`` gives the search (:mod:`jaxlab.rl.qrim.search`); ``robust`` holds
the robust backup and robust PPO on a parameter grid. See docs/qrim.md.
"""

from jaxlab.rl.qrim.search import *  # noqa: F403
