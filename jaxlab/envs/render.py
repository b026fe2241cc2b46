"""Frames of the online environments drawn in ``jnp``, so an evaluation rollout renders inside jit.

Each renderer maps ONE environment's state to ``uint8[H, W, 3]``; :mod:`jaxlab.envs.gymnax` and
:mod:`jaxlab.envs.craftax` vmap them into ``VecEnv.render`` (``uint8[N, H, W, 3]``). CartPole is
rasterised here (cart, pole, track: the picture of gym's ``render``, smaller); MinAtar frames are
its observation channels coloured one per channel; Craftax uses craftax's own pixel renderer at
its agent block size (7 pixels per block for Craftax-Classic, 10 for Craftax).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

CARTPOLE_SIZE = (48, 72)  # H, W
MINATAR_SCALE = 5  # pixels per MinAtar cell: 10 x 10 cells -> 50 x 50


def _segment_distance(py, px, y0, x0, y1, x1):
  """Distance of every pixel centre to the segment (y0, x0)-(y1, x1)."""
  dy, dx = y1 - y0, x1 - x0
  t = jnp.clip(((py - y0) * dy + (px - x0) * dx) / (dy * dy + dx * dx + 1e-9), 0.0, 1.0)
  return jnp.hypot(py - (y0 + t * dy), px - (x0 + t * dx))


def cartpole(state, x_threshold: float = 2.4, pole_length: float = 1.0) -> jnp.ndarray:
  """gymnax CartPole state (``x``, ``theta``) -> ``uint8[48, 72, 3]``: track, cart, pole."""
  h, w = CARTPOLE_SIZE
  py, px = jnp.meshgrid(jnp.arange(h) + 0.5, jnp.arange(w) + 0.5, indexing="ij")
  scale = w / (2.0 * x_threshold * 1.1)  # pixels per world unit; the track spans 91 % of W
  track_y = 0.78 * h
  cx = w / 2.0 + state.x * scale
  cart_w, cart_h = 0.5 * scale, 0.3 * scale
  cart = (jnp.abs(px - cx) <= cart_w / 2) & (py >= track_y - cart_h) & (py <= track_y)
  top = track_y - cart_h
  tip_x = cx + pole_length * scale * jnp.sin(state.theta)
  tip_y = top - pole_length * scale * jnp.cos(state.theta)
  pole = _segment_distance(py, px, top, cx, tip_y, tip_x) <= 1.2
  track = jnp.abs(py - track_y - 0.5) <= 0.5
  img = jnp.ones((h, w, 3), jnp.float32)
  img = jnp.where(track[..., None], jnp.array([0.0, 0.0, 0.0]), img)
  img = jnp.where(cart[..., None], jnp.array([0.1, 0.1, 0.1]), img)
  img = jnp.where(pole[..., None], jnp.array([0.8, 0.6, 0.4]), img)
  return (img * 255).astype(jnp.uint8)


# one colour per MinAtar channel (cycled when a game has more channels)
_PALETTE = np.array(
  [
    [31, 119, 180],
    [255, 127, 14],
    [44, 160, 44],
    [214, 39, 40],
    [148, 103, 189],
    [140, 86, 75],
    [227, 119, 194],
    [188, 189, 34],
    [23, 190, 207],
    [127, 127, 127],
  ],
  np.uint8,
)


def minatar(obs, scale: int = MINATAR_SCALE) -> jnp.ndarray:
  """A MinAtar observation ``[10, 10, C]`` (booleans) -> ``uint8[10 s, 10 s, 3]``: each cell
  the colour of its highest set channel, black where none is set."""
  c = obs.shape[-1]
  palette = jnp.asarray(np.concatenate([np.zeros((1, 3), np.uint8), _PALETTE[np.arange(c) % 10]]))
  index = jnp.max(jnp.where(obs > 0, jnp.arange(1, c + 1), 0), axis=-1)
  img = palette[index]
  return jnp.repeat(jnp.repeat(img, scale, axis=0), scale, axis=1)


def craftax(classic: bool):
  """craftax's pixel renderer (one state -> ``uint8[H, W, 3]``) at the agent block size; the
  texture atlas is loaded (built once) on the first call."""
  from jaxlab.envs import craftax as craftax_envs

  craftax_envs.prepare_textures(classic)
  if classic:
    from craftax.craftax_classic.constants import BLOCK_PIXEL_SIZE_AGENT
    from craftax.craftax_classic.renderer import make_craftax_pixel_renderer

    render = make_craftax_pixel_renderer(BLOCK_PIXEL_SIZE_AGENT)
  else:
    from craftax.craftax.constants import BLOCK_PIXEL_SIZE_AGENT
    from craftax.craftax.renderer import make_craftax_pixel_renderer

    render = make_craftax_pixel_renderer(BLOCK_PIXEL_SIZE_AGENT, do_night_noise=False)

  def frame(state):
    return jnp.clip(render(state), 0, 255).astype(jnp.uint8)

  return frame


def mujoco_episodes(env, policy_fn, episodes: int, seed: int, max_steps: int, stride: int = 2):
  """Frames of ``episodes`` episodes of a MuJoCo (OGBench) environment rendered off-screen with
  ``env.render()`` (the backend in ``$MUJOCO_GL``, :func:`jaxlab.core.videos.mujoco_gl`),
  episode i reset with ``seed + i`` as in ``jaxlab.envs.ogbench.evaluate``, at most
  ``max_steps`` steps, every ``stride``-th pixel kept. MuJoCo steps on the host, so this is the
  one Python loop over an episode that videos add. Returns ``(uint8[E, T, H, W, 3], lengths[E])``
  (a shorter episode repeats its last frame)."""
  act_dim = int(np.prod(env.action_space.shape))
  clips, lengths = [], []
  for i in range(episodes):
    ob, _ = env.reset(seed=seed + i)
    frames = [np.asarray(env.render())[::stride, ::stride, :3]]
    for _ in range(max_steps):
      action = np.clip(np.asarray(policy_fn(np.asarray(ob, np.float32)[None])), -1, 1)
      ob, _, terminated, truncated, _ = env.step(action.reshape(act_dim))
      frames.append(np.asarray(env.render())[::stride, ::stride, :3])
      if terminated or truncated:
        break
    clips.append(np.stack(frames))
    lengths.append(len(frames) - 1)
  t = max(len(c) for c in clips)
  clips = [np.concatenate([c, np.repeat(c[-1:], t - len(c), axis=0)]) for c in clips]
  return np.stack(clips).astype(np.uint8), np.asarray(lengths)
