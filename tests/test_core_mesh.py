"""Mesh creation, logical sharding and a sharded step equal to the unsharded one (8 CPU devices)."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P

from jaxlab.core import mesh as mesh_lib
from jaxlab.core import sharding


def test_eight_devices():
  assert jax.device_count() == 8


@pytest.mark.parametrize(
  "spec, expected",
  [
    ("data:2,fsdp:-1", {"data": 2, "fsdp": 4}),
    ({"data": -1}, {"data": 8}),
    ("data:2,fsdp:2,context:2", {"data": 2, "fsdp": 2, "context": 2}),
    ("nodes:8", {"nodes": 8}),
    ("data:1,tensor:-1", {"data": 1, "tensor": 8}),
  ],
)
def test_make_mesh_shapes(spec, expected):
  m = mesh_lib.make_mesh(spec)
  assert dict(m.shape) == expected
  assert all(t == AxisType.Auto for t in m.axis_types)
  assert sorted(d.id for d in m.devices.flat) == list(range(8))


@pytest.mark.parametrize(
  "spec, match",
  [
    ("data:3", "3 devices but 8"),
    ("data:3,fsdp:-1", "does not divide"),
    ("data:-1,fsdp:-1", "at most one"),
    ("data=2", "name:size"),
    ("data:two", "integers"),
    ("data:0", "positive"),
    ("1x:2", "identifier"),
  ],
)
def test_make_mesh_errors(spec, match):
  with pytest.raises(mesh_lib.MeshError, match=match):
    mesh_lib.make_mesh(spec)


def test_logical_to_spec_drops_absent_axes_and_reuse():
  m = mesh_lib.make_mesh("data:2,fsdp:4")
  assert sharding.logical_to_spec(("batch", "embed"), mesh=m) == P(("data", "fsdp"), None)
  assert sharding.logical_to_spec(("embed", "mlp"), mesh=m) == P("fsdp", None)
  m2 = mesh_lib.make_mesh("data:2,tensor:4")
  assert sharding.logical_to_spec(("batch", "seq", "heads"), mesh=m2) == P("data", None, "tensor")
  with pytest.raises(KeyError, match="no rule"):
    sharding.logical_to_spec(("not_a_name",))


def test_shard_pytree_places_leaves_by_logical_names():
  m = mesh_lib.make_mesh("data:2,fsdp:4")
  tree = {"w": jnp.ones((8, 16)), "b": jnp.ones((16,))}
  logical = {"w": ("embed", "mlp"), "b": None}
  out = sharding.shard_pytree(tree, logical, m)
  assert out["w"].sharding.spec == P("fsdp", None)
  assert len(out["w"].addressable_shards) == 8
  assert out["w"].addressable_shards[0].data.shape == (2, 16)
  assert out["b"].sharding.is_fully_replicated


class _MLP(nn.Module):
  hidden: int = 32

  @nn.compact
  def __call__(self, x_BxD):
    init = nn.initializers.lecun_normal()
    h = nn.Dense(self.hidden, kernel_init=nn.with_logical_partitioning(init, ("embed", "mlp")))(
      x_BxD
    )
    h = nn.gelu(h)
    return nn.Dense(1, kernel_init=nn.with_logical_partitioning(init, ("mlp", "embed")))(h)[:, 0]


@pytest.fixture(scope="module")
def mlp_problem():
  model = _MLP()
  x = jax.random.normal(jax.random.key(0), (64, 16))
  y = jnp.sin(x[:, 0])
  boxed = model.init(jax.random.key(1), x)
  tx = optax.adam(1e-2)

  def step(params, opt_state, x, y, mesh=None):
    x = sharding.constrain(x, ("batch", None), mesh)

    def loss_fn(p):
      return jnp.mean((model.apply(p, x) - y) ** 2)

    loss, g = jax.value_and_grad(loss_fn)(params)
    upd, opt_state = tx.update(g, opt_state, params)
    return optax.apply_updates(params, upd), opt_state, loss

  return model, boxed, tx, step, x, y


def _run(mlp_problem, mesh):
  model, boxed, tx, step, x, y = mlp_problem
  params = nn.unbox(boxed)
  if mesh is not None:
    params = sharding.shard_boxed(boxed, mesh)
    x = jax.device_put(x, sharding.batch_sharding(mesh))
  opt_state = tx.init(params)
  f = jax.jit(lambda p, o, x, y: step(p, o, x, y, mesh))
  losses = []
  for _ in range(5):
    params, opt_state, loss = f(params, opt_state, x, y)
    losses.append(loss)
  return params, np.array(losses)


def test_sharded_step_equals_unsharded(mlp_problem):
  m = mesh_lib.make_mesh("data:2,fsdp:4")
  p_ref, l_ref = _run(mlp_problem, None)
  p_sh, l_sh = _run(mlp_problem, m)
  kernel = p_sh["params"]["Dense_0"]["kernel"]
  assert kernel.addressable_shards[0].data.shape == (16 // 4, 32)  # FSDP really sharded it
  np.testing.assert_allclose(l_sh, l_ref, rtol=1e-5, atol=1e-6)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), p_sh, p_ref)
  assert l_ref[-1] < l_ref[0]


def test_constrain_is_noop_without_mesh():
  x = jnp.arange(8.0)
  assert sharding.constrain(x, ("batch",), None) is x


def test_to_device_matches_asarray_and_compiles_nothing(caplog):
  from jaxlab.core.sharding import to_device

  def compiles(fn, x):
    caplog.clear()
    with caplog.at_level("WARNING"), jax.log_compiles():
      out = fn(x)
    return out, sum("ompil" in r.getMessage() for r in caplog.records)

  for i, dtype in enumerate((np.int64, np.float64, bool)):
    x = np.ones((3, 17 + i), dtype)  # shapes no other test used: a jnp.asarray would compile
    got, n = compiles(to_device, x)
    want, n_asarray = compiles(jnp.asarray, x)
    assert n == 0 and n_asarray > 0, (n, n_asarray)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
