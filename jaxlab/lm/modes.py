"""The four runs of ``python -m experiments.lm`` as library functions (a notebook calls the same).

    config = jaxlab.lm.config.get_config()               # or a preset of experiments/configs/lm.py
    loop = runtime.Loop(300, log_every=15, ckpt_every=75)
    state, result = modes.train(config, "runs/lm/train/tiny", loop, seed=0)
    print(modes.generate(config, "runs/lm/train/tiny", seed=0))     # from its latest checkpoint
    results = modes.distill(config, "runs/lm/distill/tiny", loop, seed=0)
    report = modes.capacity(config, "runs/lm/capacity/tiny", seed=0)

Each one first calls `prepare` (every check, and the text tokenized in memory, before anything is
written) unless it is given its result; the program calls `prepare` itself, then `run`.
``train(..., seeds=(0, 1, 2))`` and ``capacity(..., seeds=...)`` train those seeds together,
vmapped in one compiled program on one device (the program's ``--seeds``); generate and distill
run one seed.
`train` writes shards (``<workdir>/data`` or ``config.data_dir``), checkpoints, metrics,
``summary.json`` (with tokens/s and MFU) and ``validation.png``; `distill` a teacher and one student
per objective below its workdir, their held-out scores in ``summary.json`` and ``distill.png``;
`capacity` its probes in ``summary.json``, ``capacity.png`` and ``capacity_loss.png``.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from absl import logging

from jaxlab.core import checkpoint, plots, runtime
from jaxlab.core import seeds as seeds_lib
from jaxlab.core import workdir as workdir_lib
from jaxlab.core.errors import ConfigError, require
from jaxlab.lm import capacity as capacity_lib
from jaxlab.lm import config as config_lib
from jaxlab.lm import data as lm_data
from jaxlab.lm import distill as distill_lib
from jaxlab.lm import flops, memory, shards
from jaxlab.lm import generate as generate_lib
from jaxlab.lm import train as train_lib
from jaxlab.lm.model import LMConfig, param_count

# Modes that train several seeds vmapped in one program. generate samples one checkpoint; distill
# runs one seed (its students would each need their own seed's teacher as per-seed data).
SEEDED_MODES = ("train", "capacity")


def data_folder(config, workdir) -> pathlib.Path:
  """Where the tokenized shards live: ``config.data_dir``, else ``<workdir>/data``."""
  return pathlib.Path(config.data_dir) if config.data_dir else pathlib.Path(workdir) / "data"


def data_field(config) -> str:
  """The flag that names the data folder: ``config.data_dir``, else the workdir holding it."""
  return "config.data_dir" if config.data_dir else "workdir"


def recipe(config, fraction: float) -> dict:
  """What determines a data folder's contents; a folder made by another recipe is refused."""
  path = lambda p: str(pathlib.Path(p).absolute())
  c = config
  return {
    "text": c.text if c.text == "embedded" else path(c.text),
    "tokenizer": c.tokenizer if c.tokenizer in ("bpe", "bytes") else path(c.tokenizer),
    "bpe_vocab": c.vocab_size if c.tokenizer == "bpe" else None,
    "val_fraction": fraction,
    "shard_tokens": c.shard_tokens,
  }


def text_data(config, workdir, fraction: float, reuse: bool) -> dict:
  """Tokenizes the text in memory (nothing written) unless ``reuse`` and the data folder already
  holds it: ``{"folder", "index", "built"}``."""
  c = config
  folder = data_folder(c, workdir)
  want = recipe(c, fraction)
  field = data_field(c)
  index = shards.read_index(folder, field) if reuse else None
  built = None
  if index is not None:
    require(
      index["recipe"] == want,
      field,
      f"{folder} holds shards made with another recipe ({index['recipe']}); "
      "choose another --config.data_dir or --workdir",
    )
    vocab = index["vocab_size"]
    lengths = {s: sum(index["splits"][s]["tokens"]) for s in shards.SPLITS}
  else:
    if reuse:  # train writes the shards there: refused now, not after tokenizing
      workdir_lib.check_writable(folder, field)
    docs = shards.read_documents(c.text)
    built = shards.build(docs, c.tokenizer, c.vocab_size, fraction)
    vocab, lengths = built["tokenizer"].vocab_size, {s: len(built[s]) for s in shards.SPLITS}
  require(
    vocab <= c.vocab_size,
    "config.vocab_size",
    f"{c.vocab_size} is smaller than the tokenizer's vocabulary ({vocab} tokens)",
  )
  for split in shards.SPLITS:
    lm_data.check_length(
      "config.seq_len", lengths[split], c.seq_len, f"the {split} split of the text"
    )
  return {"folder": folder, "index": index, "built": built}


