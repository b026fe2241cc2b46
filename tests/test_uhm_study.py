"""jaxlab.rl.uhm.study: sweep planning (command lines, workdirs, presets) and its table."""

import json

import numpy as np
import pytest

from jaxlab.core.errors import ConfigError
from jaxlab.rl.uhm import study

KW = dict(
  agents=["uhm", "rebrac"],
  seeds=["0", "1"],
  data_seeds=["0"],
  tasks=["1"],
  episodes=100,
  net="cpu",
  vmap_seeds=False,
  alpha_grid=[],
  eval_every=0,
  eval_episodes=20,
  dataset_dir=None,
  extra="",
  config_file="experiments/configs/uhm.py",
)


def _sweep(root, **kw):
  return study.make_sweep(root, 100, "lowbudget", **{**KW, **kw})


def test_plan_one_command_per_run(tmp_path):
  runs = study.plan(_sweep(tmp_path))
  assert len(runs) == 2 * 2 * 2  # envs x agents x training seeds
  r = runs[0]
  assert r.workdir == tmp_path / "cube-single-play" / "task1" / "uhm" / "d0" / "s0"
  argv = list(r.argv)
  assert argv[:3] == ["python", "-m", "experiments.uhm"]
  assert "--env_name=cube-single-play-singletask-task1-v0" in argv and "--eval_every=10" in argv
  assert "--episodes=100" in argv and "--data_seed=0" in argv and "--agent=uhm" in argv
  # The default config (and each task's discount / alphas) is the program's: nothing restated.
  assert not [a for a in argv if a.startswith("--config")]
  paper = study.plan(_sweep(tmp_path, net="paper"))[0].argv
  assert "--config=experiments/configs/uhm.py:paper" in paper
  vm = study.plan(_sweep(tmp_path, vmap_seeds=True))
  assert len(vm) == 4 and vm[0].seeds == (0, 1) and "--num_seeds=2" in vm[0].argv
  assert vm[0].workdir.name == "s0-1"
  grid = study.plan(_sweep(tmp_path, agents=["rebrac"], alpha_grid=["0.1:0"]))
  assert grid[0].agent == "rebrac@0.1:0.0" and "--config.alpha_actor=0.1" in grid[0].argv
  path = study.write_commands(_sweep(tmp_path), runs)
  assert path.read_text().count("python -m experiments.uhm") == 8


@pytest.mark.parametrize(
  "kw, field",
  [
    (dict(seeds=["a"]), "seeds"),
    (dict(tasks=["9"]), "tasks"),
    (dict(agents=["sac"]), "agents"),
    (dict(alpha_grid=["1:x"]), "alpha_grid"),
    (dict(alpha_grid=["1:0"]), "alpha_grid"),  # uhm is not ReBRAC
    (dict(seeds=["0", "2"], vmap_seeds=True), "seeds"),
    (dict(net="huge"), "net"),
    (dict(extra="'"), "extra"),
  ],
)
def test_bad_options_name_the_flag(tmp_path, kw, field):
  with pytest.raises(ConfigError) as e:
    _sweep(tmp_path, **kw)
  assert e.value.field == field
  with pytest.raises(ConfigError) as e:
    study.make_sweep(tmp_path, 100, "foo", **KW)
  assert e.value.field == "suite"


def test_table_cells_are_t_intervals_over_finished_replicates(tmp_path):
  from scipy import stats

  sweep = _sweep(tmp_path, agents=["uhm"], seeds=["0", "1", "2"])
  runs = study.plan(sweep)
  finals, rng = {}, np.random.default_rng(0)
  for r in runs:
    r.workdir.mkdir(parents=True)
    final = float(rng.uniform())
    finals[(r.env, r.seeds[0])] = 100 * final
    (r.workdir / "eval.csv").write_text(f"step,success\n50,{final / 2}\n100,{final}\n")
    (r.workdir / "metrics.csv").write_text("step,steps_per_sec\n50,1.0\n100,20.0\n")
    (r.workdir / "summary.json").write_text(json.dumps({"step": 100}))
  assert all(study.finished(r, 100) for r in runs)
  (runs[0].workdir / "eval.csv").write_text("step,success\n50,0.9\n")  # unfinished: left out
  md = study.write_tables(sweep, runs)
  xs = np.array([finals[("cube-single-play", s)] for s in (1, 2)])
  h = stats.t.ppf(0.975, 1) * xs.std(ddof=1) / np.sqrt(2)
  cell = f"{xs.mean():.0f} [{xs.mean() - h:.0f}, {xs.mean() + h:.0f}] (2)"
  assert f"| cube-single-play | {cell} |" in md, md
  assert (tmp_path / "table.md").read_text() == md
  assert (tmp_path / "table_lowbudget.csv").exists()
  assert (tmp_path / "curves_lowbudget_steps.png").exists()
  stamps = {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir() if p.is_file()}
  assert study.write_tables(sweep, runs) == md  # the same aggregate: no file rewritten
  assert {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir() if p.is_file()} == stamps
  m, lo, hi = study.t_interval([1.0])
  assert m == 1.0 and np.isnan(lo) and np.isnan(hi)


