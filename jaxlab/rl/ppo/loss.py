"""PPO's two pure pieces: generalised advantage estimation and the clipped surrogate loss.

Conventions follow PureJaxRL / Craftax_Baselines: ``done[t]`` means the episode ended at step
``t`` (terminated or truncated), so nothing is bootstrapped across it; the value loss is clipped
around the rollout's values; advantages are normalised per minibatch.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

Array = jax.Array


def gae(
  reward: Array, value: Array, done: Array, last_value: Array, gamma: float, lam: float
) -> tuple[Array, Array]:
  """Generalised advantage estimation (arXiv 1506.02438, eq. 16), backwards with ``lax.scan``.

  Args: ``reward, value, done`` are ``[T, N]`` (``value[t] = V(s_t)``), ``last_value`` is
  ``V(s_T)`` ``[N]``. Returns ``(advantages, targets)``, both ``[T, N]``, with
  ``delta_t = r_t + gamma V(s_{t+1}) (1 - done_t) - V(s_t)`` and
  ``A_t = delta_t + gamma lam (1 - done_t) A_{t+1}``; ``targets = A + value`` (the lambda-return).
  """
  not_done = 1.0 - done.astype(jnp.float32)

  def back(carry, xs):
    adv_next, value_next = carry
    r, v, nd = xs
    delta = r + gamma * value_next * nd - v
    adv = delta + gamma * lam * nd * adv_next
    return (adv, v), adv

  init = (jnp.zeros_like(last_value), last_value)
  _, adv = jax.lax.scan(back, init, (reward, value, not_done), reverse=True)
  return adv, adv + value


# the parts ppo_loss returns, in a fixed order (PPO stacks them per minibatch as one vector)
LOSS_PARTS = ("loss", "pg_loss", "value_loss", "entropy", "approx_kl", "clip_frac")


class LossTerms(NamedTuple):
  """What the loss sees of one minibatch: the new network outputs and the rollout's records."""

  log_prob: Array  # log pi_theta(a_t | s_t) under the parameters being optimised
  value: Array  # V_theta(s_t)
  entropy: Array  # H(pi_theta(. | s_t))
  old_log_prob: Array  # log pi at collection time
  old_value: Array  # V at collection time
  advantage: Array  # GAE advantages
  target: Array  # lambda-returns (value targets)


def ppo_loss(
  t: LossTerms,
  clip_eps: float,
  vf_coef: float,
  ent_coef: float,
  normalize_advantages: bool,
  clip_value: bool,
) -> tuple[Array, dict[str, Array]]:
  """The clipped surrogate objective (arXiv 1707.06347, eq. 7 and eq. 9) as a loss to minimise.

  ``loss = -mean(min(rho A, clip(rho, 1 - eps, 1 + eps) A)) + vf_coef * L_V - ent_coef * H`` with
  ``rho = exp(log_prob - old_log_prob)`` and ``L_V = 0.5 mean(max((V - R)^2, (V_clip - R)^2))``,
  ``V_clip = V_old + clip(V - V_old, -eps, eps)`` (value clipping as in PureJaxRL). Returns the loss
  and its parts (``pg_loss, value_loss, entropy, approx_kl, clip_frac``).
  """
  adv = t.advantage
  if normalize_advantages:
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
  log_ratio = t.log_prob - t.old_log_prob
  ratio = jnp.exp(log_ratio)
  pg_loss = -jnp.mean(jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - clip_eps, 1 + clip_eps) * adv))
  v_loss = jnp.square(t.value - t.target)
  if clip_value:
    v_clipped = t.old_value + jnp.clip(t.value - t.old_value, -clip_eps, clip_eps)
    v_loss = jnp.maximum(v_loss, jnp.square(v_clipped - t.target))
  value_loss = 0.5 * jnp.mean(v_loss)
  ent = jnp.mean(t.entropy)
  loss = pg_loss + vf_coef * value_loss - ent_coef * ent
  parts = {
    "loss": loss,
    "pg_loss": pg_loss,
    "value_loss": value_loss,
    "entropy": ent,
    # (rho - 1) - log rho: the low-variance KL estimator (Schulman's "approximating KL").
    "approx_kl": jnp.mean((ratio - 1) - log_ratio),
    "clip_frac": jnp.mean((jnp.abs(ratio - 1) > clip_eps).astype(jnp.float32)),
  }
  return loss, parts