def prepare(config, mode: str, workdir, mesh=None) -> dict:
  """`jaxlab.lm.config.setup` (every check that needs no data) plus the data checks of ``mode``;
  writes nothing.

  Returns what the mode needs: ``model`` (an `LMConfig`), ``teacher`` and ``losses`` (distill),
  ``widths`` (capacity), ``data`` (text: `text_data`'s result).
  """
  c = config
  setup = config_lib.setup(c, mode, mesh)
  if mode in ("capacity", "generate"):
    return setup
  fraction = c.distill.heldout_fraction if mode == "distill" else c.val_fraction
  if c.text == "synthetic":
    n_tokens = c.corpus_tokens - lm_data.heldout_size(c.corpus_tokens, c.seq_len, fraction)
    lm_data.check_length("config.seq_len", n_tokens, c.seq_len, "the corpus less its held-out tail")
    return setup
  return {**setup, "data": text_data(c, workdir, fraction, reuse=mode == "train")}


def open_data(config, data: dict):
  """Writes the shards if needed (process 0), then memory-maps them: (index, train, val)."""
  folder = data["folder"]
  if data["built"] is not None:
    if jax.process_index() == 0:
      try:
        rec = recipe(config, config.val_fraction)
        shards.write(folder, data["built"], config.shard_tokens, rec)
      except OSError as e:  # check_writable passed (root), yet the folder cannot be written
        raise ConfigError(data_field(config), f"cannot write {folder}: {e.strerror or e}") from e
    if jax.process_count() > 1:
      from jax.experimental import multihost_utils

      multihost_utils.sync_global_devices("lm shards written")
  index = shards.read_index(folder, data_field(config))
  return index, shards.open_split(folder, "train", index), shards.open_split(folder, "val", index)


def load_corpus(config, key, setup: dict):
  """In memory, for distill: ``(train_tokens, heldout_tokens)`` (held-out documents)."""
  c = config
  if c.text == "synthetic":
    corpus = lm_data.synthetic_corpus(key, c.corpus_tokens, c.vocab_size, c.markov_alpha)
    return lm_data.heldout_split(corpus, c.seq_len, c.distill.heldout_fraction)
  built = setup["data"]["built"]
  return built["train"].astype(np.int32), built["val"].astype(np.int32)


