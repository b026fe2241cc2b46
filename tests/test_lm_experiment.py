"""The LM pieces behind experiments.lm (data, FLOPs, distillation step, capacity) and its CLI."""

import dataclasses
import importlib.util
import json
import math
import os
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core import runtime
from jaxlab.core.errors import ConfigError
from jaxlab.core.mesh import make_mesh
from jaxlab.lm import capacity, distill, flops, modes, train
from jaxlab.lm import config as lm_config
from jaxlab.lm import data as lm_data
from jaxlab.lm.model import LMConfig

ROOT = pathlib.Path(__file__).resolve().parents[1]
TINY = LMConfig.from_config(
  lm_config.get_config(),
  vocab_size=32,
  d_model=32,
  n_layers=1,
  n_heads=4,
  n_kv_heads=2,
  head_dim=8,
  mlp_dim=64,
)


def test_python_usage_snippet(tmp_path, monkeypatch):
  """docs/lm.md's "Use from Python" snippet, verbatim: the default run (BPE on the embedded
  text) through the program's own library functions, then --mode=generate."""
  monkeypatch.chdir(tmp_path)
  from jaxlab.core import runtime
  from jaxlab.lm import config, modes

  c = config.get_config()  # python -m experiments.lm: BPE on the embedded Tiny Shakespeare
  c.n_layers, c.seq_len, c.generate.tokens = 1, 32, 16  # tiny: seconds on a CPU
  loop = runtime.Loop(20, log_every=10, ckpt_every=20)  # --steps, --log_every, --ckpt_every
  state, result = modes.train(c, "runs/lm", loop, seed=0)  # shards, checkpoints, summary.json
  print(f"validation loss {result.summary['eval/val_loss']:.2f} nats")
  sample = modes.generate(c, "runs/lm", seed=0)  # --mode=generate: from the latest checkpoint

  run = tmp_path / "runs" / "lm"
  assert int(state.step) == 20 and result.summary["step"] == 20
  assert result.summary["eval/val_loss"] < math.log(512)  # it learns (uniform: log 512)
  assert json.loads((run / "data" / "index.json").read_text())["tokenizer"] == "bpe"
  assert (run / "validation.png").exists() and (run / "summary.json").exists()
  assert sample.startswith("ROMEO:") and len(sample) > len("ROMEO:")


def test_low_level_snippet():
  """docs/lm.md's low-level snippet: the tiny transformer on in-memory Markov windows."""
  from jaxlab.lm import config, data, train
  from jaxlab.lm.model import LMConfig

  cfg = LMConfig.from_config(config.get_config(), vocab_size=256, mlp_dim=128)
  tx = train.make_optimizer(lr=1e-2, warmup=5, total=30, wd=0.0)
  state = train.create_state(cfg, tx, jax.random.key(0), seq_len=64)
  corpus = jnp.asarray(data.synthetic_corpus(jax.random.key(1), 20_000, cfg.vocab_size, 0.05))
  step = jax.jit(train.update)
  for i in range(30):
    batch = data.sample_windows(corpus, jax.random.key(i), batch=16, seq_len=64)
    state, metrics = step(state, batch)  # batch = {"tokens": int32[16, 65]}
  print(f"step {int(state.step)}: loss {float(metrics['loss']):.3f}")
  logits = state(batch["tokens"][:, :-1])  # float32[16, 64, 256]

  assert batch["tokens"].shape == (16, 65) and logits.shape == (16, 64, 256)
  assert int(state.step) == 30 and float(metrics["loss"]) < math.log(256) - 0.5


# ------------------------------------------------------------------------------- config


