"""LM training state, next-token loss and the ``update(state, batch, key)`` step, mesh-aware.

``create_state`` initialises parameters *directly into* their shardings (jit with out_shardings
from the logical annotations), so a model larger than one device never exists unsharded.
"""

from __future__ import annotations

from typing import Any, Callable

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from jaxlab.core import sharding as shd
from jaxlab.lm.model import LMConfig, Transformer


class LMState(flax.struct.PyTreeNode):
  step: jax.Array
  params: Any
  opt_state: Any
  apply_fn: Callable = flax.struct.field(pytree_node=False)
  tx: optax.GradientTransformation = flax.struct.field(pytree_node=False)


def make_optimizer(
  lr: float = 3e-3, warmup: int = 20, total: int = 1000, wd: float = 0.0, clip: float = 1.0
) -> optax.GradientTransformation:
  sched = optax.warmup_cosine_decay_schedule(
    0.0, lr, max(warmup, 1), max(total, warmup + 1), end_value=lr * 0.1
  )
  return optax.chain(optax.clip_by_global_norm(clip), optax.adamw(sched, weight_decay=wd))


def next_token_loss(logits_BxLxV, targets_BxL, mask_BxL=None):
  """Mean cross-entropy (nats) over unmasked positions, plus accuracy."""
  nll = optax.softmax_cross_entropy_with_integer_labels(logits_BxLxV, targets_BxL)
  if mask_BxL is None:
    mask_BxL = jnp.ones_like(nll)
  denom = jnp.maximum(mask_BxL.sum(), 1.0)
  acc = ((logits_BxLxV.argmax(-1) == targets_BxL) * mask_BxL).sum() / denom
  return (nll * mask_BxL).sum() / denom, acc


def _boxed_state(model, tx, key, seq_len):
  tokens = jnp.zeros((1, seq_len), jnp.int32)
  params = model.init(key, tokens)["params"]
  return params, tx.init(params)


def state_shardings(cfg: LMConfig, tx, mesh: Mesh, seq_len: int, rules=None):
  """NamedShardings for (step, params, opt_state) from the params' logical annotations."""
  model = Transformer(cfg, None)
  abstract = jax.eval_shape(lambda k: _boxed_state(model, tx, k, seq_len), jax.random.key(0))
  logical = nn.get_partition_spec(abstract)  # PartitionSpecs of logical names; P() for scalars
  to_mesh = lambda spec: NamedSharding(mesh, shd.logical_to_spec(tuple(spec), rules, mesh))
  return jax.tree.map(to_mesh, logical, is_leaf=lambda x: isinstance(x, P))


def create_state(
  cfg: LMConfig,
  tx: optax.GradientTransformation,
  key,
  seq_len: int,
  mesh: Mesh | None = None,
  rules=None,
) -> LMState:
  cfg.validate()
  model = Transformer(cfg, mesh)
  init_model = Transformer(cfg, None)  # init never needs the collective attention paths

  def init(k):
    params, opt = _boxed_state(init_model, tx, k, seq_len)
    return nn.unbox(params), nn.unbox(opt)

  if mesh is None:
    params, opt = jax.jit(init)(key)
  else:
    p_sh, o_sh = state_shardings(cfg, tx, mesh, seq_len, rules)
    params, opt = jax.jit(init, out_shardings=(p_sh, o_sh))(key)
  step = jnp.zeros((), jnp.int32)
  if mesh is not None:
    step = jax.device_put(step, shd.replicated(mesh))
  return LMState(step=step, params=params, opt_state=opt, apply_fn=model.apply, tx=tx)


def state_sharding_tree(state: LMState, mesh: Mesh | None):
  """The state's current shardings (for the runtime's ``state_sharding``); None without a mesh."""
  if mesh is None:
    return None
  return jax.tree.map(lambda x: x.sharding, state)


def loss_fn(params, apply_fn, tokens_BxL1):
  """tokens of length L+1: inputs are [:-1], targets [1:]."""
  logits = apply_fn({"params": params}, tokens_BxL1[:, :-1])
  return next_token_loss(logits, tokens_BxL1[:, 1:])


def update(state: LMState, batch, key=None):
  """One AdamW step on ``batch = {"tokens": int[B, L+1]}`` -> (state, metrics)."""
  del key
  (loss, acc), grads = jax.value_and_grad(loss_fn, has_aux=True)(
    state.params, state.apply_fn, batch["tokens"]
  )
  updates, opt_state = state.tx.update(grads, state.opt_state, state.params)
  params = optax.apply_updates(state.params, updates)
  metrics = {"loss": loss, "accuracy": acc, "grad_norm": optax.global_norm(grads)}
  return state.replace(step=state.step + 1, params=params, opt_state=opt_state), metrics
