"""Every test sees 8 simulated CPU devices, so each parallel path is checked against 1 device."""

import os
import pathlib

# envs/, experiments/, launch/ and benchmarks/ are run from a clone, not installed (see README,
# "Layout"): subprocesses started from a temporary directory find them through PYTHONPATH.
_ROOT = str(pathlib.Path(__file__).resolve().parents[1])
os.environ["PYTHONPATH"] = os.pathsep.join(
  p for p in (_ROOT, os.environ.get("PYTHONPATH", "")) if p
)

os.environ["XLA_FLAGS"] = (
  os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("MUJOCO_GL", "egl")

import jax  # noqa: E402  (must come after XLA_FLAGS)

jax.config.update("jax_threefry_partitionable", True)
