"""Cost of a UHM update against ReBRAC's, and of jaxlab's ReBRAC against FQL's ReBRAC update.

  python -m benchmarks.uhm [--steps=100] [--agents=rebrac,uhm] [--reps=5] [--seeds=4]
  python -m benchmarks.uhm --paper_scale --agents=rebrac,uhm --steps=200     # FQL's 4x512 (GPU)
  python -m benchmarks.uhm --profile        # also: what each piece of a UHM update costs
      networks and batch come from experiments.uhm's config (default 3x256, batch 256;
      --paper_scale sets FQL's 4x512 networks on top of it, as the `:paper` preset;
      --config.<field>=... changes any other field, e.g. --config.batch_size=512)

Every agent's update, and a reference ReBRAC update written here from FQL's public agent
(github.com/seohongpark/fql @ 719d044, agents/rebrac.py; its algorithm, in plain jax + optax, no
code shared with jaxlab), runs as a jitted lax.scan of `--steps` updates on batches drawn by the
same in-jit sampler. Compile excluded; the programs are timed in turn, `--reps` rounds, and the
best round of each is kept (the machine is shared: every program saw the same load, printed
beside the figures). Printed: ms/update of each, jaxlab ReBRAC / FQL ReBRAC (goal <= 1.0),
XLA's FLOP count per full and critic-only update of each (ODE loops unrolled for the count;
--noflops skips it),
UHM / ReBRAC and UHM / FQL ReBRAC (paper, GPU: 2.4 ms / 1.3 ms = 1.8), and the sampler's throughput
(batches/s) against a NumPy gather. With --seeds=S it also times S training seeds vmapped in
one program (as `experiments.uhm --seeds=S`) against S separate runs. The data set is the
embedded OGBench cube-single set when ogbench is installed, else random.
"""

import contextlib
import functools
import os
import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import flags

from jaxlab.core import experiment
from jaxlab.core.errors import require
from jaxlab.rl import uhm
from jaxlab.rl.uhm import agent as uhm_agent
from jaxlab.rl.uhm import offline_data

flags.DEFINE_list("agents", ["rebrac", "uhm"], "Agents to time (rebrac, uhm, ghm, dtd, mbtd).")
flags.DEFINE_bool("paper_scale", False, "FQL's 4x512 actor / critic / flow networks (`:paper`).")
flags.DEFINE_bool("flops", True, "Also print XLA's FLOP count per update (six more compiles).")
flags.DEFINE_integer("reps", 5, "Timing rounds (each program once per round; best round kept).")
FLAGS = flags.FLAGS
_CONFIG = experiment.define_config_file(
  str(pathlib.Path(__file__).resolve().parents[1] / "experiments" / "configs" / "uhm.py")
)
PAPER_DIMS = (512, 512, 512, 512)
FQL = "fql-rebrac"  # the reference program's name in the tables


def _dataset():
  try:
    from jaxlab.envs import ogbench as og

    return og.load(verbose=False).train, "embedded cube-single-play"
  except (ImportError, OSError):  # the ogbench extra (or MuJoCo) is not installed
    rng = np.random.default_rng(0)
    n = 100_000
    return dict(
      observations=rng.normal(size=(n, 28)),
      actions=rng.uniform(-1, 1, (n, 5)),
      rewards=-np.ones(n),
      masks=np.ones(n),
      terminals=np.arange(n) % 1000 == 999,
      next_observations=rng.normal(size=(n, 28)),
    ), "random"


def _load() -> str:
  return "load " + " ".join(f"{v:.1f}" for v in os.getloadavg()) + f" on {os.cpu_count()} cores"


def time_chunk(fn, *args, reps=3):
  """Best of `reps` timed calls (after one untimed call that compiles)."""
  jax.block_until_ready(fn(*args))
  best = float("inf")
  for _ in range(reps):
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    best = min(best, time.perf_counter() - t0)
  return best


