"""R4 (ranked return regression, arXiv 2601.09236): reward learning from trajectory ratings.

``from jaxlab.rl import r4`` gives the reward model and losses (:mod:`jaxlab.rl.r4.reward`);
submodules: ``softrank`` (permutahedron soft rank), ``data`` (rollouts, simulated raters, ratings
files), ``protocol`` (offline and online protocols with PPO). See docs/r4.md.
"""

from jaxlab.rl.r4.reward import *  # noqa: F403