def _preset_file():
  spec = importlib.util.spec_from_file_location("_lm_presets", ROOT / "experiments/configs/lm.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_from_config_reads_every_model_field_of_get_config():
  c = lm_config.get_config()
  cfg = LMConfig.from_config(c)
  for f in dataclasses.fields(LMConfig):
    want = tuple(c[f.name]) if f.name == "frame_shape" else c[f.name]
    assert getattr(cfg, f.name) == want, f.name
  assert LMConfig.from_config(c, d_model=32, attention="ring").d_model == 32
  assert c.d_model == 64  # overrides leave the config alone
  with pytest.raises(TypeError, match="d_modle"):
    LMConfig.from_config(c, d_modle=32)
  with pytest.raises(TypeError):  # no defaults of its own: every field is given
    LMConfig(vocab_size=32)


def test_presets_change_fields_of_the_library_config():
  presets = _preset_file()
  base = lm_config.get_config().to_dict()
  assert presets.get_config().to_dict() == base == presets.get_config("tiny").to_dict()
  for name in ("small", "1b", "pod"):
    c = presets.get_config(name).to_dict()
    assert set(c) == set(base) and c["name"] == name  # no field of its own
    LMConfig.from_config(presets.get_config(name))  # a valid model
  with pytest.raises(ValueError, match="unknown preset"):
    presets.get_config("huge")


def test_validate_config_names_the_field():
  def field_of(mode, mesh=None, **changes):
    c = lm_config.get_config()
    for path, v in changes.items():
      node, *rest = path.split("__")
      if rest:
        c[node][rest[0]] = v
      else:
        c[node] = v
    with pytest.raises(ConfigError) as e:
      lm_config.validate_config(c, mode, mesh)
    return e.value.field

  assert field_of("train", lr=float("nan")) == "config.lr"
  assert field_of("train", n_kv_heads=3) == "config.n_kv_heads"
  assert field_of("train", distill__losses="nll,kl") == "config.distill.losses"
  assert field_of("capacity", capacity__d_models="17") == "config.capacity.d_models"
  fsdp = make_mesh("fsdp:8")  # the teacher width 100 does not split over it
  assert field_of("distill", fsdp, distill__teacher_d_model=100) == "config.distill.teacher_d_model"
  assert field_of("sample") == "mode"
  mesh = make_mesh("data:8")
  assert field_of("train", mesh, batch_size=12) == "config.batch_size"
  assert field_of("train", make_mesh("data:2,context:4")) == "config.attention"
  ok = lm_config.setup(lm_config.get_config(), "distill")
  assert ok["losses"] == ["nll", "hpd", "forward_kl"] and ok["teacher"].d_model == 128
  assert lm_config.setup(lm_config.get_config(), "capacity") == {"widths": [16, 32]}


def _tiny_synthetic():
  c = lm_config.get_config()
  c.text, c.vocab_size, c.corpus_tokens, c.seq_len, c.batch_size = "synthetic", 32, 3000, 16, 4
  c.d_model, c.n_layers, c.head_dim, c.mlp_dim = 32, 1, 8, 64
  c.distill.teacher_d_model, c.distill.teacher_layers, c.distill.teacher_steps = 32, 1, 4
  c.distill.losses, c.distill.eval_batches, c.val_batches = "hpd", 2, 2
  return c


def test_modes_distill_and_capacity_write_their_reports(tmp_path):
  """The library functions behind --mode=distill and --mode=capacity (tiny, synthetic)."""
  c = _tiny_synthetic()
  loop = runtime.Loop(4, log_every=2, ckpt_every=4, progress=False)
  results = modes.distill(c, tmp_path / "distill", loop, seed=0)
  assert set(results) == {"teacher", "hpd"}
  assert np.isfinite(results["hpd"]["heldout_nll"]) and np.isfinite(results["hpd"]["heldout_fkl"])
  summary = json.loads((tmp_path / "distill" / "summary.json").read_text())
  assert summary["teacher"]["heldout_nll"] == results["teacher"]["heldout_nll"]
  assert (tmp_path / "distill" / "distill.png").exists()
  assert (tmp_path / "distill" / "student_hpd" / "summary.json").exists()
  c.capacity.d_models, c.capacity.num_strings, c.capacity.length, c.capacity.steps = "16", 8, 8, 5
  report = modes.capacity(c, tmp_path / "capacity", seed=0)
  assert [r["d_model"] for r in report["probes"]] == [16]
  assert report["reference_bits_per_param"] == capacity.REFERENCE_BITS_PER_PARAM
  for name in ("summary.json", "capacity.png", "capacity_loss.png"):
    assert (tmp_path / "capacity" / name).exists()


def test_mode_train_on_synthetic_data(tmp_path):
  c = _tiny_synthetic()
  loop = runtime.Loop(4, log_every=2, ckpt_every=4, progress=False)
  state, result = modes.run("train", c, tmp_path / "run", loop, 0)
  assert int(state.step) == 4 and np.isfinite(result.summary["eval/val_loss"])
  assert result.summary["params"] > 0 and "data" not in {
    p.name for p in (tmp_path / "run").iterdir()
  }


# the text corpora share their stacking with "synthetic"; they run under -m slow
@pytest.mark.parametrize(
  "data",
  [
    "synthetic",
    pytest.param("text", marks=pytest.mark.slow),
    pytest.param("text_from_host", marks=pytest.mark.slow),
  ],
)
def test_vmapped_seeds_equal_each_seed_alone(tmp_path, monkeypatch, data):
  """--seeds: seeds train in one compiled program, each on its own synthetic corpus or loader
  order (the data stacks every seed's corpus or window table; a stream too large for the device
  is read per seed on the host), its own init and validation batches; seed 4 equals seed 4 alone."""
  from jaxlab.core import seeds as seeds_lib

  c = _tiny_synthetic()
  if data != "synthetic":
    c.text, c.tokenizer, c.vocab_size, c.data_dir = "embedded", "bytes", 257, str(tmp_path / "d")
  if data == "text_from_host":
    monkeypatch.setattr(lm_data, "DEVICE_BYTES", 0)
  loop = runtime.Loop(6, log_every=3, ckpt_every=6, progress=False, tensorboard=False)
  both, vmapped = modes.train(c, tmp_path / "v", loop, 0, seeds=(1, 4))
  alone, solo = modes.train(c, tmp_path / "s", loop, 4)
  for a, b in zip(jax.tree.leaves(seeds_lib.take(both, 1)), jax.tree.leaves(alone)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-5, atol=2e-6)
  first = np.asarray(jax.tree.leaves(both.params)[0])
  assert not np.allclose(first[0], first[1])  # the seeds differ
  mine = vmapped.per_seed[4]
  for k in ("train/loss", "eval/val_loss"):
    assert mine[k] == pytest.approx(solo.summary[k], rel=1e-5), k
  assert vmapped.summary["seeds"] == [1, 4] and (tmp_path / "v" / "validation.png").exists()
  assert json.loads((tmp_path / "v" / "config.json").read_text())["seeds"] == [1, 4]


# ------------------------------------------------------------------------------- data


def test_synthetic_corpus_is_learnable_and_deterministic():
  a = lm_data.synthetic_corpus(jax.random.key(0), 20_000, 16, alpha=0.05)
  b = lm_data.synthetic_corpus(jax.random.key(0), 20_000, 16, alpha=0.05)
  np.testing.assert_array_equal(a, b)
  assert a.dtype == np.int32 and a.min() >= 0 and a.max() < 16
  # Peaky bigram rows: the empirical conditional entropy is far below log(vocab).
  counts = np.zeros((16, 16))
  np.add.at(counts, (a[:-1], a[1:]), 1)
  p = counts / np.maximum(counts.sum(1, keepdims=True), 1)
  h = -np.sum(counts.sum(1) / counts.sum() * np.sum(p * np.log(np.where(p > 0, p, 1.0)), 1))
  assert h < 0.5 * math.log(16)


def test_heldout_split_and_windows():
  corpus = np.arange(1000, dtype=np.int32)
  train_part, held = lm_data.heldout_split(corpus, seq_len=8, fraction=0.1)
  assert len(held) == 100 and len(train_part) == 900 and train_part[-1] + 1 == held[0]
  _, held = lm_data.heldout_split(corpus, seq_len=300, fraction=0.1)
  assert len(held) == 302  # at least one window
  batch = lm_data.sample_windows(jnp.asarray(corpus), jax.random.key(0), batch=4, seq_len=8)
  tokens = np.asarray(batch["tokens"])
  assert tokens.shape == (4, 9)
  np.testing.assert_array_equal(np.diff(tokens, axis=1), 1)  # contiguous windows
  with pytest.raises(ConfigError) as e:
    lm_data.check_length("config.seq_len", 100, 99)
  assert e.value.field == "config.seq_len"
  lm_data.check_length("config.seq_len", 100, 98)


# ------------------------------------------------------------------------------- FLOPs


def test_flops_and_peaks():
  n = 10_000
  attn = 6 * TINY.n_layers * 16 * TINY.n_heads * TINY.head_dim
  assert flops.flops_per_token(TINY, 16, n) == 6 * (n - 32 * 32) + attn
  assert flops.peak_flops(2.5) == (2.5e12, "config")
  assert flops.peak_flops(device_kind="NVIDIA H100 80GB HBM3")[0] == 989e12
  assert flops.peak_flops(device_kind="TPU v5p")[0] == 459e12  # v5p before v5 (lite)
  assert flops.device_peak_flops("cpu") is None
  assert flops.peak_flops(device_kind="cpu")[0] is None  # no MFU against an invented peak
  tied = LMConfig(**{**TINY.__dict__, "tie_embeddings": True})
  assert flops.flops_per_token(tied, 16, n) == 6 * n + attn  # the tied matrix is a matmul
  no_peak = flops.ThroughputMeter(1, 1.0, None, 1)
  no_peak(None, 0)
  assert set(no_peak(None, 1)) == {"tokens_per_sec"}
  meter = flops.ThroughputMeter(tokens_per_step=100, flops_per_step=1e9, peak=1e12, n_devices=2)
  assert meter(None, 0) == {}  # the first call starts the clock (compilation is not counted)
  out = meter(None, 10)
  assert out["tokens_per_sec"] > 0
  np.testing.assert_allclose(out["mfu"], out["tokens_per_sec"] / 100 * 1e9 / 2e12)


# ------------------------------------------------------------------------------- distillation


@pytest.fixture(scope="module")
def states():
  tx = train.make_optimizer(lr=1e-2, warmup=1, total=10, wd=0.0)
  student = train.create_state(TINY, tx, jax.random.key(0), seq_len=16)
  # Another model of the same shape (no second compile): rescaled, shifted weights.
  teacher = student.replace(params=jax.tree.map(lambda p: 1.5 * p + 0.05, student.params))
  tokens = jax.random.randint(jax.random.key(2), (4, 17), 0, TINY.vocab_size)
  return student, teacher, tokens


def test_nll_student_step_equals_lm_step(states):
  """The distillation step with objective 'nll' is exactly the LM's own step."""
  student, teacher, tokens = states
  update = distill.student_update("nll", teacher)
  batch = {"tokens": tokens, "teacher": teacher.params}
  new, m = jax.jit(update)(student, batch, jax.random.key(3))
  ref, ref_m = jax.jit(train.update)(student, {"tokens": tokens})
  np.testing.assert_allclose(m["loss"], ref_m["loss"], rtol=1e-6)
  assert int(new.step) == 1
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6), new.params, ref.params)
  # The teacher is used through the batch: a KL student moves towards it.
  kl_update = jax.jit(distill.student_update("forward_kl", teacher))
  fkl = jax.jit(lambda s: distill.heldout_metrics(s, teacher, tokens[None])["heldout_fkl"])
  s = student
  for i in range(5):
    s, _ = kl_update(s, batch, jax.random.key(i))
  assert fkl(s) < 0.9 * fkl(student)
  with pytest.raises(ConfigError, match="kind"):
    distill.student_update("kl", teacher)