def time_interleaved(programs: dict, reps: int) -> dict:
  """{name: (fn, args, updates)} -> {name: best ms/update}; the programs take turns each round."""
  for fn, args, _ in programs.values():
    jax.block_until_ready(fn(*args))  # compile
  best = {name: float("inf") for name in programs}
  for _ in range(reps):
    for name, (fn, args, n) in programs.items():
      t0 = time.perf_counter()
      jax.block_until_ready(fn(*args))
      best[name] = min(best[name], 1e3 * (time.perf_counter() - t0) / n)
  return best


def _agent_config(cfg, agent: str):
  c = cfg.as_configdict()
  c.agent = agent
  return uhm.validate_config(c)


def agent_program(agent: str, cfg, data, steps: int, num_seeds: int = 1):
  """(jitted chunk, its args, updates per call): a lax.scan of `steps` updates of the agent (all
  `num_seeds` vmapped seeds together)."""
  cfg = _agent_config(cfg, agent)
  dims = (data.observations.shape[1], data.actions.shape[1])
  stats = offline_data.obs_stats(data)
  state = uhm.create_seeds(jax.random.key(0), num_seeds, *dims, cfg, obs_stats=stats)
  sample = uhm.make_sample_fn(cfg)
  one = lambda s, k: uhm.update(s, sample(data, k), k)
  # several seeds as `experiments.uhm --seeds` trains them: the runtime's seed axis, UHM's vmap
  step = one if num_seeds == 1 else uhm.seed_vmap(one)
  key = jax.random.key(1) if num_seeds == 1 else jax.random.split(jax.random.key(1), num_seeds)

  @jax.jit
  def chunk(state, key):
    def body(s, i):
      fold = lambda kk: jax.random.fold_in(kk, i)
      k = fold(key) if num_seeds == 1 else jax.vmap(fold)(key)
      return step(s, k)

    return jax.lax.scan(body, state, jnp.arange(steps))

  return chunk, (state, key), steps


def time_agent(agent: str, cfg, data, steps: int, num_seeds: int = 1) -> float:
  """ms per update of one agent (of all `num_seeds` vmapped seeds together), compile excluded."""
  fn, args, n = agent_program(agent, cfg, data, steps, num_seeds)
  return 1e3 * time_chunk(fn, *args) / n


@contextlib.contextmanager
def _counting(full: bool):
  """While tracing for a FLOP count: ``lax.cond`` takes the full-update (or critic-only) branch
  and ``lax.scan`` unrolls, because XLA's cost analysis counts a loop body once whatever its trip
  count (the ODE solves) and a conditional's branches apart from how often each runs."""
  cond, scan = jax.lax.cond, jax.lax.scan
  jax.lax.cond = lambda pred, true_fn, false_fn, *ops: (true_fn if full else false_fn)(*ops)
  jax.lax.scan = functools.partial(scan, unroll=True)
  try:
    yield
  finally:
    jax.lax.cond, jax.lax.scan = cond, scan


def _mflops(fn, *args) -> float:
  cost = jax.jit(fn).lower(*args).compile().cost_analysis()
  return (cost[0] if isinstance(cost, list) else cost)["flops"] / 1e6


def update_mflops(agent: str, cfg, data, branches=(True, False)) -> tuple[float, ...]:
  """XLA's MFLOP count of one ``agent`` update, per branch: (full update, critic-only update)."""
  cfg = _agent_config(cfg, agent)
  dims = (data.observations.shape[1], data.actions.shape[1])
  state = uhm.create(jax.random.key(0), *dims, cfg, obs_stats=offline_data.obs_stats(data))
  batch = uhm.make_sample_fn(cfg)(data, jax.random.key(1))
  out = []
  for full in branches:
    with _counting(full):
      # a new function each time: jit reuses the trace of a function it has seen
      out.append(_mflops(lambda s, b, k: uhm.update(s, b, k), state, batch, jax.random.key(2)))
  return tuple(out)


