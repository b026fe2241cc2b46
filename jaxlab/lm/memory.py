"""Memory of an LM run estimated from its config alone, refused before anything is allocated.

The shapes of the largest arrays follow from the config: parameters and the optimizer's state
(float32 params, gradients and two Adam moments: 16 bytes a parameter), the logits of a batch
(``batch x seq_len x vocab``, float32, and their gradient), the activations one block keeps for the
backward pass, and the synthetic corpus's ``vocab x vocab`` transition matrix. The estimates are
lower bounds (XLA needs more), so a size refused here could never have run; each check names the
field to change (`jaxlab.core.resources.check_fits`). Counts that overflow int32 are refused too
(`jaxlab.core.resources.check_int32`).

Measured, not estimated: `step_memory` (XLA's compiled memory analysis of a full training step)
and `attention_layer_memory` (one attention layer's forward and backward), compiled on abstract
shapes; `fit_line` and `longest_under` turn a curve of them into the longest length under a cap
(`benchmarks/lm_memory.py`).
"""

from __future__ import annotations

from jaxlab.core import resources

STATE_BYTES = 16  # float32 param + gradient + two Adam moments
F32 = 4


def param_count(cfg) -> int:
  """Parameters of an `jaxlab.lm.model.LMConfig` (embeddings, attention, SwiGLU, norms)."""
  d, hd = cfg.d_model, cfg.head_dim
  attn = d * hd * (2 * cfg.n_heads + 2 * cfg.n_kv_heads)
  block = attn + 3 * d * cfg.mlp_dim + 2 * d
  embed = cfg.vocab_size * d * (1 if cfg.tie_embeddings else 2)
  return embed + cfg.n_layers * block + d


MODEL_DEFAULTS = dict(vocab_size=512, d_model=64, n_layers=2, n_heads=4, head_dim=16, mlp_dim=192)


def _furthest(cfg, prefix: str) -> str:
  """The model field furthest above the library default (the one to make smaller)."""
  ratio = {f: getattr(cfg, f) / d for f, d in MODEL_DEFAULTS.items()}
  return f"{prefix}.{max(ratio, key=ratio.get)}"


def _larger(a: tuple[str, int, int], b: tuple[str, int, int]) -> str:
  """The field of ``(field, value, default)`` pairs that is furthest above its default."""
  return a[0] if a[1] / a[2] >= b[1] / b[2] else b[0]


def activation_bytes(cfg, batch: int, seq_len: int) -> int:
  """Logits (and their gradient) plus what the blocks keep for the backward pass."""
  tokens = batch * seq_len
  itemsize = 2 if cfg.dtype == "bfloat16" else 4
  logits = 2 * tokens * cfg.vocab_size * F32
  per_block = cfg.d_model if cfg.remat != "none" else 4 * cfg.d_model + 2 * cfg.mlp_dim
  scores = cfg.n_heads * min(seq_len, cfg.attention_block)  # one block of blockwise attention
  return logits + tokens * (per_block * cfg.n_layers + scores) * itemsize


def check_model(cfg, devices: int = 1, prefix: str = "config", note: str = "") -> int:
  """The parameters and optimizer state of ``cfg`` must fit; returns their bytes."""
  for f in ("vocab_size", "d_model", "mlp_dim", "n_heads", "head_dim"):
    resources.check_int32(note or f"{prefix}.{f}", getattr(cfg, f))
  total = param_count(cfg)
  field = note or _furthest(cfg, prefix)  # a teacher: its width is the field to change
  nbytes = STATE_BYTES * total
  what = (
    f"{total:,} parameters{' of the teacher' if note else ''} with their optimizer state "
    f"(embedding/logits of vocab_size {cfg.vocab_size} x d_model {cfg.d_model}, {cfg.n_layers} "
    f"blocks of mlp_dim {cfg.mlp_dim})"
  )
  resources.check_fits(nbytes, field, what, devices=devices)
  return nbytes


