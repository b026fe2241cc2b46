"""The one train-state of jaxlab: a network held with its parameters, optimizer and target copy.

Built on ``flax.training.train_state.TrainState`` (``step``, ``apply_fn``, ``params``, ``tx``,
``opt_state``), in the spirit of OGBench's ``TrainState``: the module travels with its parameters,
so code calls ``state(x)`` instead of rebuilding networks, and every optimizer step in jaxlab is
:meth:`TrainState.apply_gradients` (optionally gated) followed, where an algorithm keeps one, by
:meth:`TrainState.update_target` (Polyak/EMA average)::

    actor = TrainState.create(Actor(...), params, optax.adam(3e-4), target=True)
    (loss, info), grads = jax.value_and_grad(loss_fn, has_aux=True)(actor.params, batch)
    actor = actor.apply_gradients(grads=grads).update_target(tau=0.005)
    actions = actor(obs)                       # online parameters
    actions = actor(obs, params=actor.target_params)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import linen as nn
from flax import struct
from flax.training import train_state

PyTree = Any


def _select(flag, new: PyTree, old: PyTree) -> PyTree:
  return jax.tree.map(lambda a, b: jnp.where(flag, a, b), new, old)


class TrainState(train_state.TrainState):
  """flax's TrainState plus an optional target/EMA copy and a module-bound ``__call__``.

  ``target_params`` is ``None`` unless created with ``target=True``. ``model_def`` is the linen
  module (static), so the state is callable: ``state(*args, params=None, method=None, **kwargs)``.
  """

  target_params: PyTree = None
  model_def: nn.Module | None = struct.field(pytree_node=False, default=None)

  @classmethod
  def create(
    cls,
    model_def: nn.Module | Callable,
    params: PyTree,
    tx: optax.GradientTransformation,
    target: bool = False,
    **kwargs,
  ) -> TrainState:
    """``model_def`` is a linen module (its ``apply`` is used) or a plain ``apply_fn``."""
    is_module = isinstance(model_def, nn.Module)
    apply_fn = model_def.apply if is_module else model_def
    return super().create(
      apply_fn=apply_fn,
      params=params,
      tx=tx,
      target_params=jax.tree.map(jnp.copy, params) if target else None,
      model_def=model_def if is_module else None,
      **kwargs,
    )

  def __call__(self, *args, params: PyTree = None, method: str | Callable | None = None, **kwargs):
    variables = {"params": self.params if params is None else params}
    if method is None:  # plain apply functions need not accept ``method``
      return self.apply_fn(variables, *args, **kwargs)
    if isinstance(method, str):
      method = getattr(self.model_def, method)
    return self.apply_fn(variables, *args, method=method, **kwargs)

  def apply_gradients(self, *, grads: PyTree, enabled: Any = True, **kwargs) -> TrainState:
    """One optimizer step. ``enabled`` may be a traced bool: when false the state is unchanged
    (params, optimizer state and step), e.g. for delayed actor updates inside ``lax.scan``."""
    new = super().apply_gradients(grads=grads, **kwargs)
    if enabled is True:
      return new
    return new.replace(
      params=_select(enabled, new.params, self.params),
      opt_state=_select(enabled, new.opt_state, self.opt_state),
      step=jnp.where(enabled, new.step, self.step),
    )

  def update_target(self, tau: float, enabled: Any = True) -> TrainState:
    """``target <- tau * params + (1 - tau) * target`` (Polyak averaging; ``tau=1`` copies)."""
    if self.target_params is None:
      raise ValueError("this TrainState has no target copy; create it with target=True")
    new = jax.tree.map(lambda p, t: tau * p + (1 - tau) * t, self.params, self.target_params)
    if enabled is not True:
      new = _select(enabled, new, self.target_params)
    return self.replace(target_params=new)

  def apply_loss(self, loss_fn: Callable, *args, **kwargs) -> tuple[TrainState, Any]:
    """``loss_fn(params, *args) -> (loss, aux)``; one gradient step on it. Returns (state, aux)."""
    (_, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(self.params, *args)
    return self.apply_gradients(grads=grads, **kwargs), aux
