"""experiments.lm / benchmarks.lm on bad input (one line, exit 2, nothing written), sizes that
cannot fit (refused before allocation), read-only generation and byte-identical re-runs."""

import hashlib
import json
import pathlib

import pytest
from programs import run_program

from jaxlab.core import runtime
from jaxlab.core.errors import ConfigError
from jaxlab.lm import config as lm_config
from jaxlab.lm import modes, shards


def _set(c, **kw):
  for name, value in kw.items():
    node, *path = name.split("__")
    target = c
    for part in [node, *path][:-1]:
      target = target[part]
    target[[node, *path][-1]] = value
  return c


def _tiny_synthetic():
  c = lm_config.get_config()
  c.text, c.vocab_size, c.corpus_tokens, c.seq_len, c.batch_size = "synthetic", 32, 3000, 16, 4
  c.d_model, c.n_layers, c.head_dim, c.mlp_dim = 32, 1, 8, 64
  c.distill.teacher_d_model, c.distill.teacher_layers, c.distill.teacher_steps = 32, 1, 2
  c.distill.losses, c.distill.eval_batches, c.val_batches = "nll", 1, 1
  c.capacity.d_models, c.capacity.num_strings, c.capacity.length, c.capacity.steps = "16", 8, 8, 5
  return c


def _tiny_bytes():
  c = lm_config.get_config()
  c.tokenizer, c.vocab_size, c.seq_len, c.batch_size, c.val_batches = "bytes", 260, 16, 4, 1
  c.d_model, c.n_layers, c.head_dim, c.mlp_dim, c.generate.tokens = 32, 1, 8, 64, 4
  return c


def _files(root: pathlib.Path) -> dict[str, str]:
  """Every file below ``root`` and its hash (the lock file records the last pid: left out)."""
  return {
    str(p.relative_to(root)): hashlib.sha1(p.read_bytes()).hexdigest()
    for p in sorted(root.rglob("*"))
    if p.is_file() and p.name != ".lock"
  }


# ------------------------------------------------------------------------------- sizes


@pytest.mark.parametrize(
  "mode,kw,field",
  [
    ("train", {"vocab_size": 10**8}, "config.vocab_size"),
    ("train", {"vocab_size": 3 * 10**9}, "config.vocab_size"),  # int32
    ("train", {"batch_size": 10**9}, "config.batch_size"),
    ("train", {"batch_size": 10**6}, "config.batch_size"),  # int32-safe, but 600 GiB
    ("train", {"seq_len": 10**9}, "config.seq_len"),
    ("train", {"mlp_dim": 10**9}, "config.mlp_dim"),
    ("train", {"val_batches": 10**9}, "config.val_batches"),
    ("distill", {"distill__eval_batches": 10**9}, "config.distill.eval_batches"),
    ("train", {"text": "synthetic", "vocab_size": 300_000}, "config.vocab_size"),
    ("train", {"text": "synthetic", "corpus_tokens": 10**11}, "config.corpus_tokens"),
    ("distill", {"distill__teacher_d_model": 10**6}, "config.distill.teacher_d_model"),
    ("generate", {"generate__tokens": 10**9}, "config.generate.tokens"),
    ("capacity", {"capacity__num_strings": 10**9}, "config.capacity.num_strings"),
    ("capacity", {"capacity__num_strings": 10**7}, "config.capacity.num_strings"),
    ("capacity", {"capacity__length": 10**9}, "config.capacity.length"),
    ("capacity", {"capacity__d_models": "16,1048576"}, "config.capacity.d_models"),
  ],
)
def test_sizes_that_cannot_fit_are_refused_before_allocation(mode, kw, field):
  c = _set(lm_config.get_config(), **kw)
  with pytest.raises(ConfigError) as e:
    lm_config.validate_config(c, mode)
  assert e.value.field == field, e.value
  assert "needs about" in e.value.message or "overflows" in e.value.message


def test_frame_shape_must_be_a_pair():
  c = _set(lm_config.get_config(), frame_shape=(1, 2, 3))
  with pytest.raises(ConfigError) as e:
    lm_config.validate_config(c, "train")
  assert e.value.field == "config.frame_shape"


def test_valid_sizes_pass():
  # The default run of every mode fits: the memory estimates refuse only what cannot.
  refused = {}
  for mode in lm_config.MODES:
    try:
      lm_config.validate_config(lm_config.get_config(), mode)
    except ConfigError as e:
      refused[mode] = f"{e.field}: {e.message}"
  assert refused == {}


# ------------------------------------------------------------------------------- data folders


@pytest.mark.parametrize("bad", ["file", "not_json", "empty_object", "list", "missing_shard"])
def test_bad_data_folder_is_config_error(tmp_path, bad):
  folder = tmp_path / "data"
  if bad == "file":
    folder.write_text("x")
  else:
    folder.mkdir()
    text = {"not_json": "{oops", "empty_object": "{}", "list": "[1]"}.get(bad)
    if bad == "missing_shard":
      splits = {s: {"shards": [f"{s}_00000.npy"], "tokens": [10]} for s in shards.SPLITS}
      index = dict(recipe={}, tokenizer="bytes", vocab_size=257, eot_id=256, dtype="uint16")
      text = json.dumps({**index, "splits": splits})
    (folder / "index.json").write_text(text)
  with pytest.raises(ConfigError) as e:
    shards.read_index(folder)
  assert e.value.field == "config.data_dir"


