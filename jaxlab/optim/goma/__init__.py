"""GOMA (anchored optimistic VI solvers, a reconstruction) and nine baseline VI methods.

``from jaxlab.optim import goma``: ``goma.run(method, operator, z0, num_iters)`` (all methods, from
:mod:`jaxlab.optim.goma.vi`); ``goma.get_config()`` / ``goma.validate_config`` (the comparison's
defaults); submodules ``problems`` (monotone test problems) and ``compare`` (the comparison of
``python -m experiments.goma``: ``compare.run_comparison``, ``compare.write_report``, and the
seeds-stacked summaries). See docs/goma.md.
"""

from jaxlab.optim.goma import compare, problems
from jaxlab.optim.goma.config import get_config, validate_config
from jaxlab.optim.goma.vi import (
  LIPSCHITZ_SAFETY,
  METHODS,
  POWER_ITERS,
  Trace,
  default_hparams,
  estimate_lipschitz,
  fit_slope,
  run,
)

__all__ = [
  "compare",
  "get_config",
  "problems",
  "validate_config",
  "LIPSCHITZ_SAFETY",
  "METHODS",
  "POWER_ITERS",
  "Trace",
  "default_hparams",
  "estimate_lipschitz",
  "fit_slope",
  "run",
]
