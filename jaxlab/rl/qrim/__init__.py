"""QRIM reconstruction: quantum minimum finding for robust RL's inner minimum, simulated.

``from jaxlab.rl import qrim`` gives the search (:mod:`jaxlab.rl.qrim.search`) and the defaults
(:mod:`jaxlab.rl.qrim.config`: ``get_config``, ``validate_config``, ``ppo_updates``); ``robust``
holds the parameter-grid environments and robust PPO (``robust.robust_ppo``); ``protocol`` the
parts of ``python -m experiments.qrim`` (``query_scaling``, ``tabular``, ``run``). See docs/qrim.md.
"""

from jaxlab.rl.qrim.config import (
  check_memory,
  get_config,
  ppo_config,
  ppo_updates,
  search_config,
  validate_config,
)
from jaxlab.rl.qrim.search import (
  LAMBDA,
  MAX_STATEVECTOR,
  MODES,
  STOPS,
  SearchConfig,
  dh_budget,
  exhaustive,
  fit_slope,
  grover_amplitudes,
  make_minimizer,
  measure_analytic,
  measure_statevector,
  random_robust_mdp,
  register_size,
  robust_value_iteration,
  success_probability,
  validate,
)

__all__ = [
  "LAMBDA",
  "MAX_STATEVECTOR",
  "MODES",
  "STOPS",
  "SearchConfig",
  "check_memory",
  "dh_budget",
  "exhaustive",
  "fit_slope",
  "get_config",
  "grover_amplitudes",
  "make_minimizer",
  "measure_analytic",
  "measure_statevector",
  "ppo_config",
  "ppo_updates",
  "random_robust_mdp",
  "register_size",
  "robust_value_iteration",
  "search_config",
  "success_probability",
  "validate",
  "validate_config",
]
