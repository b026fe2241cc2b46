"""Tokenized text on disk: documents -> train/validation split -> fixed-size binary shards.

Layout of a data folder (`write`)::

    index.json            recipe, tokenizer, vocab_size, dtype, per-split shard names and lengths
    tokenizer/tokenizer.json   (BPE only)
    train_00000.npy ...   uint16 (vocab <= 65536) or uint32 token ids, ``shard_tokens`` each
    val_00000.npy ...

A split is its documents concatenated, each followed by the tokenizer's ``eot_id``. The split is by
*document* (`split_documents`): a validation document never reaches a training shard, so no
training window holds validation text. `open_split` memory-maps the shards (nothing is read until
a window is asked for); `jaxlab.lm.data.StreamLoader` serves batches from it.

Documents (`read_documents`): every ``.txt`` file of a folder (recursively, sorted), or one file,
or the embedded corpus (``"embedded"``, `EMBEDDED`); a line ``<|endoftext|>`` inside a file
separates documents.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import pathlib
from collections.abc import Sequence

import numpy as np

from jaxlab.core import files
from jaxlab.core.errors import ConfigError, require
from jaxlab.lm import tokenizer as tokenizer_lib

EMBEDDED = pathlib.Path(__file__).resolve().parent / "corpus" / "tiny_shakespeare.txt.gz"
INDEX = "index.json"
SPLITS = ("train", "val")
DOC_SEPARATOR = f"\n{tokenizer_lib.EOT}\n"


def _split_text(text: str) -> list[str]:
  docs = [d.strip("\n") for d in text.replace("\r\n", "\n").split(DOC_SEPARATOR)]
  return [d for d in docs if d.strip()]


def read_documents(source: str, field: str = "config.text") -> list[str]:
  """The documents of ``source``: 'embedded', a ``.txt`` (or ``.txt.gz``) file, or a folder."""
  require(bool(source), field, "is empty; use 'embedded', a .txt file or a folder")
  if source == "embedded":
    return _split_text(gzip.open(EMBEDDED, "rt", encoding="utf-8").read())
  p = pathlib.Path(source)
  if p.is_dir():
    files = sorted(f for f in p.rglob("*.txt") if f.is_file())
    require(bool(files), field, f"{p} holds no .txt file")
  else:
    require(p.is_file() and os.access(p, os.R_OK), field, f"{p} is not a readable file or folder")
    files = [p]
  docs = []
  for f in files:
    opener = gzip.open if f.suffix == ".gz" else open
    try:
      with opener(f, "rt", encoding="utf-8") as fh:
        docs.extend(_split_text(fh.read()))
    except (UnicodeDecodeError, OSError) as e:
      raise ConfigError(field, f"{f} is not UTF-8 text ({e})") from None
  require(bool(docs), field, f"{p} holds no text")
  return docs


def split_documents(docs: Sequence[str], val_fraction: float):
  """``(train_docs, val_docs)``: the ``max(1, round(fraction * n))`` documents with the smallest
  SHA-1 go to validation (independent of file order); the rest keep their order."""
  require(len(docs) >= 2, "config.text", f"needs >= 2 documents to split, got {len(docs)}")
  n_val = min(len(docs) - 1, max(1, round(val_fraction * len(docs))))
  digest = [hashlib.sha1(d.encode("utf-8")).hexdigest() for d in docs]
  val = set(sorted(range(len(docs)), key=lambda i: (digest[i], i))[:n_val])
  return [d for i, d in enumerate(docs) if i not in val], [
    d for i, d in enumerate(docs) if i in val
  ]


def token_stream(tok, docs: Sequence[str]) -> np.ndarray:
  """Documents encoded and concatenated, each followed by ``tok.eot_id``: int64[n]."""
  parts = []
  for ids in tok.encode_batch(docs):
    parts.extend([ids, np.asarray([tok.eot_id], np.int32)])
  return np.concatenate(parts).astype(np.int64)


def build(docs: Sequence[str], tokenizer: str, vocab_size: int, val_fraction: float) -> dict:
  """In memory (nothing written): ``{"tokenizer", "train", "val"}``; the BPE tokenizer is trained
  on the training documents only."""
  train_docs, val_docs = split_documents(docs, val_fraction)
  tok = tokenizer_lib.make(tokenizer, train_docs, vocab_size)
  return {
    "tokenizer": tok,
    "train": token_stream(tok, train_docs),
    "val": token_stream(tok, val_docs),
  }


def write(folder, built: dict, shard_tokens: int, recipe: dict) -> dict:
  """Writes the shards, the tokenizer and ``index.json`` (last, so an index means complete)."""
  folder = pathlib.Path(folder)
  folder.mkdir(parents=True, exist_ok=True)
  tok = built["tokenizer"]
  dtype = np.uint16 if tok.vocab_size <= 2**16 else np.uint32
  index = {
    "recipe": recipe,
    "tokenizer": tok.kind,
    "tokenizer_fingerprint": tok.fingerprint(),
    "vocab_size": tok.vocab_size,
    "eot_id": tok.eot_id,
    "dtype": np.dtype(dtype).name,
    "splits": {},
  }
  if tok.kind == "bpe":
    tok.save(folder / "tokenizer")
  for split in SPLITS:
    stream = built[split]
    names, lengths = [], []
    for i, start in enumerate(range(0, len(stream), shard_tokens)):
      name = f"{split}_{i:05d}.npy"
      np.save(folder / name, stream[start : start + shard_tokens].astype(dtype))
      names.append(name)
      lengths.append(int(min(shard_tokens, len(stream) - start)))
    index["splits"][split] = {"shards": names, "tokens": lengths}
  tmp = folder / (INDEX + ".tmp")
  tmp.write_text(json.dumps(index, indent=1))
  os.replace(tmp, folder / INDEX)
  return index


def read_index(folder, field: str = "config.data_dir") -> dict | None:
  """The ``index.json`` of a data folder written by `write`, None when there is none; a folder
  that is not a directory, or an index that is unreadable, not JSON or incomplete (its shards
  included), is ``ConfigError(field)``."""
  folder = pathlib.Path(folder)
  if folder.exists() and not folder.is_dir():
    raise ConfigError(field, f"{folder} is not a directory (a data folder of tokenized shards)")
  path = folder / INDEX
  if not path.exists():
    return None
  try:
    index = json.loads(path.read_text())
    problem = _index_problem(folder, index)
  except (OSError, ValueError, TypeError, KeyError, AttributeError) as e:
    problem = f"{type(e).__name__}: {str(e)[:120]}"
  if problem:
    raise ConfigError(
      field,
      f"{path} is not a valid shard index ({problem}); delete that folder or choose another "
      f"--{field}",
    )
  return index


def _index_problem(folder: pathlib.Path, index) -> str | None:
  """What is wrong with an ``index.json`` (None when it is complete and its shards exist)."""
  if not isinstance(index, dict):
    return f"a JSON {type(index).__name__}, not an object"
  missing = [
    k for k in ("recipe", "tokenizer", "vocab_size", "eot_id", "dtype", "splits") if k not in index
  ]
  if missing:
    return f"missing {', '.join(missing)}"
  if index["tokenizer"] not in ("bpe", "bytes") or index["dtype"] not in ("uint16", "uint32"):
    return f"unknown tokenizer {index['tokenizer']!r} or dtype {index['dtype']!r}"
  for k in ("vocab_size", "eot_id"):
    v = index[k]
    if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < 2**32:
      return f"{k} {v!r} is not a token count"
  for split in SPLITS:
    s = index["splits"].get(split)
    if not isinstance(s, dict) or not isinstance(s.get("shards"), list):
      return f"no {split} split"
    tokens = s.get("tokens")
    if not isinstance(tokens, list) or len(tokens) != len(s["shards"]):
      return f"the {split} split's token counts do not match its shards"
    if not all(isinstance(n, int) and 0 <= n < 2**40 for n in tokens):
      return f"the {split} split's token counts are not counts"
    absent = [n for n in s["shards"] if not (folder / str(n)).is_file()]
    if absent:
      return f"shard {absent[0]} is missing"
    for name, n in zip(s["shards"], tokens):
      problem = _shard_problem(folder / str(name), n, index["dtype"])
      if problem:
        return problem
  return None


def _shard_problem(path: pathlib.Path, tokens: int, dtype: str) -> str | None:
  """A shard whose header disagrees with the index (or with its own size) would fail mid-run."""
  try:
    m = files.npy_member("data_dir", path)
  except ConfigError as e:
    return e.message
  if m.shape != (tokens,) or m.dtype != np.dtype(dtype):
    return f"shard {path.name} holds {m.shape} {m.dtype}, the index says ({tokens},) {dtype}"
  return None


def load_tokenizer(folder, index: dict):
  if index["tokenizer"] == "bytes":
    return tokenizer_lib.ByteTokenizer()
  return tokenizer_lib.load(pathlib.Path(folder) / "tokenizer", field="config.data_dir")


class TokenStream:
  """The shards of one split as one lazily read sequence (memory-mapped ``.npy`` files)."""

  def __init__(self, paths: Sequence[pathlib.Path], lengths: Sequence[int]):
    self.paths = [pathlib.Path(p) for p in paths]
    self.offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    self._maps: dict[int, np.ndarray] = {}

  def __len__(self) -> int:
    return int(self.offsets[-1])

  def _shard(self, i: int) -> np.ndarray:
    if i not in self._maps:
      self._maps[i] = np.load(self.paths[i], mmap_mode="r")
    return self._maps[i]

  def read(self, start: int, length: int) -> np.ndarray:
    """Tokens ``[start, start + length)`` as int32 (may span shards)."""
    if start < 0 or start + length > len(self):
      raise IndexError(f"tokens [{start}, {start + length}) outside the stream of {len(self)}")
    out = np.empty(length, np.int32)
    pos, end = start, start + length
    while pos < end:
      i = int(np.searchsorted(self.offsets, pos, side="right")) - 1
      lo = pos - int(self.offsets[i])
      take = min(end - pos, int(self.offsets[i + 1]) - pos)
      out[pos - start : pos - start + take] = self._shard(i)[lo : lo + take]
      pos += take
    return out


def open_split(folder, split: str, index: dict | None = None) -> TokenStream:
  """The ``split`` ('train' or 'val') of a data folder written by `write`."""
  folder = pathlib.Path(folder)
  index = index or read_index(folder)
  if index is None:
    raise ConfigError("config.data_dir", f"{folder} has no {INDEX}")
  s = index["splits"][split]
  return TokenStream([folder / n for n in s["shards"]], s["tokens"])