def fit(config, cfg: LMConfig, key, workdir, loop, update, mesh=None, data=None, seeds=None, **kw):
  """Creates a (sharded) state of ``cfg`` and trains it for ``loop.num_steps``; returns (state,
  result) with tokens/s, parameters, FLOPs/token and MFU in the summary. ``kw``: ``sample_fn``,
  ``extra_eval(state) -> dict`` (scored between chunks).

  ``seeds`` (more than one, no mesh): ``key`` holds one raw key per seed, the runtime's state is
  ``(states, seed index)`` with one `LMState` per seed on a leading axis (``update`` and
  ``extra_eval`` take that pair), and tokens/s and MFU count every seed's tokens."""
  c, workdir, steps = config, pathlib.Path(workdir), loop.num_steps
  tx = train_lib.make_optimizer(c.lr, c.warmup, steps, c.weight_decay)
  if seeds is None:
    state = train_lib.create_state(cfg, tx, jax.random.fold_in(key, 1), c.seq_len, mesh=mesh)
    n_params = param_count(state.params)
  else:
    create = lambda k: train_lib.create_state(cfg, tx, k, c.seq_len)
    state = (seeds_lib.init(create, seeds_lib.stream(key, 1)), jnp.arange(len(seeds)))
    n_params = param_count(seeds_lib.take(state[0].params, 0))
  fpt = flops.flops_per_token(cfg, c.seq_len, n_params)
  peak, peak_src = flops.peak_flops(c.peak_tflops)
  n_dev = 1 if mesh is None else mesh.size
  tokens_per_step = c.batch_size * c.seq_len * (1 if seeds is None else len(seeds))
  meter = flops.ThroughputMeter(tokens_per_step, fpt * tokens_per_step, peak, n_dev)
  eval_every = loop.log_every * -(-steps // (10 * loop.log_every))  # <= ~10 evaluations
  extra_eval = kw.pop("extra_eval", None)

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
    dataclasses.replace(loop, eval_every=eval_every),
    key=key,
    workdir=workdir,
    data=data,
    eval_fn=eval_fn,
    mesh=mesh,
    state_sharding=train_lib.state_sharding_tree(state, mesh) if seeds is None else None,
    config=c.to_dict() if seeds is None else {**c.to_dict(), "seeds": list(seeds)},
    seeds=seeds,
    **kw,
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


def window_sampler(config, mesh=None):
  """In-memory data: ``sample_fn(data, key)`` drawing random windows of ``data["corpus"]``."""

  def sample(data, k):
    batch = lm_data.sample_windows(data["corpus"], k, config.batch_size, config.seq_len, mesh)
    return {**batch, **{name: v for name, v in data.items() if name != "corpus"}}

  return sample


def heldout_batches(config, heldout, key, n: int):
  """``n`` fixed batches of held-out windows: int32[n, batch_size, seq_len + 1]."""
  heldout = jnp.asarray(heldout)
  windows = lambda i: lm_data.sample_windows(
    heldout, jax.random.fold_in(key, 1000 + i), config.batch_size, config.seq_len
  )["tokens"]
  return jnp.stack([windows(i) for i in range(n)])


def sample_text(config, state, tok, key) -> str:
  """``config.generate.tokens`` tokens after ``config.generate.prompt`` (decoded, prompt
  included), as printable text (`jaxlab.lm.generate.sample_as_text`)."""
  g = config.generate
  prompt = tok.encode(g.prompt) if g.prompt else np.zeros(0, np.int32)
  prompt = np.concatenate([[tok.eot_id], prompt]).astype(np.int32)[None]  # a document start
  fn = jax.jit(generate_lib.generate, static_argnums=(2, 4))
  out = fn(state, jnp.asarray(prompt), g.tokens, key, g.temperature)
  return generate_lib.sample_as_text(tok, np.asarray(out)[0, 1:])


def _key(seed: int):
  return jax.random.key_data(jax.random.key(seed))  # raw key: checkpoint-friendly


def train(config, workdir, loop, seed: int, mesh=None, setup=None, seeds=None):
  """--mode=train: trains on the training split, scoring validation loss / perplexity between
  chunks (``validation.png``); a one-device run on text ends by printing a sample. Returns
  ``(state, result)`` (`jaxlab.core.runtime.Result`; ``result.summary`` is summary.json).

  ``seeds`` (more than one): `train_seeds`."""
  if seeds is not None and len(seeds) > 1:
    return train_seeds(config, workdir, loop, seeds, mesh, setup)
  c, workdir, key = config, pathlib.Path(workdir), _key(seed)
  setup = prepare(c, "train", workdir, mesh) if setup is None else setup
  tok = None
  if c.text == "synthetic":
    corpus = lm_data.synthetic_corpus(
      jax.random.fold_in(key, 7), c.corpus_tokens, c.vocab_size, c.markov_alpha
    )
    corpus, heldout = lm_data.heldout_split(corpus, c.seq_len, c.val_fraction)
    val = heldout_batches(c, heldout, key, c.val_batches)
    kw = dict(update=train_lib.update, data={"corpus": jnp.asarray(corpus)})
    kw["sample_fn"] = window_sampler(c, mesh)
  else:
    index, train_stream, val_stream = open_data(c, setup["data"])
    tok = shards.load_tokenizer(setup["data"]["folder"], index)
    loader = lm_data.StreamLoader(train_stream, c.batch_size, c.seq_len, seed=seed)
    val_loader = lm_data.StreamLoader(val_stream, c.batch_size, c.seq_len, seed=seed)
    val = jnp.asarray(lm_data.window_batches(val_loader, c.val_batches))
    stream = lm_data.device_stream(loader, loop.num_steps * c.batch_size)
    kw = dict(update=train_lib.streaming_update(loader, train_lib.update, mesh))
    kw["data"] = None if stream is None else {"stream": stream}
    print(
      f"[lm] data: {index['tokenizer']} tokenizer ({index['vocab_size']} tokens), "
      f"{len(train_stream):,} train / {len(val_stream):,} validation tokens in "
      f"{setup['data']['folder']}",
      flush=True,
    )
  evaluate = jax.jit(train_lib.eval_metrics)
  scores = lambda state: {k: float(v) for k, v in evaluate(state, val).items()}
  state, result = fit(c, setup["model"], key, workdir, loop, mesh=mesh, extra_eval=scores, **kw)
  evals = sorted((s, ev["val_loss"]) for s, ev in result.evals.items() if "val_loss" in ev)
  if evals and jax.process_index() == 0:
    curve = {"validation": tuple(zip(*evals))}
    plots.lines(workdir / "validation.png", curve, "step", "held-out loss (nats)")
  if tok is not None and mesh is None:
    print(f"[lm] sample:\n{sample_text(c, state, tok, key)}", flush=True)
  return state, result


def train_seeds(config, workdir, loop, seeds, mesh=None, setup=None):
  """`train` of several seeds together, vmapped in one compiled program on one device (the
  program's ``--seeds``). Seed ``k`` equals ``train(..., seed=k)``: its own synthetic corpus or
  loader order (the runtime shares its data between seeds, so the data stacks every seed's corpus
  or window table and each seed's step reads its own row), initialisation and validation batches.
  Returns ``(states, result)``: one `LMState` per seed on a leading axis; ``result.summary`` holds
  the means over seeds and ``result.per_seed`` each seed's figures."""
  seeds = tuple(seeds)
  require(
    mesh is None,
    "seeds",
    "several seeds train vmapped on one device; drop --mesh (or run one seed per mesh)",
  )
  c, workdir, keys = config, pathlib.Path(workdir), seeds_lib.seed_keys(seeds)
  setup = prepare(c, "train", workdir, mesh) if setup is None else setup
  memory.check_seeds(c, setup["model"], len(seeds))  # before the shards are written
  tok = None
  if c.text == "synthetic":
    corpora, vals = [], []
    for k in keys:
      corpus = lm_data.synthetic_corpus(
        jax.random.fold_in(k, 7), c.corpus_tokens, c.vocab_size, c.markov_alpha
      )
      corpus, heldout = lm_data.heldout_split(corpus, c.seq_len, c.val_fraction)
      corpora.append(corpus)
      vals.append(heldout_batches(c, heldout, k, c.val_batches))

    def batch_of(drawn, state, row):
      del state
      return lm_data.sample_windows(
        drawn["data"]["corpus"], drawn["key"], c.batch_size, c.seq_len, row=row
      )

    data = {"corpus": jnp.asarray(np.stack(corpora))}
    sample_fn, advance = (lambda data, k: {"data": data, "key": k}), 0
  else:
    index, train_stream, val_stream = open_data(c, setup["data"])
    tok = shards.load_tokenizer(setup["data"]["folder"], index)
    loaders = [lm_data.StreamLoader(train_stream, c.batch_size, c.seq_len, seed=s) for s in seeds]
    val_loader = lambda s: lm_data.StreamLoader(val_stream, c.batch_size, c.seq_len, seed=s)
    vals = [lm_data.window_batches(val_loader(s), c.val_batches) for s in seeds]
    end = loop.num_steps * c.batch_size
    stream = lm_data.device_stream(loaders[0], end)
    if stream is not None:
      ids = [stream["ids"]] + [jnp.asarray(ld.window_ids(0, end), jnp.int32) for ld in loaders[1:]]
      data = {"stream": {"tokens": stream["tokens"], "ids": jnp.stack(ids)}}

      def batch_of(drawn, state, row):
        tokens = lm_data.take(loaders[0], drawn["stream"], state.data_position, row=row)
        return {"tokens": tokens}
    else:  # too large for the device: each seed's loader reads its rows on the host
      data = None

      def batch_of(drawn, state, row):
        del drawn
        return {"tokens": lm_data.fetch_seeds(loaders, state.data_position, row)}

    sample_fn, advance = None, c.batch_size
    print(
      f"[lm] data: {index['tokenizer']} tokenizer ({index['vocab_size']} tokens), "
      f"{len(train_stream):,} train / {len(val_stream):,} validation tokens in "
      f"{setup['data']['folder']}; seeds {', '.join(map(str, seeds))} (vmapped)",
      flush=True,
    )

  def update(carry, drawn, key):
    state, row = carry
    new, metrics = train_lib.update(state, batch_of(drawn, state, row), key)
    return (new.replace(data_position=state.data_position + advance), row), metrics

  val = jnp.asarray(np.stack([np.asarray(v) for v in vals]))
  evaluate = jax.jit(jax.vmap(train_lib.eval_metrics))
  scores = lambda carry: {k: np.asarray(v) for k, v in evaluate(carry[0], val).items()}
  kw = {} if sample_fn is None else {"sample_fn": sample_fn}
  (state, _), result = fit(
    c, setup["model"], keys, workdir, loop, update, data=data, seeds=seeds, extra_eval=scores, **kw
  )
  steps = sorted(s for s, ev in result.evals_per_seed.items() if "val_loss" in ev[seeds[0]])
  if steps and jax.process_index() == 0:
    curve = lambda s: (steps, [result.evals_per_seed[t][s]["val_loss"] for t in steps])
    curves = {f"seed {s}": curve(s) for s in seeds}
    plots.lines(workdir / "validation.png", curves, "step", "held-out loss (nats)")
  if tok is not None:
    sample = sample_text(c, seeds_lib.take(state, 0), tok, keys[0])
    print(f"[lm] sample (seed {seeds[0]}):\n{sample}", flush=True)
  return state, result


def generate(config, workdir, seed: int) -> str:
  """--mode=generate: restores the latest checkpoint of a train run in ``workdir`` (one device)
  and returns (and prints) a sample. Read-only: it writes nothing, also on an error."""
  c, workdir, key = config, pathlib.Path(workdir), _key(seed)
  config_lib.validate_config(c, "generate")
  ckpt = workdir.absolute() / checkpoint.CKPT_DIR
  require(ckpt.is_dir(), "workdir", f"no checkpoint in {workdir}; train there first")
  folder, field = data_folder(c, workdir), data_field(c)
  index = shards.read_index(folder, field)
  require(index is not None, field, f"{folder} holds no tokenized data; train first")
  tok = shards.load_tokenizer(folder, index)
  cfg = LMConfig.from_config(c, attention="dense")  # same parameters; sampling runs on one device
  tx = train_lib.make_optimizer(c.lr, c.warmup, c.steps, c.weight_decay)  # only its structure
  like = train_lib.create_state(cfg, tx, jax.random.fold_in(key, 1), c.seq_len)
  state, step = restore_latest(ckpt, like)
  text = sample_text(c, state, tok, key)
  print(f"[lm] {workdir} at step {step}:\n{text}", flush=True)
  return text


def restore_latest(ckpt: pathlib.Path, like):
  """``(state, step)`` from the newest checkpoint in the folder ``ckpt`` that verifies, opened
  read-only (no folder or file created, nothing set aside) and closed before any error
  propagates."""
  verbosity = logging.get_verbosity()
  logging.set_verbosity(logging.ERROR)  # orbax warns that a read-only manager does not save
  try:
    opts = ocp.CheckpointManagerOptions(
      read_only=True, create=False, enable_async_checkpointing=False
    )
    mngr = ocp.CheckpointManager(ckpt, options=opts)
  finally:
    logging.set_verbosity(verbosity)
  try:
    step = mngr.latest_step()
    require(step is not None, "workdir", f"no checkpoint in {ckpt.parent}; train there first")
    check_shapes(ckpt / str(step) / "state", like)
    # A damaged latest checkpoint is skipped (one warning line) for the newest one that verifies.
    return checkpoint.restore_latest(mngr, like)
  finally:
    mngr.close()


def _shapes(tree) -> dict[str, tuple]:
  """``{"params/embed": shape}`` for every array leaf (attribute, dict and index keys alike)."""
  name = lambda k: str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k))))
  leaves = jax.tree_util.tree_leaves_with_path(tree)
  return {"/".join(map(name, p)): tuple(getattr(x, "shape", ())) for p, x in leaves}


