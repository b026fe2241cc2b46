"""Evaluation videos: GIF files in the workdir, TensorBoard image summaries, frames drawn in JAX
(CartPole, MinAtar, Craftax), PPO's jitted video rollout over seeds, MuJoCo off-screen."""

import json
import struct

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from PIL import Image, ImageSequence
from programs import run_program

from jaxlab.core import runtime, videos
from jaxlab.envs import render, vec


def _gif(path):
  im = Image.open(path)
  return [np.asarray(f.convert("RGB")) for f in ImageSequence.Iterator(im)]


def _events(folder):
  """Every (step, tag, image bytes) of the image summaries in a TensorBoard folder."""
  from tensorboardX.proto import event_pb2

  out = []
  for path in sorted(folder.glob("events.out.tfevents.*")):
    data = path.read_bytes()
    i = 0
    while i < len(data):
      (n,) = struct.unpack("<Q", data[i : i + 8])
      event = event_pb2.Event.FromString(data[i + 12 : i + 12 + n])
      i += 12 + n + 4
      for v in event.summary.value:
        if v.HasField("image"):
          out.append((event.step, v.tag, v.image.encoded_image_string))
  return out


def test_grid_trim_and_gif_round_trip(tmp_path):
  rng = np.random.default_rng(0)
  clips = rng.integers(0, 255, (2, 3, 6, 8, 10, 3), dtype=np.uint8)  # seeds x episodes x T
  frames = videos.grid(videos.trim(clips, np.array([[2, 3, 1], [0, 2, 2]])))
  assert frames.shape == (4, 2 * 8 + 2, 3 * 10 + 4, 3)  # longest clip (3 steps) + 1 frame
  np.testing.assert_array_equal(frames[:, 10:18, 12:22], clips[1, 1, :4])
  assert (frames[:, 8:10] == 128).all()  # the separator
  path = videos.write_gif(tmp_path / "v" / "a.gif", frames)
  back = _gif(path)
  assert len(back) == 4 and back[0].shape == frames.shape[1:]
  assert videos.to_uint8(np.ones((1, 2, 2, 3), np.float32)).max() == 255
  with pytest.raises(ValueError, match="rows, cols"):
    videos.grid(np.zeros((2, 3, 3)))


def _run(tmp_path, video_fn, **loop_kw):
  def update(state, batch, key):
    return {"w": state["w"] + 1.0}, {"loss": jnp.sum(state["w"])}

  loop = runtime.Loop(8, log_every=2, ckpt_every=4, eval_every=2, progress=False, **loop_kw)
  return runtime.train(
    {"w": jnp.zeros(2)},
    update,
    loop,
    key=jax.random.key(0),
    workdir=tmp_path,
    eval_fn=lambda s, step: {"r": float(step)},
    video_fn=video_fn,
  )


def test_runtime_writes_gifs_at_video_points_and_tensorboard_images(tmp_path):
  seen = []

  def video_fn(state, step):
    seen.append((step, float(state["w"][0])))
    return np.full((3, 6, 5, 3), step * 20, np.uint8)

  _run(tmp_path, video_fn, video_every=4)
  assert seen == [(4, 4.0), (8, 8.0)]  # rendered from the state at that step
  names = sorted(p.name for p in (tmp_path / "videos").iterdir())
  assert names == ["eval_4.gif", "eval_8.gif"]
  assert _gif(tmp_path / "videos" / "eval_8.gif")[0][0, 0, 0] == 160
  images = _events(tmp_path / "tb")
  assert [(s, t) for s, t, _ in images] == [(4, "eval/video"), (8, "eval/video")]
  assert images[1][2] == (tmp_path / "videos" / "eval_8.gif").read_bytes()


def test_no_video_fn_writes_no_videos(tmp_path):
  _run(tmp_path, None)
  assert not (tmp_path / "videos").exists()