def check_lm(config, cfg, mode: str, devices: int = 1, teacher=None) -> None:
  """Everything ``mode`` (train, distill, generate) allocates for the model ``cfg``."""
  c = config
  resources.check_int32("config.seq_len", c.seq_len)
  field = _larger(("config.batch_size", c.batch_size, 16), ("config.seq_len", c.seq_len, 64))
  resources.check_int32(field, c.batch_size * (c.seq_len + 1), "the tokens of a batch")
  prompt = len(c.generate.prompt.encode("utf-8"))  # tokens <= bytes
  resources.check_int32("config.generate.tokens", c.generate.tokens + prompt + 1)
  state = check_model(cfg, devices)
  if teacher is not None:
    state += check_model(teacher, devices, note="config.distill.teacher_d_model")
  if mode == "generate":  # one sequence, re-run over the whole buffer at every step
    buf = c.generate.tokens + prompt + 1
    act = activation_bytes(cfg, 1, buf)
    what = f"logits of {buf} tokens x vocab_size {cfg.vocab_size} while sampling"
    resources.check_fits(state + act, "config.generate.tokens", what, devices=devices)
    return
  act = max(activation_bytes(m, c.batch_size, c.seq_len) for m in (cfg, teacher) if m is not None)
  what = (
    f"activations of a batch of batch_size {c.batch_size} x seq_len {c.seq_len} tokens (logits: "
    f"batch x seq_len x vocab_size {cfg.vocab_size}) plus the model's state"
  )
  resources.check_fits(state + act, field, what, devices=devices)
  n, name = (
    (c.distill.eval_batches, "config.distill.eval_batches")
    if mode == "distill"
    else (c.val_batches, "config.val_batches")
  )
  held = n * c.batch_size * (c.seq_len + 1) * F32  # held-out batches kept on the device
  what = f"{n:,} held-out batches of {c.batch_size} x {c.seq_len + 1} tokens"
  resources.check_fits(state + act + held, name, what, devices=devices)
  if c.text == "synthetic":
    resources.check_int32("config.corpus_tokens", c.corpus_tokens)
    v = c.vocab_size
    what = f"the synthetic chain's vocab_size x vocab_size ({v} x {v}) transition matrices"
    resources.check_fits(3 * 8 * v * v, "config.vocab_size", what)
    what = f"a synthetic corpus of {c.corpus_tokens:,} tokens (int32 ids, float64 draws)"
    resources.check_fits(16 * c.corpus_tokens, "config.corpus_tokens", what)


def check_seeds(config, cfg, seeds: int) -> None:
  """``seeds`` models trained together (one device): each seed's state and held-out batches are
  kept at once (a chunk's activations that do not fit make the runtime train the seeds in
  sequential groups)."""
  c = config
  state = check_model(cfg)
  held = c.val_batches * c.batch_size * (c.seq_len + 1) * F32
  corpus = 4 * c.corpus_tokens if c.text == "synthetic" else 0  # each seed's own corpus
  what = f"{seeds} seeds' model states, held-out batches and data"
  resources.check_fits(seeds * (state + held + corpus), "seeds", what)


