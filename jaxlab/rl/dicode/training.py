"""The agent of a DiCode run and its ONE compiled program (arXiv 2602.08194).

A session trains ``updates_per_session`` iterations of ``jaxlab.rl.ppo`` (``policies.GTrXLPolicy``
by default, ``config.policy``) through ``jaxlab.core.runtime.train``. The iteration is PPO's own,
``ppo.make_update(..., gated=True)``: its learning step runs under ``lax.cond`` on a flag passed as
data, so a session (learning), the held-out evaluation and SFL's level scoring (no learning,
:func:`play_together`) call the same jitted chunk (:func:`update_for`, traced once per process; a
new process loads it from JAX's persistent compilation cache). :func:`init_state` builds PPO's
state without compiling the environment's reset into a program of its own.

Several seeds: one ``loop.Loop`` per seed; because the task set is data, the seeds' session
environments share one step function, so a session of every seed is one run of the runtime over
a seed axis (:func:`session_inputs`: the chunk above, vmapped), and so are the evaluation and
SFL's scoring (:func:`play_together`). Seed ``k`` computes what its loop alone computes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.core import runtime
from jaxlab.core import seeds as seeds_lib
from jaxlab.core.sharding import to_device as _host
from jaxlab.core.train_state import TrainState
from jaxlab.rl import ppo
from jaxlab.rl.dicode import curriculum as curriculum_lib
from jaxlab.rl.dicode.counters import counts
from jaxlab.rl.dicode.pools import num_units
from jaxlab.rl.ppo import policies


def ppo_config(config) -> ppo.PPOConfig:
  total = config.sessions * config.updates_per_session
  return ppo.PPOConfig.from_config(config.ppo, num_updates=total)


def make_policy(num_actions: int, config):
  """``config.policy`` (gtrxl | gru | mlp) with the sizes of ``config.ppo.<policy>``."""
  name = config.get("policy", "gtrxl")
  kw = {k: (tuple(v) if isinstance(v, (list, tuple)) else v) for k, v in config.ppo[name].items()}
  return policies.make(name, num_actions, 0, **kw)


# Key arithmetic as one program: eagerly, a split and the unpacking of its result are separate
# small programs (threefry is integer arithmetic: the same keys either way).
_split2 = jax.jit(lambda key: tuple(jax.random.split(key)))


@functools.lru_cache(maxsize=8)
def _agent_init(policy, config: ppo.PPOConfig, num_achievements: int) -> Callable:
  """``init(key, obs) -> (train, carry, reset, stats)``: the agent's part of ``ppo.init``'s state
  as ONE compiled program (the network's initialisation, the optimizer's zeros, the carry and
  the statistics op by op were a dozen small programs, each compiled or read from the cache)."""
  tx = ppo.make_optimizer(config)

  def init(key, obs):
    n = obs.shape[0]
    carry = policy.initial_carry(n)
    params = policy.init(key, carry, obs[None], jnp.ones((1, n), bool))["params"]
    stats = {
      "episode_return": jnp.zeros((), jnp.float32),
      "episode_length": jnp.zeros((), jnp.float32),
    }
    if num_achievements:
      stats["achievements"] = jnp.zeros((num_achievements,), jnp.float32)
    train = TrainState.create(policy, params, tx)
    return train, carry, jnp.ones((n,), bool), stats

  return jax.jit(init)


def init_state(env, policy, config: ppo.PPOConfig, key) -> ppo.PPOState:
  """``ppo.init``'s state (same keys, same values) without compiling the environment's reset
  into a program of its own: the session's reset already is one compiled program that takes the
  task table as an ARGUMENT, whereas a program around ``env.reset`` would capture the table (the
  pools' worlds, megabytes) as a constant and compile anew for every task set."""
  k_env, k_net = _split2(key)
  obs, env_state = env.reset(k_env)
  init = _agent_init(policy, config, len(env.achievement_names or ()))
  train, carry, reset, stats = init(k_net, obs)
  # TrainState.create's step is the Python int 0 (as ppo.init keeps it); a program returns arrays.
  return ppo.PPOState(
    train=train.replace(step=0), env_state=env_state, obs=obs, reset=reset, carry=carry, stats=stats
  )


_UPDATES: dict = {}  # (environment step, policy, PPOConfig) -> ppo.make_update(..., gated=True)


def update_for(env, policy, config: ppo.PPOConfig) -> Callable:
  """PPO's gated iteration (``ppo.make_update(..., gated=True)``) for ``env``'s step: one per
  process and shape, shared by the sessions, the evaluation, SFL's scoring and the later runs of
  a study (its jitted chunk is ``runtime.make_chunk_fn(update)``)."""
  key = (env.step, policy, config)
  if key not in _UPDATES:
    while len(_UPDATES) >= 4:  # the newest few (each holds a compiled program)
      _UPDATES.pop(next(iter(_UPDATES)))
    _UPDATES[key] = ppo.make_update(env, policy, config, gated=True)
  return _UPDATES[key]


def _seed_axis(loops):
  """The seeds of ``loops`` as the runtime's seed axis (None for one loop: no axis)."""
  if len(loops) == 1:
    return None
  seeds = tuple(int(lp.seed) for lp in loops)
  if len(set(seeds)) != len(seeds):
    raise ValueError(f"loops trained together need distinct seeds, got {seeds}")
  return seeds


def _shared_update(loops, envs):
  """The one update (and so one program) of the loops' environments: each loop's
  :meth:`Loop.program`; environments of one shape share their step function."""
  updates = [lp.program(env)[0] for lp, env in zip(loops, envs)]
  if any(u is not updates[0] for u in updates):
    raise ValueError(
      "the seeds' session environments do not share one step function (make_env must return "
      "environments whose task set is data, as multitask.session_env does): they cannot be vmapped"
    )
  return updates[0]


def flag(learn: bool):
  """The gated update's ``batch``: True in a session, False in a play (the same program)."""
  return _host(np.bool_(learn))


def session_inputs(loops, plans, session: int):
  """What ``runtime.train`` takes for a session of every loop on its plan: ``(update, state, key,
  seeds, envs)``; several loops' states and keys are stacked on the seed axis ``seeds``, so
  their PPO is ONE vmapped program in which seed ``k`` computes what its loop alone would."""
  seeds = _seed_axis(loops)
  envs, states, keys = [], [], []
  for lp, plan in zip(loops, plans):
    plan.session = session
    envs.append(lp._session_env(plan))
    lp.program(envs[-1])
    key = jax.random.fold_in(lp.key, session)
    states.append(lp._agent_state(envs[-1], jax.random.fold_in(key, 0)))
    keys.append(jax.random.fold_in(key, 1))
  update = _shared_update(loops, envs)
  if seeds is None:
    return update, states[0], keys[0], seeds, envs
  return update, seeds_lib.stack(states), jnp.stack(keys), seeds, envs


def session_results(loops, plans, envs, state, result, seeds, wall: float) -> list:
  """Each loop's (window counts, metrics) of a session trained by ``runtime.train`` on
  :func:`session_inputs`; every loop carries its trained agent."""
  if seeds is None:
    per = [(state, result.summary)]
  else:
    shared = {k: v for k, v in result.summary.items() if k not in ("seeds", "per_seed")}
    per = [
      (seeds_lib.take(state, i), {**shared, **result.per_seed[seed]})
      for i, seed in enumerate(seeds)
    ]
  out = []
  for lp, plan, env, (st, summary) in zip(loops, plans, envs, per):
    lp.carried = {"train": st.train, "stats": st.stats}
    info = {"wall_s": wall, "achievement_names": env.achievement_names, **summary}
    got = counts(st.env_state)
    window = {k: v[: plan.size] for k, v in got.items()}
    if plan.kind == "base":  # every unit is the original game
      window = {k: v.sum(0, keepdims=True) for k, v in got.items()}
    out.append((window, info))
  return out


def play_together(loops, plans, steps: int, keys, until_done: bool = False) -> list:
  """:meth:`Loop.play` of each loop (its plan, its key); several loops play through the vmapped
  training program. With ``until_done`` a seed's state is the one after the chunk in which all of
  its first episodes had ended (as its loop alone stops there), the others play on."""
  seeds = _seed_axis(loops)
  c = loops[0].config
  envs, states = [], []
  for lp, plan, key in zip(loops, plans, keys):
    envs.append(lp._session_env(plan, stop=steps))
    lp.program(envs[-1])
    states.append(lp._agent_state(envs[-1], jax.random.fold_in(key, 0)))
  update = _shared_update(loops, envs)
  if seeds is None:
    state, chunk = states[0], runtime.make_chunk_fn(update)
  else:
    # the chunk runtime.train(..., seeds=...) compiled for the sessions: the same program
    state, chunk = seeds_lib.stack(states), runtime.make_chunk_fn(update, seed_vmap=seeds_lib.vmap)
  per_chunk, u = c.updates_per_session * c.ppo.num_steps, c.updates_per_session
  # the U updates of a part in calls of the training's chunk program (its max_len), not a
  # program of U steps compiled for playing; the same key and step numbers as one U-step call
  m = loops[0]._chunk_len()
  off = flag(False)
  n = len(loops)
  out: list = [None] * n
  for i in range(-(-steps // per_chunk)):
    k = [jax.random.fold_in(key, 1 + i) for key in keys]
    k = k[0] if seeds is None else jnp.stack(k)
    for start in range(0, u, m):
      state, _ = chunk(state, off, k, start, min(m, u - start), m)
    if until_done:
      ended = np.asarray(state.env_state.first_done).reshape(n, -1).all(axis=1)
      for j in range(n):
        if ended[j] and out[j] is None:
          out[j] = _of_seed(state.env_state, seeds, j)
      if all(o is not None for o in out):
        break
  return [_of_seed(state.env_state, seeds, j) if o is None else o for j, o in enumerate(out)]


def _of_seed(tree, seeds, i: int):
  """Seed ``i`` of a stacked pytree (the tree itself without a seed axis)."""
  return tree if seeds is None else seeds_lib.take(tree, i)


def score_levels_together(loops, level_lists) -> list[np.ndarray]:
  """:meth:`Loop.score_levels` of each loop's levels (equally many per loop), played together."""
  c = loops[0].config
  level_lists = [list(levels) for levels in level_lists]
  k = num_units(curriculum_lib.SessionPlan("levels", [], np.ones(0)), c)
  scores: list[list] = [[] for _ in loops]
  for i in range(0, len(level_lists[0]), k):
    plans, keys = [], []
    for lp, levels in zip(loops, level_lists):
      part = levels[i : i + k]
      plan = curriculum_lib.SessionPlan(
        "levels",
        [f"level_{s}" for s in part],
        np.full(len(part), 1.0 / len(part)),
        levels=curriculum_lib.seed_keys(part),
      )
      plan.session = lp.state["session"]
      plans.append(plan)
      keys.append(jax.random.fold_in(lp.key, 1_000_000 + 1_000 * lp.state["session"] + i))
    played = play_together(loops, plans, c.sfl_rollout_steps, keys)
    for j, (plan, st) in enumerate(zip(plans, played)):
      window, n = counts(st), plan.size
      scores[j].append(
        curriculum_lib.level_score(window["achievements"][:n], window["finished"][:n])
      )
  return [np.concatenate(s) for s in scores]
