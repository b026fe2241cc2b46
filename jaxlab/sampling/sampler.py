"""tau-leaping for the controlled CTMC, with path log-RNDs and ESS (the authors' `sampling.py`).

Per step (t, t+dt] and site d: P(x^d -> n) = Gamma(t,t+dt)/N * phi(t,x)_{d,n} for n != x^d,
P(stay) = 1 - sum. A row with sum > 1 (or NaN/Inf) stays put and is counted in `invalid_frac`.
Accumulated per path:
  log p_u  = sum log(chosen tau-leap probability)
  log p_r  = sum log p^r_{t+dt|t}(x_new | x)
  log dP*/dP^r = sum_steps [Gamma/N (D(N-1) - sum_{d,n != x^d} phi)
                            + sum_{d jumped} log phi_{d, x_new^d}]
               (continuous-time Girsanov for the controlled CTMC vs the reference; left-point rule)
  log_rnd = log dP*/dP^r + log p_r - log p_u.
The log_rnd compares the continuous-time controlled path measure with its tau-leaping
discretisation; with a non-memoryless reference it is not an importance weight against the target
(docs/dasbs.md, "The equations as implemented"). Target importance weights are
`metrics.path_is_log_weights`.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from jaxlab.sampling import reference as ref_lib


def step_log_probs(log_phi_BxDxN, x_BxD, Gam):
  """Per-site log probabilities of the next value (BxDxN) and the invalid-row flag (BxD)."""
  N = log_phi_BxDxN.shape[-1]
  on = x_BxD[..., None] == jnp.arange(N)
  log_pj = jnp.log(Gam / N) + log_phi_BxDxN
  rowsum = jnp.where(on, 0.0, jnp.exp(log_pj)).sum(-1)
  bad = (rowsum > 1.0) | ~jnp.isfinite(rowsum)
  log_stay = jnp.log1p(-jnp.minimum(rowsum, 1.0))
  logp = jnp.where(on, log_stay[..., None], log_pj)
  logp = jnp.where(bad[..., None], jnp.where(on, 0.0, -jnp.inf), logp)
  return logp, bad


def tau_leap(
  key,
  log_phi_fn: Callable,
  x0_BxD,
  sched: ref_lib.Schedule,
  N: int,
  steps: int,
):
  """Simulates x0 -> x1 with `steps` tau-leaps on a uniform grid over [0, 1].

  log_phi_fn(t_B, x_BxD) -> BxDxN (log rate ratios to the reference). Returns a dict with x1,
  log_rnd, log_dp_star_dp_r, log_p_u, log_p_r, invalid_frac, jumps_per_site.
  """
  B, D = x0_BxD.shape
  ts = jnp.linspace(0.0, 1.0, steps + 1)
  n = jnp.arange(N)

  def body(carry, i):
    x, lpu, lpr, lgir, nbad, njump = carry
    t, t1 = ts[i], ts[i + 1]
    Gam = sched.Gamma(t, t1)
    log_phi = log_phi_fn(jnp.full((B,), t), x).astype(jnp.float32)
    logp, bad = step_log_probs(log_phi, x, Gam)
    new = jax.random.categorical(jax.random.fold_in(key, i), logp, axis=-1).astype(x.dtype)
    chosen = jnp.take_along_axis(logp, new[..., None], -1)[..., 0]
    moved = new != x
    log_a, log_b = ref_lib.log_AB(sched, t, t1, N)
    off = x[..., None] != n
    phi_sum = jnp.where(off, jnp.exp(log_phi), 0.0).sum((-1, -2))
    log_phi_new = jnp.take_along_axis(log_phi, new[..., None], -1)[..., 0]
    gir = Gam / N * (D * (N - 1) - phi_sum) + jnp.where(moved, log_phi_new, 0.0).sum(-1)
    # the carries keep their float32 dtype (with x64 enabled, t and Gamma are float64)
    lgir = lgir + gir.astype(lgir.dtype)
    lpu = lpu + chosen.sum(-1).astype(lpu.dtype)
    lpr = lpr + jnp.where(moved, log_a, log_b).sum(-1).astype(lpr.dtype)
    nbad = nbad + bad.sum().astype(nbad.dtype)
    return (new, lpu, lpr, lgir, nbad, njump + moved.sum().astype(njump.dtype)), None

  z = jnp.zeros((B,), jnp.float32)
  init = (x0_BxD, z, z, z, jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32))
  (x1, lpu, lpr, lgir, nbad, njump), _ = jax.lax.scan(body, init, jnp.arange(steps))
  return {
    "x1": x1,
    "log_rnd": lgir + lpr - lpu,
    "log_dp_star_dp_r": lgir,
    "log_p_u": lpu,
    "log_p_r": lpr,
    "invalid_frac": nbad / (B * D * steps),
    "jumps_per_site": njump / (B * D),
  }


def ess(log_w_B):
  """Normalised effective sample size 1 / (B sum w_i^2), w = softmax(log_w); in [1/B, 1]."""
  w = jax.nn.softmax(log_w_B)
  return 1.0 / (log_w_B.shape[0] * jnp.sum(w**2))


def sample_source(key, kind: str, B: int, D: int, N: int):
  """The source mu: 'uniform' on {0..N-1}^D (beta_init = 0) or 'constant' (beta_init = inf: the N
  all-equal configurations, uniformly)."""
  if kind == "uniform":
    return jax.random.randint(key, (B, D), 0, N).astype(jnp.int32)
  if kind == "constant":
    return jnp.broadcast_to(jax.random.randint(key, (B, 1), 0, N), (B, D)).astype(jnp.int32)
  raise ValueError(f"source must be 'uniform' or 'constant', got {kind!r}")


def exact_tau_leap_marginal(log_phi_fn, states_SxD, mu_S, sched, N: int, steps: int):
  """The exact law of the tau-leaping output over an enumerated state space (dense S x S
  kernels)."""
  S, D = states_SxD.shape
  ts = jnp.linspace(0.0, 1.0, steps + 1)
  cols = jnp.arange(D)

  def body(p, i):
    logp, _ = step_log_probs(
      log_phi_fn(jnp.full((S,), ts[i]), states_SxD), states_SxD, sched.Gamma(ts[i], ts[i + 1])
    )
    K = jnp.exp(logp[:, cols, states_SxD].sum(-1))  # S x S: K[x, y] = prod_d p_d(y_d | x)
    return p @ K, None

  p, _ = jax.lax.scan(body, jnp.asarray(mu_S, jnp.float32), jnp.arange(steps))
  return p
