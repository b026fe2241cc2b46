"""jaxlab's foundation: one mesh vocabulary, logical sharding, multi-host start, training runtime.

``experiment`` (absl flags) is not imported here so that notebooks can use the core without flags.
"""

from jaxlab.core import distributed, mesh, runtime, sharding  # noqa: F401
from jaxlab.core.mesh import make_mesh  # noqa: F401
