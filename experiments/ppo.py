r"""PPO (arXiv 1707.06347) on gymnax and Craftax with an MLP, GRU or GTrXL policy.

One PPO iteration (rollout, GAE, epochs x minibatches) is one jitted update of the core runtime:
chunked, checkpointed, resumable bit for bit, evaluated between chunks on held-out environment
seeds. Environments are split over the mesh's ``data`` axis (``--mesh=data:-1`` uses every
device). Outputs in the workdir (default ``runs/ppo/<env>/<policy>``): metrics.csv, eval.csv,
curves.png, TensorBoard, summary.json (with the environment packages' versions and, for Craftax,
per-achievement success rates), achievements.png (Craftax). See docs/ppo.md.

Commands and measured wall times (CPU: 2 cores shared with other jobs; no GPU figures yet):
  python -m experiments.ppo --env=cartpole                  # solves CartPole: eval 500, ~35 s
  python -m experiments.ppo --env=cartpole --policy=gru     # eval 500, ~1 min
  python -m experiments.ppo --env=cartpole --policy=gtrxl   # eval 500, ~4 min
  python -m experiments.ppo --env=craftax-classic-symbolic --steps=60 --config.num_envs=64 \
      --config.mlp.hidden='(256,256,256)' --config.eval_envs=64 --config.eval_steps=3000  # ~3 min
  python -m experiments.ppo --env=craftax-symbolic --mesh=data:-1  # Craftax_Baselines: 1e9 steps
  python -m experiments.ppo --env=craftax-symbolic --policy=gtrxl  # DiCode's PPO-GTrXL agent

Presets: ``config.preset=auto`` (default) takes the Craftax_Baselines settings below for Craftax
and a CartPole-sized PureJaxRL setting (``GYMNAX_PRESET``) for gymnax environments; with
``--policy=gtrxl`` on Craftax, DiCode's PPO settings (``GTRXL_CRAFTAX_PRESET``). A field given on
the command line (``--config.lr=1e-3``) always wins over the preset.
"""

from __future__ import annotations

import copy

import jax
import ml_collections
from absl import flags
from ml_collections import config_flags

from jaxlab.core import experiment, metrics, runtime
from jaxlab.core.errors import ConfigError, check_choice, check_config, require
from jaxlab.rl import ppo
from jaxlab.rl.ppo import evaluation as ppo_eval
from jaxlab.rl.ppo import get_config, policies

flags.DEFINE_string(
  "env",
  "cartpole",
  "Environment: a gymnax name (cartpole, pendulum, acrobot, mountaincar, breakout-minatar, ...) "
  "or craftax-symbolic, craftax-classic-symbolic, craftax-classic-pixels, craftax-pixels.",
)
flags.DEFINE_string("policy", "mlp", "Policy network: mlp, gru or gtrxl.")
FLAGS = flags.FLAGS


# A CartPole-sized PureJaxRL setting: 16 envs x 128 steps, learning rate raised for fewer, larger
# updates; 1e6 steps (488 updates) solve CartPole-v1 (eval >= 494 on 6 of 6 seeds, 5e5 steps gave
# 482-499) in under a minute on a CPU.
GYMNAX_PRESET = {
  "total_timesteps": 1_000_000,
  "num_envs": 16,
  "num_steps": 128,
  "epochs": 4,
  "minibatches": 4,
  "gamma": 0.99,
  "gae_lambda": 0.95,
  "clip_eps": 0.2,
  "ent_coef": 0.01,
  "vf_coef": 0.5,
  "max_grad_norm": 0.5,
  "lr": 1e-3,
  "eval_envs": 64,
  "eval_steps": 1000,
  "mlp.hidden": (64, 64),
  "mlp.activation": "tanh",
  "gru.embed": 64,
  "gru.hidden": 64,
  "gru.head_hidden": (64,),
  "gtrxl.embed": 64,
  "gtrxl.num_heads": 4,
  "gtrxl.window": 32,
  "gtrxl.ffn": 64,
  "gtrxl.head_hidden": (64,),
}
# DiCode's PPO-GTrXL on Craftax-Symbolic (arXiv 2602.08194, its Table 6): 128-step rollouts,
# gamma 0.999, entropy 0.002; the rest as get_config().
GTRXL_CRAFTAX_PRESET = {"num_steps": 128, "gamma": 0.999, "ent_coef": 0.002}

