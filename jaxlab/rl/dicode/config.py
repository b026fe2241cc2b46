"""DiCode's defaults, declared once, and their validation.

``get_config()`` is the CPU budget, the default run of ``python -m experiments.dicode``: the
smallest run that exercises the whole loop (a tiny GTrXL, 16 environments, 3 sessions of 4 PPO
updates, two evolution rounds). ``experiments/configs/dicode.py:paper`` changes the sizes to the
paper's (arXiv 2602.08194 and its reference code). PPO is ``jaxlab.rl.ppo.get_config()`` with
DiCode's Table 6 values where they differ; its ``gtrxl`` group is the policy, ``reset_ratio`` the
Craftax optimistic resets and ``eval_envs`` / ``eval_steps`` the held-out evaluation.
"""

from __future__ import annotations

import ml_collections

from jaxlab.core import resources
from jaxlab.core.errors import check_config, require
from jaxlab.rl import ppo


def get_config() -> ml_collections.ConfigDict:
  """DiCode at the CPU budget (3 x 4 x 16 x 32 = 6,144 environment steps); paper values noted."""
  c = ml_collections.ConfigDict()
  c.env = "craftax-symbolic"  # the game (task programs need the full game, Craftax-Symbolic)

  # The session loop (jaxlab.rl.dicode.loop).
  c.sessions = 3  # training sessions of the run (no evolution after the last one)
  c.updates_per_session = 4  # U: PPO updates per session (paper: 100)
  c.score_window = 2  # W: the last W updates of a session are scored (paper: 40)
  c.tasks_per_session = 8  # tasks in a session, the original game included (paper: 16)
  c.original_proportion = 0.2  # share of a session's episodes on the original game (paper: 0.2)
  c.staleness_coef = 0.3  # rho: staleness share of the replay weights (paper: 0.3)
  c.temperature = 1.0  # T of the rank weights (1/rank)^(1/T) (paper: 1)
  c.capacity = 32  # active archive tasks; beyond it the lowest score is replaced (paper: 100)
  c.min_entry_score = 0.0  # score a candidate needs while the active set has room (paper: 0)
  c.num_slots = 64  # one-hot task conditioning size (>= capacity + proposals + 1)
  c.evolve_every = 1  # E: sessions between evolution rounds (paper: 2)
  c.proposals = 4  # task programs proposed per round (paper: up to 10)
  c.parents = 2  # frontier parents per round
  c.bonus = "dynamic"  # success bonus: dynamic (max(k * original return, floor)) | static
  c.bonus_k = 2.0  # k of the bonus (paper: 2)
  c.bonus_floor = 20.0  # minimum bonus (paper: 20)
  c.pool_size = 8  # P: starting worlds per task (the original game's drawn fresh each session)
  c.policy = "gtrxl"  # the agent: gtrxl (the paper's) | gru | mlp; sizes in ppo.<policy>

  # Baselines (jaxlab.rl.dicode.curriculum).
  c.levels_per_session = 8  # PLR/SFL: original-game levels (seeds) per session
  c.plr_capacity = 64  # PLR level buffer (reference: 4000)
  c.plr_replay_prob = 0.5  # PLR: probability a session replays buffer levels (reference: 0.5)
  c.plr_min_fill = 0.5  # PLR: buffer fill fraction before replay starts (reference: 0.5)
  c.sfl_candidates = 32  # SFL: random levels scored per refresh
  c.sfl_buffer = 8  # SFL: size of the learnability set
  c.sfl_every = 2  # SFL: sessions between refreshes
  c.sfl_rollout_steps = 64  # SFL: policy steps per scoring rollout
  c.sfl_replay_prob = 0.5  # SFL: probability a session trains on the learnability set

  # Sandbox and model endpoint (jaxlab.rl.dicode.sandbox / proposers).
  c.sandbox_timeout_s = 120.0  # per-program limit in the sandbox, seconds (tracing a generator)
  c.sandbox_memory_mb = 4096  # address-space limit of the sandbox process, MiB
  c.llm_timeout_s = 120.0  # one HTTP request to the model endpoint, seconds
  c.llm_retries = 3  # retries with exponential backoff before the round gives up

  # PPO (jaxlab.rl.ppo.get_config(): Craftax_Baselines' values, DiCode's Table 6 where it differs;
  # gae_lambda 0.8, clip_eps 0.2, vf_coef 0.5, max_grad_norm 1.0, lr 2e-4 (decayed linearly over
  # sessions x updates_per_session), reset_ratio 16 and gtrxl.gate_bias / activation are PPO's and
  # the paper's). preset, total_timesteps, eval_every, eval_greedy, mlp and gru are not used.
  c.ppo = ppo.get_config()
  c.ppo.num_envs = 16  # parallel environments (paper: 1024)
  c.ppo.num_steps = 32  # rollout length per update (paper: 128)
  c.ppo.epochs = 1  # passes over each rollout (paper: 4)
  c.ppo.minibatches = 2  # minibatches per epoch; must divide num_envs (paper: 8)
  c.ppo.gamma = 0.999  # discount (paper: 0.999)
  c.ppo.ent_coef = 0.002  # entropy bonus (paper: 0.002)
  c.ppo.eval_envs = 32  # held-out original-game worlds, one episode each (paper: 1024)
  c.ppo.eval_steps = 500  # step cap of an evaluation episode (paper: 8192)
  # The GTrXL policy (jaxlab.rl.ppo.policies.GTrXLPolicy).
  c.ppo.gtrxl.embed = 32  # model width (paper: 256)
  c.ppo.gtrxl.num_heads = 2  # attention heads (paper: 8)
  c.ppo.gtrxl.num_layers = 1  # transformer layers (paper: 2)
  c.ppo.gtrxl.window = 16  # memory window in steps (paper: 128)
  c.ppo.gtrxl.ffn = 32  # feed-forward width (paper: 256)
  c.ppo.gtrxl.head_hidden = (32,)  # actor/critic hidden layers (paper: (256,))
  return c