def check_shapes(path: pathlib.Path, like) -> None:
  """Compares the checkpoint's array shapes with ``like``'s before restoring: a restore that
  fails half-way leaves orbax's reader threads printing tracebacks, so a model of another shape
  is refused here (``ConfigError('workdir')`` naming the first array that differs)."""
  try:
    handler = ocp.StandardCheckpointHandler()
    try:
      meta = handler.metadata(path)
    finally:
      handler.close()
  except Exception:  # an unreadable checkpoint is reported by the restore itself
    return
  saved, want = _shapes(getattr(meta, "tree", meta)), _shapes(like)
  odd = sorted(set(saved) ^ set(want))
  if saved and odd:
    where = "holds" if odd[0] in saved else "lacks"
    raise ConfigError(
      "workdir",
      f"the checkpoint in {path.parent.parent} {where} {odd[0]}, unlike this config's model: "
      "pass the model fields (--config.tie_embeddings, ...) it was trained with",
    )
  for k, shape in want.items():
    if k in saved and saved[k] != shape:
      raise ConfigError(
        "workdir",
        f"the checkpoint in {path.parent.parent} holds {k} of shape {saved[k]}, this config's "
        f"model needs {shape}: pass the model fields (--config.d_model, ...) it was trained with",
      )


def distill(config, workdir, loop, seed: int, mesh=None, setup=None) -> dict:
  """--mode=distill: a wider, deeper teacher on the data (``config.distill.teacher_steps``), then
  one student per objective for ``loop.num_steps``, same data; returns the held-out scores."""
  c, workdir = config, pathlib.Path(workdir)
  setup = prepare(c, "distill", workdir, mesh) if setup is None else setup
  with workdir_lib.session(workdir.absolute(), c.to_dict()) as wd:
    done = workdir_lib.finished(wd)  # a finished run re-run: its record, nothing rewritten
    return _recorded(wd, done) if done is not None else _distill(c, wd, loop, seed, mesh, setup)


