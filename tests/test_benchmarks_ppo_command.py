"""benchmarks.ppo against its reference: the command path (ppo.train_run at the program's
defaults) is timed beside the loop, and each size prints both ratios."""

import re

import pytest

from benchmarks import ppo as bench
from jaxlab.rl import ppo


def test_the_command_path_evaluates_as_the_program_does():
  c = bench.bench_config("cartpole", 4, 128, 500_000)
  cmd = bench.command_config(c, "cartpole")
  d = ppo.gymnax_config()
  assert (
    (cmd.eval_envs, cmd.eval_steps)
    == (d.eval_envs, d.eval_steps)
    != (
      c.eval_envs,
      c.eval_steps,
    )
  )
  assert (cmd.lr, cmd.num_envs, cmd.minibatches) == (c.lr, c.num_envs, c.minibatches)
  assert c.eval_envs == ppo.get_config().eval_envs  # the caller's config is left as it was


@pytest.mark.slow
def test_bench_prints_the_loop_and_command_path_ratios(capsys, monkeypatch):
  small = bench.bench_config

  def tiny(env_name, n, t_len, total):
    c = small(env_name, n, t_len, total)
    c.mlp.hidden = (8,)
    return c

  monkeypatch.setattr(bench, "bench_config", tiny)
  monkeypatch.setattr(bench, "command_config", lambda c, env: _tiny_eval(c))
  out = bench.bench("cartpole", 2, 8, 2 * 8 * 4, seeds=2, program=True)
  text = capsys.readouterr().out
  assert len(out["rows"]) == 2 and all({"ref", "jax", "prog"} <= set(r) for r in out["rows"])
  assert re.search(r"ratio jaxlab/reference [\d.]+ \(per seed [\d.]+, [\d.]+\)", text)
  assert re.search(r"ratio command/reference [\d.]+ \(per seed [\d.]+, [\d.]+\)", text)
  assert "seeds 0-1" in text and "compile s:" in text and "held-out eval return" in text


def _tiny_eval(c):
  c = c.copy_and_resolve_references()
  c.eval_envs, c.eval_steps = 4, 20
  return c
