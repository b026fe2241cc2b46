"""The command-line PPO run as library functions (``python -m experiments.ppo`` calls these).

:func:`train_run` builds the environments and the policy from a config (:func:`make_env`,
:func:`make_policy`), trains with held-out evaluations between chunks and writes the report
(``summary.json`` with the environment packages' versions, for Craftax the per-achievement
success rates and ``achievements.png``). A notebook reproduces the program's run with::

    config = ppo.get_config()   # or experiments/configs/ppo.py's get_config(preset)
    steps = ppo.num_updates(config)
    loop = runtime.Loop(steps, **ppo.loop_options(config, "cartpole", steps))
    out = ppo.train_run(config, "cartpole", "mlp", loop, seed=0, workdir="runs/ppo/nb")
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Sequence
from typing import Any

import jax

from jaxlab.core import runtime, videos
from jaxlab.core import seeds as seeds_lib
from jaxlab.core.errors import ConfigError, check_choice, require
from jaxlab.envs import craftax as craftax_envs
from jaxlab.envs import gymnax as gymnax_envs
from jaxlab.envs import vec
from jaxlab.rl.ppo import agent, policies
from jaxlab.rl.ppo import evaluation as ppo_eval
from jaxlab.rl.ppo.config import check_memory, validate_config


def is_craftax(env_name: str) -> bool:
  return env_name.lower().startswith("craftax")


def check_env(env_name: str, field: str = "env") -> str:
  """ConfigError naming ``--env`` for an unknown name (before anything is built)."""
  if is_craftax(env_name):
    craftax_envs.resolve(env_name, field)
    return env_name
  try:
    gymnax_envs.resolve(env_name, field)
  except ConfigError:
    names = ", ".join(vec.names())
    raise ConfigError(field, f"unknown environment {env_name!r}; allowed: {names}") from None
  return env_name


def check(config, env_name: str, policy_name: str) -> None:
  """Every check of a run's arguments: ``--env``, ``--policy`` and the config's fields."""
  check_env(env_name)
  check_choice("policy", policy_name, policies.POLICIES)
  validate_config(config, policy_name)


def check_fits(config, env_name: str, policy_name: str, mesh=None) -> None:
  """Refuses (ConfigError naming ``--config.num_envs`` etc.) a run whose rollout or evaluation
  cannot fit in memory, before anything is allocated (the environments split over ``mesh``)."""
  spec = make_env(env_name, 1, config)  # static facts only: nothing is allocated
  devices = 1 if mesh is None else int(mesh.devices.size)
  check_memory(config, spec.obs_shape, spec.action_dim, policy_name, devices=devices)


def make_env(env_name: str, num_envs: int, config) -> vec.VecEnv:
  """``num_envs`` environments (Craftax with ``config.reset_ratio`` optimistic resets)."""
  if is_craftax(env_name):
    return craftax_envs.make(env_name, num_envs, reset_ratio=config.reset_ratio)
  return gymnax_envs.make(env_name, num_envs)


def make_policy(name: str, env, config):
  """The ``mlp | gru | gtrxl`` policy with the sizes of ``config.<name>``."""
  kwargs = {k: (tuple(v) if isinstance(v, (list, tuple)) else v) for k, v in config[name].items()}
  return policies.make(name, env.num_actions, env.action_dim, **kwargs)


def schedule(steps: int, eval_every: int) -> tuple[int, int, int]:
  """Default ``(log_every, eval_every, ckpt_every)``: about 20 log rows, and evaluations and
  checkpoints on multiples of ``log_every``, so that they fall on log rows."""
  log_every = max(1, min(100, steps // 20))
  # rounded, not floored: about ten evaluations (2929 iterations: 10, not 15), each a pause of the
  # training on the host's clock
  eval_every = eval_every or log_every * max(1, round(steps / (10 * log_every)))
  ckpt_every = eval_every * max(1, round(steps / (4 * eval_every)))
  return log_every, eval_every, ckpt_every


def loop_options(config, env_name: str, steps: int) -> dict[str, Any]:
  """``runtime.Loop`` fields of a PPO run of ``steps`` iterations: the evaluation interval
  (:func:`schedule`), evaluation videos at about every fourth of the run (with ``videos``), the
  progress bar's metrics and environment steps per second."""
  score = "score" if is_craftax(env_name) else "entropy"
  _, eval_every, ckpt_every = schedule(steps, config.eval_every)
  return dict(
    eval_every=eval_every,
    video_every=ckpt_every,
    progress_keys=("episode_return", score, "env_steps_per_sec"),
    units_per_step=config.num_envs * config.num_steps,
    units_name="env_steps_per_sec",
  )


