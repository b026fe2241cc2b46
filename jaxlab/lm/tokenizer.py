"""Tokenizers for the LM data path: byte-level BPE (Hugging Face ``tokenizers``) or raw bytes.

A BPE tokenizer is trained offline on local documents (`train_bpe`), saved as ``tokenizer.json``
in a folder (`Tokenizer.save`) and loaded from that file or folder (`load`); any byte-level
``tokenizer.json`` written by the ``tokenizers`` library loads the same way. Both kinds expose
``vocab_size``, ``eot_id`` (the document separator), ``encode(text) -> int32[n]`` and
``decode(ids) -> str``::

    tok = train_bpe(["some text", "another document"], vocab_size=300)
    tok.save("runs/tok")                     # runs/tok/tokenizer.json
    tok = load("runs/tok")                   # or load("runs/tok/tokenizer.json")
    tok.decode(tok.encode("some text"))      # 'some text'

`ByteTokenizer` (vocabulary 256) separates documents with byte 0 (NUL), which plain text lacks.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Iterable, Sequence

import numpy as np

from jaxlab.core.errors import ConfigError, require

EOT = "<|endoftext|>"  # the document separator (GPT-2's), a special token of every BPE here
FILE_NAME = "tokenizer.json"


class ByteTokenizer:
  """Text as UTF-8 bytes: vocabulary 256, document separator byte 0."""

  kind = "bytes"
  vocab_size = 256
  eot_id = 0

  def encode(self, text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-8"), np.uint8).astype(np.int32)

  def encode_batch(self, texts: Sequence[str]) -> list[np.ndarray]:
    return [self.encode(t) for t in texts]

  def decode(self, ids) -> str:
    data = bytes(int(i) for i in np.asarray(ids).reshape(-1) if 0 < int(i) < 256)
    return data.decode("utf-8", errors="replace")

  def save(self, folder) -> None:
    del folder  # nothing to save: the byte vocabulary is fixed

  def fingerprint(self) -> str:
    return "bytes"


class BPETokenizer:
  """A Hugging Face ``tokenizers.Tokenizer`` (byte-level BPE) with ``EOT`` as a special token."""

  kind = "bpe"

  def __init__(self, tok):
    self.tok = tok
    self.eot_id = tok.token_to_id(EOT)
    if self.eot_id is None:
      raise ConfigError("config.tokenizer", f"the tokenizer has no {EOT} token")

  @property
  def vocab_size(self) -> int:
    return self.tok.get_vocab_size()

  def encode(self, text: str) -> np.ndarray:
    return np.asarray(self.tok.encode(text).ids, np.int32)

  def encode_batch(self, texts: Sequence[str]) -> list[np.ndarray]:
    return [np.asarray(e.ids, np.int32) for e in self.tok.encode_batch(list(texts))]

  def decode(self, ids) -> str:
    return self.tok.decode([int(i) for i in np.asarray(ids).reshape(-1)], skip_special_tokens=True)

  def save(self, folder) -> pathlib.Path:
    """Writes ``<folder>/tokenizer.json`` (atomically) and returns its path."""
    path = pathlib.Path(folder) / FILE_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(self.tok.to_str())
    os.replace(tmp, path)
    return path

  def fingerprint(self) -> str:
    import hashlib

    return hashlib.sha256(self.tok.to_str().encode()).hexdigest()[:16]


def train_bpe(documents: Iterable[str], vocab_size: int, min_frequency: int = 2) -> BPETokenizer:
  """Byte-level BPE trained on ``documents`` (deterministic for the same documents in order).

  The 256 byte symbols are always in the vocabulary, so any text encodes; ``vocab_size`` counts
  them, ``EOT`` and the merges (a small corpus may stop with fewer merges).
  """
  from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

  require(
    vocab_size >= 257, "config.vocab_size", f"BPE needs >= 257 (bytes + EOT), got {vocab_size}"
  )
  tok = Tokenizer(models.BPE())
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(
    vocab_size=vocab_size,
    min_frequency=min_frequency,
    special_tokens=[EOT],
    initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    show_progress=False,
  )
  tok.train_from_iterator(documents, trainer=trainer)
  return BPETokenizer(tok)


def load(path: str | os.PathLike, field: str = "config.tokenizer") -> BPETokenizer:
  """A saved tokenizer: a ``tokenizer.json`` file, or a folder holding one."""
  from tokenizers import Tokenizer

  p = pathlib.Path(path)
  if p.is_dir():
    p = p / FILE_NAME
  require(p.is_file(), field, f"{p} is not a tokenizer.json file or a folder holding one")
  try:
    tok = Tokenizer.from_file(str(p))
  except Exception as e:  # the Rust side raises a bare Exception on malformed JSON
    raise ConfigError(field, f"{p} is not a valid tokenizer.json ({str(e)[:120]})") from None
  return BPETokenizer(tok)


def make(spec: str, documents: Sequence[str], vocab_size: int):
  """``spec``: 'bpe' (train on ``documents``), 'bytes', or a saved tokenizer's path."""
  if spec == "bytes":
    return ByteTokenizer()
  if spec == "bpe":
    return train_bpe(documents, vocab_size)
  return load(spec)
