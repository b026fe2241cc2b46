"""QRIM's defaults, declared once, and their validation (``python -m experiments.qrim``, notebooks).

``get_config()`` is the command-line run (``--config.x=...`` changes a field). The search's
:class:`jaxlab.rl.qrim.SearchConfig` is built from its flat fields (``mode stop cap noise
fail_rate``), PPO's ``PPOConfig`` from ``config.ppo``; neither has defaults of its own. The
task and |U| are flags of the program (``--env --set_size``) and arguments here. See docs/qrim.md.
"""

from __future__ import annotations

import ml_collections

from jaxlab.core.errors import check_config, require
from jaxlab.rl import ppo
from jaxlab.rl.qrim.search import SearchConfig, validate


def get_config() -> ml_collections.ConfigDict:
  """Query scaling, tabular robust VI and robust PPO at CPU size (docs/qrim.md, Results)."""
  c = ml_collections.ConfigDict()
  # The simulated search (SearchConfig).
  c.mode = "analytic"  # analytic | statevector (same distribution; statevector: |U| <= 2^16)
  c.stop = "adaptive"  # adaptive | budget (Duerr-Hoyer's fixed budget)
  c.cap = 6.0  # adaptive stop: Grover iterations of a fruitless search / sqrt(register), > 0
  c.noise = 0.0  # probability a measurement returns a uniform random index, in [0, 1)
  c.fail_rate = 0.0  # injected probability of returning a wrong index, in [0, 1)
  # Part 1: query scaling.
  c.max_log2 = 14  # |U| = 2^4 .. 2^max_log2 (in [4, 20]; statevector: <= 16)
  c.trials = 100  # random sets per size (the 95% intervals are over these)
  # Part 2: tabular robust value iteration on a random (s,a)-rectangular robust MDP.
  c.states = 20  # states
  c.actions = 4  # actions
  c.gamma = 0.9  # discount, in [0, 1)
  c.sweeps = 100  # value-iteration sweeps
  # Part 3: robust PPO over a grid of physical parameters vs PPO on the nominal ones.
  c.robust_ppo = True  # False skips part 3
  c.phases = 10  # worst-case re-selections (one every updates / phases PPO updates)
  c.episodes = 4  # rollouts per parameter to estimate J(pi, u)
  c.ppo = ppo.gymnax_config()  # jaxlab's PPO at a CartPole-sized PureJaxRL setting
  c.ppo.total_timesteps = 614_400  # env steps: default --steps = this // (num_envs * num_steps)
  c.ppo.eval_steps = 500  # step cap of the J(pi, u) rollouts and the held-out evaluation
  return c


def ppo_updates(config) -> int:
  """PPO updates of the default run (``ppo.num_updates`` of ``config.ppo``)."""
  return ppo.num_updates(config.ppo)


def search_config(config, **overrides) -> SearchConfig:
  return SearchConfig.from_config(config, **overrides)


def ppo_config(config, updates: int) -> ppo.PPOConfig:
  return ppo.PPOConfig.from_config(config.ppo, num_updates=updates)


def validate_config(config, set_size: int) -> ml_collections.FrozenConfigDict:
  """Raises ConfigError naming the field; returns the checked config, frozen (the typed parts:
  :func:`search_config`, :func:`ppo_config`)."""
  check_config(
    config,
    {
      "cap": "positive",
      "max_log2": lambda v: None if 4 <= v <= 20 else f"must be in [4, 20], got {v}",
      "trials": "positive",
      "states": "positive",
      "actions": "positive",
      "gamma": lambda v: None if 0 <= v < 1 else f"must be in [0, 1), got {v}",
      "sweeps": "positive",
      "phases": "positive",
      "episodes": "positive",
      "ppo.total_timesteps": "positive",
      "ppo.eval_steps": "positive",
    },
  )
  search = search_config(config)
  validate(search, set_size)
  if config.mode == "statevector":
    require(config.max_log2 <= 16, "config.max_log2", "statevector mode allows |U| <= 2^16")
  pc = ppo_config(config, 1)
  ppo.validate(pc, recurrent=False, prefix="config.ppo")
  ppo.validate_config(config.ppo, "mlp", prefix="config.ppo")
  return ml_collections.FrozenConfigDict(config)


def check_memory(config, env: str, set_size: int, seeds: int = 1) -> None:
  """Refuses (ConfigError naming the field) sizes whose arrays cannot fit, before any is built:
  part 1's ``trials x 2^max_log2`` sets, part 2's robust MDP ``P[|U|, S, A, S]`` and its per-sweep
  values, part 3's evaluation of ``|U| x episodes`` environments (for each of ``seeds`` seeds:
  one vmapped program) and PPO's rollout (the runtime checks the seeds' PPO program)."""
  from jaxlab.core import resources
  from jaxlab.envs import gymnax

  resources.check_int32("set_size", set_size, "the index of an uncertainty-set element")
  length = 2**config.max_log2
  per = 8 * 4 if config.mode == "statevector" else 6 * 4  # amplitudes / masks, keys, padding
  field = "config.trials" if config.trials >= length else "config.max_log2"
  resources.check_fits(
    float(config.trials) * length * per,
    field,
    f"part 1's {config.trials} sets of up to {length} elements",
  )
  s, a = int(config.states), int(config.actions)
  field = "set_size" if set_size >= s * s * a else "config.states"
  resources.check_fits(
    4.0 * 3 * set_size * s * a * s,  # P, its random draws and normalisation
    field,
    f"part 2's robust MDP P[|U|={set_size}, {s}, {a}, {s}] (float32)",
  )
  resources.check_int32(field, set_size * s * a, "the (s, a, u) values of a sweep")
  if config.robust_ppo:
    from jaxlab.rl.qrim import robust  # the gymnax task of a parameter set (cartpole_force)

    spec = gymnax.make(robust.GYMNAX.get(env, env), 1)  # static facts only: nothing is allocated
    obs = 1
    for d in spec.obs_shape:
      obs *= int(d)
    envs = set_size * int(config.episodes)
    what = f"part 3's evaluation of {set_size} parameters x {config.episodes} episodes"
    eval_bytes = 4.0 * envs * (3 * obs + 4 * sum(config.ppo.mlp.hidden))
    resources.check_fits(
      eval_bytes, "config.episodes" if config.episodes > set_size else "set_size", what
    )
    if seeds > 1:
      resources.check_fits(seeds * eval_bytes, "seeds", f"{what} for each of {seeds} seeds")
    ppo.check_memory(config.ppo, spec.obs_shape, spec.action_dim, "mlp", prefix="config.ppo")
