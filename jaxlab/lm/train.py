"""LM training: the optimizer, next-token loss, a mesh-aware `TrainState`, and one update step.

``create_state`` initialises parameters and optimizer state *directly into* their shardings (jit
with ``out_shardings`` from the logical annotations), so a model larger than one device never
exists unsharded. The state is an `LMState`: the core `jaxlab.core.train_state.TrainState` (so
``state(tokens)`` returns logits and every step is ``state.apply_gradients``) plus the position of
the streaming data loader (`streaming_update`), checkpointed with it::

    cfg = LMConfig.from_config(config.get_config(), vocab_size=64, d_model=32, head_dim=8)
    state = create_state(cfg, make_optimizer(3e-3, 20, 100, 0.0), jax.random.key(0), seq_len=16)
    state, metrics = jax.jit(update)(state, {"tokens": tokens_Bx17})
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxlab.core import sharding as shd
from jaxlab.core.train_state import TrainState
from jaxlab.lm import data as lm_data
from jaxlab.lm.model import LMConfig, Transformer


class LMState(TrainState):
  """The core `TrainState` plus ``data_position``: windows of the shard stream consumed so far.

  It is part of the pytree, so orbax saves it with the parameters and a resumed run reads on from
  exactly there (`streaming_update`). In-memory sampling leaves it at 0.
  """

  data_position: jax.Array = 0


def make_optimizer(
  lr: float, warmup: int, total: int, wd: float, clip: float = 1.0
) -> optax.GradientTransformation:
  """AdamW with linear warmup, cosine decay to lr / 10 over ``total`` steps, global-norm clip.

  The LM's values are ``config.lr``, ``config.warmup`` and ``config.weight_decay``
  (`jaxlab.lm.config.get_config`).

  Step ``i`` (0-based) uses the schedule at ``i + 1``: the first step takes ``lr / warmup``, not 0.
  """
  return optax.chain(
    optax.clip_by_global_norm(clip), optax.adamw(schedule(lr, warmup, total), weight_decay=wd)
  )


def schedule(lr: float, warmup: int, total: int) -> optax.Schedule:
  """Learning rate of step ``i``: linear warmup to ``lr`` at step ``warmup - 1``, then cosine."""
  sched = optax.warmup_cosine_decay_schedule(
    0.0, lr, max(warmup, 1), max(total, warmup + 1), end_value=lr * 0.1
  )
  return lambda step: sched(step + 1)


def next_token_loss(logits_BxLxV, targets_BxL, mask_BxL=None):
  """Mean cross-entropy (nats) over unmasked positions, plus accuracy.

  Negative targets (``-100`` in PyTorch pipelines) are ignored.
  """
  valid = targets_BxL >= 0
  targets_BxL = jnp.where(valid, targets_BxL, 0)
  nll = optax.softmax_cross_entropy_with_integer_labels(logits_BxLxV, targets_BxL)
  mask_BxL = valid if mask_BxL is None else (mask_BxL > 0) & valid
  mask_BxL = mask_BxL.astype(nll.dtype)
  denom = jnp.maximum(mask_BxL.sum(), 1.0)
  acc = ((logits_BxLxV.argmax(-1) == targets_BxL) * mask_BxL).sum() / denom
  return (nll * mask_BxL).sum() / denom, acc


def _boxed_state(model: Transformer, tx, key, seq_len: int) -> TrainState:
  """A fresh state whose params (and Adam moments) still carry their logical-axis boxes."""
  tokens = jnp.zeros((1, seq_len), jnp.int32)
  params = Transformer(model.cfg, None).init(key, tokens)["params"]  # init needs no collectives
  return LMState.create(model, params, tx, data_position=jnp.zeros((), jnp.int32))


def state_shardings(model: Transformer, tx, seq_len: int, rules=None):
  """NamedShardings of the whole `TrainState` of ``model`` (on ``model.mesh``), from the params'
  logical annotations."""
  mesh = model.mesh
  abstract = jax.eval_shape(lambda k: _boxed_state(model, tx, k, seq_len), jax.random.key(0))
  logical = nn.get_partition_spec(abstract)  # PartitionSpecs of logical names; P() for scalars
  # Shape-aware: a dimension the mesh axis does not divide (KV heads < tensor) is replicated.
  to_mesh = lambda spec, x: NamedSharding(
    mesh, shd.logical_to_spec(tuple(spec), rules, mesh, x.shape)
  )
  is_spec = lambda x: isinstance(x, PartitionSpec)
  return jax.tree.map(to_mesh, logical, nn.unbox(abstract), is_leaf=is_spec)


def create_state(
  cfg: LMConfig,
  tx: optax.GradientTransformation,
  key,
  seq_len: int,
  mesh: Mesh | None = None,
  rules=None,
) -> LMState:
  """An `LMState` of a fresh `Transformer`, sharded over ``mesh`` by the logical rules."""
  cfg.check_mesh(mesh, seq_len)
  model = Transformer(cfg, mesh)  # one instance: the state's static metadata must compare equal
  init = lambda k: nn.unbox(_boxed_state(model, tx, k, seq_len))
  if mesh is None:
    return jax.jit(init)(key)
  return jax.jit(init, out_shardings=state_shardings(model, tx, seq_len, rules))(key)


def state_sharding_tree(state: TrainState, mesh: Mesh | None):
  """The state's current shardings (for the runtime's ``state_sharding``); None without a mesh."""
  if mesh is None:
    return None
  return jax.tree.map(lambda x: x.sharding, state)


def loss_fn(params, state: TrainState, tokens_BxL1):
  """tokens of length L+1: inputs are [:-1], targets [1:]. Returns (loss, accuracy)."""
  logits = state(tokens_BxL1[:, :-1], params=params)
  return next_token_loss(logits, tokens_BxL1[:, 1:])


def eval_metrics(state: TrainState, tokens_NxBxL1) -> dict:
  """Mean next-token loss and perplexity over ``N`` batches of held-out windows."""
  loss = jax.lax.map(lambda t: loss_fn(state.params, state, t)[0], tokens_NxBxL1).mean()
  return {"val_loss": loss, "val_perplexity": jnp.exp(loss)}


def update(state: TrainState, batch, key=None):
  """One optimizer step on ``batch = {"tokens": int[B, L+1]}`` -> (state, metrics)."""
  del key
  (loss, acc), grads = jax.value_and_grad(loss_fn, has_aux=True)(
    state.params, state, batch["tokens"]
  )
  metrics = {"loss": loss, "accuracy": acc, "grad_norm": optax.global_norm(grads)}
  return state.apply_gradients(grads=grads), metrics


def streaming_update(loader: lm_data.StreamLoader, update_fn=update, mesh: Mesh | None = None):
  """``update(state, data, key)`` for `jaxlab.core.runtime.train` with ``data`` from shards.

  Reads the batch at ``state.data_position``: from ``data["stream"]`` when given (the arrays of
  `jaxlab.lm.data.device_stream`; no host callback, so the step is persistently cached), else
  through a host callback (`jaxlab.lm.data.fetch`; recompiled every run). Adds the other leaves of
  ``data`` (e.g. a teacher's parameters; may be None), runs ``update_fn`` and advances the position
  by one batch. Use it with ``sample_fn=None``.
  """

  def wrapped(state: LMState, data, key):
    data = dict(data or {})
    stream = data.pop("stream", None)
    if stream is None:
      tokens = lm_data.fetch(loader, state.data_position, mesh)
    else:
      tokens = lm_data.take(loader, stream, state.data_position, mesh)
    batch = {"tokens": tokens, **data}
    new, metrics = update_fn(state, batch, key)
    return new.replace(data_position=state.data_position + loader.batch), metrics

  return wrapped
