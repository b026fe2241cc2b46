"""LM experiments on the core runtime: train, generate, distill (HPD vs baselines), capacity probe.

Commands (from the repository root; presets and runtimes: experiments/configs/lm.py):
  python -m experiments.lm                                          # tiny, BPE on embedded text
  python -m experiments.lm --mode=generate                          # sample from its checkpoint
  python -m experiments.lm --config.text=path/to/folder             # every .txt file in a folder
  python -m experiments.lm --config.tokenizer=path/to/tokenizer.json  # a saved tokenizer
  python -m experiments.lm --config.text=synthetic --config.vocab_size=256  # Markov corpus
  python -m experiments.lm --config=experiments/configs/lm.py:small  # ~126M params (GPU)
  XLA_FLAGS=--xla_force_host_platform_device_count=8 JAX_PLATFORMS=cpu \\
    python -m experiments.lm --mesh=data:2,fsdp:2,context:2 --config.attention=ring
  python -m experiments.lm --mode=distill --config.distill.losses=nll,hpd,forward_kl
  python -m experiments.lm --mode=capacity

The default workdir is runs/lm/<mode>/<preset> (--mode=generate reads runs/lm/train/<preset>);
re-running with the same --workdir resumes from its latest checkpoint, data position included.
Text is tokenized once into shards under <workdir>/data (or --config.data_dir).
"""

from __future__ import annotations

import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags

from jaxlab.core import checkpoint, experiment, plots, runtime
from jaxlab.core.errors import ConfigError, require
from jaxlab.lm import capacity, distill, flops, generate, shards, train
from jaxlab.lm import data as lm_data
from jaxlab.lm.model import LMConfig, param_count

MODES = ("train", "generate", "distill", "capacity")
CONFIG_FILE = pathlib.Path(__file__).resolve().parent / "configs" / "lm.py"
MODEL_FIELDS = (
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
  "scan_layers",
  "attention_block",
  "tie_embeddings",
)
# A teacher's fields come from config.distill: errors name the field the user sets.
TEACHER_FIELDS = {
  "config.d_model": "config.distill.teacher_d_model",
  "config.mlp_dim": "config.distill.teacher_d_model",
  "config.n_layers": "config.distill.teacher_layers",
}
CHECKS = {
  "steps": "positive",
  "batch_size": "positive",
  "seq_len": "positive",
  "lr": "positive",
  "warmup": "nonneg",
  "weight_decay": "nonneg",
  "corpus_tokens": "positive",
  "markov_alpha": "positive",
  "peak_tflops": "nonneg",
  "val_fraction": "open_prob",
  "val_batches": "positive",
  "shard_tokens": "positive",
  "generate.tokens": "positive",
  "generate.temperature": "nonneg",
  "distill.teacher_steps": "positive",
  "distill.teacher_d_model": "positive",
  "distill.teacher_layers": "positive",
  "distill.eval_batches": "positive",
  "attention_block": "positive",
  "distill.heldout_fraction": "open_prob",
  "capacity.num_strings": "positive",
  "capacity.length": "positive",
  "capacity.steps": "positive",
  "capacity.lr": "positive",
}

_CONFIG = experiment.define_config_file(str(CONFIG_FILE))
flags.DEFINE_enum(
  "mode",
  "train",
  MODES,
  "train: LM training; generate: sample text from a train run's checkpoint; distill: a "
  "teacher, then students (HPD vs baselines); capacity: bits/parameter probe on random bitstrings.",
)
FLAGS = flags.FLAGS


def model_config(c, **overrides) -> LMConfig:
  return LMConfig(**{**{f: c[f] for f in MODEL_FIELDS}, **overrides})


def teacher_config(c, mesh) -> LMConfig:
  d = c.distill.teacher_d_model
  try:
    cfg = model_config(c, d_model=d, n_layers=c.distill.teacher_layers, mlp_dim=3 * d)
    cfg.check_mesh(mesh, c.seq_len)
  except ConfigError as e:
    note = " (the teacher's mlp_dim is 3 x teacher_d_model)" if e.field == "config.mlp_dim" else ""
    raise ConfigError(TEACHER_FIELDS.get(e.field, e.field), e.message + note) from None
  return cfg


