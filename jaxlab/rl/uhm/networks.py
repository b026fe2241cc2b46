"""Flax linen networks for the offline-RL agents (ReBRAC-style actor/critic, UHM velocity field).

Layout follows OGBench impls / FQL `utils/networks.py` (arXiv 2502.02538): Dense -> GELU ->
(LayerNorm) per hidden layer.
"""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax.numpy as jnp


def default_init(scale: float = 1.0):
  return nn.initializers.variance_scaling(scale, "fan_avg", "uniform")


class MLP(nn.Module):
  """Dense -> GELU -> optional LayerNorm for each hidden layer, then a linear head."""

  hidden_dims: Sequence[int]
  out_dim: int
  layer_norm: bool = False
  final_scale: float = 1.0  # small scale gives a near-zero initial output (actor head)

  @nn.compact
  def __call__(self, x, cond=None):
    """`cond`: more input features, concatenated after x in the first layer's kernel, e.g. the
    conditioning of a velocity field. Their product with the kernel is a separate matmul, which
    XLA hoists out of an ODE loop in which only x changes (same parameters as one Dense on
    concat([x, cond]); the sum differs from that Dense by float rounding only)."""
    for i, h in enumerate(self.hidden_dims):
      # Layers are named as linen's automatic names would be, so params match the plain MLP.
      if i == 0 and cond is not None:
        x = _SplitDense(h, name="Dense_0")(x, cond)
      else:
        x = nn.Dense(h, kernel_init=default_init(), name=f"Dense_{i}")(x)
      x = nn.gelu(x)
      if self.layer_norm:
        x = nn.LayerNorm(name=f"LayerNorm_{i}")(x)
    last = f"Dense_{len(self.hidden_dims)}"
    return nn.Dense(self.out_dim, kernel_init=default_init(self.final_scale), name=last)(x)


class _SplitDense(nn.Module):
  """nn.Dense on concat([x, cond]) (same kernel, bias and init) computed as
  (cond @ W_cond + b) + x @ W_x, so the cond part can be computed once per conditioning."""

  features: int

  @nn.compact
  def __call__(self, x, cond):
    dx = x.shape[-1]
    shape = (dx + cond.shape[-1], self.features)
    kernel = self.param("kernel", default_init(), shape, jnp.float32)
    bias = self.param("bias", nn.initializers.zeros_init(), (self.features,), jnp.float32)
    return (cond @ kernel[dx:] + bias) + x @ kernel[:dx]


class EnsembleCritic(nn.Module):
  """`num` independent Q(s, a) MLPs (vmapped params); returns Q_ExB."""

  hidden_dims: Sequence[int]
  num: int = 2
  layer_norm: bool = True

  @nn.compact
  def __call__(self, obs_BxO, act_BxA):
    ens = nn.vmap(
      MLP,
      variable_axes={"params": 0},
      split_rngs={"params": True},
      in_axes=None,
      out_axes=0,
      axis_size=self.num,
    )
    x = jnp.concatenate([obs_BxO, act_BxA], -1)
    return ens(self.hidden_dims, 1, self.layer_norm)(x)[..., 0]


class Actor(nn.Module):
  """Deterministic tanh-squashed actor mu(s) (the mode of ReBRAC's actor)."""

  hidden_dims: Sequence[int]
  act_dim: int
  layer_norm: bool = False
  final_scale: float = 0.01

  @nn.compact
  def __call__(self, obs_BxO):
    return jnp.tanh(MLP(self.hidden_dims, self.act_dim, self.layer_norm, self.final_scale)(obs_BxO))


class ActorCritic(nn.Module):
  """Critic ensemble and actor as ONE parameter tree {"critic": ..., "actor": ...}.

  FQL's ReBRAC (github.com/seohongpark/fql, agents/rebrac.py) keeps both networks (and their target
  copies) in one TrainState with one Adam state; this module makes that possible here. Call it as
  ``apply(vars, obs, act, net="critic") -> Q_ExB`` or ``apply(vars, obs, net="actor") -> mu_BxA``;
  `init_both` creates both parameter sets.
  """

  critic: EnsembleCritic
  actor: Actor

  def __call__(self, *args, net: str):
    return self.critic(*args) if net == "critic" else self.actor(*args)

  def init_both(self, obs_BxO, act_BxA):
    return self.critic(obs_BxO, act_BxA), self.actor(obs_BxO)


class RewardModel(nn.Module):
  """r_psi(s, a) -> r_B, regressed on dataset rewards; gives R at imagined states."""

  hidden_dims: Sequence[int]
  layer_norm: bool = True

  @nn.compact
  def __call__(self, obs_BxO, act_BxA):
    return MLP(self.hidden_dims, 1, self.layer_norm)(jnp.concatenate([obs_BxO, act_BxA], -1))[
      ..., 0
    ]


def time_features(t_B, num_freqs: int = 8):
  """Fixed Fourier features of flow time t in [0, 1]."""
  f = jnp.arange(1, num_freqs + 1, dtype=jnp.float32) * jnp.pi
  tf = t_B[:, None] * f
  return jnp.concatenate([t_B[:, None], jnp.sin(tf), jnp.cos(tf)], -1)


class VelocityField(nn.Module):
  """Horizon-conditioned flow velocity v(t, x | s, a, n) -> dx/dt, shape like x.

  n is an integer horizon in [0, num_horizons] with a learned embedding (0 is the GHM slot).
  """

  hidden_dims: Sequence[int]
  out_dim: int
  num_horizons: int
  horizon_emb_dim: int = 32
  layer_norm: bool = True

  @nn.compact
  def __call__(self, t_B, x_BxO, s_BxO, a_BxA, n_B):
    n_emb = nn.Embed(self.num_horizons + 1, self.horizon_emb_dim)(n_B)
    # The first layer's kernel rows are [x, t-features, s, a, n-embedding]; (s, a, n) is constant
    # along an ODE path, so its matmul is separate and computed once per path (see MLP).
    h_path = jnp.concatenate([x_BxO, time_features(t_B)], -1)
    h_cond = jnp.concatenate([s_BxO, a_BxA, n_emb], -1)
    return MLP(self.hidden_dims, self.out_dim, self.layer_norm)(h_path, h_cond)
