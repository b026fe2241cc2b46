"""Decoders on a fixed world model (docs/itc.md): ITC's claim is about decoding, so the world
model is held fixed and only the decoder changes. The study that uses it is ``itc/decoders``
(`jaxlab.studies.itc`).

For a world-model seed ``s``, with a :class:`Setting`:

1. ``envs`` Craftax-Classic environments play ``steps`` steps with uniformly random actions (seeded
   by ``s``); the tokenizer grows on those frames and the world model of ``config.wm`` trains
   ``wm_updates`` steps on replayed sequences of ``max_blocks + 1`` frames (`dyna`'s world-model
   step, without the agent). Codebook and weights are written to
   ``<wm_dir>/seed_<s>/world_model.msgpack``: a later evaluation reuses them.
2. The SAME held-out real trajectories for every seed (random play as in 1 under their own key;
   windows of ``horizon + 1`` frames starting every ``window_stride`` steps after
   ``heldout_skip``) are tokenized with seed ``s``'s codebook; from each window's first frame the
   world model imagines ``horizon`` steps open loop under the real actions (`imagine.open_loop`),
   decoded by every decoder asked for with the SAME random key (common random numbers: ``itc``
   corrects the very samples that ``sample`` returns, whichever decoders run together).
3. Against the real tokens at horizons ``1 .. H``: :func:`token_accuracy`, :func:`count_error`
   (the map's token histogram), :func:`flicker` (a token that changes and changes back), the
   real trajectories' own flicker as the reference.

One jitted program per stage (collection, growth, world-model training, imagination with the
decoders through ``lax.switch``), each compiled once per :class:`Evaluator` and reused by every
seed.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import time

import flax.serialization
import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxlab.core import metrics as metrics_lib
from jaxlab.core.errors import check_choice, require
from jaxlab.core.train_state import TrainState
from jaxlab.rl.itc import buffer as buffer_lib
from jaxlab.rl.itc import decode as decode_lib
from jaxlab.rl.itc import dyna, imagine
from jaxlab.rl.itc import tokenizer as tok_lib
from jaxlab.rl.itc import world_model as wm_lib

Array = jax.Array
METRICS = ("token_acc", "count_error", "flicker")
_HELDOUT_SEED = 1_000_003  # the held-out trajectories' key: the same for every world-model seed


# --- metrics (tested against loop-by-loop NumPy transcriptions in tests/test_itc.py) ---


def token_accuracy(imagined: Array, real: Array) -> Array:
  """``[B, H, L]`` tokens -> ``[H]``: fraction of positions equal to the real token."""
  return jnp.mean((imagined == real).astype(jnp.float32), axis=(0, 2))


def count_error(imagined: Array, real: Array, vocab: int, mask: Array) -> Array:
  """``[H]``: mean over frames of ``sum_k |n_k(imagined) - n_k(real)|``, ``n_k`` the number of
  positions in ``mask [L]`` holding token ``k`` (objects that appear, vanish or duplicate)."""
  hist = lambda x: jnp.sum(jax.nn.one_hot(x, vocab) * mask[:, None], axis=-2)  # [B, H, V]
  return jnp.mean(jnp.sum(jnp.abs(hist(imagined) - hist(real)), -1), axis=0)


def flicker(tokens: Array, first: Array) -> Array:
  """``[H]`` for ``tokens [B, H, L]`` after ``first [B, L]`` (frame 0): at horizon ``h`` the
  fraction of positions with ``x[h] != x[h-1]`` and ``x[h+1] == x[h-1]`` (a change undone one
  step later); the last horizon has no successor and is NaN."""
  x = jnp.concatenate([first[:, None], tokens], axis=1)  # [B, H + 1, L]
  blip = (x[:, 1:-1] != x[:, :-2]) & (x[:, 2:] == x[:, :-2])  # horizons 1 .. H - 1
  rate = jnp.mean(blip.astype(jnp.float32), axis=(0, 2))
  return jnp.concatenate([rate, jnp.full((1,), jnp.nan)])


# --- the stages ---


@dataclasses.dataclass(frozen=True)
class Setting:
  """The random play, the world model's training and the imagination of one evaluation."""

  envs: int = 16  # environments of the random play (training and held-out alike)
  steps: int = 256  # random-play steps per environment (training and held-out alike)
  tok_passes: int = 2  # tokenizer growth calls per 16-step chunk of the play
  wm_updates: int = 250  # world-model steps (wm_batch sequences of max_blocks + 1 frames)
  heldout_skip: int = 16  # held-out windows start at this step ...
  window_stride: int = 240  # ... and every stride steps after it
  horizon: int = 6  # imagined steps H (<= wm.max_blocks)


