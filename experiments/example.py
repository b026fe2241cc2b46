"""Template experiment: least squares with Adam on the core runtime. Copy this file to start one.

Command (CPU, ~10 s):
  python -m experiments.example --steps=500 --workdir=runs/example
  python -m experiments.example --mesh=data:-1 --config.batch_size=64   # data-parallel batch
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections
import optax
from flax import struct

from jaxlab.core import experiment, runtime, sharding


def get_config() -> ml_collections.ConfigDict:
  """Least-squares template. Runtime: ~10 s on a laptop CPU for 500 steps."""
  c = ml_collections.ConfigDict()
  c.dim = 16           # parameter dimension d of w in y = X w + noise
  c.num_examples = 512 # rows of the synthetic design matrix X
  c.batch_size = 32    # examples per update (sharded over the mesh's batch axes)
  c.lr = 1e-2          # Adam learning rate
  c.noise = 0.1        # std of the label noise
  return c


_CONFIG = experiment.define_config(get_config())


class State(struct.PyTreeNode):
  w: jax.Array
  opt_state: optax.OptState
  tx: optax.GradientTransformation = struct.field(pytree_node=False)


def make_problem(config, key):
  kx, kw, kn = jax.random.split(key, 3)
  x = jax.random.normal(kx, (config.num_examples, config.dim))
  w_true = jax.random.normal(kw, (config.dim,))
  y = x @ w_true + config.noise * jax.random.normal(kn, (config.num_examples,))
  return {"x": x, "y": y}, w_true


def init_state(config) -> State:
  tx = optax.adam(config.lr)
  w = jnp.zeros((config.dim,))
  return State(w=w, opt_state=tx.init(w), tx=tx)


def sample(data, key, batch_size):
  idx = jax.random.randint(key, (batch_size,), 0, data["y"].shape[0])
  return jax.tree.map(lambda a: a[idx], data)


def update(state: State, batch, key):
  del key
  def loss_fn(w):
    return jnp.mean((batch["x"] @ w - batch["y"]) ** 2)
  loss, g = jax.value_and_grad(loss_fn)(state.w)
  updates, opt_state = state.tx.update(g, state.opt_state, state.w)
  return state.replace(w=optax.apply_updates(state.w, updates), opt_state=opt_state), {"loss": loss}


def main(argv):
  del argv
  config = _CONFIG.value
  run = experiment.common("example", default_steps=500)
  experiment.check_config(config, {"dim": "positive", "num_examples": "positive",
                                   "batch_size": "positive", "lr": "positive", "noise": "nonneg"})
  if run.mesh is not None and config.batch_size % sharding.named_sharding(
      run.mesh, ("batch",)).num_devices:
    experiment.fail("config.batch_size", f"{config.batch_size} is not divisible by the "
                    f"{run.mesh.size} devices of --mesh")
  experiment.prepare_workdir(run.workdir)
  key = jax.random.key_data(jax.random.key(run.seed))
  data, w_true = make_problem(config, jax.random.fold_in(key, 1))

  def eval_fn(state, step):
    del step
    return {"w_err": float(jnp.linalg.norm(state.w - w_true))}

  state, summary = runtime.train(
      init_state(config), update, num_steps=run.steps, workdir=run.workdir, key=key, data=data,
      sample_fn=sharding.data_parallel(lambda d, k: sample(d, k, config.batch_size), run.mesh),
      log_every=run.log_every, ckpt_every=run.ckpt_every, eval_fn=eval_fn, mesh=run.mesh,
      config=config)
  print(f"final loss {summary['train/loss']:.4g}, |w - w*| {summary['eval/w_err']:.4g} "
        f"-> {run.workdir}/summary.json")


if __name__ == "__main__":
  experiment.run(main)