def _recorded(workdir: pathlib.Path, summary: dict) -> dict:
  print(f"[lm] {workdir} holds a finished run (nothing rewritten); its record:", flush=True)
  print(json.dumps({k: v for k, v in summary.items() if k != "provenance"}, indent=1))
  return summary


def _distill(c, workdir: pathlib.Path, loop, seed: int, mesh, setup) -> dict:
  key = _key(seed)
  corpus, heldout = load_corpus(c, jax.random.fold_in(key, 7), setup)
  sample, data = window_sampler(c, mesh), {"corpus": jnp.asarray(corpus)}
  t_loop = dataclasses.replace(loop, num_steps=c.distill.teacher_steps)
  teacher, t_result = fit(
    c,
    setup["teacher"],
    key,
    workdir / "teacher",
    t_loop,
    train_lib.update,
    mesh,
    data,
    sample_fn=sample,
  )
  ev_tokens = heldout_batches(c, heldout, key, c.distill.eval_batches)
  evaluate = jax.jit(distill_lib.heldout_metrics)
  scores = lambda state: {k: float(v) for k, v in evaluate(state, teacher, ev_tokens).items()}
  t_loss, t_nll = t_result.summary.get("train/loss"), scores(teacher)["heldout_nll"]
  results = {"teacher": {"train/loss": t_loss, "heldout_nll": t_nll}}
  curves = {}
  for kind in setup["losses"]:
    _, result = fit(
      c,
      setup["model"],
      jax.random.fold_in(key, 3),
      workdir / f"student_{kind}",
      loop,
      distill_lib.student_update(kind, teacher),
      mesh,
      {**data, "teacher": teacher.params},
      sample_fn=sample,
      extra_eval=scores,
    )
    # The summary's eval/ entries hold the last evaluation, also for a finished run re-run.
    results[kind] = {k[5:]: v for k, v in result.summary.items() if k.startswith("eval/heldout")}
    evals = sorted((s, ev["heldout_nll"]) for s, ev in result.evals.items() if "heldout_nll" in ev)
    if evals:
      curves[kind] = tuple(zip(*evals))
  runtime.write_summary(workdir, results)
  if curves:
    title = "student objectives (teacher-distilled)"
    plots.lines(workdir / "distill.png", curves, "step", "held-out NLL (nats)", title=title)
  print(json.dumps(results, indent=1))
  return results