def test_cli_bad_input_one_line_exit_2_nothing_written(tmp_path):
  """Bad data folders, impossible sizes, generate without a checkpoint: one line, exit 2, no
  workdir (nor checkpoints/ folder) created."""
  fixtures = tmp_path / "fixtures"
  (fixtures / "not_json").mkdir(parents=True)
  (fixtures / "not_json" / "index.json").write_text("not json")
  (fixtures / "empty").mkdir()
  (fixtures / "empty" / "index.json").write_text("{}")
  (fixtures / "a_file").write_text("x")
  cwd = tmp_path / "cwd"
  cwd.mkdir()
  cases = [
    ([f"--config.data_dir={fixtures / 'a_file'}"], "--config.data_dir"),
    ([f"--config.data_dir={fixtures / 'not_json'}"], "--config.data_dir"),
    ([f"--config.data_dir={fixtures / 'empty'}"], "--config.data_dir"),
    (["--config.vocab_size=100000000"], "--config.vocab_size"),
    (["--config.batch_size=1000000000"], "--config.batch_size"),
    (
      ["--mode=capacity", "--config.capacity.num_strings=1000000000"],
      "--config.capacity.num_strings",
    ),
    (["--mode=generate"], "--workdir"),
  ]
  before = _files(fixtures)
  for args, field in cases:
    r = run_program("experiments.lm", [*args, f"--workdir={cwd}/run"], cwd, timeout=120)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, (args, r.stderr[-2000:])
    assert lines[0].startswith(f"error: {field}:"), lines
    assert "Traceback" not in r.stderr
    assert list(cwd.iterdir()) == [], args
  assert _files(fixtures) == before


def test_benchmark_batch_that_cannot_fit_is_refused(tmp_path):
  r = run_program("benchmarks.lm", ["--part=throughput", "--batch=1000000"], tmp_path, timeout=120)
  lines = r.stderr.strip().splitlines()
  assert r.returncode == 2 and len(lines) == 1, r.stderr[-2000:]
  assert lines[0].startswith("error: --batch: needs about"), lines
  assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------- re-runs


def test_capacity_goes_through_the_workdir_session(tmp_path):
  """A finished capacity run re-run reports its record and rewrites nothing; another setting
  into the same workdir is refused naming the field."""
  c, wd = _tiny_synthetic(), tmp_path / "cap"
  first = modes.capacity(c, wd, seed=0)
  files = _files(wd)
  assert {"summary.json", "config.json", "capacity.png", "capacity_loss.png"} <= set(files)
  again = modes.capacity(c, wd, seed=0)
  assert again["probes"] == json.loads(json.dumps(first["probes"]))
  assert _files(wd) == files
  c.capacity.lr = 0.01
  with pytest.raises(ConfigError) as e:
    modes.capacity(c, wd, seed=0)
  assert e.value.field == "workdir" and "capacity.lr" in e.value.message
  assert _files(wd) == files


def test_distill_rerun_leaves_every_file_identical(tmp_path):
  c, wd = _tiny_synthetic(), tmp_path / "distill"
  loop = runtime.Loop(2, log_every=1, ckpt_every=2, progress=False)
  first = modes.distill(c, wd, loop, seed=0)
  files = _files(wd)
  again = modes.distill(c, wd, loop, seed=0)
  assert again["nll"] == first["nll"] and _files(wd) == files
  c.lr = 1e-3
  with pytest.raises(ConfigError) as e:
    modes.distill(c, wd, loop, seed=0)
  assert e.value.field == "workdir" and _files(wd) == files


def test_generate_is_read_only_and_refuses_another_model_shape(tmp_path):
  c, wd = _tiny_bytes(), tmp_path / "run"
  with pytest.raises(ConfigError) as e:  # nothing trained yet: no folder created
    modes.generate(c, wd, seed=0)
  assert e.value.field == "workdir" and "no checkpoint in" in e.value.message
  assert not wd.exists()
  modes.train(c, wd, runtime.Loop(2, log_every=1, ckpt_every=2, progress=False), seed=0)
  files = _files(wd)
  text = modes.generate(c, wd, seed=0)
  assert isinstance(text, str) and _files(wd) == files
  for field, value in (("d_model", 16), ("tie_embeddings", True)):
    other = _set(_tiny_bytes(), **{field: value})
    with pytest.raises(ConfigError) as e:
      modes.generate(other, wd, seed=0)
    assert e.value.field == "workdir" and "checkpoint" in e.value.message
  assert _files(wd) == files
  # The program: one line and no orbax reader-thread traceback on a shape mismatch.
  args = [f"--workdir={wd}", "--mode=generate", "--config.tokenizer=bytes"]
  args += [f"--config.{k}={v}" for k, v in (("vocab_size", 260), ("seq_len", 16))]
  args += ["--config.n_layers=1", "--config.head_dim=8", "--config.mlp_dim=64"]
  r = run_program("experiments.lm", [*args, "--config.d_model=16"], tmp_path, timeout=120)
  lines = r.stderr.strip().splitlines()
  assert r.returncode == 2 and len(lines) == 1, r.stderr[-2000:]
  assert lines[0].startswith("error: --workdir:") and "Traceback" not in r.stderr
  assert _files(wd) == files
