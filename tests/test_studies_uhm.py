"""The UHM studies' own logic (jaxlab/studies/uhm.py), without training: success as a mean over the
last evaluation points, the per-seed qpi columns, the evaluation's episode seeds reaching
``uhm.train``, and the noisy studies' seeds (docs/uhm.md)."""

import csv
import math
import pathlib

import pytest

from jaxlab import studies
from jaxlab.studies import uhm as suhm

SEEDS = (0, 1, 2)
STEPS = range(2500, 20_001, 2500)  # 8 evaluation points, as a 20 000-update run every 2500


def _success_value(step, seed):
  return (step // 2500) / 10 + seed / 100  # distinct at every (step, seed)


def _write_eval(run_dir: pathlib.Path, rows):
  run_dir.mkdir(parents=True, exist_ok=True)
  cols = sorted({k for r in rows for k in r}, key=lambda k: (k not in ("step", "seed"), k))
  with open(run_dir / "eval.csv", "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=cols, restval="")
    w.writeheader()
    w.writerows(rows)


@pytest.fixture
def run_dir(tmp_path):
  d = tmp_path / "s0-2"
  rows = [
    {"step": s, "seed": k, "success": _success_value(s, k), "return": -1.0}
    for s in STEPS
    for k in SEEDS
  ]
  _write_eval(d, rows)
  return d


def test_success_last_is_the_mean_of_exactly_the_last_n_points(run_dir):
  got = suhm._success_last(run_dir, SEEDS, 20_000, 2500, 3)
  for k in SEEDS:
    want = sum(_success_value(s, k) for s in (15_000, 17_500, 20_000)) / 3
    assert got[k] == pytest.approx(want, abs=1e-12)
    # not the last 2 or 4 points, nor every point
    for n in (2, 4, 8):
      other = sum(_success_value(20_000 - i * 2500, k) for i in range(n)) / n
      assert got[k] != pytest.approx(other, abs=1e-9)
  assert suhm._success_last(run_dir, SEEDS, 20_000, 2500, 1) == suhm._success(
    run_dir, SEEDS, 20_000
  )
  # per_seed's `last` takes it, in %; the default is the last point alone
  rec = suhm.per_seed(run_dir, SEEDS, 20_000, last=(2500, 3))
  assert {k: r["success_pct"] for k, r in rec.items()} == pytest.approx(
    {k: 100 * v for k, v in got.items()}
  )
  one = suhm.per_seed(run_dir, SEEDS, 20_000)
  assert one[1]["success_pct"] == pytest.approx(100 * _success_value(20_000, 1))


def test_success_last_refuses_a_run_that_lacks_one_of_its_points(tmp_path):
  d = tmp_path / "s0-2"
  _write_eval(d, [{"step": s, "seed": k, "success": 0.5} for s in (5000, 20_000) for k in SEEDS])
  with pytest.raises(Exception, match="did not reach step 15000"):
    suhm._success_last(d, SEEDS, 20_000, 5000, 2)


def test_eval_columns_reads_each_seeds_qpi_columns_and_keeps_nan(tmp_path):
  d = tmp_path / "s0-2"
  qpi = {0: (1.5, -0.5, 0.9, 2.0, 30), 1: (2.5, 0.5, "nan", 3.0, 0), 2: (0.5, 0.1, 0.2, 1.0, 7)}
  rows = [{"step": 10_000, "seed": k, "success": 0.0, "qpi_mae": 9.0} for k in SEEDS]
  rows += [
    {"step": 20_000, "seed": k, "success": 0.0, **dict(zip(suhm.QPI, v)), "q_mae": 4.0}
    for k, v in qpi.items()
  ]
  rows[-1]["qpi_corr"] = ""  # an empty cell is left out, not read as 0 or NaN
  _write_eval(d, rows)
  got = suhm._eval_columns(d, 20_000)
  assert set(got) == set(SEEDS)
  assert got[0] == dict(zip(suhm.QPI, (1.5, -0.5, 0.9, 2.0, 30.0)))
  assert math.isnan(got[1]["qpi_corr"]) and got[1]["qpi_mae"] == 2.5 and got[1]["qpi_n"] == 0.0
  assert "qpi_corr" not in got[2] and got[2]["qpi_mae"] == 0.5
  assert all("q_mae" not in v and "success" not in v for v in got.values())
  assert suhm._eval_columns(d, 10_000) == {k: {"qpi_mae": 9.0} for k in SEEDS}
  # and per_seed puts them in each seed's record
  rec = suhm.per_seed(d, SEEDS, 20_000)
  assert math.isnan(rec[1]["qpi_corr"]) and rec[0]["qpi_bias"] == -0.5


def test_the_settings_eval_seed_reaches_uhm_train(tmp_path, monkeypatch):
  from jaxlab.rl import uhm

  calls = []

  def fake_train(task, loop, **kw):
    calls.append(kw)
    return None, None

  monkeypatch.setattr(uhm, "train", fake_train)
  suhm._train("task", "loop", (0, 1), 3, tmp_path, 20_000)
  assert calls[-1]["eval_seed"] == 20_000 and calls[-1]["seeds"] == (0, 1)
  assert calls[-1]["eval_episodes"] == 3

  # _run hands the setting's eval_seed (and its task, data set and episodes) to _train
  got = {}
  monkeypatch.setattr(uhm, "resolve_task_config", lambda cfg, env: (cfg, {}))
  monkeypatch.setattr(uhm, "check_memory", lambda cfg, num_seeds: None)
  monkeypatch.setattr(uhm, "load_task", lambda cfg, env, **kw: got.update(env=env, **kw) or "task")
  monkeypatch.setattr(uhm, "write_report", lambda *a: None)
  monkeypatch.setattr(suhm, "per_seed", lambda *a: {"last": a[-1]})

  def fake_inner(task, loop, seeds, eval_episodes, workdir, eval_seed):
    got.update(eval_seed=eval_seed, eval_episodes=eval_episodes, steps=loop.num_steps)
    return None, None

  monkeypatch.setattr(suhm, "_train", fake_inner)
  for name, arm in (("uhm/noisy_pilot", "ghm_t2"), ("uhm/noisy", "mbtd")):
    setting, agent = studies.get(name).cell.args[0][arm]
    got.clear()
    out = suhm._run(setting, agent, setting.tasks[0], (0, 1), tmp_path / name)
    assert got["eval_seed"] == setting.eval_seed == (20_000 if "pilot" in name else 10_000)
    assert got["env"] == suhm.env_name(setting.tasks[0], "scene-noisy")
    assert got["num_episodes"] == 200 and got["eval_episodes"] == setting.eval_episodes
    assert out == {"last": (setting.eval_every, setting.last_evals)}


def test_the_noisy_studies_seeds_and_episodes_never_meet():
  pilot, main, gpu = (studies.get(f"uhm/{n}") for n in ("noisy_pilot", "noisy", "noisy_gpu"))
  assert main.tuning_seeds == (100, 101) == gpu.tuning_seeds
  assert not set(main.seeds) & set(main.tuning_seeds)
  assert not set(gpu.seeds) & set(gpu.tuning_seeds)
  assert pilot.seeds == main.tuning_seeds and pilot.tuning_seeds == ()
  # the pilot's evaluation episodes (eval_seed + i) are none of the reported studies' episodes
  pilot_eps = {
    s.eval_seed + i for s, _ in suhm.NOISY_PILOT_ARMS.values() for i in range(s.eval_episodes)
  }
  for study in (main, gpu):
    arms = study.cell.args[0]
    assert set(arms) == set(study.arms) == {*suhm.AGENTS, "uhm_kmax64"}
    eps = {s.eval_seed + i for s, _ in arms.values() for i in range(s.eval_episodes)}
    assert not pilot_eps & eps
    # every arm on the pilot's chosen task, at equal updates; only the ablation changes k_max
    assert {s.tasks for s, _ in arms.values()} == {(suhm.NOISY_TASK,)}
    assert {s.steps for s, _ in arms.values()} == {study.budget["step"]}
    assert dict(arms["uhm_kmax64"][0].fields)["k_max"] == 64
    assert "k_max" not in dict(arms["uhm"][0].fields)
