"""Discrete Adjoint Schrödinger Bridge Sampler (Guo et al., ICML 2026), staged training loop.

Faithful to the public DASBS code (brief §3.2-3.6): alternating controller target/denoising matching and
corrector matching (IPF-like), a FIFO replay buffer of (x0, x1) pairs simulated by tau-leaping with the EMA
controller, AdamW (not reset between stages), EMA with warm-up decay min(decay, (1+n)/(10+n)) copied into
the controller at the end of each controller phase. Deviations (documented choices):
  * the loss is divided by D*N once (the code's extra constant 1/num_repl is dropped; it only rescales lr
    for Adam-free optimisers and is a no-op for Adam up to eps);
  * the corrector keeps no EMA; corr-DM draws t ~ U[0, 1 - corr_dm_eps].

One training step is `update(state, batch=None, key) -> (state, metrics)`; the step index in the state
selects the phase, so the whole schedule runs under `lax.scan` / the core runtime.

    state = train(config, key)                       # config: get_config() ConfigDict
    x, log_rnd = sample(state, key, num_samples)
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.struct as struct
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from jaxlab.core import sharding as shd
from jaxlab.sampling import energies, losses, networks, sampler
from jaxlab.sampling import reference as ref_lib

MODELS = ("ropesit", "tabular")
CTRL_LOSSES = ("tm", "dm")
CORR_LOSSES = ("tm", "dm")
SOURCES = ("uniform", "constant")


def get_config() -> ml_collections.ConfigDict:
  """Defaults = the Ising critical setting of the DASBS README (beta_c, constant source, ctrl-TM /
  corr-DM, lr 5e-4) at L = 8; `experiments/dasbs.py --preset=...` sets the six README settings.

  Full preset (5 x (400 + 200) steps, L = 24): hours on 2 CPU cores, GPU intended:
    python -m experiments.dasbs --target=ising --L=24 --beta=0.4407
  Reduced CPU run (~8-13 min on 2 heavily shared cores, 180-300 steps):
    python -m experiments.dasbs --preset=ising_critical --L=8 --config.num_stages=2 \
        --config.ctrl_steps=100 --config.corr_steps=50 --config.sampling_steps=50 --config.num_repl=4
  """
  c = ml_collections.ConfigDict()
  c.target = "ising"  # 'ising' | 'potts'
  c.L = 8  # lattice side; D = L*L sites (L >= 3)
  c.beta = 0.4407  # inverse temperature
  c.J = 1.0  # coupling
  c.h = 0.0  # Ising field
  c.q = 4  # Potts colours
  c.noise = "log_linear"  # reference schedule: 'const' | 'log_linear'
  c.gamma = 1.0  # reference rate scale gamma
  c.alpha = 0.5  # log_linear offset alpha: gamma(t) = gamma / (alpha + t)
  c.source = "constant"  # 'uniform' (beta_init = 0) | 'constant' (beta_init = inf)
  c.model = "ropesit"  # 'ropesit' | 'tabular' (tiny lattices only)
  c.hidden = 32  # transformer width
  c.depth = 6  # transformer blocks
  c.heads = 4  # attention heads
  c.mlp_ratio = 4  # MLP expansion
  c.rope_theta = 10.0  # 2-D RoPE base
  c.knots = 16  # tabular controller: time knots
  c.batch_size = 64  # pairs per step (global; sharded over the mesh 'data' axis)
  c.num_repl = 8  # independent t per pair
  c.buffer_size = 512  # FIFO replay buffer (pairs)
  c.resample_freq = 20  # simulate batch_size new trajectories every this many steps
  c.sampling_steps = 200  # tau-leaping steps
  c.num_stages = 5  # IPF-like stages (controller phase, then corrector phase)
  c.ctrl_steps = 400  # controller steps per stage
  c.corr_steps = 200  # corrector steps per stage
  c.ctrl_loss = "tm"  # 'tm' (adjoint/target matching) | 'dm' (denoising matching)
  c.corr_loss = "dm"  # 'tm' | 'dm' ('tm' needs source='uniform')
  c.bregman = "tlogt"  # 'tlogt' | '-logt' | 't2'
  c.time_weight = "unif"  # controller-loss time weight: 'unif' (1) | 'gamma' (gamma(t)/N)
  c.dm_eps = 0.01  # ctrl-DM: t ~ U[0, 1 - dm_eps]
  c.corr_dm_eps = 0.01  # corr-DM: t ~ U[0, 1 - corr_dm_eps] (1.0: t = 0, x_t = x0)
  c.lr = 5e-4  # AdamW learning rate (controller and corrector)
  c.weight_decay = 0.0  # AdamW weight decay
  c.ema_decay = 0.9999  # EMA cap (warm-up (1+n)/(10+n))
  return c


@dataclasses.dataclass(frozen=True)
class Spec:
  """The hashable, validated form of a config (static part of the state)."""

  target: energies.Lattice
  sched: ref_lib.Schedule
  source: str
  model: str
  hidden: int
  depth: int
  heads: int
  mlp_ratio: int
  rope_theta: float
  knots: int
  batch_size: int
  num_repl: int
  buffer_size: int
  resample_freq: int
  sampling_steps: int
  num_stages: int
  ctrl_steps: int
  corr_steps: int
  ctrl_loss: str
  corr_loss: str
  bregman: str
  time_weight: str
  dm_eps: float
  corr_dm_eps: float
  lr: float
  weight_decay: float
  ema_decay: float

  @property
  def total_steps(self) -> int:
    return self.num_stages * (self.ctrl_steps + self.corr_steps)


def _check(name, ok, msg):
  if not ok:
    raise ValueError(f"config.{name}: {msg}")


def make_spec(config) -> Spec:
  c = config
  _check("target", c.target in ("ising", "potts"), f"must be 'ising' or 'potts', got {c.target!r}")
  _check("L", int(c.L) >= 3, f"must be >= 3, got {c.L}")
  _check("source", c.source in SOURCES, f"must be one of {SOURCES}, got {c.source!r}")
  _check("model", c.model in MODELS, f"must be one of {MODELS}, got {c.model!r}")
  _check(
    "ctrl_loss", c.ctrl_loss in CTRL_LOSSES, f"must be one of {CTRL_LOSSES}, got {c.ctrl_loss!r}"
  )
  _check(
    "corr_loss", c.corr_loss in CORR_LOSSES, f"must be one of {CORR_LOSSES}, got {c.corr_loss!r}"
  )
  _check(
    "corr_loss",
    not (c.corr_loss == "tm" and c.source == "constant"),
    "'tm' is not allowed with source='constant' (beta_init = inf); use 'dm'",
  )
  _check(
    "time_weight",
    c.time_weight in ("unif", "gamma"),
    f"must be 'unif' or 'gamma', got {c.time_weight!r}",
  )
  _check(
    "bregman", c.bregman in losses.BREGMAN, f"must be one of {losses.BREGMAN}, got {c.bregman!r}"
  )
  for k in (
    "batch_size",
    "num_repl",
    "buffer_size",
    "resample_freq",
    "sampling_steps",
    "num_stages",
    "ctrl_steps",
    "hidden",
    "depth",
    "heads",
    "knots",
  ):
    _check(k, int(c[k]) >= 1, f"must be >= 1, got {c[k]}")
  _check("corr_steps", int(c.corr_steps) >= 0, f"must be >= 0, got {c.corr_steps}")
  _check(
    "buffer_size",
    int(c.buffer_size) >= int(c.batch_size),
    f"must be >= batch_size ({c.batch_size}), got {c.buffer_size}",
  )
  _check("hidden", int(c.hidden) % int(c.heads) == 0, f"must be divisible by heads ({c.heads})")
  _check("dm_eps", 0.0 < c.dm_eps < 1.0, f"must be in (0, 1), got {c.dm_eps}")
  _check("corr_dm_eps", 0.0 < c.corr_dm_eps <= 1.0, f"must be in (0, 1], got {c.corr_dm_eps}")
  _check("lr", c.lr > 0, f"must be > 0, got {c.lr}")
  target = energies.Lattice(c.target, int(c.L), float(c.beta), float(c.J), float(c.h), int(c.q))
  if c.model == "tabular":
    _check(
      "model",
      target.N**target.D <= 4096,
      f"'tabular' needs N^D <= 4096 states, got {target.N}^{target.D}",
    )
  sched = ref_lib.Schedule(c.noise, float(c.gamma), float(c.alpha))
  fields = {f.name for f in dataclasses.fields(Spec)} - {"target", "sched"}
  return Spec(
    target=target, sched=sched, **{k: type(getattr(get_config(), k))(c[k]) for k in fields}
  )


def make_models(spec: Spec):
  t = spec.target
  if spec.model == "tabular":
    return (networks.TabularLogPhi(t.N, t.D, spec.knots), networks.TabularLogPhi(t.N, t.D, 1))
  kw = dict(
    N=t.N,
    L=t.L,
    hidden=spec.hidden,
    depth=spec.depth,
    heads=spec.heads,
    mlp_ratio=spec.mlp_ratio,
    rope_theta=spec.rope_theta,
  )
  return networks.RopeSiT(use_time=True, **kw), networks.RopeSiT(use_time=False, **kw)


class DASBSState(struct.PyTreeNode):
  step: jax.Array
  ctrl_params: Any
  ctrl_ema: Any
  corr_params: Any
  ctrl_opt: Any
  corr_opt: Any
  ema_count: jax.Array
  buf_x0: jax.Array  # buffer_size x D
  buf_x1: jax.Array
  buf_ptr: jax.Array
  buf_count: jax.Array
  last_ess: jax.Array
  last_invalid: jax.Array
  spec: Spec = struct.field(pytree_node=False)


def _optimizer(spec):
  return optax.adamw(spec.lr, weight_decay=spec.weight_decay)


def init_state(config_or_spec, key) -> DASBSState:
  spec = config_or_spec if isinstance(config_or_spec, Spec) else make_spec(config_or_spec)
  return jax.jit(_init_state, static_argnums=0)(spec, key)  # jit: eager flax init is slow on CPU


def _init_state(spec: Spec, key) -> DASBSState:
  ctrl, corr = make_models(spec)
  D = spec.target.D
  x = jnp.zeros((1, D), jnp.int32)
  k1, k2 = jax.random.split(key)
  cp = ctrl.init(k1, x, jnp.zeros((1,)))
  rp = corr.init(k2, x, None)
  opt = _optimizer(spec)
  zb = jnp.zeros((spec.buffer_size, D), jnp.int32)
  return DASBSState(
    step=jnp.zeros((), jnp.int32),
    ctrl_params=cp,
    ctrl_ema=cp,
    corr_params=rp,
    ctrl_opt=opt.init(cp),
    corr_opt=opt.init(rp),
    ema_count=jnp.zeros((), jnp.int32),
    buf_x0=zb,
    buf_x1=zb,
    buf_ptr=jnp.zeros((), jnp.int32),
    buf_count=jnp.zeros((), jnp.int32),
    last_ess=jnp.zeros(()),
    last_invalid=jnp.zeros(()),
    spec=spec,
  )


def _bx(x, mesh):
  return shd.constrain(x, ("batch",) + (None,) * (x.ndim - 1), mesh)


def simulate(spec: Spec, ctrl_params, key, num: int, mesh=None, steps: int | None = None):
  """tau-leaping from the source with controller params; returns the sampler's output dict."""
  ctrl, _ = make_models(spec)
  t = spec.target
  k0, k1 = jax.random.split(key)
  x0 = _bx(sampler.sample_source(k0, spec.source, num, t.D, t.N), mesh)
  fn = lambda tt, x: ctrl.apply(ctrl_params, _bx(x, mesh), tt)
  out = sampler.tau_leap(k1, fn, x0, spec.sched, t.N, steps or spec.sampling_steps)
  out["x0"] = x0
  return out


