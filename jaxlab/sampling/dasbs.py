"""Discrete Adjoint Schrödinger Bridge Sampler (Guo et al., ICML 2026, arXiv 2602.08243).

Losses, reference process, sampler and schedule follow the authors' public code
(github.com/AlexandreGUO2001/DASBS, `utils_train.py`, `sampling.py`); `docs/dasbs.md` gives the
equations. Training alternates controller target/denoising matching and corrector matching
(IPF-like stages), with a FIFO replay buffer of (x0, x1) pairs simulated by tau-leaping with the EMA
controller, AdamW (not reset between stages) and, for each network, an EMA with warm-up decay
min(decay, (1+n)/(10+n)) that is copied into the network at the end of its phase (as the authors'
`ema_controller` / `ema_corrector`, not reset between stages). Both networks are core
`TrainState`s; each EMA is the network's `target_params`. Deviations (our choices):
  * the loss is divided by D*N once (the code's extra constant 1/num_repl is dropped; it only
    rescales lr for Adam-free optimisers and is a no-op for Adam up to eps);
  * corr-DM draws t ~ U[0, 1 - corr_dm_eps] (the code uses dm_eps for both). corr_dm_eps = 1
    (t = 0, x_t = x0) regresses on the bridge average of the corr-DM target: the same mean
    given x1, so the same minimiser, with less variance (Rao-Blackwell; docs/dasbs.md), and each
    pair is drawn once;
  * `corr_ema=False` turns the corrector's EMA off (an ablation, not an option of the code);
  * `path_weights='target'` (ours) weights each pair by its exact path weight against the SB of the
    constant source, so the regressions see the SB's coupling instead of the sampler's own
    (docs/dasbs.md, "Reconstruction choices"); `'rnd'` is the authors' `use_log_rnd` (with softmax).
Not implemented (options of the authors' code): the `ada` time weight and annealing of the target
score. Their memoryless mode with ctrl-TM is a setting here (alpha <= 0.01, corr_steps = 0: the
corrector stays 0), except that their tau-leaping grid starts at t = 0.01 (preset
`ising_critical_cpu_memoryless`); UDNS (memoryless + ctrl-DM + `use_log_rnd`) is that setting with
ctrl_loss='dm' and path_weights='rnd'.

One training step is `update(state, batch=None, key) -> (state, metrics)`; the step index in the
state selects the stage and phase, so the whole schedule runs in the core runtime (in memory by
default)::

    state, result = train(config, key)               # config: get_config() ConfigDict
    x, log_rnd = sample(state, key, num_samples)
    energies = state.spec.target.energy(x)

Several training seeds train together, vmapped in one compiled program (`jaxlab.core.seeds`):
``train(config, seeds.seed_keys(seeds), seeds=seeds)`` gives each seed the key its solo run gets
and returns a state with a leading seed axis; `seed_vmap` keeps the step (which picks the stage,
the phase and the refills) unbatched, so those stay branches.
"""

from __future__ import annotations

import dataclasses
import functools

import flax.struct as struct
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from jaxlab.core import resources, runtime
from jaxlab.core import seeds as seeds_lib
from jaxlab.core import sharding as shd
from jaxlab.core.errors import check_config, require
from jaxlab.core.train_state import TrainState
from jaxlab.sampling import energies, losses, networks, sampler
from jaxlab.sampling import metrics as sampler_metrics
from jaxlab.sampling import reference as ref_lib

MODELS = ("ropesit", "tabular")
CTRL_LOSSES = ("tm", "dm")
CORR_LOSSES = ("tm", "dm")
SOURCES = ("uniform", "constant")
TIME_WEIGHTS = ("unif", "gamma")
PATH_WEIGHTS = ("none", "rnd", "target")
LR_SCHEDULES = ("constant", "cosine")


