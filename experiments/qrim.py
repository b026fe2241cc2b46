r"""QRIM reconstruction: quantum minimum finding (simulated) as the inner minimum of robust RL.

Reconstruction, not the paper's algorithm (no QRIM text or code is public; see docs/qrim.md): the
inner ``min_u`` of robust RL is Duerr-Hoyer quantum minimum finding on BBHT search, simulated
classically (``jaxlab.rl.qrim``). Three parts, written to the workdir (default
``runs/qrim/<env>/<set_size>``):

1. query scaling: oracle queries of one minimisation vs |U| = 2^4..2^max_log2 (``trials`` random
   sets each, 95% intervals over them) against the exhaustive |U|; fitted log-log slope;
   ``queries.png`` (log-log);
2. tabular robust value iteration (random (s,a)-rectangular robust MDP, |U| = ``--set_size``):
   the simulated minimiser's values vs exhaustive minimisation, queries per backup;
3. robust PPO (``jaxlab.rl.qrim.robust``) on ``--env`` with U a ``--set_size`` grid of physical
   parameters vs PPO on the nominal parameters, both evaluated on held-out parameters
   (``--steps`` PPO updates; ``--config.robust_ppo=False`` skips this part).

Commands (CPU, 2 busy cores):
  python -m experiments.qrim --env=cartpole --set_size=256     # ~5 min
  python -m experiments.qrim --env=pendulum --set_size=64 --config.robust_ppo=False
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import flags

from jaxlab.core import experiment, plots, runtime
from jaxlab.core.errors import check_config, require
from jaxlab.rl import ppo, qrim
from jaxlab.rl.ppo import evaluation as ppo_eval
from jaxlab.rl.ppo import policies
from jaxlab.rl.qrim import robust as qrim_robust

flags.DEFINE_string("env", "cartpole", "cartpole | pendulum (parameter grids: docs/qrim.md)")
flags.DEFINE_integer("set_size", 256, "|U|: uncertainty-set size of the robust MDP and the grid")
FLAGS = flags.FLAGS


def get_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.mode = "analytic"  # analytic | statevector (same distribution; statevector: |U| <= 2^16)
  c.stop = "adaptive"  # adaptive | budget (Duerr-Hoyer's fixed budget)
  c.cap = 6.0  # adaptive stop: Grover iterations of a fruitless search / sqrt(register)
  c.noise = 0.0  # probability a measurement returns a uniform random index
  c.fail_rate = 0.0  # injected probability of returning a wrong index
  c.max_log2 = 14  # query scaling: |U| = 2^4 .. 2^max_log2
  c.trials = 100  # random sets per size (the intervals are over these)
  c.states, c.actions, c.gamma, c.sweeps = 20, 4, 0.9, 100  # tabular robust MDP
  c.robust_ppo = True  # part 3 (robust vs nominal PPO); False skips it
  c.phases = 10  # robust PPO: worst-case re-selections (every steps / phases updates)
  c.episodes = 4  # robust PPO: rollouts per parameter to estimate J(pi, u)
  c.num_envs, c.num_steps, c.epochs, c.minibatches = 16, 128, 4, 4
  c.lr, c.gae_lambda, c.max_grad_norm, c.ent_coef = 1e-3, 0.95, 0.5, 0.01
  c.eval_steps = 500
  return c


_CONFIG = experiment.define_config(get_config())


def _validate(config, set_size: int):
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
      "eval_steps": "positive",
    },
  )
  search = qrim.SearchConfig(config.mode, config.stop, config.cap, config.noise, config.fail_rate)
  qrim.validate(search, set_size)
  if config.mode == "statevector":
    require(config.max_log2 <= 16, "config.max_log2", "statevector mode allows |U| <= 2^16")
  pc = ppo.PPOConfig(
    num_envs=config.num_envs, num_steps=config.num_steps, epochs=config.epochs,
    minibatches=config.minibatches, lr=config.lr, gae_lambda=config.gae_lambda,
    max_grad_norm=config.max_grad_norm, ent_coef=config.ent_coef, num_updates=1,
  )  # fmt: skip
  ppo.validate(pc, recurrent=False)
  return search, pc


def _interval(x: np.ndarray) -> tuple[float, float, float]:
  m, se = float(np.mean(x)), float(np.std(x) / np.sqrt(len(x)))
  return m, m - 1.96 * se, m + 1.96 * se


def query_scaling(search, config, key):
  """Oracle queries per minimisation for each |U| (one compilation: sets padded with inf)."""
  sizes = [2**e for e in range(4, config.max_log2 + 1)]
  length = sizes[-1]
  mini = jax.jit(jax.vmap(qrim.make_minimizer(search)))
  rows = []
  for i, n in enumerate(sizes):
    k_f, k_run = jax.random.split(jax.random.fold_in(key, i))
    perm = jax.vmap(lambda k: jax.random.permutation(k, n))(jax.random.split(k_f, config.trials))
    f = jnp.full((config.trials, length), jnp.inf).at[:, :n].set(perm)  # min 0; inf = absent
    if search.mode == "statevector":
      f = f[:, :n]
    idx, info = mini(f.astype(jnp.float32), jax.random.split(k_run, config.trials))
    found = np.asarray(jnp.take_along_axis(f, idx[:, None], 1)[:, 0] == 0)
    rows.append(
      {
        "n": n,
        "success": float(found.mean()),
        **{k: _interval(np.asarray(v, float)) for k, v in info.items()},
      }
    )
  return rows


def tabular(search, config, set_size: int, key):
  """Robust value iteration with the simulated minimiser vs exhaustive minimisation."""
  p, r = qrim.random_robust_mdp(key, config.states, config.actions, set_size)
  k = jax.random.fold_in(key, 1)
  v_ex, _, st_ex = qrim.robust_value_iteration(p, r, config.gamma, config.sweeps, k)
  mini = qrim.make_minimizer(search)
  v_q, _, st_q = qrim.robust_value_iteration(p, r, config.gamma, config.sweeps, k, mini)
  return {
    "max_abs_value_error": float(jnp.max(jnp.abs(v_q - v_ex))),
    "mismatch_rate": float(jnp.mean(st_q["mismatch"])),
    "queries_per_backup_quantum": float(jnp.mean(st_q["queries"])),
    "classical_checks_per_backup_quantum": float(jnp.mean(st_q["measurements"])),
    "queries_per_backup_exhaustive": float(jnp.mean(st_ex["queries"])),
  }


def _ppo_parts(env_name, config, pc, thetas, key):
  env = qrim_robust.make(env_name, np.repeat(thetas[:1], config.num_envs, 0))
  policy = policies.make("mlp", env.num_actions, env.action_dim, hidden=(64, 64))
  state = ppo.init(env, policy, pc, key)
  return env, policy, state, jax.jit(ppo.make_update(env, policy, pc))


def robust_ppo(env_name, search, config, pc, set_size: int, steps: int, key):
  """Robust PPO (worst case over U, found by the minimiser) and nominal PPO, on held-out params."""
  grid = qrim_robust.grid(env_name, set_size)
  held = qrim_robust.grid(env_name, set_size, held_out=True)
  nominal = np.asarray([[0.5, 0.1]] if env_name == "cartpole" else [[1.0, 1.0]], np.float32)
  pc = pc.__class__(**{**pc.__dict__, "num_updates": steps})
  mini = jax.jit(qrim.make_minimizer(search))

  def evaluator(thetas, episodes):
    env = qrim_robust.make(env_name, np.repeat(thetas, episodes, 0))
    ev = ppo_eval.make_evaluate(env, policy, config.eval_steps)
    return lambda params, k: qrim_robust.returns_per_param(ev, params, k, len(thetas), episodes)

  out, per_phase = {}, max(1, steps // config.phases)
  for name in ("nominal", "robust"):
    env, policy, state, update = _ppo_parts(env_name, config, pc, nominal, key)
    on_grid, on_held = evaluator(grid, config.episodes), evaluator(held, config.episodes)
    queries, done, phase = [], 0, 0
    while done < steps:
      if name == "robust":
        j = on_grid(state.train.params, jax.random.fold_in(key, 100 + phase))
        u, info = mini(jnp.asarray(j, jnp.float32), jax.random.fold_in(key, 200 + phase))
        queries.append((int(info["queries"]), int(info["measurements"])))
        state = state.replace(env_state=qrim_robust.set_theta(state.env_state, grid[int(u)]))
      n = min(per_phase, steps - done)
      loop = runtime.Loop(
        n, log_every=n, ckpt_every=0, progress=False, tensorboard=False, plot=False
      )
      state, _ = runtime.train(state, update, loop, key=jax.random.fold_in(key, 300 + phase))
      done, phase = done + n, phase + 1
    ret = on_held(state.train.params, jax.random.fold_in(key, 999))
    out[name] = {
      "heldout_mean_return": float(ret.mean()),
      "heldout_worst_return": float(ret.min()),
      "heldout_returns": ret.tolist(),
    }
    if name == "robust":
      q = np.asarray(queries, float)
      out[name]["inner_oracle_queries"] = float(q[:, 0].mean())
      out[name]["inner_classical_checks"] = float(q[:, 1].mean())
      out[name]["inner_queries_exhaustive"] = set_size
    print(f"{name} PPO: held-out mean {ret.mean():.4g}, worst {ret.min():.4g}", flush=True)
  return out


def main(argv):
  del argv
  config = _CONFIG.value
  env_name, set_size = qrim_robust.check_env(FLAGS.env), FLAGS.set_size
  search, pc = _validate(config, set_size)
  run = experiment.common(
    "qrim", default_steps=300, variant=(env_name, set_size),
    unused=("mesh", "keep", "ckpt_every", "profile", "log_every"),
  )  # fmt: skip
  steps = run.steps if config.robust_ppo else 0
  key = jax.random.key(run.seed)
  rows = query_scaling(search, config, jax.random.fold_in(key, 0))
  ns = [r["n"] for r in rows]
  slope = qrim.fit_slope(ns, [r["queries"][0] for r in rows])
  slope_total = qrim.fit_slope(ns, [r["queries"][0] + r["measurements"][0] for r in rows])
  print(f"oracle queries ~ |U|^{slope:.3f} (with the classical checks: ^{slope_total:.3f})")
  tab = tabular(search, config, set_size, jax.random.fold_in(key, 1))
  print(f"robust VI: max |V_q - V_exhaustive| = {tab['max_abs_value_error']:.2e}, "
        f"queries/backup {tab['queries_per_backup_quantum']:.1f} vs {set_size}")  # fmt: skip
  rl = (
    robust_ppo(env_name, search, config, pc, set_size, steps, jax.random.fold_in(key, 2))
    if steps
    else {}
  )
  experiment.prepare_workdir(run.workdir)
  curves = {
    "exhaustive (|U|)": (np.asarray(ns), np.asarray(ns, float)),
    "quantum: oracle queries": tuple(np.asarray([[r["n"], *r["queries"]] for r in rows]).T),
    "quantum: + classical checks": (
      np.asarray(ns),
      np.asarray([r["queries"][0] + r["measurements"][0] for r in rows]),
    ),
  }
  plots.lines(
    run.workdir / "queries.png",
    curves,
    "|U|",
    "queries per inner minimum",
    logx=True,
    logy=True,
    title=f"{config.mode} simulation, 95% CI over {config.trials} sets",
  )
  summary = {
    "reconstruction": "Duerr-Hoyer minimum finding on BBHT search, simulated; not the paper's code",
    "env": env_name, "set_size": set_size, "seed": run.seed, "search": search.__dict__,
    "query_scaling": rows, "slope_oracle_queries": slope, "slope_with_checks": slope_total,
    "tabular_robust_vi": tab, "robust_ppo": rl, "ppo_updates": steps,
  }  # fmt: skip
  runtime.write_summary(run.workdir, summary)
  print(f"-> {run.workdir}/summary.json, queries.png")


if __name__ == "__main__":
  experiment.run(main)
