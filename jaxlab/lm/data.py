"""LM data: the synthetic in-memory corpus, held-out splits, and the streaming shard loader.

A batch is ``{"tokens": int32[B, L + 1]}`` (inputs ``tokens[:, :-1]``, targets ``tokens[:, 1:]``).
In memory, `sample_windows` draws random windows of a 1-D corpus inside jit. From shards on disk
(`jaxlab.lm.shards`), `StreamLoader` maps a *position* (windows consumed so far) to a batch: the
split is cut into non-overlapping windows of ``seq_len + 1`` tokens (consecutive windows share one
token), visited in a seeded per-epoch permutation. A stream that fits `DEVICE_BYTES` is fed
without a host callback (`device_stream`, `take`): its tokens and the run's window ids go to the
device as arguments, so the training step has no callback and lands in the persistent compilation
cache. Beyond that, `fetch` reads each batch inside jit through a host callback (with a mesh, each
device reads only its own rows); such runs compile their training step anew each run, as JAX does
not cache programs with host callbacks. The position lives in the train state
(``LMState.data_position``) and is saved with every checkpoint, so a resumed run sees exactly the
batches an uninterrupted run would.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from jaxlab.core import sharding
from jaxlab.core.errors import require


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


def heldout_split(corpus: np.ndarray, seq_len: int, fraction: float):
  """``(train, heldout)``: the tail of the corpus (`heldout_size` tokens) is held out."""
  n_held = heldout_size(len(corpus), seq_len, fraction)
  return corpus[:-n_held], corpus[-n_held:]


def sample_windows(corpus, key, batch: int, seq_len: int, mesh=None, row=None):
  """``{"tokens": int32[batch, seq_len + 1]}``: random windows, split over the mesh's batch axes.

  ``row``: ``corpus`` holds one corpus per seed (``[seeds, tokens]``) and the windows come from
  corpus ``row``, the windows that corpus alone gives with this key (a vmapped run over seeds)."""
  starts = jax.random.randint(key, (batch,), 0, corpus.shape[-1] - seq_len - 1)
  if row is None:
    window = lambda s: jax.lax.dynamic_slice(corpus, (s,), (seq_len + 1,))
  else:  # slice the windows only: indexing the corpus by a per-seed row would copy it whole
    window = lambda s: jax.lax.dynamic_slice(corpus, (row, s), (1, seq_len + 1))[0]
  tokens = jax.vmap(window)(starts)
  return {"tokens": sharding.constrain(tokens, ("batch", None), mesh)}


class StreamLoader:
  """Deterministic batches of windows from a `jaxlab.lm.shards.TokenStream`.

  Window ``w`` is tokens ``[w * seq_len, w * seq_len + seq_len + 1)``. Global position ``p``
  (windows consumed since the start) is window ``perm_e(p mod W)`` of epoch ``e = p // W``, where
  ``perm_e(i) = (a_e i + b_e) mod W`` with ``a_e`` coprime to ``W``, drawn from ``(seed, e)``: a
  permutation in O(1) memory whatever the corpus size. The batch at position ``p`` is positions
  ``p .. p + batch - 1``; `rows` returns any slice of it (a device's or a process's part).
  """

  def __init__(self, stream, batch: int, seq_len: int, seed: int = 0):
    self.stream, self.batch, self.seq_len, self.seed = stream, batch, seq_len, seed
    self.num_windows = (len(stream) - 1) // seq_len
    require(
      self.num_windows >= 1,
      "config.seq_len",
      f"{seq_len} is too long for {len(stream)} tokens (a window needs seq_len + 1)",
    )
    self._perms: dict[int, tuple[int, int]] = {}

  def _perm(self, epoch: int) -> tuple[int, int]:
    if epoch not in self._perms:
      w = self.num_windows
      rng = np.random.default_rng([self.seed, epoch])
      a = 1
      if w > 2:
        a = int(rng.integers(1, w))
        while math.gcd(a, w) != 1:
          a = int(rng.integers(1, w))
      self._perms = {epoch: (a, int(rng.integers(0, w)))}  # one epoch at a time is enough
    return self._perms[epoch]

  def window_ids(self, position: int, count: int) -> list[int]:
    out = []
    for p in range(int(position), int(position) + count):
      epoch, i = divmod(p, self.num_windows)
      a, b = self._perm(epoch)
      out.append((a * i + b) % self.num_windows)
    return out

  def rows(self, position: int, lo: int = 0, hi: int | None = None) -> np.ndarray:
    """Rows ``lo:hi`` of the batch at ``position``: int32[hi - lo, seq_len + 1]."""
    hi = self.batch if hi is None else hi
    ids = self.window_ids(position + lo, hi - lo)
    return np.stack([self.stream.read(w * self.seq_len, self.seq_len + 1) for w in ids])

  def process_rows(self, position: int, index: int | None = None, count: int | None = None):
    """This process's contiguous share of the batch at ``position`` (data-parallel hosts)."""
    index = jax.process_index() if index is None else index
    count = jax.process_count() if count is None else count
    per = self.batch // count
    return self.rows(position, index * per, (index + 1) * per)


