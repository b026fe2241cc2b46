"""ITC world-model agent: imagination and world-model training throughput, decoding cost.

  python -m benchmarks.itc                      # tiny CPU shape (experiments/configs/itc.py:tiny)
  python -m benchmarks.itc --scale=cpu          # experiments/configs/itc.py:cpu shapes
  python -m benchmarks.itc --scale=paper        # the paper's shapes (itc.py:itc, a GPU run)
      [--batch=0] [--repeats=5] [--decodes=sample,itc,itc_hungarian]
      [--parts=imagination,world_model,decode,ppo]

On a GPU (sized for <= 90 s on an H200, estimated, not yet measured: two imagination and four
decoding programs compile, the host-side Hungarian figure is left out of (1); (4) is left out: at
the paper's sizes its unrolled call compiles 32 copies of the IMPALA gradient, and the unrolling
is a CPU-only setting):
  python -m benchmarks.itc --scale=paper --repeats=3 --decodes=sample,itc \
      --parts=imagination,world_model,decode
Its CPU form (tiny shapes, the same figures): the same command with --scale=tiny.

In one process, at the sizes of `experiments.itc` (``--scale``: the preset of that name, ``paper``:
the ``itc`` preset), random weights and a full codebook (throughput does not depend on what was
learned, except Sinkhorn's iteration count):
  (1) imagined tokens/s: one jitted `jaxlab.rl.itc.imagine.rollout` (IMPALA-RNN policy + world
      model re-run over its fixed context + decoding + codebook lookup), ``imag_batch`` rollouts
      of ``horizon`` steps, 81 tokens a frame, for each ``--decodes`` method; printed as a ratio
      against ``sample`` (independent sampling) in the same run;
  (2) world-model train steps/s: one `TrainState.apply_loss` step on ``wm_batch`` sequences of
      ``max_blocks + 1`` frames (block teacher forcing), and its tokens/s;
  (3) decoding alone: `decode.decode` on ``[imag_batch, 81, codebook]`` logits peaked on the
      previous frame's tokens (as a trained model's are) for sample, argmax, ITC (Sinkhorn +
      greedy rounding) and ITC-Hungarian (scipy on the host), as ms/call and ratio to sample.
  (4) PPO on one real rollout (``num_envs x num_steps`` frames, ``epochs x minibatches`` steps of
      the IMPALA-RNN policy) with the loops as ``lax.scan`` and unrolled (``PPOConfig.unroll``,
      what `experiments.itc` uses on CPU), printed as a ratio: XLA:CPU runs convolution
      gradients inside loops on a slow path (jax-ml/jax#12868).
Every figure: compile (first call) excluded and printed, then the median of ``--repeats`` timed
calls, each ended by ``block_until_ready``.
"""

from __future__ import annotations

import importlib.util
import statistics
import time

import jax
import jax.numpy as jnp
import optax
from absl import flags

from experiments.configs import itc as itc_configs
from jaxlab.core import experiment, resources
from jaxlab.core.train_state import TrainState
from jaxlab.rl import itc, ppo
from jaxlab.rl.itc import decode as decode_lib
from jaxlab.rl.itc import imagine
from jaxlab.rl.itc import tokenizer as tok_lib
from jaxlab.rl.itc import world_model as wm_lib

_SCALE = flags.DEFINE_enum(
  "scale", "tiny", ["tiny", "cpu", "paper"], "Shapes: the tiny, cpu or itc (paper) preset's."
)
_BATCH = flags.DEFINE_integer("batch", 0, "Imagined rollouts in parallel (0: the config's).")
_REPEATS = flags.DEFINE_integer("repeats", 5, "Timed calls per figure (median kept).")
PARTS = ("imagination", "world_model", "decode", "ppo")
_PARTS = flags.DEFINE_list("parts", list(PARTS), "Figures to measure: (1) .. (4) by name.")
_DECODES = flags.DEFINE_list(
  "decodes", ["sample", "itc", "itc_hungarian"], "Decoding methods of the imagination figure."
)
UNUSED_FLAGS = ("workdir", "ckpt_every", "keep", "mesh", "log_every", "profile", "steps", "seed")
NUM_ACTIONS = itc.NUM_ACTIONS  # Craftax-Classic
OBS = itc.FRAME


def _timed(fn, *args):
  """(compile + first call seconds, median steady seconds) of a jitted ``fn(*args)``."""
  t0 = time.perf_counter()
  jax.block_until_ready(fn(*args))
  first = time.perf_counter() - t0
  times = []
  for _ in range(_REPEATS.value):
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    times.append(time.perf_counter() - t0)
  return first, statistics.median(times)


def shapes():
  """The config of `experiments.itc` at ``--scale`` (preset ``itc``) and the batch."""
  c = itc_configs.get_config({"paper": "itc"}.get(_SCALE.value, _SCALE.value))
  return c, _BATCH.value or c.imag_batch


