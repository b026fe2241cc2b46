"""R4's offline and online protocols (arXiv 2601.09236, Section 5) on gymnax with jaxlab's PPO.

Offline: rate a pool of behaviour trajectories, learn the reward (:func:`jaxlab.rl.r4.fit`), then
train PPO (:mod:`jaxlab.rl.ppo`, unchanged) on the learned reward through :func:`reward_env`, a
:class:`jaxlab.envs.vec.VecEnv` wrapper whose reward is the ensemble-mean learned reward divided by
its standard deviation over the rated steps (a positive scale keeps the order of returns, and no
shift: a shift would change which episode lengths pay). The wrapper's state carries the reward
parameters, so the online protocol swaps in a new reward model between PPO phases without
recompiling. ``episode_return`` of the PPO metrics stays the TRUE return (the inner environment
tracks it). Online: rounds of (roll out the current policy, rate the new trajectories, refit the
reward ensemble on all ratings so far, continue PPO). :func:`run` is the whole protocol of
``python -m experiments.r4`` (pool, rating, fit, PPO phases, evaluation, outputs): a notebook calls
it with ``r4.get_config()``. See docs/r4.md.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxlab.core import plots, provenance, runtime
from jaxlab.core import workdir as workdir_lib
from jaxlab.core.errors import ConfigError
from jaxlab.envs import gymnax, vec
from jaxlab.rl import ppo, r4
from jaxlab.rl.ppo import evaluation as ppo_eval
from jaxlab.rl.ppo import policies
from jaxlab.rl.r4 import data as r4_data

Array = jax.Array


@struct.dataclass
class RewardEnvState:
  inner: Any  # the wrapped environment's VecState
  obs: Array  # the current observations (the reward is r(s_t, a_t))
  params: Any  # reward-ensemble parameters
  scale: Array  # 1 / std of the learned reward over the rated steps


def reward_env(env: vec.VecEnv, config: r4.RewardConfig, params, scale) -> tuple[vec.VecEnv, Any]:
  """``env`` with the learned reward; returns the wrapper and a function ``set_reward(state,
  params, scale)`` that swaps the reward model in a running state."""
  apply = r4.member_apply(config)

  def learned(params, obs, action):
    x = r4.features(obs, action, env.num_actions)
    return jnp.mean(jax.vmap(lambda p: apply(p, x))(params), axis=0)

  def reset(key):
    obs, inner = env.reset(key)
    return obs, RewardEnvState(inner, obs, params, jnp.asarray(scale, jnp.float32))

  def step(state: RewardEnvState, action, key):
    obs, inner, _, done, info = env.step(state.inner, action, key)
    rew = learned(state.params, state.obs, action) * state.scale
    return obs, state.replace(inner=inner, obs=obs), rew.astype(jnp.float32), done, info

  def set_reward(state: RewardEnvState, params, scale):
    return state.replace(params=params, scale=jnp.asarray(scale, jnp.float32))

  wrapped = dataclasses.replace(env, name=f"{env.name}+learned-reward", reset=reset, step=step)
  return wrapped, set_reward


def features_of(traj: r4_data.Trajectories, num_actions: int) -> np.ndarray:
  return np.asarray(r4.features(jnp.asarray(traj.obs), jnp.asarray(traj.action), num_actions))


def dataset(traj, ratings, num_actions: int, prefer=None) -> dict:
  """The training arrays of :func:`r4.make_dataset` from trajectories and dense ratings; the OOD
  box is the range of the observed features (actions uniform); Bradley-Terry's teacher compares
  ``prefer`` (default: the true returns)."""
  feats = features_of(traj, num_actions)
  flat = feats.reshape(-1, feats.shape[-1])[traj.mask.reshape(-1) > 0]
  prefer = traj.true_return if prefer is None else prefer
  return r4.make_dataset(feats, traj.mask, ratings, prefer, flat.min(0), flat.max(0), num_actions)


def reward_scale(state, data: dict) -> float:
  """``1 / std`` of the learned per-step reward over the rated (unmasked) steps."""
  x = data["feats"].reshape(-1, data["feats"].shape[-1])
  r = np.asarray(r4.reward(state, state.params, x))[np.asarray(data["mask"]).reshape(-1) > 0]
  return float(1.0 / max(np.std(r), 1e-6))


def policy_actor(policy, params):
  """``actor(obs[N, ...], key)`` sampling a (feed-forward) PPO policy, for rating rollouts."""

  def actor(obs, key):
    carry = policy.initial_carry(obs.shape[0])
    reset = jnp.ones((1, obs.shape[0]), bool)
    _, dist, _ = policy.apply({"params": params}, carry, obs[None], reset)
    return policies.sample(jax.tree.map(lambda x: x[0], dist), key)

  return actor


# --- the protocols of experiments/r4.py ---


def rate(traj: r4_data.Trajectories, config, key: Array, ratings: str, edges=None):
  """``(ids, ratings of traj[ids], edges, perceived returns of traj[ids])``: simulated ratings
  (``config.num_classes`` quantile classes of the returns, or ``config.bins`` / the given
  ``edges``; noise, imbalance) or the ratings file ``ratings`` (a ``trajectory_id,rating`` CSV,
  classes made dense). The perceived returns (the noisy returns the simulated rater binned; the
  true returns for a file) are what Bradley-Terry's teacher compares."""
  g = traj.true_return
  if ratings != "simulated":
    ids, given = r4_data.read_ratings(ratings, len(g))
    return ids, r4_data.dense_classes(given), edges, g[ids]
  if edges is None:
    edges = (
      np.asarray(config.bins) if len(config.bins) else r4_data.quantile_edges(g, config.num_classes)
    )
  k_noise, k_keep = jax.random.split(key)
  seen = r4_data.perceived_returns(g, k_noise, config.noise)
  rated = r4_data.simulate_ratings(g, edges, k_noise, config.noise)
  keep = r4_data.imbalance_keep(rated, k_keep, config.imbalance)
  return keep, rated[keep], edges, seen[keep]


