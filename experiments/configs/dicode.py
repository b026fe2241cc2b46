"""Config of `experiments.dicode` (big_vision-style file: ``--config=<this file>:<preset>``).

Presets:
  cpu    (default) the smallest run that exercises the whole loop on a CPU: a tiny GTrXL, 16
         environments, 3 sessions of 4 PPO updates (3 x 4 x 16 x 32 = 6,144 environment steps),
         two evolution rounds (4 proposals each through the sandbox), so the archive ends with
         the 4 seed tasks plus the admitted proposals, each with its score (0 at this budget:
         too few episodes finish to measure a success rate). The agent learns next to nothing.
         Runtime is compilation, once per run (the session environment is data-driven, see
         docs/dicode.md, "Cost"). Measured on the shared 2-core CPU under a load average of
         10-15 (a process got 15-40 % of a core): session 0 of --curriculum=dicode 1344 s wall
         with a cold compilation cache (the craftax generator, 5 task pools, PPO-GTrXL with the
         multitask step), session 1 with 4 new tasks 104 s; --curriculum=none 901 s then
         88-98 s per session and 568 CPU-s / 39 min wall in all, evaluation included;
         --curriculum=dr, loading dicode's compiled program, 219 / 115 / 40 s per session. The
         evaluation compiles its own program (once per curriculum and cache). On an idle 2-core
         machine expect roughly 15-25 min for a cold --curriculum=dicode run and a few minutes
         for a run whose programs are already in the cache (docs/dicode.md, "Measured at the
         CPU budget").
  paper  the paper's settings (arXiv 2602.08194 and its reference code): 1024 environments x 128
         steps, 100 updates per session, 16 tasks, 40-update scoring window, evolution every 2
         sessions, 10 proposals, GTrXL 256 wide, ~2e9 environment steps: a GPU run.

Commands (from the repository root):
  python -m experiments.dicode --proposer=offline                        # the CPU budget
  python -m experiments.dicode --curriculum=none                         # PPO-GTrXL, no curriculum
  python -m experiments.dicode --curriculum=plr   # also: dr, sfl
  python -m experiments.dicode --proposer=llm --llm_url=http://localhost:8000/v1 \\
      --llm_model=Qwen/Qwen3-235B-A22B-Thinking-2507-FP8    # key: --llm_api_key or $DICODE_API_KEY
  python -m experiments.dicode --config=experiments/configs/dicode.py:paper --proposer=llm ...
  python -m experiments.dicode --compare=runs/dicode/none,runs/dicode/dicode   # bar chart

Any field is overridden with ``--config.<field>=<value>``, e.g. ``--config.sessions=20``.
"""

from __future__ import annotations

import ml_collections

PRESETS = ("cpu", "paper")


def get_config(preset: str = "cpu") -> ml_collections.ConfigDict:
  """The ``preset`` (``cpu`` or ``paper``) config of `experiments.dicode`."""
  if preset not in PRESETS:
    raise ValueError(f"unknown preset {preset!r}; allowed: {', '.join(PRESETS)}")
  c = ml_collections.ConfigDict()
  c.preset = preset  # name of the preset (recorded in the run's config)
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
  c.pool_size = 8  # P: pre-built starting worlds per task (the original game's are generated fresh)
  c.reset_ratio = 16  # Craftax optimistic resets: fresh worlds per step = num_envs // reset_ratio

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
  c.sandbox_timeout_s = 120.0  # per-program limit in the sandbox (tracing a world generator)
  c.sandbox_memory_mb = 4096  # address-space limit of the sandbox process
  c.llm_timeout_s = 120.0  # one HTTP request to the model endpoint
  c.llm_retries = 3  # retries with exponential backoff before the round gives up

  # Evaluation on held-out original-game worlds (jaxlab.rl.dicode.evaluation).
  c.eval_envs = 32  # held-out worlds, one episode each (paper: 1024)
  c.eval_steps = 500  # step cap of an evaluation episode (paper: 8192)

  # PPO (jaxlab.rl.ppo.PPOConfig; DiCode's Table 6 except the sizes).
  c.ppo = ml_collections.ConfigDict()
  c.ppo.num_envs = 16  # parallel environments (paper: 1024)
  c.ppo.num_steps = 32  # rollout length per update (paper: 128)
  c.ppo.epochs = 1  # passes over each rollout (paper: 4)
  c.ppo.minibatches = 2  # minibatches per epoch; must divide num_envs (paper: 8)
  c.ppo.gamma = 0.999  # discount (paper: 0.999)
  c.ppo.gae_lambda = 0.8  # GAE lambda (paper: 0.8)
  c.ppo.clip_eps = 0.2  # ratio clip (paper: 0.2)
  c.ppo.ent_coef = 0.002  # entropy bonus (paper: 0.002)
  c.ppo.vf_coef = 0.5  # value loss weight (paper: 0.5)
  c.ppo.max_grad_norm = 1.0  # gradient-norm clip (paper: 1.0)
  c.ppo.lr = 2e-4  # Adam learning rate, decayed linearly over all sessions (paper: 2e-4)
  c.ppo.anneal_lr = True  # linear decay over sessions x updates_per_session

  # GTrXL policy (jaxlab.rl.ppo.policies.GTrXLPolicy).
  c.gtrxl = ml_collections.ConfigDict()
  c.gtrxl.embed = 32  # model width (paper: 256)
  c.gtrxl.num_heads = 2  # attention heads (paper: 8)
  c.gtrxl.num_layers = 1  # transformer layers (paper: 2)
  c.gtrxl.window = 16  # memory window in steps (paper: 128)
  c.gtrxl.ffn = 32  # feed-forward width (paper: 256)
  c.gtrxl.gate_bias = 2.0  # gate bias b_g (paper: 2)
  c.gtrxl.head_hidden = (32,)  # actor/critic hidden layers (paper: 256)
  c.gtrxl.activation = "relu"  # relu | tanh | gelu

  if preset == "paper":
    _paper(c)
  return c


def _paper(c: ml_collections.ConfigDict) -> None:
  c.sessions = 2_005_401_600 // (1024 * 128 * 100)  # ~2e9 environment steps
  c.updates_per_session, c.score_window, c.tasks_per_session = 100, 40, 16
  c.evolve_every = 2
  c.capacity, c.num_slots, c.proposals = 100, 128, 10
  c.plr_capacity, c.sfl_candidates, c.sfl_buffer, c.sfl_rollout_steps = 4000, 4000, 256, 1500
  c.levels_per_session = 256
  c.eval_envs, c.eval_steps = 1024, 8192
  c.ppo.num_envs, c.ppo.num_steps, c.ppo.epochs, c.ppo.minibatches = 1024, 128, 4, 8
  c.gtrxl.embed, c.gtrxl.num_heads, c.gtrxl.num_layers = 256, 8, 2
  c.gtrxl.window, c.gtrxl.ffn, c.gtrxl.head_hidden = 128, 256, (256,)
