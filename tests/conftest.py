"""Every test sees 8 simulated CPU devices, so each parallel path is checked against 1 device."""

import os
import tempfile

os.environ["XLA_FLAGS"] = (
  os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# The programs the tests start share one compilation cache for this test run (the xdist workers
# inherit the folder), not the user's.
os.environ.setdefault("JAXLAB_COMPILE_CACHE", tempfile.mkdtemp(prefix="jaxlab-test-xla-"))
os.environ.setdefault("MUJOCO_GL", "egl")

import jax  # noqa: E402  (must come after XLA_FLAGS)

jax.config.update("jax_threefry_partitionable", True)