def test_cartpole_frame_follows_the_state():
  from jaxlab.envs.gymnax import import_gymnax

  env, params = import_gymnax().make("CartPole-v1")
  _, state = env.reset(jax.random.key(0), params)
  frame = lambda **kw: np.asarray(render.cartpole(state.replace(**kw)))
  upright, left, tilted = frame(x=0.0, theta=0.0), frame(x=-1.5, theta=0.0), frame(theta=0.5)
  assert upright.shape == (*render.CARTPOLE_SIZE, 3) and upright.dtype == np.uint8
  pole = lambda f: np.argwhere((f == [204, 153, 102]).all(-1))  # the pole's colour
  assert abs(pole(upright)[:, 1].mean() - 36) < 1.5  # centred
  assert pole(left)[:, 1].mean() < 20  # the cart moved left
  assert pole(tilted)[:, 1].max() > pole(upright)[:, 1].max() + 5  # leans right


def test_minatar_and_cartpole_vec_envs_render_in_jit():
  for name, shape in (("cartpole", (*render.CARTPOLE_SIZE, 3)), ("breakout-minatar", (50, 50, 3))):
    env = vec.make(name, 3)
    _, state = env.reset(jax.random.key(1))
    frames = jax.jit(env.render)(state)
    assert frames.shape == (3, *shape) and frames.dtype == jnp.uint8
    assert len(np.unique(np.asarray(frames))) > 1
  assert vec.make("pendulum", 1).render is None


@pytest.fixture(scope="module")
def ppo_run(tmp_path_factory):
  """The library's PPO run over two vmapped seeds with 2 video episodes (a tiny CartPole)."""
  from jaxlab.rl import ppo

  config = _tiny_config()
  config.num_envs, config.num_steps, config.eval_envs, config.eval_steps = 4, 8, 2, 30
  config.total_timesteps = 2 * 4 * 8
  wd = tmp_path_factory.mktemp("ppo")
  loop = runtime.Loop(2, log_every=1, progress=False, plot=False, video_every=1)
  out = ppo.train_run(config, "cartpole", "mlp", loop, seeds=(0, 1), workdir=wd, videos=2)
  return wd, out


@pytest.mark.slow
def test_ppo_writes_a_grid_of_seeds_by_episodes(ppo_run):
  wd, _ = ppo_run
  assert sorted(p.name for p in (wd / "videos").iterdir()) == ["eval_1.gif", "eval_2.gif"]
  frames = _gif(wd / "videos" / "eval_2.gif")
  h, w = render.CARTPOLE_SIZE
  assert frames[0].shape == (2 * h + 2, 2 * w + 2, 3)  # 2 seeds x 2 episodes
  assert 2 <= len(frames) <= 31  # cut after the longest episode (eval_steps = 30)


def test_ppo_video_rollout_freezes_after_the_episode():
  from jaxlab.rl import ppo
  from jaxlab.rl.ppo import evaluation

  env = vec.make("cartpole", 3)
  policy = ppo.make_policy("mlp", env, _tiny_config())
  obs = jnp.zeros((1, 3, *env.obs_shape))
  params = policy.init(jax.random.key(0), policy.initial_carry(3), obs, jnp.zeros((1, 3), bool))
  frames, lengths = evaluation.make_video(env, policy, 60)(params["params"], jax.random.key(3))
  frames, lengths = np.asarray(frames), np.asarray(lengths)
  assert frames.shape == (3, 60, *render.CARTPOLE_SIZE, 3)
  i = int(np.argmin(lengths))
  assert lengths[i] < 60  # an untrained policy drops the pole
  assert (frames[i, lengths[i] :] == frames[i, lengths[i] - 1]).all()
  assert not (frames[i, lengths[i] - 1] == frames[i, 0]).all()  # it moved before


def _tiny_config():
  from jaxlab.rl import ppo

  config = ppo.gymnax_config()
  config.mlp.hidden = (8,)
  return config