def get_config() -> ml_collections.ConfigDict:
  """Defaults = the Ising critical setting of the authors' README (beta_c, constant source,
  ctrl-TM / corr-DM, lr 5e-4) at L = 8. The six README settings at full size are the presets of
  `experiments/configs/dasbs.py` (`python -m experiments.dasbs --config=...:ising_critical`)."""
  c = ml_collections.ConfigDict()
  c.target = "ising"  # 'ising' | 'potts'
  c.L = 8  # lattice side; D = L*L sites (L >= 3)
  c.beta = 0.4407  # inverse temperature
  c.J = 1.0  # coupling
  c.h = 0.0  # Ising field (must be 0 for Potts)
  c.q = 4  # Potts colours (>= 2; ignored for Ising)
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
  c.corr_dm_eps = 0.01  # corr-DM: t ~ U[0, 1 - corr_dm_eps] (1.0: t = 0, x_t = x0, the
  # Rao-Blackwellised target: same minimiser, less variance)
  c.lr = 5e-4  # AdamW learning rate (controller and corrector)
  c.lr_schedule = "constant"  # 'constant' (the authors') | 'cosine': each network's lr decays
  # over its own updates of the whole run to lr * lr_end_frac (ours: docs/dasbs.md, "Presets")
  c.lr_end_frac = 0.1  # cosine: final lr / lr
  c.weight_decay = 0.0  # AdamW weight decay
  c.ema_decay = 0.9999  # EMA cap (warm-up (1+n)/(10+n))
  c.corr_ema = True  # corrector EMA as the authors' code (False: raw corrector weights, ablation)
  c.exact_corrector = False  # diagnostic (ours): ctrl-TM uses `exact_log_corr`, not the network
  # corrector (constant source only; set corr_steps=0). Not the paper's method: docs/dasbs.md
  c.path_weights = "none"  # weight each pair's loss by B * softmax(log w) over the batch:
  # 'none' (the authors' default) | 'rnd' (their use_log_rnd: log dP*/dP_u of the sampler; in the
  # memoryless setting log nu(x1) + log p_r - log p_u) | 'target' (ours: the exact path weight
  # against the SB, constant source and h = 0 only; docs/dasbs.md, "Reconstruction choices")
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
  lr_schedule: str
  lr_end_frac: float
  weight_decay: float
  ema_decay: float
  corr_ema: bool
  exact_corrector: bool
  path_weights: str

  @property
  def total_steps(self) -> int:
    return self.num_stages * (self.ctrl_steps + self.corr_steps)

  @property
  def phase_steps(self) -> int:
    """Steps per stage (one controller phase, then one corrector phase)."""
    return self.ctrl_steps + self.corr_steps


def _at_least(n: int):
  return lambda v: None if int(v) >= n else f"must be >= {n}, got {v}"


_CHECKS = {
  "target": ("ising", "potts"),
  "L": lambda v: None if int(v) >= 3 else f"must be >= 3 (roll-based bonds double-count), got {v}",
  "beta": "positive",
  "noise": ref_lib.SCHEDULES,
  "gamma": "positive",
  "source": SOURCES,
  "model": MODELS,
  "ctrl_loss": CTRL_LOSSES,
  "corr_loss": CORR_LOSSES,
  "bregman": losses.BREGMAN,
  "time_weight": TIME_WEIGHTS,
  **{
    k: _at_least(1)
    for k in (
      "hidden",
      "depth",
      "heads",
      "mlp_ratio",
      "knots",
      "batch_size",
      "num_repl",
      "buffer_size",
      "resample_freq",
      "sampling_steps",
      "num_stages",
      "ctrl_steps",
    )
  },
  "corr_steps": _at_least(0),
  "rope_theta": "positive",
  "dm_eps": "open_prob",
  "corr_dm_eps": lambda v: None if 0.0 < v <= 1.0 else f"must be in (0, 1], got {v}",
  "lr": "positive",
  "lr_schedule": LR_SCHEDULES,
  "lr_end_frac": "prob",
  "weight_decay": "nonneg",
  "ema_decay": "prob",
  "corr_ema": (True, False),
  "exact_corrector": (True, False),
  "path_weights": PATH_WEIGHTS,
}


