"""Object-level consistency of long imagined rollouts (the study ``itc/objects``, docs/itc.md).

ITC's claim (Kim et al., arXiv 2605.16457) is about objects: an imagined object should not be
duplicated, vanish or turn into another object. Token accuracy and token histograms count every
cell, so ground tiles dominate them. Here every cell of a frame gets an OBJECT CLASS:

- real frames: from Craftax-Classic's state (:func:`cell_classes`): the block type of the cell
  in the 7 x 9 map view (``BlockType``, 0 .. 16), overdrawn in the renderer's order by the player
  (centre cell), zombies, cows, skeletons and arrows; the two inventory rows are ``INVENTORY``;
- imagined frames: tokens are nearest-neighbour codes of 7 x 7 pixel patches (`tokenizer`), and
  each code gets the MAJORITY class of the training patches encoded to it (:func:`code_classes`;
  a code no training patch is encoded to gets ``OUT_OF_BOUNDS``). Its purity (the fraction of
  training patches whose class is their code's class) is reported per world model.

Classes in :data:`GROUND` (grass, sand, path, out of bounds, invalid) are "nothing"; every other
class is an object. :func:`object_events` compares an imagined frame with the real one per object
class ``k``: real and imagined ``k``-cells are matched one to one within Chebyshev distance 1 (a
mob or the view moves at most one cell per step), maximising the matches and then preferring
cells in place. An unmatched real object whose cell holds an unmatched imagined object of another
class is TRANSMUTED; another unmatched real object has DISAPPEARED; an unmatched imagined object
not paired so is DUPLICATED (an extra copy or a spurious object). Rates per class and horizon
divide the events by the number of real objects of the class.

Rollouts are longer than the world model's context (``wm.max_blocks``): :func:`open_loop` slides
the context window (the last ``max_blocks`` frames; the positions are relative, so a shifted
window is what the model saw in training).

Decoders (:data:`DECODERS`), all from the SAME Gumbel noise per step (common random numbers):
``sample``, ``argmax``, ``itc`` (exact ITC, costs that allow moves: :func:`motion_itc`),
``itc_authors`` (exact ITC with the authors' Craftax-Classic costs: in-place persistence, see
docs/itc.md), ``keep_prev`` (keep the previous token where its perturbed probability is within
``tau`` of the sample's, on every map cell).
"""

from __future__ import annotations

import dataclasses
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.core.errors import require
from jaxlab.rl.itc import decode as decode_lib
from jaxlab.rl.itc import decoder_eval, imagine
from jaxlab.rl.itc import tokenizer as tok_lib

Array = jax.Array
# Craftax-Classic's BlockType values 0 .. 16, then the overdrawn entities and the inventory.
BLOCKS = (
  "invalid",
  "out_of_bounds",
  "grass",
  "water",
  "stone",
  "tree",
  "wood",
  "path",
  "coal",
  "iron",
  "diamond",
  "crafting_table",
  "furnace",
  "sand",
  "lava",
  "plant",
  "ripe_plant",
)
CLASSES = (*BLOCKS, "player", "zombie", "cow", "skeleton", "arrow", "inventory")
C = {name: i for i, name in enumerate(CLASSES)}
GROUND = (C["invalid"], C["out_of_bounds"], C["grass"], C["sand"], C["path"])
OBJECTS = tuple(i for i in range(len(CLASSES)) if i not in GROUND and i != C["inventory"])
MOBILE = (C["player"], C["zombie"], C["cow"], C["skeleton"], C["arrow"])
VIEW = (7, 9)  # Craftax-Classic's map view (rows, cols); the frame adds 2 inventory rows
EVENTS = ("disappeared", "transmuted", "duplicated")
DECODERS = ("sample", "argmax", "itc", "itc_authors", "keep_prev")


# --- classes of real frames and of codes ---


