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
it with ``r4.get_config()``; with ``seeds=(0, 1, 2)`` it trains the seeds' PPO phases vmapped in
one compiled program. See docs/r4.md.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxlab.core import plots, provenance, runtime
from jaxlab.core import seeds as seeds_lib
from jaxlab.core import workdir as workdir_lib
from jaxlab.core.errors import ConfigError
from jaxlab.envs import gymnax, vec
from jaxlab.rl import ppo
from jaxlab.rl.ppo import evaluation as ppo_eval
from jaxlab.rl.ppo import policies
from jaxlab.rl.r4 import config as r4_config
from jaxlab.rl.r4 import data as r4_data
from jaxlab.rl.r4.reward import (
  RewardConfig,
  alignment,
  features,
  fit,
  make_dataset,
  member_apply,
  predict_returns,
)
from jaxlab.rl.r4.reward import reward as reward_of

Array = jax.Array


@struct.dataclass
class RewardEnvState:
  inner: Any  # the wrapped environment's VecState
  obs: Array  # the current observations (the reward is r(s_t, a_t))
  params: Any  # reward-ensemble parameters
  scale: Array  # 1 / std of the learned reward over the rated steps


def reward_env(env: vec.VecEnv, config: RewardConfig, params, scale) -> tuple[vec.VecEnv, Any]:
  """``env`` with the learned reward; returns the wrapper and a function ``set_reward(state,
  params, scale)`` that swaps the reward model in a running state."""
  apply = member_apply(config)

  def learned(params, obs, action):
    x = features(obs, action, env.num_actions)
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
  return np.asarray(features(jnp.asarray(traj.obs), jnp.asarray(traj.action), num_actions))


def dataset(traj, ratings, num_actions: int, prefer=None, pair_key=None) -> dict:
  """The training arrays of :func:`r4.make_dataset` from trajectories and dense ratings; the OOD
  box is the range of the observed features (actions uniform); Bradley-Terry's teacher compares
  ``prefer`` (default: the true returns). ``pair_key``: Bradley-Terry learns from
  ``len(ratings)`` fixed pairs drawn with it (:func:`r4_data.matched_pairs`), not fresh ones."""
  feats = features_of(traj, num_actions)
  flat = feats.reshape(-1, feats.shape[-1])[traj.mask.reshape(-1) > 0]
  prefer = traj.true_return if prefer is None else prefer
  pairs = label = None
  if pair_key is not None:
    pairs, label = r4_data.matched_pairs(prefer, pair_key)
  box = (flat.min(0), flat.max(0))
  return make_dataset(feats, traj.mask, ratings, prefer, *box, num_actions, pairs, label)


def reward_scale(state, data: dict) -> float:
  """``1 / std`` of the learned per-step reward over the rated (unmasked) steps."""
  x = data["feats"].reshape(-1, data["feats"].shape[-1])
  r = np.asarray(reward_of(state, state.params, x))[np.asarray(data["mask"]).reshape(-1) > 0]
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


def fit_reward(
  rc: RewardConfig, pool, ids, ratings, num_actions: int, key: Array, prefer=None, pairs="fresh"
):
  """Fits the ensemble on ``pool[ids]`` rated ``ratings`` -> ``(state, data, fit summary)``;
  ``prefer``: the returns Bradley-Terry's teacher compares (default: the true ones); ``pairs``:
  ``config.bt_pairs`` ("matched": as many fixed pairs as ratings)."""
  pair_key = jax.random.fold_in(key, 2) if rc.method == "bt" and pairs == "matched" else None
  data = dataset(pool.take(ids), r4_data.dense_classes(ratings), num_actions, prefer, pair_key)
  state, result = fit(rc, data, key)
  return state, data, result.summary


def labels_seen(rc: RewardConfig, data: dict) -> int:
  """Labels a fit learns from: the ratings (r4, rbrl), the fixed pairs (bt, ``bt_pairs=
  "matched"``), or every fresh pair its members draw (bt, ``"fresh"``: at most ensemble x batch
  x steps distinct comparisons)."""
  if rc.method != "bt":
    return int(data["rating"].shape[0])
  if "pairs" in data:
    return int(data["pair_label"].shape[0])
  return rc.ensemble * rc.batch * rc.steps


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


KEYS = ("fit", "ppo", "eval", "online")  # a seed's key streams after its pool and ratings