def test_heldout_metrics_of_the_teacher_itself(states):
  _, teacher, tokens = states
  m = jax.jit(distill.heldout_metrics)(teacher, teacher, jnp.stack([tokens, tokens[::-1]]))
  np.testing.assert_allclose([m["heldout_fkl"], m["heldout_rkl"]], 0.0, atol=1e-5)
  nll, _ = train.next_token_loss(teacher(tokens[:, :-1]), tokens[:, 1:])
  np.testing.assert_allclose(m["heldout_nll"], nll, rtol=1e-5)


# ------------------------------------------------------------------------------- capacity


def test_capacity_probe_runs_in_memory(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  r = capacity.probe(16, num_strings=8, length=8, steps=30, key=jax.random.key(0), lr=1e-2)
  assert list(tmp_path.iterdir()) == []  # the runtime ran without a workdir
  assert r["losses"].shape == (30,) and r["final_loss"] == float(r["losses"][-1])
  assert r["losses"][-5:].mean() < r["losses"][:5].mean()  # it trains
  assert r["data_bits"] == 64 and 0 <= r["memorised_bits"] <= 64
  assert r["bits_per_param"] == r["memorised_bits"] / r["params"]


def test_capacity_seeds_vmapped_equal_each_seed_alone(tmp_path):
  """--mode=capacity --seeds: every probe trains the seeds in one program, each on its own
  bitstrings and initialisation; seed 4 there is the run of seed 4 alone."""
  c = _tiny_synthetic()
  c.capacity.d_models, c.capacity.num_strings, c.capacity.length, c.capacity.steps = "16", 8, 8, 20
  both = modes.run("capacity", c, tmp_path / "v", None, 0, seeds=(1, 4))
  alone = modes.run("capacity", c, tmp_path / "s", None, 4)
  (probe,), (solo,) = both["probes"], alone["probes"]
  assert both["seeds"] == [1, 4] and probe["params"] == solo["params"]
  for k in ("final_loss", "memorised_bits", "bits_per_param"):
    assert probe["per_seed"][4][k] == pytest.approx(solo[k], rel=1e-4, abs=1e-4), k
  assert probe["per_seed"][1]["final_loss"] != pytest.approx(solo["final_loss"], rel=1e-4)
  summary = json.loads((tmp_path / "v" / "summary.json").read_text())
  assert set(summary["probes"][0]["per_seed"]) == {"1", "4"}


def test_capacity_widths_are_validated():
  assert capacity.parse_widths("w", "16, 32") == [16, 32]
  for bad in ("17", "", "a,b", "0"):
    with pytest.raises(ConfigError) as e:
      capacity.parse_widths("config.capacity.d_models", bad)
    assert e.value.field == "config.capacity.d_models"


# ------------------------------------------------------------------------------- CLI


def _cli(args, cwd, devices=1, timeout=300):
  """``python -m experiments.lm ARGS`` in a fresh process, run from ``cwd``."""
  env = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}",
    "JAX_PLATFORMS": "cpu",
  }
  cmd = [sys.executable, "-m", "experiments.lm", *args]
  return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def test_cli_bad_input_exits_2_naming_the_field(tmp_path):
  """Bad config values: one line, exit 2, before anything is written (cwd included)."""
  cases = {
    "--config.lr=nan": "--config.lr",
    "--config.n_kv_heads=3": "--config.n_kv_heads",
    "--config.seq_len=50000": "--config.seq_len",  # longer than the embedded validation text
    f"--config.text={tmp_path}/missing": "--config.text",
    "--config.vocab_size=100": "--config.vocab_size",  # BPE needs the 256 bytes + EOT
    "--mode=generate": "--workdir",  # nothing trained there
    "--seeds=0": "--seeds",
    "--seeds=1,1": "--seeds",
    ("--seeds=2", "--mode=generate"): "--seeds",  # only --mode=train vmaps seeds
    ("--seeds=2", "--mesh=data:-1"): "--seeds",  # on one device
  }
  for arg, field in cases.items():
    args = list(arg) if isinstance(arg, tuple) else [arg]
    r = _cli([*args, f"--workdir={tmp_path}/run"], tmp_path, timeout=120)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, r.stderr[-2000:]
    assert lines[0].startswith(f"error: {field}:"), lines
  assert list(tmp_path.iterdir()) == []