def _check_combinations(c) -> None:
  """Checks that involve several fields; each error names the field to change."""
  require(
    c.noise != "log_linear" or c.alpha > 0,
    "config.alpha",
    f"log_linear noise needs alpha > 0, got {c.alpha}",
  )
  if c.target == "potts":
    require(int(c.q) >= 2, "config.q", f"Potts needs q >= 2 colours, got {c.q}")
    require(c.h == 0.0, "config.h", f"the field h is Ising-only; Potts needs h = 0, got {c.h}")
  require(
    not (c.corr_loss == "tm" and c.source == "constant"),
    "config.corr_loss",
    "'tm' is not allowed with source='constant' (beta_init = inf); use 'dm'",
  )
  require(
    int(c.buffer_size) >= int(c.batch_size),
    "config.buffer_size",
    f"must be >= batch_size ({c.batch_size}), got {c.buffer_size}",
  )
  require(
    int(c.hidden) % int(c.heads) == 0,
    "config.hidden",
    f"must be divisible by heads ({c.heads}), got {c.hidden}",
  )
  if c.exact_corrector:
    require(
      c.source == "constant" and c.ctrl_loss == "tm" and c.h == 0.0,
      "config.exact_corrector",
      "the closed form needs source='constant', ctrl_loss='tm' and h = 0, got "
      f"source={c.source!r}, ctrl_loss={c.ctrl_loss!r}, h={c.h}",
    )
  if c.path_weights == "target":
    require(
      c.source == "constant" and c.h == 0.0,
      "config.path_weights",
      "'target' weights are exact only for source='constant' with h = 0 (phi_0 equal on the "
      f"ground states), got source={c.source!r}, h={c.h}",
    )
  if c.model == "tabular":
    n, d = (2 if c.target == "ising" else int(c.q)), int(c.L) ** 2
    require(n**d <= 4096, "config.model", f"'tabular' needs N^D <= 4096 states, got {n}^{d}")


def validate_config(config) -> ml_collections.FrozenConfigDict:
  """Raises `ConfigError` naming the bad field (e.g. `config.beta`); returns ``config``."""
  check_config(config, _CHECKS)  # also: every float field finite
  _check_combinations(config)
  return ml_collections.FrozenConfigDict(config)


def make_spec(config) -> Spec:
  """Validates a config (`validate_config`) -> `Spec`."""
  if isinstance(config, Spec):
    return config
  validate_config(config)
  c = config
  target = energies.Lattice(c.target, int(c.L), float(c.beta), float(c.J), float(c.h), int(c.q))
  sched = ref_lib.Schedule(c.noise, float(c.gamma), float(c.alpha))
  defaults = get_config()
  fields = {f.name for f in dataclasses.fields(Spec)} - {"target", "sched"}
  return Spec(target=target, sched=sched, **{k: type(defaults[k])(c[k]) for k in fields})


def memory_model(spec: Spec) -> tuple[float, float, float]:
  """Bytes of (the parameters and optimiser state, one training row, one sampled row), where a
  row is one path of D sites (training runs batch_size x num_repl of them at once).

  Calibrated against XLA's memory analysis of the compiled training chunk (`runtime.chunk_bytes`)
  and of `simulate` on CPU, L = 4-24, hidden 32/64, heads 4/8, depth 3/6, Ising and Potts:
  within 3 % (tests/test_dasbs_memory.py). Training keeps every layer's activations for the
  backward pass: about 4 (4 + mlp_ratio) floats per hidden unit and site, and 3.2 D x D arrays
  per head (attention's logits and probabilities and their gradient). Sampling holds one layer's
  (the logits of one head at a time) and the tau-leaping state, about 3.2 (4 + mlp_ratio) floats
  per hidden unit and site."""
  t = spec.target
  if spec.model == "tabular":
    row = 4 * t.D * t.N * 8
    return 4 * 4 * spec.knots * t.D * t.N, row, row
  out = 4 * t.D * t.N * 8  # log phi, targets and masks (B x D x N)
  width = spec.hidden * (4 + spec.mlp_ratio)
  train_row = spec.depth * 4 * t.D * (4 * width + 3.2 * spec.heads * t.D) + out
  sample_row = 4 * t.D * (3.2 * width + spec.heads * t.D) + out
  params = 4 * 4 * spec.depth * spec.hidden**2 * (4 + 2 * spec.mlp_ratio) * 2
  return params, train_row, sample_row


def training_bytes(spec: Spec) -> float:
  """Bytes one training step needs (`memory_model`) for its batch_size x num_repl paths."""
  params, train_row, _ = memory_model(spec)
  return params + spec.batch_size * spec.num_repl * train_row