def validate(config, setting: Setting, decoders) -> Setting:
  """``setting`` and ``decoders`` checked against ``config`` (ConfigError naming the field)
  before anything is built."""
  s = setting
  for name in ("envs", "steps", "wm_updates", "window_stride", "tok_passes"):
    v = getattr(s, name)
    require(int(v) >= 1, f"setting.{name}", f"must be >= 1, got {v}")
  require(s.heldout_skip >= 0, "setting.heldout_skip", "must be >= 0")
  require(bool(decoders), "decoders", "name at least one decoder")
  for m in decoders:
    check_choice("decoders", m, decode_lib.METHODS)
  cap = config.wm.max_blocks
  require(
    1 <= s.horizon <= cap,
    "setting.horizon",
    f"must be in [1, wm.max_blocks={cap}], got {s.horizon}",
  )
  require(
    s.steps >= cap + 1,
    "setting.steps",
    f"must be >= wm.max_blocks + 1 = {cap + 1} (one training sequence)",
  )
  return s


def collect(env, key: Array, steps: int, record=None) -> dict:
  """``steps`` random-action steps of ``env``: batch-major ``obs`` (uint8, the frame each action
  was taken in), ``reset, action, reward, done`` ``[N, steps]``, and ``record(state)``'s arrays
  of the state each action was taken in (``record``: None or a function to a dict)."""
  k_reset, k_run = jax.random.split(key)
  obs, state = env.reset(k_reset)
  reset = jnp.ones((env.num_envs,), bool)

  def step(c, k):
    obs, state, reset = c
    k_a, k_e = jax.random.split(k)
    action = jax.random.randint(k_a, (env.num_envs,), 0, env.num_actions)
    extra = record(state) if record is not None else {}
    nxt, state, reward, done, _ = env.step(state, action, k_e)
    rec = dict(obs=buffer_lib.to_uint8(obs), reset=reset, action=action, reward=reward, done=done)
    return (nxt, state, done), {**rec, **extra}

  _, traj = jax.lax.scan(step, (obs, state, reset), jax.random.split(k_run, steps))
  return jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), traj)


def _replay(data: dict) -> buffer_lib.Replay:
  n, t = data["action"].shape
  return buffer_lib.Replay(
    obs=data["obs"],
    reset=data["reset"],
    action=data["action"].astype(jnp.int32),
    reward=data["reward"].astype(jnp.float32),
    done=data["done"],
    count=jnp.int32(t),
  )