def capacity(config, workdir, seed: int, setup=None, seeds=None) -> dict:
  """--mode=capacity: one in-memory, single-device probe per width of ``config.capacity``;
  writes ``summary.json`` and the plots to ``workdir`` and returns the summary. ``seeds`` (more
  than one): every probe trains those seeds vmapped in one program (`capacity.probe_seeds`); the
  figures are means over seeds, each seed's under the probe's ``per_seed``."""
  workdir = pathlib.Path(workdir)
  setup = prepare(config, "capacity", workdir) if setup is None else setup
  seeds = tuple(seeds) if seeds is not None and len(seeds) > 1 else None
  record = config.to_dict() | ({"seeds": list(seeds)} if seeds else {})
  if seeds:
    memory.check_capacity(config.capacity, setup["widths"], len(seeds))
  with workdir_lib.session(workdir.absolute(), record) as wd:
    done = workdir_lib.finished(wd)  # a finished run re-run: its record, nothing rewritten
    if done is not None:
      return _recorded(wd, done)
    return _capacity(config, wd, seed, setup, seeds)


def _capacity(config, workdir: pathlib.Path, seed: int, setup, seeds=None) -> dict:
  cc = config.capacity
  key = _key(seed) if seeds is None else seeds_lib.seed_keys(seeds)
  mean = f" (means over {len(seeds)} seeds)" if seeds else ""

  def report(r):
    print(
      f"[capacity] d_model={r['d_model']}: {r['params']} params, memorised "
      f"{r['memorised_bits']:.0f} / {r['data_bits']} bits -> {r['bits_per_param']:.3f} bits/param"
      + mean,
      flush=True,
    )

  rows = capacity_lib.sweep(
    setup["widths"], cc.num_strings, cc.length, cc.steps, key, cc.lr, report, seeds
  )
  losses = {f"d_model={r['d_model']}": r.pop("losses") for r in rows}
  ref = capacity_lib.REFERENCE_BITS_PER_PARAM
  summary = {"probes": rows, "reference_bits_per_param": ref}
  summary |= {"seeds": list(seeds)} if seeds else {}
  runtime.write_summary(workdir, summary)
  params = [r["params"] for r in rows]
  bits = {
    "memorised": (params, [max(r["memorised_bits"], 1e-3) for r in rows]),  # log axis
    f"{ref} bits/param": (params, [ref * p for p in params]),
  }
  plots.lines(workdir / "capacity.png", bits, "parameters", "bits", logx=True, logy=True)
  loss_curves = {k: (np.arange(1, len(v) + 1), v) for k, v in losses.items()}
  plots.lines(workdir / "capacity_loss.png", loss_curves, "step", "training loss (nats)")
  print(f"-> {workdir}/summary.json", flush=True)
  return summary


def run(mode: str, config, workdir, loop, seed: int, mesh=None, setup=None, seeds=None):
  """Dispatches ``mode`` (`jaxlab.lm.config.MODES`) as the program does; ``seeds`` (more than
  one) only for `SEEDED_MODES` (`train_seeds`, `capacity`), the others run ``seed`` alone."""
  if seeds is not None and len(seeds) > 1:
    require(mode in SEEDED_MODES, "seeds", f"--mode={mode} runs one seed; use --seed")
    if mode == "capacity":
      return capacity(config, workdir, seed, setup, seeds)
    return train_seeds(config, workdir, loop, seeds, mesh, setup)
  if mode == "generate":
    return generate(config, workdir, seed)
  if mode == "capacity":
    return capacity(config, workdir, seed, setup)
  return {"train": train, "distill": distill}[mode](config, workdir, loop, seed, mesh, setup)
