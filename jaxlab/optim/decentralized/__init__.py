"""Decentralized SGD with heterogeneous node weights λ in L²(λ) (arXiv 2511.19513, ICML 2026).

Goal: min_x f(x) = Σ_i λ_i f_i(x) over a graph of n nodes. Two strategies:
  (I)  weighted local losses n λ_i f_i, doubly stochastic W (Metropolis);
  (II) original losses f_i, row-stochastic A with λᵀA = λᵀ and ΛA symmetric (self-adjoint in
       L²(λ)).

**What is the paper's and what is a substitute** (docs/decentralized.md). Only the paper's abstract
was public. The *problem*, the two *strategies* and the L²(λ) *geometry* (inner product, adjoint
Λ⁻¹BᵀΛ, λ-consensus error) are as the abstract states them. The update rules are the standard DSGD
forms (ATC/CTA, no gradient tracking); the λ-induced matrix is the standard λ-Metropolis–Hastings
(or degree averaging when λ ∝ degree+1), a **substitute** for the paper's unpublished
construction; the Rayleigh/Loewner diagnostic in `diagnose` is **a reconstruction**; the
least-squares heterogeneity model, the digits problems and the λ samplers are this codebase's
choices.

Usage (argument formats: a topology name and n; λ a positive (n,) array summing to 1; strategy
"I" or "II")::

    from jaxlab.optim import decentralized as dec
    g = dec.make_graph("erdos_renyi", 16, p=0.25, seed=0)
    lam = dec.make_lambda("degree", g)
    prob = dec.make_problem("least_squares", 16)
    res = dec.run("II", g, lam, prob, steps=2000, lr=0.01, key=jax.random.key(0))
    res.gap, res.consensus, res.x   # (steps,), (steps,), node iterates (n, d)
    res.diverged_at                 # None, or the first step whose metrics are NaN/inf

Distributed: ``run(..., mesh=make_mesh({"nodes": n}))`` puts node i on device i (`jax.shard_map`).
Seeds: ``run_seeds`` runs one strategy for several seeds (each its own problem instance, λ, step
and key) as ONE vmapped scan; seed k equals ``run`` of seed k alone.
Bad arguments raise :class:`jaxlab.core.errors.ConfigError` naming the argument.
"""

from __future__ import annotations

from jaxlab.optim.decentralized import compare, config, driver
from jaxlab.optim.decentralized.algorithms import (
  COMMS,
  ORDERS,
  STRATEGIES,
  DecState,
  canonical_strategy,
  choose_comm,
  init_state,
  metrics,
  mixing_and_scale,
  node_grads,
  ppermute_rounds,
  simulate,
  simulate_sharded,
  step_with_grads,
  update,
)
from jaxlab.optim.decentralized.config import get_config, validate_config
from jaxlab.optim.decentralized.driver import (
  RunResult,
  default_lr,
  run,
  run_seeds,
  stack_problems,
)
from jaxlab.optim.decentralized.geometry import (
  adjoint,
  comparison,
  consensus_error,
  consensus_factor,
  diagnose,
  inner,
  lam_norm,
  spectral_gap,
)
from jaxlab.optim.decentralized.graphs import (
  IRREGULAR,
  ROW_MIXINGS,
  TOPOLOGIES,
  Graph,
  check_mixing,
  complete,
  degree_average,
  degree_lambda,
  doubly_stochastic_residuals,
  erdos_renyi,
  exponential,
  hypercube,
  lambda_metropolis,
  make_graph,
  metropolis,
  ring,
  row_stochastic,
  row_stochastic_residuals,
  scaled_kernel,
  star,
  topology_error,
  torus,
)
from jaxlab.optim.decentralized.problems import (
  LAMBDAS,
  PROBLEMS,
  Problem,
  digits_logistic,
  digits_mlp,
  dirichlet_split,
  least_squares,
  make_lambda,
  make_problem,
  parse_lambda,
)

__all__ = [
  "compare",
  "config",
  "driver",
  "get_config",
  "validate_config",
  "run",
  "run_seeds",
  "stack_problems",
  "RunResult",
  "default_lr",
  "COMMS",
  "ORDERS",
  "STRATEGIES",
  "TOPOLOGIES",
  "IRREGULAR",
  "PROBLEMS",
  "LAMBDAS",
  "ROW_MIXINGS",
  "DecState",
  "Graph",
  "Problem",
  "adjoint",
  "canonical_strategy",
  "check_mixing",
  "choose_comm",
  "complete",
  "exponential",
  "hypercube",
  "ring",
  "star",
  "torus",
  "comparison",
  "consensus_error",
  "consensus_factor",
  "degree_average",
  "degree_lambda",
  "diagnose",
  "digits_logistic",
  "digits_mlp",
  "dirichlet_split",
  "doubly_stochastic_residuals",
  "erdos_renyi",
  "init_state",
  "inner",
  "lam_norm",
  "lambda_metropolis",
  "least_squares",
  "make_graph",
  "make_lambda",
  "make_problem",
  "parse_lambda",
  "metrics",
  "metropolis",
  "mixing_and_scale",
  "node_grads",
  "ppermute_rounds",
  "row_stochastic",
  "row_stochastic_residuals",
  "scaled_kernel",
  "simulate",
  "simulate_sharded",
  "spectral_gap",
  "step_with_grads",
  "topology_error",
  "update",
]
