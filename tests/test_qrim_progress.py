"""QRIM's long parts say what they are doing: a line per |U| of the query scaling and one before
each value iteration, so no phase of ``python -m experiments.qrim`` is silent for long. The
searches are stubbed (their numbers are tests/test_qrim.py's): only the progress is checked."""

import jax
import jax.numpy as jnp
import pytest

from jaxlab.rl import qrim
from jaxlab.rl.qrim import config as qrim_config
from jaxlab.rl.qrim import protocol


@pytest.fixture
def small(monkeypatch):
  def minimizer(search):
    del search
    return lambda f, key: (jnp.argmin(f), {"queries": jnp.int32(3), "measurements": jnp.int32(1)})

  def value_iteration(p, r, gamma, iters, key, minimizer=None):
    z = jnp.zeros(r.shape[0])
    stats = {k: jnp.ones(iters) for k in ("queries", "measurements", "mismatch")}
    return z, jnp.zeros(r.shape), stats

  monkeypatch.setattr(protocol.qrim_search, "make_minimizer", minimizer)
  monkeypatch.setattr(protocol.qrim_search, "robust_value_iteration", value_iteration)
  monkeypatch.setattr(
    protocol.qrim_search,
    "random_robust_mdp",
    lambda key, s, a, u: (jnp.zeros((u, s, a, s)), jnp.zeros((s, a))),
  )
  c = qrim.get_config()
  c.update(max_log2=5, trials=3, states=3, actions=2, sweeps=2)
  return qrim_config.validate_config(c, 8)


def test_query_scaling_says_each_size(small):
  lines = []
  search = qrim_config.search_config(small)
  rows = protocol.query_scaling(search, small, jax.random.key(0), say=lines.append)
  assert [r["n"] for r in rows] == [16, 32]
  assert len(lines) == 2 and all(f"|U| = {n}: 3.0 oracle" in s for n, s in zip((16, 32), lines))


def test_tabular_says_each_value_iteration(small):
  lines = []
  protocol.tabular(qrim_config.search_config(small), small, 8, jax.random.key(1), say=lines.append)
  assert len(lines) == 2 and "exhaustive" in lines[0] and "simulated" in lines[1], lines
