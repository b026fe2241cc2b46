"""First-order solvers for monotone variational inequalities (find z with F(z) = 0).

One entry point::

    trace = run(method, operator, z0, num_iters, *, key=None, exact=None, L=None, **hparams)

* ``operator(z) -> F(z)`` (deterministic) or, when ``key`` is given, ``operator(z, key)`` an
  unbiased stochastic oracle. ``z0`` is a float array or a pytree of float arrays (dict, tuple, a
  list of arrays); ``operator`` maps that structure to itself (internally everything is raveled to
  one vector). A Python list of numbers, an int or an integer array is rejected: pass
  ``jnp.asarray(z0, jnp.float32)``.
* ``L``: the Lipschitz constant the default step sizes are scaled by (``eta = c / L``). Given, it
  is used as is; omitted, it is ``operator.lipschitz`` (``exact.lipschitz`` for a stochastic
  oracle) when the operator has one, else it is **estimated** by power iteration on J^T J, J the
  Jacobian of the exact operator at z0, times a safety factor 1.1 (see
  :func:`estimate_lipschitz`). ``Trace.lipschitz`` and ``Trace.lipschitz_source`` say which.
  For a nonlinear F the estimate is local to z0: pass ``L`` when a global bound is known.
* ``Trace.residual_sq[k] = ||F(z_k)||^2`` for k = 0..num_iters, measured with the *exact* operator
  at the update sequence z_k (never at the extrapolated points y_k). The record is not counted as
  oracle calls. With a stochastic oracle the exact F comes from ``exact=`` or ``operator.exact``.
* ``Trace.oracle_calls[k]``: oracle calls spent to produce z_k (cumulative, ``[0] == 0``). They are
  counted by instrumenting the oracle while the update is traced, so they measure the code, not a
  table.

Bad arguments raise :class:`jaxlab.core.errors.ConfigError` naming the argument (``method``,
``operator``, ``z0``, ``num_iters``, ``key``, ``exact``, ``L`` or the hparam).

Everything is one ``lax.scan`` inside ``jax.jit``; ``run`` is vmappable over keys, starting points,
problem instances (operators that are pytrees, see ``jaxlab.optim.goma.problems``) and hparams.
It keeps its own scan rather than going through ``jaxlab.core.runtime.train`` because it must stay
vmappable (the runtime's loop is host-driven).

Methods (k = 0, 1, ... is the iteration, a = z0 the anchor, g = one oracle call):

====================  ============================================================  ===========
name                  update                                                         calls/iter
====================  ============================================================  ===========
``gda``               z+ = z - eta_k F(z)                                            1
``eg``                y = z - eta_k F(z);  z+ = z - eta_k F(y)                       2
``popov``             y = z - eta_k F(y_prev);  z+ = z - eta_k F(y)   (optimistic GD) 1 (+1 at k=0)
``dseg``              EG/OG form with gamma_t = gamma/(t+b)^r_gamma (explore),       2 / 1
                      eta_t = eta/(t+b)^r_eta (update)   (Hsieh et al. 2020,
                      arXiv 2003.10162)
``eag_c``             y = z + b_k(a-z) - alpha F(z); z+ = z + b_k(a-z) - alpha F(y)  2
                      b_k = 1/(k+2), alpha = 1/(8L)  (Yoon & Ryu 2021, arXiv 2102.07922)
``eag_v``             as eag_c with the EAG-V alpha_k recurrence, alpha_0 = 0.618/L  2
``feg``               y = z + b_k(a-z) - (1-b_k) alpha F(z); z+ = z + b_k(a-z)       2
                      - alpha F(y); b_k = 1/(k+1), alpha = 1/L  (Lee & Kim 2021,
                      arXiv 2106.02326)
``apv``               anchored Popov of Tran-Dinh & Luo (2021, arXiv 2110.08150),    1 (+1 at k=0)
                      see ``_apv_step``
``goma``              GOMA reconstruction (arXiv 2606.21528; docs/goma.md), see      1 (+1 at k=0)
                      ``_goma_step``: anchored Popov with a constant 0.4/L step
``goma_stochastic``   the same update with two polynomial step-size schedules        1 (+1 at k=0)
====================  ============================================================  ===========
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.flatten_util import ravel_pytree
from jax.tree_util import Partial

from jaxlab.core.errors import ConfigError, check_choice, require

METHODS = ("gda", "eg", "popov", "dseg", "eag_c", "eag_v", "feg", "apv", "goma", "goma_stochastic")
LIPSCHITZ_SAFETY = 1.1  # power iteration approaches ||J||_2 from below
POWER_ITERS = 100


class Trace(struct.PyTreeNode):
  """Result of ``run``: last iterate (pytree like z0), ||F(z_k)||^2, cumulative oracle calls, and
  the Lipschitz constant the step sizes used with where it came from (``"given"``,
  ``"operator.lipschitz"``, ``"exact.lipschitz"`` or ``"estimated"``)."""

  z: Any
  residual_sq: jax.Array  # [num_iters + 1]
  oracle_calls: jax.Array  # [num_iters + 1] int32
  lipschitz: jax.Array  # scalar
  lipschitz_source: str = struct.field(pytree_node=False, default="given")


# ----------------------------------------------------------------------------------------------
# Hyper-parameters. A default given as ``("L", c)`` means c / L, so every default is scale-free.
# Strings are static (they pick code paths); numbers are traced (so hparams can be vmapped).
# ----------------------------------------------------------------------------------------------

_INV_L = "L"

_HPARAMS: dict[str, dict[str, Any]] = {
  "gda": {"eta": (_INV_L, 0.1), "r": 0.0},
  "eg": {"eta": (_INV_L, 0.5), "r": 0.0},
  "popov": {"eta": (_INV_L, 0.5), "r": 0.0},
  # DSEG code defaults (gamma = eta = 0.4 on its L = 2 instance), offset b = 1.
  "dseg": {
    "form": "eg",
    "gamma": (_INV_L, 0.8),
    "eta": (_INV_L, 0.8),
    "r_gamma": 1.0 / 3.0,
    "r_eta": 2.0 / 3.0,
    "b": 1.0,
  },
  "eag_c": {"alpha": (_INV_L, 0.125)},
  "eag_v": {"alpha": (_INV_L, 0.618)},
  "feg": {"alpha": (_INV_L, 1.0)},
  "apv": {"eta": (_INV_L, 1.0 / (2.0 * math.sqrt(3.0))), "m": 4.0},
  # GOMA (deterministic) default: constant update step, two time scales gamma_k = rho (1-b_k) eta.
  "goma": {
    "anchor": 1.0,
    "beta_offset": 2.0,
    "eta_schedule": "constant",
    "eta": (_INV_L, 0.4),
    "r_eta": 0.0,
    "gamma_schedule": "ratio",
    "gamma_ratio": 1.0,
    "gamma": (_INV_L, 0.4),
    "r_gamma": 0.0,
    "m": 4.0,
  },
  # Simplified single-call stochastic GOMA: explore slowly decaying, update fast decaying.
  "goma_stochastic": {
    "anchor": 1.0,
    "beta_offset": 2.0,
    "eta_schedule": "power",
    "eta": (_INV_L, 0.6),
    "r_eta": 2.0 / 3.0,
    "gamma_schedule": "power",
    "gamma_ratio": 1.0,
    "gamma": (_INV_L, 0.6),
    "r_gamma": 1.0 / 3.0,
    "m": 4.0,
  },
}
_CHOICES = {
  "form": ("eg", "og"),
  "eta_schedule": ("constant", "power", "apv"),
  "gamma_schedule": ("ratio", "power"),
}


def default_hparams(method: str, L: float = 1.0) -> dict[str, Any]:
  """The hparams ``run`` uses for ``method`` when none are given (step sizes for this L)."""
  _check_method(method)
  out = {}
  for name, v in _HPARAMS[method].items():
    out[name] = v[1] / L if isinstance(v, tuple) else v
  return out


def _check_method(method):
  require(
    isinstance(method, str) and method in _HPARAMS,
    "method",
    f"unknown VI method {method!r}; allowed: {', '.join(METHODS)}",
  )


# ----------------------------------------------------------------------------------------------
# Oracle plumbing.
# ----------------------------------------------------------------------------------------------


class _Counted:
  """Wraps the flat oracle; counts calls while the update is traced (straight-line code, so the
  trace-time count is the per-iteration count) and gives each call its own PRNG key."""

  def __init__(self, fn, key):
    self.fn, self.key, self.calls = fn, key, 0

  def __call__(self, v):
    sub = None if self.key is None else jax.random.fold_in(self.key, self.calls)
    self.calls += 1
    return self.fn(v, sub)


def _as_pytree_callable(f):
  """Plain functions become static (hashed by identity); pytree callables stay dynamic so that a
  new problem instance does not recompile and instances can be vmapped."""
  if f is None or isinstance(f, Partial):
    return f
  if inspect.ismethod(f) and _is_array_tree(f.__self__):
    return Partial(f.__func__, f.__self__)
  if _is_array_tree(f):
    return f
  return Partial(f)


def _is_array_tree(x):
  leaves = jax.tree.leaves(x)
  if len(leaves) == 1 and leaves[0] is x:
    return False
  return all(isinstance(l, (jax.Array, np.ndarray, np.generic, float, int)) for l in leaves)


# ----------------------------------------------------------------------------------------------
# Methods. Each is (init, step): init(z0, F, hp) -> state; step(state, k, a, F, hp) -> state.
# ``state`` is a dict holding at least "z"; k is the iteration index as a float scalar.
# ----------------------------------------------------------------------------------------------


def _power(c, k, r, b=1.0):
  return c / (k + b) ** r


def _plain_init(z0, F, hp):
  return {"z": z0}


def _gda_step(s, k, a, F, hp):
  return {"z": s["z"] - _power(hp["eta"], k, hp["r"]) * F(s["z"])}


def _eg_step(s, k, a, F, hp):
  eta = _power(hp["eta"], k, hp["r"])
  z = s["z"]
  y = z - eta * F(z)
  return {"z": z - eta * F(y)}


def _popov_init(z0, F, hp):
  return {"z": z0, "g_prev": F(z0)}  # y_{-1} = z_0


def _popov_step(s, k, a, F, hp):
  eta = _power(hp["eta"], k, hp["r"])
  z = s["z"]
  y = z - eta * s["g_prev"]
  g = F(y)
  return {"z": z - eta * g, "g_prev": g}


def _dseg_init(z0, F, hp):
  return {"z": z0, "g_prev": jnp.zeros_like(z0)} if hp["form"] == "og" else {"z": z0}


def _dseg_step(s, k, a, F, hp):
  gamma = _power(hp["gamma"], k, hp["r_gamma"], hp["b"])
  eta = _power(hp["eta"], k, hp["r_eta"], hp["b"])
  z = s["z"]
  if hp["form"] == "eg":
    y = z - gamma * F(z)
    return {"z": z - eta * F(y)}
  # OG form of the DSEG code: X+ = X - eta g_t - gamma (g_t - g_{t-1}); no g_{-1} at t = 0.
  g = F(z)
  g_prev = jnp.where(k == 0, g, s["g_prev"])
  return {"z": z - eta * g - gamma * (g - g_prev), "g_prev": g}


def _eag_step(s, k, a, F, hp, alpha):
  beta = 1.0 / (k + 2.0)
  z = s["z"]
  base = z + beta * (a - z)
  y = base - alpha * F(z)
  return base - alpha * F(y)


def _eag_c_step(s, k, a, F, hp):
  return {"z": _eag_step(s, k, a, F, hp, hp["alpha"])}


def _eag_v_init(z0, F, hp):
  return {"z": z0, "alpha": hp["alpha"]}


def _eag_v_alpha_next(alpha, k, L):
  """Yoon & Ryu's EAG-V step recurrence (arXiv 2102.07922), in an algebraically equal form:
  alpha_{k+1} = alpha_k (1 - q / ((k+1)(k+3)(1-q))), q = (alpha_k L)^2."""
  q = (alpha * L) ** 2
  return alpha * (1.0 - q / ((k + 1.0) * (k + 3.0) * (1.0 - q)))


def _eag_v_step(s, k, a, F, hp):
  alpha = s["alpha"]
  return {"z": _eag_step(s, k, a, F, hp, alpha), "alpha": _eag_v_alpha_next(alpha, k, hp["L"])}


def _feg_step(s, k, a, F, hp):
  beta = 1.0 / (k + 1.0)
  z = s["z"]
  base = z + beta * (a - z)
  y = base - (1.0 - beta) * hp["alpha"] * F(z)
  return {"z": base - hp["alpha"] * F(y)}


def _apv_init(z0, F, hp):
  return {"z": z0, "g_prev": F(z0), "eta": hp["eta"]}


def _apv_eta_next(eta, beta, beta_next, m, L):
  mm = m * L**2
  return (
    (1.0 - beta**2 - mm * eta**2) * beta_next * eta / ((1.0 - mm * eta**2) * (1.0 - beta) * beta)
  )


def _apv_step(s, k, a, F, hp):
  """Tran-Dinh & Luo's anchored Popov (APV), anchored at z_0:
  y_k = z_k + b_k (a - z_k) - (1 - b_k) eta_k F(y_{k-1}),   y_{-1} = z_0
  z_{k+1} = z_k + b_k (a - z_k) - eta_k F(y_k),             b_k = 1/(k+2),
  eta_{k+1} = (1 - b_k^2 - M eta_k^2) b_{k+1} eta_k / ((1 - M eta_k^2)(1 - b_k) b_k), M = 4 L^2."""
  beta, beta_next = 1.0 / (k + 2.0), 1.0 / (k + 3.0)
  eta, z = s["eta"], s["z"]
  base = z + beta * (a - z)
  y = base - (1.0 - beta) * eta * s["g_prev"]
  g = F(y)
  return {
    "z": base - eta * g,
    "g_prev": g,
    "eta": _apv_eta_next(eta, beta, beta_next, hp["m"], hp["L"]),
  }


def _goma_init(z0, F, hp):
  return {"z": z0, "g_prev": F(z0), "eta": hp["eta"]}


def _goma_step(s, k, a, F, hp):
  """GOMA, **a reconstruction** (the paper's exact update is not public; see ``goma`` docs).

  y_k     = z_k + b_k (a - z_k) - gamma_k g(y_{k-1})     explore: reuses the last oracle value
  z_{k+1} = z_k + b_k (a - z_k) - eta_k   g(y_k)         update: the one new oracle call
  b_k = anchor/(k + beta_offset),  y_{-1} = z_0; ``anchor=0`` drops the anchor and keeps every
  step schedule (the control that isolates anchoring).
  eta_k:   "constant" eta | "power" eta/(k+1)^r_eta | "apv" Tran-Dinh's recurrence from eta_0 = eta
  gamma_k: "ratio" gamma_ratio (1 - b_k) eta_k | "power" gamma/(k+1)^r_gamma
  """
  beta = hp["anchor"] / (k + hp["beta_offset"])
  sched = hp["eta_schedule"]
  if sched == "constant":
    eta = hp["eta"]
  elif sched == "power":
    eta = _power(hp["eta"], k, hp["r_eta"])
  else:
    eta = s["eta"]
  if hp["gamma_schedule"] == "ratio":
    gamma = hp["gamma_ratio"] * (1.0 - beta) * eta
  else:
    gamma = _power(hp["gamma"], k, hp["r_gamma"])
  z = s["z"]
  base = z + beta * (a - z)
  y = base - gamma * s["g_prev"]
  g = F(y)
  out = {"z": base - eta * g, "g_prev": g, "eta": s["eta"]}
  if sched == "apv":
    beta_next = hp["anchor"] / (k + 1.0 + hp["beta_offset"])
    out["eta"] = _apv_eta_next(eta, beta, beta_next, hp["m"], hp["L"])
  return out


_IMPL: dict[str, tuple[Callable, Callable]] = {
  "gda": (_plain_init, _gda_step),
  "eg": (_plain_init, _eg_step),
  "popov": (_popov_init, _popov_step),
  "dseg": (_dseg_init, _dseg_step),
  "eag_c": (_plain_init, _eag_c_step),
  "eag_v": (_eag_v_init, _eag_v_step),
  "feg": (_plain_init, _feg_step),
  "apv": (_apv_init, _apv_step),
  "goma": (_goma_init, _goma_step),
  "goma_stochastic": (_goma_init, _goma_step),
}


# ----------------------------------------------------------------------------------------------
# Driver.
# ----------------------------------------------------------------------------------------------


def run(
  method: str,
  operator: Callable,
  z0: Any,
  num_iters: int,
  *,
  key: jax.Array | None = None,
  exact: Callable | None = None,
  L: Any = None,
  **hparams,
) -> Trace:
  """Runs ``method`` for ``num_iters`` iterations from ``z0`` (also the anchor). See module doc.

  ``L=None`` takes ``operator.lipschitz`` (or ``exact.lipschitz``) when there is one and otherwise
  estimates it at z0 (:func:`estimate_lipschitz`); the returned ``Trace.lipschitz_source`` says
  which. Too small an L makes every default step too large and the iterates overflow to NaN.

  ``goma`` / ``goma_stochastic`` are **a reconstruction** of GOMA (arXiv 2606.21528; only its
  abstract is public, see docs/goma.md): the anchored two-time-scale single-call template

      y_k     = z_k + b_k (z_0 - z_k) - gamma_k g(y_{k-1}),      y_{-1} = z_0
      z_{k+1} = z_k + b_k (z_0 - z_k) - eta_k   g(y_k),          b_k = anchor/(k + beta_offset)

  with one new oracle value g(y_k) per iteration (``anchor``: 1 by default, 0 removes the anchor
  and leaves the step schedules as they are). Settings:
    * Tran-Dinh & Luo's APV exactly: ``beta_offset=2, eta_schedule="apv", eta=1/(2 sqrt(3) L),
      gamma_schedule="ratio", gamma_ratio=1`` (gamma_k = (1 - b_k) eta_k).
    * ``goma`` default: ``beta_offset=2, eta_schedule="constant", eta=0.4/L, gamma_schedule="ratio",
      gamma_ratio=1``, i.e. anchored Popov with a constant update step 0.4/L, larger than APV's
      limit 0.215/L (it diverges at 0.6/L on the bilinear test problem). Its lead over APV is
      that larger step, not a new mechanism.
    * ``goma_stochastic`` default (simplified single-call variant): ``eta_schedule="power",
      eta=0.6/L, r_eta=2/3, gamma_schedule="power", gamma=0.6/L, r_gamma=1/3`` (explore
      aggressively, update conservatively; one stochastic sample per iteration at y_k).
  Neither the schedules nor the constants are the paper's (not public).
  """
  exact = _check_args(method, operator, z0, num_iters, key, exact)
  static, dynamic, scaled = _split_hparams(method, hparams)
  lipschitz, source = _lipschitz(L, operator, exact if key is not None else None)
  return _run_jit(
    method,
    _as_pytree_callable(operator),
    z0,
    num_iters,
    key,
    _as_pytree_callable(exact),
    lipschitz,
    dynamic,
    tuple(sorted(scaled.items())),
    tuple(sorted(static.items())),
    source,
  )


def _check_args(method, operator, z0, num_iters, key, exact):
  """Raises ConfigError naming the bad argument; returns the exact operator for the record."""
  _check_method(method)
  require(callable(operator), "operator", f"must be callable F(z) -> F(z), got {_kind(operator)}")
  _check_z0(z0)
  ok = isinstance(num_iters, (int, np.integer)) and not isinstance(num_iters, bool)
  require(ok and num_iters >= 0, "num_iters", f"must be an int >= 0, got {num_iters!r}")
  if key is not None:
    require(
      isinstance(key, jax.Array),
      "key",
      f"must be a PRNG key such as jax.random.key(0), got {_kind(key)}",
    )
    exact = getattr(operator, "exact", None) if exact is None else exact
    require(
      exact is not None,
      "exact",
      "with key= the operator is a stochastic oracle operator(z, key); pass exact=F (or give "
      "the operator an .exact method) for the record",
    )
  if exact is not None:
    require(callable(exact), "exact", f"must be callable F(z) -> F(z), got {_kind(exact)}")
  return exact


def _kind(x) -> str:
  return f"{type(x).__name__} {x!r}" if isinstance(x, (int, float, str)) else type(x).__name__


def _check_z0(z0) -> None:
  """z0 must be float arrays: a list of numbers or an int would be raveled into nonsense."""
  leaves = jax.tree.leaves(z0)
  hint = "pass a float array such as jnp.asarray(z0, jnp.float32), or a dict/tuple of them"
  require(bool(leaves), "z0", f"has no arrays (got {_kind(z0)}); {hint}")
  for leaf in leaves:
    what = _kind(z0) if leaf is z0 else f"{_kind(z0)} holding a {type(leaf).__name__}"
    require(isinstance(leaf, (jax.Array, np.ndarray)), "z0", f"got {what}; {hint}")
    require(
      jnp.issubdtype(leaf.dtype, jnp.floating),
      "z0",
      f"has dtype {leaf.dtype}; the iterates need a real float dtype; {hint}",
    )


def _concrete(x) -> float | None:
  """``float(x)`` when x is a concrete scalar; None under a transformation (vmapped hparams)."""
  try:
    return float(x)
  except (TypeError, jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError):
    return None


def _split_hparams(method, hparams):
  """(static choices, explicit numbers, defaults scaled by 1/L as {name: c})."""
  allowed = _HPARAMS[method]
  for name, v in hparams.items():
    require(name in allowed, name, f"unknown hparam of {method}; allowed: L, {', '.join(allowed)}")
    if not isinstance(allowed[name], str) and _concrete(v) is not None:
      require(math.isfinite(_concrete(v)), name, f"must be a finite number, got {v}")
  static, dynamic, scaled = {}, {}, {}
  for name, default in allowed.items():
    v = hparams.get(name, default)
    if isinstance(default, str):
      static[name] = check_choice(name, v, _CHOICES[name])
    elif isinstance(v, tuple) and v[0] == _INV_L:
      scaled[name] = v[1]
    else:
      dynamic[name] = v
  return static, dynamic, scaled


def _lipschitz(L, operator, exact):
  """(L or None, where it comes from); None means: estimate it inside the jitted run."""
  if L is not None:
    value = _concrete(L)
    if value is not None:
      require(math.isfinite(value) and value > 0, "L", f"must be a finite number > 0, got {L}")
    return L, "given"
  if hasattr(operator, "lipschitz"):
    return operator.lipschitz, "operator.lipschitz"
  if exact is not None and hasattr(exact, "lipschitz"):
    return exact.lipschitz, "exact.lipschitz"
  return None, "estimated"


def estimate_lipschitz(operator: Callable, z0: Any, iters: int = POWER_ITERS) -> jax.Array:
  """``LIPSCHITZ_SAFETY * ||J_F(z0)||_2`` by ``iters`` power iterations on J^T J (jvp + vjp).

  Exact up to the factor for a linear F once the iteration has converged (it approaches the
  largest singular value from below); for a nonlinear F it is the local constant at z0, not a
  global bound. Jittable and vmappable.
  """
  flat, unravel = ravel_pytree(z0)
  return _power_iteration(lambda v: ravel_pytree(operator(unravel(v)))[0], flat, iters)


def _power_iteration(f, z, iters):
  _, jvp = jax.linearize(f, z)
  vjp = jax.linear_transpose(jvp, z)
  v = jax.random.normal(jax.random.key(0), z.shape, z.dtype)
  v = v / jnp.linalg.norm(v)

  def body(_, v):
    w = vjp(jvp(v))[0]
    return w / jnp.maximum(jnp.linalg.norm(w), jnp.finfo(z.dtype).tiny)

  v = jax.lax.fori_loop(0, iters, body, v)
  # A constant F has J = 0: floor L so that the steps stay finite (and z0 is then a solution).
  return jnp.maximum(LIPSCHITZ_SAFETY * jnp.linalg.norm(jvp(v)), jnp.finfo(z.dtype).eps)


def _flat_oracles(operator, exact, unravel, size, stochastic):
  """(oracle(v, key), record(v)) on raveled vectors; checks that F maps z0's size to itself."""

  def flat(fn, *args):
    out = ravel_pytree(fn(*args))[0]
    require(
      out.shape == (size,),
      "operator",
      f"returned {out.size} values for a z0 of {size}; F must map z0's structure to itself",
    )
    return out

  if not stochastic:
    record = lambda v: flat(operator, unravel(v))
    return (lambda v, _: record(v)), record
  return (lambda v, sub: flat(operator, unravel(v), sub)), (lambda v: flat(exact, unravel(v)))


@functools.partial(jax.jit, static_argnums=(0, 3, 8, 9, 10))
def _run_jit(method, operator, z0, num_iters, key, exact, L, dynamic, scaled, static, source):
  z0_flat, unravel = ravel_pytree(z0)
  dtype = z0_flat.dtype
  oracle, record = _flat_oracles(operator, exact, unravel, z0_flat.size, key is not None)
  L = _power_iteration(record, z0_flat, POWER_ITERS) if L is None else jnp.asarray(L, dtype)
  hp = {k: jnp.asarray(v, dtype) for k, v in dynamic.items()}
  hp.update({k: jnp.asarray(c, dtype) / L for k, c in scaled})
  hp.update(dict(static), L=L)

  def residual(v):
    r = record(v)
    return jnp.vdot(r, r).real

  init, step = _IMPL[method]
  k_init, k_steps = (None, None) if key is None else jax.random.split(key)
  init_oracle = _Counted(oracle, k_init)
  state = init(z0_flat, init_oracle, hp)
  counts = {}

  def body(s, k):
    sub = None if k_steps is None else jax.random.fold_in(k_steps, k)
    f = _Counted(oracle, sub)
    s = step(s, k.astype(dtype), z0_flat, f, hp)
    counts["per_iter"] = f.calls
    return s, residual(s["z"])

  state, res = jax.lax.scan(body, state, jnp.arange(num_iters))
  per_iter = counts.get("per_iter", 0)
  calls = init_oracle.calls + per_iter * jnp.arange(1, num_iters + 1, dtype=jnp.int32)
  calls = jnp.concatenate([jnp.zeros((1,), jnp.int32), calls.astype(jnp.int32)])
  res = jnp.concatenate([residual(z0_flat)[None], res])
  return Trace(
    z=unravel(state["z"]), residual_sq=res, oracle_calls=calls, lipschitz=L, lipschitz_source=source
  )


def fit_slope(iters, values, lo=1e2, hi=1e4, method="endpoints", window=0.1, num=50):
  """Log-log slope of ``values`` against ``iters`` over [lo, hi] (NumPy, host side; batched over
  leading axes of ``values``; ``values[..., i]`` belongs to iteration ``iters[i]``).

  ``method="endpoints"`` (default, used for every reported slope): the difference of the mean
  log-residual over the first and the last ``window`` decades of [lo, hi], divided by the same
  difference of log k. Averaging a window removes the rotation-induced wiggles of a single
  endpoint; fitting only the ends measures the rate between lo and hi the way a rate table does.
  ``method="lsq"``: least squares on ``num`` log-spaced points of [lo, hi]; it weighs the early
  transient as much as the asymptotic regime, so it reads flatter for slow-clock methods (EAG-C).
  """
  iters = np.asarray(iters, np.float64)
  values = np.asarray(values, np.float64)
  hi = min(hi, iters.max())
  require(0 < lo < hi, "lo", f"fit range: need 0 < lo < hi <= last iteration, got lo={lo}, hi={hi}")

  def at(pts):
    idx = np.searchsorted(iters, np.unique(np.round(pts)))
    idx = idx[idx < len(iters)]
    return np.log(iters[idx]), np.log(np.maximum(values[..., idx], 1e-300))

  if method == "endpoints":
    x0, y0 = at(np.geomspace(lo, lo * 10**window, 16))
    x1, y1 = at(np.geomspace(hi * 10**-window, hi, 16))
    return (y1.mean(-1) - y0.mean(-1)) / (x1.mean() - x0.mean())
  if method == "lsq":
    x, y = at(np.geomspace(lo, hi, num))
    x = x - x.mean()
    return ((y - y.mean(-1, keepdims=True)) * x).sum(-1) / (x * x).sum()
  raise ConfigError("method", f"got {method!r}; allowed: endpoints, lsq")
