"""The one policy-rollout step of the online-RL methods (PPO, its evaluation, R4, DiCode).

A step at time ``t`` draws ``k_act, k_env = split(fold_in(key, t))``, lets the actor choose the
actions of the ``N`` environments from their observations, and steps the environments::

    act = rollouts.policy_actor(lambda c, o, r: policy.apply({"params": p}, c, o, r))
    carry = (env_state, obs, reset, policy.initial_carry(n))
    carry, traj = rollouts.rollout(env.step, act, carry, key, num_steps)   # traj: [T, N] records

``carry = (env_state, obs, reset, policy_carry)``: ``reset[N]`` marks observations that start an
episode (a recurrent policy clears its memory there); after a step it is the step's ``done``.
Records: ``obs, reset, action, reward, done, info`` and whatever the actor adds (a policy
actor: ``log_prob, value``). :func:`step_fn` is the scan body, for loops that are not a plain
``lax.scan`` (the evaluation's ``while_loop``).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from jaxlab.rl.ppo import policies


def policy_actor(apply: Callable, greedy: bool = False) -> Callable:
  """``act(carry, obs, reset, key) -> (carry, action, {"log_prob", "value"})`` from a policy's
  ``apply(carry, obs[1, N], reset[1, N]) -> (carry, dist, value)`` (a ``TrainState`` is one).

  ``greedy``: the most likely action instead of a sample.
  """

  def act(pcarry, obs, reset, key):
    pcarry, dist, value = apply(pcarry, obs[None], reset[None])
    dist, value = jax.tree.map(lambda x: x[0], dist), value[0]
    action = policies.mode(dist) if greedy else policies.sample(dist, key)
    return pcarry, action, {"log_prob": policies.log_prob(dist, action), "value": value}

  return act


def step_fn(env_step: Callable, act: Callable, key) -> Callable:
  """The scan body ``step(carry, t) -> (carry, record)`` (see the module docstring).

  ``env_step(env_state, action, key) -> (obs, env_state, reward, done, info)`` (``VecEnv.step``);
  ``act(policy_carry, obs, reset, key) -> (policy_carry, action, extra_records)``.
  """

  def step(carry, t):
    env_state, obs, reset, pcarry = carry
    k_act, k_env = jax.random.split(jax.random.fold_in(key, t))
    pcarry, action, extra = act(pcarry, obs, reset, k_act)
    next_obs, env_state, reward, done, info = env_step(env_state, action, k_env)
    record = dict(obs=obs, reset=reset, action=action, reward=reward, done=done, info=info)
    return (env_state, next_obs, done, pcarry), {**record, **extra}

  return step


def rollout(env_step: Callable, act: Callable, carry, key, num_steps: int, records: bool = True):
  """``num_steps`` steps in one ``lax.scan`` -> ``(carry, trajectory)`` (``[T, N]`` records;
  ``None`` without ``records``, which keeps the scan from stacking them).

  Two records repeat others and are rebuilt after the loop instead of stacked in it (each stacked
  record is an update per step, and at a few environments a step is a few microseconds of such
  operations): ``reset[t + 1]`` is ``done[t]``, and ``info["returned_episode"]`` is ``done``
  (:mod:`jaxlab.envs.vec`).
  """
  step = step_fn(env_step, act, key)
  if not records:
    body = lambda c, t: (step(c, t)[0], None)
    return jax.lax.scan(body, carry, jnp.arange(num_steps))

  rebuilt = set()  # filled while the body is traced

  def body(c, t):
    c, rec = step(c, t)
    rebuilt.update({"returned_episode"} & set(rec["info"]))
    info = {k: v for k, v in rec["info"].items() if k != "returned_episode"}
    return c, {k: v for k, v in rec.items() if k != "reset"} | {"info": info}

  reset0 = carry[2]
  carry, traj = jax.lax.scan(body, carry, jnp.arange(num_steps))
  if rebuilt:
    traj["info"]["returned_episode"] = traj["done"]
  traj["reset"] = jnp.concatenate([reset0[None], traj["done"][:-1]])
  return carry, traj


def alive(done) -> jax.Array:
  """``[T, N]`` float32: 1 until (and including) the step that ends each environment's first
  episode, 0 after it."""
  live = jnp.cumprod(1.0 - done.astype(jnp.float32), axis=0)
  return jnp.concatenate([jnp.ones_like(live[:1]), live[:-1]], axis=0)