def fql_mflops(cfg, data) -> tuple[float, float]:
  """The same count for the FQL ReBRAC reference: (full update, critic-only update)."""
  cfg = _agent_config(cfg, "rebrac")
  dims = (data.observations.shape[1], data.actions.shape[1])
  params, opt_state = fql_rebrac_init(jax.random.key(0), *dims, cfg)
  batch = uhm.make_sample_fn(cfg)(data, jax.random.key(1))
  return tuple(
    _mflops(
      lambda p, o, b, k, f=full: fql_rebrac_update(p, o, b, k, cfg, f),
      params,
      opt_state,
      batch,
      jax.random.key(2),
    )
    for full in (True, False)
  )


def print_flops(agents, cfg, data) -> None:
  """MFLOP per update of each agent and of the reference; the mean weighs full and critic-only
  updates as a run does (one full update in actor_freq)."""
  f = cfg.actor_freq
  mean = lambda full, critic: (full + (f - 1) * critic) / f
  counts = {a: update_mflops(a, cfg, data) for a in agents}
  counts[FQL] = fql_mflops(cfg, data)
  print(f"MFLOP per update (XLA's count, ODE loops unrolled; one full update in {f}):")
  for name, (full, critic) in counts.items():
    print(
      f"  {name:10s} full {full:7.0f}  critic-only {critic:7.0f}  mean {mean(full, critic):7.0f}"
    )
  m = {k: mean(*v) for k, v in counts.items()}
  if "rebrac" in m:
    print(f"  jaxlab ReBRAC / FQL ReBRAC {m['rebrac'] / m[FQL]:5.2f}x")
    if "uhm" in m:
      print(f"  UHM / jaxlab ReBRAC        {m['uhm'] / m['rebrac']:5.2f}x")


# ------------------------------------------------------------------ reference: FQL's ReBRAC update
# Written from FQL's agents/rebrac.py and utils/networks.py (read, not copied): GELU MLPs with
# LayerNorm after each hidden activation (critic; the actor only if actor_layer_norm), an ensemble
# of two critics (vmapped parameters), a tanh actor whose mode tanh(mean) acts, ONE Adam over a
# single parameter dict that also holds the target copies (their gradients are zero), the actor
# loss only on full updates (FQL jit-compiles update once per value of full_update: here the
# scan body does actor_freq - 1 critic-only updates and one full one, statically), and the Polyak
# update of both targets after a full update.
def _mlp_params(key, sizes, final_scale=1.0, layer_norm=False):
  layers = []
  for i, (d_in, d_out) in enumerate(zip(sizes[:-1], sizes[1:])):
    last = i == len(sizes) - 2
    scale = final_scale if last else 1.0
    init = jax.nn.initializers.variance_scaling(scale, "fan_avg", "uniform")
    layer = dict(w=init(jax.random.fold_in(key, i), (d_in, d_out)), b=jnp.zeros(d_out))
    if layer_norm and not last:
      layer.update(ln_scale=jnp.ones(d_out), ln_bias=jnp.zeros(d_out))
    layers.append(layer)
  return layers


def _mlp(layers, x):
  for layer in layers[:-1]:
    x = jax.nn.gelu(x @ layer["w"] + layer["b"])
    if "ln_scale" in layer:
      mu = x.mean(-1, keepdims=True)
      var = ((x - mu) ** 2).mean(-1, keepdims=True)
      x = (x - mu) * jax.lax.rsqrt(var + 1e-6) * layer["ln_scale"] + layer["ln_bias"]
  return x @ layers[-1]["w"] + layers[-1]["b"]


def fql_rebrac_init(key, obs_dim: int, act_dim: int, cfg):
  kc, ka = jax.random.split(key)
  critic_sizes = (obs_dim + act_dim, *cfg.value_hidden_dims, 1)
  critic = jax.vmap(lambda k: _mlp_params(k, critic_sizes, layer_norm=cfg.layer_norm))(
    jax.random.split(kc, 2)
  )
  actor_sizes = (obs_dim, *cfg.actor_hidden_dims, act_dim)
  actor = _mlp_params(ka, actor_sizes, cfg.actor_fc_scale, cfg.actor_layer_norm)
  params = dict(critic=critic, actor=actor, target_critic=critic, target_actor=actor)
  return params, optax.adam(cfg.lr).init(params)


