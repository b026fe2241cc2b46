"""What a run ran on: git commit (and dirty flag), library versions, devices, processes."""

from __future__ import annotations

import functools
import importlib.metadata
import pathlib
import subprocess

import jax

_PACKAGES = (
  "jaxlab",
  "jax",
  "jaxlib",
  "flax",
  "optax",
  "orbax-checkpoint",
  "numpy",
  "gymnax",
  "craftax",
  "ogbench",
  "mujoco",
)


def _git(*args: str) -> str | None:
  root = pathlib.Path(__file__).resolve().parents[2]
  try:
    out = subprocess.run(
      ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=5, check=True
    )
  except (OSError, subprocess.SubprocessError):
    return None
  return out.stdout.strip()


def package_versions(names) -> dict[str, str | None]:
  """Installed versions of ``names`` (None where a package is absent)."""
  versions = {}
  for name in names:
    try:
      versions[name] = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
      versions[name] = None
  return versions


@functools.lru_cache(maxsize=1)
def _static() -> dict:
  versions = package_versions(_PACKAGES)
  commit = _git("rev-parse", "HEAD")
  dirty = None if commit is None else bool(_git("status", "--porcelain", "--untracked-files=no"))
  return {"git_commit": commit, "git_dirty": dirty, "versions": versions}


def collect() -> dict:
  """A JSON-able record of the code, libraries and devices of this process."""
  devices = jax.devices()
  return {
    **_static(),
    "platform": devices[0].platform,
    "device_kind": devices[0].device_kind,
    "device_count": jax.device_count(),
    "local_device_count": jax.local_device_count(),
    "process_count": jax.process_count(),
    "process_index": jax.process_index(),
  }


def describe(mesh=None) -> str:
  """One start-up line: devices, processes, mesh, commit."""
  p = collect()
  mesh_txt = (
    ",".join(f"{k}:{v}" for k, v in dict(mesh.shape).items()) if mesh is not None else "none"
  )
  commit = (p["git_commit"] or "unknown")[:10] + ("+dirty" if p["git_dirty"] else "")
  cache = jax.config.jax_compilation_cache_dir or "off"
  return (
    f"[jaxlab] {p['device_count']} {p['platform']} device(s) ({p['device_kind']}), "
    f"{p['process_count']} process(es), mesh {mesh_txt}, jax {p['versions']['jax']}, "
    f"commit {commit}, compile cache {cache}"
  )


_announced = False


def announce(mesh=None) -> None:
  """Prints the `describe` start-up line once per process (process 0 only)."""
  global _announced
  if not _announced and jax.process_index() == 0:
    print(describe(mesh), flush=True)
  _announced = True
