r"""R4 (arXiv 2601.09236): learn a reward from trajectory ratings, then train PPO on it.

Offline protocol: a pool of behaviour trajectories (random linear policies, ``jaxlab.envs.gymnax``) is
rated (simulated: true returns binned into classes; or a human-ratings CSV, see docs/r4.md), the
reward ensemble is fitted with ``--method`` (r4: rMSE on soft ranks; rbrl; bt: Bradley-Terry on
pairs), Kendall tau / Spearman rho are measured on held-out trajectories, and PPO
(``jaxlab.rl.ppo``) is trained on the learned reward and evaluated on the TRUE return.
``--protocol=online``: rounds of PPO, rollouts of the current policy, new ratings, refit.
``--method=true`` trains PPO on the true reward (the upper reference).

Outputs in the workdir (default ``runs/r4/<env>/<method>/<protocol>``): summary.json,
alignment.png (held-out learned vs true return), agent.png (true return vs environment steps),
trajectories.npz (the rated pool, to rate by hand). Commands (CPU, 2 busy cores):
  python -m experiments.r4 --env=cartpole --method=r4 --ratings=simulated          # ~3 min
  python -m experiments.r4 --env=cartpole --method=bt --ratings=simulated
  python -m experiments.r4 --env=cartpole --method=r4 --ratings=my_ratings.csv
  python -m experiments.r4 --env=cartpole --method=r4 --protocol=online
"""

from __future__ import annotations

import jax
import ml_collections
import numpy as np
from absl import flags

from jaxlab.core import experiment, plots, runtime
from jaxlab.core.errors import check_choice, check_config, require
from jaxlab.rl import ppo, r4
from jaxlab.rl.ppo import evaluation as ppo_eval
from jaxlab.rl.ppo import policies
from jaxlab.rl.r4 import data as r4_data
from jaxlab.rl.r4 import protocol as r4_protocol

flags.DEFINE_string(
  "env", "cartpole", "gymnax environment (cartpole, acrobot, breakout-minatar...)"
)
flags.DEFINE_string("method", "r4", "Reward learning: r4 | rbrl | bt | true (PPO on true reward).")
flags.DEFINE_string("ratings", "simulated", "'simulated' or a CSV file 'trajectory_id,rating'.")
flags.DEFINE_string("protocol", "offline", "offline | online")
FLAGS = flags.FLAGS
METHODS = ("r4", "rbrl", "bt", "true")


def get_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.pool = 512  # rated behaviour trajectories (ids 0..pool-1 in trajectories.npz)
  c.heldout = 256  # unrated trajectories for Kendall tau / Spearman rho
  c.traj_len = 100  # steps per trajectory (masked after the first episode ends)
  c.num_classes = 5  # simulated rater: rating classes
  c.bins = ()  # simulated rater: interior return edges; () = quantiles of the pool's returns
  c.noise = 0.0  # simulated rater: Gaussian return noise, x the returns' std
  c.imbalance = 0.0  # simulated rater: class c kept with probability (1 - imbalance)^c
  c.reward = ml_collections.ConfigDict(
    dict(hidden=(64, 64), ensemble=3, lr=1e-3, batch=16, steps=1000, eps=1.0, ood_beta=0.1)
  )
  c.reward.l2 = 0.0
  c.reward.ood_samples = 256
  c.reward.rbrl_k = 10.0
  c.eval_points = 5  # offline: true-return evaluations spread over the PPO run
  c.online_rounds = 4  # online: PPO phases, each followed by new ratings and a refit
  c.online_per_round = 128  # online: trajectories rated per round (the initial pool is c.pool)
  # PPO (a CartPole-sized PureJaxRL setting, as experiments/ppo.py's gymnax preset)
  c.num_envs, c.num_steps, c.epochs, c.minibatches = 16, 128, 4, 4
  c.lr, c.gae_lambda, c.max_grad_norm, c.ent_coef = 1e-3, 0.95, 0.5, 0.01
  c.hidden = (64, 64)  # policy MLP
  c.eval_envs, c.eval_steps = 64, 1000
  return c


_CONFIG = experiment.define_config(get_config())


