"""One validation path for jaxlab: a typed error that carries the field it is about.

Libraries raise :class:`ConfigError` naming the field (``"config.lr"``, ``"steps"``,
``"operator"``); ``jaxlab.core.experiment.run`` turns it into one line
``error: --<field>: <message>`` and exit 2, so no experiment ever parses a field name out of message
text. In a notebook it is a plain ``ValueError``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np


class ConfigError(ValueError):
  """A bad flag, config field or argument. ``field`` names it; ``message`` says what is allowed."""

  def __init__(self, field: str, message: str):
    self.field = field.lstrip("-")
    self.message = message
    super().__init__(f"{self.field}: {message}")


def require(ok: bool, field: str, message: str) -> None:
  """Raises ``ConfigError(field, message)`` unless ``ok``."""
  if not ok:
    raise ConfigError(field, message)


def check_choice(field: str, value: Any, allowed: Iterable[Any]) -> Any:
  allowed = list(allowed)
  require(value in allowed, field, f"got {value!r}; allowed: {', '.join(map(str, allowed))}")
  return value


def check_finite_array(field: str, x: Any) -> None:
  """Data and arrays are bad input when they hold NaN or inf."""
  a = np.asarray(x)
  if np.issubdtype(a.dtype, np.inexact) and not np.all(np.isfinite(a)):
    bad = int(np.size(a) - np.count_nonzero(np.isfinite(a)))
    raise ConfigError(field, f"holds {bad} non-finite value(s) (NaN or inf) of {a.size}")


def _leaves(config, prefix: str):
  """``(dotted_name, value)`` for every leaf of a (nested) ConfigDict or mapping."""
  items = config.items() if hasattr(config, "items") else []
  for k, v in items:
    name = f"{prefix}.{k}" if prefix else str(k)
    if hasattr(v, "items"):
      yield from _leaves(v, name)
    else:
      yield name, v


def check_finite_fields(config, prefix: str = "config") -> None:
  """Every float field of ``config`` must be finite (``--config.lr=nan`` is bad input)."""
  for name, v in _leaves(config, prefix):
    vals = v if isinstance(v, (list, tuple)) else [v]
    for x in vals:
      if isinstance(x, float) and not math.isfinite(x):
        raise ConfigError(name, f"must be a finite number, got {x}")


_CHECKS: dict[str, tuple[Callable[[Any], bool], str]] = {
  "positive": (lambda v: v > 0, "must be > 0"),
  "nonneg": (lambda v: v >= 0, "must be >= 0"),
  "prob": (lambda v: 0 <= v <= 1, "must be in [0, 1]"),
  "open_prob": (lambda v: 0 < v < 1, "must be in (0, 1)"),
}


def check_config(config, checks: Mapping[str, Any], prefix: str = "config") -> None:
  """Validates fields of ``config`` and the finiteness of every float field.

  A check is a list of allowed values, one of ``'positive' 'nonneg' 'prob' 'open_prob'``, or a
  callable returning an error string (or None). Raises :class:`ConfigError` naming the field.
  """
  check_finite_fields(config, prefix)
  for field, check in checks.items():
    value = config
    for part in field.split("."):
      value = value[part]
    name = f"{prefix}.{field}" if prefix else field
    if isinstance(check, (list, tuple, set)):
      check_choice(name, value, check)
    elif isinstance(check, str):
      ok, msg = _CHECKS[check]
      require(ok(value), name, f"{msg}, got {value}")
    elif callable(check):
      msg = check(value)
      if msg:
        raise ConfigError(name, msg)
