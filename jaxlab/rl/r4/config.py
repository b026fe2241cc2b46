"""R4's defaults, declared once, and their validation (``python -m experiments.r4`` and notebooks).

``get_config()`` is the command-line run (``--config.x=...`` changes a field); the reward model's
:class:`jaxlab.rl.r4.RewardConfig` and PPO's ``PPOConfig`` are built from it
(:func:`reward_config`, :func:`ppo_config`), never from defaults of their own. The run's choices
that are flags of the program (``--env --method --ratings --protocol``) are arguments of
:func:`validate_config` and :func:`jaxlab.rl.r4.protocol.run`. See docs/r4.md.
"""

from __future__ import annotations

import ml_collections
import numpy as np

from jaxlab.core.errors import check_choice, check_config, require
from jaxlab.rl import ppo
from jaxlab.rl.r4 import data as r4_data
from jaxlab.rl.r4.reward import RewardConfig, validate

METHODS = ("r4", "rbrl", "bt", "true")  # "true": PPO on the true reward (the reference)
PROTOCOLS = ("offline", "online")
BT_PAIRS = ("fresh", "matched")  # config.bt_pairs (docs/r4.md, Baselines)


def get_config() -> ml_collections.ConfigDict:
  """The offline/online protocol on a gymnax task at CPU size (docs/r4.md, Protocols)."""
  c = ml_collections.ConfigDict()
  c.pool = 512  # rated behaviour trajectories (ids 0..pool-1 in trajectories.npz)
  c.heldout = 256  # unrated trajectories for Kendall tau / Spearman rho
  c.traj_len = 100  # steps per trajectory (masked after the first episode ends)
  c.num_classes = 5  # simulated rater: rating classes (>= 2)
  c.bins = ()  # simulated rater: increasing interior return edges; () = the pool's quantiles
  c.noise = 0.0  # simulated rater: Gaussian noise on the return, x the returns' std (>= 0)
  c.imbalance = 0.0  # simulated rater: class c kept with probability (1 - imbalance)^c, in [0, 1)
  # Bradley-Terry's labels, compared by the rater on the returns it perceived (noise included):
  # "fresh": a new random pair of rated trajectories at every step (reward.batch x reward.steps
  # labels); "matched": as many fixed pairs as there are ratings, drawn once from the rated pool
  # (R4's label count; data.matched_pairs)
  c.bt_pairs = "fresh"
  c.eval_points = 5  # offline: true-return evaluations spread over the PPO run
  c.online_rounds = 4  # online: PPO phases, each but the last followed by new ratings and a refit
  c.online_per_round = 128  # online: trajectories rated per round (the initial pool is c.pool)
  c.reward = ml_collections.ConfigDict()  # the reward ensemble (RewardConfig; --method picks loss)
  c.reward.hidden = (64, 64)  # MLP reward model: hidden layer widths
  c.reward.ensemble = 3  # members (R4's online setting uses 3)
  c.reward.lr = 1e-3  # Adam learning rate (the authors' 3e-4, with more steps; 1e-3 fits a CPU)
  c.reward.batch = 16  # sets (r4), trajectories (rbrl) or pairs (bt) per step (the authors' 64)
  c.reward.steps = 1000  # gradient steps (the authors' 1500)
  c.reward.eps = 1.0  # soft-rank regularisation strength (> 0; the authors' 1.0)
  c.reward.ood_beta = 0.1  # weight of the OOD term (>= 0; 0: off; the authors' 0.1)
  c.reward.ood_samples = 256  # uniform (s, a) draws per step for the OOD term
  c.reward.l2 = 0.0  # L2 penalty on the parameters (>= 0; the authors use 0 or 0.01)
  c.reward.rbrl_k = 10.0  # RbRL: sharpness of the class scores (> 0)
  c.ppo = ppo.gymnax_config()  # jaxlab's PPO at a CartPole-sized PureJaxRL setting
  c.ppo.total_timesteps = 512_000  # env steps: default --steps = this // (num_envs * num_steps)
  return c


def ppo_updates(config) -> int:
  """PPO updates of the default run (``ppo.num_updates`` of ``config.ppo``)."""
  return ppo.num_updates(config.ppo)


def bt_pairs(config) -> str:
  """``config.bt_pairs``; configs recorded before the field existed ran ``"fresh"``."""
  return config.get("bt_pairs", "fresh")


def reward_config(config, method: str) -> RewardConfig:
  """The reward ensemble's RewardConfig (``method="true"`` builds r4's, unused)."""
  return RewardConfig.from_config(config.reward, method="r4" if method == "true" else method)