def _fql_q(critic, obs, act):
  x = jnp.concatenate([obs, act], -1)
  return jax.vmap(lambda p: _mlp(p, x)[..., 0])(critic)


def _fql_loss(grad_params, params, batch, key, cfg, full_update: bool):
  noise = jax.random.normal(key, batch["actions"].shape) * cfg.actor_noise
  next_a = jnp.tanh(_mlp(params["target_actor"], batch["next_observations"]))
  next_a = jnp.clip(next_a + jnp.clip(noise, -cfg.actor_noise_clip, cfg.actor_noise_clip), -1, 1)
  next_q = _fql_q(params["target_critic"], batch["next_observations"], next_a).min(0)
  next_q = next_q - cfg.alpha_critic * jnp.square(next_a - batch["next_actions"]).sum(-1)
  target = batch["rewards"] + cfg.discount * batch["masks"] * next_q
  q = _fql_q(grad_params["critic"], batch["observations"], batch["actions"])
  loss = jnp.square(q - target).mean()
  if full_update:
    act = jnp.tanh(_mlp(grad_params["actor"], batch["observations"]))
    q_pi = _fql_q(params["critic"], batch["observations"], act).min(0)
    lam = jax.lax.stop_gradient(1.0 / jnp.abs(q_pi).mean())
    bc = jnp.square(act - batch["actions"]).sum(-1)
    loss = loss - (lam * q_pi).mean() + (cfg.alpha_actor * bc).mean()
  return loss


def fql_rebrac_update(params, opt_state, batch, key, cfg, full_update: bool):
  grads = jax.grad(_fql_loss)(params, params, batch, key, cfg, full_update)
  updates, opt_state = optax.adam(cfg.lr).update(grads, opt_state, params)
  params = optax.apply_updates(params, updates)
  if full_update:
    polyak = lambda p, t: jax.tree.map(lambda a, b: cfg.tau * a + (1 - cfg.tau) * b, p, t)
    params = dict(
      params,
      target_critic=polyak(params["critic"], params["target_critic"]),
      target_actor=polyak(params["actor"], params["target_actor"]),
    )
  return params, opt_state