def check_memory(spec: Spec, num_samples: int = 0, samples_field: str = "num_samples", devices=1):
  """Refuses a spec whose arrays cannot fit, before anything is built (`resources.check_fits`):
  the model's activations for one training batch (batch_size x num_repl paths of D sites, the
  backward pass included: `memory_model`) or ``num_samples`` simulated paths, and the replay
  buffer."""
  t = spec.target
  for field in ("batch_size", "num_repl", "buffer_size", "hidden", "sampling_steps"):
    resources.check_int32(f"config.{field}", getattr(spec, field))
  resources.check_int32("config.L", t.D, "the number of sites")
  params, per_row, sample_row = memory_model(spec)
  resources.check_fits(params, "config.hidden", "the parameters and optimiser state")
  field = "config.L" if spec.model != "tabular" else "config.knots"
  what = f"the model on one path of {t.D} sites"
  resources.check_fits(params + per_row, field, what, devices=devices)
  rows = spec.batch_size * spec.num_repl
  what = f"the model's activations on {rows} paths of {t.D} sites (one training step)"
  resources.check_fits(training_bytes(spec), "config.batch_size", what, devices=devices)
  if num_samples:  # sample_paths simulates in batches of the training batch; outputs stay small
    at_once = min(num_samples, spec.batch_size * spec.num_repl)
    what = (
      f"the model's activations on {at_once} sampled paths at a time and {num_samples} paths "
      f"of {t.D} sites kept"
    )
    nbytes = params + at_once * sample_row + num_samples * t.D * 4 * 8
    resources.check_fits(nbytes, samples_field, what, devices=devices)
  what = f"the replay buffer of {spec.buffer_size} pairs of {t.D} sites"
  resources.check_fits(2 * 4 * spec.buffer_size * t.D, "config.buffer_size", what)


def make_models(spec: Spec):
  """(controller, corrector) linen modules: log phi(t, x) and log hat-phi(x), both BxD -> BxDxN."""
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
  step: jax.Array  # global step: selects the stage and the phase
  ctrl: TrainState  # controller; target_params is its EMA, ctrl.step counts the EMA updates
  corr: TrainState  # corrector; target_params is its EMA, corr.step counts its EMA updates
  buf_x0: jax.Array  # buffer_size x D
  buf_x1: jax.Array
  buf_ptr: jax.Array
  buf_count: jax.Array
  buf_logw: jax.Array  # buffer_size: log path weight of each pair ('path_weights'; 0 for 'none')
  last_ess: jax.Array  # ESS of the tau-leaping log-RND of the last resample
  last_invalid: jax.Array  # fraction of invalid tau-leap rows in the last resample
  spec: Spec = struct.field(pytree_node=False)


def init_state(config_or_spec, key) -> DASBSState:
  spec = make_spec(config_or_spec)
  return jax.jit(_init_state, static_argnums=0)(spec, key)  # jit: eager flax init is slow on CPU


def optimizers(spec: Spec) -> tuple[optax.GradientTransformation, ...]:
  """(controller, corrector) AdamW. With 'cosine' each lr decays to lr * lr_end_frac over that
  network's updates in the whole run (num_stages x its phase steps: it counts only its own)."""

  def adamw(updates: int):
    lr = spec.lr
    if spec.lr_schedule == "cosine":
      lr = optax.cosine_decay_schedule(spec.lr, max(updates, 1), alpha=spec.lr_end_frac)
    return optax.adamw(lr, weight_decay=spec.weight_decay)

  return adamw(spec.num_stages * spec.ctrl_steps), adamw(spec.num_stages * spec.corr_steps)


def _init_state(spec: Spec, key) -> DASBSState:
  ctrl, corr = make_models(spec)
  D = spec.target.D
  x = jnp.zeros((1, D), jnp.int32)
  k1, k2 = jax.random.split(key)
  tx_ctrl, tx_corr = optimizers(spec)
  zb = jnp.zeros((spec.buffer_size, D), jnp.int32)
  return DASBSState(
    step=jnp.zeros((), jnp.int32),
    ctrl=TrainState.create(ctrl, ctrl.init(k1, x, jnp.zeros((1,)))["params"], tx_ctrl, target=True),
    corr=TrainState.create(corr, corr.init(k2, x, None)["params"], tx_corr, target=True),
    buf_x0=zb,
    buf_x1=zb,
    buf_ptr=jnp.zeros((), jnp.int32),
    buf_count=jnp.zeros((), jnp.int32),
    buf_logw=jnp.zeros((spec.buffer_size,), jnp.float32),
    last_ess=jnp.zeros(()),
    last_invalid=jnp.zeros(()),
    spec=spec,
  )


