"""jaxlab.rl.uhm.task: the library workflow experiments.uhm runs (task values, clipping, training,
evaluation over seeds), and the presets of experiments/configs/uhm.py."""

import importlib.util
import pathlib

import jax
import numpy as np
import pytest

from jaxlab.core import runtime
from jaxlab.core.errors import ConfigError
from jaxlab.rl import uhm

CONFIG_FILE = pathlib.Path(__file__).resolve().parents[1] / "experiments" / "configs" / "uhm.py"


def _toy(n=40, obs=3, act=2):
  rng = np.random.default_rng(0)
  return dict(
    observations=rng.normal(size=(n, obs)),
    actions=np.clip(rng.normal(size=(n, act)) * 2, -1, 1),
    rewards=-np.ones(n),
    masks=np.ones(n),
    terminals=np.arange(n) % 10 == 9,
    next_observations=rng.normal(size=(n, obs)),
  )


def test_unset_task_values_come_from_the_task_and_given_ones_stay(capsys):
  cfg, sources = uhm.resolve_task_config(uhm.get_config(), "humanoidmaze-medium-navigate-v0")
  assert (cfg.discount, cfg.alpha_actor, cfg.alpha_critic) == (0.995, 0.01, 0.01)
  assert "FQL README" in sources["discount"] and "humanoidmaze-medium" in sources["alpha_actor"]
  c = uhm.get_config()
  c.discount = 0.9
  cfg, sources = uhm.resolve_task_config(c, "puzzle-3x3-play-singletask-task4-v0")
  assert cfg.discount == 0.9 and sources["discount"] == "given"
  # No public alphas for puzzle: the library's values, said out loud and recorded.
  assert (
    (cfg.alpha_actor, cfg.alpha_critic)
    == (1.0, 0.0)
    == tuple(uhm.NO_TASK_VALUES[k] for k in ("alpha_actor", "alpha_critic"))
  )
  assert sources["alpha_actor"].startswith("library default 1.0")
  assert "no public ReBRAC alpha_actor" in capsys.readouterr().out
  # Without a task, validate_config fills the same library values.
  plain = uhm.validate_config(uhm.get_config())
  assert {k: plain[k] for k in uhm.TASK_FIELDS} == uhm.NO_TASK_VALUES
  c = uhm.get_config()
  c.alpha_actor = -1.0
  with pytest.raises(ConfigError) as e:
    uhm.resolve_task_config(c, "cube-single-play-singletask-task2-v0")
  assert e.value.field == "config.alpha_actor"


def test_make_task_clips_actions_and_records_the_task():
  d = _toy()
  d["actions"][0] = [-1.0, 1.0]
  task = uhm.make_task(uhm.get_config(), "cube-single-play-singletask-task2-v0", d, data="mine")
  a = np.asarray(task.data.actions)
  np.testing.assert_allclose(a[0], [-1 + uhm.ACTION_CLIP_EPS, 1 - uhm.ACTION_CLIP_EPS], atol=1e-7)
  assert (task.obs_dim, task.act_dim) == (3, 2) and task.config.discount == 0.99
  assert task.record["data"] == "mine" and task.record["transitions"] == 40
  assert task.record["task_values_from"] == task.sources


def test_check_options_names_the_flag():
  for kw, field in (
    (dict(seeds=()), "seeds"),
    (dict(seeds=(0, 1), mesh=object()), "seeds"),
    (dict(eval_episodes=0), "eval_episodes"),
    (dict(episodes=0), "episodes"),
    (dict(data_seed=-1), "data_seed"),
  ):
    with pytest.raises(ConfigError) as e:
      uhm.check_options(**kw)
    assert e.value.field == field
  assert (
    uhm.resolve_eval_every(None, 2000, 100) == 500 and uhm.resolve_eval_every(None, 10, 100) == 100
  )
  assert uhm.resolve_eval_every(0, 2000, 100) == 0
  with pytest.raises(ConfigError) as e:
    uhm.resolve_eval_every(-1, 2000, 100)
  assert e.value.field == "eval_every"


