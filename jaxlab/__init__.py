"""jaxlab: a JAX-first research codebase for a set of ICML 2026 methods."""

__version__ = "0.1.0"

__all__ = [
  "__version__",
]
