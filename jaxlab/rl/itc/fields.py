"""``from_config`` for ITC's dataclasses: no defaults of their own (see ``itc.get_config()``)."""

from __future__ import annotations

import dataclasses
from typing import Any


def from_config(cls, config, **overrides) -> Any:
  """``cls`` from the fields of ``config`` it has (lists become tuples), then ``overrides``."""
  names = {f.name for f in dataclasses.fields(cls)}
  kw = {k: config[k] for k in config.keys() if k in names and k not in overrides}
  kw = {k: tuple(v) if isinstance(v, list) else v for k, v in kw.items()}
  return cls(**kw, **overrides)
