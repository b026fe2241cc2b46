"""Language-model components (overview and commands: docs/lm.md).

* `model`: decoder-only transformer (RMSNorm, RoPE, SwiGLU, GQA), logical-axis sharded.
* `attention`: blockwise (flash-style) causal attention and context-parallel variants
  (allgather, ring, ulysses, upipe).
* `train`: optimizer, next-token loss, sharded `TrainState` creation, ``update(state, batch, key)``,
  ``eval_metrics`` (validation loss / perplexity).
* `tokenizer`: byte-level BPE (Hugging Face `tokenizers`, trained offline or loaded) or raw bytes.
* `shards`: document-level train/validation split, uint16 shards on disk, memory-mapped stream.
* `data`: synthetic Markov corpus, held-out split, the streaming loader (position checkpointed).
* `generate`: autoregressive sampling (greedy or temperature) from a trained state.
* `flops`: training FLOPs per token, device peaks, tokens/s + MFU meter.
* `distill`: HPD loss (exact port), the forward/reverse-KL family, the student update.
* `capacity`: memorisation-capacity probe (bits/parameter on random bitstrings).
* `routed_memory`: ARM-like routed memory layer (a reconstruction).
"""