@pytest.mark.slow
def test_ppo_program_writes_videos_by_default_and_videos_0_turns_them_off(tmp_path):
  args = ["--env=cartpole", "--steps=2", "--config.num_envs=4", "--config.num_steps=8"]
  args += ["--config.eval_envs=2", "--config.eval_steps=20", "--config.mlp.hidden=(8,)"]
  r = run_program("experiments.ppo", [*args, f"--workdir={tmp_path / 'on'}"], tmp_path)
  assert r.returncode == 0, r.stderr[-2000:]
  assert (tmp_path / "on" / "videos" / "eval_2.gif").exists()
  r = run_program(
    "experiments.ppo", [*args, "--videos=0", f"--workdir={tmp_path / 'off'}"], tmp_path
  )
  assert r.returncode == 0, r.stderr[-2000:]
  assert not (tmp_path / "off" / "videos").exists()
  assert json.loads((tmp_path / "off" / "summary.json").read_text())["eval/return"] > 0
  r = run_program(
    "experiments.ppo", [*args, "--videos=-1", f"--workdir={tmp_path / 'x'}"], tmp_path
  )
  assert r.returncode == 2 and r.stderr.strip().startswith("error: --videos"), r.stderr


@pytest.mark.slow
def test_craftax_classic_frames_from_its_renderer():
  env = vec.make("craftax-classic-symbolic", 2)
  _, state = env.reset(jax.random.key(0))
  frames = np.asarray(jax.jit(env.render)(state))
  assert frames.dtype == np.uint8 and frames.shape[0] == 2 and frames.shape[-1] == 3
  assert frames.shape[1] >= 63 and frames.std() > 10  # textured, not blank


def test_uhm_mujoco_video_or_one_line_skip(tmp_path):
  """OGBench through MuJoCo's off-screen renderer; skipped where this machine has none."""
  if not videos.mujoco_renders():
    pytest.skip(f"MuJoCo cannot render off-screen here (MUJOCO_GL={videos.mujoco_gl()})")
  from jaxlab.envs import ogbench as og

  env = og.make_env(og.DEFAULT_ENV_NAME)
  act = lambda o: np.zeros((1, int(np.prod(env.action_space.shape))), np.float32)
  frames, lengths = render.mujoco_episodes(env, act, 1, 0, 2)
  assert frames.shape[:2] == (1, 3) and frames.dtype == np.uint8 and list(lengths) == [2]
  assert frames.std() > 5  # a scene, not a blank buffer
  path = videos.write_gif(tmp_path / "u.gif", videos.grid(frames))
  assert len(_gif(path)) == 3


@pytest.mark.slow
def test_uhm_program_writes_a_mujoco_video(tmp_path):
  """experiments.uhm at tiny size with --videos=1 (its default where a GPU or OSMesa renders)."""
  if not videos.mujoco_renders():
    pytest.skip(f"MuJoCo cannot render off-screen here (MUJOCO_GL={videos.mujoco_gl()})")
  small = ["--config.actor_hidden_dims=(32,32)", "--config.value_hidden_dims=(32,32)"]
  small += ["--config.model_hidden_dims=(32,32)", "--config.reward_hidden_dims=(32,)"]
  small += ["--config.batch_size=32", "--config.flow_steps=2", "--config.k_max=4"]
  args = ["--steps=2", "--log_every=1", "--eval_episodes=1", "--eval_every=0", "--videos=1"]
  wd = tmp_path / "wd"
  r = run_program(
    "experiments.uhm",
    [*args, *small, f"--workdir={wd}"],
    tmp_path,
    env={"MUJOCO_GL": videos.mujoco_gl()},
    drop=("XLA_FLAGS",),
    timeout=600,
  )
  assert r.returncode == 0, r.stderr[-3000:]
  frames = _gif(wd / "videos" / "eval_2.gif")
  assert 2 <= len(frames) <= 51 and frames[0].shape == (100, 100, 3)