def cell_classes(env_state) -> Array:
  """``[N, 81]`` class per cell (row-major 9 x 9 grid, :data:`CLASSES`) of a batch of
  Craftax-Classic states, as its pixel renderer draws them (player, then zombies, cows,
  skeletons, arrows on top of the blocks)."""
  rows, cols = VIEW
  half = jnp.array([rows // 2, cols // 2])
  pad = max(VIEW) + 2

  def one(s):
    grid = jnp.pad(s.map, pad, constant_values=C["out_of_bounds"])
    view = jax.lax.dynamic_slice(grid, s.player_position - half + pad, VIEW).astype(jnp.int32)
    view = view.at[rows // 2, cols // 2].set(C["player"])
    for name in ("zombie", "cow", "skeleton", "arrow"):
      mobs = getattr(s, name + "s")
      local = mobs.position - s.player_position + half  # [M, 2]
      on = jnp.all((local >= 0) & (local < jnp.array(VIEW)), -1) & mobs.mask.astype(bool)
      # off-screen mobs write out of range and are dropped
      r = jnp.where(on, local[:, 0], rows)
      view = view.at[r, local[:, 1]].set(C[name], mode="drop")
    inv = jnp.full((2, cols), C["inventory"], jnp.int32)
    return jnp.concatenate([view, inv]).reshape(-1)

  return jax.vmap(one)(env_state)


def code_classes(tokens: np.ndarray, classes: np.ndarray, vocab: int) -> tuple[np.ndarray, float]:
  """``(class per code [vocab], purity)``: each code's majority class over the cells encoded to
  it (ties: the lower class index), ``OUT_OF_BOUNDS`` for codes no cell is encoded to; purity is
  the fraction of cells whose class equals their code's class."""
  tokens, classes = np.asarray(tokens).reshape(-1), np.asarray(classes).reshape(-1)
  counts = np.zeros((vocab, len(CLASSES)), np.int64)
  np.add.at(counts, (tokens, classes), 1)
  table = np.where(counts.sum(1) > 0, counts.argmax(1), C["out_of_bounds"])
  purity = float(np.mean(table[tokens] == classes)) if tokens.size else float("nan")
  return table.astype(np.int32), purity


# --- the object-level metric ---


def _match(real_cells: np.ndarray, imag_cells: np.ndarray, cols: int):
  """Maximum one-to-one matching within Chebyshev distance 1, then in place first: boolean
  masks of the matched real and imagined cells."""
  from scipy.optimize import linear_sum_assignment

  ry, rx = np.divmod(real_cells, cols)
  iy, ix = np.divmod(imag_cells, cols)
  d = np.maximum(np.abs(ry[:, None] - iy[None]), np.abs(rx[:, None] - ix[None]))
  # an allowed match costs -1 (-1.001 in place): the optimum has the most matches, then the
  # most in place; a forbidden pair costs 0, no better than leaving both unmatched
  cost = np.where(d <= 1, -1.0 - 0.001 * (d == 0), 0.0)
  r, i = linear_sum_assignment(cost)
  ok = cost[r, i] < 0
  rm, im = np.zeros(len(real_cells), bool), np.zeros(len(imag_cells), bool)
  rm[r[ok]], im[i[ok]] = True, True
  return rm, im


def object_events(real: np.ndarray, imagined: np.ndarray, cols: int = VIEW[1]) -> np.ndarray:
  """Events of one frame: ``[len(CLASSES), 4]`` = (real objects, disappeared, transmuted,
  duplicated) per class (module docstring). ``real`` and ``imagined``: classes of the map cells
  ``[rows * cols]`` (row-major)."""
  real, imagined = np.asarray(real), np.asarray(imagined)
  out = np.zeros((len(CLASSES), 4), np.int64)
  lost_real = np.zeros(real.shape, bool)  # unmatched real objects, by cell
  extra_imag = np.zeros(real.shape, bool)  # unmatched imagined objects, by cell
  for k in OBJECTS:
    rc, ic = np.flatnonzero(real == k), np.flatnonzero(imagined == k)
    out[k, 0] = len(rc)
    if len(rc) and len(ic):
      rm, im = _match(rc, ic, cols)
    else:
      rm, im = np.zeros(len(rc), bool), np.zeros(len(ic), bool)
    lost_real[rc[~rm]] = True
    extra_imag[ic[~im]] = True
  trans = lost_real & extra_imag  # a lost object where another class appeared: transmuted
  for cell in np.flatnonzero(lost_real):
    out[real[cell], 2 if trans[cell] else 1] += 1
  for cell in np.flatnonzero(extra_imag & ~trans):
    out[imagined[cell], 3] += 1
  return out


def event_counts(real: np.ndarray, imagined: np.ndarray) -> np.ndarray:
  """``[H, len(CLASSES), 4]`` events summed over windows: ``real, imagined`` classes of the map
  cells ``[W, H, rows * cols]``."""
  w, h = real.shape[:2]
  out = np.zeros((h, len(CLASSES), 4), np.int64)
  for t in range(h):
    for b in range(w):
      out[t] += object_events(real[b, t], imagined[b, t])
  return out


def rates(counts: np.ndarray, classes=OBJECTS) -> dict:
  """``{event: [H]}`` rates pooled over ``classes`` (events / real objects; None without real
  objects) and ``error`` (their sum) from :func:`event_counts`' output."""
  c = counts[:, list(classes)].sum(1)  # [H, 4]
  n = c[:, 0].astype(np.float64)
  out = {}
  for i, e in enumerate(EVENTS, 1):
    out[e] = [float(x / m) if m > 0 else None for x, m in zip(c[:, i], n)]
  out["error"] = [float(c[t, 1:].sum() / n[t]) if n[t] > 0 else None for t in range(len(n))]
  return out


# --- decoders and the sliding-window open loop ---


def motion_itc(cfg: decode_lib.ITCConfig, distance_coef: float) -> decode_lib.ITCConfig:
  """ITC costs under which a copy over one cell can beat generating: ``alpha_d < tau_trash``
  (docs/itc.md: with the authors' ``alpha_d >= tau_trash`` only in-place copies can win)."""
  require(
    distance_coef < cfg.trash_cost,
    "setting.motion_distance_coef",
    f"must be < config.itc.trash_cost={cfg.trash_cost} for ITC to copy across cells",
  )
  return dataclasses.replace(cfg, distance_coef=distance_coef)


def keep_prev(logits, prev, done, key, tau: float, mask) -> Array:
  """The previous token where ``p_j[c_j] >= p_j[t_j] - tau`` on the cells of ``mask`` in live
  episodes, else the sample ``t_j`` (``p = softmax(logits + gumbel)``: the noise of ``sample``)."""
  perturbed = logits + jax.random.gumbel(key, logits.shape, logits.dtype)
  proposal = jnp.argmax(perturbed, axis=-1).astype(jnp.int32)
  p = jax.nn.softmax(perturbed, axis=-1)
  p_prev = jnp.take_along_axis(p, prev[..., None], -1)[..., 0]
  p_best = jnp.take_along_axis(p, proposal[..., None], -1)[..., 0]
  keep = (p_prev >= p_best - tau) & mask[None] & ~done[:, None]
  return jnp.where(keep, prev, proposal).astype(jnp.int32)


def decoder_fns(itc_cfg, motion_cfg, tau: float, mask):
  """The branches of :data:`DECODERS`, each ``(logits, prev, done, key) -> tokens``."""
  d = decode_lib.decode
  return (
    lambda lg, p, dn, k: d(lg, p, dn, k, "sample", itc_cfg),
    lambda lg, p, dn, k: d(lg, p, dn, k, "argmax", itc_cfg),
    lambda lg, p, dn, k: d(lg, p, dn, k, "itc_hungarian", motion_cfg),
    lambda lg, p, dn, k: d(lg, p, dn, k, "itc_hungarian", itc_cfg),
    lambda lg, p, dn, k: keep_prev(lg, p, dn, k, tau, mask),
  )


def open_loop(wm_train, book, tokens0, actions, done0, key, branches, index) -> Array:
  """Tokens ``[B, T, L]`` imagined after ``tokens0`` under ``actions [B, T]`` (any ``T``: the
  context slides over the last ``max_blocks`` frames), decoded by ``branches[index]``."""
  wm = wm_train.model_def
  b, t_len = actions.shape
  m = wm.cfg.max_blocks
  ctx_t = jnp.zeros((b, m, tokens0.shape[-1]), jnp.int32)
  ctx_a = jnp.zeros((b, m), jnp.int32)

  def step(c, t):
    ctx_t, ctx_a, tokens, done_prev = c
    k_wm, k_dec = jax.random.split(jax.random.fold_in(key, t))
    full = t >= m
    ctx_t = jnp.where(full, jnp.roll(ctx_t, -1, axis=1), ctx_t)
    ctx_a = jnp.where(full, jnp.roll(ctx_a, -1, axis=1), ctx_a)
    pos = jnp.minimum(t, m - 1)
    ctx_t = jax.lax.dynamic_update_index_in_dim(ctx_t, tokens, pos, 1)
    ctx_a = jax.lax.dynamic_update_index_in_dim(ctx_a, actions[:, t], pos, 1)
    logits, _, done = imagine._wm_step(wm, wm_train.params, book, ctx_t, ctx_a, pos, k_wm)
    nxt = jax.lax.switch(index, branches, logits, tokens, done_prev, k_dec)
    return (ctx_t, ctx_a, nxt, done), nxt

  _, out = jax.lax.scan(step, (ctx_t, ctx_a, tokens0, done0), jnp.arange(t_len))
  return jnp.swapaxes(out, 0, 1)


# --- the evaluation ---


@dataclasses.dataclass(frozen=True)
class Setting:
  """Random play, world-model training and the long imagination of ``itc/objects``."""

  envs: int = 16  # environments of the random play (training and held-out alike)
  steps: int = 256  # random-play steps per environment
  tok_passes: int = 2  # tokenizer growth calls per 16-step chunk of the play
  wm_updates: int = 1000  # world-model steps
  heldout_skip: int = 16  # held-out windows start at this step and every stride steps after
  window_stride: int = 50
  horizon: int = 20  # imagined steps (any length: the context slides)
  motion_distance_coef: float = 0.1  # alpha_d of the `itc` arm (the authors': 0.6)
  tau: float = 0.3  # keep_prev's margin (the authors' tau_trash)


def collect(env, key: Array, steps: int) -> dict:
  """`decoder_eval.collect` plus ``classes [N, steps, 81]`` of each recorded frame's state."""
  return decoder_eval.collect(env, key, steps, record=_record_classes)


def _record_classes(state) -> dict:
  return {"classes": cell_classes(state.env).astype(jnp.int8)}


def windows(data: dict, horizon: int, skip: int, stride: int) -> dict:
  """Windows of ``horizon + 1`` frames starting at ``skip, skip + stride, ...`` in every
  environment, without an episode reset inside: ``obs, classes [W, H + 1, ...]``, ``action``."""
  t = data["action"].shape[1]
  starts = list(range(skip, t - horizon, stride))
  require(bool(starts), "setting.heldout_skip", "leaves no held-out window; lower it")
  take = lambda x, k: np.concatenate([np.asarray(x[:, s : s + k]) for s in starts], 0)  # noqa: E731
  out = {
    "obs": take(data["obs"], horizon + 1),
    "classes": take(data["classes"], horizon + 1),
    "action": take(data["action"], horizon),
  }
  clean = ~take(data["reset"], horizon + 1)[:, 1:].any(1)  # a new episode is not a prediction
  return {k: v[clean] for k, v in out.items()}


def teacher_forced_accuracy(wm, book, obs, actions, cfg) -> Array:
  """Token accuracy of the argmax next-frame prediction, teacher-forced on the first
  ``max_blocks + 1`` frames of ``obs [W, >= max_blocks + 1, ...]`` (uint8)."""
  m = cfg.wm.max_blocks
  tokens = tok_lib.encode(book, obs[:, : m + 1].astype(jnp.float32) / 255.0, cfg.tokenizer)
  logits, _, _ = wm.model_def.apply({"params": wm.params}, tokens[:, :-1], actions[:, :m])
  return jnp.mean(jnp.argmax(logits, -1) == tokens[:, 1:])


class Evaluator:
  """The compiled stages of one ``(config, setting)``; :meth:`seed` evaluates one world-model
  seed with every decoder (world model trained once, kept in ``wm_dir``)."""

  def __init__(self, config, setting: Setting, wm_dir, log=print):
    from jaxlab.envs import craftax
    from jaxlab.rl.itc import config as config_lib

    s = self.setting = setting
    require(s.horizon >= 1, "setting.horizon", "must be >= 1")
    require(s.tau >= 0, "setting.tau", "must be >= 0")
    self.cfg = cfg = config_lib.dyna_config(config_lib.validate_config(config))
    decoder_eval.validate(
      config, dataclasses.replace(decoder_eval.Setting(), horizon=1), ("sample",)
    )
    self.wm_dir = pathlib.Path(wm_dir)
    self.log = log
    self.env = craftax.make(config.env, s.envs, config.ppo.reset_ratio, field="config.env")
    motion = motion_itc(cfg.itc, s.motion_distance_coef)
    rows, cols = cfg.itc.grid
    mask = jnp.asarray(decoder_eval.map_mask(cfg.itc.grid, cfg.itc.inventory_rows))
    branches = decoder_fns(cfg.itc, motion, s.tau, mask)
    self.collect = jax.jit(collect, static_argnums=(0, 2))
    self.grow = jax.jit(lambda d: decoder_eval.grow_codebook(d, cfg, s.tok_passes))
    self.train = jax.jit(lambda d, b, k: decoder_eval.train_world_model(d, b, cfg, s.wm_updates, k))
    self.encode = jax.jit(
      lambda b, x: tok_lib.encode(b, x.astype(jnp.float32) / 255.0, cfg.tokenizer)
    )
    self.accuracy = jax.jit(lambda w, b, o, a: teacher_forced_accuracy(w, b, o, a, cfg))

    def imagine_all(wm, book, tokens0, acts, key):
      done0 = jnp.zeros((tokens0.shape[0],), bool)
      one = lambda i: open_loop(wm, book, tokens0, acts, done0, key, branches, i)  # noqa: E731
      return jax.lax.map(one, jnp.arange(len(DECODERS), dtype=jnp.int32))

    self.imagine = jax.jit(imagine_all)
    held = self.collect(self.env, jax.random.key(decoder_eval._HELDOUT_SEED), s.steps)
    self.windows = windows(held, s.horizon, s.heldout_skip, s.window_stride)
    self.map_cells = (rows - cfg.itc.inventory_rows) * cols
    log(f"held-out: {self.windows['action'].shape[0]} windows of {s.horizon} steps")

  def seed(self, seed: int) -> dict:
    """``{decoder: {"rates": {class: {event: [H]}}, "counts": [H][class][4]}, "real_tokens":
    the same for the real frames' own tokens, "world_model": {...}}``."""
    out = self.wm_dir / f"seed_{seed}"
    out.mkdir(parents=True, exist_ok=True)
    k_data, k_wm, k_img = jax.random.split(jax.random.key(seed), 3)
    data = self.collect(self.env, k_data, self.setting.steps)
    book = self.grow(data)
    wm, book, train_metrics = decoder_eval.trained_world_model(self, out, seed, data, book, k_wm)
    vocab = self.cfg.wm.vocab_size
    table, purity = code_classes(
      np.asarray(self.encode(book, data["obs"])), np.asarray(data["classes"]), vocab
    )
    win = self.windows
    acc = float(self.accuracy(wm, book, jnp.asarray(win["obs"]), jnp.asarray(win["action"])))
    real_tok = np.asarray(self.encode(book, jnp.asarray(win["obs"])))  # [W, H + 1, L]
    t0 = time.perf_counter()
    imagined = np.asarray(
      self.imagine(wm, book, jnp.asarray(real_tok[:, 0]), jnp.asarray(win["action"]), k_img)
    )  # [decoders, W, H, L]
    seconds = {"imagine_seconds": time.perf_counter() - t0}
    cells = self.map_cells
    real_cls = win["classes"][:, 1:, :cells].astype(np.int64)
    res = {}
    for name, toks in [*zip(DECODERS, imagined), ("real_tokens", real_tok[:, 1:])]:
      counts = event_counts(real_cls, table[toks[..., :cells]])
      res[name] = {
        "objects": rates(counts),
        "mobile": rates(counts, MOBILE),
        "class": {CLASSES[k]: rates(counts, (k,)) for k in OBJECTS},
        "real_objects": counts[:, :, 0].sum(0).tolist(),
        "token_acc": np.mean(toks == real_tok[:, 1:], axis=(0, 2)).tolist(),
      }
    res["world_model"] = {
      **train_metrics,
      "heldout_token_acc": acc,
      "codebook_size": int(book.size),
      "code_class_purity": purity,
      "windows": int(win["action"].shape[0]),
      **seconds,
    }
    self.log(
      f"seed {seed}: token acc {acc:.3f}, purity {purity:.3f}, "
      + ", ".join(f"{d} err@H {res[d]['objects']['error'][-1]:.3f}" for d in DECODERS)
    )
    return res
