"""The LM's defaults, declared once, and their validation (`python -m experiments.lm`).

`get_config` is the tiny CPU run (the program's default); the presets of
``experiments/configs/lm.py`` change fields of it. `jaxlab.lm.model.LMConfig.from_config` builds the
transformer from its model fields; `validate_config` checks everything a mode needs before anything
is written, raising `ConfigError` naming the field as the user types it (``config.lr``).
"""

from __future__ import annotations

import ml_collections

from jaxlab.core import mesh as mesh_lib
from jaxlab.core import sharding
from jaxlab.core.errors import ConfigError, check_choice, check_config, require
from jaxlab.lm import attention, capacity, distill, memory
from jaxlab.lm.model import LMConfig

MODES = ("train", "generate", "distill", "capacity")


def get_config() -> ml_collections.ConfigDict:
  """The tiny LM: ~0.16M params, byte-level BPE (512 tokens) on the embedded Tiny Shakespeare."""
  c = ml_collections.ConfigDict()
  c.name = "tiny"  # run name: the default workdir is runs/lm/<mode>/<name> (presets set theirs)
  c.steps = 300  # training steps (--steps overrides)

  # Model (jaxlab.lm.model.LMConfig.from_config reads these fields).
  c.vocab_size = 512  # token ids: the BPE's size (bpe), >= the tokenizer's, or the Markov chain's
  c.d_model = 64  # residual width
  c.n_layers = 2  # transformer blocks
  c.n_heads = 4  # query heads
  c.n_kv_heads = 2  # key/value heads (GQA); must divide n_heads
  c.head_dim = 16  # per-head width (even: RoPE rotates pairs)
  c.mlp_dim = 192  # SwiGLU hidden width
  c.rope_theta = 10000.0  # RoPE base (frequencies theta ** (-2i / head_dim)); finite, > 0
  c.attention = "dense"  # dense | allgather | ring | ulysses | upipe (CP needs a context axis)
  c.upipe_chunks = 0  # UPipe head chunks (0: heads per device / context size)
  c.load_balance = True  # zigzag layout for causal ring/allgather context parallelism
  c.remat = "none"  # per-block jax.checkpoint policy: none | full | dots | dots_no_batch
  c.scan_layers = True  # nn.scan over blocks (compile time flat in depth)
  c.attention_block = attention.BLOCK  # query/key block of the blockwise (flash) kernel (512)
  c.tie_embeddings = False  # share the input embedding with the output layer
  c.dtype = "float32"  # compute dtype: float32 | bfloat16 (params stay float32)
  # World-model options (jaxlab.lm.model docstring); these values leave the LM unchanged.
  c.block_size = 0  # 0: causal per token; k >= 1: block-causal over blocks of k tokens
  c.rope_mode = "1d"  # 1d | spatiotemporal (needs frame_shape and block_size >= rows x cols)
  c.frame_shape = (0, 0)  # (rows, cols) of a frame for spatio-temporal RoPE
  c.dropout = 0.0  # residual dropout probability in [0, 1) (train=True only)

  # Data and optimisation.
  c.text = "embedded"  # embedded (Tiny Shakespeare excerpt) | a .txt file | a folder | synthetic
  c.tokenizer = "bpe"  # bpe (trained on the training documents) | bytes | a tokenizer.json (folder)
  c.data_dir = ""  # tokenized shards and tokenizer; empty: <workdir>/data (reused on resume)
  c.shard_tokens = 1 << 20  # tokens per shard file
  c.corpus_tokens = 200_000  # synthetic corpus length in tokens (~0.2 s per 100k to generate)
  c.markov_alpha = 0.05  # Dirichlet concentration of the synthetic bigram chain (low = peaky)
  c.batch_size = 16  # sequences per step (split over the mesh's data x fsdp devices)
  c.seq_len = 64  # tokens per sequence (context parallelism: divisible by 2 x context)
  c.lr = 3e-3  # AdamW peak learning rate (linear warmup, cosine decay to lr / 10)
  c.warmup = 20  # linear warmup steps
  c.weight_decay = 0.0  # AdamW weight decay
  c.val_fraction = 0.05  # --mode=train: documents held out (synthetic: the tail) for validation
  c.val_batches = 4  # held-out batches scored at every evaluation
  c.peak_tflops = 0.0  # per-device peak for MFU; 0: by device kind (CPU: nominal 0.1)

  # --mode=distill: a teacher, then one student (this model) per objective, same data and steps.
  c.distill = ml_collections.ConfigDict()
  c.distill.losses = "nll,hpd,forward_kl"  # objectives compared: nll,hpd,forward_kl,reverse_kl
  c.distill.teacher_steps = 300  # teacher training steps
  c.distill.teacher_d_model = 128  # teacher width (its SwiGLU width is 3x this)
  c.distill.teacher_layers = 3  # teacher depth
  c.distill.eval_batches = 4  # held-out batches (batch_size each) scored after every log_every
  c.distill.heldout_fraction = 0.1  # documents (synthetic: the tail) never trained on

  # Sampling (end of --mode=train on one device, and --mode=generate from its checkpoint).
  c.generate = ml_collections.ConfigDict()
  c.generate.prompt = "ROMEO:"  # text the sample continues (after a document separator)
  c.generate.tokens = 64  # tokens sampled
  c.generate.temperature = 0.8  # 0: greedy

  # --mode=capacity: bits/parameter memorised on random bitstrings (arXiv 2505.24832).
  c.capacity = ml_collections.ConfigDict()
  c.capacity.d_models = "16,32"  # model widths swept (1 layer each; multiples of 16)
  c.capacity.num_strings = 128  # random bitstrings in the training set
  c.capacity.length = 32  # bits per string
  c.capacity.steps = 1500  # Adam steps per model (saturation needs far more)
  c.capacity.lr = 3e-3  # Adam learning rate (constant)
  return c


