"""Evaluation videos: frames -> a GIF in the workdir and the run's tracker (TensorBoard or W&B).

A program's evaluation renders a few short episodes (``--videos=N`` episodes per seed, 0 = none)
and :func:`jaxlab.core.runtime.train` writes them as ``<workdir>/videos/eval_<step>.gif`` at the
evaluation points its ``Loop.video_every`` selects (and the last one). Environments that render in
JAX (Craftax's pixel renderer, CartPole and MinAtar rasterised in ``jnp``) produce the frames
inside the jitted evaluation rollout (:func:`jaxlab.rl.ppo.evaluation.make_video`); MuJoCo
(OGBench) renders off-screen (:func:`mujoco_gl`). Several seeds or episodes are laid out as a
grid (:func:`grid`: one row per seed, one column per episode). GIFs are written with Pillow, which
every install has (matplotlib depends on it); MP4 would need an ffmpeg writer and is not produced.
"""

from __future__ import annotations

import ctypes.util
import io
import os
import pathlib
import sys

import numpy as np

FPS = 15
VIDEO_DIR = "videos"
TAG = "eval/video"
_said: set[str] = set()


def say_once(message: str) -> None:
  """One printed line per distinct message and process (e.g. why a run has no videos)."""
  if message not in _said:
    _said.add(message)
    print(f"[jaxlab] {message}", file=sys.stderr, flush=True)


def to_uint8(frames) -> np.ndarray:
  """Frames as uint8 RGB: floats are read as [0, 1] (or [0, 255] when any value exceeds 1)."""
  a = np.asarray(frames)
  if a.dtype == np.uint8:
    return a
  a = a.astype(np.float32)
  if a.size and float(np.nanmax(a)) <= 1.0:
    a = a * 255.0
  return np.clip(np.nan_to_num(a), 0, 255).astype(np.uint8)


def grid(frames, pad: int = 2) -> np.ndarray:
  """``[rows, cols, T, H, W, 3]`` (or ``[cols, T, H, W, 3]``) -> ``[T, H', W', 3]``: the clips
  side by side, separated by ``pad`` grey pixels."""
  a = to_uint8(frames)
  if a.ndim == 5:
    a = a[None]
  if a.ndim != 6 or a.shape[-1] != 3:
    raise ValueError(f"frames must be [rows, cols, T, H, W, 3], got shape {a.shape}")
  rows, cols, t, h, w, _ = a.shape
  out = np.full((t, rows * (h + pad) - pad, cols * (w + pad) - pad, 3), 128, np.uint8)
  for r in range(rows):
    for c in range(cols):
      out[:, r * (h + pad) : r * (h + pad) + h, c * (w + pad) : c * (w + pad) + w] = a[r, c]
  return out


def gif_bytes(frames, fps: int = FPS) -> bytes:
  """``[T, H, W, 3]`` frames as an animated GIF (looping)."""
  from PIL import Image

  a = to_uint8(frames)
  images = [Image.fromarray(f) for f in a]
  buf = io.BytesIO()
  images[0].save(
    buf,
    format="GIF",
    save_all=True,
    append_images=images[1:],
    duration=max(20, int(1000 / fps)),
    loop=0,
  )
  return buf.getvalue()


def write_gif(path: str | os.PathLike, frames, fps: int = FPS) -> pathlib.Path:
  """Writes ``[T, H, W, 3]`` frames to ``path`` atomically (a reader never sees half a GIF)."""
  path = pathlib.Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
  tmp.write_bytes(gif_bytes(frames, fps))
  os.replace(tmp, path)
  return path


def path_for(workdir: str | os.PathLike, step: int) -> pathlib.Path:
  return pathlib.Path(workdir) / VIDEO_DIR / f"eval_{step}.gif"


def trim(frames: np.ndarray, lengths) -> np.ndarray:
  """``[..., T, H, W, 3]`` cut after the longest episode (``lengths``: steps of each clip), plus
  one frame: the rest only repeats the clips' last frames."""
  t = int(np.max(np.asarray(lengths))) + 1 if np.size(lengths) else frames.shape[-4]
  return frames[..., : max(1, min(t, frames.shape[-4])), :, :, :]


def mujoco_gl() -> str | None:
  """The off-screen OpenGL backend MuJoCo should use, set in ``$MUJOCO_GL`` (before MuJoCo is
  imported): the one already set, else ``egl`` on a machine with an NVIDIA GPU, else ``osmesa``
  where its library is installed; None (one printed line) where none exists."""
  chosen = os.environ.get("MUJOCO_GL")
  if chosen:
    return chosen
  if os.path.exists("/dev/nvidiactl") and ctypes.util.find_library("EGL"):
    chosen = "egl"
  elif ctypes.util.find_library("OSMesa"):
    chosen = "osmesa"
    os.environ.setdefault("PYOPENGL_PLATFORM", "osmesa")
  else:
    say_once("no MuJoCo off-screen renderer (EGL on a GPU, or OSMesa): no evaluation videos")
    return None
  os.environ["MUJOCO_GL"] = chosen
  return chosen


_MUJOCO_OK: list[bool] = []


def mujoco_renders() -> bool:
  """Whether MuJoCo renders off-screen here (one sphere, 8 x 8 pixels; checked once per process,
  one printed line when it does not): a backend can be named and still fail, e.g. EGL without a
  GPU driver."""
  if not _MUJOCO_OK:
    ok = mujoco_gl() is not None
    if ok:
      try:
        import mujoco

        xml = '<mujoco><worldbody><geom type="sphere" size=".1"/></worldbody></mujoco>'
        model = mujoco.MjModel.from_xml_string(xml)
        data = mujoco.MjData(model)
        renderer = mujoco.Renderer(model, 8, 8)
        mujoco.mj_forward(model, data)
        renderer.update_scene(data)
        renderer.render()
        renderer.close()
      except Exception as e:
        ok = False
        name = os.environ.get("MUJOCO_GL")
        say_once(
          f"MuJoCo cannot render off-screen (MUJOCO_GL={name}: {type(e).__name__}): no videos"
        )
    _MUJOCO_OK.append(ok)
  return _MUJOCO_OK[0]


NO_MUJOCO_RENDERER = (
  "no GPU or OSMesa for MuJoCo's off-screen renderer: no evaluation videos "
  "(--videos=1 renders on the CPU, about 0.2 s a frame)"
)


def mujoco_by_default() -> bool:
  """Whether a program renders MuJoCo videos without being asked (``--videos`` unset): with an
  NVIDIA GPU (EGL) or OSMesa. EGL without a GPU driver renders in software at about 0.2 CPU-s a
  frame, a fifth of a CPU run's evaluation budget, so there ``--videos=N`` asks for them."""
  gpu = os.path.exists("/dev/nvidiactl") and ctypes.util.find_library("EGL")
  return bool(gpu or ctypes.util.find_library("OSMesa"))
