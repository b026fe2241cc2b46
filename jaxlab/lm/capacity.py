"""Memorisation-capacity probe (Morris et al., "How much do language models memorize?").

Train transformers on N uniform random bitstrings (no generalisation possible) and count
memorised bits = sum_x max(0, H(x) - NLL_bits(x)), with H(x) = L bits per string. The paper reports
~3.6 bits/parameter at saturation (openreview NhU661EZ9C); models here train far less than to
saturation on CPU, so values are lower bounds.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxlab.lm import train as T
from jaxlab.lm.model import LMConfig, Transformer, param_count

BOS = 2  # tokens: 0, 1 (bits) and BOS


def bitstrings(key, num: int, length: int):
  """int32[num, length+1]: BOS then ``length`` uniform bits."""
  bits = jax.random.bernoulli(key, 0.5, (num, length)).astype(jnp.int32)
  return jnp.concatenate([jnp.full((num, 1), BOS, jnp.int32), bits], axis=1)


def model_config(d_model: int, n_layers: int = 1) -> LMConfig:
  heads = max(1, d_model // 16)
  return LMConfig(
    vocab_size=3,
    d_model=d_model,
    n_layers=n_layers,
    n_heads=heads,
    n_kv_heads=heads,
    head_dim=16,
    mlp_dim=4 * d_model,
  )


def nll_bits_per_string(params, apply_fn, data):
  logits = apply_fn({"params": params}, data[:, :-1])
  logp = jax.nn.log_softmax(logits, -1)
  nll = -jnp.take_along_axis(logp, data[:, 1:, None], -1)[..., 0]
  return nll.sum(-1) / math.log(2)


def probe(
  d_model: int,
  num_strings: int,
  length: int,
  steps: int,
  key,
  lr: float = 3e-3,
  batch: int = 64,
  n_layers: int = 1,
) -> dict:
  """Trains one model on ``num_strings`` random strings; returns memorised bits and bits/param."""
  cfg = model_config(d_model, n_layers)
  kd, ki, ks = jax.random.split(key, 3)
  data = bitstrings(kd, num_strings, length)
  tx = optax.adam(lr)  # constant lr: memorisation needs many steps at full rate
  state = T.create_state(cfg, tx, ki, seq_len=length)
  batch = min(batch, num_strings)

  @jax.jit
  def run(state, key):
    def body(state, k):
      idx = jax.random.choice(k, num_strings, (batch,), replace=False)
      state, m = T.update(state, {"tokens": data[idx]})
      return state, m["loss"]

    return jax.lax.scan(body, state, jax.random.split(key, steps))

  state, losses = run(state, ks)
  nll = np.asarray(
    jax.jit(nll_bits_per_string, static_argnums=1)(state.params, state.apply_fn, data)
  )
  mem = float(np.maximum(0.0, length - nll).sum())
  n = param_count(state.params)
  return {
    "d_model": d_model,
    "params": n,
    "num_strings": num_strings,
    "length": length,
    "data_bits": num_strings * length,
    "memorised_bits": mem,
    "bits_per_param": mem / n,
    "final_loss": float(losses[-1]),
  }
