"""PPO speed: jaxlab's PPO against a minimal single-file reference PPO, in the same process.

  python -m benchmarks.ppo                                   # CartPole-v1 at 4, 64, 256 envs
  python -m benchmarks.ppo --env=craftax-classic-symbolic --num_envs=64 --rollout=64 \
      --steps=65536 --seeds=2                                # Craftax-Classic-Symbolic, CPU-sized
  python -m benchmarks.ppo --env=craftax-classic-symbolic --num_envs=1024 --rollout=64 \
      --steps=2097152 --seeds=1                              # Craftax_Baselines' size (a GPU run)
  python -m benchmarks.ppo --peer=rejax                      # rejax's PPO instead (the bench extra)

The reference (:func:`make_train`) is PPO written the way PureJaxRL and Craftax_Baselines write it:
one jitted ``train(key)`` that resets the environments, initialises the network and runs every
iteration (rollout, GAE, epochs x minibatches on a global shuffle of the rollout) in one
``lax.scan``, returning only per-iteration sums of the finished episodes' returns. It is written
from the algorithm (arXiv 1707.06347, 1506.02438), shares no code with ``jaxlab.rl.ppo`` and steps
the same environments through the environment packages directly (gymnax's own auto-reset;
Craftax's no-auto-reset environment with optimistic resets of ``num_envs // reset_ratio`` fresh
worlds per step, the reset jaxlab uses), with the hyperparameters of ``jaxlab.rl.ppo``'s config.

jaxlab's PPO runs as a user's run does: ``ppo.init`` then ``runtime.train`` (no workdir, no
evaluation) in chunks of ``ppo.schedule``'s log interval, with the host reading each chunk's
metrics. With ``--program`` (default) a third run per seed is the command path: ``ppo.train_run``
with a temporary workdir at ``python -m experiments.ppo``'s defaults (its schedule of logs,
evaluations and checkpoints, its evaluation size, metrics.csv, TensorBoard, curves.png, the
report), timed as env steps over wall minus the seconds jax spent compiling. Per size and seed the
runs take turns in a rotating order (reference, jaxlab, command; then jaxlab, command, reference;
...), so a load that drifts favours none of them. Printed per size:
  - steady env steps/s of each (compiled; jaxlab: the runtime's steady rate over the chunks that did
    not compile; reference: the whole compiled ``train``), the median of the per-seed ratios
    jaxlab/reference;
  - compile seconds: reference ``jit(train).lower().compile()``; jaxlab ``jit(ppo.init)`` plus the
    chunks that compiled (their wall time minus their steps at the steady rate);
  - the mean training return of the episodes finished in the last 10 % of iterations, mean and
    95 % t-interval over the seeds, for both (equal returns at equal steps: same algorithm);
  - the command path's env steps/s, its per-seed ratios to the reference, its compile seconds and
    its final held-out evaluation return;
  - the load average (``os.getloadavg``) before and after.
``--peer=rejax`` times rejax's PPO (github.com/keraJLi/rejax; ``pip install -e '.[bench]'``)
instead: per seed rejax's ``train`` and jaxlab's chunk program, each one compiled call of every
iteration (A B, then B A), steady env steps/s per wall and per CPU second, and both final policies
on 128 evaluation episodes; with ``--program`` (default) also ``ppo.train_run`` with a temporary
workdir at the program's defaults (env steps over wall minus compile seconds). Default 1.5e6
steps. :data:`REJAX_DIFFERENCES` lists what rejax's config cannot match; it is printed.
``--env_only`` adds, for Craftax, the environment alone with random actions (craftax's builtin
auto-reset vs the optimistic resets) as a secondary line.
"""

from __future__ import annotations

import os
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import flags

from jaxlab.core import experiment, runtime
from jaxlab.core import seeds as seeds_lib
from jaxlab.envs import craftax as craftax_envs
from jaxlab.envs import gymnax as gymnax_envs
from jaxlab.rl import ppo

UNUSED_FLAGS = ("workdir", "ckpt_every", "keep", "mesh", "log_every", "profile", "seed")


def define_flags() -> None:
  """The flags, defined only when run as a program (the tests import this module)."""
  global _ENV, _NUM_ENVS, _ROLLOUT, _ENV_ONLY, _PEER, _PROGRAM
  _ENV = flags.DEFINE_string("env", "cartpole", "cartpole or a Craftax name (jaxlab.envs).")
  _NUM_ENVS = flags.DEFINE_list("num_envs", ["4", "64", "256"], "Sizes N (environments) to time.")
  _ROLLOUT = flags.DEFINE_integer("rollout", 0, "Steps per rollout (0: 128 CartPole, 64 Craftax).")
  _ENV_ONLY = flags.DEFINE_bool("env_only", False, "Craftax: also time the environment alone.")
  _PEER = flags.DEFINE_enum(
    "peer", "reference", ["reference", "rejax"], "The PPO timed against jaxlab's (rejax: gymnax)."
  )
  _PROGRAM = flags.DEFINE_bool(
    "program", True, "Also time the command path (ppo.train_run with a workdir, its defaults)."
  )


