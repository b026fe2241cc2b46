"""FLOPs accounting for LM training: FLOPs per token, device peaks, and an MFU meter.

Model FLOPs utilisation (MFU) = achieved model FLOP/s / (peak FLOP/s per device x devices), with
the model FLOPs of Kaplan et al. (arXiv 2001.08361, section 2.1): 6N per token for the matmuls
(forward + backward) plus the causal attention scores.
"""

from __future__ import annotations

import time

import jax

from jaxlab.lm.model import LMConfig

# Dense bf16 peak TFLOP/s per device from the vendors' data sheets (no sparsity). Matched as a
# substring of ``device_kind``, in this order ("v5p" before "v5").
PEAK_TFLOPS = {
  "h200": 989,
  "h100": 989,
  "a100": 312,
  "v5p": 459,
  "v5": 197,
  "v4": 275,
  "l4": 121,
}


def flops_per_token(cfg: LMConfig, seq_len: int, n_params: int) -> float:
  """Training FLOPs per token: 6 x (matmul parameters) + causal attention 6 * layers * S * H * Dh.

  The input embedding is a lookup, not a matmul, so its parameters are excluded, unless they are
  tied to the output layer (then the same matrix is a matmul once per token); attention is
  12 * layers * S * H * Dh for full attention, halved for the causal mask (as MaxText counts it).
  """
  attn = 6 * cfg.n_layers * seq_len * cfg.n_heads * cfg.head_dim
  lookup_only = 0 if cfg.tie_embeddings else cfg.vocab_size * cfg.d_model
  return 6.0 * (n_params - lookup_only) + attn


def device_peak_flops(device_kind: str | None = None) -> float | None:
  """Nominal peak FLOP/s of one device of this kind (default: the first device), or None."""
  kind = (device_kind or jax.devices()[0].device_kind).lower()
  for name, tflops in PEAK_TFLOPS.items():
    if name in kind:
      return tflops * 1e12
  return None


def peak_flops(
  override_tflops: float = 0.0, device_kind: str | None = None
) -> tuple[float | None, str]:
  """Peak FLOP/s of one device and where the number comes from.

  ``override_tflops > 0`` wins; otherwise the device kind is looked up in `PEAK_TFLOPS`. An
  unknown kind (a CPU) has no peak (``None``): no MFU is reported against an invented one.
  """
  if override_tflops > 0:
    return override_tflops * 1e12, "config"
  kind = (device_kind or jax.devices()[0].device_kind).lower()
  return device_peak_flops(kind), kind


class ThroughputMeter:
  """An ``eval_fn(state, step)`` reporting tokens/s and MFU over the steps since its last call.

  The first call only starts the clock, so compilation is not counted; the interval includes
  whatever else runs between calls (logging, other evaluations). ``peak=None``: no MFU.
  """

  def __init__(
    self, tokens_per_step: int, flops_per_step: float, peak: float | None, n_devices: int
  ):
    self.tokens_per_step, self.flops_per_step = tokens_per_step, flops_per_step
    self.total_peak = None if peak is None else peak * n_devices
    self.t, self.step = time.perf_counter(), None

  def __call__(self, state, step: int) -> dict[str, float]:
    del state
    now, out = time.perf_counter(), {}
    if self.step is not None and step > self.step:
      dt = (now - self.t) / (step - self.step)
      out = {"tokens_per_sec": self.tokens_per_step / dt}
      if self.total_peak:
        out["mfu"] = self.flops_per_step / dt / self.total_peak
    self.t, self.step = now, step
    return out