@dataclasses.dataclass
class _Seed:
  """One seed of :func:`run` on the host: its rated pool, keys, evaluation curve and summary."""

  seed: int
  pool: r4_data.Trajectories
  heldout: r4_data.Trajectories
  ids: np.ndarray
  rated: np.ndarray
  seen: np.ndarray  # the returns the rater perceived (what Bradley-Terry's teacher compares)
  edges: Any
  keys: dict  # KEYS -> key
  summary: dict = dataclasses.field(default_factory=dict)
  curve: list = dataclasses.field(default_factory=list)


def _prepare(config, env: str, ratings: str, seed: int, several: bool) -> _Seed:
  """Seed ``seed``'s behaviour pool and held-out trajectories, rated; ConfigError when the
  ratings fall in fewer than 2 classes."""
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
    where = f" (seed {seed})" if several else ""
    raise ConfigError(field, f"{why} in fewer than 2 rating classes{where}")
  keys = dict(zip(KEYS, (k_fit, k_ppo, k_eval, k_online), strict=True))
  return _Seed(seed, pool, heldout, ids, rated, seen, edges, keys)


def seed_dir(workdir: pathlib.Path | None, seed: int, several: bool) -> pathlib.Path | None:
  """Where a run's per-seed files go: the workdir itself for one seed, ``seed<k>/`` under it
  for several."""
  if workdir is None or not several:
    return workdir
  path = pathlib.Path(workdir) / f"seed{seed}"
  path.mkdir(exist_ok=True)
  return path


@dataclasses.dataclass(frozen=True)
class Setting:
  """What a run does besides its config: the flags of ``python -m experiments.r4``.

  ``env``: a gymnax task (``jaxlab.envs.gymnax``); ``method``: r4 | rbrl | bt | true;
  ``updates``: PPO updates (the program's default: :func:`r4.ppo_updates`); ``ratings``:
  ``"simulated"`` or a ``trajectory_id,rating`` CSV; ``protocol``: offline | online; ``seeds``:
  the seeds trained together (one: a plain run). Checked by :func:`run_setting`."""

  env: str
  method: str
  updates: int
  ratings: str = "simulated"
  protocol: str = "offline"
  seeds: tuple[int, ...] = (0,)

  def __post_init__(self):
    object.__setattr__(self, "seeds", tuple(int(s) for s in self.seeds))

  @property
  def several(self) -> bool:
    return len(self.seeds) > 1

  def rounds(self, config) -> int:
    """PPO phases: the online rounds, or the offline evaluation points."""
    return config.online_rounds if self.protocol == "online" else config.eval_points

  def record(self, config, seeds: tuple[int, ...] | None = None) -> dict:
    """What the workdir records of a run of ``seeds`` (default: all): the config and the flags."""
    seeds = self.seeds if seeds is None else seeds
    return {
      **config.to_dict(),
      "env": self.env,
      "method": self.method,
      "ratings": self.ratings,
      "ratings_sha256": None if self.ratings == "simulated" else _sha256(self.ratings),
      "protocol": self.protocol,
      **({"seed": seeds[0]} if len(seeds) == 1 else {"seeds": list(seeds)}),
      "steps": self.updates,
    }


def run(
  config,
  *,
  env: str,
  method: str,
  ratings: str,
  protocol: str,
  updates: int,
  seed: int = 0,
  workdir: str | pathlib.Path | None = None,
  seeds: Sequence[int] | None = None,
) -> dict:
  """:func:`run_setting` with the :class:`Setting` of these keywords (``seeds``: default
  ``(seed,)``)."""
  seeds = (seed,) if seeds is None else tuple(seeds)
  setting = Setting(env, method, updates, ratings, protocol, seeds)
  return run_setting(config, setting, workdir)