@dataclasses.dataclass
class RunOutput:
  state: agent.PPOState  # the trained state
  result: runtime.Result  # the runtime's result (summary, evaluations)
  env: vec.VecEnv  # the training environments
  achievements: dict[str, float]  # Craftax: success rate per achievement at the last evaluation
  line: str  # the one-line report the program prints


def train_run(
  config,
  env_name: str,
  policy_name: str,
  loop: runtime.Loop,
  *,
  seed: int = 0,
  workdir: str | pathlib.Path | None = None,
  mesh=None,
  seeds: Sequence[int] | None = None,
  videos: int = 0,
) -> RunOutput:
  """Trains ``policy_name`` on ``env_name`` for ``loop.num_steps`` PPO iterations (the learning
  rate decays over them), evaluating on held-out seeds every ``loop.eval_every``; with a
  ``workdir``: resumable, and the report is written there. Key streams of ``seed``: 0 init,
  1 training, 2 evaluation worlds.

  ``seeds`` (more than one) trains those seeds together, vmapped in one compiled program
  (:mod:`jaxlab.core.seeds`); seed ``k`` there equals ``seed=k`` alone, and ``state`` has a
  leading seed axis. The summary's ``train/`` and ``eval/`` figures are then means over seeds,
  each seed's own in ``result.per_seed``.

  ``videos``: episodes per evaluation video (:func:`make_video_fn`; 0 = none), written as
  ``<workdir>/videos/eval_<step>.gif`` at the steps ``loop.video_every`` selects. Key stream 3 of
  ``seed`` resets the video's environments.
  """
  check(config, env_name, policy_name)
  seeds = tuple(seeds) if seeds is not None and len(seeds) > 1 else None
  require(
    seeds is None or mesh is None,
    "seeds",
    "several seeds train vmapped on one device; drop --mesh (or run one seed per mesh)",
  )
  check_fits(config, env_name, policy_name, mesh)
  ppo_config = agent.PPOConfig.from_config(config, num_updates=loop.num_steps)
  env = make_env(env_name, config.num_envs, config)
  policy = make_policy(policy_name, env, config)
  keys = seeds_lib.seed_keys(seeds or (seed,))
  if seeds is None:
    keys = keys[0]
    state = agent.init(env, policy, ppo_config, jax.random.fold_in(keys, 0))
  else:
    state = agent.init_seeds(env, policy, ppo_config, seeds_lib.stream(keys, 0))
  fold = (lambda k, i: jax.random.fold_in(k, i)) if seeds is None else seeds_lib.stream
  update = agent.make_update(env, policy, ppo_config, mesh)
  eval_env = make_env(env_name, config.eval_envs, config)
  evaluate = ppo_eval.make_evaluate(eval_env, policy, config.eval_steps, config.eval_greedy)
  eval_key = fold(keys, 2)  # held out: training worlds come from other streams
  rates: dict = {}
  video_fn = None
  if videos:
    video_fn = make_video_fn(env_name, policy, config, videos, fold(keys, 3), seeds)

  def eval_fn(state, step):
    del step
    if seeds is None:
      scalars, per_ach = ppo_eval.summarize(evaluate(state.train.params, eval_key), eval_env)
    else:
      scalars, per_ach = ppo_eval.summarize_seeds(
        jax.vmap(evaluate)(state.train.params, eval_key), eval_env, len(seeds)
      )
    rates.clear()
    rates.update(per_ach)
    return scalars

  recorded = {
    **config.to_dict(),
    "env": env_name,
    "policy": policy_name,
    "steps": loop.num_steps,
    # another seed in the same workdir is refused, not mixed into the run
    **({"seed": seed} if seeds is None else {"seeds": list(seeds)}),
  }
  shardings = None if mesh is None else agent.state_sharding(state, mesh, config.num_envs)
  state, result = runtime.train(
    state,
    update,
    loop,
    key=fold(keys, 1),
    workdir=workdir,
    eval_fn=eval_fn,
    mesh=mesh,
    state_sharding=shardings,
    config=recorded,
    seeds=seeds,
    video_fn=video_fn,
  )
  line = write_report(workdir, env, result, rates)
  return RunOutput(state=state, result=result, env=env, achievements=dict(rates), line=line)


