"""Presets of `experiments.lm` (big_vision-style config file: ``--config=<this file>:<preset>``).

Each preset is `jaxlab.lm.config.get_config()` (every field and its meaning) with some fields
changed. Without an argument (or without --config) the config is that library default, the tiny
CPU run, which is also the preset ``tiny``:

  tiny   ~0.16M params, byte-level BPE (512 tokens) trained on the embedded Tiny Shakespeare
         excerpt, 300 steps of --mode=train: 31 s of CPU time (~30-40 s on an idle 2-core
         CPU), validation loss ~3.6 nats (perplexity ~37) at the end. The CPU preset.
  small  ~126M params (GPT-2-small-like, GQA, 32k vocab), bfloat16, 200 steps: for a GPU.
  1b     ~1.0B params (Llama-like, 18 layers, d_model 2048, GQA 16/8, 32k vocab), bfloat16,
         seq 2048, remat of non-batch matmuls kept: one H100/H200 (MFU target >= 50 %).
         Synthetic data (a throughput preset).
  pod    ~8B params (Llama-3-8B shape, 32k vocab), seq 8192: a pod, e.g.
         --mesh=fsdp:-1,tensor:4 (--config.attention=ring plus context:N for long contexts).
         Synthetic data unless --config.text names a large folder of .txt files.

Commands (from the repository root; CPU times on a shared 2-core box):

  python -m experiments.lm                                                  # tiny, ~35 s
  python -m experiments.lm --config=experiments/configs/lm.py:tiny          # the same run
  python -m experiments.lm --config=experiments/configs/lm.py:small         # GPU
  python -m experiments.lm --config=experiments/configs/lm.py:1b            # one H100/H200
  python -m experiments.lm --config=experiments/configs/lm.py:pod --mesh=fsdp:-1,tensor:4

Any field is overridden with ``--config.<field>=<value>``, e.g.
``--config.distill.losses=nll,hpd``.
"""

from __future__ import annotations

from jaxlab.lm import config as lm_config

PRESETS = ("tiny", "small", "1b", "pod")


def get_config(preset: str | None = None):
  """`jaxlab.lm.config.get_config()`, changed by ``preset`` (None or ``tiny``: unchanged)."""
  if preset not in (None, *PRESETS):
    raise ValueError(f"unknown preset {preset!r}; allowed: {', '.join(PRESETS)}")
  c = lm_config.get_config()
  if preset in (None, "tiny"):
    return c
  c.name = preset
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
