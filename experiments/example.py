"""Template experiment: least squares with Adam on the core runtime. Copy this file to start one.

Commands (the first: about 5-10 s on 2 idle CPU cores, 4 s of CPU time; 27 s measured with the
cores busy, load ~20):
  python -m experiments.example --steps=500 --workdir=runs/example
  python -m experiments.example --mesh=data:-1 --config.batch_size=64   # data-parallel batch
  python -m experiments.example --seeds=4   # seeds 0-3 vmapped in one program (one device)

Every seed draws its own problem (key stream 1 of its seed); several seeds stack their data sets
on the seed axis (``runtime.train(..., seeds=, seed_data=True)``), so seed k of ``--seeds`` equals
the run ``--seed=k`` alone (tests/test_core_experiment.py).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections
import optax

from jaxlab.core import experiment, resources, runtime, sharding
from jaxlab.core import seeds as seeds_lib
from jaxlab.core import workdir as workdir_lib
from jaxlab.core.train_state import TrainState


def get_config() -> ml_collections.ConfigDict:
  """Least-squares template (500 steps: about 5-10 s on 2 idle CPU cores)."""
  c = ml_collections.ConfigDict()
  c.dim = 16  # parameter dimension d of w in y = X w + noise
  c.num_examples = 512  # rows of the synthetic design matrix X
  c.batch_size = 32  # examples per update (sharded over the mesh's batch axes)
  c.lr = 1e-2  # Adam learning rate
  c.noise = 0.1  # std of the label noise
  return c


_CONFIG = experiment.define_config(get_config())


def make_problem(config, key):
  kx, kw, kn = jax.random.split(key, 3)
  x = jax.random.normal(kx, (config.num_examples, config.dim))
  w_true = jax.random.normal(kw, (config.dim,))
  y = x @ w_true + config.noise * jax.random.normal(kn, (config.num_examples,))
  return {"x": x, "y": y}, w_true


def create(config) -> TrainState:
  linear = lambda variables, x: x @ variables["params"]["w"]
  return TrainState.create(linear, {"w": jnp.zeros((config.dim,))}, optax.adam(config.lr))


def sample(data, key, batch_size):
  idx = jax.random.randint(key, (batch_size,), 0, data["y"].shape[0])
  return jax.tree.map(lambda a: a[idx], data)


def update(state: TrainState, batch, key):
  del key

  def loss_fn(w):
    loss = jnp.mean((state(batch["x"], params=w) - batch["y"]) ** 2)
    return loss, {"loss": loss}

  return state.apply_loss(loss_fn)


UNUSED_FLAGS = ("videos",)  # no evaluation video (also out of --help)


def main(argv):
  del argv
  run = experiment.common("example", default_steps=500, seeds=True, unused=UNUSED_FLAGS)
  config = _CONFIG.value
  experiment.check_config(
    config,
    {
      "dim": "positive",
      "num_examples": "positive",
      "batch_size": "positive",
      "lr": "positive",
      "noise": "nonneg",
    },
  )
  run.check_batch("config.batch_size", config.batch_size)
  # sizes that cannot fit are refused before anything is allocated: X and y, then a batch
  d, n = config.dim, config.num_examples
  field = "config.dim" if d > n else "config.num_examples"
  resources.check_fits(4 * 2 * n * (d + 1), field, f"the {n} x {d} data set")
  resources.check_fits(4 * 4 * config.batch_size * (d + 1), "config.batch_size", "a batch")
  if len(run.seeds) > 1:  # every seed holds its own data set and batches
    what = f"{len(run.seeds)} seeds' data sets and batches"
    nbytes = 4 * len(run.seeds) * (2 * n + 4 * config.batch_size) * (d + 1)
    resources.check_fits(nbytes, "seeds", what)

  # every seed draws its own problem (key stream 1): several seeds stack their data sets
  seeds = run.seeds
  keys = seeds_lib.seed_keys(seeds)
  problems = lambda k: make_problem(config, jax.random.fold_in(k, 1))
  data, w_true = jax.vmap(problems)(keys) if len(seeds) > 1 else problems(keys[0])

  def eval_fn(state, step):
    del step
    return {"w_err": jnp.linalg.norm(state.params["w"] - w_true, axis=-1)}

  several = dict(seeds=seeds, seed_data=True) if len(seeds) > 1 else {}
  experiment.require(not several or run.mesh is None, "seeds", "train vmapped on one device")
  state = seeds_lib.stack([create(config)] * len(seeds)) if several else create(config)
  sample_fn = sharding.data_parallel(lambda d, k: sample(d, k, config.batch_size), run.mesh)
  with workdir_lib.identity(run.seeds):  # another seed never continues or replaces this run
    _, result = runtime.train(
      state,
      update,
      run.loop(),
      key=keys if several else keys[0],
      workdir=run.workdir,
      data=data,
      sample_fn=sample_fn,
      eval_fn=eval_fn,
      mesh=run.mesh,
      config=config,
      **several,
    )
  s = result.summary
  print(
    f"final loss {s['train/loss']:.4g}, |w - w*| {s.get('eval/w_err', float('nan')):.4g}"
    + (f" (means over seeds {', '.join(map(str, run.seeds))})" if len(run.seeds) > 1 else "")
    + f" -> {run.workdir}/summary.json"
  )


if __name__ == "__main__":
  experiment.run(main)