def _steps() -> int:
  """``--steps`` (jaxlab.core.experiment's flag): env steps per run (unset: 5e5 CartPole, 32768
  Craftax); an explicit ``--steps=0`` is bad input (`check_flags`), not "the default"."""
  return 0 if flags.FLAGS.steps is None else flags.FLAGS.steps


# --- the configuration both sides run (jaxlab's config, the one declaration of the defaults) ---


def bench_config(env_name: str, num_envs: int, num_steps: int, total: int):
  """PureJaxRL's CartPole setting (lr 2.5e-4 annealed, 4 x 4 minibatches, a 64-64 tanh MLP) or
  Craftax_Baselines' (``ppo.get_config()`` as declared: 4 x 8, a 3 x 512 MLP)."""
  c = ppo.get_config()
  if not ppo.is_craftax(env_name):
    c.minibatches, c.gae_lambda, c.max_grad_norm, c.lr = 4, 0.95, 0.5, 2.5e-4
    c.mlp.hidden = (64, 64)
  c.num_envs, c.num_steps, c.total_timesteps = num_envs, num_steps, total
  return c


# --- the reference PPO: one jitted train(key), nothing else ---


class ActorCritic(nn.Module):
  """Separate actor and critic MLPs; orthogonal init (sqrt 2 hidden, 0.01 policy, 1 value)."""

  num_actions: int
  hidden: tuple[int, ...]
  activation: str

  @nn.compact
  def __call__(self, x):
    act = {"tanh": nn.tanh, "relu": nn.relu, "gelu": nn.gelu}[self.activation]
    dense = lambda n, g: nn.Dense(n, kernel_init=nn.initializers.orthogonal(g))
    a, v = x, x
    for h in self.hidden:
      a, v = act(dense(h, np.sqrt(2))(a)), act(dense(h, np.sqrt(2))(v))
    return dense(self.num_actions, 0.01)(a), dense(1, 1.0)(v)[..., 0]


def _gymnax_env(name: str, n: int):
  env, params = gymnax_envs.import_gymnax().make(gymnax_envs.resolve(name))

  def reset(key):
    return jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(key, n), params)

  def step(key, state, action):
    obs, state, reward, term, trunc, _ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
      jax.random.split(key, n), state, action, params
    )
    return obs, state, reward, term | trunc

  return reset, step, env.action_space(params).n


