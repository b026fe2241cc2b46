"""LM experiments on the core runtime: train, distill (HPD vs baselines), capacity probe.

Commands (from the repository root; presets and runtimes: experiments/configs/lm.py):
  python -m experiments.lm                                          # tiny preset, synthetic data
  python -m experiments.lm --config=experiments/configs/lm.py:small  # ~126M params (GPU)
  python -m experiments.lm --config.text_file=README.md             # bytes of a text file
  XLA_FLAGS=--xla_force_host_platform_device_count=8 JAX_PLATFORMS=cpu \\
    python -m experiments.lm --mesh=data:2,fsdp:2,context:2 --config.attention=ring
  python -m experiments.lm --mode=distill --config.distill.losses=nll,hpd,forward_kl
  python -m experiments.lm --mode=capacity

The default workdir is runs/lm/<mode>/<preset>; re-running with the same --workdir resumes from
its latest checkpoint.
"""

from __future__ import annotations

import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags

from jaxlab.core import experiment, plots, runtime
from jaxlab.core.errors import ConfigError
from jaxlab.lm import capacity, distill, flops, train
from jaxlab.lm import data as lm_data
from jaxlab.lm.model import LMConfig, param_count

MODES = ("train", "distill", "capacity")
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
  "train: LM training; distill: a teacher, then students (HPD vs baselines); capacity: "
  "bits/parameter probe on random bitstrings.",
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
  if c.text_file:
    n_tokens = lm_data.check_text_file("config.text_file", c.text_file)
    v = c.vocab_size
    if v < lm_data.BYTE_VOCAB:
      raise ConfigError("config.vocab_size", f"text is byte-level: needs >= 256, got {v}")
  else:
    n_tokens = c.corpus_tokens
  out = {"model": model}
  fraction = c.val_fraction
  if FLAGS.mode == "distill":
    out.update(teacher=teacher_config(c, run.mesh), losses=losses)
    fraction = c.distill.heldout_fraction
  n_tokens -= lm_data.heldout_size(n_tokens, c.seq_len, fraction)
  what = "the corpus less its held-out tail"
  lm_data.check_length("config.seq_len", n_tokens, c.seq_len, what)
  return out


def load_corpus(c, key) -> np.ndarray:
  if c.text_file:
    return lm_data.text_corpus(c.text_file)
  return lm_data.synthetic_corpus(key, c.corpus_tokens, c.vocab_size, c.markov_alpha)


def train_lm(c, run, cfg, key, corpus, workdir, steps, update=None, extra=None, extra_eval=None):
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

  def sample(data, k):
    batch = lm_data.sample_windows(data["corpus"], k, c.batch_size, c.seq_len, run.mesh)
    return {**batch, **{name: v for name, v in data.items() if name != "corpus"}}

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
    update or train.update,
    run.loop(num_steps=steps, eval_every=eval_every),
    key=key,
    workdir=workdir,
    data={"corpus": jnp.asarray(corpus), **(extra or {})},
    sample_fn=sample,
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
  experiment.write_summary(workdir, s)
  print(
    f"[lm] {workdir.name}: step {s['step']} loss {s.get('train/loss', float('nan')):.4f} | "
    f"{tok_s:,.0f} tokens/s | {mfu} (last chunk, {n_dev} device(s))",
    flush=True,
  )
  return state, result


def heldout_batches(c, heldout, key, n: int):
  """``n`` fixed batches of held-out windows: int32[n, batch_size, seq_len + 1]."""
  heldout = jnp.asarray(heldout)
  windows = lambda i: lm_data.sample_windows(
    heldout, jax.random.fold_in(key, 1000 + i), c.batch_size, c.seq_len
  )["tokens"]
  return jnp.stack([windows(i) for i in range(n)])


def run_train(c, run, key, setup):
  """Trains on the corpus less its tail; validation loss / perplexity on the tail between chunks."""
  corpus = load_corpus(c, jax.random.fold_in(key, 7))
  corpus, heldout = lm_data.heldout_split(corpus, c.seq_len, c.val_fraction)
  val = heldout_batches(c, heldout, key, c.val_batches)
  evaluate = jax.jit(train.eval_metrics)
  scores = lambda state: {k: float(v) for k, v in evaluate(state, val).items()}
  _, result = train_lm(
    c, run, setup["model"], key, corpus, run.workdir, run.steps, extra_eval=scores
  )
  evals = sorted((s, ev["val_loss"]) for s, ev in result.evals.items() if "val_loss" in ev)
  if evals:
    plots.lines(
      run.workdir / "validation.png",
      {"validation": tuple(zip(*evals))},
      "step",
      "held-out loss (nats)",
    )


def run_distill(c, run, key, setup):
  """A wider, deeper teacher on the data; then one student per objective, same data and steps."""
  corpus = load_corpus(c, jax.random.fold_in(key, 7))
  corpus, heldout = lm_data.heldout_split(corpus, c.seq_len, c.distill.heldout_fraction)
  steps = c.distill.teacher_steps
  teacher, t_result = train_lm(
    c, run, setup["teacher"], key, corpus, run.workdir / "teacher", steps
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
      corpus,
      run.workdir / f"student_{kind}",
      run.steps,
      update=distill.student_update(kind, teacher),
      extra={"teacher": teacher.params},
      extra_eval=scores,
    )
    # The summary's eval/ entries hold the last evaluation, also for a finished run re-run.
    final = {k[5:]: v for k, v in result.summary.items() if k.startswith("eval/heldout")}
    results[kind] = final
    evals = sorted((s, ev["heldout_nll"]) for s, ev in result.evals.items() if "heldout_nll" in ev)
    if evals:
      curves[kind] = tuple(zip(*evals))
  experiment.write_summary(run.workdir, results)
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
  experiment.write_summary(run.workdir, {"probes": rows, "reference_bits_per_param": ref})
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
    variant=(FLAGS.mode, c.preset),
    mesh_axes=("data", "fsdp", "context", "tensor"),
  )
  setup = validate(c, run)
  key = jax.random.key_data(jax.random.key(run.seed))  # raw key: checkpoint-friendly
  {"train": run_train, "distill": run_distill, "capacity": run_capacity}[FLAGS.mode](
    c, run, key, setup
  )


if __name__ == "__main__":
  experiment.run(main)
