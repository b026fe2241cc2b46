"""LM data: a synthetic Markov corpus, byte-level text files, held-out splits and window batches.

A corpus is a 1-D int32 array of token ids; a batch is ``{"tokens": int32[B, L + 1]}`` (inputs are
``tokens[:, :-1]``, targets ``tokens[:, 1:]``), sampled as random windows of the corpus.
"""

from __future__ import annotations

import os
import pathlib

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.core import sharding
from jaxlab.core.errors import require

BYTE_VOCAB = 256  # a text file is read as bytes


def synthetic_corpus(key, n_tokens: int, vocab: int, alpha: float) -> np.ndarray:
  """A stationary sparse bigram Markov chain: learnable structure with a known entropy floor.

  Row ``t`` of the transition matrix is ``Dirichlet(alpha)``; a small ``alpha`` makes each row
  peaky, so the achievable loss is well below ``log(vocab)``.
  """
  kt, ks = jax.random.split(key)
  trans = np.asarray(jax.random.dirichlet(kt, jnp.full((vocab,), alpha), (vocab,)), np.float64)
  trans /= trans.sum(-1, keepdims=True)
  rng = np.random.default_rng(int(jax.random.randint(ks, (), 0, 2**31 - 1)))
  cdf = np.cumsum(trans, -1)
  u = rng.random(n_tokens)
  out = np.empty(n_tokens, np.int32)
  t = 0
  for i in range(n_tokens):  # sequential by nature; ~1 s per million tokens
    t = min(int(np.searchsorted(cdf[t], u[i])), vocab - 1)
    out[i] = t
  return out


def text_corpus(path: str | os.PathLike) -> np.ndarray:
  """The bytes of a local file as tokens (vocabulary `BYTE_VOCAB`)."""
  return np.frombuffer(pathlib.Path(path).read_bytes(), np.uint8).astype(np.int32)


def check_text_file(field: str, path: str | os.PathLike) -> int:
  """Raises `ConfigError` unless ``path`` is a readable file; returns its size in tokens (bytes)."""
  p = pathlib.Path(path)
  require(p.is_file() and os.access(p, os.R_OK), field, f"{p} is not a readable file")
  return p.stat().st_size


def check_length(field: str, n_tokens: int, seq_len: int, what: str = "the corpus") -> None:
  """A window of ``seq_len + 1`` tokens must fit in ``n_tokens`` with at least two start points."""
  require(
    n_tokens >= seq_len + 2,
    field,
    f"{seq_len} is too long for {what} ({n_tokens} tokens; a window needs seq_len + 2)",
  )


def heldout_size(n_tokens: int, seq_len: int, fraction: float) -> int:
  """Tokens `heldout_split` holds out: ``fraction`` of the corpus, at least one window."""
  return max(seq_len + 2, int(n_tokens * fraction))


def heldout_split(corpus: np.ndarray, seq_len: int, fraction: float = 0.1):
  """``(train, heldout)``: the tail of the corpus (`heldout_size` tokens) is held out."""
  n_held = heldout_size(len(corpus), seq_len, fraction)
  return corpus[:-n_held], corpus[-n_held:]


def sample_windows(corpus, key, batch: int, seq_len: int, mesh=None):
  """``{"tokens": int32[batch, seq_len + 1]}``: random windows, split over the mesh's batch axes."""
  starts = jax.random.randint(key, (batch,), 0, corpus.shape[0] - seq_len - 1)
  tokens = jax.vmap(lambda s: jax.lax.dynamic_slice(corpus, (s,), (seq_len + 1,)))(starts)
  return {"tokens": sharding.constrain(tokens, ("batch", None), mesh)}
