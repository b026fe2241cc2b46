"""QRIM reconstruction: quantum minimum finding for the inner minimum of robust RL, simulated.

**Reconstruction.** QRIM (Lee, Kim, Yoon, ICML 2026, "Quantum Robust Inner Minimization") states in
its abstract that it encodes the uncertainty set U in superposition and amplifies low-return cases,
solving the robust Bellman equation with O(sqrt|U|) queries while the outer RL is unchanged. No
paper body or code is public, so this module implements the established method that description
matches, NOT the paper's own algorithm: Duerr & Hoyer's quantum minimum finding (arXiv
quant-ph/9607014) on top of Boyer, Brassard, Hoyer & Tapp's search with an unknown number of
solutions (BBHT, arXiv quant-ph/9605034), simulated classically. See docs/qrim.md.

Search over ``n`` items (``n <= 2**16``) on a register of ``R = 2**ceil(log2 n)`` basis states;
padding states hold ``f = +inf`` and are never marked. One BBHT attempt with threshold ``f(y)``
starts from the uniform superposition, applies ``k`` Grover iterations (oracle ``(-1)^[f(u) <
f(y)]`` then inversion about the mean) and measures. Two simulators give the same distribution:

* ``statevector``: the real amplitude vector of the register, evolved exactly (float32);
* ``analytic``: with ``t`` marked states, P(marked) = sin^2((2k+1) asin sqrt(t/R)) (the standard
  Grover rotation), then a uniform marked (or unmarked) state, which is what the symmetric
  amplitudes give. No vector of size ``R``: any ``n``.

Query accounting (per minimisation): every Grover iteration is one oracle query, and every
measured index costs one classical evaluation of ``f`` (to compare with the threshold); the
exhaustive classical minimum costs ``n``. Stopping rules: ``"adaptive"`` (default) ends when one
BBHT search has spent ``cap * sqrt(R)`` Grover iterations without finding a smaller value (the
answer is then the minimum unless that search was unlucky); ``"budget"`` is Duerr-Hoyer's rule,
stop after ``22.5 sqrt(n) + 1.4 log2(n)^2`` queries (success probability >= 1/2 by their Theorem).
``noise`` replaces a measured index by a uniform one with that probability (a crude proxy for
hardware noise: the classical check keeps the answer valid, only the query count grows);
``fail_rate`` replaces the returned index by a different one with that probability (an injected
failure, to test that failures propagate at the injected rate).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp

from jaxlab.core.errors import check_choice, require

Array = jax.Array
MAX_STATEVECTOR = 2**16
MODES = ("statevector", "analytic")
STOPS = ("adaptive", "budget")
LAMBDA = 6.0 / 5.0  # BBHT's growth factor for the iteration range m


@dataclasses.dataclass(frozen=True)
class SearchConfig:
  """The simulated search; no defaults here: ``SearchConfig.from_config(qrim.get_config(), ...)``
  (the fields are documented in :func:`jaxlab.rl.qrim.get_config`)."""

  mode: str  # statevector | analytic (same distribution; see module docstring)
  stop: str  # adaptive | budget
  cap: float  # adaptive: Grover iterations of a fruitless search before stopping / sqrt(R)
  noise: float  # probability that a measurement returns a uniform random index
  fail_rate: float  # probability that the returned index is replaced by another one

  @classmethod
  def from_config(cls, config: Mapping[str, Any], **overrides) -> SearchConfig:
    """The fields of a (ml_collections) config that SearchConfig knows, then ``overrides``."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{**{k: config[k] for k in config.keys() if k in names}, **overrides})


def validate(c: SearchConfig, n: int, prefix: str = "config") -> None:
  check_choice(f"{prefix}.mode", c.mode, MODES)
  check_choice(f"{prefix}.stop", c.stop, STOPS)
  require(math.isfinite(c.cap) and c.cap > 0, f"{prefix}.cap", f"must be > 0, got {c.cap}")
  for name in ("noise", "fail_rate"):
    v = getattr(c, name)
    require(math.isfinite(v) and 0 <= v < 1, f"{prefix}.{name}", f"must be in [0, 1), got {v}")
  require(n >= 2, "set_size", f"must be >= 2, got {n}")
  if c.mode == "statevector":
    require(
      register_size(n) <= MAX_STATEVECTOR,
      "set_size",
      f"{n} needs a register of {register_size(n)} states; the state-vector simulator allows "
      f"up to {MAX_STATEVECTOR} (use mode=analytic)",
    )


def register_size(n: int) -> int:
  """``2**q``: the smallest register of qubits holding ``n`` indices."""
  return 1 << max(1, math.ceil(math.log2(n)))


def dh_budget(n: int) -> float:
  """Duerr-Hoyer's total query budget ``22.5 sqrt(n) + 1.4 log2(n)^2`` (P(success) >= 1/2)."""
  return 22.5 * math.sqrt(n) + 1.4 * math.log2(n) ** 2


def _pad(f: Array) -> Array:
  n = f.shape[-1]
  return jnp.concatenate([f, jnp.full((register_size(n) - n,), jnp.inf, f.dtype)])


