"""Language-model experiments on the core runtime: train, distill (HPD vs baselines), capacity probe.

Commands (CPU times measured on a shared 2-core box; see the config docstrings):
  python -m experiments.lm --config=tiny                                  # synthetic Markov data
  python -m experiments.lm --config=tiny --text_file=README.md            # bytes of a text file
  python -m experiments.lm --config=tiny --mesh=data:2,fsdp:2,context:2 --config.attention=ring
      (simulated devices: XLA_FLAGS=--xla_force_host_platform_device_count=8 JAX_PLATFORMS=cpu)
  python -m experiments.lm --config=tiny --mode=distill --config.distill.losses=nll,hpd,forward_kl
  python -m experiments.lm --config=tiny --mode=capacity
  python -m experiments.lm --config=small ...                             # ~100M params (GPU)

``--config=NAME`` picks a preset (tiny, small); ``--config.field=value`` overrides fields.
Re-running with the same --workdir resumes from the latest checkpoint.
"""

from __future__ import annotations

import json
import math
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from absl import flags

from jaxlab.core import experiment, runtime, sharding as shd
from jaxlab.lm import attention as attn_lib
from jaxlab.lm import capacity as cap_lib
from jaxlab.lm import distill as distill_lib
from jaxlab.lm import train as T
from jaxlab.lm.model import LMConfig, Transformer, flops_per_token, param_count

PRESETS = ("tiny", "small")
MODES = ("train", "distill", "capacity")


def get_config(preset: str = "tiny") -> ml_collections.ConfigDict:
  """LM config. tiny: ~0.1M params, 300 steps, ~1-2 min on CPU. small: ~100M params (GPU)."""
  c = ml_collections.ConfigDict()
  c.preset = preset
  c.vocab_size = 256  # byte-level for --text_file; synthetic data uses the same vocab
  c.d_model = 64  # residual width
  c.n_layers = 2  # transformer blocks
  c.n_heads = 4  # query heads
  c.n_kv_heads = 2  # key/value heads (GQA); must divide n_heads
  c.head_dim = 16  # per-head width
  c.mlp_dim = 192  # SwiGLU hidden width
  c.attention = "dense"  # dense | allgather | ring | ulysses | upipe (CP needs a context axis)
  c.upipe_chunks = 0  # UPipe head chunks (0: heads per device / context size)
  c.load_balance = True  # zigzag layout for causal ring/allgather CP
  c.remat = False  # jax.checkpoint every block
  c.dtype = "float32"  # compute dtype (bfloat16 on GPU/TPU)
  c.batch_size = 16  # sequences per step (sharded over data x fsdp)
  c.seq_len = 64  # tokens per sequence (divisible by 2 x context for zigzag)
  c.lr = 3e-3  # AdamW peak learning rate
  c.warmup = 20  # linear warmup steps
  c.weight_decay = 0.0  # AdamW weight decay
  c.corpus_tokens = 200_000  # synthetic corpus length (tokens)
  c.markov_alpha = 0.05  # Dirichlet concentration of the synthetic bigram chain (low = peaky)
  c.peak_tflops = 0.0  # per-device peak for MFU; 0 = by device kind (CPU: nominal 0.1)
  c.steps = 300  # default number of steps (--steps overrides)

  c.distill = ml_collections.ConfigDict()
  c.distill.losses = (
    "nll,hpd,forward_kl"  # student objectives compared (nll,hpd,forward_kl,reverse_kl)
  )
  c.distill.teacher_steps = 300  # teacher training steps
  c.distill.teacher_d_model = 128  # teacher width (student uses d_model)
  c.distill.teacher_layers = 3  # teacher depth
  c.distill.eval_batches = 4  # held-out batches for student eval

  c.capacity = ml_collections.ConfigDict()
  c.capacity.d_models = "16,32"  # model widths swept (1 layer each)
  c.capacity.num_strings = 128  # random bitstrings in the training set
  c.capacity.length = 32  # bits per string
  c.capacity.steps = 1500  # Adam steps per model (saturation needs far more)
  c.capacity.lr = 3e-3  # Adam learning rate

  if preset == "small":  # ~100M parameters: GPT-2-small-like with GQA and a 32k vocab
    c.vocab_size, c.d_model, c.n_layers, c.n_heads, c.n_kv_heads = 32768, 768, 12, 12, 4
    c.head_dim, c.mlp_dim, c.batch_size, c.seq_len, c.dtype = 64, 2048, 16, 1024, "bfloat16"
    c.corpus_tokens, c.steps, c.lr = 2_000_000, 200, 6e-4
  return c