def _validate(config, method: str, ratings: str, protocol: str):
  check_choice("method", method, METHODS)
  check_choice("protocol", protocol, ("offline", "online"))
  require(
    ratings == "simulated" or ratings.endswith(".csv"), "ratings", "'simulated' or a .csv file"
  )
  check_config(
    config,
    {
      "pool": "positive",
      "heldout": "positive",
      "traj_len": "positive",
      "num_classes": lambda v: None if v >= 2 else f"must be >= 2, got {v}",
      "noise": "nonneg",
      "imbalance": lambda v: None if 0 <= v < 1 else f"must be in [0, 1), got {v}",
      "online_rounds": "positive",
      "eval_points": "positive",
      "online_per_round": "positive",
      "eval_envs": "positive",
      "eval_steps": "positive",
    },
  )
  require(
    list(config.bins) == sorted(config.bins), "config.bins", f"must be increasing: {config.bins}"
  )
  fields = {**config.reward.to_dict(), "hidden": tuple(config.reward.hidden)}
  rc = r4.RewardConfig(**fields, method="r4" if method == "true" else method)
  r4.validate(rc, prefix="config.reward")
  pc = ppo.PPOConfig(
    num_envs=config.num_envs,
    num_steps=config.num_steps,
    epochs=config.epochs,
    minibatches=config.minibatches,
    lr=config.lr,
    gae_lambda=config.gae_lambda,
    max_grad_norm=config.max_grad_norm,
    ent_coef=config.ent_coef,
    num_updates=1,
  )
  ppo.validate(pc, recurrent=False)
  if ratings != "simulated":
    require(protocol == "offline", "protocol", "a ratings file goes with --protocol=offline")
    r4_data.read_ratings(ratings, config.pool)  # a bad file fails before anything is built
  return rc, pc


def _rate(traj, config, key, ratings: str, edges=None):
  """Dense ratings of ``traj`` and the indices that were rated (simulated or from the file)."""
  g = traj.true_return
  if ratings != "simulated":
    ids, given = r4_data.read_ratings(ratings, len(g))
    return ids, r4_data.dense_classes(given), edges
  if edges is None:
    edges = (
      np.asarray(config.bins) if len(config.bins) else r4_data.quantile_edges(g, config.num_classes)
    )
  k_noise, k_keep = jax.random.split(key)
  rated = r4_data.simulate_ratings(g, edges, k_noise, config.noise)
  keep = r4_data.imbalance_keep(rated, k_keep, config.imbalance)
  return keep, rated[keep], edges


def _fit(rc, pool, ids, ratings, num_actions, key):
  data = r4_protocol.dataset(pool.take(ids), r4_data.dense_classes(ratings), num_actions)
  state, result = r4.fit(rc, data, key)
  return state, data, result.summary


def _ppo_phase(state, update, updates, key, evaluate):
  loop = runtime.Loop(
    updates, log_every=updates, ckpt_every=0, progress=False, tensorboard=False, plot=False
  )
  state, _ = runtime.train(state, update, loop, key=key)
  return state, evaluate(state)