def check_capacity(cc, widths, seeds: int = 1) -> None:
  """The capacity probe: its bitstrings and one forward pass over all of them (scoring); with
  ``seeds`` probes at once (one vmapped program), all of theirs (refused naming ``seeds``)."""
  n, length, w = cc.num_strings, cc.length, max(widths)
  resources.check_int32("config.capacity.length", length + 1)
  resources.check_int32("config.capacity.d_models", 4 * w)
  field = _larger(("config.capacity.num_strings", n, 128), ("config.capacity.length", length, 32))
  resources.check_int32(field, n * (length + 1), "the tokens of the bitstrings")
  params = 2 * 3 * w + w * w * 4 + 12 * w * w + 3 * w  # embeddings, attention, SwiGLU, norms
  what = f"a model of d_model {w} ({params:,} parameters) with its optimizer state"
  resources.check_fits(STATE_BYTES * params, "config.capacity.d_models", what)
  heads = max(1, w // 16)
  per_token = 3 * 4 * w + 3 + heads * min(length, 512)  # SwiGLU hidden, logits, scores
  nbytes = n * (length + 1) * 8 + n * length * per_token * F32
  what = f"{n:,} bitstrings of {length} bits and one forward pass over them (width {w})"
  resources.check_fits(nbytes, field, what)
  if seeds > 1:
    what = f"{seeds} seeds' probes of width {w} at once (states, bitstrings, scoring)"
    resources.check_fits(seeds * (STATE_BYTES * params + nbytes), "seeds", what)


# ---------------------------------------------------------------------------------------------
# Compiled memory of a training step (XLA's own figures; nothing is allocated or executed).


def step_memory(
  cfg, seq_len: int, batch: int = 1, mesh=None, donate: bool = True, state_rules=None
) -> dict:
  """XLA's compiled memory analysis of one full training step (forward, backward, AdamW update).

  The step is `jaxlab.lm.train.update` jitted over the state's shardings on ``mesh`` and lowered
  on abstract arguments (``jax.ShapeDtypeStruct``), so any length compiles without allocating.
  Returns per-device bytes: ``argument``, ``output``, ``alias`` (outputs written into donated
  inputs), ``temp`` (XLA's scratch: activations kept for the backward pass, gradients, collective
  buffers) and ``peak = argument + output - alias + temp``, the live set a device must hold.
  ``state_rules`` (logical-axis rules, `jaxlab.core.sharding`) shard the state differently from
  the model's activations, e.g. the parameters and Adam moments over the context axis (ZeRO-3).
  """
  import jax

  from jaxlab.core import sharding as shd
  from jaxlab.lm import train
  from jaxlab.lm.model import Transformer

  tx = train.make_optimizer(3e-4, 10, 1000, 0.0)
  model = Transformer(cfg, mesh)
  state = jax.eval_shape(lambda k: train.create_state(cfg, tx, k, seq_len), jax.random.key(0))
  tokens = jax.ShapeDtypeStruct((batch, seq_len + 1), jax.numpy.int32)
  state = state.replace(apply_fn=model.apply, model_def=model)
  if mesh is None:
    step = jax.jit(train.update, donate_argnums=(0,) if donate else ())
  else:
    cfg.check_mesh(mesh, seq_len)
    in_sh = (
      train.state_shardings(model, tx, seq_len, state_rules),
      {"tokens": shd.replicated(mesh)},
    )
    step = jax.jit(train.update, in_shardings=in_sh, donate_argnums=(0,) if donate else ())
  stats = step.lower(state, {"tokens": tokens}).compile().memory_analysis()
  out = {
    "argument": int(stats.argument_size_in_bytes),
    "output": int(stats.output_size_in_bytes),
    "alias": int(stats.alias_size_in_bytes),
    "temp": int(stats.temp_size_in_bytes),
  }
  out["peak"] = out["argument"] + out["output"] - out["alias"] + out["temp"]
  return out


def fit_line(lengths, values) -> tuple[float, float]:
  """Least-squares ``values ~ slope * lengths + intercept`` -> ``(slope, intercept)``."""
  import numpy as np

  x, y = np.asarray(lengths, np.float64), np.asarray(values, np.float64)
  if x.shape != y.shape or x.size < 2 or np.ptp(x) == 0:
    raise ValueError("fit_line needs >= 2 points at >= 2 distinct lengths")
  slope, intercept = np.polyfit(x, y, 1)
  return float(slope), float(intercept)


def longest_under(cap: float, slope: float, intercept: float, multiple: int = 1) -> int:
  """The longest length (a multiple of ``multiple``) whose fitted value stays within ``cap``;
  0 when not even the intercept fits. A non-positive slope never reaches the cap: refused."""
  if slope <= 0:
    raise ValueError(f"slope must be > 0 to reach a cap, got {slope}")
  if cap < intercept:
    return 0
  return int((cap - intercept) / slope) // multiple * multiple


def attention_layer_memory(
  impl: str,
  mesh,
  seq_len: int,
  heads: int,
  kv_heads: int,
  head_dim: int,
  d_model: int,
  chunks: int = 0,
  block: int = 512,
) -> int:
  """XLA's per-device temp bytes of one attention layer's forward and backward (gradient w.r.t.
  its input ``x``, float32, batch 1): ``x -> Q/K/V -> attention -> output projection``.

  The projections are inside the measured function, so UPipe's per-chunk projections and
  Ulysses' all-heads Q/K/V/O (the tensors UPipe's saving is about) are both counted; weight
  gradients, the same in every variant, are left out.
  """
  import jax
  import jax.numpy as jnp

  from jaxlab.lm import attention

  f32 = jnp.float32
  x = jax.ShapeDtypeStruct((1, seq_len, d_model), f32)
  wq, wk = (jax.ShapeDtypeStruct((d_model, n, head_dim), f32) for n in (heads, kv_heads))
  wo = jax.ShapeDtypeStruct((heads, head_dim, d_model), f32)
  pos = jnp.broadcast_to(jnp.arange(seq_len, dtype=jnp.int32), (1, seq_len))
  ident = lambda t, p: t  # RoPE is elementwise: it does not change the peak

  def layer(x, wq, wk, wv, wo):
    if impl == "upipe":
      kw = dict(mesh=mesh, rope=ident, upipe_chunks=chunks, block=block)
      return attention.upipe_attention(x, wq, wk, wv, wo, pos, **kw)
    q, k, v = (jnp.einsum("ble,ehd->blhd", x, w) for w in (wq, wk, wv))
    o = attention.attention(q, k, v, impl=impl, mesh=mesh, block=block)
    return jnp.einsum("blhd,hde->ble", o, wo)

  grad = jax.jit(jax.grad(lambda *a: jnp.sum(layer(*a)), argnums=0))
  return int(grad.lower(x, wq, wk, wk, wo).compile().memory_analysis().temp_size_in_bytes)
