"""Imagined rollouts: the policy acts in the world model, frames decoded by `decode.decode`.

As in ITC's code (``build_wm_rollout``): the agent's recurrent state is warmed up on ``burn_in``
real frames, then the world model starts from the next real frame alone and runs ``horizon``
steps (``horizon <= max_blocks``). Each step the policy acts on the current (decoded) frame, the
world model gives next-frame logits (restricted to the codes in use), reward and termination
are sampled from their 2-class heads, and the next frame's tokens are decoded by the chosen
method (``sample | argmax | itc | itc_hungarian``). After a predicted termination nothing is
copied (ITC) and the policy's memory is reset.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxlab.rl.itc import decode as decode_lib
from jaxlab.rl.itc import tokenizer as tok_lib
from jaxlab.rl.ppo import policies

Array = jax.Array


def _wm_step(wm, wm_params, book, ctx_tokens, ctx_actions, t, key):
  """Next-frame logits ``[B, L, V]`` (unused codes masked), sampled reward and done ``[B]``."""
  obs, rew, term = wm.apply({"params": wm_params}, ctx_tokens, ctx_actions)
  logits = jax.lax.dynamic_index_in_dim(obs, t, axis=1, keepdims=False)
  used = jnp.arange(logits.shape[-1]) < book.size
  logits = jnp.where(used, logits, -1e9)
  k_r, k_d = jax.random.split(key)
  reward = jax.random.categorical(k_r, jax.lax.dynamic_index_in_dim(rew, t, 1, False))
  done = jax.random.categorical(k_d, jax.lax.dynamic_index_in_dim(term, t, 1, False))
  return logits, reward.astype(jnp.float32), done.astype(bool)


def burn_in(policy_train, obs: Array, reset: Array):
  """Policy carry after ``obs [B, K, ...]`` (batch-major) from a zero carry."""
  carry = policy_train.model_def.initial_carry(obs.shape[0])
  if obs.shape[1] == 0:
    return carry
  carry, _, _ = policy_train(carry, jnp.swapaxes(obs, 0, 1), jnp.swapaxes(reset, 0, 1))
  return carry


def rollout(
  policy_train,
  wm_train,
  book,
  start: dict,
  key: Array,
  *,
  horizon: int,
  method: str,
  itc_cfg,
  tok_cfg,
  max_blocks: int,
):
  """Imagined ``horizon``-step rollout from ``start`` (``obs [B, K+1, H, W, C]`` in [0, 1],
  ``reset [B, K+1]``, ``done [B]``: the last real frame ended its episode).

  Returns ``(traj, carry0, last_value)``: ``traj`` holds ``[T, B]`` records ``obs, reset, action,
  log_prob, value, reward, done`` (what `jaxlab.rl.ppo.learn` takes).
  """
  wm = wm_train.model_def
  b = start["obs"].shape[0]
  carry0 = burn_in(policy_train, start["obs"][:, :-1], start["reset"][:, :-1])
  obs0 = start["obs"][:, -1]
  tokens0 = tok_lib.encode(book, obs0, tok_cfg)
  n = tokens0.shape[-1]
  ctx_t = jnp.zeros((b, max_blocks, n), jnp.int32)
  ctx_a = jnp.zeros((b, max_blocks), jnp.int32)

  def step(c, t):
    ctx_t, ctx_a, tokens, obs, reset, done_prev, carry = c
    k_act, k_wm, k_dec = jax.random.split(jax.random.fold_in(key, t), 3)
    carry, dist, value = policy_train(carry, obs[None], reset[None])
    dist = jax.tree.map(lambda x: x[0], dist)
    action = policies.sample(dist, k_act)
    ctx_t = ctx_t.at[:, t].set(tokens)
    ctx_a = ctx_a.at[:, t].set(action)
    logits, reward, done = _wm_step(wm, wm_train.params, book, ctx_t, ctx_a, t, k_wm)
    nxt = decode_lib.decode(logits, tokens, done_prev, k_dec, method, itc_cfg)
    record = dict(
      obs=obs,
      reset=reset,
      action=action,
      log_prob=policies.log_prob(dist, action),
      value=value[0],
      reward=reward,
      done=done,
    )
    new_obs = tok_lib.decode(book, nxt, tok_cfg)
    return (ctx_t, ctx_a, nxt, new_obs, done, done, carry), record

  init = (ctx_t, ctx_a, tokens0, obs0, start["reset"][:, -1], start["done"], carry0)
  final, traj = jax.lax.scan(step, init, jnp.arange(horizon))
  _, _, _, obs, reset, _, carry = final
  _, _, last_value = policy_train(carry, obs[None], reset[None])
  return traj, carry0, last_value[0]


def open_loop(
  wm_train,
  book,
  tokens0: Array,
  actions: Array,
  done0: Array,
  key: Array,
  *,
  method: str,
  itc_cfg,
  choices: tuple[str, ...] = decode_lib.METHODS,
) -> Array:
  """Tokens ``[B, T, L]`` the world model imagines after ``tokens0 [B, L]`` under the given
  ``actions [B, T]`` (for pictures and decoding comparisons; ``T <= max_blocks``). ``method``: a
  decoder's name, or a traced index into ``choices`` (``decode.decode``)."""
  wm = wm_train.model_def
  b, t_len = actions.shape
  max_blocks = wm.cfg.max_blocks
  ctx_t = jnp.zeros((b, max_blocks, tokens0.shape[-1]), jnp.int32)
  ctx_a = jnp.zeros((b, max_blocks), jnp.int32).at[:, :t_len].set(actions)

  def step(c, t):
    ctx_t, tokens, done_prev = c
    k_wm, k_dec = jax.random.split(jax.random.fold_in(key, t))
    ctx_t = ctx_t.at[:, t].set(tokens)
    logits, _, done = _wm_step(wm, wm_train.params, book, ctx_t, ctx_a, t, k_wm)
    nxt = decode_lib.decode(logits, tokens, done_prev, k_dec, method, itc_cfg, choices)
    return (ctx_t, nxt, done), nxt

  _, out = jax.lax.scan(step, (ctx_t, tokens0, done0), jnp.arange(t_len))
  return jnp.swapaxes(out, 0, 1)
