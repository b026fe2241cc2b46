"""The four Discrete ASBS regression losses (arXiv 2602.08243; exact from the authors'
`utils_train.py`; the derivation of each target is in docs/dasbs.md, "The equations as
implemented").

Every loss is a Bregman divergence D(target || pred) on positive rate ratios, summed over (d, n)
with n != current value, averaged over the batch and divided by D*N. All functions take and return
logs. The Z_N cyclic shift: a prediction for the jump x^d -> n at one state is matched with the
target entry for the same group increment g = n - x^d at another state.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxlab.sampling import reference as ref_lib

BREGMAN = ("tlogt", "-logt", "t2")


def bregman(log_a, log_b, kind: str = "tlogt"):
  """D_phi(a || b) elementwise, from logs (no clamping needed)."""
  if kind == "tlogt":  # a log(a/b) - a + b; minimiser over b is E[a]
    a = jnp.exp(log_a)
    return a * (log_a - log_b) - a + jnp.exp(log_b)
  if kind == "-logt":  # a/b - log(a/b) - 1
    r = log_a - log_b
    return jnp.exp(r) - r - 1
  if kind == "t2":
    return (jnp.exp(log_a) - jnp.exp(log_b)) ** 2
  raise ValueError(f"bregman must be one of {BREGMAN}, got {kind!r}")


def shift_gather(T_BxDxN, x_from_BxD, x_to_BxD):
  """out[.., d, n] = T[.., d, (n + x_from^d - x_to^d) mod N]: T's entries (indexed by the value
  after a jump from x_from) re-indexed by the value after the same Z_N increment from x_to."""
  N = T_BxDxN.shape[-1]
  idx = ((x_from_BxD - x_to_BxD)[..., None].astype(jnp.int32) + jnp.arange(N)) % N
  return jnp.take_along_axis(T_BxDxN, idx, axis=-1)


def off_mask(x_BxD, N: int):
  return x_BxD[..., None] != jnp.arange(N)


def ctrl_tm_log_target(score1_BxDxN, log_corr1_BxDxN, x1_BxD, xt_BxD):
  """ctrl-TM: log phi_t(x_t^{d<-n}) / phi_t(x_t) is regressed on [S_nu - log hat phi](x1),
  shifted."""
  return shift_gather(score1_BxDxN - log_corr1_BxDxN, x1_BxD, xt_BxD)


def ctrl_dm_log_target(sched, x1_BxD, xt_BxD, t_B, N: int):
  """ctrl-DM: p_{1|t}(x1 | x_t^{d<-n}) / p_{1|t}(x1 | x_t)
  = C(t,1)^{1[n != x1^d] - 1[x_t^d != x1^d]}."""
  lc = ref_lib.log_C(sched, t_B, 1.0, N)[:, None, None]
  n = jnp.arange(N)
  e = (n != x1_BxD[..., None]).astype(lc.dtype) - (xt_BxD != x1_BxD)[..., None].astype(lc.dtype)
  return lc * e


def corr_dm_log_target(sched, x1_BxD, xt_BxD, t_B, N: int):
  """corr-DM (pred at x1): p_{1|t}(x1^{d<-n} | x_t) / p_{1|t}(x1 | x_t)."""
  lc = ref_lib.log_C(sched, t_B, 1.0, N)[:, None, None]
  n = jnp.arange(N)
  e = (n != xt_BxD[..., None]).astype(lc.dtype) - (x1_BxD != xt_BxD)[..., None].astype(lc.dtype)
  return lc * e


def corr_tm_log_target(score0_BxDxN, log_phi0_BxDxN, x0_BxD, x1_BxD):
  """corr-TM (pred at x1): [S_mu - log phi_theta(0, .)](x0) shifted from x0 to x1."""
  return shift_gather(score0_BxDxN - log_phi0_BxDxN, x0_BxD, x1_BxD)


def masked_loss(log_target, log_pred, x_BxD, kind: str = "tlogt", weight_B=None):
  """mean_b w_b * sum_{d, n != x^d} D(target || pred) / (D N)."""
  D, N = log_pred.shape[-2:]
  div = jnp.where(
    off_mask(x_BxD, N), bregman(jax.lax.stop_gradient(log_target), log_pred, kind), 0.0
  )
  per = div.sum((-1, -2)) / (D * N)
  if weight_B is not None:
    per = per * weight_B
  return per.mean()
