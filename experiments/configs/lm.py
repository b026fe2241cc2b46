"""Presets of `experiments.lm` (big_vision-style config file: ``--config=<this file>:<preset>``).

Presets:
  tiny   ~0.16M params, byte-level BPE (512 tokens) trained on the embedded Tiny Shakespeare
         excerpt, 300 steps of --mode=train: 31 s of CPU time (~30-40 s on an idle 2-core
         CPU), validation loss ~3.6 nats (perplexity ~37) at the end (the default).
  small  ~126M params (GPT-2-small-like, GQA, 32k vocab), bfloat16, 200 steps: for a GPU.
  1b     ~1.0B params (Llama-like, 18 layers, d_model 2048, GQA 16/8, 32k vocab), bfloat16,
         seq 2048, remat of non-batch matmuls kept: one H100/H200 (MFU target >= 50 %).
         Synthetic data (a throughput preset).
  pod    ~8B params (Llama-3-8B shape, 32k vocab), seq 8192: a pod, e.g.
         --mesh=fsdp:-1,tensor:4 (--config.attention=ring plus context:N for long contexts).
         Synthetic data unless --config.text names a large folder of .txt files.

Commands (from the repository root; CPU times on a shared 2-core box):
  python -m experiments.lm                                                  # tiny, ~35 s
  python -m experiments.lm --mode=generate                      # sample from its checkpoint
  python -m experiments.lm --config.text=path/to/folder         # every .txt file below it
  python -m experiments.lm --config.tokenizer=path/to/tokenizer.json        # a saved tokenizer
  python -m experiments.lm --config.text=README.md --config.tokenizer=bytes  # bytes of a file
  python -m experiments.lm --config=experiments/configs/lm.py:small          # GPU
  XLA_FLAGS=--xla_force_host_platform_device_count=8 JAX_PLATFORMS=cpu \\
    python -m experiments.lm --mesh=data:2,fsdp:2,context:2 --config.attention=ring
  python -m experiments.lm --mode=distill                                   # ~2 min
  python -m experiments.lm --mode=capacity                                  # ~1 min

Any field is overridden with ``--config.<field>=<value>``, e.g.
``--config.distill.losses=nll,hpd``.
"""

from __future__ import annotations

import ml_collections

PRESETS = ("tiny", "small", "1b", "pod")


def get_config(preset: str = "tiny") -> ml_collections.ConfigDict:
  """The ``preset`` (``tiny`` or ``small``) config of `experiments.lm`."""
  if preset not in PRESETS:
    raise ValueError(f"unknown preset {preset!r}; allowed: {', '.join(PRESETS)}")
  c = ml_collections.ConfigDict()
  c.preset = preset  # name of the preset (part of the default workdir)
  c.steps = 300  # default number of training steps (--steps overrides)

  # Model (jaxlab.lm.model.LMConfig).
  c.vocab_size = 512  # token ids: the BPE's size (bpe), >= the tokenizer's, or the Markov chain's
  c.d_model = 64  # residual width
  c.n_layers = 2  # transformer blocks
  c.n_heads = 4  # query heads
  c.n_kv_heads = 2  # key/value heads (GQA); must divide n_heads
  c.head_dim = 16  # per-head width (even: RoPE rotates pairs)
  c.mlp_dim = 192  # SwiGLU hidden width
  c.attention = "dense"  # dense | allgather | ring | ulysses | upipe (CP needs a context axis)
  c.upipe_chunks = 0  # UPipe head chunks (0: heads per device / context size)
  c.load_balance = True  # zigzag layout for causal ring/allgather context parallelism
  c.remat = "none"  # per-block jax.checkpoint policy: none | full | dots | dots_no_batch
  c.scan_layers = True  # nn.scan over blocks (compile time flat in depth)
  c.attention_block = 512  # query/key block of the blockwise (flash-style) attention kernel
  c.tie_embeddings = False  # share the input embedding with the output layer
  c.dtype = "float32"  # compute dtype: float32 | bfloat16 (params stay float32)

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

  if preset == "small":  # ~126M parameters: GPT-2-small-like with GQA and a 32k vocab
    c.vocab_size, c.d_model, c.n_layers, c.n_heads, c.n_kv_heads = 32768, 768, 12, 12, 4
    c.head_dim, c.mlp_dim, c.batch_size, c.seq_len, c.dtype = 64, 2048, 16, 1024, "bfloat16"
    c.corpus_tokens, c.steps, c.lr = 2_000_000, 200, 6e-4
  if preset == "1b":  # 18 x (12.6M attention + 34.6M SwiGLU) + 2 x 67M embeddings ~ 1.0B
    c.vocab_size, c.d_model, c.n_layers, c.n_heads, c.n_kv_heads = 32768, 2048, 18, 16, 8
    c.head_dim, c.mlp_dim, c.batch_size, c.seq_len, c.dtype = 128, 5632, 8, 2048, "bfloat16"
    c.remat, c.corpus_tokens, c.steps, c.lr, c.warmup = "dots_no_batch", 4_000_000, 100, 3e-4, 10
    c.text = "synthetic"  # a throughput preset: the embedded text is far too small for it
  if preset == "pod":  # Llama-3-8B shape with a 32k vocabulary
    c.vocab_size, c.d_model, c.n_layers, c.n_heads, c.n_kv_heads = 32768, 4096, 32, 32, 8
    c.head_dim, c.mlp_dim, c.batch_size, c.seq_len, c.dtype = 128, 14336, 256, 8192, "bfloat16"
    c.remat, c.corpus_tokens, c.steps, c.lr, c.warmup = "full", 8_000_000, 1000, 3e-4, 100
    c.text = "synthetic"  # point --config.text at a large folder of .txt files for real data
  return c
