"""Actor-critic networks for online RL (PPO): MLP, GRU and a GTrXL-style transformer-XL memory.

Every policy is a flax linen module with one calling convention, recurrent or not::

    carry = policy.initial_carry(num_envs)
    carry, dist, value = policy.apply(params, carry, obs_TxN, reset_TxN)

``obs`` is ``[T, N, *obs_shape]`` (T consecutive steps of N environments), ``reset[t, n]`` says
``obs[t, n]`` is the first observation of an episode (the memory is cleared before it), ``dist``
holds the action distribution's parameters (``{"logits"}`` or ``{"mean", "log_std"}``, see
:func:`sample`, :func:`log_prob`, :func:`entropy`) and ``value`` is ``[T, N]``. The rollout calls
it with ``T = 1`` once per environment step; the PPO loss re-evaluates a whole rollout (``T`` steps)
in one call from the carry stored at its start, and both give the same numbers.

Initialisation follows PureJaxRL / Craftax_Baselines (arXiv 2402.16801): orthogonal weights with
gain sqrt(2) in hidden layers, 0.01 on the policy head and 1 on the value head, zero biases.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

Array = jax.Array

ACTIVATIONS = {"tanh": nn.tanh, "relu": nn.relu, "gelu": nn.gelu}


def _dense(features: int, gain: float = math.sqrt(2)) -> nn.Dense:
  return nn.Dense(
    features, kernel_init=nn.initializers.orthogonal(gain), bias_init=nn.initializers.zeros
  )


def _rows(f, x: Array) -> Array:
  """``f`` on ``x[..., D]`` as one ``[rows, D]`` matrix, then the leading dims restored.

  A dense layer on ``[T, N, D]`` contracts two batch dims in its weight gradient, which XLA:CPU
  runs ~10 % slower per PPO minibatch step than the same product on ``[T * N, D]``
  (``benchmarks.ppo_calls``); the numbers are the same products either way.
  """
  y = f(x.reshape((-1, x.shape[-1])))
  return jax.tree.map(lambda a: a.reshape(x.shape[:-1] + a.shape[1:]), y)


def _flatten(obs: Array) -> Array:
  """``[T, N, *obs_shape]`` -> ``[T, N, prod(obs_shape)]`` (pixels go through the MLP flat)."""
  return obs.reshape(obs.shape[:2] + (-1,)).astype(jnp.float32)


# --- action distributions (categorical for discrete actions, diagonal Gaussian otherwise) ---


def sample(dist: dict, key: Array) -> Array:
  if "logits" in dist:
    return jax.random.categorical(key, dist["logits"]).astype(jnp.int32)
  noise = jax.random.normal(key, dist["mean"].shape)
  return dist["mean"] + jnp.exp(dist["log_std"]) * noise


def mode(dist: dict) -> Array:
  """The most likely action (greedy evaluation)."""
  if "logits" in dist:
    return jnp.argmax(dist["logits"], axis=-1).astype(jnp.int32)
  return dist["mean"]


def log_prob(dist: dict, action: Array) -> Array:
  if "logits" in dist:
    return _taken(jax.nn.log_softmax(dist["logits"]), action)
  z = (action - dist["mean"]) * jnp.exp(-dist["log_std"])
  return jnp.sum(-0.5 * z**2 - dist["log_std"] - 0.5 * math.log(2 * math.pi), axis=-1)


def log_prob_entropy(dist: dict, action: Array) -> tuple[Array, Array]:
  """``(log_prob(dist, action), entropy(dist))`` from one log-softmax (the PPO loss needs both)."""
  if "logits" not in dist:
    return log_prob(dist, action), entropy(dist)
  logp = jax.nn.log_softmax(dist["logits"])
  return _taken(logp, action), _categorical_entropy(logp)


def _taken(logp: Array, action: Array) -> Array:
  return jnp.take_along_axis(logp, action[..., None].astype(jnp.int32), axis=-1)[..., 0]


def _categorical_entropy(logp: Array) -> Array:
  return -jnp.sum(jnp.exp(logp) * logp, axis=-1)


def entropy(dist: dict) -> Array:
  if "logits" in dist:
    return _categorical_entropy(jax.nn.log_softmax(dist["logits"]))
  return jnp.sum(dist["log_std"] + 0.5 * math.log(2 * math.pi * math.e), axis=-1)


# --- heads ---


class _Tower(nn.Module):
  """Hidden layers then a linear output: one actor or critic tower."""

  hidden: Sequence[int]
  out: int
  out_gain: float
  activation: str

  @nn.compact
  def __call__(self, x):
    act = ACTIVATIONS[self.activation]

    def tower(x):
      for h in self.hidden:
        x = act(_dense(h)(x))
      return _dense(self.out, self.out_gain)(x)

    return _rows(tower, x)


class _Heads(nn.Module):
  """Separate actor and critic towers on a feature vector -> ``(dist, value)``."""

  num_actions: int
  action_dim: int
  hidden: Sequence[int]
  activation: str

  @nn.compact
  def __call__(self, x):
    n_out = self.num_actions or self.action_dim
    out = _Tower(self.hidden, n_out, 0.01, self.activation, name="actor")(x)
    value = _Tower(self.hidden, 1, 1.0, self.activation, name="critic")(x)[..., 0]
    if self.num_actions:
      return {"logits": out}, value
    log_std = self.param("log_std", nn.initializers.zeros, (self.action_dim,))
    return {"mean": out, "log_std": jnp.broadcast_to(log_std, out.shape)}, value


# --- policies ---


class MLPPolicy(nn.Module):
  """Feed-forward actor-critic (no memory; the carry is empty).

  Sizes have no defaults here: ``jaxlab.rl.ppo.get_config().mlp`` declares them (Craftax_Baselines'
  3 x 512 tanh; experiments/configs/ppo.py's default run: PureJaxRL's CartPole 64-64).
  """

  num_actions: int  # discrete actions (0: continuous)
  action_dim: int  # continuous action size (0: discrete)
  hidden: Sequence[int]
  activation: str

  def initial_carry(self, num_envs: int) -> Any:
    del num_envs
    return ()

  @nn.compact
  def __call__(self, carry, obs, reset):
    del reset
    dist, value = _Heads(self.num_actions, self.action_dim, self.hidden, self.activation)(
      _flatten(obs)
    )
    return carry, dist, value


class _GRUStep(nn.Module):
  """One GRU step that first clears the hidden state of environments starting an episode."""

  features: int

  @nn.compact
  def __call__(self, h, inputs):
    x, reset = inputs
    h = jnp.where(reset[:, None], jnp.zeros_like(h), h)
    h, y = nn.GRUCell(self.features)(h, x)
    return h, y


class GRUPolicy(nn.Module):
  """Dense embedding -> GRU (hidden state reset at episode starts) -> actor / critic towers.

  The recurrent layout of Craftax_Baselines' ``ppo_rnn.py`` (a scanned GRU cell).
  """

  num_actions: int  # sizes: jaxlab.rl.ppo.get_config().gru
  action_dim: int
  embed: int
  hidden: int
  head_hidden: Sequence[int]
  activation: str

  def initial_carry(self, num_envs: int) -> Array:
    return jnp.zeros((num_envs, self.hidden), jnp.float32)

  @nn.compact
  def __call__(self, carry, obs, reset):
    x = ACTIVATIONS[self.activation](_rows(_dense(self.embed), _flatten(obs)))
    scan = nn.scan(
      _GRUStep, variable_broadcast="params", split_rngs={"params": False}, in_axes=0, out_axes=0
    )
    carry, y = scan(self.hidden, name="gru")(carry, (x, reset))
    dist, value = _Heads(self.num_actions, self.action_dim, self.head_hidden, self.activation)(y)
    return carry, dist, value


class _Gate(nn.Module):
  """GTrXL's GRU-type gating layer g(x, y), arXiv 1910.06764 eqs. (9)-(12).

  ``x`` is the residual stream, ``y`` the sub-layer output; ``bias`` (b_g) > 0 starts the gate
  near the identity map, which the paper credits for stable RL training.
  """

  bias: float

  @nn.compact
  def __call__(self, x, y):
    d = x.shape[-1]
    lin = lambda name: nn.Dense(d, use_bias=False, name=name)
    r = nn.sigmoid(lin("wr")(y) + lin("ur")(x))
    z = nn.sigmoid(lin("wz")(y) + lin("uz")(x) - self.bias)
    h = nn.tanh(lin("wg")(y) + lin("ug")(r * x))
    return (1.0 - z) * x + z * h


class _MemoryAttention(nn.Module):
  """Multi-head attention of T queries over [memory; sequence] with a learned relative bias."""

  num_heads: int
  window: int

  @nn.compact
  def __call__(self, q_in, kv_in, mask, distance):
    d = q_in.shape[-1]
    head = d // self.num_heads
    proj = lambda name: nn.DenseGeneral((self.num_heads, head), name=name)
    q, k, v = proj("query")(q_in), proj("key")(kv_in), proj("value")(kv_in)
    logits = jnp.einsum("bthd,bshd->bhts", q, k) / math.sqrt(head)
    # Relative position (query time - key time) in [0, window]: the same whether a step is
    # computed in the rollout (1 query) or re-evaluated in the loss (T queries).
    rel = self.param("relative_bias", nn.initializers.zeros, (self.window + 1, self.num_heads))
    bias = rel[jnp.clip(distance, 0, self.window)]  # [T, S, H]
    logits = logits + jnp.transpose(bias, (2, 0, 1))[None]
    logits = jnp.where(mask[:, None], logits, jnp.finfo(logits.dtype).min)
    out = jnp.einsum("bhts,bshd->bthd", jax.nn.softmax(logits, axis=-1), v)
    return nn.DenseGeneral(d, axis=(-2, -1), name="out")(out)


class GTrXLPolicy(nn.Module):
  """GTrXL-style transformer-XL memory policy (arXiv 1910.06764), DiCode's PPO agent.

  Each layer attends from the current step over the previous ``window`` steps of its own input
  (the transformer-XL memory, arXiv 1901.02860), masked to the current episode, with the
  "identity map reordering" (layer norm on sub-layer inputs, ReLU on their outputs) and GRU-type
  gates in place of residual additions. The carry is that memory: ``memory[N, layers, window,
  embed]`` and ``valid[N, window]`` (slots holding steps of the running episode). Relative
  positions enter as a learned per-head bias (a simplification of transformer-XL's sinusoidal
  relative encoding). DiCode's size: embed 256, 8 heads, 2 layers, window 128, gate bias 2.
  """

  num_actions: int  # sizes: jaxlab.rl.ppo.get_config().gtrxl
  action_dim: int
  embed: int
  num_heads: int
  num_layers: int
  window: int
  ffn: int
  gate_bias: float
  head_hidden: Sequence[int]
  activation: str

  def initial_carry(self, num_envs: int) -> dict:
    return {
      "memory": jnp.zeros((num_envs, self.num_layers, self.window, self.embed), jnp.float32),
      "valid": jnp.zeros((num_envs, self.window), bool),
    }

  def _masks(self, carry, reset):
    """Attention mask [N, T, W+T], relative distances [T, W+T], key episode ids [N, W+T]."""
    t_len, w = reset.shape[0], self.window
    episode = jnp.cumsum(reset.T.astype(jnp.int32), axis=1)  # [N, T]: 0 = the carried episode
    key_episode = jnp.concatenate([jnp.where(carry["valid"], 0, -1), episode], axis=1)
    key_time = jnp.concatenate([jnp.arange(-w, 0), jnp.arange(t_len)])
    distance = jnp.arange(t_len)[:, None] - key_time[None, :]
    in_window = (distance >= 0) & (distance <= w)
    mask = in_window[None] & (episode[:, :, None] == key_episode[:, None, :])
    return mask, distance, key_episode, episode

  @nn.compact
  def __call__(self, carry, obs, reset):
    mask, distance, key_episode, episode = self._masks(carry, reset)
    x = nn.relu(_rows(_dense(self.embed), _flatten(obs)))
    x = jnp.transpose(x, (1, 0, 2))  # [N, T, E]
    w, memories = self.window, []
    for i in range(self.num_layers):
      kv = jnp.concatenate([carry["memory"][:, i], x], axis=1)  # [N, W+T, E]
      memories.append(kv[:, -w:])
      kv = nn.LayerNorm(name=f"ln_attn_{i}")(kv)
      y = _MemoryAttention(self.num_heads, w, name=f"attn_{i}")(kv[:, w:], kv, mask, distance)
      x = _Gate(self.gate_bias, name=f"gate_attn_{i}")(x, nn.relu(y))
      y = nn.LayerNorm(name=f"ln_ffn_{i}")(x)
      y = nn.Dense(self.embed, name=f"ffn_out_{i}")(nn.relu(nn.Dense(self.ffn, name=f"ffn_{i}")(y)))
      x = _Gate(self.gate_bias, name=f"gate_ffn_{i}")(x, nn.relu(y))
    carry = {
      "memory": jnp.stack(memories, axis=1),
      "valid": key_episode[:, -w:] == episode[:, -1:],
    }
    x = jnp.transpose(x, (1, 0, 2))
    dist, value = _Heads(self.num_actions, self.action_dim, self.head_hidden, self.activation)(x)
    return carry, dist, value


POLICIES = ("mlp", "gru", "gtrxl")


def make(name: str, num_actions: int, action_dim: int = 0, **kwargs) -> nn.Module:
  """``make("gru", env.num_actions, env.action_dim, **sizes)``; ``sizes``: every field of the
  module (``jaxlab.rl.ppo.get_config()[name]``, as ``jaxlab.rl.ppo.make_policy`` passes them)."""
  from jaxlab.core.errors import check_choice

  check_choice("policy", name, POLICIES)
  cls = {"mlp": MLPPolicy, "gru": GRUPolicy, "gtrxl": GTrXLPolicy}[name]
  return cls(num_actions=num_actions, action_dim=action_dim, **kwargs)


# --- IMPALA-CNN + RNN actor-critic (the agent of Dedieu et al. 2025 / ITC, arXiv 2605.16457) ---


class _ImpalaStage(nn.Module):
  """Conv 3x3 -> max-pool 3x3 stride 2 -> two residual blocks (arXiv 1802.01561, Fig. 3)."""

  channels: int

  @nn.compact
  def __call__(self, x):
    x = nn.Conv(self.channels, (3, 3))(x)
    x = nn.max_pool(x, (3, 3), strides=(2, 2), padding="SAME")
    for _ in range(2):
      y = nn.Conv(self.channels, (3, 3))(nn.relu(x))
      x = x + nn.Conv(self.channels, (3, 3))(nn.relu(y))
    return x


class _ResidualTower(nn.Module):
  """Dense -> residual (LayerNorm, ReLU, Dense) layers -> LayerNorm, ReLU, linear output."""

  hidden: int
  depth: int
  out: int
  out_gain: float

  @nn.compact
  def __call__(self, x):
    h = _dense(self.hidden)(x)
    for _ in range(self.depth):
      h = h + _dense(self.hidden)(nn.relu(nn.LayerNorm()(h)))
    return _dense(self.out, self.out_gain)(nn.relu(nn.LayerNorm()(h)))


class ImpalaRNNPolicy(nn.Module):
  """IMPALA CNN -> LayerNorm -> Dense -> GRU; actor and critic read [CNN features, GRU output].

  The agent of the transformer-world-model line (Dedieu et al. 2025, arXiv 2502.01591; ITC's
  ``nets/agent.py``): CNN channels (64, 64, 128) turn a 63x63 frame into 8x8x128 features, a
  256-unit recurrent core runs on their projection, and residual MLP towers (2048 units, two
  residual ReLU layers with LayerNorm) read both. The recurrent cell's type and the towers'
  exact layout are not in the public description: a GRU and the layout of `_ResidualTower` are a
  reconstruction. Observations are ``[T, N, H, W, C]`` pixels in [0, 1].
  """

  num_actions: int
  action_dim: int  # 0: discrete actions (the Craftax pixels agent)
  channels: Sequence[int]  # sizes: jaxlab.rl.itc.get_config().policy
  embed: int
  hidden: int
  head_hidden: int
  head_depth: int = 2  # residual ReLU layers per tower (a structural constant, not a setting)

  def initial_carry(self, num_envs: int) -> Array:
    return jnp.zeros((num_envs, self.hidden), jnp.float32)

  @nn.compact
  def __call__(self, carry, obs, reset):
    t, n = obs.shape[:2]
    x = obs.reshape((t * n,) + obs.shape[2:]).astype(jnp.float32)
    for c in self.channels:
      x = _ImpalaStage(c)(x)
    z = nn.relu(x).reshape(t, n, -1)
    r_in = nn.relu(_dense(self.embed)(nn.LayerNorm()(z)))
    scan = nn.scan(
      _GRUStep, variable_broadcast="params", split_rngs={"params": False}, in_axes=0, out_axes=0
    )
    carry, y = scan(self.hidden, name="gru")(carry, (r_in, reset))
    feat = jnp.concatenate([z, nn.relu(y)], axis=-1)
    n_out = self.num_actions or self.action_dim
    logits = _ResidualTower(self.head_hidden, self.head_depth, n_out, 0.01, name="actor")(feat)
    value = _ResidualTower(self.head_hidden, self.head_depth, 1, 1.0, name="critic")(feat)[..., 0]
    return carry, {"logits": logits}, value