def main(argv):
  del argv
  config = _CONFIG.value
  method, ratings, protocol = FLAGS.method, FLAGS.ratings, FLAGS.protocol
  from jaxlab.envs import gymnax

  gymnax.resolve(FLAGS.env)
  rc, pc = _validate(config, method, ratings, protocol)
  run = experiment.common(
    "r4",
    default_steps=250,
    variant=(FLAGS.env, method, "file" if ratings != "simulated" else "sim", protocol),
    unused=("mesh", "keep", "ckpt_every", "profile", "log_every"),
  )
  rounds = config.online_rounds if protocol == "online" else config.eval_points
  require(run.steps >= rounds, "steps", f"must be >= {rounds} (PPO phases), got {run.steps}")
  key = jax.random.key(run.seed)
  k_pool, k_rate, k_fit, k_ppo, k_eval, k_online = jax.random.split(key, 6)

  total = config.pool + config.heldout
  base = gymnax.make(FLAGS.env, total)
  trajs = r4_data.collect(base, config.traj_len, k_pool)
  pool, heldout = trajs.take(np.arange(config.pool)), trajs.take(np.arange(config.pool, total))
  ids, rated, edges = _rate(pool, config, k_rate, ratings)
  require(
    len(np.unique(rated)) >= 2, "ratings", "the rated trajectories fall in fewer than 2 classes"
  )
  experiment.prepare_workdir(run.workdir)
  np.savez_compressed(
    run.workdir / "trajectories.npz",
    obs=pool.obs,
    action=pool.action,
    mask=pool.mask,
    true_return=pool.true_return,
  )

  env = gymnax.make(FLAGS.env, config.num_envs)
  policy = policies.make("mlp", env.num_actions, env.action_dim, hidden=tuple(config.hidden))
  pc = pc.__class__(**{**pc.__dict__, "num_updates": run.steps})
  summary, reward_state, data = {}, None, None
  if method != "true":
    reward_state, data, fit_summary = _fit(rc, pool, ids, rated, env.num_actions, k_fit)
    pred = r4.predict_returns(
      reward_state, r4_protocol.features_of(heldout, env.num_actions), heldout.mask
    )
    summary.update({f"heldout/{k}": v for k, v in r4.alignment(pred, heldout.true_return).items()})
    summary.update({f"reward/{k}": v for k, v in fit_summary.items() if k.startswith("train/")})
    _alignment_plot(run.workdir / "alignment.png", pred, heldout.true_return, method)
    env, set_reward = r4_protocol.reward_env(
      env, rc, reward_state.params, r4_protocol.reward_scale(reward_state, data)
    )
  state = ppo.init(env, policy, pc, k_ppo)
  update = jax.jit(ppo.make_update(env, policy, pc))
  eval_env = gymnax.make(FLAGS.env, config.eval_envs)
  evaluate_fn = ppo_eval.make_evaluate(eval_env, policy, config.eval_steps)
  evaluate = lambda s: ppo_eval.summarize(evaluate_fn(s.train.params, k_eval), eval_env)[0][
    "return"
  ]

  curve, per_round, rated_total = [], run.steps // rounds, len(ids)
  for i in range(rounds):
    n_up = per_round if i < rounds - 1 else run.steps - per_round * (rounds - 1)
    state, ret = _ppo_phase(state, update, n_up, jax.random.fold_in(k_ppo, i), evaluate)
    curve.append(
      (int(state.train.step) // (pc.epochs * pc.minibatches) * pc.num_envs * pc.num_steps, ret)
    )
    print(f"phase {i + 1}/{rounds}: true eval return {ret:.4g}", flush=True)
    if method == "true" or protocol == "offline" or i == rounds - 1:
      continue
    k_i = jax.random.fold_in(k_online, i)
    new = r4_data.collect(
      gymnax.make(FLAGS.env, config.online_per_round),
      config.traj_len,
      k_i,
      actor=r4_protocol.policy_actor(policy, state.train.params),
    )
    new_ids, new_rated, _ = _rate(new, config, jax.random.fold_in(k_i, 1), "simulated", edges)
    pool = _concat(pool.take(ids), new.take(new_ids))
    ids, rated = np.arange(len(ids) + len(new_ids)), np.concatenate([rated, new_rated])
    rated_total = len(ids)
    reward_state, data, _ = _fit(
      rc, pool, ids, rated, env.num_actions, jax.random.fold_in(k_fit, i + 1)
    )
    env_state = set_reward(
      state.env_state, reward_state.params, r4_protocol.reward_scale(reward_state, data)
    )
    state = state.replace(env_state=env_state)
  summary.update(
    {
      "eval/true_return": curve[-1][1],
      "ratings_used": rated_total,
      "env": FLAGS.env,
      "method": method,
      "protocol": protocol,
      "seed": run.seed,
      "ppo_updates": run.steps,
      "curve": curve,
    }
  )
  xs, ys = zip(*curve)
  plots.lines(
    run.workdir / "agent.png",
    {method: (np.asarray(xs), np.asarray(ys))},
    "environment steps",
    "true eval return",
    title=f"{FLAGS.env}: PPO on the {method} reward",
  )
  runtime.write_summary(run.workdir, summary)
  tau = summary.get("heldout/kendall_tau", float("nan"))
  print(
    f"{method}: held-out Kendall tau {tau:.3f}, "
    f"true eval return {curve[-1][1]:.4g} -> {run.workdir}"
  )


def _concat(a, b):
  return r4_data.Trajectories(
    *(
      np.concatenate([x, y])
      for x, y in zip((a.obs, a.action, a.reward, a.mask), (b.obs, b.action, b.reward, b.mask))
    )
  )


def _alignment_plot(path, pred, true, method):
  order = np.argsort(true)
  lo, hi = np.min(pred), np.max(pred)
  scaled = np.min(true) + (pred - lo) / max(hi - lo, 1e-12) * (np.max(true) - np.min(true))
  plots.lines(
    path,
    {
      "true": (np.arange(len(true)), true[order]),
      f"{method} (min-max scaled)": (np.arange(len(true)), scaled[order]),
    },
    "held-out trajectory (sorted by true return)",
    "return",
    title="learned vs true return, held out",
  )


if __name__ == "__main__":
  experiment.run(main)