def _load_config_file():
  spec = importlib.util.spec_from_file_location("uhm_configs", CONFIG_FILE)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_presets_start_from_the_library_config():
  configs = _load_config_file()
  lib = uhm.get_config().to_dict()
  default = configs.get_config().to_dict()
  assert {k for k in lib if lib[k] != default[k]} == {
    "actor_hidden_dims",
    "value_hidden_dims",
    "model_hidden_dims",
  }
  assert default["actor_hidden_dims"] == (256, 256, 256)
  assert configs.get_config("paper").to_dict() == lib
  cpu = uhm.validate_config(configs.get_config("cpu"))
  assert cpu.actor_hidden_dims == (64, 64) and cpu.batch_size == 64
  with pytest.raises(ValueError, match="unknown preset"):
    configs.get_config("huge")


def test_train_and_evaluate_seeds_in_the_real_env(tmp_path, monkeypatch):
  """The program's path: check_options once -> load_task (embedded set) -> train (2 vmapped
  seeds), both taking the checked options without checking them again -> evaluate_seeds, whose
  per-seed numbers are og.evaluate of each seed's actor on episodes EVAL_SEED + i."""
  pytest.importorskip("ogbench")
  from jaxlab.envs import ogbench as og
  from jaxlab.rl.uhm import task as task_lib

  c = uhm.get_config()
  c.update(agent="rebrac", batch_size=16)  # the cheapest agent to compile; same path as uhm
  c.actor_hidden_dims = c.value_hidden_dims = (8,)
  options = uhm.check_options(seeds=[3, 4], eval_episodes=1)
  assert options == uhm.RunOptions((3, 4), None, 1, None, 0)
  calls = []
  monkeypatch.setattr(task_lib, "check_options", lambda **kw: calls.append(kw))
  with pytest.raises(TypeError, match="options="):
    uhm.load_task(c, verbose=False, options=options, data_seed=1)
  task = uhm.load_task(c, verbose=False, options=options)
  assert task.env_name == og.DEFAULT_ENV_NAME and task.record["data"] == "embedded"
  assert float(np.abs(np.asarray(task.data.actions)).max()) <= 1 - uhm.ACTION_CLIP_EPS + 1e-7
  loop = runtime.Loop(num_steps=2, log_every=1, ckpt_every=0, progress=False, plot=False)
  with pytest.raises(TypeError, match="options="):
    uhm.train(task, loop, options=options, eval_episodes=1)
  state, result = uhm.train(task, loop, options=options, workdir=tmp_path)
  assert calls == []  # checked once, by the caller
  assert {"success", "return"} <= set(result.evals[2]) and set(result.evals_per_seed[2]) == {3, 4}
  assert result.evals[2]["success"] == np.mean([result.per_seed[k]["eval/success"] for k in (3, 4)])
  summary = uhm.write_report(tmp_path, task, result, [3, 4])
  assert summary["training_seeds"] == [3, 4] and summary["ogbench"]["success_timing"] == "pre"
  # Held-out diagnostics (validation episodes): the critic's at step 0 and 2, per seed; ReBRAC has
  # no horizon model, so no horizon_model.png.
  from jaxlab.rl.uhm import diagnostics

  assert {"q_mae", "q_base_mae", "q_corr", "qpi_mae", "qpi_n"} <= set(result.evals[2])
  diag = diagnostics.read_diagnostics(tmp_path)
  assert sorted(diag) == [0, 2] and set(diag[2]) == {"3", "4"}
  assert len(diag[2]["3"]["q_pred"]) == len(task.heldout.mc_return) > 0
  assert (tmp_path / "critic.png").exists() and not (tmp_path / "horizon_model.png").exists()
  line = uhm.final_line(summary, task, 1, tmp_path)
  assert line.startswith("[uhm] rebrac on") and "critic |Q - G|" in line and "summary.json" in line
  critic = summary["diagnostics"]["verdicts"]["critic.png"]
  assert ("[critic.png]" in line) == critic["beat"]  # named as learning only below its baseline
  r = uhm.evaluate_seeds(state, task.env_name, 2, num_seeds=2, env=task.env, max_episode_steps=3)
  act = jax.jit(uhm.sample_actions)
  for i in range(2):
    s_i = uhm.seed_slice(state, i)
    ref = og.evaluate(
      task.env_name,
      lambda o, s_i=s_i: act(s_i, o),
      num_episodes=2,
      seed=uhm.EVAL_SEED,
      env=task.env,
      max_episode_steps=3,
    )
    assert r["success_per_seed"][i] == ref["success"]
  assert r["num_episodes"] == 2 and r["episode_len"] == 3.0