_PRESETS = ("auto", "craftax", "gymnax", "none")


def is_craftax(env_name: str) -> bool:
  return env_name.lower().startswith("craftax")


def check_env(env_name: str) -> str:
  """ConfigError naming ``--env`` for an unknown name (before anything is built)."""
  from jaxlab.envs import craftax, gymnax

  if is_craftax(env_name):
    craftax.resolve(env_name, "env")
  elif env_name not in gymnax.ENVS and env_name.lower() not in {
    v.lower() for v in gymnax.ENVS.values()
  }:
    names = ", ".join([*gymnax.ENVS, *craftax.ENVS])
    raise ConfigError("env", f"unknown environment {env_name!r}; allowed: {names}")
  return env_name


def preset_values(preset: str, env_name: str, policy: str) -> dict:
  if preset == "auto":
    preset = "craftax" if is_craftax(env_name) else "gymnax"
  values = {}
  if preset == "gymnax":
    values = dict(GYMNAX_PRESET)
  elif preset == "craftax":
    values = {k: v for k, v in _flat(get_config()).items() if k != "preset"}
    if policy == "gtrxl":
      values.update(GTRXL_CRAFTAX_PRESET)
  return values


def _flat(config, prefix: str = "") -> dict:
  out = {}
  for k, v in config.items():
    name = f"{prefix}{k}"
    out.update(_flat(v, f"{name}.") if isinstance(v, ml_collections.ConfigDict) else {name: v})
  return out


def resolve_config(config, env_name: str, policy: str, given: set[str]):
  """The run's config: the preset's values for every field not given on the command line."""
  check_choice("config.preset", config.preset, _PRESETS)
  config = copy.deepcopy(config)
  with config.unlocked():
    for name, value in preset_values(config.preset, env_name, policy).items():
      if name not in given:
        *parents, leaf = name.split(".")
        target = config
        for part in parents:
          target = target[part]
        target[leaf] = value
  return config


def validate(config, policy: str) -> None:
  positive = "positive"
  check_config(
    config,
    {
      "total_timesteps": positive,
      "reset_ratio": positive,
      "eval_envs": positive,
      "eval_steps": positive,
      "eval_every": "nonneg",
      "mlp.activation": list(policies.ACTIVATIONS),
      "gru.activation": list(policies.ACTIVATIONS),
      "gtrxl.activation": list(policies.ACTIVATIONS),
    },
  )
  if policy == "gtrxl":
    g = config.gtrxl
    for name in ("embed", "num_heads", "num_layers", "window", "ffn"):
      require(g[name] >= 1, f"config.gtrxl.{name}", f"must be >= 1, got {g[name]}")
    require(
      g.embed % g.num_heads == 0,
      "config.gtrxl.num_heads",
      f"{g.num_heads} does not divide embed={g.embed}",
    )


