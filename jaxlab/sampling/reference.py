"""Uniform-jump reference CTMC on Z_N^D, its transition probabilities and its exact bridge.

Sites are independent. At rate gamma(t)/N a site jumps from x^d to each other value (total leave
rate gamma(t)(N-1)/N). With Gamma(s,t) = int_s^t gamma, the per-site transition over (s, t] is
  stay: B(s,t) = (1 + (N-1) e^{-Gamma}) / N,
  move to each other value: A(s,t) = (1 - e^{-Gamma}) / N,
so p^r_{t|s}(y|x) = B^D C^{d_H(x,y)} with C = A/B. The kernel is invariant under Z_N translations,
which is what makes the cyclic shift in the DASBS losses exact (docs/dasbs.md, "The equations as
implemented").
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

SCHEDULES = ("const", "log_linear")


@dataclasses.dataclass(frozen=True)
class Schedule:
  """gamma(t) = gamma ('const') or gamma / (alpha + t) ('log_linear', the DASBS default)."""

  kind: str = "log_linear"
  gamma: float = 1.0
  alpha: float = 0.5

  def __post_init__(self):
    if self.kind not in SCHEDULES:
      raise ValueError(f"noise schedule must be one of {SCHEDULES}, got {self.kind!r}")
    if self.gamma <= 0:
      raise ValueError(f"noise gamma must be > 0, got {self.gamma}")
    if self.kind == "log_linear" and self.alpha <= 0:
      raise ValueError(f"log_linear noise needs alpha > 0, got {self.alpha}")

  def rate(self, t):
    return self.gamma * jnp.ones_like(t) if self.kind == "const" else self.gamma / (self.alpha + t)

  def Gamma(self, s, t):
    """Integrated rate over (s, t]."""
    if self.kind == "const":
      return self.gamma * (t - s)
    return self.gamma * (jnp.log(self.alpha + t) - jnp.log(self.alpha + s))


def log_AB(sched: Schedule, s, t, N: int):
  """(log A, log B): per-site log probability over (s, t] to move to one given other value / to
  stay."""
  G = sched.Gamma(s, t)
  log_a = jnp.log(-jnp.expm1(-G)) - jnp.log(N)
  log_b = jnp.log1p((N - 1) * jnp.exp(-G)) - jnp.log(N)
  return log_a, log_b


def log_C(sched: Schedule, s, t, N: int):
  log_a, log_b = log_AB(sched, s, t, N)
  return log_a - log_b


def transition_matrix(sched: Schedule, states_SxD, s, t, N: int):
  """Dense p^r_{t|s}(y|x) over an enumerated state list (rows x, columns y)."""
  ham = (states_SxD[:, None, :] != states_SxD[None, :, :]).sum(-1)
  log_a, log_b = log_AB(sched, s, t, N)
  D = states_SxD.shape[-1]
  return jnp.exp(D * log_b + ham * (log_a - log_b))


def bridge_logits(sched: Schedule, x0_BxD, x1_BxD, t_B, N: int):
  """Per-site log p^r(x_t^d = n | x0^d, x1^d), shape BxDxN (exact, Chapman–Kolmogorov).

  log P(n) = log K_{0t}(x0 -> n) + log K_{t1}(n -> x1) - log K_{01}(x0 -> x1), K in {A, B}.
  """
  t = t_B[:, None, None]
  la0, lb0 = log_AB(sched, 0.0, t, N)
  la1, lb1 = log_AB(sched, t, 1.0, N)
  la01, lb01 = log_AB(sched, 0.0, 1.0, N)
  n = jnp.arange(N)
  is0 = x0_BxD[..., None] == n
  is1 = x1_BxD[..., None] == n
  same = (x0_BxD == x1_BxD)[..., None]
  return jnp.where(is0, lb0, la0) + jnp.where(is1, lb1, la1) - jnp.where(same, lb01, la01)


def sample_bridge(key, sched: Schedule, x0_BxD, x1_BxD, t_B, N: int):
  """x_t ~ p^r_{t|0,1}(. | x0, x1), site by site."""
  logits = bridge_logits(sched, x0_BxD, x1_BxD, t_B, N)
  return jax.random.categorical(key, logits, axis=-1).astype(x0_BxD.dtype)


def log_marginal(sched: Schedule, source: str, x_BxD, N: int):
  """log p^r_1(x) when the reference starts at time 0 from `source` ('uniform': uniform,
  stationary; 'constant': the N all-equal configurations)."""
  D = x_BxD.shape[-1]
  if source == "uniform":
    return jnp.full(x_BxD.shape[:-1], -D * jnp.log(N))
  if source == "constant":
    log_a, log_b = log_AB(sched, 0.0, 1.0, N)
    eq = (x_BxD[..., None] == jnp.arange(N)).sum(-2)  # ... x N: sites equal to colour c
    return jax.nn.logsumexp(eq * log_b + (D - eq) * log_a, axis=-1) - jnp.log(N)
  raise ValueError(f"source must be 'uniform' or 'constant', got {source!r}")