def test_program_root_is_one_sweep_and_reruns_rewrite_nothing(tmp_path):
  """experiments.uhm_sweep: commands.sh under a locked root recording the sweep; the same flags
  again leave every file byte-identical; other flags exit 2 naming --workdir; --table of a root
  that does not exist, and bad lists, exit 2 creating nothing."""
  from programs import run_program

  root = tmp_path / "root"
  args = [f"--workdir={root}", "--steps=10", "--seeds=0", "--data_seeds=0"]
  r = run_program("experiments.uhm_sweep", args, tmp_path)
  assert r.returncode == 0, r.stderr[-2000:]
  files = lambda: {p.name: p.read_bytes() for p in root.iterdir() if p.name != ".lock"}  # noqa: E731
  before = files()
  assert {"commands.sh", "config.json"} <= set(before)
  assert run_program("experiments.uhm_sweep", args, tmp_path).returncode == 0
  assert files() == before
  for bad, flag in [
    ([*args, "--seeds=0,1"], "--workdir"),
    ([f"--workdir={tmp_path / 'none'}", "--table"], "--workdir"),
    ([f"--workdir={tmp_path / 'none'}", "--agents="], "--agents"),
    ([f"--workdir={tmp_path / 'none'}", "--seeds="], "--seeds"),
    ([f"--workdir={tmp_path / 'none'}", "--steps=0"], "--steps"),
  ]:
    r = run_program("experiments.uhm_sweep", bad, tmp_path)
    err = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert r.returncode == 2 and len(err) == 1 and err[0].startswith(f"error: {flag}:"), r.stderr
    assert "Traceback" not in r.stderr
  assert files() == before and not (tmp_path / "none").exists()


def test_diagnostic_table_is_the_t_interval_over_seeds_at_the_last_step(tmp_path):
  """Synthetic diagnostics.jsonl of one vmapped run per agent: each cell is mean [95 % t] (n)."""
  sweep = study.make_sweep(
    tmp_path, 100, "pilot", **{**KW, "tasks": [], "seeds": ["0", "1", "2"], "vmap_seeds": True}
  )
  runs = study.plan(sweep)
  assert [r.env for r in runs] == ["cube-single-play"] * 2 and runs[0].task == 2
  rng = np.random.default_rng(0)
  q = {}
  for r in runs:
    r.workdir.mkdir(parents=True)
    (r.workdir / "eval.csv").write_text(
      "step,success,success_seed0,success_seed1,success_seed2\n100,0,0,0,0\n"
    )
    (r.workdir / "summary.json").write_text(json.dumps({"step": 100}))
    lines = []
    for step in (0, 100):
      seeds = {}
      for s in (0, 1, 2):
        q[(r.agent, step, s)] = float(rng.uniform(1, 9))
        seeds[str(s)] = dict(q_mae=q[(r.agent, step, s)], q_base_mae=5.0, q_corr=0.1)
        if r.agent == "uhm":
          seeds[str(s)].update(model_err=[0.1 * s + step / 1000] * 4, model_err_state=[1] * 4)
      lines.append(json.dumps(dict(step=step, seeds=seeds)))
    (r.workdir / "diagnostics.jsonl").write_text("\n".join(lines) + "\n")
  md, curves = study.diagnostic_table(sweep, runs, "pilot")
  from scipy import stats

  xs = np.array([q[("rebrac", 100, s)] for s in (0, 1, 2)])
  h = stats.t.ppf(0.975, 2) * xs.std(ddof=1) / np.sqrt(3)
  g = lambda v: f"{v:.3g}"  # noqa: E731
  row = next(line for line in md.splitlines() if line.startswith("| ReBRAC"))
  assert f"| {g(xs.mean())} [{g(xs.mean() - h)}, {g(xs.mean() + h)}] (3) |" in row, md
  uhm_row = next(line for line in md.splitlines() if line.startswith("| UHM"))
  assert "| 0.2 [" in uhm_row and "| – |" in row  # model error: UHM only (mean of 0.1, .2, .3)
  assert set(curves["critic mean abs(Q - G)"]) == {"uhm", "rebrac"}