@jax.jit
def grover_amplitudes(marked: Array, k: Array) -> Array:
  """Amplitudes after ``k`` Grover iterations from the uniform superposition (state vector)."""
  r = marked.shape[-1]
  psi0 = jnp.full((r,), 1.0 / math.sqrt(r), jnp.float32)

  def iteration(_, psi):
    psi = jnp.where(marked, -psi, psi)  # oracle
    return 2.0 * jnp.mean(psi) - psi  # H^q (2|0><0| - I) H^q: inversion about the mean

  return jax.lax.fori_loop(0, k, iteration, psi0)


def success_probability(t: Array, r: int, k: Array) -> Array:
  """P(measuring a marked state) after ``k`` iterations with ``t`` of ``r`` marked."""
  theta = jnp.arcsin(jnp.sqrt(jnp.asarray(t, jnp.float32) / r))
  return jnp.sin((2 * jnp.asarray(k, jnp.float32) + 1) * theta) ** 2


def _uniform_in(key: Array, mask: Array) -> Array:
  """A uniform index among ``mask``'s true entries (Gumbel trick keeps it jittable)."""
  g = jax.random.gumbel(key, mask.shape)
  return jnp.argmax(jnp.where(mask, g, -jnp.inf))


def measure_statevector(key: Array, marked: Array, k: Array) -> Array:
  """One BBHT attempt on the exact state vector: ``k`` Grover iterations, then a measurement."""
  probs = grover_amplitudes(marked, k) ** 2
  return jax.random.categorical(key, jnp.log(jnp.maximum(probs, 1e-30)))


def measure_analytic(key: Array, t: Array, r: Array, k: Array) -> Array:
  """The same attempt from the closed form, in rank space: the measured state's rank among the
  ``r`` register states sorted by ``f`` (the ``t`` marked ones are ranks ``0..t-1``)."""
  k_hit, k_rank = jax.random.split(key)
  hit = (jax.random.uniform(k_hit) < success_probability(t, r, k)) & (t > 0)
  lo, hi = jnp.where(hit, 0, t), jnp.where(hit, t, r)
  return lo + jnp.floor(jax.random.uniform(k_rank) * (hi - lo)).astype(jnp.int32)


def _log2_ceil(n: Array) -> Array:
  return jnp.maximum(1, jnp.ceil(jnp.log2(n.astype(jnp.float32)) - 1e-6)).astype(jnp.int32)


def _attempt(carry, draw, r, stop_at, config: SearchConfig):
  """One BBHT attempt of the Duerr-Hoyer loop; ``draw(key, y, k) -> (u, better)``."""
  key, y, m, spent, grover, meas, done = carry
  key, k_k, k_meas, k_noise, k_rand = jax.random.split(key, 5)
  k = jax.random.randint(k_k, (), 0, jnp.ceil(m).astype(jnp.int32))
  noisy = jax.random.uniform(k_noise) < config.noise
  u, better = draw(k_meas, y, k, noisy, k_rand)
  y = jnp.where(better, u, y)
  sqrt_r = jnp.sqrt(r.astype(jnp.float32))
  m = jnp.where(better, 1.0, jnp.minimum(LAMBDA * m, sqrt_r))
  spent = jnp.where(better, 0, spent + k)
  grover, meas = grover + k, meas + 1
  if config.stop == "adaptive":
    done = spent >= stop_at
  else:
    done = grover + meas >= stop_at
  return key, y, m, spent, grover, meas, done