def grow_codebook(data: dict, cfg: dyna.DynaConfig, passes: int) -> tok_lib.Codebook:
  """The codebook of ``data``'s frames: ``passes`` growth calls per time chunk of 16 steps."""
  obs = data["obs"]
  n, t = obs.shape[:2]
  chunk = min(16, t)
  frames = obs[:, : t // chunk * chunk].reshape((n, t // chunk, chunk) + obs.shape[2:])
  frames = jnp.swapaxes(frames, 0, 1).reshape((t // chunk, n * chunk) + obs.shape[2:])

  def one(book, f):
    f = f.astype(jnp.float32) / 255.0
    for _ in range(passes):  # passes is 1-2: the loop stays small
      book = tok_lib.grow(book, f, cfg.tokenizer)
    return book, None

  book, _ = jax.lax.scan(one, tok_lib.init(cfg.tokenizer), frames)
  return book


def init_world_model(cfg: dyna.DynaConfig, key: Array) -> TrainState:
  wm = wm_lib.WorldModel(cfg.wm)
  t = cfg.wm.max_blocks
  tokens = jnp.zeros((1, t, cfg.wm.tokens_per_frame), jnp.int32)
  params = wm.init(key, tokens, jnp.zeros((1, t), jnp.int32))["params"]
  tx = optax.chain(optax.clip_by_global_norm(cfg.wm_max_grad_norm), optax.adam(cfg.wm_lr))
  return TrainState.create(wm, params, tx)


def train_world_model(data: dict, book, cfg: dyna.DynaConfig, updates: int, key: Array):
  """``updates`` world-model steps on ``data`` (`dyna`'s step); returns (state, mean metrics)."""
  k_init, k_train = jax.random.split(key)
  wm = init_world_model(cfg, k_init)
  cfg = dataclasses.replace(cfg, wm_updates=updates)
  return dyna.train_world_model(wm, book, _replay(data), cfg, k_train)


def heldout_windows(data: dict, horizon: int, skip: int, stride: int) -> dict:
  """Windows of ``horizon + 1`` frames of every environment, starting at ``skip``, ``skip +
  stride``, ...: ``obs [W, H + 1, ...]`` (uint8) and the actions taken ``[W, H]``."""
  t = data["action"].shape[1]
  starts = list(range(skip, t - horizon, stride))
  require(bool(starts), "setting.heldout_skip", "leaves no held-out window; lower it")
  take = lambda x, k: jnp.concatenate([x[:, s : s + k] for s in starts], axis=0)
  return {"obs": take(data["obs"], horizon + 1), "action": take(data["action"], horizon)}


def imagine_all(wm, book, windows: dict, key: Array, cfg: dyna.DynaConfig, decoders) -> dict:
  """Per decoder: ``{metric: [H]}`` of the world model's open-loop imagination of ``windows``
  (same key for every decoder), and ``real_flicker``. One program: decoders by ``lax.switch``."""
  decoders = tuple(decoders)
  h = windows["action"].shape[1]
  obs = windows["obs"].astype(jnp.float32) / 255.0
  real = tok_lib.encode(book, obs, cfg.tokenizer)  # [W, H + 1, L]
  done0 = jnp.zeros((real.shape[0],), bool)
  mask = jnp.asarray(map_mask(cfg.itc.grid, cfg.itc.inventory_rows), jnp.float32)

  def metrics(index):
    out = imagine.open_loop(
      wm,
      book,
      real[:, 0],
      windows["action"],
      done0,
      key,
      method=index,
      itc_cfg=cfg.itc,
      choices=decoders,
    )
    return {
      "token_acc": token_accuracy(out, real[:, 1:]),
      "count_error": count_error(out, real[:, 1:], cfg.wm.vocab_size, mask),
      "flicker": flicker(out, real[:, 0]),
    }

  # One traced imagination for all decoders (`decode.decode` switches on a traced index), run
  # once per decoder: compile time does not grow with the number of decoders.
  index = jnp.arange(len(decoders), dtype=jnp.int32)
  stacked = jax.lax.map(metrics, index)
  res = {m: jax.tree.map(lambda x, i=i: x[i], stacked) for i, m in enumerate(decoders)}
  res["real"] = {"flicker": flicker(real[:, 1:], real[:, 0])}
  assert all(v.shape == (h,) for r in res.values() for v in r.values())
  return res


def map_mask(grid: tuple[int, int], inventory_rows: int) -> np.ndarray:
  """Positions of the map (every row above the inventory rows)."""
  rows, cols = grid
  return np.arange(rows * cols) < (rows - inventory_rows) * cols


# --- one evaluation per seed ---


def trained_world_model(evaluator, out: pathlib.Path, seed: int, data, book, key: Array):
  """``(world model, codebook, training metrics)`` of a seed: restored from
  ``out/world_model.msgpack`` when a run already trained it, else trained by ``evaluator.train``
  (its seconds recorded, the first seed's compile included) and kept there."""
  ckpt = out / "world_model.msgpack"
  if ckpt.exists():
    wm, book = _load(ckpt, init_world_model(evaluator.cfg, key), book)
    train_metrics = json.loads((out / "world_model.json").read_text())
    evaluator.log(f"seed {seed}: world model restored from {ckpt}")
    return wm, book, train_metrics
  t0 = time.perf_counter()
  wm, train_metrics = evaluator.train(data, book, key)
  train_metrics = {k: float(v) for k, v in train_metrics.items()}
  train_metrics["train_seconds"] = time.perf_counter() - t0
  _save(ckpt, wm, book)
  metrics_lib.write_json(out / "world_model.json", train_metrics)
  evaluator.log(f"seed {seed}: world model trained ({train_metrics}), codebook {int(book.size)}")
  return wm, book, train_metrics


def _save(path: pathlib.Path, wm: TrainState, book) -> None:
  blob = flax.serialization.to_bytes({"params": wm.params, "codes": book.codes, "size": book.size})
  tmp = path.with_suffix(".tmp")
  tmp.write_bytes(blob)
  tmp.replace(path)


def _load(path: pathlib.Path, wm: TrainState, book):
  like = {"params": wm.params, "codes": book.codes, "size": book.size}
  got = flax.serialization.from_bytes(like, path.read_bytes())
  return wm.replace(params=got["params"]), tok_lib.Codebook(got["codes"], got["size"])


class Evaluator:
  """The compiled stages of one ``(config, setting, decoders)``; :meth:`seed` evaluates one
  world-model seed (its world model trained once, then reused from ``wm_dir``)."""

  def __init__(self, config, setting: Setting, decoders, wm_dir, log=print):
    from jaxlab.envs import craftax
    from jaxlab.rl.itc import config as config_lib

    self.setting = validate(config, setting, decoders)
    self.cfg = cfg = config_lib.dyna_config(config_lib.validate_config(config))
    self.decoders = decoders = tuple(decoders)
    self.wm_dir = pathlib.Path(wm_dir)
    self.log = log
    s = setting
    self.env = craftax.make(config.env, s.envs, config.ppo.reset_ratio, field="config.env")
    self.collect = jax.jit(collect, static_argnums=(0, 2))
    self.grow = jax.jit(lambda d: grow_codebook(d, cfg, s.tok_passes))
    self.train = jax.jit(lambda d, b, k: train_world_model(d, b, cfg, s.wm_updates, k))
    self.imagine = jax.jit(lambda w, b, win, k: imagine_all(w, b, win, k, cfg, decoders))
    # Held-out play has the training play's shape, so one compiled collection serves both.
    held = self.collect(self.env, jax.random.key(_HELDOUT_SEED), s.steps)
    self.windows = heldout_windows(held, s.horizon, s.heldout_skip, s.window_stride)
    log(f"held-out: {self.windows['action'].shape[0]} windows of {s.horizon} steps")

  def seed(self, seed: int) -> dict:
    """``{decoder: {metric: [H]}, "real": {"flicker": [H]}, "codebook_size", "world_model"}``
    (a NaN metric, flicker at the last horizon, is None)."""
    out = self.wm_dir / f"seed_{seed}"
    out.mkdir(parents=True, exist_ok=True)
    k_data, k_wm, k_img = jax.random.split(jax.random.key(seed), 3)
    data = self.collect(self.env, k_data, self.setting.steps)
    book = self.grow(data)
    wm, book, train_metrics = trained_world_model(self, out, seed, data, book, k_wm)
    res = jax.device_get(self.imagine(wm, book, self.windows, k_img))
    nan = lambda x: None if np.isnan(x) else float(x)  # noqa: E731
    res = {m: {k: [nan(x) for x in v] for k, v in r.items()} for m, r in res.items()}
    res["codebook_size"] = int(book.size)
    res["world_model"] = train_metrics
    self.log(
      f"seed {seed}: " + ", ".join(f"{m} acc@1 {res[m]['token_acc'][0]:.3f}" for m in self.decoders)
    )
    return res