def concat(a: r4_data.Trajectories, b: r4_data.Trajectories) -> r4_data.Trajectories:
  fields = ("obs", "action", "reward", "mask")
  return r4_data.Trajectories(*(np.concatenate([getattr(a, f), getattr(b, f)]) for f in fields))


def fit_reward(rc: r4.RewardConfig, pool, ids, ratings, num_actions: int, key: Array, prefer=None):
  """Fits the ensemble on ``pool[ids]`` rated ``ratings`` -> ``(state, data, fit summary)``;
  ``prefer``: the returns Bradley-Terry's teacher compares (default: the true ones)."""
  data = dataset(pool.take(ids), r4_data.dense_classes(ratings), num_actions, prefer)
  state, result = r4.fit(rc, data, key)
  return state, data, result.summary


def alignment_plot(path, pred, true, method: str) -> None:
  """Held-out true returns (sorted) and the learned ones, min-max scaled to the same range."""
  order = np.argsort(true)
  lo, hi = np.min(pred), np.max(pred)
  scaled = np.min(true) + (pred - lo) / max(hi - lo, 1e-12) * (np.max(true) - np.min(true))
  x = np.arange(len(true))
  curves = {"true": (x, true[order]), f"{method} (min-max scaled)": (x, scaled[order])}
  plots.lines(
    path,
    curves,
    "held-out trajectory (sorted by true return)",
    "return",
    title="learned vs true return, held out",
  )