def ppo_config(config, updates: int) -> ppo.PPOConfig:
  return ppo.PPOConfig.from_config(config.ppo, num_updates=updates)


def validate_config(
  config, *, method: str, ratings: str, protocol: str, updates: int
) -> ml_collections.FrozenConfigDict:
  """Raises ConfigError naming the field; returns the checked config, frozen (the typed parts:
  :func:`reward_config`, :func:`ppo_config`).

  ``ratings``: ``"simulated"`` or a ``trajectory_id,rating`` CSV file (read and checked here, so a
  bad file fails before anything is built); ``updates``: PPO updates of the run."""
  check_choice("method", method, METHODS)
  check_choice("protocol", protocol, PROTOCOLS)
  check_choice("config.bt_pairs", bt_pairs(config), BT_PAIRS)
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
      "ppo.total_timesteps": "positive",
      "ppo.eval_envs": "positive",
      "ppo.eval_steps": "positive",
    },
  )
  bins = list(config.bins)
  require(
    all(isinstance(b, (int, float)) and not isinstance(b, bool) for b in bins),
    "config.bins",
    f"must be a tuple of numbers (increasing return edges), got {config.bins!r}",
  )
  require(
    bins == sorted(bins) and len(set(bins)) == len(bins),
    "config.bins",
    f"must be strictly increasing, got {config.bins}",
  )
  rc = reward_config(config, method)
  validate(rc, prefix="config.reward")
  ppo.validate_config(config.ppo, "mlp", prefix="config.ppo")
  pc = ppo_config(config, updates)
  ppo.validate(pc, recurrent=False, prefix="config.ppo")
  rounds = config.online_rounds if protocol == "online" else config.eval_points
  require(updates >= rounds, "steps", f"must be >= {rounds} (PPO phases), got {updates}")
  if ratings != "simulated":
    require(protocol == "offline", "protocol", "a ratings file goes with --protocol=offline")
    r4_data.read_ratings(ratings, config.pool)
  return ml_collections.FrozenConfigDict(config)


def check_memory(config, env: str, method: str = "r4", seeds: int = 1) -> None:
  """Refuses (ConfigError naming the field) sizes whose arrays cannot fit, before any is built:
  the ``pool + heldout`` (and online ``online_per_round``) trajectories of ``traj_len`` steps of
  each of ``seeds`` seeds, the reward fit's batch and PPO's rollout and evaluation
  (``ppo.check_memory``; the runtime checks the seeds' PPO program as a whole)."""
  from jaxlab.core import resources
  from jaxlab.envs import gymnax

  spec = gymnax.make(env, 1)  # static facts only: nothing is allocated
  obs = int(np.prod(spec.obs_shape))
  step = (obs + max(spec.action_dim, 1) + 2) * 4  # observation, action, reward, mask (float32)
  total = int(config.pool) + int(config.heldout)
  field = "config.traj_len" if config.traj_len > total else "config.pool"
  features = (obs + max(spec.num_actions, spec.action_dim, 1)) * 4
  pool_bytes = total * config.traj_len * (3 * step + features)  # rollouts, host copies, features
  what = f"{total} trajectories of {config.traj_len} steps (observations {spec.obs_shape})"
  resources.check_fits(pool_bytes, field, what)
  if seeds > 1:  # every seed's pool is kept until its PPO ends
    resources.check_fits(seeds * pool_bytes, "seeds", f"{what} for each of {seeds} seeds")
  resources.check_int32(field, total * int(config.traj_len), "the trajectories' steps")
  rw = config.reward
  width = features + 4 * sum(int(h) for h in rw.hidden)  # bytes of one step's activations
  per_set = {"r4": int(config.num_classes), "bt": 2}.get(method, 1)  # trajectories per example
  field = "config.reward.ensemble" if rw.ensemble > rw.batch else "config.reward.batch"
  resources.check_fits(
    2.0 * rw.ensemble * rw.batch * per_set * config.traj_len * width,
    field,
    f"a reward-fit step of {rw.ensemble} members x {rw.batch} examples of {config.traj_len} steps",
  )
  resources.check_fits(
    2.0 * rw.ensemble * rw.ood_samples * width,
    "config.reward.ood_samples",
    f"{rw.ood_samples} OOD draws per step for {rw.ensemble} members",
  )
  resources.check_fits(
    config.online_per_round * config.traj_len * (3 * step + features),
    "config.online_per_round",
    f"{config.online_per_round} new trajectories per round",
  )
  ppo.check_memory(config.ppo, spec.obs_shape, spec.action_dim, "mlp", prefix="config.ppo")