def run_setting(config, setting: Setting, workdir: str | pathlib.Path | None = None) -> dict:
  """The offline or online protocol of ``python -m experiments.r4`` -> its summary.

  ``config``: :func:`r4.get_config`; ``setting``: :class:`Setting`. Everything is validated
  (ConfigError naming the field) before ``workdir`` is created; there it writes
  trajectories.npz, alignment.png, agent.png and summary.json (``workdir=None``: nothing is
  written). The workdir goes through ``jaxlab.core.workdir.session`` (locked; a different
  recorded config, e.g. another seed, is refused naming ``--workdir``); a finished run's record
  is returned with every file unchanged, and trajectories.npz (the pool a ratings CSV refers to)
  is never overwritten.

  Several ``setting.seeds``: the seeds' pools, ratings and reward fits run one seed after
  another on the host, and their PPO phases train all seeds vmapped in one compiled program
  (:mod:`jaxlab.core.seeds`). Seed ``k`` there draws the keys of a run of seed ``k`` alone: the
  same pool, ratings and reward, and PPO up to float rounding (which PPO amplifies over tens of
  updates: see docs/r4.md). The summary then holds ``seeds``, ``per_seed`` (each seed's summary
  as its own run returns it) and, at the top level, what the seeds share and the means of the
  numbers that differ; each seed's trajectories.npz, alignment.png and agent.png go to
  ``<workdir>/seed<k>/``. A ratings file rates one seed's pool, so it goes with one seed.
  """
  s = setting
  gymnax.resolve(s.env)
  config = r4_config.validate_config(
    config, method=s.method, ratings=s.ratings, protocol=s.protocol, updates=s.updates
  )
  rc, pc = r4_config.reward_config(config, s.method), r4_config.ppo_config(config, s.updates)
  if s.several and s.ratings != "simulated":
    raise ConfigError(
      "seeds", "a ratings file rates the pool of one seed (its trajectories.npz); give one seed"
    )
  r4_config.check_memory(config, s.env, s.method, seeds=len(s.seeds))
  if workdir is not None:  # before computing: a read-only folder fails now, not after the run
    workdir_lib.check_writable(workdir, "workdir")
  provenance.announce()  # once per process: the study's cells share one line
  runs = [_prepare(config, s.env, s.ratings, seed, s.several) for seed in s.seeds]

  with workdir_lib.session(
    None if workdir is None else pathlib.Path(workdir), s.record(config)
  ) as wd:
    record = workdir_lib.finished(wd)
    if record is not None:  # a finished run: its record, every file left as it is
      print(f"{wd} holds this finished run; its record (nothing rewritten):", flush=True)
      return record
    for r in runs:
      out = seed_dir(wd, r.seed, s.several)
      if out is not None and not (out / "trajectories.npz").exists():  # the rated pool stays
        p = r.pool
        arrays = dict(obs=p.obs, action=p.action, mask=p.mask, true_return=p.true_return)
        tmp = out / "trajectories.tmp.npz"
        np.savez_compressed(tmp, **arrays)
        tmp.replace(out / "trajectories.npz")
    return _train(config, rc, pc, s, wd, runs)


def _sha256(path) -> str:
  import hashlib

  return hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()