def _bx(x, mesh):
  return shd.constrain(x, ("batch",) + (None,) * (x.ndim - 1), mesh)


def simulate(
  spec: Spec, ctrl: TrainState, params, key, num: int, mesh=None, steps: int | None = None
):
  """tau-leaping from the source with controller `params`; returns the sampler's output dict."""
  t = spec.target
  k0, k1 = jax.random.split(key)
  x0 = _bx(sampler.sample_source(k0, spec.source, num, t.D, t.N), mesh)
  fn = lambda tt, x: ctrl(_bx(x, mesh), tt, params=params)
  out = sampler.tau_leap(k1, fn, x0, spec.sched, t.N, steps or spec.sampling_steps)
  out["x0"] = x0
  return out


def _ema_decay(spec: Spec, n):
  """The authors' warm-up for the n-th EMA update (n = 1, 2, ...: their counter is incremented
  before use): min(cap, (1 + n) / (10 + n)), so the first update has decay 2/11."""
  return jnp.minimum(spec.ema_decay, (1.0 + n) / (10.0 + n))


def memoryless(spec: Spec) -> bool:
  """The authors' memoryless setting: log-linear noise with alpha <= 0.01 and no corrector."""
  return spec.sched.kind == "log_linear" and spec.sched.alpha <= 0.01 and spec.corr_steps == 0


def path_log_weights(spec: Spec, out: dict):
  """log w per simulated path (B) for `spec.path_weights`, from a `sampler.tau_leap` output.

  'rnd' is the authors' `log_dp_star_dp_u`: the discretisation log-RND, except in the memoryless
  setting, where log dP*/dP^r is replaced by log nu(x1). 'target' is P*(path) / P_u(path) on the
  tau-leaping grid for the SB P* of the constant source: P*(x0, x1) = nu(x1) p^r(x0 | x1), so
  log w = log nu(x1) - log p^r_1(x1) + log p_r - log p_u (`metrics.path_is_log_weights`)."""
  if spec.path_weights == "none":
    return jnp.zeros_like(out["log_rnd"])
  if spec.path_weights == "target":
    return sampler_metrics.path_is_log_weights(spec.target, spec.sched, spec.source, out)
  if memoryless(spec):
    return spec.target.log_prob_unnorm(out["x1"]) + out["log_p_r"] - out["log_p_u"]
  return out["log_rnd"]


def _resample(spec: Spec, mesh, state: DASBSState, key) -> DASBSState:
  """Simulates batch_size paths with the EMA controller into the FIFO buffer."""
  B = spec.batch_size
  out = simulate(spec, state.ctrl, state.ctrl.target_params, key, B, mesh)
  idx = (state.buf_ptr + jnp.arange(B)) % spec.buffer_size
  return state.replace(
    buf_x0=state.buf_x0.at[idx].set(out["x0"]),
    buf_x1=state.buf_x1.at[idx].set(out["x1"]),
    buf_logw=state.buf_logw.at[idx].set(path_log_weights(spec, out).astype(jnp.float32)),
    buf_ptr=(state.buf_ptr + B) % spec.buffer_size,
    buf_count=jnp.minimum(state.buf_count + B, spec.buffer_size),
    last_ess=sampler.ess(out["log_rnd"]),
    last_invalid=out["invalid_frac"].astype(jnp.float32),
  )


def _draw(spec: Spec, mesh, state: DASBSState, key, repl: int | None = None):
  """batch_size pairs without replacement from the filled part of the buffer, each ``repl``
  (default num_repl) times, keys for t and the bridge, and the pairs' loss weights
  B * softmax(log w) over the drawn pairs (all 1 with path_weights='none'), as the authors'
  `get_path_weights`."""
  k_perm, k_t, k_b = jax.random.split(key, 3)
  filled = jnp.arange(spec.buffer_size) < state.buf_count
  pick = jnp.argsort(jax.random.uniform(k_perm, (spec.buffer_size,)) + ~filled)[: spec.batch_size]
  repl = spec.num_repl if repl is None else repl
  x0 = jnp.repeat(state.buf_x0[pick], repl, 0)
  x1 = jnp.repeat(state.buf_x1[pick], repl, 0)
  w = jnp.repeat(spec.batch_size * jax.nn.softmax(state.buf_logw[pick]), repl, 0)
  return _bx(x0, mesh), _bx(x1, mesh), k_t, k_b, _bx(w, mesh)