def check_batch(c, batch: int) -> None:
  """``--batch``: int32 and the bytes of its largest arrays (imagined start frames, the decoding
  figure's logits), refused before allocation."""
  resources.check_int32("batch", batch)
  frames = batch * (c.burn_in + 1) * itc.FRAME[0] * itc.FRAME[1] * itc.FRAME[2] * 4
  logits = 3 * batch * c.itc.num_dummy * c.tokenizer.codebook_size * 4
  resources.check_fits(frames + logits, "batch", "the imagined start frames and decoding logits")


def build(c, batch: int, key):
  """(policy train state, world-model train state, full random codebook, ITC config)."""
  k_p, k_w, k_b = jax.random.split(key, 3)
  policy = itc.make_policy(c, NUM_ACTIONS)
  carry = policy.initial_carry(batch)
  obs = jnp.zeros((1, batch) + OBS)
  p_params = policy.init(k_p, carry, obs, jnp.ones((1, batch), bool))["params"]
  cfg = itc.dyna_config(c)
  wm_cfg, tok_cfg, itc_cfg = cfg.wm.validate(), cfg.tokenizer, cfg.itc.validate()
  wm = wm_lib.WorldModel(wm_cfg)
  tokens = jnp.zeros((1, wm_cfg.max_blocks, wm_cfg.tokens_per_frame), jnp.int32)
  w_params = wm.init(k_w, tokens, jnp.zeros((1, wm_cfg.max_blocks), jnp.int32))["params"]
  size = tok_cfg.codebook_size
  codes = jax.random.uniform(k_b, (size, tok_cfg.patch_dim))
  book = tok_lib.Codebook(codes, jnp.int32(size))
  adam = optax.adam(c.ppo.lr)
  policy_train = TrainState.create(policy, p_params, adam)
  wm_train = TrainState.create(wm, w_params, optax.adam(c.wm_lr))
  return policy_train, wm_train, book, tok_cfg, itc_cfg


def bench_imagination(c, batch, methods, policy_train, wm_train, book, tok_cfg, itc_cfg, key):
  """(1): imagined tokens/s per decoding method, ratio to sampling (timed first)."""
  k_o, k_r = jax.random.split(key)
  start = {
    "obs": jax.random.uniform(k_o, (batch, c.burn_in + 1) + OBS),
    "reset": jnp.zeros((batch, c.burn_in + 1), bool),
    "done": jnp.zeros((batch,), bool),
  }
  tokens = batch * c.horizon * wm_train.model_def.cfg.tokens_per_frame
  print(f"(1) imagination: {batch} rollouts x {c.horizon} steps, burn-in {c.burn_in}")
  rates = {}
  for method in sorted(methods, key=lambda m: m != "sample"):

    def run(policy_train, wm_train, book, start, key, method=method):
      traj, _, last = imagine.rollout(
        policy_train,
        wm_train,
        book,
        start,
        key,
        horizon=c.horizon,
        method=method,
        itc_cfg=itc_cfg,
        tok_cfg=tok_cfg,
        max_blocks=c.wm.max_blocks,
      )
      return traj["reward"].sum() + last.sum()

    first, dt = _timed(jax.jit(run), policy_train, wm_train, book, start, k_r)
    rates[method] = tokens / dt
    ratio = f"   x{rates[method] / rates['sample']:.3f} of sample" if "sample" in rates else ""
    print(
      f"  {method:14s}: {rates[method]:12,.0f} imagined tokens/s  {dt * 1e3:9.1f} ms/rollout"
      f"   (compile+first {first:.1f} s){ratio}"
    )


def bench_world_model(c, wm_train, key):
  """(2): world-model train steps/s (one Adam step on a batch of sequences)."""
  cfg = wm_train.model_def.cfg
  k_t, k_a, k_r, k_d, k_l = jax.random.split(key, 5)
  b, t = c.wm_batch, c.wm.max_blocks
  batch = {
    "tokens": jax.random.randint(k_t, (b, t + 1, cfg.tokens_per_frame), 0, cfg.vocab_size),
    "actions": jax.random.randint(k_a, (b, t), 0, NUM_ACTIONS),
    "reward": jax.random.bernoulli(k_r, 0.1, (b, t)).astype(jnp.float32),
    "done": jax.random.bernoulli(k_d, 0.02, (b, t)),
  }

  @jax.jit
  def step(state, batch, key):
    state, metrics = state.apply_loss(wm_lib.loss, state.model_def, batch, key)
    return state, metrics["wm_loss"]

  first, dt = _timed(step, wm_train, batch, k_l)
  tokens = b * t * cfg.tokens_per_block
  print(
    f"(2) world model ({cfg.layers} layers, embed {cfg.embed}, context {t} x "
    f"{cfg.tokens_per_block} tokens, batch {b}): {1 / dt:8.1f} train steps/s, "
    f"{tokens / dt:12,.0f} tokens/s  (compile+first {first:.1f} s)"
  )