def run(
  config,
  *,
  env: str,
  method: str,
  ratings: str,
  protocol: str,
  updates: int,
  seed: int,
  workdir: str | pathlib.Path | None = None,
) -> dict:
  """The offline or online protocol of ``python -m experiments.r4`` -> its summary.

  ``config``: :func:`r4.get_config`; ``env``: a gymnax task (``jaxlab.envs.gymnax``); ``method``:
  r4 | rbrl | bt | true; ``ratings``: ``"simulated"`` or a ``trajectory_id,rating`` CSV;
  ``protocol``: offline | online; ``updates``: PPO updates (the program's default:
  :func:`r4.ppo_updates`). Everything is validated (ConfigError naming the field) before
  ``workdir`` is created; there it writes trajectories.npz, alignment.png, agent.png and
  summary.json (``workdir=None``: nothing is written). The workdir goes through
  ``jaxlab.core.workdir.session`` (locked; a different recorded config, e.g. another seed, is
  refused naming ``--workdir``); a finished run's record is returned with every file unchanged,
  and trajectories.npz (the pool a ratings CSV refers to) is never overwritten.
  """
  gymnax.resolve(env)
  rc, pc = r4.validate_config(
    config, method=method, ratings=ratings, protocol=protocol, updates=updates
  )
  r4.check_memory(config, env, method)
  if workdir is not None:  # before computing: a read-only folder fails now, not after the run
    workdir_lib.check_writable(workdir, "workdir")
  provenance.announce()  # once per process: the study's cells share one line
  rounds = config.online_rounds if protocol == "online" else config.eval_points
  key = jax.random.key(seed)
  k_pool, k_rate, k_fit, k_ppo, k_eval, k_online = jax.random.split(key, 6)

  total = config.pool + config.heldout
  trajs = r4_data.collect(gymnax.make(env, total), config.traj_len, k_pool)
  pool, heldout = trajs.take(np.arange(config.pool)), trajs.take(np.arange(config.pool, total))
  ids, rated, edges, seen = rate(pool, config, k_rate, ratings)
  if len(np.unique(rated)) < 2:
    g = pool.true_return
    if ratings != "simulated":
      field, why = "ratings", "the rated trajectories fall"
    else:
      field = "config.bins" if len(config.bins) else "config.num_classes"
      why = f"the pool's returns ({g.min():.4g} to {g.max():.4g}) fall"
      why += f" with edges {tuple(config.bins)}" if len(config.bins) else ""
    raise ConfigError(field, f"{why} in fewer than 2 rating classes")
  recorded = {
    **config.to_dict(),
    "env": env,
    "method": method,
    "ratings": ratings,
    "ratings_sha256": None if ratings == "simulated" else _sha256(ratings),
    "protocol": protocol,
    "seed": seed,
    "steps": updates,
  }
  with workdir_lib.session(None if workdir is None else pathlib.Path(workdir), recorded) as wd:
    record = workdir_lib.finished(wd)
    if record is not None:  # a finished run: its record, every file left as it is
      print(f"{wd} holds this finished run; its record (nothing rewritten):", flush=True)
      return record
    if wd is not None and not (wd / "trajectories.npz").exists():  # the rated pool stays
      arrays = dict(obs=pool.obs, action=pool.action, mask=pool.mask, true_return=pool.true_return)
      tmp = wd / "trajectories.tmp.npz"
      np.savez_compressed(tmp, **arrays)
      tmp.replace(wd / "trajectories.npz")
    return _train(
      config,
      rc,
      pc,
      env=env,
      method=method,
      protocol=protocol,
      updates=updates,
      seed=seed,
      workdir=wd,
      pool=pool,
      heldout=heldout,
      ids=ids,
      rated=rated,
      seen=seen,
      edges=edges,
      rounds=rounds,
      keys=(k_fit, k_ppo, k_eval, k_online),
      recorded=recorded,
    )


def _sha256(path) -> str:
  import hashlib

  return hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()


