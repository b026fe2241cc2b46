"""The registered studies of jaxlab's methods: each a claim, arms, seeds, a budget, declared tests.

    from jaxlab import studies
    studies.names()                       # ['dicode/curricula_123k', ..., 'uhm/size']
    study = studies.get("r4/cartpole")    # a jaxlab.studies.spec.Study
    studies.runner.run(study)             # resumable; then table.md / table.csv from raw files

``python -m experiments.study <method>/<name>`` is the program. A study lives here as data
(`spec.Study`); its cell calls the method's library functions. Results:
``docs/results/<method>/<study>/`` (raw per-seed files, table.md, table.csv).
"""

from __future__ import annotations

from jaxlab.core.errors import ConfigError
from jaxlab.studies import dasbs, decentralized, dicode, goma, itc, lm, qrim, r4, runner, spec, uhm
from jaxlab.studies.spec import Study

__all__ = ["Study", "get", "names", "runner", "spec"]

_METHODS = (goma, decentralized, dasbs, lm, r4, qrim, itc, dicode, uhm)
_REGISTRY = {s.name: s for m in _METHODS for s in m.STUDIES}


def names() -> list[str]:
  """Every registered study, sorted."""
  return sorted(_REGISTRY)


def get(name: str) -> Study:
  """The study ``name`` (``<method>/<study>``); ConfigError naming ``study`` if unknown."""
  if name not in _REGISTRY:
    raise ConfigError("study", f"unknown study {name!r}; allowed: {', '.join(names())}")
  return _REGISTRY[name]