VIDEO_STEPS = 200  # steps per clip at most: a video shows the start of longer episodes


def make_video_fn(env_name, policy, config, episodes: int, key, seeds=None, max_steps=VIDEO_STEPS):
  """``video_fn(state, step) -> uint8[T, H, W, 3]`` for ``runtime.train``: ``episodes``
  environments reset from ``key`` (one key per seed with ``seeds``), played by the evaluation's
  policy and rendered inside one jitted rollout (:func:`ppo_eval.make_video`), laid out one row
  per seed. None (one printed line) when the environment has no renderer."""
  env = make_env(env_name, episodes, config)
  if env.render is None:
    videos.say_once(f"{env.name} has no renderer: no evaluation videos")
    return None
  steps = min(max_steps, config.eval_steps)
  video = ppo_eval.make_video(env, policy, steps, config.eval_greedy)
  if seeds is not None:
    video = jax.jit(jax.vmap(video))

  def video_fn(state, step):
    del step
    frames, lengths = jax.device_get(video(state.train.params, key))
    return videos.grid(videos.trim(frames if seeds is not None else frames[None], lengths))

  return video_fn


def write_report(workdir, env, result: runtime.Result, rates: dict) -> str:
  """Adds the environment and package versions (and the achievement rates) to ``summary.json``,
  draws ``achievements.png`` (Craftax); returns the one-line report."""
  s = result.summary
  if workdir is not None and result.evals:  # nothing ran: keep the record as it is
    extra = {"env": env.name, "versions": vec.versions()}
    if rates:
      extra["achievements"] = rates
    runtime.write_summary(workdir, {**s, **extra})
    if rates and jax.process_index() == 0:
      ppo_eval.achievement_chart(
        pathlib.Path(workdir) / "achievements.png",
        rates,
        title=f"{env.name}: success rate over evaluation episodes",
      )
  line = f"eval return {s.get('eval/return', float('nan')):.4g}"
  if "eval/return_pct" in s:
    line += f" ({s['eval/return_pct']:.3g}% of max)"
  if "eval/score" in s:
    line += f", Crafter score {s['eval/score']:.3g}%"
  return f"{line}; {throughput(s)}; {s.get('wall_s', 0):.0f} s"


def throughput(summary) -> str:
  """``22,000 env steps/s steady, 9,200 averaged over the run`` from the runtime's top-level
  ``env_steps_per_sec`` (chunks that did not compile, evaluation excluded) and
  ``env_steps_per_sec_average`` (the whole run, compilation and evaluation included)."""
  steady = summary.get("env_steps_per_sec", float("nan"))
  average = summary.get("env_steps_per_sec_average", float("nan"))
  steady_s = (
    f"{steady:,.0f} env steps/s steady"
    if steady == steady
    else "env steps/s steady: n/a (every chunk compiled)"
  )
  return f"{steady_s}, {average:,.0f} averaged over the run"
