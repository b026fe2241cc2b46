"""Environments of the RL methods: one vectorised interface (``vec``), its gymnax and Craftax
adapters, and OGBench's offline data sets and evaluation (``ogbench``, ``ogbench_generate``, with
the small embedded cube-single set in ``data/``). See docs/online_envs.md and docs/ogbench.md."""

__all__ = [
  "craftax",
  "gymnax",
  "ogbench",
  "ogbench_generate",
  "vec",
]