@pytest.mark.slow  # ~30 s CPU (two fresh processes); test_lm_data covers the pieces in-process
def test_cli_trains_bpe_on_text_and_generates_from_the_checkpoint(tmp_path):
  """The default data path: BPE on the embedded text, shards, validation curve; then
  --mode=generate restores the checkpoint and samples the same text the run printed."""
  args = [
    f"--workdir={tmp_path}/run",
    "--steps=4",
    "--log_every=2",
    "--config.n_layers=1",
    "--config.seq_len=32",
    "--config.vocab_size=300",
    "--config.generate.tokens=12",
    "--config.generate.temperature=0",
  ]
  out = _cli(args, tmp_path)
  assert out.returncode == 0, out.stderr[-2000:]
  run = tmp_path / "run"
  index = json.loads((run / "data" / "index.json").read_text())
  assert index["tokenizer"] == "bpe" and index["vocab_size"] == 300
  assert (run / "data" / "tokenizer" / "tokenizer.json").exists()
  evals = (run / "eval.csv").read_text().splitlines()
  assert "val_loss" in evals[0] and "val_perplexity" in evals[0] and len(evals) >= 3
  assert (run / "validation.png").exists()
  summary = json.loads((run / "summary.json").read_text())
  assert summary["step"] == 4 and np.isfinite(summary["eval/val_loss"])
  sample = out.stdout.split("[lm] sample:\n", 1)[1].strip()
  assert sample.startswith("ROMEO:") and len(sample) > len("ROMEO:")
  gen = _cli(args + ["--mode=generate"], tmp_path)
  assert gen.returncode == 0, gen.stderr[-2000:]
  assert "at step 4" in gen.stdout and gen.stdout.rstrip().endswith(sample)
  assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