def _train(config, rc, pc, setting: Setting, workdir, runs: list[_Seed]) -> dict:
  """The reward fits, PPO phases and outputs of :func:`run_setting` (inside its workdir session).

  With several seeds the host parts (reward fits, the online protocol's rollouts, ratings and
  refits) loop over the seeds and every PPO phase is one vmapped program over them."""
  env, method, protocol, updates = setting.env, setting.method, setting.protocol, setting.updates
  rounds, seeds, several = setting.rounds(config), setting.seeds, setting.several
  venv = gymnax.make(env, pc.num_envs)
  hidden, activation = tuple(config.ppo.mlp.hidden), config.ppo.mlp.activation
  policy = policies.make(
    "mlp", venv.num_actions, venv.action_dim, hidden=hidden, activation=activation
  )
  rewards = []  # each seed's (reward parameters, scale)
  if method != "true":
    for r in runs:
      reward_state, data, fit_summary = fit_reward(
        rc,
        r.pool,
        r.ids,
        r.rated,
        venv.num_actions,
        r.keys["fit"],
        r.seen,
        r4_config.bt_pairs(config),
      )
      pred = predict_returns(reward_state, features_of(r.heldout, venv.num_actions), r.heldout.mask)
      align = alignment(pred, r.heldout.true_return)
      r.summary.update({f"heldout/{k}": v for k, v in align.items()})
      r.summary.update({f"reward/{k}": v for k, v in fit_summary.items() if k.startswith("train/")})
      r.summary["labels"] = labels_seen(rc, data)
      if workdir is not None:
        out = seed_dir(workdir, r.seed, several)
        alignment_plot(out / "alignment.png", pred, r.heldout.true_return, method)
      rewards.append((reward_state.params, reward_scale(reward_state, data)))
    # the initial reward parameters are replaced per seed below (several seeds)
    venv, set_reward = reward_env(venv, rc, *rewards[0])

    def swap(state, rewards):
      if not several:
        return state.replace(env_state=set_reward(state.env_state, *rewards[0]))
      params = seeds_lib.stack([p for p, _ in rewards])
      scales = jnp.asarray(np.asarray([s for _, s in rewards]), jnp.float32)
      return state.replace(env_state=jax.vmap(set_reward)(state.env_state, params, scales))

  if several:
    keys = {name: jnp.stack([r.keys[name] for r in runs]) for name in KEYS}
    fold = lambda k, i: jax.vmap(lambda x: jax.random.fold_in(x, i))(k)
    state = ppo.init_seeds(venv, policy, pc, keys["ppo"])
    if rewards:
      state = swap(state, rewards)
  else:
    keys = runs[0].keys
    fold = jax.random.fold_in
    state = ppo.init(venv, policy, pc, keys["ppo"])
  update = jax.jit(ppo.make_update(venv, policy, pc))
  eval_env = gymnax.make(env, config.ppo.eval_envs)
  evaluate = ppo_eval.make_evaluate(
    eval_env, policy, config.ppo.eval_steps, greedy=config.ppo.eval_greedy
  )
  evaluate_seeds = jax.jit(jax.vmap(evaluate))

  per_round = updates // rounds
  for i in range(rounds):
    n_up = per_round if i < rounds - 1 else updates - per_round * (rounds - 1)
    loop = runtime.Loop(
      n_up, log_every=n_up, ckpt_every=0, progress=False, tensorboard=False, plot=False
    )
    state, _ = runtime.train(
      state, update, loop, key=fold(keys["ppo"], i), seeds=seeds if several else None
    )
    if several:
      out = evaluate_seeds(state.train.params, keys["eval"])
      rets = ppo_eval.summarize_seeds(out, eval_env, len(seeds))[0]["return"].tolist()
    else:
      rets = [ppo_eval.summarize(evaluate(state.train.params, keys["eval"]), eval_env)[0]["return"]]
    step = int(np.ravel(state.train.step)[0])  # every seed has taken the same steps
    env_steps = step // (pc.epochs * pc.minibatches) * pc.num_envs * pc.num_steps
    for r, ret in zip(runs, rets, strict=True):
      r.curve.append((env_steps, ret))
    line = f"phase {i + 1}/{rounds}: true eval return {np.mean(rets):.4g}"
    if several:
      line += f" (mean over {len(seeds)} seeds: {', '.join(f'{v:.4g}' for v in rets)})"
    print(line, flush=True)
    if method == "true" or protocol == "offline" or i == rounds - 1:
      continue
    rewards = []
    for j, r in enumerate(runs):
      params = seeds_lib.take(state.train.params, j) if several else state.train.params
      rewards.append(_refit(config, rc, env, r, policy, params, i, venv.num_actions))
    state = swap(state, rewards)
  for r in runs:
    r.summary.update(
      {
        "eval/true_return": r.curve[-1][1],
        "ratings_used": len(r.ids),
        "env": env,
        "method": method,
        "protocol": protocol,
        "seed": r.seed,
        "ppo_updates": updates,
        "env_steps": r.curve[-1][0],
        "curve": r.curve,
        "config": setting.record(
          config, (r.seed,)
        ),  # the run's whole record: this summary alone reproduces it
      }
    )
    if workdir is not None:
      xs, ys = (np.asarray(v) for v in zip(*r.curve))
      plots.lines(
        seed_dir(workdir, r.seed, several) / "agent.png",
        {method: (xs, ys)},
        "environment steps",
        "true eval return",
        title=f"{env}: PPO on the {method} reward" + (f", seed {r.seed}" if several else ""),
      )
  if several:
    per_seed = {str(r.seed): r.summary for r in runs}
    summary = {
      **ppo_eval.seed_means(list(per_seed.values())),
      "seeds": list(seeds),
      "per_seed": per_seed,
      "config": setting.record(config),
    }
  else:
    summary = runs[0].summary
  if workdir is not None:
    runtime.write_summary(workdir, summary)
  return summary


def _refit(config, rc, env: str, r: _Seed, policy, params, i: int, num_actions: int):
  """The online protocol after phase ``i`` for seed ``r``: rollouts of its current policy, rated,
  added to its ratings, the reward ensemble refitted -> ``(reward parameters, scale)``."""
  k_i = jax.random.fold_in(r.keys["online"], i)
  new = r4_data.collect(
    gymnax.make(env, config.online_per_round),
    config.traj_len,
    k_i,
    actor=policy_actor(policy, params),
  )
  k_rate_i = jax.random.fold_in(k_i, 1)
  new_ids, new_rated, _, new_seen = rate(new, config, k_rate_i, "simulated", r.edges)
  r.pool = concat(r.pool.take(r.ids), new.take(new_ids))
  r.ids, r.rated = np.arange(len(r.ids) + len(new_ids)), np.concatenate([r.rated, new_rated])
  r.seen = np.concatenate([r.seen, new_seen])
  k_refit = jax.random.fold_in(r.keys["fit"], i + 1)
  reward_state, data, _ = fit_reward(
    rc, r.pool, r.ids, r.rated, num_actions, k_refit, r.seen, r4_config.bt_pairs(config)
  )
  return reward_state.params, reward_scale(reward_state, data)
