"""PPO's defaults, declared once: Craftax_Baselines' PPO (arXiv 2402.16801; PureJaxRL code).

``c.ppo = ppo.get_config()`` is how another method (R4, QRIM, DiCode, ITC) carries PPO; presets in
``experiments/configs/ppo.py`` change fields of this config, never declare their own.
:func:`validate_config` checks a whole config (the PPO fields through ``agent.validate``, the
program's fields, the policy's sizes), naming the field as typed (``--config.num_envs``).
"""

from __future__ import annotations

import ml_collections

from jaxlab.core.errors import check_config, require
from jaxlab.envs import craftax as craftax_envs


def get_config() -> ml_collections.ConfigDict:
  """Craftax_Baselines' PPO (arXiv 2402.16801; PureJaxRL code). ~1e9 steps: a GPU run."""
  c = ml_collections.ConfigDict()
  c.total_timesteps = 1_000_000_000  # env steps of the run: updates = total // (envs * steps)
  c.num_envs = 1024  # parallel environments (must divide over the mesh's data devices)
  c.num_steps = 64  # rollout length per environment and update
  c.epochs = 4  # passes over each rollout
  c.minibatches = 8  # gradient steps per epoch
  c.gamma = 0.99  # discount
  c.gae_lambda = 0.8  # GAE lambda (arXiv 1506.02438)
  c.clip_eps = 0.2  # PPO ratio clip; also the value-loss clip
  c.ent_coef = 0.01  # entropy bonus weight
  c.vf_coef = 0.5  # value-loss weight
  c.max_grad_norm = 1.0  # global gradient-norm clip
  c.lr = 2e-4  # Adam learning rate (eps 1e-5)
  # linear decay of the learning rate to 0 over the run. False: constant (rejax's PPO), which on
  # CartPole at PureJaxRL's setting learns faster at 64 and 256 environments (docs/ppo.md)
  c.anneal_lr = True
  c.normalize_advantages = True  # per-minibatch advantage normalisation
  c.clip_value = True  # clipped value loss (PureJaxRL)
  # Unroll the epoch and minibatch loops into Python loops. For CNN policies on CPU: XLA:CPU runs
  # convolution gradients inside a loop on a slow generic path (jax-ml/jax#12868; 13x measured for
  # the IMPALA CNN's weight gradient, see benchmarks/itc.py). Costs compile time; off on GPUs.
  c.unroll = False
  # Craftax optimistic resets: fresh worlds per step = num_envs // reset_ratio (gymnax: unused)
  c.reset_ratio = craftax_envs.RESET_RATIO
  c.eval_envs = 256  # held-out environments per evaluation (one episode each)
  c.eval_steps = 10_000  # step cap of an evaluation (unfinished episodes count their return so far)
  c.eval_every = 0  # updates between evaluations (0: ten per run); the last update always evaluates
  c.eval_greedy = False  # evaluate the most likely action instead of sampling the policy
  c.mlp = ml_collections.ConfigDict()
  c.mlp.hidden = (512, 512, 512)  # actor and critic towers (Craftax_Baselines ActorCritic)
  c.mlp.activation = "tanh"  # tanh | relu | gelu
  c.gru = ml_collections.ConfigDict()
  c.gru.embed = 512  # Dense embedding before the GRU (Craftax_Baselines ppo_rnn)
  c.gru.hidden = 512  # GRU state size
  c.gru.head_hidden = (512, 512)  # hidden layers of the actor and critic heads
  c.gru.activation = "relu"  # tanh | relu | gelu
  c.gtrxl = ml_collections.ConfigDict()
  c.gtrxl.embed = 256  # model width (DiCode: 256)
  c.gtrxl.num_heads = 8  # attention heads (must divide embed)
  c.gtrxl.num_layers = 2  # transformer layers
  c.gtrxl.window = 128  # memory: previous steps each step attends to
  c.gtrxl.ffn = 256  # feed-forward hidden size
  c.gtrxl.gate_bias = 2.0  # GTrXL gate bias b_g (arXiv 1910.06764)
  c.gtrxl.head_hidden = (256,)  # hidden layers of the actor and critic heads
  c.gtrxl.activation = "relu"  # tanh | relu | gelu
  return c