def _pop_preset(argv: list[str]) -> str:
  """Takes ``--config=NAME`` out of argv (config_dict flags take no value) and returns NAME."""
  preset = "tiny"
  for i, a in enumerate(list(argv)):
    if a.startswith("--config="):
      preset = a.split("=", 1)[1]
      if preset not in PRESETS:
        experiment.fail("config", f"unknown preset {preset!r}; allowed: {', '.join(PRESETS)}")
      argv.pop(i)
      break
  return preset


_CONFIG = experiment.define_config(get_config(_pop_preset(sys.argv)))
flags.DEFINE_enum(
  "mode",
  "train",
  MODES,
  "train: LM training; distill: teacher then students "
  "(HPD vs baselines); capacity: bits/parameter probe on random bitstrings.",
)
flags.DEFINE_string(
  "text_file",
  None,
  "Train on the bytes of this local text file (vocab 256) instead of synthetic Markov data.",
)
FLAGS = flags.FLAGS


def model_config(c, **over) -> LMConfig:
  fields = {
    f: c[f]
    for f in (
      "vocab_size",
      "d_model",
      "n_layers",
      "n_heads",
      "n_kv_heads",
      "head_dim",
      "mlp_dim",
      "attention",
      "upipe_chunks",
      "load_balance",
      "remat",
      "dtype",
    )
  }
  fields.update(over)
  return LMConfig(**fields)


def synthetic_corpus(key, n_tokens: int, vocab: int, alpha: float) -> np.ndarray:
  """A stationary sparse bigram Markov chain: learnable structure with a known entropy floor."""
  kt, ks = jax.random.split(key)
  trans = np.asarray(jax.random.dirichlet(kt, jnp.full((vocab,), alpha), (vocab,)), np.float64)
  trans /= trans.sum(-1, keepdims=True)
  rng = np.random.default_rng(int(jax.random.randint(ks, (), 0, 2**31 - 1)))
  cdf = np.cumsum(trans, -1)
  u = rng.random(n_tokens)
  out = np.empty(n_tokens, np.int32)
  t = 0
  for i in range(n_tokens):
    t = min(int(np.searchsorted(cdf[t], u[i])), vocab - 1)
    out[i] = t
  return out


def load_corpus(c, key) -> np.ndarray:
  if FLAGS.text_file:
    return np.frombuffer(pathlib.Path(FLAGS.text_file).read_bytes(), np.uint8).astype(np.int32)
  return synthetic_corpus(key, c.corpus_tokens, c.vocab_size, c.markov_alpha)


def sample_windows(corpus, key, batch: int, seq_len: int, mesh=None):
  """Random windows of seq_len + 1 tokens (inputs and shifted targets)."""
  starts = jax.random.randint(key, (batch,), 0, corpus.shape[0] - seq_len - 1)
  tokens = jax.vmap(lambda s: jax.lax.dynamic_slice(corpus, (s,), (seq_len + 1,)))(starts)
  return {"tokens": shd.constrain(tokens, ("batch", None), mesh)}