def fql_program(cfg, data, steps: int):
  """(jitted chunk, args, updates per call) of the reference, about `steps` updates (a multiple of
  actor_freq)."""
  cfg = _agent_config(cfg, "rebrac")
  sample = uhm.make_sample_fn(cfg)  # the batches jaxlab's ReBRAC draws
  f = cfg.actor_freq
  groups = max(1, -(-steps // f))
  dims = (data.observations.shape[1], data.actions.shape[1])
  init = fql_rebrac_init(jax.random.key(0), *dims, cfg)

  @jax.jit
  def chunk(carry, key):
    def body(carry, i):
      for j in range(f):  # updates f*i + 1 .. f*i + f: the last one is full
        k = jax.random.fold_in(key, f * i + j)
        carry = fql_rebrac_update(*carry, sample(data, k), k, cfg, j == f - 1)
      return carry, None

    return jax.lax.scan(body, carry, jnp.arange(groups))[0]

  return chunk, (init, jax.random.key(1)), groups * f


# ----------------------------------------------------------------------- profile of a UHM update
def profile_update(cfg, data, agent: str, reps: int) -> None:
  """ms of the jitted pieces of one `agent` update (each piece alone, interleaved, best round)."""
  cfg = _agent_config(cfg, agent)
  dims = (data.observations.shape[1], data.actions.shape[1])
  st = uhm.create(jax.random.key(0), *dims, cfg, obs_stats=offline_data.obs_stats(data))
  batch = uhm.make_sample_fn(cfg)(data, jax.random.key(1))
  key = jax.random.key(2)
  A = uhm_agent
  G = A.value_target(st, batch, key)[0]
  progs = {
    "update, critic-only step": (jax.jit(uhm.update), (st, batch, key), 1),
    "update, full step": (
      jax.jit(uhm.update),
      (st.replace(ac=st.ac.replace(step=st.ac.step + 1)), batch, key),
      1,
    ),
    "  actor-critic step (full)": (
      jax.jit(lambda s, b, g: s.ac.apply_loss(A.actor_critic_loss, s, b, g, True)[0].params),
      (st, batch, G),
      1,
    ),
    "  actor-critic step (critic-only)": (
      jax.jit(lambda s, b, g: s.ac.apply_loss(A.actor_critic_loss, s, b, g, False)[0].params),
      (st, batch, G),
      1,
    ),
    "  value target": (jax.jit(lambda s, b, k: A.value_target(s, b, k)[0]), (st, batch, key), 1),
  }
  if st.flow is not None:
    n = jnp.ones(batch["rewards"].shape, jnp.int32)
    obs, act = batch["observations"], batch["actions"]
    progs.update(
      {
        "    s_e ~ m(.|s,a,n): the ODE sampler": (
          jax.jit(lambda s, k: A._imagine(s, obs, act, n, k)),
          (st, key),
          1,
        ),
        "  flow-model step": (
          jax.jit(lambda s, b, k: s.flow.apply_loss(A.model_loss, s, b, k)[0].params),
          (st, batch, key),
          1,
        ),
        "    one velocity-field evaluation": (
          jax.jit(
            lambda s: s.flow(n.astype(jnp.float32), A._norm(s, obs), A._norm(s, obs), act, n)
          ),
          (st,),
          1,
        ),
      }
    )
    if st.reward is not None:
      progs["  reward-head step"] = (
        jax.jit(lambda s, b: s.reward.apply_loss(A.reward_loss, s, b)[0].params),
        (st, batch),
        1,
      )
  progs["  one critic member forward"] = (
    jax.jit(lambda s: A.q_values(s, batch["observations"], batch["actions"])[0]),
    (st,),
    1,
  )
  ms = time_interleaved(progs, reps)
  print(f"profile of one {agent} update ({_load()}):")
  for name, v in ms.items():
    print(f"  {name:38s} {v:8.2f} ms")


# The benchmark writes nothing and runs one device: these shared flags would be ignored.
UNUSED_FLAGS = ("workdir", "seed", "mesh", "log_every", "ckpt_every", "keep")


def _config():
  c = uhm.validate_config(_CONFIG.value).as_configdict()
  if FLAGS.paper_scale:
    c.actor_hidden_dims = c.value_hidden_dims = c.model_hidden_dims = PAPER_DIMS
  return uhm.validate_config(c)


def _ratio_line(name, num, den, ref):
  return f"  {name:28s} {num / den:5.2f}x   ({ref})"


def _num_seeds() -> int:
  """The shared ``--seeds`` as a count: also time that many vmapped seeds (absent: 1, none)."""
  from jaxlab.core import seeds as seeds_lib

  return len(seeds_lib.parse_seeds(FLAGS.seeds)) if FLAGS.seeds else 1


def main(argv):
  del argv
  steps = FLAGS.steps if FLAGS.steps is not None else 100
  require(steps >= 1, "steps", f"must be >= 1, got {steps}")
  require(FLAGS.reps >= 1, "reps", f"must be >= 1, got {FLAGS.reps}")
  for name in UNUSED_FLAGS:
    require(not FLAGS[name].present, name, "is not used by benchmarks.uhm; remove it")
  cfg = _config()
  batch_size = cfg.batch_size
  num_seeds = _num_seeds()
  agents = experiment.check_list("agents", FLAGS.agents, uhm.AGENTS)
  for agent in agents:  # every agent's networks and batch, before the first is timed
    uhm.check_memory(_agent_config(cfg, agent), 28, 5, num_seeds=num_seeds)
  raw, source = _dataset()
  data = offline_data.make_offline_data(raw)
  dims = "x".join(map(str, cfg.value_hidden_dims))
  print(
    f"backend={jax.default_backend()} data={source} ({data.size} transitions) networks={dims} "
    f"batch={batch_size} updates/chunk={steps} rounds={FLAGS.reps}; {_load()}"
  )
  programs = {agent: agent_program(agent, cfg, data, steps) for agent in agents}
  programs[FQL] = fql_program(cfg, data, steps)
  results = time_interleaved(programs, FLAGS.reps)
  print(f"ms/update, best of {FLAGS.reps} interleaved rounds (after: {_load()}):")
  fql, ref = results[FQL], results.get("rebrac")
  for name, ms in results.items():
    ratio = f"{ms / ref:5.2f}x jaxlab ReBRAC" if ref else ""
    print(f"  {name:10s} {ms:8.2f} ms/update  {ratio}  {ms / fql:5.2f}x FQL ReBRAC")
  print("ratios:")
  if ref:
    print(_ratio_line("jaxlab ReBRAC / FQL ReBRAC", ref, fql, "goal <= 1.0"))
  if "uhm" in results:
    if ref:
      print(_ratio_line("UHM / jaxlab ReBRAC", results["uhm"], ref, "paper, GPU: 2.4/1.3 = 1.8"))
    print(_ratio_line("UHM / FQL ReBRAC", results["uhm"], fql, "paper, GPU: 2.4/1.3 = 1.8"))
  if FLAGS.flops:
    print_flops(agents, cfg, data)
  if FLAGS.profile:
    profile_update(cfg, data, "uhm" if "uhm" in agents else agents[0], FLAGS.reps)
  if num_seeds > 1:
    S = num_seeds
    for agent in agents:
      ms, ms_v = results[agent], time_agent(agent, cfg, data, steps, S)
      per_h = lambda ms_per_update: 3.6e6 / (ms_per_update * 1_000_000)  # 1M-update runs per hour
      print(
        f"  {agent:7s} {S} seeds: vmapped {S * 1e3 / ms_v:9.1f} seed-updates/s vs separate "
        f"{1e3 / ms:9.1f} ({ms_v / (S * ms):.2f}x the time per seed); 1M-update seeds/hour: "
        f"{S * per_h(ms_v):.3f} vs {per_h(ms):.3f}"
      )
  sampler_throughput(raw, data, batch_size)


def sampler_throughput(raw, data, batch_size: int) -> None:
  """The sampler as training uses it (jit + scan) against a NumPy gather of the same batches."""
  # A checksum of every batch keeps XLA from dropping the sampling.
  n = 500

  @jax.jit
  def sample_many(d, key):
    def body(acc, i):
      b = offline_data.sample(d, jax.random.fold_in(key, i), batch_size, 8)
      return acc + jnp.sum(b["observations"]) + jnp.sum(b["window_rewards"]), None

    return jax.lax.scan(body, 0.0, jnp.arange(n))[0]

  jax_bps = n / time_chunk(sample_many, data, jax.random.key(2))
  rng = np.random.default_rng(0)
  raw_np = {k: np.asarray(v) for k, v in raw.items()}
  t0 = time.perf_counter()
  for _ in range(n):
    idx = rng.integers(0, len(raw_np["rewards"]), batch_size)
    _ = {k: v[idx] for k, v in raw_np.items()}
  np_bps = n / (time.perf_counter() - t0)
  print(
    f"sampler (jit+scan, k_max=8 windows): {jax_bps:9.1f} batches/s = "
    f"{jax_bps * batch_size:,.0f} transitions/s; NumPy gather (no windows): {np_bps:9.1f} "
    f"batches/s; ratio {jax_bps / np_bps:.2f}"
  )


if __name__ == "__main__":
  experiment.run(main)
