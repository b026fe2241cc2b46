"""Sampling from a trained LM: autoregressive generation on a fixed-length token buffer.

The whole buffer is re-run through the causal model at every step (no KV cache): positions after
``t`` cannot change the logits at ``t - 1``, so one compiled function serves every step. That is
O(N L^2) work, fine for checking a trained checkpoint, not for serving.
"""

from __future__ import annotations

import unicodedata

import jax
import jax.numpy as jnp

from jaxlab.core.errors import require
from jaxlab.core.train_state import TrainState


def generate(
  state: TrainState, prompt_BxP, num_tokens: int, key, temperature: float = 1.0
) -> jax.Array:
  """``prompt_BxP`` followed by ``num_tokens`` sampled tokens: int32[B, P + num_tokens].

  ``temperature=0`` is greedy decoding. Jit-compatible (``num_tokens`` and the prompt length are
  static).
  """
  require(num_tokens >= 1, "num_tokens", f"must be >= 1, got {num_tokens}")
  require(temperature >= 0, "temperature", f"must be >= 0, got {temperature}")
  b, p = prompt_BxP.shape
  require(p >= 1, "prompt", "needs at least one token")
  buf = jnp.zeros((b, p + num_tokens), jnp.int32).at[:, :p].set(prompt_BxP.astype(jnp.int32))

  def step(t, carry):
    buf, key = carry
    logits = jax.lax.dynamic_index_in_dim(state(buf), t - 1, axis=1, keepdims=False)
    key, sub = jax.random.split(key)
    if temperature > 0:
      nxt = jax.random.categorical(sub, logits / temperature, axis=-1)
    else:
      nxt = jnp.argmax(logits, axis=-1)
    return buf.at[:, t].set(nxt.astype(jnp.int32)), key

  buf, _ = jax.lax.fori_loop(p, p + num_tokens, step, (buf, key))
  return buf


# Kept in a sample as they are: line breaks and tabs; every other control or format character, and
# U+FFFD (a byte sequence that is not UTF-8: a byte-level model samples bytes, not characters),
# is left out of the printed text.
_KEPT = frozenset("\n\t")


def printable(text: str) -> tuple[str, int]:
  """``(text without the characters a terminal cannot show, how many were left out)``: control and
  format characters other than newline and tab, unassigned or private code points, and U+FFFD."""
  out, dropped = [], 0
  for ch in text:
    if ch in _KEPT or (ch != "\ufffd" and unicodedata.category(ch)[0] != "C"):
      out.append(ch)
    else:
      dropped += 1
  return "".join(out), dropped


def sample_as_text(tok, ids) -> str:
  """Sampled token ids as printable text (`printable`), saying how many characters it left out."""
  text, dropped = printable(tok.decode(ids))
  if dropped:
    text += f"\n[{dropped} undecodable or control character(s) left out]"
  return text