# Largest stream (int32 tokens) and window-id table held on device; beyond, `fetch` reads the host.
DEVICE_BYTES = 256 * 2**20
TABLE_BYTES = 16 * 2**20  # ~4M positions; the table is built by `StreamLoader.window_ids`


def device_stream(loader: StreamLoader, end: int) -> dict | None:
  """``{"tokens": int32[N], "ids": int32[end]}`` for `take`, or None when over the caps.

  ``ids[p]`` is the window of position ``p`` (`StreamLoader.window_ids`) for positions
  ``0 .. end - 1``; a run of ``steps`` steps consumes positions below ``steps * batch``. The table
  starts at 0 whatever step a run resumes from, so its shape (and the compiled step) is the same
  for a fresh and a resumed run.
  """
  if 4 * len(loader.stream) > DEVICE_BYTES or 4 * end > TABLE_BYTES:
    return None
  tokens = loader.stream.read(0, len(loader.stream))
  ids = np.asarray(loader.window_ids(0, end), np.int32)
  return {"tokens": jnp.asarray(tokens, jnp.int32), "ids": jnp.asarray(ids)}


def take(
  loader: StreamLoader, stream: dict, position, mesh=None, rules=None, row=None
) -> jax.Array:
  """Inside jit: the batch at ``position`` from `device_stream`'s arrays, equal to `fetch`'s.

  ``position + batch`` must not pass the table's end: `dynamic_slice` would clamp, not fail.
  ``row``: ``stream["ids"]`` stacks one table per seed (``[seeds, end]``, each seed's loader
  permutes the windows its own way) and the batch is seed ``row``'s.
  """
  if row is None:
    ids = jax.lax.dynamic_slice(stream["ids"], (position,), (loader.batch,))
  else:
    ids = jax.lax.dynamic_slice(stream["ids"], (row, position), (1, loader.batch))[0]
  width = loader.seq_len + 1
  window = lambda w: jax.lax.dynamic_slice(stream["tokens"], (w * loader.seq_len,), (width,))
  return sharding.constrain(jax.vmap(window)(ids), ("batch", None), mesh, rules)


def fetch(loader: StreamLoader, position, mesh=None, rules=None) -> jax.Array:
  """Inside jit: the batch at ``position`` (int32 scalar), int32[batch, seq_len + 1].

  A host callback reads the windows. With a mesh the batch is split over its batch axes and each
  device's callback reads only its rows (devices along other axes read the same rows).
  """
  b, width = loader.batch, loader.seq_len + 1
  read = lambda p, lo, hi: np.asarray(loader.rows(int(p), lo, hi), np.int32)
  if mesh is None:
    out = jax.ShapeDtypeStruct((b, width), jnp.int32)
    return jax.pure_callback(lambda p: read(p, 0, b), out, position)
  axes = sharding.logical_to_spec(("batch", None), rules, mesh, (b, width))[0]
  axes = () if axes is None else ((axes,) if isinstance(axes, str) else tuple(axes))
  per = b // math.prod(mesh.shape[a] for a in axes)

  def local(p):
    idx = jax.lax.axis_index(axes) if axes else jnp.int32(0)
    out = jax.ShapeDtypeStruct((per, width), jnp.int32)
    cb = lambda p, i: read(p, int(i) * per, (int(i) + 1) * per)
    return jax.pure_callback(cb, out, p, idx)

  spec = P(axes if axes else None, None)
  return jax.shard_map(local, mesh=mesh, in_specs=P(), out_specs=spec, check_vma=False)(position)


def fetch_seeds(loaders: list[StreamLoader], position, row) -> jax.Array:
  """Inside a jit vmapped over seeds (one device): the batch at ``position`` of seed ``row``'s
  loader, read on the host (`fetch`'s path for a stream too large for `device_stream`)."""
  first = loaders[0]
  out = jax.ShapeDtypeStruct((first.batch, first.seq_len + 1), jnp.int32)
  read = lambda p, i: np.asarray(loaders[int(i)].rows(int(p)), np.int32)
  return jax.pure_callback(read, out, position, row, vmap_method="sequential")


def window_batches(loader: StreamLoader, n: int) -> np.ndarray:
  """``n`` fixed batches (positions ``0, batch, ...``): int32[n, batch, seq_len + 1], e.g. the
  validation set scored between chunks."""
  return np.stack([loader.rows(i * loader.batch) for i in range(n)])
