"""Memorisation-capacity probe (Morris et al., "How much do language models memorize?", arXiv
2505.24832; openreview NhU661EZ9C).

Train transformers on N uniform random bitstrings (no generalisation possible) and count
memorised bits = sum_x max(0, H(x) - NLL_bits(x)), with H(x) = L bits per string. The paper reports
~3.6 bits/parameter at saturation; models here train far less than to saturation on CPU, so values
are lower bounds. Training runs in memory on the core runtime (no files); its per-step losses come
back in ``result["losses"]``. With several ``seeds`` every probe trains them together, vmapped in
one compiled program (each seed its own bitstrings and initialisation, as its solo run).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxlab.core import runtime
from jaxlab.core import seeds as seeds_lib
from jaxlab.core.errors import ConfigError, require
from jaxlab.lm import config as lm_config
from jaxlab.lm import train
from jaxlab.lm.model import LMConfig, param_count

BOS = 2  # tokens: 0, 1 (bits) and BOS
HEAD_DIM = 16  # widths are multiples of it (one head per 16 channels)
REFERENCE_BITS_PER_PARAM = 3.6  # the paper's saturation value for GPT-style models


def bitstrings(key, num: int, length: int):
  """int32[num, length+1]: BOS then ``length`` uniform bits."""
  bits = jax.random.bernoulli(key, 0.5, (num, length)).astype(jnp.int32)
  return jnp.concatenate([jnp.full((num, 1), BOS, jnp.int32), bits], axis=1)


def model_config(d_model: int, n_layers: int = 1) -> LMConfig:
  """The probe's model: `jaxlab.lm.config.get_config`'s transformer at width ``d_model``, one head
  per `HEAD_DIM` channels, a 3-token vocabulary and a 4x SwiGLU."""
  heads = max(1, d_model // HEAD_DIM)
  return LMConfig.from_config(
    lm_config.get_config(),
    vocab_size=3,
    d_model=d_model,
    n_layers=n_layers,
    n_heads=heads,
    n_kv_heads=heads,
    head_dim=HEAD_DIM,
    mlp_dim=4 * d_model,
  )


def parse_widths(field: str, widths: str | int | list) -> list[int]:
  """``"16,32"`` -> ``[16, 32]``; every width a positive multiple of `HEAD_DIM`."""
  items = str(widths).split(",") if isinstance(widths, (str, int)) else list(widths)
  try:
    out = [int(str(w).strip()) for w in items if str(w).strip()]
  except ValueError:
    raise ConfigError(field, f"{widths!r} is not a comma-separated list of ints") from None
  require(
    bool(out) and all(w > 0 and w % HEAD_DIM == 0 for w in out),
    field,
    f"widths must be positive multiples of {HEAD_DIM}, got {widths!r}",
  )
  return out


def nll_bits_per_string(state, data):
  """Code length in bits of each string (after BOS) under the model held by ``state``."""
  logp = jax.nn.log_softmax(state(data[:, :-1]), -1)
  nll = -jnp.take_along_axis(logp, data[:, 1:, None], -1)[..., 0]
  return nll.sum(-1) / math.log(2)


def probe(
  d_model: int,
  num_strings: int,
  length: int,
  steps: int,
  key,
  lr: float,
  batch: int = 64,
  n_layers: int = 1,
  seeds=None,
) -> dict:
  """Trains one model on ``num_strings`` random strings; returns memorised bits and bits/param.

  The result also holds ``losses``, the training loss of every step (a float32 array).
  ``seeds`` (more than one): `probe_seeds`, ``key`` one raw key per seed.
  """
  if seeds is not None and len(seeds) > 1:
    return probe_seeds(d_model, num_strings, length, steps, key, lr, seeds, batch, n_layers)
  cfg = model_config(d_model, n_layers)
  kd, ki, ks = jax.random.split(key, 3)
  data = bitstrings(kd, num_strings, length)
  tx = optax.adam(lr)  # constant lr: memorisation needs many steps at full rate
  state = train.create_state(cfg, tx, ki, seq_len=length)
  batch = min(batch, num_strings)

  def sample(data, k):
    return {"tokens": data[jax.random.choice(k, num_strings, (batch,), replace=False)]}

  loop = runtime.Loop(steps, log_every=steps, ckpt_every=0, history=True, progress=False)
  state, result = runtime.train(state, train.update, loop, key=ks, data=data, sample_fn=sample)
  nll = np.asarray(jax.jit(nll_bits_per_string)(state, data))
  mem = float(np.maximum(0.0, length - nll).sum())
  n = param_count(state.params)
  losses = result.history["loss"]
  return {
    "d_model": d_model,
    "params": n,
    "num_strings": num_strings,
    "length": length,
    "data_bits": num_strings * length,
    "memorised_bits": mem,
    "bits_per_param": mem / n,
    "final_loss": float(losses[-1]),
    "losses": losses,
  }


def probe_seeds(
  d_model: int, num_strings: int, length: int, steps: int, keys, lr: float, seeds, batch=64,
  n_layers=1,
) -> dict:  # fmt: skip
  """`probe` of several seeds together, vmapped in one compiled program: seed ``i`` draws its own
  bitstrings and initialisation from ``keys[i]``, as `probe` of that key alone. The figures are
  means over seeds (``losses``: the mean per step), each seed's under ``per_seed``."""
  seeds, cfg = tuple(seeds), model_config(d_model, n_layers)
  kd, ki, ks = jnp.moveaxis(jax.vmap(lambda k: jax.random.split(k, 3))(keys), 1, 0)
  data = jax.jit(jax.vmap(lambda k: bitstrings(k, num_strings, length)))(kd)
  tx = optax.adam(lr)
  states = seeds_lib.init(lambda k: train.create_state(cfg, tx, k, seq_len=length), ki)
  batch = min(batch, num_strings)

  def update(carry, drawn, k):
    # the runtime shares its data between seeds: each seed samples its own row of strings
    state, row = carry
    pick = jax.random.choice(drawn["key"], num_strings, (batch,), replace=False)
    state, metrics = train.update(state, {"tokens": drawn["data"][row, pick]}, k)
    return (state, row), metrics

  loop = runtime.Loop(steps, log_every=steps, ckpt_every=0, history=True, progress=False)
  (states, _), result = runtime.train(
    (states, jnp.arange(len(seeds))), update, loop, key=ks, data=data,
    sample_fn=lambda data, k: {"data": data, "key": k}, seeds=seeds,
  )  # fmt: skip
  nll = np.asarray(jax.jit(jax.vmap(nll_bits_per_string))(states, data))
  mem = np.maximum(0.0, length - nll).sum(-1)
  n = param_count(seeds_lib.take(states.params, 0))
  losses = np.asarray(result.history["loss"])  # [steps, seeds]
  per_seed = {
    s: {"memorised_bits": float(m), "bits_per_param": float(m) / n, "final_loss": float(f)}
    for s, m, f in zip(seeds, mem, losses[-1])
  }
  return {
    "d_model": d_model,
    "params": n,
    "num_strings": num_strings,
    "length": length,
    "data_bits": num_strings * length,
    "memorised_bits": float(mem.mean()),
    "bits_per_param": float(mem.mean()) / n,
    "final_loss": float(losses[-1].mean()),
    "losses": losses.mean(1),
    "per_seed": per_seed,
  }


def sweep(
  widths, num_strings: int, length: int, steps: int, key, lr: float, report=None, seeds=None
) -> list:
  """One `probe` per width (one layer each, independent keys); ``report(row)`` after each.
  ``seeds`` (more than one): every probe trains those seeds vmapped (`probe_seeds`); ``key`` is
  then one raw key per seed (`jaxlab.core.seeds.seed_keys`)."""
  many = seeds is not None and len(seeds) > 1
  fold = seeds_lib.stream if many else jax.random.fold_in
  rows = []
  for i, w in enumerate(widths):
    rows.append(probe(w, num_strings, length, steps, fold(key, i), lr=lr, seeds=seeds))
    if report is not None:
      report(rows[-1])
  return rows