def schedule(steps: int, eval_every: int) -> tuple[int, int, int]:
  """Default ``(log_every, eval_every, ckpt_every)``: multiples of one chunk length, since every
  distinct chunk length is a separate compilation of the whole PPO iteration scan."""
  log_every = max(1, min(100, steps // 20))
  eval_every = eval_every or log_every * max(1, steps // (10 * log_every))
  ckpt_every = eval_every * max(1, steps // (4 * eval_every))
  return log_every, eval_every, ckpt_every


def make_env(env_name: str, num_envs: int, config):
  if is_craftax(env_name):
    from jaxlab.envs import craftax

    return craftax.make(env_name, num_envs, reset_ratio=config.reset_ratio)
  from jaxlab.envs import gymnax

  return gymnax.make(env_name, num_envs)


def make_policy(name: str, env, config):
  kwargs = {k: (tuple(v) if isinstance(v, (list, tuple)) else v) for k, v in config[name].items()}
  return policies.make(name, env.num_actions, env.action_dim, **kwargs)


def _report(run, env, result, rates: dict) -> None:
  s = result.summary
  # The in-jit clock of the last chunk (the runtime's steps/s of a chunk includes compilation).
  env_sps = s.get("train/env_steps_per_sec", float("nan"))
  extra = {"env": env.name, "versions": _versions()}
  if rates:
    extra["achievements"] = rates
  if jax.process_index() == 0 and result.evals:  # nothing ran: keep the record as it is
    metrics.write_json(run.workdir / "summary.json", {**s, **extra})
    if rates:
      ppo_eval.achievement_chart(
        run.workdir / "achievements.png",
        rates,
        title=f"{env.name}: success rate over evaluation episodes",
      )
  line = f"eval return {s.get('eval/return', float('nan')):.4g}"
  if "eval/return_pct" in s:
    line += f" ({s['eval/return_pct']:.3g}% of max)"
  if "eval/score" in s:
    line += f", Crafter score {s['eval/score']:.3g}%"
  print(f"{line}; {env_sps:,.0f} env steps/s; {s.get('wall_s', 0):.0f} s -> {run.workdir}")


def _versions() -> dict:
  from jaxlab.envs import vec

  return vec.versions()


_CONFIG = experiment.define_config(get_config())


def main(argv):
  del argv
  env_name, policy_name = check_env(FLAGS.env), FLAGS.policy
  check_choice("policy", policy_name, policies.POLICIES)
  given = set(config_flags.get_override_values(FLAGS["config"]))
  config = resolve_config(_CONFIG.value, env_name, policy_name, given)
  validate(config, policy_name)
  per_update = config.num_envs * config.num_steps
  steps = FLAGS.steps or max(1, config.total_timesteps // per_update)
  log_every, eval_every, ckpt_every = schedule(steps, config.eval_every)
  run = experiment.common(
    "ppo",
    default_steps=steps,
    default_log_every=log_every,
    default_ckpt_every=ckpt_every,
    variant=(env_name, policy_name),
    mesh_axes=("data",),
  )
  run.check_batch("config.num_envs", config.num_envs)
  ppo_config = ppo.PPOConfig.from_config(config, num_updates=run.steps)
  env = make_env(env_name, config.num_envs, config)
  policy = make_policy(policy_name, env, config)
  ppo.validate(ppo_config, ppo.is_recurrent(policy))

  key = jax.random.key_data(jax.random.key(run.seed))
  state = ppo.init(env, policy, ppo_config, jax.random.fold_in(key, 0))
  update = ppo.make_update(env, policy, ppo_config, run.mesh)
  eval_env = make_env(env_name, config.eval_envs, config)
  evaluate = ppo_eval.make_evaluate(eval_env, policy, config.eval_steps, config.eval_greedy)
  eval_key = jax.random.fold_in(key, 2)  # held out: training worlds come from other streams
  rates: dict = {}

  def eval_fn(state, step):
    del step
    scalars, per_ach = ppo_eval.summarize(evaluate(state.train.params, eval_key), eval_env)
    rates.clear()
    rates.update(per_ach)
    return scalars

  keys = ("episode_return", "score" if env.achievement_names else "entropy", "env_steps_per_sec")
  loop = run.loop(
    eval_every=eval_every,
    progress_keys=keys,
    units_per_step=per_update,
    units_name="env_steps_per_sec",
  )
  recorded = {**config.to_dict(), "env": env_name, "policy": policy_name, "steps": run.steps}
  shardings = None if run.mesh is None else ppo.state_sharding(state, run.mesh, config.num_envs)
  _, result = runtime.train(
    state,
    update,
    loop,
    key=jax.random.fold_in(key, 1),
    workdir=run.workdir,
    eval_fn=eval_fn,
    mesh=run.mesh,
    state_sharding=shardings,
    config=recorded,
  )
  _report(run, env, result, rates)


if __name__ == "__main__":
  experiment.run(main)
