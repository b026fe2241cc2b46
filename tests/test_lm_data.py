"""The LM data path (BPE tokenizer, document-split shards, streaming loader, resume) and HPD
against the authors' code (a stored fixture, tests/data/README.md)."""

import math
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core import checkpoint, runtime
from jaxlab.core.errors import ConfigError
from jaxlab.core.mesh import make_mesh
from jaxlab.lm import data as lm_data
from jaxlab.lm import distill, generate, shards, train
from jaxlab.lm import tokenizer as tokenizer_lib
from jaxlab.lm.config import get_config
from jaxlab.lm.model import LMConfig

DATA = pathlib.Path(__file__).resolve().parent / "data"


def _random_docs(n: int, length: int, seed: int) -> list[str]:
  """Distinct documents of random lowercase letters (no 12-gram is shared by chance)."""
  rng = np.random.default_rng(seed)
  return ["".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz"), length)) for _ in range(n)]


# ------------------------------------------------------------------------------- tokenizer


def test_bpe_train_save_load_roundtrip(tmp_path):
  docs = shards.read_documents("embedded")[:20]
  tok = tokenizer_lib.train_bpe(docs, vocab_size=300)
  assert tok.vocab_size == 300 and tok.eot_id is not None
  text = "ROMEO: What, ho! Ünïcödé survives byte-level BPE."
  ids = tok.encode(text)
  assert ids.dtype == np.int32 and len(ids) < len(text.encode())  # merges compress
  assert tok.decode(ids) == text
  path = tok.save(tmp_path / "tok")
  assert path == tmp_path / "tok" / "tokenizer.json"
  for where in (tmp_path / "tok", path):
    np.testing.assert_array_equal(tokenizer_lib.load(where).encode(text), ids)
  # Deterministic: the same documents give the same tokenizer.
  assert tokenizer_lib.train_bpe(docs, 300).fingerprint() == tok.fingerprint()
  b = tokenizer_lib.ByteTokenizer()
  assert b.vocab_size == 256 and b.decode(b.encode(text)) == text
  for bad in (tmp_path / "missing", tmp_path):
    with pytest.raises(ConfigError) as e:
      tokenizer_lib.load(bad)
    assert e.value.field == "config.tokenizer"
  (tmp_path / "broken.json").write_text("{not json")
  with pytest.raises(ConfigError, match="not a valid"):
    tokenizer_lib.load(tmp_path / "broken.json")


def test_read_documents_from_a_folder(tmp_path):
  (tmp_path / "sub").mkdir()
  (tmp_path / "a.txt").write_text("first doc\n<|endoftext|>\nsecond doc\n")
  (tmp_path / "sub" / "b.txt").write_text("third doc")
  (tmp_path / "notes.md").write_text("not text data")
  assert shards.read_documents(str(tmp_path)) == ["first doc", "second doc", "third doc"]
  assert len(shards.read_documents("embedded")) == 179
  (tmp_path / "empty").mkdir()
  (tmp_path / "bin.txt").write_bytes(b"\xff\xfe\x00bad")
  for bad in (tmp_path / "empty", tmp_path / "nope", tmp_path / "bin.txt", ""):
    with pytest.raises(ConfigError) as e:
      shards.read_documents(str(bad) if bad else "")
    assert e.value.field == "config.text"


def test_docs_data_snippet(tmp_path, monkeypatch):
  """The data snippet of docs/lm.md ("Use from Python"), verbatim."""
  monkeypatch.chdir(tmp_path)
  from jaxlab.lm import data, shards

  docs = shards.read_documents("embedded")  # or a .txt file, or a folder of them
  built = shards.build(docs, "bpe", vocab_size=512, val_fraction=0.05)  # in memory
  shards.write("runs/lm_data", built, shard_tokens=1 << 20, recipe={})  # shards + index.json
  loader = data.StreamLoader(shards.open_split("runs/lm_data", "train"), batch=16, seq_len=64)
  tokens = loader.rows(0)  # the batch at position 0: int32[16, 65], read from the memmaps
  tok = shards.load_tokenizer("runs/lm_data", shards.read_index("runs/lm_data"))
  print(tok.decode(tokens[0]))

  assert tokens.shape == (16, 65) and tok.vocab_size == 512
  text = tok.decode(tokens[0])
  assert len(text) > 64 and text in tok.decode(built["train"])  # BPE: > 1 character per token


# ------------------------------------------------------------------------------- shards


@pytest.fixture(scope="module")
def byte_shards(tmp_path_factory):
  """40 random documents, bytes, 10 % validation, 300-token shards (windows cross shards)."""
  folder = tmp_path_factory.mktemp("shards")
  docs = _random_docs(40, 97, seed=0)
  built = shards.build(docs, "bytes", 256, val_fraction=0.1)
  index = shards.write(folder, built, shard_tokens=300, recipe={"test": 1})
  return docs, built, folder, index


def test_validation_documents_never_reach_training_windows(byte_shards):
  docs, built, folder, index = byte_shards
  train_docs, val_docs = shards.split_documents(docs, 0.1)
  assert len(val_docs) == 4 and len(train_docs) == 36
  assert sorted(train_docs + val_docs) == sorted(docs)
  # The split depends on the documents, not on their order.
  assert sorted(shards.split_documents(docs[::-1], 0.1)[1]) == sorted(val_docs)
  stream = shards.open_split(folder, "train")
  assert len(index["splits"]["train"]["shards"]) > 2 and index["dtype"] == "uint16"
  np.testing.assert_array_equal(stream.read(0, len(stream)), built["train"])
  # Training windows of a whole epoch cover the training text and hold no validation 12-gram.
  val_grams = {d[i : i + 12] for d in val_docs for i in range(len(d) - 11)}
  loader = lm_data.StreamLoader(stream, batch=4, seq_len=16, seed=3)
  w = loader.num_windows
  rebuilt = np.zeros(16 * w + 1, np.int64)
  for pos in range(0, w - w % 4, 4):
    for wid, row in zip(loader.window_ids(pos, 4), loader.rows(pos)):
      text = bytes(int(t) for t in row if t).decode()
      assert not any(text[i : i + 12] in val_grams for i in range(len(text) - 11))
      rebuilt[16 * wid : 16 * wid + 17] = row
  covered = (w - w % 4) * 16  # the epoch's full batches cover nearly all the training text
  assert np.count_nonzero(rebuilt == built["train"][: 16 * w + 1]) >= covered
  val = shards.open_split(folder, "val")
  assert val_docs[0] in bytes(int(t) for t in val.read(0, len(val)) if t).decode()
  with pytest.raises(IndexError):
    val.read(len(val) - 3, 4)


def test_loader_is_a_seeded_permutation_split_over_processes(byte_shards):
  _, _, folder, _ = byte_shards
  stream = shards.open_split(folder, "train")
  loader = lm_data.StreamLoader(stream, batch=4, seq_len=16, seed=0)
  w = loader.num_windows
  assert w == (len(stream) - 1) // 16
  epoch0, epoch1 = loader.window_ids(0, w), loader.window_ids(w, w)
  assert sorted(epoch0) == list(range(w)) and sorted(epoch1) == list(range(w))
  # The documented map: position i of epoch e -> (a_e i + b_e) mod W, (a_e, b_e) from (seed, e).
  for e, ids in ((0, epoch0), (1, epoch1)):
    rng = np.random.default_rng([0, e])
    a = int(rng.integers(1, w))
    while math.gcd(a, w) != 1:
      a = int(rng.integers(1, w))
    b = int(rng.integers(0, w))
    assert ids == [(a * i + b) % w for i in range(w)]
  assert epoch0 != epoch1 and epoch0 != lm_data.StreamLoader(stream, 4, 16, seed=1).window_ids(0, w)
  rows = loader.rows(10)
  np.testing.assert_array_equal(rows, lm_data.StreamLoader(stream, 4, 16, seed=0).rows(10))
  np.testing.assert_array_equal(rows[0], stream.read(epoch0[10] * 16, 17))
  halves = [loader.process_rows(10, index=i, count=2) for i in range(2)]
  np.testing.assert_array_equal(np.concatenate(halves), rows)
  # Inside jit, with and without a mesh (each device reads its own rows).
  np.testing.assert_array_equal(jax.jit(lambda p: lm_data.fetch(loader, p))(jnp.int32(10)), rows)
  big = lm_data.StreamLoader(stream, batch=8, seq_len=16, seed=0)
  mesh = make_mesh({"data": 2, "fsdp": 2, "context": 2})
  out = jax.jit(lambda p: lm_data.fetch(big, p, mesh))(jnp.int32(5))
  assert out.sharding.spec[0] == ("data", "fsdp")
  np.testing.assert_array_equal(np.asarray(out), big.rows(5))
  # On device (no callback): equal rows at any position, across the epoch boundary too.
  dev = lm_data.device_stream(loader, 2 * w + 4)
  take = jax.jit(lambda s, p: lm_data.take(loader, s, p))
  for pos in (0, 10, w - 2, w, 2 * w):
    np.testing.assert_array_equal(take(dev, jnp.int32(pos)), loader.rows(pos))
  out = jax.jit(lambda s, p: lm_data.take(big, s, p, mesh))(lm_data.device_stream(big, 16), 5)
  assert out.sharding.spec[0] == ("data", "fsdp")
  np.testing.assert_array_equal(np.asarray(out), big.rows(5))
  with pytest.raises(ConfigError) as e:
    lm_data.StreamLoader(stream, 4, seq_len=len(stream))
  assert e.value.field == "config.seq_len"


def test_killed_and_resumed_run_sees_identical_batches(byte_shards, tmp_path):
  """8 steps straight vs 4 steps, then a resume to 8: same batches, same params, and the data
  position is restored from the checkpoint."""
  _, _, folder, _ = byte_shards
  cfg = LMConfig.from_config(
    get_config(),
    vocab_size=256,
    d_model=32,
    n_layers=1,
    n_heads=4,
    n_kv_heads=2,
    head_dim=8,
    mlp_dim=64,
  )
  loader = lm_data.StreamLoader(shards.open_split(folder, "train"), batch=4, seq_len=16, seed=0)
  weights = jnp.arange(1, 4 * 17 + 1, dtype=jnp.float32).reshape(4, 17)

  def update(state, batch, key):
    new, m = train.update(state, batch, key)
    m = {**m, "batch_hash": jnp.sum(batch["tokens"] * weights), "pos": state.data_position}
    return new, m

  step = train.streaming_update(loader, update)
  init = train.create_state(cfg, train.make_optimizer(1e-2, 1, 8, 0.0), jax.random.key(0), 16)
  loop = lambda n: runtime.Loop(
    n, log_every=2, ckpt_every=4, history=True, progress=False, tensorboard=False, plot=False
  )
  key = jax.random.key_data(jax.random.key(1))
  straight, a = runtime.train(init, step, loop(8), key=key, workdir=tmp_path / "a")
  _, b1 = runtime.train(init, step, loop(4), key=key, workdir=tmp_path / "b")
  resumed, b2 = runtime.train(init, step, loop(8), key=key, workdir=tmp_path / "b")
  assert b2.summary["resumed_from"] == 4
  for name in ("batch_hash", "pos"):
    np.testing.assert_array_equal(
      np.concatenate([b1.history[name], b2.history[name]]), a.history[name]
    )
  # The device-held stream (no host callback) gives the same batches and losses, also resumed.
  data = {"stream": lm_data.device_stream(loader, 8 * 4)}
  _, c1 = runtime.train(init, step, loop(4), key=key, workdir=tmp_path / "c", data=data)
  _, c2 = runtime.train(init, step, loop(8), key=key, workdir=tmp_path / "c", data=data)
  for name in ("batch_hash", "pos", "loss"):
    np.testing.assert_array_equal(
      np.concatenate([c1.history[name], c2.history[name]]), a.history[name]
    )
  np.testing.assert_array_equal(a.history["pos"], 4 * np.arange(8))
  expected = [np.sum(loader.rows(4 * i) * np.asarray(weights)) for i in range(8)]
  np.testing.assert_array_equal(a.history["batch_hash"], expected)
  assert int(resumed.data_position) == int(straight.data_position) == 32
  jax.tree.map(
    lambda x, y: np.testing.assert_allclose(x, y, atol=1e-6), resumed.params, straight.params
  )
  # Sampling from the restored checkpoint (what --mode=generate does) equals sampling from the
  # state the run returned.
  restored, at = checkpoint.restore(tmp_path / "b", init)
  assert at == 8 and int(restored.data_position) == 32
  prompt = jnp.asarray(loader.rows(0)[:1, :5])
  sample = jax.jit(generate.generate, static_argnums=(2, 4))
  out = sample(restored, prompt, 6, jax.random.key(0), 0.0)
  np.testing.assert_array_equal(out, sample(resumed, prompt, 6, jax.random.key(0), 0.0))
  np.testing.assert_array_equal(out[:, :5], prompt)


# ------------------------------------------------------------------------------- HPD


@pytest.mark.parametrize("case", ["padded", "dense", "peaky"])
def test_hpd_matches_the_authors_code(case):
  """Loss, gradient and metrics of the port equal the authors' PyTorch function (to 1e-5) on
  its own multinomial draws, with -100 labels in 'padded' and 'peaky'."""
  f = np.load(DATA / "hpd_fixture.npz")
  g = lambda k: f[f"{case}/{k}"]
  s, t, y, ys = g("student"), g("teacher"), g("labels"), g("samples")

  def loss_fn(s_):
    return distill.hpd_loss(s_[:, :-1], t[:, :-1], y[:, 1:], None, samples_BxL=ys)

  (loss, m), grad = jax.jit(jax.value_and_grad(loss_fn, has_aux=True))(jnp.asarray(s))
  np.testing.assert_allclose(float(loss), g("loss"), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(np.asarray(grad), g("grad"), atol=1e-5)
  np.testing.assert_allclose(float(m["ce_loss"]), g("metric_ce_loss"), rtol=1e-5)
  np.testing.assert_allclose(100 * float(m["sampled_diff_frac"]), g("metric_sampled_diff_pct"))
  np.testing.assert_allclose(100 * float(m["adv2_active_frac"]), g("metric_adv2_active_pct"))
  # The cases exercise every branch: both signs of k1 on the data token, of k1 on the draw.
  ls = np.asarray(jax.nn.log_softmax(jnp.asarray(s[:, :-1])))
  lt = np.asarray(jax.nn.log_softmax(jnp.asarray(t[:, :-1])))
  yy = np.maximum(y[:, 1:], 0)
  pick = lambda a, i: np.take_along_axis(a, i[..., None], -1)[..., 0]
  k1 = (pick(lt, yy) - pick(ls, yy)) * np.exp(pick(ls, yy))
  k1s = (pick(lt, ys) - pick(ls, ys)) * np.exp(pick(ls, ys))
  assert (k1 > 0).any() and (k1 <= 0).any() and (k1s < 0).any()
  if (y[:, 1:] == -100).any():
    assert np.isfinite(float(loss)) and np.all(np.asarray(grad)[:, :-1][y[:, 1:] == -100] == 0)