def bench_decode(c, batch, methods, itc_cfg, key):
  """(3): one decoding call per method on peaked synthetic logits, ratio to sampling."""
  n = itc_cfg.num_dummy
  k_p, k_l, k_d = jax.random.split(key, 3)
  prev = jax.random.randint(k_p, (batch, n), 0, c.tokenizer.codebook_size)
  noise = jax.random.normal(k_l, (batch, n, c.tokenizer.codebook_size))
  logits = noise + 4.0 * jax.nn.one_hot(prev, c.tokenizer.codebook_size)
  done = jnp.zeros((batch,), bool)
  print(f"(3) decoding alone: logits [{batch}, {n}, {c.tokenizer.codebook_size}]")
  base = None
  for method in methods:
    fn = jax.jit(lambda lg, p, d, k, m=method: decode_lib.decode(lg, p, d, k, m, itc_cfg))
    first, dt = _timed(fn, logits, prev, done, k_d)
    base = dt if method == "sample" else base
    print(
      f"  {method:14s}: {dt * 1e3:9.3f} ms/call   x{dt / base:8.2f} the cost of sample"
      f"   (compile+first {first:.1f} s)"
    )


def bench_ppo(c, policy_train, key):
  """(4): one PPO learn call on a real-size rollout, scanned vs unrolled loops."""
  t, n = c.ppo.num_steps, c.ppo.num_envs
  k_o, k_l = jax.random.split(key)
  traj = {
    "obs": jax.random.uniform(k_o, (t, n) + OBS),
    "reset": jnp.zeros((t, n), bool),
    "action": jnp.zeros((t, n), jnp.int32),
    "log_prob": jnp.full((t, n), -jnp.log(NUM_ACTIONS)),
    "value": jnp.zeros((t, n)),
    "reward": jnp.zeros((t, n)),
    "done": jnp.zeros((t, n), bool),
  }
  carry0 = policy_train.model_def.initial_carry(n)
  print(f"(4) PPO on one rollout: {n} envs x {t} steps, {c.ppo.epochs} x {c.ppo.minibatches} steps")
  times = {}
  for unroll in (True, False):  # the scanned call is the slow one on CPU: last
    cfg = ppo.PPOConfig.from_config(c.ppo, num_updates=1, unroll=unroll)
    fn = jax.jit(
      lambda tr, traj, k, cfg=cfg: ppo.learn(tr, traj, carry0, jnp.zeros(n), cfg, k)[1]["loss"]
    )
    first, times[unroll] = _timed(fn, policy_train, traj, k_l)
    print(
      f"  {'unrolled' if unroll else 'lax.scan':9s}: {times[unroll]:8.2f} s/call"
      f"   (compile+first {first:.1f} s)"
    )
  print(f"  unrolled is x{times[False] / times[True]:.1f} faster than lax.scan here")


def main(argv):
  del argv
  for name in UNUSED_FLAGS:
    experiment.require(not flags.FLAGS[name].present, name, "is not used by benchmarks.itc")
  experiment.require(_REPEATS.value >= 1, "repeats", f"must be >= 1, got {_REPEATS.value}")
  experiment.require(_BATCH.value >= 0, "batch", f"must be >= 0, got {_BATCH.value}")
  methods = experiment.check_list("decodes", _DECODES.value, decode_lib.METHODS)
  parts = experiment.check_list("parts", _PARTS.value, PARTS)
  c, batch = shapes()
  itc.validate_config(c)  # sizes and memory of the preset, before anything is compiled
  check_batch(c, batch)
  print(f"scale={_SCALE.value}  backend={jax.default_backend()}  ({jax.devices()[0].device_kind})")
  all_methods = list(decode_lib.METHODS)
  if importlib.util.find_spec("ott") is None:  # the Sinkhorn solve needs ott-jax
    print("ott-jax is not installed: the itc (Sinkhorn) figures are skipped")
    methods = [m for m in methods if m != "itc"]
    all_methods.remove("itc")
  k_b, k_i, k_w, k_d = jax.random.split(jax.random.key(0), 4)
  policy_train, wm_train, book, tok_cfg, itc_cfg = build(c, batch, k_b)
  if "imagination" in parts:
    bench_imagination(c, batch, methods, policy_train, wm_train, book, tok_cfg, itc_cfg, k_i)
  if "world_model" in parts:
    bench_world_model(c, wm_train, k_w)
  if "decode" in parts:
    bench_decode(c, batch, all_methods, itc_cfg, k_d)
  if "ppo" in parts:  # the policy at the real rollout's batch
    bench_ppo(c, build(c, c.ppo.num_envs, k_b)[0], k_i)


if __name__ == "__main__":
  experiment.run(main)
