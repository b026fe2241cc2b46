"""Language-model components (overview and commands: docs/lm.md).

* `config`: ``get_config()``, the LM's defaults declared once (a comment per field), and
  ``validate_config(config, mode, mesh)``.
* `modes`: the four runs of ``python -m experiments.lm`` as functions (``train``, ``generate``,
  ``distill``, ``capacity``; ``prepare`` checks everything first), for notebooks and the program.
* `model`: decoder-only transformer (RMSNorm, RoPE, SwiGLU, GQA), logical-axis sharded;
  ``LMConfig.from_config(get_config(), **overrides)``.
* `attention`: blockwise (flash-style) causal attention and context-parallel variants
  (allgather, ring, ulysses, upipe).
* `train`: optimizer, next-token loss, sharded `TrainState` creation, ``update(state, batch, key)``,
  ``eval_metrics`` (validation loss / perplexity).
* `tokenizer`: byte-level BPE (Hugging Face `tokenizers`, trained offline or loaded) or raw bytes.
* `shards`: document-level train/validation split, uint16 shards on disk, memory-mapped stream.
* `data`: synthetic Markov corpus, held-out split, the streaming loader (position checkpointed).
* `generate`: autoregressive sampling (greedy or temperature) from a trained state.
* `memory`: the bytes a config needs, refused before allocation when they cannot fit.
* `flops`: training FLOPs per token, device peaks, tokens/s + MFU meter.
* `distill`: HPD loss (exact port), the forward/reverse-KL family, the student update.
* `capacity`: memorisation-capacity probe (bits/parameter on random bitstrings).
* `routed_memory`: ARM-like routed memory layer (a reconstruction).
"""

__all__ = [
  "attention",
  "capacity",
  "config",
  "data",
  "distill",
  "flops",
  "generate",
  "memory",
  "model",
  "modes",
  "routed_memory",
  "shards",
  "tokenizer",
  "train",
]