def validate(c, run) -> dict:
  """Every check, before anything is written. Returns what the mode needs."""
  losses = experiment.check_list("config.distill.losses", c.distill.losses, distill.LOSSES)
  widths = capacity.parse_widths("config.capacity.d_models", c.capacity.d_models)
  model = model_config(c)
  if FLAGS.mode == "capacity":  # a single-device probe: the LM's data and mesh are not used
    return {"widths": widths}
  model.check_mesh(run.mesh, c.seq_len)
  run.check_batch("config.batch_size", c.batch_size)
  out = {"model": model}
  if FLAGS.mode == "generate":
    return out
  fraction = c.val_fraction
  if FLAGS.mode == "distill":
    out.update(teacher=teacher_config(c, run.mesh), losses=losses)
    fraction = c.distill.heldout_fraction
  if c.text == "synthetic":
    n_tokens = c.corpus_tokens - lm_data.heldout_size(c.corpus_tokens, c.seq_len, fraction)
    lm_data.check_length("config.seq_len", n_tokens, c.seq_len, "the corpus less its held-out tail")
    return out
  out["data"] = text_data(c, run, fraction, reuse=FLAGS.mode == "train")
  return out


def data_folder(c, run) -> pathlib.Path:
  return pathlib.Path(c.data_dir) if c.data_dir else run.workdir / "data"


def recipe(c, fraction: float) -> dict:
  """What determines a data folder's contents; a folder made by another recipe is refused."""
  path = lambda p: str(pathlib.Path(p).absolute())
  return {
    "text": c.text if c.text == "embedded" else path(c.text),
    "tokenizer": c.tokenizer if c.tokenizer in ("bpe", "bytes") else path(c.tokenizer),
    "bpe_vocab": c.vocab_size if c.tokenizer == "bpe" else None,
    "val_fraction": fraction,
    "shard_tokens": c.shard_tokens,
  }


def text_data(c, run, fraction: float, reuse: bool) -> dict:
  """Tokenizes the text in memory (nothing written) unless ``reuse`` and the data folder already
  holds it."""
  folder = data_folder(c, run)
  want = recipe(c, fraction)
  index = shards.read_index(folder) if reuse and folder.is_dir() else None
  built = None
  if index is not None:
    require(
      index["recipe"] == want,
      "config.data_dir",
      f"{folder} holds shards made with another recipe ({index['recipe']}); "
      "choose another --config.data_dir or --workdir",
    )
    vocab, lengths = (
      index["vocab_size"],
      {s: sum(index["splits"][s]["tokens"]) for s in shards.SPLITS},
    )
  else:
    docs = shards.read_documents(c.text)
    built = shards.build(docs, c.tokenizer, c.vocab_size, fraction)
    vocab, lengths = built["tokenizer"].vocab_size, {s: len(built[s]) for s in shards.SPLITS}
  require(
    vocab <= c.vocab_size,
    "config.vocab_size",
    f"{c.vocab_size} is smaller than the tokenizer's vocabulary ({vocab} tokens)",
  )
  for split in shards.SPLITS:
    what = f"the {split} split of the text"
    lm_data.check_length("config.seq_len", lengths[split], c.seq_len, what)
  return {"folder": folder, "index": index, "built": built}


def open_data(c, run, data: dict):
  """Writes the shards if needed (process 0), then memory-maps them: (index, train, val)."""
  folder = data["folder"]
  if data["built"] is not None:
    if jax.process_index() == 0:
      shards.write(folder, data["built"], c.shard_tokens, recipe(c, c.val_fraction))
    if jax.process_count() > 1:
      from jax.experimental import multihost_utils

      multihost_utils.sync_global_devices("lm shards written")
  index = shards.read_index(folder)
  return index, shards.open_split(folder, "train", index), shards.open_split(folder, "val", index)


