"""benchmarks.uhm's FLOP count: what it counts, and jaxlab's ReBRAC against FQL's at equal work."""

import numpy as np
import pytest

from benchmarks import uhm as bench
from jaxlab.rl import uhm
from jaxlab.rl.uhm import offline_data


@pytest.fixture(scope="module")
def setup():
  c = uhm.get_config()
  c.actor_hidden_dims = c.value_hidden_dims = c.model_hidden_dims = (128, 128)
  c.batch_size = 64
  rng = np.random.default_rng(0)
  n = 200
  raw = dict(
    observations=rng.normal(size=(n, 6)),
    actions=rng.uniform(-1, 1, (n, 2)),
    rewards=rng.normal(size=n),
    masks=np.ones(n),
    terminals=np.arange(n) % 50 == 49,
    next_observations=rng.normal(size=(n, 6)),
  )
  return uhm.validate_config(c), offline_data.make_offline_data(raw)


def test_rebrac_counts_match_fql_and_critic_only_skips_the_actor(setup):
  cfg, data = setup
  full, critic = bench.update_mflops("rebrac", cfg, data)
  fql_full, fql_critic = bench.fql_mflops(cfg, data)
  # a critic-only update has no actor term at all: as cheap as FQL's (the actor's forward pass
  # kept as a metric made it ~1.3x FQL's at 3x256)
  assert critic < 0.7 * full
  assert abs(critic / fql_critic - 1) < 0.05 and abs(full / fql_full - 1) < 0.05


def test_count_unrolls_the_ode_loops(setup):
  cfg, data = setup
  c = cfg.as_configdict()
  counts = []
  for steps in (5, 10):
    c.flow_steps = steps
    counts.append(bench.update_mflops("uhm", uhm.validate_config(c), data, branches=(True,))[0])
  assert counts[1] > 1.25 * counts[0]  # XLA alone counts a loop body once: the two would be equal
