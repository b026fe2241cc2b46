__all__ = [
  "dasbs",
  "energies",
  "evaluation",
  "exact",
  "exact_check",
  "losses",
  "mcmc",
  "metrics",
  "networks",
  "reference",
  "sampler",
]