def exact_log_corr(spec: Spec, x_BxD):
  """log hat-phi_1(x^{d<-n}) - log hat-phi_1(x) (BxDxN) of the SB for the constant source.

  The source puts 1/N on each all-g configuration; with h = 0 the target and the reference are
  symmetric under relabelling the values, so phi_0 is equal on them and
  hat-phi_1(x) ∝ sum_g p_{1|0}(x | g...g) = sum_g B^{m_g} A^{D - m_g}, m_g = #{d: x^d = g}, with A,
  B the reference's per-site jump / stay probabilities over [0, 1]. A diagnostic (ours): it
  separates the controller's error from the corrector's (docs/dasbs.md)."""
  N, D = spec.target.N, spec.target.D
  la, lb = ref_lib.log_AB(spec.sched, 0.0, 1.0, N)
  g = jnp.arange(N)
  m_BxG = (x_BxD[..., None] == g).sum(1).astype(jnp.float32)
  lse = lambda m: jax.nn.logsumexp(m * lb + (D - m) * la, axis=-1)
  # the jump x^d -> n moves one site from value x^d to value n
  m_BxDxNxG = (
    m_BxG[:, None, None, :]
    - (x_BxD[..., None, None] == g).astype(jnp.float32)
    + (jnp.arange(N)[:, None] == g).astype(jnp.float32)
  )
  out = lse(m_BxDxNxG) - lse(m_BxG)[:, None, None]
  return jnp.where(losses.off_mask(x_BxD, N), out, 0.0)


def _ctrl_step(spec: Spec, mesh, state: DASBSState, key):
  """One controller step (ctrl-TM or ctrl-DM) and its EMA update."""
  sched, N = spec.sched, spec.target.N
  x0, x1, k_t, k_b, w_path = _draw(spec, mesh, state, key)
  hi = 1.0 if spec.ctrl_loss == "tm" else 1.0 - spec.dm_eps
  t = jax.random.uniform(k_t, x0.shape[:1], maxval=hi)
  xt = _bx(ref_lib.sample_bridge(k_b, sched, x0, x1, t, N), mesh)
  if spec.ctrl_loss == "tm":
    log_corr = exact_log_corr(spec, x1) if spec.exact_corrector else state.corr(x1)
    target = losses.ctrl_tm_log_target(spec.target.score(x1), log_corr, x1, xt)
  else:
    target = losses.ctrl_dm_log_target(sched, x1, xt, t, N)
  target = jax.lax.stop_gradient(target)
  w = w_path * (sched.rate(t) / N if spec.time_weight == "gamma" else 1.0)

  def loss_fn(params):
    loss = losses.masked_loss(target, state.ctrl(xt, t, params=params), xt, spec.bregman, w)
    return loss, loss

  decay = _ema_decay(spec, state.ctrl.step + 1)  # ctrl.step = EMA updates done before this one
  ctrl, loss = state.ctrl.apply_loss(loss_fn)
  return state.replace(ctrl=ctrl.update_target(tau=1.0 - decay)), loss


def _corr_step(spec: Spec, mesh, state: DASBSState, key):
  """One corrector step (corr-TM or corr-DM); the controller is frozen."""
  sched, N = spec.sched, spec.target.N
  # corr-TM and corr-DM with t = 0 draw no t: replicated pairs would be exact copies (the same
  # loss and gradient at num_repl x the cost)
  no_t = spec.corr_loss == "tm" or spec.corr_dm_eps == 1.0
  x0, x1, k_t, k_b, w = _draw(spec, mesh, state, key, 1 if no_t else None)
  if spec.corr_loss == "tm":  # S_mu = 0: the uniform source
    log_phi0 = state.ctrl(x0, jnp.zeros(x0.shape[:1]))
    target = losses.corr_tm_log_target(jnp.zeros_like(log_phi0), log_phi0, x0, x1)
  else:
    t = jax.random.uniform(k_t, x0.shape[:1], maxval=1.0 - spec.corr_dm_eps)
    xt = ref_lib.sample_bridge(k_b, sched, x0, x1, t, N)
    target = losses.corr_dm_log_target(sched, x1, xt, t, N)
  target = jax.lax.stop_gradient(target)

  def loss_fn(params):
    loss = losses.masked_loss(target, state.corr(x1, params=params), x1, spec.bregman, w)
    return loss, loss

  decay = _ema_decay(spec, state.corr.step + 1) if spec.corr_ema else 0.0
  corr, loss = state.corr.apply_loss(loss_fn)
  return state.replace(corr=corr.update_target(tau=1.0 - decay)), loss