def make_update(spec: Spec, mesh=None):
  """update(state, batch, key) -> (state, metrics); batch is unused (the data are self-generated)."""
  ctrl, corr = make_models(spec)
  tgt, sched, N, D = spec.target, spec.sched, spec.target.N, spec.target.D
  opt = _optimizer(spec)
  B, R = spec.batch_size, spec.num_repl
  phase_len = spec.ctrl_steps + spec.corr_steps

  def resample(state, key):
    out = simulate(spec, state.ctrl_ema, key, B, mesh)
    idx = (state.buf_ptr + jnp.arange(B)) % spec.buffer_size
    return state.replace(
      buf_x0=state.buf_x0.at[idx].set(out["x0"]),
      buf_x1=state.buf_x1.at[idx].set(out["x1"]),
      buf_ptr=(state.buf_ptr + B) % spec.buffer_size,
      buf_count=jnp.minimum(state.buf_count + B, spec.buffer_size),
      last_ess=sampler.ess(out["log_rnd"]),
      last_invalid=out["invalid_frac"].astype(jnp.float32),
    )

  def draw(state, key):
    """batch_size pairs without replacement from the filled part of the buffer, each repeated R times."""
    k_perm, k_t, k_b = jax.random.split(key, 3)
    u = jax.random.uniform(k_perm, (spec.buffer_size,)) + (
      jnp.arange(spec.buffer_size) >= state.buf_count
    )
    pick = jnp.argsort(u)[:B]
    x0 = jnp.repeat(state.buf_x0[pick], R, 0)
    x1 = jnp.repeat(state.buf_x1[pick], R, 0)
    return _bx(x0, mesh), _bx(x1, mesh), k_t, k_b

  def ctrl_step(state, key):
    x0, x1, k_t, k_b = draw(state, key)
    hi = 1.0 if spec.ctrl_loss == "tm" else 1.0 - spec.dm_eps
    t = jax.random.uniform(k_t, (B * R,), maxval=hi)
    xt = _bx(ref_lib.sample_bridge(k_b, sched, x0, x1, t, N), mesh)
    if spec.ctrl_loss == "tm":
      log_corr1 = corr.apply(state.corr_params, x1, None)
      target = losses.ctrl_tm_log_target(tgt.score(x1), log_corr1, x1, xt)
    else:
      target = losses.ctrl_dm_log_target(sched, x1, xt, t, N)
    target = jax.lax.stop_gradient(target)
    w = sched.rate(t) / N if spec.time_weight == "gamma" else None

    def loss_fn(p):
      return losses.masked_loss(target, ctrl.apply(p, xt, t), xt, spec.bregman, w)

    loss, g = jax.value_and_grad(loss_fn)(state.ctrl_params)
    upd, ctrl_opt = opt.update(g, state.ctrl_opt, state.ctrl_params)
    params = optax.apply_updates(state.ctrl_params, upd)
    n = state.ema_count
    decay = jnp.minimum(spec.ema_decay, (1.0 + n) / (10.0 + n))
    ema = jax.tree.map(lambda e, p: decay * e + (1 - decay) * p, state.ctrl_ema, params)
    return state.replace(ctrl_params=params, ctrl_opt=ctrl_opt, ctrl_ema=ema, ema_count=n + 1), loss

  def corr_step(state, key):
    x0, x1, k_t, k_b = draw(state, key)
    if spec.corr_loss == "tm":
      log_phi0 = ctrl.apply(state.ctrl_params, x0, jnp.zeros((B * R,)))
      target = losses.corr_tm_log_target(
        jnp.zeros_like(log_phi0), log_phi0, x0, x1
      )  # S_mu = 0 (uniform)
    else:
      t = jax.random.uniform(k_t, (B * R,), maxval=1.0 - spec.corr_dm_eps)
      xt = ref_lib.sample_bridge(k_b, sched, x0, x1, t, N)
      target = losses.corr_dm_log_target(sched, x1, xt, t, N)
    target = jax.lax.stop_gradient(target)

    def loss_fn(p):
      return losses.masked_loss(target, corr.apply(p, x1, None), x1, spec.bregman)

    loss, g = jax.value_and_grad(loss_fn)(state.corr_params)
    upd, corr_opt = opt.update(g, state.corr_opt, state.corr_params)
    return state.replace(
      corr_params=optax.apply_updates(state.corr_params, upd), corr_opt=corr_opt
    ), loss

  def update(state: DASBSState, batch, key):
    del batch
    s = state.step
    within = s % phase_len
    is_ctrl = within < spec.ctrl_steps
    local = jnp.where(is_ctrl, within, within - spec.ctrl_steps)
    k_res, k_step = jax.random.split(key)
    # the buffer restarts at the start of every phase
    state = jax.lax.cond(
      local == 0,
      lambda st: st.replace(
        buf_count=jnp.zeros_like(st.buf_count), buf_ptr=jnp.zeros_like(st.buf_ptr)
      ),
      lambda st: st,
      state,
    )
    state = jax.lax.cond(local % spec.resample_freq == 0, resample, lambda st, k: st, state, k_res)
    state, loss = jax.lax.cond(is_ctrl, ctrl_step, corr_step, state, k_step)
    # end of a controller phase: the controller takes the EMA weights
    end_ctrl = is_ctrl & (local == spec.ctrl_steps - 1)
    state = jax.lax.cond(
      end_ctrl, lambda st: st.replace(ctrl_params=st.ctrl_ema), lambda st: st, state
    )
    # chunk means of ctrl_loss / ctrl_frac give the controller loss (likewise for the corrector)
    metrics = {
      "loss": loss,
      "ctrl_loss": jnp.where(is_ctrl, loss, 0.0),
      "corr_loss": jnp.where(is_ctrl, 0.0, loss),
      "ctrl_frac": is_ctrl.astype(jnp.float32),
      "ess": state.last_ess,
      "invalid_frac": state.last_invalid,
      "stage": (s // phase_len).astype(jnp.float32),
    }
    return state.replace(step=s + 1), metrics

  return update


def state_sharding(state: DASBSState, mesh):
  """Everything replicated (the model is tiny); the batch is what is split over 'data'."""
  return jax.tree.map(lambda _: shd.replicated(mesh), state)


def train(
  config, key, mesh=None, workdir=None, num_steps: int | None = None, record=None, **runtime_kw
) -> DASBSState:
  """Runs the full staged schedule. With `workdir`, through `jaxlab.core.runtime.train` (metrics,
  checkpoints, resume; `record` is saved as its config.json); without, as one jitted `lax.scan`."""
  spec = config if isinstance(config, Spec) else make_spec(config)
  k_init, k_run = jax.random.split(key)
  state = init_state(spec, k_init)
  update = make_update(spec, mesh)
  n = spec.total_steps if num_steps is None else num_steps
  if workdir is not None:
    from jaxlab.core import runtime

    sh = state_sharding(state, mesh) if mesh is not None else None
    state, _ = runtime.train(
      state,
      update,
      num_steps=n,
      workdir=workdir,
      key=k_run,
      mesh=mesh,
      state_sharding=sh,
      config=record,
      **runtime_kw,
    )
    return state

  def run(state):
    def body(st, i):
      k_s, k_u = jax.random.split(jax.random.fold_in(k_run, i))  # same keys as the runtime
      st, _ = update(st, None, k_u)
      return st, None

    state, _ = jax.lax.scan(body, state, jnp.arange(n, dtype=jnp.int32))
    return state

  if mesh is not None:
    with jax.set_mesh(mesh):
      sh = state_sharding(state, mesh)
      return jax.jit(run, out_shardings=sh)(jax.device_put(state, sh))
  return jax.jit(run)(state)


def sample(
  state: DASBSState,
  key,
  num_samples: int,
  mesh=None,
  steps: int | None = None,
  use_ema: bool = True,
):
  """(x1 samples num_samples x D, log_rnd) from the trained controller (EMA weights by default)."""
  params = state.ctrl_ema if use_ema else state.ctrl_params
  fn = jax.jit(lambda p, k: simulate(state.spec, p, k, num_samples, mesh, steps))
  out = fn(params, key)
  return out["x1"], out["log_rnd"]
