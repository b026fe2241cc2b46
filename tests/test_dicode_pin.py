"""A pin of DiCode's numbers: a tiny whole run (``runner.run``, the `dicode` curriculum: sessions,
the offline proposer, the sandbox's static check, admission, the held-out evaluation) and two
`sfl` seeds trained together (``runner.run_seeds``: the vmapped PPO program and SFL's no-learning
play), on the data-as-state toy environment of ``test_dicode_loop``. The expected numbers were
recorded from the code before its modules were reorganised; a change of layout must leave them,
and so the training and evaluation they summarise, unchanged (to 1e-6 relative: an XLA fusion
may move a last bit)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from tests.test_dicode_loop import any_plan_toy_env, light_validate, seeds_config

RTOL = 1e-6

PIN = {  # recorded at commit 1a37978 (2 CPU cores, jax on CPU)
  "dicode": {
    "eval/return": 0.01874999958090484,
    "eval/score": 9.049875259399414,
    "history/episode_return": [0.3903125524520874, 0.390625],
    "history/mean_score": [0.16769132653061222, 0.06399596875787353],
    "params/sum": 13.297904283153349,
    "params/abs": 438.94957278084,
    "params/weighted": -6.787259511572236,
  },
  "sfl/seed0": {
    "eval/return": 0.01874999958090484,
    "eval/score": 9.049875259399414,
    "history/episode_return": [0.4840624928474426, 0.359375],
    "history/mean_score": [0.1520138888888889, 0.1220138888888889],
    "params/sum": 13.192254110013556,
    "params/abs": 438.92574085610215,
    "params/weighted": -6.798805863975087,
  },
  "sfl/seed1": {
    "eval/return": 0.01874999958090484,
    "eval/score": 9.049875259399414,
    "history/episode_return": [0.4221875071525574, 0.6075000762939453],
    "history/mean_score": [0.10884353741496598, 0.15934027777777776],
    "params/sum": 21.19064543684968,
    "params/abs": 446.85288648888684,
    "params/weighted": -3.083652097220268,
  },
}


def _checksums(params) -> dict[str, float]:
  """Three sums over every parameter (plain, absolute, position-weighted), float64 on the host."""
  leaves = [np.asarray(x, np.float64).ravel() for x in jax.tree.leaves(jax.device_get(params))]
  flat = np.concatenate(leaves)
  weights = np.sin(np.arange(flat.size, dtype=np.float64))
  return {
    "params/sum": float(flat.sum()),
    "params/abs": float(np.abs(flat).sum()),
    "params/weighted": float(flat @ weights),
  }


def _restored_params(workdir, config):
  from jaxlab.core import checkpoint
  from jaxlab.rl.dicode import curriculum as curriculum_lib
  from jaxlab.rl.dicode import loop as loop_lib
  from jaxlab.rl.dicode import training

  plan = curriculum_lib.SessionPlan("base", ["original"], np.ones(1))
  env = any_plan_toy_env(plan, config.ppo.num_envs, config, 0.0)
  policy = training.make_policy(env.num_actions, config)
  state = training.init_state(env, policy, training.ppo_config(config), jax.random.key(0))
  like = {"train": state.train, "stats": state.stats}
  restored, _ = checkpoint.restore(workdir / loop_lib.AGENT_DIR, like, step=config.sessions)
  return restored["train"].params


def _numbers(summary, workdir, config) -> dict:
  return {
    "eval/return": summary["eval/return"],
    "eval/score": summary["eval/score"],
    "history/episode_return": [h["episode_return"] for h in summary["history"]],
    "history/mean_score": [h["mean_score"] for h in summary["history"]],
    **_checksums(_restored_params(workdir, config)),
  }


@pytest.fixture(scope="module")
def pinned(tmp_path_factory):
  from jaxlab.rl.dicode import evaluation, runner
  from jaxlab.rl.dicode import loop as loop_lib

  root = tmp_path_factory.mktemp("pin")
  hooks = loop_lib.Hooks(make_env=any_plan_toy_env, validate=light_validate)
  proposer = runner.proposer_settings("offline")
  c = seeds_config()
  out = {}
  with pytest.MonkeyPatch.context() as mp:
    mp.setattr(evaluation, "held_out_pools", lambda n, p: [None] * -(-n // p))
    summary = runner.run(root / "dicode", c, "dicode", proposer, 0, hooks=hooks)
    out["dicode"] = _numbers(summary, root / "dicode", c)
    together = runner.run_seeds(root / "sfl", c, "sfl", proposer, (0, 1), hooks=hooks)
    for s in (0, 1):
      out[f"sfl/seed{s}"] = _numbers(together[s], root / "sfl" / f"seed{s}", c)
  return out


@pytest.mark.parametrize("run", ["dicode", "sfl/seed0", "sfl/seed1"])
def test_dicode_numbers_equal_the_recorded_pin(pinned, run):
  got, want = pinned[run], PIN[run]
  assert got.keys() == want.keys()
  for name, value in want.items():
    np.testing.assert_allclose(got[name], value, rtol=RTOL, atol=1e-9, err_msg=f"{run} {name}")