def peak_flops(c) -> tuple[float, str]:
  if c.peak_tflops > 0:
    return c.peak_tflops * 1e12, "config"
  kind = jax.devices()[0].device_kind.lower()
  table = {"h200": 989, "h100": 989, "a100": 312, "v5p": 459, "v5": 197, "v4": 275, "l4": 121}
  for k, v in table.items():
    if k in kind:
      return v * 1e12, kind
  return 0.1e12, f"{kind} (nominal 0.1 TFLOP/s)"


def validate(c, run):
  experiment.check_config(
    c,
    {
      "attention": list(attn_lib.IMPLS),
      "dtype": ["float32", "bfloat16"],
      **{
        f: "positive"
        for f in (
          "vocab_size",
          "d_model",
          "n_layers",
          "n_heads",
          "n_kv_heads",
          "head_dim",
          "mlp_dim",
          "batch_size",
          "seq_len",
          "lr",
          "corpus_tokens",
        )
      },
      "warmup": "nonneg",
      "weight_decay": "nonneg",
      "upipe_chunks": "nonneg",
      "n_kv_heads": lambda v: (
        None if c.n_heads % v == 0 else f"{v} must divide n_heads={c.n_heads}"
      ),
    },
  )
  experiment.check_list("config.distill.losses", c.distill.losses, distill_lib.LOSSES)
  mesh = run.mesh
  dp = shd.named_sharding(mesh, ("batch",)).num_devices if mesh is not None else 1
  if c.batch_size % dp:
    experiment.fail(
      "config.batch_size",
      f"{c.batch_size} is not divisible by the {dp} data/fsdp devices of --mesh",
    )
  cp = 1 if mesh is None else mesh.shape.get("context", 1)
  if cp > 1 and c.attention == "dense":
    experiment.fail(
      "config.attention",
      "--mesh has a context axis; pick a context-parallel "
      "attention: allgather, ring, ulysses or upipe",
    )
  if cp > 1 and c.seq_len % (2 * cp):
    experiment.fail("config.seq_len", f"{c.seq_len} must be divisible by 2 x context = {2 * cp}")
  tp = 1 if mesh is None else mesh.shape.get("tensor", 1)
  if cp > 1 and c.attention in ("ulysses", "upipe") and (c.n_heads // tp) % cp:
    experiment.fail(
      "config.n_heads",
      f"Ulysses/UPipe need heads per tensor shard ({c.n_heads // tp}) divisible by context={cp}",
    )
  if FLAGS.text_file:
    p = pathlib.Path(FLAGS.text_file)
    if not p.is_file():
      experiment.fail("text_file", f"{p} is not a readable file")
    if p.stat().st_size < c.seq_len + 2:
      experiment.fail("text_file", f"{p} has {p.stat().st_size} bytes; need > seq_len + 1")
    if c.vocab_size < 256:
      experiment.fail("config.vocab_size", "--text_file is byte-level: needs vocab_size >= 256")


class Throughput:
  """eval_fn that reports tokens/s and MFU between evals (the first interval includes compile)."""

  def __init__(self, tokens_per_step, flops_per_step, peak, n_devices):
    self.tps, self.fps, self.peak, self.n = tokens_per_step, flops_per_step, peak, n_devices
    self.t, self.step = time.perf_counter(), None

  def __call__(self, state, step):
    now = time.perf_counter()
    out = {}
    if self.step is not None and step > self.step:
      dt = (now - self.t) / (step - self.step)
      out = {"tokens_per_sec": self.tps / dt, "mfu": self.fps / dt / (self.peak * self.n)}
    self.t, self.step = now, step
    return out


def train_lm(
  c,
  run,
  key,
  corpus,
  cfg,
  workdir,
  steps,
  update_fn=None,
  data_extra=None,
  eval_extra=None,
  quiet=False,
):
  """Builds a (sharded) state and runs the core runtime; returns (state, summary, n_params)."""
  tx = T.make_optimizer(c.lr, c.warmup, steps, c.weight_decay)
  state = T.create_state(cfg, tx, jax.random.fold_in(key, 1), c.seq_len, mesh=run.mesh)
  n_params = param_count(state.params)
  fpt = flops_per_token(cfg, c.seq_len, n_params)
  peak, peak_src = peak_flops(c)
  n_dev = 1 if run.mesh is None else run.mesh.size
  tput = Throughput(c.batch_size * c.seq_len, fpt * c.batch_size * c.seq_len, peak, n_dev)
  data = {"corpus": jnp.asarray(corpus), **(data_extra or {})}

  def sample(d, k):
    b = sample_windows(d["corpus"], k, c.batch_size, c.seq_len, run.mesh)
    return {**b, **{kk: v for kk, v in d.items() if kk != "corpus"}}

  def eval_fn(state, step):
    out = tput(state, step)
    if eval_extra is not None:
      out.update(eval_extra(state))
    return out

  if not quiet:
    print(
      f"[lm] {workdir.name}: {n_params / 1e6:.3f}M params, {fpt / 1e6:.2f} MFLOP/token, "
      f"attention={cfg.attention}, mesh={run.mesh_spec or 'none'}, peak={peak / 1e12:.3g} "
      f"TFLOP/s/device ({peak_src})",
      flush=True,
    )
  state, summary = runtime.train(
    state,
    update_fn or T.update,
    num_steps=steps,
    workdir=workdir,
    key=key,
    data=data,
    sample_fn=sample,
    log_every=run.log_every,
    ckpt_every=run.ckpt_every,
    eval_fn=eval_fn,
    eval_every=run.log_every,
    mesh=run.mesh,
    state_sharding=T.state_sharding_tree(state, run.mesh),
    config=c.to_dict(),
  )
  sps = summary.get("steps_per_sec", float("nan"))
  tok_s = sps * c.batch_size * c.seq_len
  mfu = tok_s * fpt / (peak * n_dev)
  summary.update({"tokens_per_sec": tok_s, "mfu": mfu, "params": n_params, "flops_per_token": fpt})
  experiment.write_summary(workdir, summary)
  print(
    f"[lm] {workdir.name}: step {summary['step']} loss {summary.get('train/loss', float('nan')):.4f} "
    f"| {tok_s:,.0f} tokens/s | MFU {100 * mfu:.2f}% (last chunk, {n_dev} device(s))",
    flush=True,
  )
  return state, summary, n_params


def mode_train(c, run, key):
  corpus = load_corpus(c, jax.random.fold_in(key, 7))
  train_lm(c, run, key, corpus, model_config(c), run.workdir, run.steps)


def mode_distill(c, run, key):
  """Teacher (wider, deeper) on the data; then one student per objective, same data and steps."""
  corpus = load_corpus(c, jax.random.fold_in(key, 7))
  held = corpus[-20_000:] if len(corpus) > 40_000 else corpus
  tcfg = model_config(
    c,
    d_model=c.distill.teacher_d_model,
    n_layers=c.distill.teacher_layers,
    mlp_dim=3 * c.distill.teacher_d_model,
  )
  teacher, tsum, _ = train_lm(
    c, run, key, corpus, tcfg, run.workdir / "teacher", c.distill.teacher_steps
  )
  t_apply, t_params = teacher.apply_fn, teacher.params
  ev_tokens = jnp.stack(
    [
      sample_windows(jnp.asarray(held), jax.random.key(1000 + i), c.batch_size, c.seq_len)["tokens"]
      for i in range(c.distill.eval_batches)
    ]
  )

  @jax.jit
  def evaluate(params):
    def one(tok):
      s = student_apply({"params": params}, tok[:, :-1])
      t = t_apply({"params": t_params}, tok[:, :-1])
      nll, _ = T.next_token_loss(s, tok[:, 1:])
      return nll, distill_lib.forward_kl(s, t), distill_lib.reverse_kl(s, t)

    return jax.tree.map(jnp.mean, jax.lax.map(one, ev_tokens))

  results = {"teacher_loss": tsum.get("train/loss")}
  curves = {}
  for kind in experiment.check_list("config.distill.losses", c.distill.losses, distill_lib.LOSSES):
    scfg = model_config(c)
    student_apply = Transformer(scfg, run.mesh).apply

    def update(state, batch, k, kind=kind):
      tok = batch["tokens"]
      t_logits = t_apply({"params": batch["teacher"]}, tok[:, :-1])

      def loss_fn(p):
        s_logits = state.apply_fn({"params": p}, tok[:, :-1])
        return distill_lib.distill_loss(kind, s_logits, t_logits, tok[:, 1:], k)

      (loss, m), g = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
      upd, opt = state.tx.update(g, state.opt_state, state.params)
      return state.replace(
        step=state.step + 1, params=optax.apply_updates(state.params, upd), opt_state=opt
      ), {"loss": loss, **m}

    def extra(state):
      nll, fkl, rkl = evaluate(state.params)
      return {"heldout_nll": float(nll), "heldout_fkl": float(fkl), "heldout_rkl": float(rkl)}

    _, ssum, _ = train_lm(
      c,
      run,
      jax.random.fold_in(key, 3),
      corpus,
      scfg,
      run.workdir / f"student_{kind}",
      run.steps,
      update_fn=update,
      data_extra={"teacher": t_params},
      eval_extra=extra,
    )
    results[kind] = {
      k: ssum.get(f"eval/{k}") for k in ("heldout_nll", "heldout_fkl", "heldout_rkl")
    }
    ev = runtime.read_csv(run.workdir / f"student_{kind}" / "eval.csv")
    if "heldout_nll" in ev:
      curves[kind] = (ev["step"], ev["heldout_nll"])
  experiment.write_summary(run.workdir, results)
  if curves:
    experiment.plot_curves(
      run.workdir / "distill.png",
      curves,
      "step",
      "held-out NLL (nats)",
      title="student objectives (teacher-distilled)",
    )
  print(json.dumps(results, indent=1))


def mode_capacity(c, run, key):
  try:
    widths = [int(x) for x in str(c.capacity.d_models).split(",") if x.strip()]
  except ValueError:
    experiment.fail("config.capacity.d_models", f"{c.capacity.d_models!r} is not a list of ints")
  if not widths or any(w % 16 or w <= 0 for w in widths):
    experiment.fail("config.capacity.d_models", "widths must be positive multiples of 16")
  rows = []
  for i, w in enumerate(widths):
    r = cap_lib.probe(
      w,
      c.capacity.num_strings,
      c.capacity.length,
      c.capacity.steps,
      jax.random.fold_in(key, i),
      lr=c.capacity.lr,
    )
    print(
      f"[capacity] d_model={w}: {r['params']} params, memorised {r['memorised_bits']:.0f} / "
      f"{r['data_bits']} bits -> {r['bits_per_param']:.3f} bits/param",
      flush=True,
    )
    rows.append(r)
  experiment.write_summary(run.workdir, {"probes": rows, "reference_bits_per_param": 3.6})
  experiment.plot_curves(
    run.workdir / "capacity.png",
    {
      "memorised": ([r["params"] for r in rows], [r["memorised_bits"] for r in rows]),
      "3.6 bits/param": ([r["params"] for r in rows], [3.6 * r["params"] for r in rows]),
    },
    "parameters",
    "bits",
    logx=True,
    logy=True,
  )


def main(argv):
  del argv
  c = _CONFIG.value
  run = experiment.common(
    "lm", default_steps=c.steps, mesh_axes=("data", "fsdp", "context", "tensor")
  )
  validate(c, run)
  experiment.prepare_workdir(run.workdir)
  key = jax.random.key_data(jax.random.key(run.seed))  # raw key: checkpoint-friendly
  {"train": mode_train, "distill": mode_distill, "capacity": mode_capacity}[FLAGS.mode](c, run, key)


if __name__ == "__main__":
  experiment.run(main)