def load_corpus(c, key, setup):
  """In memory, for --mode=distill: ``(train_tokens, heldout_tokens)`` (held-out documents)."""
  if c.text == "synthetic":
    corpus = lm_data.synthetic_corpus(key, c.corpus_tokens, c.vocab_size, c.markov_alpha)
    return lm_data.heldout_split(corpus, c.seq_len, c.distill.heldout_fraction)
  built = setup["data"]["built"]
  return built["train"].astype(np.int32), built["val"].astype(np.int32)


def train_lm(c, run, cfg, key, workdir, steps, update, data=None, sample_fn=None, extra_eval=None):
  """Creates a (sharded) state and trains it; returns (state, result) with MFU in the summary."""
  tx = train.make_optimizer(c.lr, c.warmup, steps, c.weight_decay)
  state = train.create_state(cfg, tx, jax.random.fold_in(key, 1), c.seq_len, mesh=run.mesh)
  n_params = param_count(state.params)
  fpt = flops.flops_per_token(cfg, c.seq_len, n_params)
  peak, peak_src = flops.peak_flops(c.peak_tflops)
  n_dev = 1 if run.mesh is None else run.mesh.size
  tokens_per_step = c.batch_size * c.seq_len
  meter = flops.ThroughputMeter(tokens_per_step, fpt * tokens_per_step, peak, n_dev)
  eval_every = run.log_every * -(-steps // (10 * run.log_every))  # <= ~10 evaluations

  def eval_fn(state, step):
    return {**meter(state, step), **(extra_eval(state) if extra_eval else {})}

  print(
    f"[lm] {workdir.name}: {n_params / 1e6:.3f}M params, {fpt / 1e6:.2f} MFLOP/token, "
    f"attention={cfg.attention}, peak "
    + (f"{peak / 1e12:.3g} TFLOP/s/device ({peak_src})" if peak else f"unknown ({peak_src})"),
    flush=True,
  )
  state, result = runtime.train(
    state,
    update,
    run.loop(num_steps=steps, eval_every=eval_every),
    key=key,
    workdir=workdir,
    data=data,
    sample_fn=sample_fn,
    eval_fn=eval_fn,
    mesh=run.mesh,
    state_sharding=train.state_sharding_tree(state, run.mesh),
    config=c.to_dict(),
  )
  s = result.summary
  tok_s = s.get("steps_per_sec", float("nan")) * tokens_per_step
  s.update(tokens_per_sec=tok_s, params=n_params, flops_per_token=fpt)
  mfu = "MFU n/a (no known peak for this device; set --config.peak_tflops)"
  if peak is not None:
    s["mfu"] = tok_s * fpt / (peak * n_dev)
    mfu = f"MFU {100 * s['mfu']:.2f}%"
  runtime.write_summary(workdir, s)
  print(
    f"[lm] {workdir.name}: step {s['step']} loss {s.get('train/loss', float('nan')):.4f} | "
    f"{tok_s:,.0f} tokens/s | {mfu} (last chunk, {n_dev} device(s))",
    flush=True,
  )
  return state, result


def window_sampler(c, mesh):
  """In-memory data: ``sample_fn(data, key)`` drawing random windows of ``data["corpus"]``."""

  def sample(data, k):
    batch = lm_data.sample_windows(data["corpus"], k, c.batch_size, c.seq_len, mesh)
    return {**batch, **{name: v for name, v in data.items() if name != "corpus"}}

  return sample


def heldout_batches(c, heldout, key, n: int):
  """``n`` fixed batches of held-out windows: int32[n, batch_size, seq_len + 1]."""
  heldout = jnp.asarray(heldout)
  windows = lambda i: lm_data.sample_windows(
    heldout, jax.random.fold_in(key, 1000 + i), c.batch_size, c.seq_len
  )["tokens"]
  return jnp.stack([windows(i) for i in range(n)])


def run_train(c, run, key, setup):
  """Trains on the training split; validation loss / perplexity between chunks; a sample."""
  tok = None
  if c.text == "synthetic":
    corpus = lm_data.synthetic_corpus(
      jax.random.fold_in(key, 7), c.corpus_tokens, c.vocab_size, c.markov_alpha
    )
    corpus, heldout = lm_data.heldout_split(corpus, c.seq_len, c.val_fraction)
    val = heldout_batches(c, heldout, key, c.val_batches)
    kw = dict(update=train.update, data={"corpus": jnp.asarray(corpus)})
    kw["sample_fn"] = window_sampler(c, run.mesh)
  else:
    index, train_stream, val_stream = open_data(c, run, setup["data"])
    tok = shards.load_tokenizer(setup["data"]["folder"], index)
    loader = lm_data.StreamLoader(train_stream, c.batch_size, c.seq_len, seed=run.seed)
    val_loader = lm_data.StreamLoader(val_stream, c.batch_size, c.seq_len, seed=run.seed)
    val = jnp.asarray(lm_data.window_batches(val_loader, c.val_batches))
    kw = dict(update=train.streaming_update(loader, train.update, run.mesh))
    print(
      f"[lm] data: {index['tokenizer']} tokenizer ({index['vocab_size']} tokens), "
      f"{len(train_stream):,} train / {len(val_stream):,} validation tokens in "
      f"{setup['data']['folder']}",
      flush=True,
    )
  evaluate = jax.jit(train.eval_metrics)
  scores = lambda state: {k: float(v) for k, v in evaluate(state, val).items()}
  state, result = train_lm(
    c, run, setup["model"], key, run.workdir, run.steps, extra_eval=scores, **kw
  )
  evals = sorted((s, ev["val_loss"]) for s, ev in result.evals.items() if "val_loss" in ev)
  if evals and jax.process_index() == 0:
    plots.lines(
      run.workdir / "validation.png",
      {"validation": tuple(zip(*evals))},
      "step",
      "held-out loss (nats)",
    )
  if tok is not None and run.mesh is None:
    print(f"[lm] sample:\n{sample_text(c, state, tok, key)}", flush=True)


def sample_text(c, state, tok, key) -> str:
  """``c.generate.tokens`` tokens after ``c.generate.prompt`` (decoded, prompt included)."""
  prompt = tok.encode(c.generate.prompt) if c.generate.prompt else np.zeros(0, np.int32)
  prompt = np.concatenate([[tok.eot_id], prompt]).astype(np.int32)[None]  # a document start
  fn = jax.jit(generate.generate, static_argnums=(2, 4))
  out = fn(state, jnp.asarray(prompt), c.generate.tokens, key, c.generate.temperature)
  return tok.decode(np.asarray(out)[0, 1:])


def run_generate(c, run, key, setup):
  """Restores the latest checkpoint of a train run and prints a sample."""
  folder = data_folder(c, run)
  index = shards.read_index(folder) if folder.is_dir() else None
  require(index is not None, "workdir", f"{folder} holds no tokenized data; train first")
  tok = shards.load_tokenizer(folder, index)
  cfg = model_config(c, attention="dense")  # same parameters; sampling runs on one device
  tx = train.make_optimizer(c.lr, c.warmup, run.steps, c.weight_decay)
  like = train.create_state(cfg, tx, jax.random.fold_in(key, 1), c.seq_len)
  restored = checkpoint.restore(run.workdir, like)
  require(restored is not None, "workdir", f"{run.workdir} has no checkpoint; train first")
  state, step = restored
  print(f"[lm] {run.workdir} at step {step}:\n{sample_text(c, state, tok, key)}", flush=True)


def run_distill(c, run, key, setup):
  """A wider, deeper teacher on the data; then one student per objective, same data and steps."""
  corpus, heldout = load_corpus(c, jax.random.fold_in(key, 7), setup)
  steps, sample = c.distill.teacher_steps, window_sampler(c, run.mesh)
  data = {"corpus": jnp.asarray(corpus)}
  teacher, t_result = train_lm(
    c, run, setup["teacher"], key, run.workdir / "teacher", steps, train.update, data, sample
  )
  ev_tokens = heldout_batches(c, heldout, key, c.distill.eval_batches)
  evaluate = jax.jit(distill.heldout_metrics)
  scores = lambda state: {k: float(v) for k, v in evaluate(state, teacher, ev_tokens).items()}
  t_loss, t_nll = t_result.summary.get("train/loss"), scores(teacher)["heldout_nll"]
  results = {"teacher": {"train/loss": t_loss, "heldout_nll": t_nll}}
  curves = {}
  for kind in setup["losses"]:
    _, result = train_lm(
      c,
      run,
      setup["model"],
      jax.random.fold_in(key, 3),
      run.workdir / f"student_{kind}",
      run.steps,
      distill.student_update(kind, teacher),
      {**data, "teacher": teacher.params},
      sample,
      extra_eval=scores,
    )
    # The summary's eval/ entries hold the last evaluation, also for a finished run re-run.
    final = {k[5:]: v for k, v in result.summary.items() if k.startswith("eval/heldout")}
    results[kind] = final
    evals = sorted((s, ev["heldout_nll"]) for s, ev in result.evals.items() if "heldout_nll" in ev)
    if evals:
      curves[kind] = tuple(zip(*evals))
  runtime.write_summary(run.workdir, results)
  if curves:
    title = "student objectives (teacher-distilled)"
    plots.lines(run.workdir / "distill.png", curves, "step", "held-out NLL (nats)", title=title)
  print(json.dumps(results, indent=1))


def run_capacity(c, run, key, setup):
  cc = c.capacity

  def report(r):
    print(
      f"[capacity] d_model={r['d_model']}: {r['params']} params, memorised "
      f"{r['memorised_bits']:.0f} / {r['data_bits']} bits -> {r['bits_per_param']:.3f} bits/param",
      flush=True,
    )

  rows = capacity.sweep(setup["widths"], cc.num_strings, cc.length, cc.steps, key, cc.lr, report)
  losses = {f"d_model={r['d_model']}": r.pop("losses") for r in rows}
  ref = capacity.REFERENCE_BITS_PER_PARAM
  experiment.prepare_workdir(run.workdir)
  runtime.write_summary(run.workdir, {"probes": rows, "reference_bits_per_param": ref})
  params = [r["params"] for r in rows]
  bits = {
    "memorised": (params, [max(r["memorised_bits"], 1e-3) for r in rows]),  # log axis
    f"{ref} bits/param": (params, [ref * p for p in params]),
  }
  plots.lines(run.workdir / "capacity.png", bits, "parameters", "bits", logx=True, logy=True)
  loss_curves = {k: (np.arange(1, len(v) + 1), v) for k, v in losses.items()}
  plots.lines(run.workdir / "capacity_loss.png", loss_curves, "step", "training loss (nats)")
  print(f"-> {run.workdir}/summary.json", flush=True)


def main(argv):
  del argv
  c = _CONFIG.value
  experiment.check_config(c, CHECKS)
  if FLAGS.mode == "capacity":  # in-memory single-device probes: no loop or mesh flags apply
    for name in ("mesh", "steps", "log_every", "ckpt_every", "keep", "profile"):
      if FLAGS[name].present:
        raise ConfigError(name, "is not used by --mode=capacity (see config.capacity.*)")
  run = experiment.common(
    "lm",
    default_steps=c.steps,
    variant=("train" if FLAGS.mode == "generate" else FLAGS.mode, c.preset),
    mesh_axes=("data", "fsdp", "context", "tensor"),
  )
  setup = validate(c, run)
  key = jax.random.key_data(jax.random.key(run.seed))  # raw key: checkpoint-friendly
  modes = {"train": run_train, "generate": run_generate, "distill": run_distill}
  {**modes, "capacity": run_capacity}[FLAGS.mode](c, run, key, setup)


if __name__ == "__main__":
  experiment.run(main)