def _craftax_env(name: str, n: int, reset_ratio: int):
  from craftax.craftax_env import make_craftax_env_from_name

  env = make_craftax_env_from_name(craftax_envs.resolve(name)[0], False)
  params, pool = env.default_params, max(1, n // reset_ratio)

  def reset(key):
    return jax.vmap(env.reset_env, in_axes=(0, None))(jax.random.split(key, n), params)

  def step(key, state, action):
    k1, k2 = jax.random.split(key)
    obs, state, reward, done, _ = jax.vmap(env.step_env, in_axes=(0, 0, 0, None))(
      jax.random.split(k1, n), state, action, params
    )
    fresh = jax.vmap(env.reset_env, in_axes=(0, None))(jax.random.split(k2, pool), params)
    # Optimistic resets: the i-th finished environment takes fresh world i (mod pool).
    pick = jnp.where(done, jnp.cumsum(done) - 1, 0) % pool

    def put(new, old):
      return jnp.where(done.reshape((n,) + (1,) * (old.ndim - 1)), new[pick], old)

    obs, state = jax.tree.map(put, fresh, (obs, state))
    return obs, state, reward, done

  return reset, step, env.action_space(params).n


def reference_gae(traj: dict, last_value, gamma: float, lam: float):
  """Advantages ``[T, N]`` of a rollout (``reward, value, done``), backwards, 16 steps per loop
  iteration."""

  def back(carry, x):
    adv, next_value = carry
    keep = 1.0 - x["done"].astype(jnp.float32)
    adv = x["reward"] + gamma * next_value * keep - x["value"] + gamma * lam * keep * adv
    return (adv, x["value"]), adv

  xs = {k: traj[k] for k in ("reward", "value", "done")}
  init = (jnp.zeros_like(last_value), last_value)
  return jax.lax.scan(back, init, xs, reverse=True, unroll=16)[1]


def make_train(c, env_name: str):
  """``train(key) -> (params, per-iteration [returns of finished episodes, their count])``."""
  n, t_len, m = c.num_envs, c.num_steps, c.minibatches
  updates = max(1, c.total_timesteps // (n * t_len))
  if ppo.is_craftax(env_name):
    env_reset, env_step, num_actions = _craftax_env(env_name, n, c.reset_ratio)
  else:
    env_reset, env_step, num_actions = _gymnax_env(env_name, n)
  net = ActorCritic(num_actions, tuple(c.mlp.hidden), c.mlp.activation)
  grad_steps = c.epochs * m
  lr = lambda i: c.lr * (1.0 - (i // grad_steps) / updates) if c.anneal_lr else c.lr
  tx = optax.chain(optax.clip_by_global_norm(c.max_grad_norm), optax.adam(lr, eps=1e-5))

  def loss_fn(params, b):
    logits, value = net.apply(params, b["obs"])
    logp_all = jax.nn.log_softmax(logits)
    logp = jnp.take_along_axis(logp_all, b["action"][:, None], axis=1)[:, 0]
    ratio = jnp.exp(logp - b["logp"])
    adv = (b["adv"] - b["adv"].mean()) / (b["adv"].std() + 1e-8)
    pg = -jnp.minimum(ratio * adv, jnp.clip(ratio, 1 - c.clip_eps, 1 + c.clip_eps) * adv).mean()
    v_clip = b["value"] + jnp.clip(value - b["value"], -c.clip_eps, c.clip_eps)
    vf = 0.5 * jnp.maximum((value - b["ret"]) ** 2, (v_clip - b["ret"]) ** 2).mean()
    ent = -(jnp.exp(logp_all) * logp_all).sum(-1).mean()
    return pg + c.vf_coef * vf - c.ent_coef * ent

  def iteration(carry, _):
    params, opt, env_state, obs, ep_ret, key = carry

    def rollout_step(carry, _):
      env_state, obs, ep_ret, key = carry
      key, k_act, k_env = jax.random.split(key, 3)
      logits, value = net.apply(params, obs)
      action = jax.random.categorical(k_act, logits)
      logp = jnp.take_along_axis(jax.nn.log_softmax(logits), action[:, None], axis=1)[:, 0]
      next_obs, env_state, reward, done = env_step(k_env, env_state, action)
      ep_ret = ep_ret + reward
      finished = jnp.where(done, ep_ret, 0.0)
      step = dict(obs=obs, action=action, logp=logp, value=value, reward=reward, done=done)
      return (env_state, next_obs, jnp.where(done, 0.0, ep_ret), key), (step, finished)

    (env_state, obs, ep_ret, key), (traj, finished) = jax.lax.scan(
      rollout_step, (env_state, obs, ep_ret, key), length=t_len
    )
    _, last_value = net.apply(params, obs)

    adv = reference_gae(traj, last_value, c.gamma, c.gae_lambda)
    data = {**traj, "adv": adv, "ret": adv + traj["value"]}
    data = jax.tree.map(lambda x: x.reshape((n * t_len,) + x.shape[2:]), data)

    def epoch(carry, key):
      def minibatch(carry, b):
        params, opt = carry
        grads = jax.grad(loss_fn)(params, b)
        updates_, opt = tx.update(grads, opt, params)
        return (optax.apply_updates(params, updates_), opt), None

      perm = jax.random.permutation(key, n * t_len)
      mbs = jax.tree.map(lambda x: x[perm].reshape((m, -1) + x.shape[1:]), data)
      return jax.lax.scan(minibatch, carry, mbs)[0], None

    key, k_epochs = jax.random.split(key)
    (params, opt), _ = jax.lax.scan(epoch, (params, opt), jax.random.split(k_epochs, c.epochs))
    done = traj["done"].astype(jnp.float32)
    stats = jnp.stack([finished.sum(), done.sum()])
    return (params, opt, env_state, obs, ep_ret, key), stats

  def train(key):
    k_net, k_env, k_run = jax.random.split(key, 3)
    obs, env_state = env_reset(k_env)
    params = net.init(k_net, obs)
    carry = (params, tx.init(params), env_state, obs, jnp.zeros(n), k_run)
    carry, stats = jax.lax.scan(iteration, carry, length=updates)
    return carry[0], stats

  return train


# --- jaxlab's PPO as a run uses it ---


_JAXLAB: dict = {}


def jaxlab_run(c, env_name: str, seed: int):
  """``(steady env steps/s, compile s, per-iteration [return, episodes])`` of ``ppo.init`` then
  ``runtime.train`` (chunks of ``ppo.schedule``'s log interval)."""
  spec = (env_name, c.num_envs, c.num_steps, c.total_timesteps)
  if spec not in _JAXLAB:  # later seeds reuse the compiled init and chunks, as a sweep would
    env = ppo.make_env(env_name, c.num_envs, c)
    policy = ppo.make_policy("mlp", env, c)
    config = ppo.PPOConfig.from_config(c, num_updates=ppo.num_updates(c))
    _JAXLAB[spec] = env, policy, config, ppo.make_update(env, policy, config)
  env, policy, config, update = _JAXLAB[spec]
  steps = config.num_updates
  key = jax.random.key(seed)
  t0 = time.perf_counter()
  state = jax.block_until_ready(ppo.init(env, policy, config, key))  # compiled once, cached
  init_s = time.perf_counter() - t0
  loop = runtime.Loop(
    steps,
    log_every=ppo.schedule(steps, 0)[0],
    history=True,
    progress=False,
    units_per_step=c.num_envs * c.num_steps,
  )
  t0 = time.perf_counter()
  state, result = runtime.train(state, update, loop, key=jax.random.fold_in(key, 1))
  wall = time.perf_counter() - t0
  sps = result.summary["steps_per_sec"]
  compile_s = init_s + max(0.0, wall - steps / sps) if sps == sps else init_s + wall
  h = result.history
  finished = np.asarray(h["episodes"]) > 0
  stats = np.stack([np.where(finished, h["episode_return"] * h["episodes"], 0.0), h["episodes"]], 1)
  return sps * c.num_envs * c.num_steps, compile_s, stats


def reference_run(c, env_name: str, seed: int, compiled=None):
  """``(env steps/s, compile s, per-iteration [return, episodes], compiled)`` of the reference;
  ``compiled`` (a previous seed's executable) skips the compilation."""
  key = jax.random.key(seed)
  compile_s = 0.0
  if compiled is None:
    t0 = time.perf_counter()
    compiled = jax.jit(make_train(c, env_name)).lower(key).compile()
    compile_s = time.perf_counter() - t0
  t0 = time.perf_counter()
  _, stats = jax.block_until_ready(compiled(key))
  wall = time.perf_counter() - t0
  updates = max(1, c.total_timesteps // (c.num_envs * c.num_steps))
  return updates * c.num_envs * c.num_steps / wall, compile_s, np.asarray(stats), compiled


def final_return(stats: np.ndarray) -> float:
  """Mean return of the episodes finished in the last 10 % of iterations (NaN if none)."""
  tail = stats[-max(1, len(stats) // 10) :]
  return float(tail[:, 0].sum() / tail[:, 1].sum()) if tail[:, 1].sum() else float("nan")


def t_interval(xs) -> tuple[float, float, float]:
  from jaxlab.core.metrics import t_interval as t

  return t(xs)


def _fmt(xs) -> str:
  m, lo, hi = t_interval(xs)
  return f"{m:.1f} [{lo:.1f}, {hi:.1f}]" if np.isfinite(lo) else f"{m:.1f}"


def bench(env_name: str, n: int, t_len: int, total: int, seeds: int, program: bool = True) -> dict:
  """The reference, jaxlab's loop and (``program``) the command path, per seed in a rotating
  order; prints each seed and the size's summary."""
  import tempfile

  c = bench_config(env_name, n, t_len, total)
  load0 = os.getloadavg()[0]
  rows, compiled = [], None
  kinds = ["ref", "jax", "prog"] if program else ["ref", "jax"]
  for seed in range(seeds):
    row = {}
    for kind in kinds[seed % len(kinds) :] + kinds[: seed % len(kinds)]:
      if kind == "ref":
        r_sps, r_comp, r_stats, compiled = reference_run(c, env_name, seed, compiled)
        row.update(ref=r_sps, ref_c=r_comp, ref_ret=final_return(r_stats))
      elif kind == "jax":
        j_sps, j_comp, j_stats = jaxlab_run(c, env_name, seed)
        row.update(jax=j_sps, jax_c=j_comp, jax_ret=final_return(j_stats))
      else:
        with tempfile.TemporaryDirectory(prefix="bench_ppo_") as wd:
          p = program_run(command_config(c, env_name), env_name, seed, os.path.join(wd, "run"))
        row.update(prog=p["sps"], prog_c=p["compile"], prog_ret=p["eval"])
    rows.append(row)
    extra = (
      f", command path {row['prog']:,.0f} ({row['prog'] / row['ref']:.2f}x, eval return "
      f"{row['prog_ret']:.1f})"
      if program
      else ""
    )
    print(
      f"    seed {seed}: reference {row['ref']:,.0f} env steps/s, jaxlab loop {row['jax']:,.0f} "
      f"({row['jax'] / row['ref']:.2f}x){extra}; returns {row['ref_ret']:.1f} / "
      f"{row['jax_ret']:.1f}",
      flush=True,
    )
  load1 = os.getloadavg()[0]
  col = lambda k: [r[k] for r in rows]
  ratios = [r["jax"] / r["ref"] for r in rows]
  ratio = float(np.median(ratios))
  lines = [
    f"{env_name} N={n} T={t_len} steps={total:,} (seeds 0-{seeds - 1}, load "
    f"{load0:.1f}->{load1:.1f}, {jax.default_backend()})",
    f"  benchmark loop, steady env steps/s: jaxlab {np.median(col('jax')):,.0f}  reference "
    f"{np.median(col('ref')):,.0f}  ratio jaxlab/reference {ratio:.2f} (per seed "
    f"{', '.join(f'{x:.2f}' for x in ratios)})",
    f"  compile s: jaxlab {col('jax_c')[0]:.1f} (init + chunks)  reference {col('ref_c')[0]:.1f}",
    f"  final return (last 10% of iterations, mean [95% CI]): jaxlab {_fmt(col('jax_ret'))}  "
    f"reference {_fmt(col('ref_ret'))}",
  ]
  out = dict(rows=rows, ratio=ratio, load=(load0, load1))
  if program:
    p_ratios = [r["prog"] / r["ref"] for r in rows]
    lines.append(
      f"  command path (ppo.train_run, workdir, experiments.ppo's defaults; wall - compile): "
      f"{np.median(col('prog')):,.0f} env steps/s, ratio command/reference "
      f"{np.median(p_ratios):.2f} (per seed {', '.join(f'{x:.2f}' for x in p_ratios)}), "
      f"compile {np.median(col('prog_c')):.1f} s, held-out eval return {_fmt(col('prog_ret'))}"
    )
    out.update(program_ratio=float(np.median(p_ratios)))
  print("\n".join(lines), flush=True)
  return out


# --- secondary: the Craftax environment alone, random actions ---


def _env_only_rollout(name: str, n: int, steps: int, builtin: bool):
  """craftax's builtin auto-reset (a world generated every step) or jaxlab's optimistic resets."""
  if builtin:
    from craftax.craftax_env import make_craftax_env_from_name

    env = make_craftax_env_from_name(craftax_envs.resolve(name)[0], True)
    params = env.default_params
    num_actions = env.action_space(params).n
    reset = lambda k: jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(k, n), params)[1]

    def step(state, act, k):
      return jax.vmap(env.step, in_axes=(0, 0, 0, None))(
        jax.random.split(k, n), state, act, params
      )[1:3]
  else:
    env = craftax_envs.make(name, n)
    num_actions = env.num_actions
    reset = lambda k: env.reset(k)[1]
    step = lambda state, act, k: env.step(state, act, k)[1:3]

  @jax.jit
  def run(key):
    def body(state, k):
      ka, ks = jax.random.split(k)
      state, reward = step(state, jax.random.randint(ka, (n,), 0, num_actions), ks)
      return state, reward.sum()

    k0, k1 = jax.random.split(key)
    return jax.lax.scan(body, reset(k0), jax.random.split(k1, steps))[1].sum()

  return run


def env_only(name: str, n: int, steps: int) -> None:
  sps = {}
  for builtin in (True, False):
    run = _env_only_rollout(name, n, steps, builtin)
    jax.block_until_ready(run(jax.random.key(0)))  # compiles
    best = float("inf")
    for i in range(3):
      t0 = time.perf_counter()
      jax.block_until_ready(run(jax.random.key(i + 1)))
      best = min(best, time.perf_counter() - t0)
    sps[builtin] = n * steps / best
  print(
    f"  env only, random actions: builtin auto-reset {sps[True]:,.0f} env steps/s, optimistic "
    f"resets {sps[False]:,.0f} ({sps[False] / sps[True]:.1f}x)",
    flush=True,
  )


# --- rejax (github.com/keraJLi/rejax) as the peer: one compiled call each ---

# What rejax's PPO config cannot express of jaxlab's (bench_config), printed with every result.
REJAX_DIFFERENCES = (
  "learning rate: rejax constant, jaxlab annealed linearly to 0 (rejax takes no schedule)",
  "gradient clipping: rejax element-wise at max_grad_norm (optax.clip), jaxlab global norm",
  "optimizer: rejax one Adam per network (actor, critic), eps 1e-8; jaxlab one Adam, eps 1e-5",
  "init: rejax flax defaults (LeCun normal, zero bias); jaxlab orthogonal (sqrt 2, 0.01, 1)",
  "minibatches: rejax a global shuffle of the T x N samples; jaxlab per-environment shuffles",
)
# rejax 0.1.3's Craftax adapter with craftax 1.6: its PPO takes craftax's Discrete action space
# for a continuous one (an isinstance check against gymnax's class) and fails to build
REJAX_CRAFTAX = "rejax's PPO does not build on Craftax (craftax's action space); gymnax envs only"
EVAL_EPISODES = 128  # rejax's evaluation size; jaxlab's side evaluates as many
# env steps per CPU second (all the process's threads) of the last timed call of each side: on a
# machine shared with other jobs, CPU time moves less with the load than wall time does
_LAST_CPU: dict = {}


def rejax_available() -> bool:
  try:
    import rejax  # noqa: F401
  except ImportError:
    return False
  return True


class _DoneEnv:
  """A gymnax >= 1.0 environment (``step`` returns ``terminated, truncated``) with the one
  ``done`` that rejax 0.1 unpacks; done = terminated | truncated, as jaxlab's and PureJaxRL's."""

  def __init__(self, env):
    self.env = env

  def __getattr__(self, name):
    if name == "env":  # during copy.deepcopy (rejax copies its config), before __init__
      raise AttributeError(name)
    return getattr(self.env, name)

  def reset(self, key, params):
    return self.env.reset(key, params)

  def step(self, key, state, action, params):
    obs, state, reward, term, trunc, info = self.env.step(key, state, action, params)
    return obs, state, reward, term | trunc, info


def rejax_algo(c, env_name: str):
  """rejax's ``PPO`` with ``c``'s hyperparameters, one evaluation at the end (none at the start)."""
  from rejax import PPO

  updates = max(1, c.total_timesteps // (c.num_envs * c.num_steps))
  total = updates * c.num_envs * c.num_steps
  if ppo.is_craftax(env_name):  # rejax's own Craftax adapter: craftax's builtin auto-reset
    from rejax.compat.craftax2gymnax import create_craftax

    env, params = create_craftax(craftax_envs.resolve(env_name)[0])
  else:
    env, params = gymnax_envs.import_gymnax().make(gymnax_envs.resolve(env_name))
    env = _DoneEnv(env)
  # params set after create: create deep-copies its arguments, and the Craftax adapter's params
  # (a wrapper delegating attributes to its _base) recurse without end in copy.deepcopy
  return PPO.create(
    env=env,
    num_envs=c.num_envs,
    num_steps=c.num_steps,
    num_epochs=c.epochs,
    num_minibatches=c.minibatches,
    learning_rate=c.lr,
    max_grad_norm=c.max_grad_norm,
    total_timesteps=total,
    eval_freq=total,
    skip_initial_evaluation=True,
    gamma=c.gamma,
    gae_lambda=c.gae_lambda,
    clip_eps=c.clip_eps,
    vf_coef=c.vf_coef,
    ent_coef=c.ent_coef,
    normalize_observations=False,
    agent_kwargs={"activation": c.mlp.activation, "hidden_layer_sizes": tuple(c.mlp.hidden)},
  ).replace(env_params=params)


def rejax_run(c, env_name: str, seed: int, compiled=None):
  """``(env steps/s, compile s, eval return, compiled)`` of rejax's ``train``: the timed call
  trains only (its evaluation callback is a no-op); the final policy then plays
  ``EVAL_EPISODES`` episodes through rejax's own evaluation."""
  algo = rejax_algo(c, env_name)
  timed_algo = algo.replace(eval_callback=lambda a, ts, rng: jnp.zeros(()))
  key = jax.random.PRNGKey(seed)  # rejax splits raw uint32 keys
  compile_s = 0.0
  if compiled is None:
    t0 = time.perf_counter()
    compiled = jax.jit(timed_algo.train).lower(key).compile()
    compile_s = time.perf_counter() - t0
  t0, c0 = time.perf_counter(), time.process_time()
  ts, _ = jax.block_until_ready(compiled(key))
  wall, cpu = time.perf_counter() - t0, time.process_time() - c0
  _, returns = algo.eval_callback(algo, ts, jax.random.PRNGKey(10_000 + seed))
  _LAST_CPU["rejax"] = algo.total_timesteps / cpu
  return algo.total_timesteps / wall, compile_s, float(np.mean(returns)), compiled


def _jaxlab_eval(c, env_name: str, policy, params, seed: int) -> float:
  """Mean return of ``EVAL_EPISODES`` held-out episodes, sampled actions (as rejax evaluates)."""
  from jaxlab.rl.ppo import evaluation as ppo_eval

  spec = ("eval", env_name, id(policy))
  if spec not in _JAXLAB:
    env = ppo.make_env(env_name, EVAL_EPISODES, c)
    _JAXLAB[spec] = ppo_eval.make_evaluate(env, policy, c.eval_steps)
  out = _JAXLAB[spec](params, jax.random.key(10_000 + seed))
  return float(np.mean(out["return"]))


def jaxlab_single_run(c, env_name: str, seed: int):
  """``(env steps/s, compile s, eval return)`` of jaxlab's PPO as ONE compiled call of every
  iteration (the runtime's chunk program, ``runtime.make_chunk_fn``, with one chunk)."""
  spec = ("single", env_name, c.num_envs, c.num_steps, c.total_timesteps)
  compile_s = 0.0
  if spec not in _JAXLAB:
    env = ppo.make_env(env_name, c.num_envs, c)
    policy = ppo.make_policy("mlp", env, c)
    config = ppo.PPOConfig.from_config(c, num_updates=ppo.num_updates(c))
    chunk = runtime.make_chunk_fn(ppo.make_update(env, policy, config))
    init = jax.jit(lambda k: ppo.init(env, policy, config, k))
    t0 = time.perf_counter()
    state = init(jax.random.key(0))
    chunk.compile(state, None, jax.random.key(1), config.num_updates)
    compile_s = time.perf_counter() - t0
    _JAXLAB[spec] = policy, config, chunk, init
  policy, config, chunk, init = _JAXLAB[spec]
  steps = config.num_updates
  key = jax.random.key(seed)
  state = jax.block_until_ready(init(jax.random.fold_in(key, 0)))
  t0, c0 = time.perf_counter(), time.process_time()
  state, _ = chunk(state, None, jax.random.fold_in(key, 1), 0, steps, steps)  # metrics on host
  wall, cpu = time.perf_counter() - t0, time.process_time() - c0
  ret = _jaxlab_eval(c, env_name, policy, state.train.params, seed)
  _LAST_CPU["jaxlab"] = steps * c.num_envs * c.num_steps / cpu
  return steps * c.num_envs * c.num_steps / wall, compile_s, ret


class _CompileClock:
  """Seconds jax spent tracing, lowering and compiling while active (``jax.monitoring``)."""

  events = ("/jax/core/compile/backend_compile_duration", "/jax/core/compile/jaxpr_trace_duration")
  events += ("/jax/core/compile/jaxpr_to_mlir_module_duration",)
  seconds, active, registered = 0.0, False, False

  @classmethod
  def on_duration(cls, event, seconds, **_):
    if cls.active and event in cls.events:
      cls.seconds += seconds

  def __enter__(self):
    if not _CompileClock.registered:
      jax.monitoring.register_event_duration_secs_listener(_CompileClock.on_duration)
      _CompileClock.registered = True
    _CompileClock.seconds, _CompileClock.active = 0.0, True
    return self

  def __exit__(self, *exc):
    _CompileClock.active = False


def command_config(c, env_name: str):
  """``c`` with the evaluation of ``python -m experiments.ppo``'s default run (gymnax: 64
  environments, at most 1000 steps; Craftax: ``get_config()``'s), the rest unchanged."""
  c = c.copy_and_resolve_references()
  if not ppo.is_craftax(env_name):
    d = ppo.gymnax_config()
    c.eval_envs, c.eval_steps, c.eval_every = d.eval_envs, d.eval_steps, d.eval_every
  return c


def program_run(c, env_name: str, seed: int, workdir) -> dict:
  """``python -m experiments.ppo``'s path at its defaults (``ppo.train_run`` with a workdir: the
  schedule's log, evaluation and checkpoint intervals, metrics.csv, TensorBoard, progress bar,
  report): ``{"sps": env steps / (wall - compile), "steady": the runtime's steady rate, "wall",
  "compile", "eval": final eval/return}``."""
  steps = ppo.num_updates(c)
  log_every, _, ckpt_every = ppo.schedule(steps, c.eval_every)
  loop = runtime.Loop(
    steps,
    log_every=log_every,
    ckpt_every=ckpt_every,
    **ppo.loop_options(c, env_name, steps),
  )
  with _CompileClock() as clock:
    t0 = time.perf_counter()
    out = ppo.train_run(c, env_name, "mlp", loop, seed=seed, workdir=workdir)
    wall = time.perf_counter() - t0
  units = steps * c.num_envs * c.num_steps
  s = out.result.summary
  return dict(
    sps=units / max(wall - clock.seconds, 1e-9),
    steady=s["env_steps_per_sec"],
    wall=wall,
    compile=clock.seconds,
    eval=s.get("eval/return", float("nan")),
  )


def bench_rejax(env_name: str, n: int, t_len: int, total: int, seeds: int, program: bool) -> dict:
  """rejax and jaxlab alternately per seed (rejax, jaxlab one call[, jaxlab program])."""
  import tempfile

  c = bench_config(env_name, n, t_len, total)
  c.eval_envs, c.eval_steps = EVAL_EPISODES, 500
  load0 = os.getloadavg()[0]
  rows, compiled = [], None
  for seed in range(seeds):
    # A B, then B A: a load that drifts within a pair favours neither side over the seeds
    if seed % 2 == 0 or compiled is None:
      r_sps, r_comp, r_ret, compiled = rejax_run(c, env_name, seed, compiled)
      j_sps, j_comp, j_ret = jaxlab_single_run(c, env_name, seed)
    else:
      j_sps, j_comp, j_ret = jaxlab_single_run(c, env_name, seed)
      r_sps, r_comp, r_ret, compiled = rejax_run(c, env_name, seed, compiled)
    row = dict(rej=r_sps, jax=j_sps, rej_c=r_comp, jax_c=j_comp, rej_ret=r_ret, jax_ret=j_ret)
    row.update(rej_cpu=_LAST_CPU["rejax"], jax_cpu=_LAST_CPU["jaxlab"])
    if program:
      with tempfile.TemporaryDirectory(prefix="bench_ppo_") as wd:
        p = program_run(command_config(c, env_name), env_name, seed, os.path.join(wd, "run"))
      row.update(prog=p["sps"], prog_steady=p["steady"], prog_c=p["compile"], prog_ret=p["eval"])
    rows.append(row)
    extra = f", program {row['prog']:,.0f} ({row['prog'] / r_sps:.2f}x)" if program else ""
    print(
      f"    seed {seed}: rejax {r_sps:,.0f} env steps/s, jaxlab {j_sps:,.0f} "
      f"({j_sps / r_sps:.2f}x){extra}; eval returns {r_ret:.1f} / {j_ret:.1f}",
      flush=True,
    )
  load1 = os.getloadavg()[0]
  col = lambda k: [r[k] for r in rows]
  ratios = [r["jax"] / r["rej"] for r in rows]
  cpu_ratios = [r["jax_cpu"] / r["rej_cpu"] for r in rows]
  lines = [
    f"{env_name} N={n} T={t_len} steps={total:,} vs rejax ({seeds} seeds, load "
    f"{load0:.1f}->{load1:.1f}, {jax.default_backend()})",
    f"  steady env steps/s, one compiled call: jaxlab {np.median(col('jax')):,.0f}  rejax "
    f"{np.median(col('rej')):,.0f}  per-seed ratios jaxlab/rejax "
    f"{', '.join(f'{x:.2f}' for x in ratios)} (median {np.median(ratios):.2f})",
    f"  env steps per CPU second: jaxlab {np.median(col('jax_cpu')):,.0f}  rejax "
    f"{np.median(col('rej_cpu')):,.0f}  per-seed ratios "
    f"{', '.join(f'{x:.2f}' for x in cpu_ratios)} (median {np.median(cpu_ratios):.2f})",
    f"  compile s: jaxlab {col('jax_c')[0]:.1f} (init + chunk)  rejax {col('rej_c')[0]:.1f}",
    f"  eval return ({EVAL_EPISODES} episodes, sampled actions), mean [95% CI]: jaxlab "
    f"{_fmt(col('jax_ret'))}  rejax {_fmt(col('rej_ret'))}",
  ]
  out = dict(rows=rows, ratio=float(np.median(ratios)), load=(load0, load1))
  out.update(cpu_ratio=float(np.median(cpu_ratios)))
  if program:
    p_ratios = [r["prog"] / r["rej"] for r in rows]
    s_ratios = [r["prog"] / r["jax"] for r in rows]
    lines.append(
      f"  program path (ppo.train_run, workdir, defaults): {np.median(col('prog')):,.0f} env "
      f"steps/s (wall - compile; runtime's steady {np.median(col('prog_steady')):,.0f}), "
      f"compile {col('prog_c')[0]:.1f} s; ratios program/rejax "
      f"{', '.join(f'{x:.2f}' for x in p_ratios)} (median {np.median(p_ratios):.2f}), "
      f"program/one call {np.median(s_ratios):.2f}; eval return {_fmt(col('prog_ret'))}"
    )
    out.update(program_ratio=float(np.median(p_ratios)), program_vs_single=np.median(s_ratios))
  print("\n".join(lines), flush=True)
  return out


# --- flags ---


def num_seeds() -> int:
  """The shared ``--seeds`` as a count: seeds per size (each: one reference and one jaxlab run)."""
  return len(seeds_lib.parse_seeds(flags.FLAGS.seeds or "3"))


def check_flags() -> tuple[str, list[int], int, int]:
  """Every flag, before anything is compiled or timed (ConfigError naming the flag)."""
  for name in UNUSED_FLAGS:
    experiment.require(not flags.FLAGS[name].present, name, "is not used by benchmarks.ppo")
  env_name = ppo.check_env(_ENV.value)
  craftax = ppo.is_craftax(env_name)
  if _PEER.value == "rejax":
    experiment.require(not craftax, "peer", REJAX_CRAFTAX)
    experiment.require(rejax_available(), "peer", "rejax is not installed (pip install rejax)")
  sizes = []
  for v in _NUM_ENVS.value:
    ok = v.strip().isdigit() and int(v) >= 1
    experiment.require(ok, "num_envs", f"sizes must be integers >= 1, got {v!r}")
    sizes.append(int(v))
  experiment.require(bool(sizes), "num_envs", "names no size")
  t_len = _ROLLOUT.value or (64 if craftax else 128)
  total = _steps() or (32_768 if craftax else 1_500_000 if _PEER.value == "rejax" else 500_000)
  experiment.require(_ROLLOUT.value >= 0, "rollout", f"must be >= 0, got {_ROLLOUT.value}")
  experiment.require(
    flags.FLAGS.steps is None or flags.FLAGS.steps >= 1, "steps", f"must be >= 1, got {_steps()}"
  )
  num_seeds()  # refused here, before anything is compiled
  for n in sizes:
    c = bench_config(env_name, n, t_len, total)
    experiment.require(
      t_len % c.minibatches == 0,
      "rollout",
      f"PPO splits the rollout into {c.minibatches} minibatches; {t_len} is not a multiple",
    )
    spec = ppo.make_env(env_name, 1, c)
    ppo.check_memory(c, spec.obs_shape, spec.action_dim, fields=("num_envs", "rollout"))
    experiment.require(
      total >= n * t_len, "steps", f"{total} is less than one iteration ({n} x {t_len})"
    )
  return env_name, sizes, t_len, total


def main(argv):
  del argv
  env_name, sizes, t_len, total = check_flags()
  if not flags.FLAGS["compile_cache"].present:  # compile times are measured: compile every time
    jax.config.update("jax_enable_compilation_cache", False)
  print(f"# benchmarks.ppo on {jax.default_backend()} ({jax.devices()[0].device_kind})", flush=True)
  if _PEER.value == "rejax":
    print("# hyperparameters rejax's config cannot match:\n#   " + "\n#   ".join(REJAX_DIFFERENCES))
  for n in sizes:
    if _PEER.value == "rejax":
      bench_rejax(env_name, n, t_len, total, num_seeds(), _PROGRAM.value)
      continue
    bench(env_name, n, t_len, total, num_seeds(), _PROGRAM.value)
    if _ENV_ONLY.value and ppo.is_craftax(env_name):
      env_only(env_name, n, t_len)


if __name__ == "__main__":
  define_flags()
  experiment.run(main)