def gymnax_config() -> ml_collections.ConfigDict:
  """``get_config()`` at a CartPole-sized PureJaxRL setting: the default run of ``experiments.ppo``
  on gymnax environments and the PPO of R4 and QRIM (who change ``total_timesteps``).

  16 environments x 128 steps, 1e6 steps (488 iterations), the learning rate raised to 1e-3 for
  fewer, larger updates, GAE lambda 0.95, gradient norm 0.5, a 64-64 MLP, a 64-unit GRU and a
  small GTrXL. Solves CartPole-v1 (eval >= 494 on 6 of 6 seeds; 5e5 steps gave 482-499) in under a
  minute on a CPU (docs/ppo.md).
  """
  c = get_config()
  c.total_timesteps = 1_000_000
  c.num_envs = 16
  c.num_steps = 128
  c.minibatches = 4
  c.gae_lambda = 0.95
  c.max_grad_norm = 0.5
  c.lr = 1e-3
  c.eval_envs = 64
  c.eval_steps = 1000
  c.mlp.hidden = (64, 64)
  c.gru.embed = 64
  c.gru.hidden = 64
  c.gru.head_hidden = (64,)
  c.gtrxl.embed = 64
  c.gtrxl.num_heads = 4
  c.gtrxl.window = 32
  c.gtrxl.ffn = 64
  c.gtrxl.head_hidden = (64,)
  return c