def _update(spec: Spec, mesh, state: DASBSState, batch, key):
  del batch
  s = state.step
  within = s % spec.phase_steps
  is_ctrl = within < spec.ctrl_steps
  local = jnp.where(is_ctrl, within, within - spec.ctrl_steps)
  k_res, k_step = jax.random.split(key)
  restart = local == 0  # the buffer restarts at the start of every phase
  state = state.replace(
    buf_count=jnp.where(restart, 0, state.buf_count), buf_ptr=jnp.where(restart, 0, state.buf_ptr)
  )
  resample = functools.partial(_resample, spec, mesh)
  state = jax.lax.cond(local % spec.resample_freq == 0, resample, lambda st, k: st, state, k_res)
  ctrl_step, corr_step = (functools.partial(f, spec, mesh) for f in (_ctrl_step, _corr_step))
  state, loss = jax.lax.cond(is_ctrl, ctrl_step, corr_step, state, k_step)
  # end of a phase: its network takes the EMA weights
  end_ctrl = is_ctrl & (local == spec.ctrl_steps - 1)
  end_corr = ~is_ctrl & (local == spec.corr_steps - 1)
  take = lambda ts, end: ts.replace(
    params=jax.tree.map(lambda e, p: jnp.where(end, e, p), ts.target_params, ts.params)
  )
  metrics = {
    "loss": loss,  # the active phase's loss (controller or corrector)
    "phase": 1.0 - is_ctrl.astype(jnp.float32),  # 0 = controller, 1 = corrector
    "stage": (s // spec.phase_steps).astype(jnp.float32),
    "ess": state.last_ess,
    "invalid_frac": state.last_invalid,
  }
  ctrl, corr = take(state.ctrl, end_ctrl), take(state.corr, end_corr)
  return state.replace(step=s + 1, ctrl=ctrl, corr=corr), metrics


def make_update(spec: Spec, mesh=None):
  """update(state, batch, key) -> (state, metrics); batch is unused (the data are self-made)."""
  return functools.partial(_update, spec, mesh)


def seed_vmap(fn):
  """DASBS's transform over the runtime's seed axis (`runtime.train(..., seed_vmap=...)`).

  Every seed is at the same step: passing it unbatched keeps `update`'s lax.conds on the step
  (controller or corrector phase, buffer refill) branches, where vmap would turn a cond on a
  batched predicate into both branches and a select (a refill every step)."""

  def batched(states, keys):
    step = states.step[0]
    return jax.vmap(lambda state, key: fn(state.replace(step=step), key))(states, keys)

  return batched


def loss_by_phase(history) -> dict[str, np.ndarray]:
  """Per-step controller and corrector losses from `Loop(history=True)` metrics, each NaN outside
  its own phase, so a plot shows gaps there instead of a drop to zero."""
  ctrl = np.asarray(history["phase"]) < 0.5
  loss = np.asarray(history["loss"], np.float64)
  return {"ctrl_loss": np.where(ctrl, loss, np.nan), "corr_loss": np.where(ctrl, np.nan, loss)}


def state_sharding(state: DASBSState, mesh):
  """Everything replicated (the model is tiny); the batch is what is split over 'data'."""
  return jax.tree.map(lambda _: shd.replicated(mesh), state)


def default_loop(spec: Spec, num_steps: int | None = None, **overrides) -> runtime.Loop:
  """In-memory schedule: the whole run as one jitted chunk, no files, no progress bar."""
  n = spec.total_steps if num_steps is None else num_steps
  kw = dict(
    num_steps=n, log_every=max(n, 1), ckpt_every=0, progress=False, tensorboard=False, plot=False
  )
  return runtime.Loop(**{**kw, **overrides})


def train(
  config,
  key,
  *,
  mesh=None,
  workdir=None,
  loop: runtime.Loop | None = None,
  record=None,
  eval_fn=None,
  seeds=None,
) -> tuple[DASBSState, runtime.Result]:
  """Runs the staged schedule through `jaxlab.core.runtime.train`; returns `(state, result)`.

  Without `workdir` it runs in memory (`default_loop`: one chunk, no files); with one, the runtime
  writes metrics and checkpoints and resumes, and `record` is saved as its config.json. Step i uses
  `fold_in(k_run, i)` with `k_init, k_run = split(key)`, so both paths give the same state.
  `eval_fn(state, step) -> dict` runs every `loop.eval_every` steps (it draws no training keys).

  `seeds` (more than one): those seeds train together, vmapped in one compiled program on one
  device; `key` then holds one raw key per seed (`jaxlab.core.seeds.seed_keys`), each what the
  seed's solo run is given, the state has a leading seed axis and `eval_fn` returns arrays
  ``[seeds]`` (`runtime.train(seeds=...)`).
  """
  spec = make_spec(config)
  if seeds is not None and len(seeds) > 1:
    require(mesh is None, "seeds", "several seeds train vmapped on one device; drop --mesh")
    k_init, k_run = jnp.moveaxis(jax.vmap(jax.random.split)(key), 1, 0)
    state = seeds_lib.init(functools.partial(_init_state, spec), k_init)
    return runtime.train(
      state,
      make_update(spec),
      loop or default_loop(spec),
      key=k_run,
      workdir=workdir,
      config=record,
      eval_fn=eval_fn,
      seeds=tuple(seeds),
      seed_vmap=seed_vmap,
    )
  k_init, k_run = jax.random.split(key)
  state = init_state(spec, k_init)
  sh = state_sharding(state, mesh) if mesh is not None else None
  return runtime.train(
    state,
    make_update(spec, mesh),
    loop or default_loop(spec),
    key=k_run,
    workdir=workdir,
    mesh=mesh,
    state_sharding=sh,
    config=record,
    eval_fn=eval_fn,
  )


def sample_paths(
  state: DASBSState,
  key,
  num_samples: int,
  mesh=None,
  steps: int | None = None,
  batch_size: int | None = None,
) -> dict:
  """The sampler's output dict for `num_samples` paths of the EMA controller, simulated in batches
  of `batch_size` (default: the training batch, batch_size * num_repl, which fits in memory).

  Per-path arrays (`x0`, `x1`, `log_rnd`, `log_p_u`, `log_p_r`, ...) are concatenated; the path
  statistics (`invalid_frac`, `jumps_per_site`) are averaged over the batches.

  A state with a seed axis (`train(..., seeds=...)`) samples every seed in one vmapped program;
  `key` then holds one key per seed and every output gets a leading seed axis.
  """
  spec = state.spec
  bs = min(num_samples, batch_size or spec.batch_size * spec.num_repl)
  sim = lambda p, k: simulate(spec, state.ctrl, p, k, bs, mesh, steps)
  seeded = jnp.ndim(state.step) == 1
  fn = jax.jit(jax.vmap(sim) if seeded else sim)
  fold = (lambda i: seeds_lib.stream(key, i)) if seeded else (lambda i: jax.random.fold_in(key, i))
  outs = [fn(state.ctrl.target_params, fold(i)) for i in range(-(-num_samples // bs))]
  lead = int(seeded)  # the path axis follows the seed axis
  cut = (slice(None),) * lead + (slice(num_samples),)
  return {
    k: (
      jnp.concatenate([o[k] for o in outs], axis=lead)[cut]
      if jnp.ndim(outs[0][k]) > lead
      else jnp.mean(jnp.stack([o[k] for o in outs]), axis=0)
    )
    for k in outs[0]
  }


def sample(state: DASBSState, key, num_samples: int, mesh=None, steps: int | None = None):
  """(x1 samples num_samples x D, log_rnd) from the trained controller's EMA weights.

  Score them against the target with `state.spec.target.energy(x)` or
  `jaxlab.sampling.metrics.summarize` (on `sample_paths`)."""
  out = sample_paths(state, key, num_samples, mesh, steps)
  return out["x1"], out["log_rnd"]
