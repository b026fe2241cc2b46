"""Language-model components.

* `model`: decoder-only transformer (RMSNorm, RoPE, SwiGLU, GQA), logical-axis sharded.
* `attention`: dense and context-parallel causal attention (allgather, ring, ulysses, upipe).
* `train`: LM state, next-token loss, ``update(state, batch, key)``, sharded init.
* `distill`: HPD loss (exact port) and the forward/reverse-KL family.
* `routed_memory`: ARM-like routed memory layer (a reconstruction).
* `capacity`: memorisation-capacity probe (bits/parameter on random bitstrings).
"""