def num_updates(config) -> int:
  """PPO iterations of a run: ``total_timesteps // (num_envs * num_steps)``, at least 1."""
  return max(1, config["total_timesteps"] // (config["num_envs"] * config["num_steps"]))


def validate_config(
  config, policy: str = "mlp", prefix: str = "config"
) -> ml_collections.FrozenConfigDict:
  """Raises ConfigError naming the bad field (``config.gtrxl.num_heads`` etc.); returns the checked
  config, frozen (the typed agent: ``PPOConfig.from_config``).

  ``policy`` (mlp | gru | gtrxl): a recurrent policy splits environments, not steps, into
  minibatches, and only the chosen policy's sizes are checked.
  """
  from jaxlab.rl.ppo import agent, policies

  acts = list(policies.ACTIVATIONS)
  check_config(
    config,
    {
      "total_timesteps": "positive",
      "reset_ratio": "positive",
      "eval_envs": "positive",
      "eval_steps": "positive",
      "eval_every": "nonneg",
      "mlp.activation": acts,
      "gru.activation": acts,
      "gtrxl.activation": acts,
    },
    prefix,
  )
  for name in ("num_envs", "num_steps"):  # before num_updates divides by them
    require(config[name] >= 1, f"{prefix}.{name}", f"must be >= 1, got {config[name]}")
  ppo_config = agent.PPOConfig.from_config(config)
  agent.validate(ppo_config, policy != "mlp", prefix)
  if policy == "gtrxl":
    g = config.gtrxl
    for name in ("embed", "num_heads", "num_layers", "window", "ffn"):
      require(g[name] >= 1, f"{prefix}.gtrxl.{name}", f"must be >= 1, got {g[name]}")
    require(
      g.embed % g.num_heads == 0,
      f"{prefix}.gtrxl.num_heads",
      f"{g.num_heads} does not divide embed={g.embed}",
    )
  _check_widths(config, policy, prefix)
  return ml_collections.FrozenConfigDict(config)


_WIDTHS = {
  "mlp": ("hidden",),
  "gru": ("embed", "hidden", "head_hidden"),
  "gtrxl": ("head_hidden",),
}


def _check_widths(config, policy: str, prefix: str) -> None:
  """Layer widths of the chosen policy: positive integers (a tuple may be empty: no layer)."""
  for name in _WIDTHS.get(policy, ()):
    v = config[policy][name]
    field = f"{prefix}.{policy}.{name}"
    widths = list(v) if isinstance(v, (list, tuple)) else [v]
    for w in widths:
      require(
        isinstance(w, int) and not isinstance(w, bool) and w >= 1,
        field,
        f"layer widths must be integers >= 1, got {v!r}",
      )


def _policy_widths(config, policy: str) -> tuple[int, int]:
  """``(sum of the layer widths of one step, the widest layer)`` of the chosen policy."""
  p = config[policy]
  if policy == "mlp":
    ws = [*p.hidden, *p.hidden]  # actor and critic towers
  elif policy == "gru":
    ws = [p.embed, 3 * p.hidden, *p.head_hidden, *p.head_hidden]
  else:
    ws = [p.embed, p.ffn, p.embed * 4] * p.num_layers + [*p.head_hidden, *p.head_hidden]
  ws = [int(w) for w in ws] or [1]
  return sum(ws), max(ws)


def estimate_bytes(config, obs_shape, action_dim: int = 0, policy: str = "mlp") -> dict:
  """Bytes of the largest arrays of a PPO run, from the config and the observation shape alone:
  ``{"rollout": ..., "eval": ...}``. The rollout is ``num_envs x num_steps`` transitions (the
  observation, action, log-prob, value, reward, done, reset, advantage, target), the environments'
  state and observations, and the minibatch's activations and their gradients; the evaluation is
  ``eval_envs`` environments and one step's activations."""
  obs = 1
  for d in obs_shape:
    obs *= int(d)
  n, t, m = int(config.num_envs), int(config.num_steps), max(int(config.minibatches), 1)
  width, _ = _policy_widths(config, policy)
  per_env = 3 * obs * 4  # environment state (about an observation), current and next observation
  transitions = n * t * (obs + 8 + int(action_dim)) * 4
  activations = (n * t // m + 1) * (obs + width) * 4 * 2  # kept for the backward pass, gradients
  carry = 0
  if policy == "gtrxl":
    g = config.gtrxl
    carry = n * g.num_layers * g.window * g.embed * 4 * 2
    activations += (n * t // m + 1) * g.num_heads * g.window * g.num_layers * 4 * 3
  elif policy == "gru":
    carry = n * config.gru.hidden * 4 * 2
  rollout = transitions + n * per_env + activations + carry
  e = int(config.eval_envs)
  evaluation = e * (per_env + width * 4) + (carry // max(n, 1)) * e
  return {"rollout": float(rollout), "eval": float(evaluation)}


def check_memory(
  config,
  obs_shape,
  action_dim: int = 0,
  policy: str = "mlp",
  *,
  devices: int = 1,
  prefix: str = "config",
  fields: tuple[str, str] | None = None,
) -> None:
  """Refuses (ConfigError naming the field) a run whose rollout or evaluation cannot fit in one
  device's memory (the environments split over ``devices``). ``fields``: the names of
  ``num_envs, num_steps`` as typed (default ``<prefix>.num_envs``, ``<prefix>.num_steps``)."""
  from jaxlab.core import resources

  envs_field, steps_field = fields or (f"{prefix}.num_envs", f"{prefix}.num_steps")
  n, t = int(config.num_envs), int(config.num_steps)
  field = steps_field if t > n else envs_field
  est = estimate_bytes(config, obs_shape, action_dim, policy)
  resources.check_fits(
    est["rollout"],
    field,
    f"the rollout of {n} environments x {t} steps (observations {tuple(obs_shape)}) and its "
    "minibatch gradients",
    devices=devices,
  )
  resources.check_fits(
    est["eval"], f"{prefix}.eval_envs", f"the evaluation of {config.eval_envs} environments"
  )
  resources.check_int32(field, n * t, f"the rollout's {n} x {t} transitions")
  resources.check_int32(f"{prefix}.eval_envs", int(config.eval_envs), "the evaluation batch")