def _train(
  config,
  rc,
  pc,
  *,
  env,
  method,
  protocol,
  updates,
  seed,
  workdir,
  pool,
  heldout,
  ids,
  rated,
  seen,
  edges,
  rounds,
  keys,
  recorded,
) -> dict:
  """The reward fit, PPO phases and outputs of :func:`run` (inside its workdir session)."""
  k_fit, k_ppo, k_eval, k_online = keys
  venv = gymnax.make(env, pc.num_envs)
  hidden, activation = tuple(config.ppo.mlp.hidden), config.ppo.mlp.activation
  policy = policies.make(
    "mlp", venv.num_actions, venv.action_dim, hidden=hidden, activation=activation
  )
  summary = {}
  if method != "true":
    reward_state, data, fit_summary = fit_reward(
      rc, pool, ids, rated, venv.num_actions, k_fit, seen
    )
    pred = r4.predict_returns(reward_state, features_of(heldout, venv.num_actions), heldout.mask)
    summary.update({f"heldout/{k}": v for k, v in r4.alignment(pred, heldout.true_return).items()})
    summary.update({f"reward/{k}": v for k, v in fit_summary.items() if k.startswith("train/")})
    if workdir is not None:
      alignment_plot(workdir / "alignment.png", pred, heldout.true_return, method)
    venv, set_reward = reward_env(venv, rc, reward_state.params, reward_scale(reward_state, data))
  state = ppo.init(venv, policy, pc, k_ppo)
  update = jax.jit(ppo.make_update(venv, policy, pc))
  eval_env = gymnax.make(env, config.ppo.eval_envs)
  evaluate = ppo_eval.make_evaluate(
    eval_env, policy, config.ppo.eval_steps, greedy=config.ppo.eval_greedy
  )

  curve, per_round, rated_total = [], updates // rounds, len(ids)
  for i in range(rounds):
    n_up = per_round if i < rounds - 1 else updates - per_round * (rounds - 1)
    loop = runtime.Loop(
      n_up, log_every=n_up, ckpt_every=0, progress=False, tensorboard=False, plot=False
    )
    state, _ = runtime.train(state, update, loop, key=jax.random.fold_in(k_ppo, i))
    ret = ppo_eval.summarize(evaluate(state.train.params, k_eval), eval_env)[0]["return"]
    env_steps = int(state.train.step) // (pc.epochs * pc.minibatches) * pc.num_envs * pc.num_steps
    curve.append((env_steps, ret))
    print(f"phase {i + 1}/{rounds}: true eval return {ret:.4g}", flush=True)
    if method == "true" or protocol == "offline" or i == rounds - 1:
      continue
    k_i = jax.random.fold_in(k_online, i)
    new = r4_data.collect(
      gymnax.make(env, config.online_per_round),
      config.traj_len,
      k_i,
      actor=policy_actor(policy, state.train.params),
    )
    k_rate_i = jax.random.fold_in(k_i, 1)
    new_ids, new_rated, _, new_seen = rate(new, config, k_rate_i, "simulated", edges)
    pool = concat(pool.take(ids), new.take(new_ids))
    ids, rated = np.arange(len(ids) + len(new_ids)), np.concatenate([rated, new_rated])
    seen = np.concatenate([seen, new_seen])
    rated_total = len(ids)
    k_refit = jax.random.fold_in(k_fit, i + 1)
    reward_state, data, _ = fit_reward(rc, pool, ids, rated, venv.num_actions, k_refit, seen)
    scale = reward_scale(reward_state, data)
    state = state.replace(env_state=set_reward(state.env_state, reward_state.params, scale))
  summary.update(
    {
      "eval/true_return": curve[-1][1],
      "ratings_used": rated_total,
      "env": env,
      "method": method,
      "protocol": protocol,
      "seed": seed,
      "ppo_updates": updates,
      "env_steps": curve[-1][0],
      "curve": curve,
      "config": recorded,  # the run's whole record: this summary alone reproduces it
    }
  )
  if workdir is not None:
    xs, ys = (np.asarray(v) for v in zip(*curve))
    plots.lines(
      workdir / "agent.png",
      {method: (xs, ys)},
      "environment steps",
      "true eval return",
      title=f"{env}: PPO on the {method} reward",
    )
    runtime.write_summary(workdir, summary)
  return summary