CHECKS = {
  "steps": "positive",
  "batch_size": "positive",
  "seq_len": "positive",
  "lr": "positive",
  "warmup": "nonneg",
  "weight_decay": "nonneg",
  "corpus_tokens": "positive",
  "markov_alpha": "positive",
  "peak_tflops": "nonneg",
  "val_fraction": "open_prob",
  "val_batches": "positive",
  "shard_tokens": "positive",
  "attention_block": "positive",
  "generate.tokens": "positive",
  "generate.temperature": "nonneg",
  "distill.teacher_steps": "positive",
  "distill.teacher_d_model": "positive",
  "distill.teacher_layers": "positive",
  "distill.eval_batches": "positive",
  "distill.heldout_fraction": "open_prob",
  "capacity.num_strings": "positive",
  "capacity.length": "positive",
  "capacity.steps": "positive",
  "capacity.lr": "positive",
}
# A teacher's fields come from config.distill: errors name the field the user sets.
TEACHER_FIELDS = {
  "config.d_model": "config.distill.teacher_d_model",
  "config.mlp_dim": "config.distill.teacher_d_model",
  "config.n_layers": "config.distill.teacher_layers",
}


def teacher_config(config, mesh=None) -> LMConfig:
  """The distillation teacher: the model with ``config.distill``'s width and depth."""
  d = config.distill.teacher_d_model
  try:
    cfg = LMConfig.from_config(
      config, d_model=d, n_layers=config.distill.teacher_layers, mlp_dim=3 * d
    )
    cfg.check_mesh(mesh, config.seq_len)
  except ConfigError as e:
    note = " (the teacher's mlp_dim is 3 x teacher_d_model)" if e.field == "config.mlp_dim" else ""
    raise ConfigError(TEACHER_FIELDS.get(e.field, e.field), e.message + note) from None
  return cfg


def parse_losses(field: str, losses) -> list[str]:
  """``"nll,hpd"`` -> ``["nll", "hpd"]``: at least one, each in `jaxlab.lm.distill.LOSSES`."""
  items = [v.strip() for v in losses.split(",")] if isinstance(losses, str) else list(losses)
  items = [v for v in items if v]
  bad = [v for v in items if v not in distill.LOSSES]
  if bad or not items:
    allowed = ", ".join(distill.LOSSES)
    raise ConfigError(field, f"got {','.join(bad) or 'nothing'}; allowed: {allowed}")
  return items


def validate_config(config, mode: str, mesh=None) -> ml_collections.FrozenConfigDict:
  """Every check of ``mode`` that needs no data (:func:`setup`); returns the checked config,
  frozen."""
  setup(config, mode, mesh)
  return ml_collections.FrozenConfigDict(config)


def setup(config, mode: str, mesh=None) -> dict:
  """Every check of ``mode`` that needs no data; returns the typed objects the mode needs.

  ``{"widths"}`` for capacity (a single-device probe: the LM's mesh is not used), else ``{"model"}``
  plus ``{"teacher", "losses"}`` for distill. The text itself is checked by
  `jaxlab.lm.modes.prepare`.
  """
  check_choice("mode", mode, MODES)
  check_config(config, CHECKS)
  losses = parse_losses("config.distill.losses", config.distill.losses)
  widths = capacity.parse_widths("config.capacity.d_models", config.capacity.d_models)
  model = LMConfig.from_config(config)
  if mode == "capacity":
    memory.check_capacity(config.capacity, widths)
    return {"widths": widths}
  model.check_mesh(mesh, config.seq_len)
  if mesh is not None:
    n = sharding.named_sharding(mesh, ("batch",)).num_devices
    require(
      config.batch_size % n == 0,
      "config.batch_size",
      f"{config.batch_size} is not divisible by the {n} devices of "
      f"the mesh's batch axes (--mesh={mesh_lib.format_mesh(dict(mesh.shape))})",
    )
  out = {"model": model}
  if mode == "distill":
    out.update(teacher=teacher_config(config, mesh), losses=losses)
  # Sizes that cannot fit are refused before anything is allocated (generate: on one device).
  devices = 1 if mesh is None or mode == "generate" else mesh.size
  memory.check_lm(config, model, mode, devices, out.get("teacher"))
  return out
