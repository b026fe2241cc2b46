"""ITC (Identifiable Token Correspondence, arXiv 2605.16457) on a transformer world model agent.

Modules: `tokenizer` (nearest-neighbour patch codebook), `world_model` (`jaxlab.lm`'s
transformer blocks, block-causal, over frame tokens and actions), `decode` (sample / argmax / ITC
decoding), `imagine` (imagined rollouts), `buffer` (replay), `dyna` (the Dyna loop on the core
runtime); the real vs imagined frames PNG is `jaxlab.core.plots.frames`. See docs/itc.md.
"""
