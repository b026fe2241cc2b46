"""The one TrainState: optimizer step, gated step, EMA target, module-bound call."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxlab.core.train_state import TrainState


@pytest.fixture(scope="module")
def dense():
  model = nn.Dense(3)
  params = model.init(jax.random.key(0), jnp.ones((1, 2)))["params"]
  return model, params


def test_call_uses_online_or_given_params(dense):
  model, params = dense
  st = TrainState.create(model, params, optax.sgd(0.1), target=True)
  x = jnp.ones((4, 2))
  np.testing.assert_allclose(st(x), model.apply({"params": params}, x))
  zeros = jax.tree.map(jnp.zeros_like, params)
  np.testing.assert_allclose(st(x, params=zeros), 0.0)


def test_apply_loss_is_one_sgd_step_and_gating_freezes_everything(dense):
  model, params = dense
  st = TrainState.create(model, params, optax.sgd(0.1))
  x = jnp.arange(8.0).reshape(4, 2)

  def loss_fn(p):
    loss = jnp.mean(model.apply({"params": p}, x) ** 2)
    return loss, {"loss": loss}

  new, aux = st.apply_loss(loss_fn)
  g = jax.grad(lambda p: loss_fn(p)[0])(params)
  expect = jax.tree.map(lambda p, gi: p - 0.1 * gi, params, g)  # NumPy-level SGD transcription
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6), new.params, expect)
  assert int(new.step) == 1 and float(aux["loss"]) > 0
  frozen, _ = jax.jit(lambda s: s.apply_loss(loss_fn, enabled=jnp.array(False)))(st)
  jax.tree.map(np.testing.assert_array_equal, frozen.params, params)
  assert int(frozen.step) == 0


def test_update_target_is_polyak_average(dense):
  model, params = dense
  st = TrainState.create(model, params, optax.sgd(0.1), target=True)
  moved = st.replace(params=jax.tree.map(lambda p: p + 1.0, params))
  t = moved.update_target(0.25)
  jax.tree.map(
    lambda a, b: np.testing.assert_allclose(a, b + 0.25, rtol=1e-6), t.target_params, params
  )
  same = moved.update_target(0.25, enabled=jnp.array(False))
  jax.tree.map(np.testing.assert_array_equal, same.target_params, params)
  with pytest.raises(ValueError, match="target=True"):
    TrainState.create(model, params, optax.sgd(0.1)).update_target(0.5)