WORLD_BYTES = 273_276  # one Craftax-Symbolic world state (jax.eval_shape of world.base_world)
OBS_DIM = 8268  # Craftax-Symbolic's observation vector (float32), before the one-hot task slots


def check_memory(config, curriculum: str, devices: int = 1) -> None:
  """int32 counts and the bytes of the run's largest arrays, from the config alone, before
  anything is allocated (``resources.check_fits`` naming the field of the largest)."""
  c = config
  n, t = c.ppo.num_envs, c.ppo.num_steps
  for field, value, what in (
    ("config.pool_size", c.pool_size, "an array dimension"),
    ("config.ppo.num_envs", n * t, "num_envs x num_steps, a rollout's int32 size"),
    ("config.ppo.eval_envs", c.ppo.eval_envs, "an array dimension"),
    ("config.num_slots", c.num_slots, "an array dimension"),
    ("config.plr_capacity", c.plr_capacity, "an array dimension"),
    ("config.sfl_candidates", c.sfl_candidates, "an array dimension"),
  ):
    resources.check_int32(field, value, what)
  tasks = c.capacity + c.proposals + c.tasks_per_session if curriculum in ("dicode", "dr") else 0
  need = {
    "config.pool_size": (tasks * c.pool_size * WORLD_BYTES, "the task pools' starting worlds"),
    "config.ppo.num_envs": (
      n * (t * (OBS_DIM + c.num_slots) * 4 + 2 * WORLD_BYTES),
      "a rollout's observations and the environments' worlds",
    ),
    "config.ppo.eval_envs": (c.ppo.eval_envs * 2 * WORLD_BYTES, "the evaluation's worlds"),
  }
  if curriculum == "sfl":
    need["config.sfl_candidates"] = (c.sfl_candidates * 2 * WORLD_BYTES, "SFL's scored worlds")
  field = max(need, key=lambda k: need[k][0])
  total = sum(b for b, _ in need.values())
  resources.check_fits(
    total, field, f"{need[field][1]} and the run's other arrays", devices=devices
  )


def validate_config(config, curriculum: str) -> ml_collections.FrozenConfigDict:
  """Every field DiCode reads, for ``curriculum``; ConfigError naming the bad field; returns the
  checked config, frozen."""
  pos, prob = "positive", "prob"
  check_config(
    config,
    {
      **{k: pos for k in ("sessions", "updates_per_session", "score_window", "capacity")},
      **{k: pos for k in ("tasks_per_session", "num_slots", "evolve_every", "proposals")},
      **{k: pos for k in ("parents", "levels_per_session", "plr_capacity")},
      **{k: pos for k in ("sfl_candidates", "sfl_buffer", "sfl_every", "sfl_rollout_steps")},
      **{k: pos for k in ("sandbox_timeout_s", "sandbox_memory_mb", "llm_timeout_s")},
      **{k: pos for k in ("temperature", "pool_size")},
      **{f"ppo.{k}": pos for k in ("reset_ratio", "eval_envs", "eval_steps")},
      **{k: prob for k in ("original_proportion", "staleness_coef", "plr_replay_prob")},
      **{k: prob for k in ("plr_min_fill", "sfl_replay_prob")},
      "llm_retries": "nonneg",
      "bonus": ["dynamic", "static"],
      "bonus_k": "nonneg",
      "bonus_floor": "nonneg",
      "ppo.gtrxl.activation": ["relu", "tanh", "gelu"],
      "policy": ["gtrxl", "gru", "mlp"],
    },
  )
  require(
    config.score_window <= config.updates_per_session,
    "config.score_window",
    f"{config.score_window} exceeds updates_per_session={config.updates_per_session}",
  )
  from jaxlab.envs import craftax

  _, classic, pixels = craftax.resolve(config.env, "config.env")
  require(not pixels, "config.env", "the curricula use symbolic observations")
  if curriculum in ("dr", "dicode"):
    require(not classic, "config.env", "task programs need the full game: craftax-symbolic")
  if curriculum == "dicode":
    require(
      config.tasks_per_session >= 2,
      "config.tasks_per_session",
      "must be >= 2 (the original game is one)",
    )
    need = config.capacity + config.proposals + 1
    require(
      config.num_slots >= need,
      "config.num_slots",
      f"{config.num_slots} one-hot slots cannot hold capacity + proposals + the original game "
      f"({need})",
    )
  g = config.ppo.gtrxl
  for name in ("embed", "num_heads", "num_layers", "window", "ffn"):
    require(g[name] >= 1, f"config.ppo.gtrxl.{name}", f"must be >= 1, got {g[name]}")
  hidden = tuple(g.head_hidden) if isinstance(g.head_hidden, (list, tuple)) else (g.head_hidden,)
  require(
    all(isinstance(h, int) and not isinstance(h, bool) and h >= 1 for h in hidden),
    "config.ppo.gtrxl.head_hidden",
    f"must be positive layer widths, e.g. (32,), got {g.head_hidden!r}",
  )
  require(
    g.embed % g.num_heads == 0,
    "config.ppo.gtrxl.num_heads",
    f"{g.num_heads} does not divide embed={g.embed}",
  )
  recurrent = config.policy != "mlp"
  ppo.validate(ppo.PPOConfig.from_config(config.ppo, num_updates=1), recurrent, prefix="config.ppo")
  check_memory(config, curriculum)
  return ml_collections.FrozenConfigDict(config)
