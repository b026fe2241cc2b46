"""GOMA (anchored optimistic VI solvers, a reconstruction) and nine baseline VI methods.

``from jaxlab.optim import goma``: ``goma.run(method, operator, z0, num_iters)`` (all methods, from
:mod:`jaxlab.optim.goma.vi`); ``goma.get_config()`` / ``goma.validate_config`` (the comparison's
defaults); submodules ``problems`` (monotone test problems) and ``compare`` (the comparison of
``python -m experiments.goma``: ``compare.run_comparison``, ``compare.write_report``, and the
seeds-stacked summaries). See docs/goma.md.
"""

from jaxlab.optim.goma import compare as compare
from jaxlab.optim.goma import problems as problems
from jaxlab.optim.goma.config import get_config as get_config
from jaxlab.optim.goma.config import validate_config as validate_config
from jaxlab.optim.goma.vi import *  # noqa: F403
