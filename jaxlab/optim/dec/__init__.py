"""Decentralized SGD with node weights λ (arXiv 2511.19513).

Public entry: `jaxlab.optim.decentralized`; notes in docs/decentralized.md.

Submodules: `graphs` (topologies, mixing matrices, property checks), `geometry` (L²(λ) and the
diagnostic), `problems` (least squares, digits logistic regression / MLP, λ distributions),
`algorithms` (both strategies, dense simulation and one-node-per-device `shard_map`), `compare`
(Strategy I vs II on one (graph, λ) and the verdicts the experiment reports).
"""