def make_minimizer(config: SearchConfig) -> Callable:
  """``minimize(f, key) -> (index, {"queries", "measurements"})``, jittable and vmappable.

  ``queries``: oracle calls (Grover iterations); ``measurements``: classical evaluations of f.

  ``f`` is float[L]; entries equal to ``+inf`` are absent from U (so sets of different sizes share
  one compilation: pad with ``inf``). Duerr-Hoyer minimum finding: threshold ``y`` = a uniform
  index (one classical query), then BBHT searches for an index below it (m <- 1; k ~
  U{0..ceil(m)-1}; on failure m <- min(6/5 m, sqrt(R))), each success lowering the threshold,
  until the stopping rule (module docstring). ``statevector`` mode simulates a register of
  ``register_size(L)`` states; ``analytic`` one of ``register_size(n)``, n = finite entries.
  """
  check_choice("config.mode", config.mode, MODES)
  check_choice("config.stop", config.stop, STOPS)

  def minimize(f: Array, key: Array):
    f = jnp.asarray(f, jnp.float32)
    length = f.shape[-1]
    n = jnp.sum(jnp.isfinite(f)).astype(jnp.int32)
    k0, k_loop, k_fail, k_other = jax.random.split(key, 4)
    if config.mode == "statevector":
      r = jnp.asarray(register_size(length), jnp.int32)
      fp = _pad(f)
      state0 = _uniform_in(k0, jnp.isfinite(fp))

      def draw(k, y, steps, noisy, k_rand):
        u = measure_statevector(k, fp < fp[y], steps)
        u = jnp.where(noisy, jax.random.randint(k_rand, (), 0, r), u)
        return u, fp[u] < fp[y]

      to_index = lambda y: y
    else:  # rank space: y is the rank of the threshold among the sorted values
      r = (2 ** _log2_ceil(n)).astype(jnp.int32)
      order = jnp.argsort(f)
      sorted_f = f[order]
      state0 = jax.random.randint(k0, (), 0, n)

      def draw(k, y, steps, noisy, k_rand):
        t = jnp.searchsorted(sorted_f, sorted_f[y], side="left").astype(jnp.int32)
        u = measure_analytic(k, t, r, steps)
        u = jnp.where(noisy, jax.random.randint(k_rand, (), 0, r), u)
        return u, (u < t) & (u < n)

      to_index = lambda y: order[y]
    nf = n.astype(jnp.float32)
    budget = 22.5 * jnp.sqrt(nf) + 1.4 * jnp.log2(nf) ** 2
    stop_at = config.cap * jnp.sqrt(r.astype(jnp.float32)) if config.stop == "adaptive" else budget
    zero = jnp.zeros((), jnp.int32)
    carry = (k_loop, state0, jnp.ones(()), zero, zero, jnp.ones((), jnp.int32), jnp.zeros((), bool))
    step = lambda c: _attempt(c, draw, r, stop_at, config)
    carry = jax.lax.while_loop(lambda c: ~c[-1], step, carry)
    y, grover, meas = to_index(carry[1]), carry[4], carry[5]
    if config.fail_rate > 0:  # an injected failure returns any other present index
      present = jnp.isfinite(f) & (jnp.arange(length) != y)
      y = jnp.where(jax.random.uniform(k_fail) < config.fail_rate, _uniform_in(k_other, present), y)
    return y, {"queries": grover, "measurements": meas}

  return minimize


def exhaustive(f: Array) -> tuple[Array, dict]:
  """The classical inner minimum: ``n`` queries (classical evaluations of f)."""
  q = jnp.asarray(f.shape[-1], jnp.int32)
  return jnp.argmin(f), {"queries": q, "measurements": jnp.zeros((), jnp.int32)}


# --- robust value iteration on tabular (s,a)-rectangular robust MDPs ---


def random_robust_mdp(key: Array, states: int, actions: int, set_size: int, conc: float = 1.0):
  """A random robust MDP: ``P[u, s, a, s']`` (normalised uniform rows; smaller ``conc`` gives
  peakier rows) for ``u`` in U and rewards ``R[s, a]`` in [0, 1)."""
  kp, kr = jax.random.split(key)
  w = jax.random.uniform(kp, (set_size, states, actions, states)) ** (1.0 / conc)
  return w / jnp.sum(w, -1, keepdims=True), jax.random.uniform(kr, (states, actions))


def robust_value_iteration(
  p: Array, r: Array, gamma: float, iters: int, key: Array, minimizer: Callable | None = None
):
  """``Q(s,a) = r + gamma * min_u P_u(.|s,a) . V``, ``V = max_a Q``, for ``iters`` sweeps.

  ``minimizer`` (from :func:`make_minimizer`) picks the inner argmin per (s, a); ``None`` is the
  exhaustive minimum. Returns ``(V, Q, stats)`` with per-sweep arrays: ``queries`` (mean per
  backup) and ``mismatch`` (fraction of (s,a) whose chosen u is worse than the exhaustive min).
  """
  _, s_n, a_n, _ = p.shape
  pairs = s_n * a_n

  def sweep(v, k):
    f = jnp.einsum("usat,t->sau", p, v).reshape(pairs, -1)
    best, _ = jax.vmap(exhaustive)(f)
    if minimizer is None:
      idx, info = best, jax.vmap(exhaustive)(f)[1]
    else:
      idx, info = jax.vmap(minimizer)(f, jax.random.split(k, pairs))
    inner = jnp.take_along_axis(f, idx[:, None], axis=1)[:, 0].reshape(s_n, a_n)
    q = r + gamma * inner
    f_min = jnp.take_along_axis(f, best[:, None], axis=1)[:, 0].reshape(s_n, a_n)
    stats = {
      "queries": jnp.mean(info["queries"].astype(jnp.float32)),
      "measurements": jnp.mean(info["measurements"].astype(jnp.float32)),
      "mismatch": jnp.mean((inner > f_min).astype(jnp.float32)),  # ties are not mismatches
    }
    return jnp.max(q, axis=1), (q, stats)

  v, (qs, stats) = jax.lax.scan(sweep, jnp.zeros((s_n,), jnp.float32), jax.random.split(key, iters))
  return v, qs[-1], stats


def fit_slope(xs, ys) -> float:
  """Least-squares slope of ``log ys`` against ``log xs``."""
  import numpy as np

  lx, ly = np.log(np.asarray(xs, float)), np.log(np.asarray(ys, float))
  return float(np.polyfit(lx, ly, 1)[0])