@pytest.mark.slow  # ~30 s CPU (fresh JAX import + compile); in-process tests cover the same paths
def test_experiment_cli_mesh_run(tmp_path):
  """`python -m experiments.lm` on data:2,fsdp:2,context:2 trains and writes its outputs."""
  args = [
    f"--workdir={tmp_path}/run",
    "--steps=4",
    "--log_every=2",
    "--mesh=data:2,fsdp:2,context:2",
    "--config.attention=ulysses",
    "--config.seq_len=32",
    "--config.vocab_size=300",
    "--config.n_layers=1",
  ]
  out = _cli(args, tmp_path, devices=8)
  assert out.returncode == 0, out.stderr[-2000:]
  assert "tokens/s" in out.stdout and "MFU" in out.stdout
  summary = json.loads((tmp_path / "run" / "summary.json").read_text())
  assert summary["step"] == 4 and np.isfinite(summary["train/loss"])
  assert summary["tokens_per_sec"] > 0 and summary["params"] > 0
  assert (tmp_path / "run" / "tb").exists() and (tmp_path / "run" / "checkpoints").exists()


# ------------------------------------------------------------------------------- generation


def test_greedy_generation_is_self_consistent_and_eval_metrics(states):
  """Greedy tokens are the argmax of the model's own logits on the final buffer (causality);
  validation perplexity is exp(loss)."""
  from jaxlab.lm import generate

  student, _, tokens = states
  prompt = tokens[:, :5]
  out = jax.jit(generate.generate, static_argnums=(2, 4))(
    student, prompt, 11, jax.random.key(0), 0.0
  )
  assert out.shape == (4, 16)
  np.testing.assert_array_equal(out[:, :5], prompt)
  logits = student(out)
  np.testing.assert_array_equal(out[:, 5:], jnp.argmax(logits[:, 4:-1], -1))
  m = jax.jit(train.eval_metrics)(student, tokens[None])
  nll, _ = train.next_token_loss(student(tokens[:, :-1]), tokens[:, 1:])
  np.testing.assert_allclose([m["val_loss"], m["val_perplexity"]], [nll, np.exp(nll)], rtol=1e-5)
  with pytest.raises(ConfigError) as e:
    generate.generate(student, prompt, 0, jax.random.key(0))
  assert e.value.field == "num_tokens"
