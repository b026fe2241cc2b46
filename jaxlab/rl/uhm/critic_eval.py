"""The critic against the current actor's own returns: Q(s, mu(s)) vs G^pi in the simulator.

The held-out diagnostic (`diagnostics`) scores Q(s, a) against the behaviour data's returns; this
one scores the quantity the actor is trained to climb, at the states the actor itself reaches. At
each evaluation the deterministic actor's episodes (`jaxlab.envs.ogbench.evaluate`, episode i reset
with seed EVAL_SEED + i) give, at step t of an episode of T steps,

    G^pi_t = sum_{k=t}^{T-1} gamma^(k-t) r_k        (G^pi_{T-1} = r_{T-1})

with r_k the env's single-task reward of step k. That is the reward the critic learns from: OGBench
computes the env reward on the current state s_k (success_timing "pre"), as its data sets'
relabelled rewards are, and neither the data nor the agent shifts or scales them. An episode that
terminates (success) ends where the data's mask is 0, so there the critic's target is r with no
bootstrap and G^pi is exact at every t. A truncated episode (time limit) misses the tail
gamma^(T-t) V^pi(s_T); only steps with T - t >= H, gamma^H <= ``tail``, are scored.

The Q scored is the one the actor's loss climbs (`agent.actor_critic_loss`): the minimum over the
critic ensemble, online parameters, at a = mu(s). The existing held-out ``q_mae`` uses the ensemble
mean of Q(s, a_data); the two are not on the same action or the same aggregate.

    eps = og.evaluate(env_name, policy_fn, n, seed=EVAL_SEED, return_episodes=True)["episodes"]
    row = critic_vs_returns(state, eps, discount)  # the COLUMNS: qpi_mae, qpi_bias, ..., qpi_n
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.rl.uhm import agent

TAIL = 1e-2  # largest gamma^(T - t) a truncated episode's scored step may leave unsummed
CHUNK = 2048  # states per critic call: one compiled shape, bounded memory
COLUMNS = ("qpi_mae", "qpi_bias", "qpi_corr", "qpi_base_mae", "qpi_n")

__all__ = [
  "CHUNK",
  "COLUMNS",
  "TAIL",
  "critic_vs_returns",
  "exact_horizon",
  "q_at_actor",
  "returns_to_go",
  "score",
  "scored_steps",
  "targets",
]


def exact_horizon(discount: float, tail: float = TAIL) -> int:
  """Smallest H with discount^H <= tail: steps a truncated episode must still run after t.

  The unsummed tail of G^pi_t is gamma^(T-t) V^pi(s_T). OGBench single-task rewards lie in
  [-R, 0] (R subtasks; 1 for most tasks), so |V^pi| <= R / (1 - gamma) and the cut moves G^pi_t by
  at most tail * R / (1 - gamma): with tail = 1e-2, 1 % of the widest possible return. At gamma
  0.99 this is H = 459, more than a 200-step cube episode: there only terminated episodes count.
  """
  H = max(int(math.ceil(math.log(tail) / math.log(discount))), 0)
  # The logarithm's rounding can land one off where discount^H == tail exactly.
  while H > 0 and discount ** (H - 1) <= tail:
    H -= 1
  while discount**H > tail:
    H += 1
  return H


def returns_to_go(rewards, discount: float) -> np.ndarray:
  """G_t = r_t + gamma G_{t+1} over one episode, G_{T-1} = r_{T-1} (float64)."""
  r = np.asarray(rewards, np.float64).reshape(-1)
  G, acc = np.zeros_like(r), 0.0
  for t in range(r.size - 1, -1, -1):
    acc = r[t] + discount * acc
    G[t] = acc
  return G


def scored_steps(length: int, terminated: bool, discount: float, tail: float = TAIL) -> np.ndarray:
  """Steps t whose G^pi_t is exact (terminated) or leaves at most gamma^H <= tail unsummed."""
  if terminated:
    return np.arange(length)
  return np.arange(max(length - exact_horizon(discount, tail) + 1, 0))


def targets(episodes, discount: float, tail: float = TAIL) -> tuple[np.ndarray, np.ndarray]:
  """(observations NxD float32, G^pi N float64) of the scored steps of every episode."""
  obs, G = [], []
  for ep in episodes:
    r = np.asarray(ep["rewards"])
    t = scored_steps(r.size, bool(ep["terminated"]), discount, tail)
    obs.append(np.asarray(ep["observations"], np.float32)[t])
    G.append(returns_to_go(r, discount)[t])
  if not obs:
    return np.zeros((0, 0), np.float32), np.zeros(0)
  return np.concatenate(obs), np.concatenate(G)


@jax.jit
def _q_actor_min(state, obs_BxO):
  return jnp.min(agent.q_values(state, obs_BxO, agent.policy(state, obs_BxO)), 0)


def q_at_actor(state, obs_NxO, q_fn=_q_actor_min, chunk: int = CHUNK) -> np.ndarray:
  """min over the ensemble of Q(s, mu(s)) per row, in padded chunks of one compiled shape."""
  obs = np.asarray(obs_NxO, np.float32)
  out = []
  for i in range(0, len(obs), chunk):
    part = obs[i : i + chunk]
    pad = np.zeros((chunk - len(part), obs.shape[1]), np.float32)
    q = np.asarray(q_fn(state, jnp.asarray(np.concatenate([part, pad]))))
    out.append(q[: len(part)])
  return np.concatenate(out).astype(np.float64) if out else np.zeros(0)


def score(q, G) -> dict:
  """qpi_mae = mean |Q - G|, qpi_bias = mean (Q - G), qpi_corr (Pearson), qpi_base_mae (the
  constant predictor mean G), qpi_n; NaN where no state (or, for the correlation, no spread)."""
  q, G = np.asarray(q, np.float64), np.asarray(G, np.float64)
  n = int(G.size)
  if n == 0:
    return {**{k: float("nan") for k in COLUMNS[:-1]}, "qpi_n": 0}
  qc, Gc = q - q.mean(), G - G.mean()
  denom = math.sqrt(float(np.sum(qc**2) * np.sum(Gc**2)))
  return dict(
    qpi_mae=float(np.mean(np.abs(q - G))),
    qpi_bias=float(np.mean(q - G)),
    qpi_corr=float(np.sum(qc * Gc) / denom) if denom > 0 else float("nan"),
    qpi_base_mae=float(np.mean(np.abs(G - G.mean()))),
    qpi_n=n,
  )


def critic_vs_returns(state, episodes, discount: float, tail: float = TAIL, q_fn=None) -> dict:
  """`score` of one training seed's critic on its own actor's episodes (one unstacked state).

  q_fn(state, obs_BxO) -> Q_B replaces the actor's Q (tests pass known critics)."""
  obs, G = targets(episodes, discount, tail)
  q = q_at_actor(state, obs, q_fn or _q_actor_min) if G.size else np.zeros(0)
  return score(q, G)
