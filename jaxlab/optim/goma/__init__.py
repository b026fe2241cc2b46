"""GOMA (anchored optimistic VI solvers, a reconstruction) and nine baseline VI methods.

``from jaxlab.optim import goma``: ``goma.run(method, operator, z0, num_iters)`` (all methods, from
:mod:`jaxlab.optim.goma.vi`); submodules ``problems`` (monotone test problems) and ``compare``
(seeds-stacked summaries). See docs/goma.md.
"""

from jaxlab.optim.goma.vi import *  # noqa: F403
