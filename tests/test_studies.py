"""The studies (`jaxlab.studies`, `python -m experiments.study`): every registered spec validates
and reproduces its recorded runs' settings, every committed table is what its raw files give (a
hand-edited table fails here), the runner resumes without rerunning or rewriting a finished seed,
and the program refuses an unknown study in one line."""

import dataclasses
import json
import pathlib
import shutil

import numpy as np
import pytest
from programs import REPO, run_program

from jaxlab import studies
from jaxlab.core import stats
from jaxlab.core.errors import ConfigError
from jaxlab.studies import runner, spec

RESULTS = pathlib.Path(REPO, "docs", "results")
COMMITTED = [n for n in studies.names() if RESULTS.joinpath(*n.split("/"), "raw").is_dir()]


# --- the registry and the specs


@pytest.mark.parametrize("name", studies.names())
def test_every_registered_study_validates(name):
  s = studies.get(name)
  spec.validate(s)
  assert s.name == name and s.results == pathlib.Path("docs/results", *name.split("/"))
  assert not set(s.seeds) & set(s.tuning_seeds)
  assert s.tests or len(s.arms) == 1, "a comparison of arms declares its tests"
  assert all(a in s.arms and c in s.arms for a, c in s.comparisons())
  assert "arXiv" in s.claim or "no arXiv id" in s.claim
  assert name in COMMITTED or "not run" in s.note, "a study without results says so"


def test_a_spec_with_overlapping_seeds_or_unknown_arms_is_refused():
  s = studies.get("r4/cartpole")
  cases = [
    (dict(tuning_seeds=(2, 7)), "study.tuning_seeds"),
    (dict(control="ppo"), "study.control"),
    (dict(pairs=(("r4_noise0", "sac"),)), "study.pairs"),
    (dict(tests=(stats.Test("superiority", "eval/unknown"),)), "study.tests"),
    (dict(seeds=(0, 0)), "study.seeds"),
    (dict(name="r4"), "study.name"),
  ]
  for change, field in cases:
    with pytest.raises(ConfigError) as e:
      dataclasses.replace(s, **change)
    assert e.value.field == field, (change, e.value)
  with pytest.raises(ConfigError) as e:
    studies.get("nope/nope")
  assert e.value.field == "study" and "r4/cartpole" in e.value.message


def _raw(name):
  return runner.read_raw(studies.get(name), RESULTS.joinpath(*name.split("/")))


def test_the_specs_reproduce_the_recorded_settings():
  """A rerun of a cell must run what the committed raw files record (else resuming would mix)."""
  from jaxlab.rl import qrim
  from jaxlab.studies import itc, r4, uhm

  for name, env in (("r4/cartpole", "cartpole"), ("r4/asterix", "asterix-minatar")):
    for rec in _raw(name):
      want = r4.config(env, rec["arm"]).to_dict()
      got = {k: v for k, v in rec["config"].items() if k in want}
      assert json.loads(json.dumps(want)) == got, (name, rec["arm"])
      assert rec["config"]["steps"] == r4.TASKS[env]["updates"]
  base = json.loads(json.dumps(qrim.get_config().to_dict()))
  for name in ("qrim/robust", "qrim/queries"):
    for rec in _raw(name):
      assert {k: rec["config"][k] for k in base} == base, name
  for rec in _raw("itc/decoders"):
    assert rec["config"]["itc"] == json.loads(json.dumps(itc.config().to_dict()))
    assert rec["config"]["setting"] == dataclasses.asdict(itc.setting())
  for rec in _raw("uhm/size"):
    setting, agent = uhm.SIZE_ARMS[rec["arm"]]
    want = json.loads(json.dumps(uhm.config(agent, setting).to_dict()))
    got = rec["config"]["agent"]
    assert {k: got[k] for k in want if want[k] is not None} == {
      k: v for k, v in want.items() if v is not None
    }, rec["arm"]
    assert rec["config"]["transitions"] == 1000 * setting.episodes


# --- the committed tables


# uhm/pilot's table is rebuilt by the program, below
@pytest.mark.parametrize("name", [n for n in COMMITTED if n != "uhm/pilot"])
def test_table_rebuilds_the_committed_table_from_raw_files(name, tmp_path):
  """table.md and table.csv are exactly what the raw files give: a hand edit fails here."""
  committed = RESULTS.joinpath(*name.split("/"))
  shutil.copytree(committed / "raw", tmp_path / "raw")
  runner.table(studies.get(name), tmp_path)
  for f in ("table.md", "table.csv"):
    assert (tmp_path / f).read_bytes() == (committed / f).read_bytes(), f"{name}/{f}"


@pytest.mark.parametrize("name", COMMITTED)
def test_table_means_are_the_raw_means(name):
  """Each arm's mean is the plain mean of its seeds' raw values (what the old tables quoted)."""
  import csv

  study = studies.get(name)
  committed = RESULTS.joinpath(*name.split("/"))
  rows = list(csv.DictReader((committed / "table.csv").open()))
  records = runner.read_raw(study, committed)
  for row in (r for r in rows if r["section"] == "arm"):
    vals = [
      float(r[row["metric"]])
      for r in records
      if r["arm"] == row["arm"] and r.get(row["metric"]) is not None
    ]
    assert float(row["mean"]) == pytest.approx(np.mean(vals), rel=1e-12), row
    assert int(row["n"]) == len(vals) and float(row["mean_lo"]) <= float(row["mean_hi"])


def test_the_program_rebuilds_a_table(tmp_path):
  committed = RESULTS / "uhm" / "pilot"
  shutil.copytree(committed / "raw", tmp_path / "res" / "raw")
  args = ["uhm/pilot", "--table", f"--results={tmp_path / 'res'}", f"--root={tmp_path / 'runs'}"]
  r = run_program("experiments.study", args, tmp_path)
  assert r.returncode == 0, r.stderr[-2000:]
  for f in ("table.md", "table.csv"):
    assert (tmp_path / "res" / f).read_bytes() == (committed / f).read_bytes(), f
  assert not (tmp_path / "runs").exists()


def test_an_unknown_study_is_one_line_exit_2_naming_the_argument(tmp_path):
  r = run_program("experiments.study", ["nope/nope"], tmp_path)
  errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
  assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
  assert len(errors) == 1 and "positional argument" in errors[0] and "'nope/nope'" in errors[0]
  assert all(n in errors[0] for n in studies.names())
  assert list(tmp_path.iterdir()) == []


# --- the runner, on a toy study


def _toy(tmp_path, calls, budget_steps=5):
  def cell(arm, seeds, workdir):
    calls.append((arm, tuple(seeds)))
    assert workdir == tmp_path / "runs" / "toy" / "scores" / arm
    # b is better on every seed: a superiority test of b over a can be shown
    return {
      s: {
        "config": {"arm": arm},
        "score": s * (1.5 if arm == "b" else 1.0) + 10.0 * (arm == "b"),
        "steps": 5,
      }
      for s in seeds
    }

  return spec.Study(
    name="toy/scores",
    claim="b beats a (no arXiv id: a test fixture).",
    arms=("a", "b"),
    control="a",
    seeds=(0, 1, 2),
    tuning_seeds=(7,),
    budget={"steps": budget_steps},
    tests=(stats.Test("superiority", "score"),),
    cell=cell,
  )


def test_runner_runs_each_seed_once_and_never_rewrites(tmp_path):
  calls = []
  study = _toy(tmp_path, calls)
  kw = dict(root=tmp_path / "runs", results=tmp_path / "res", log=lambda s: None)
  runner.run(study, **kw)
  assert calls == [("a", (0, 1, 2)), ("b", (0, 1, 2))]
  rec = json.loads((tmp_path / "res/raw/b/seed2.json").read_text())
  assert rec == {"arm": "b", "seed": 2, "config": {"arm": "b"}, "score": 13.0, "steps": 5}
  files = {p: p.read_bytes() for p in (tmp_path / "res").rglob("*") if p.is_file()}
  runner.run(study, **kw)  # finished: nothing runs, no file changes
  assert len(calls) == 2
  assert {p: p.read_bytes() for p in (tmp_path / "res").rglob("*") if p.is_file()} == files
  (tmp_path / "res/raw/a/seed1.json").unlink()
  runner.run(study, **kw)  # a lost seed: that seed alone
  assert calls[2:] == [("a", (1,))]
  table = (tmp_path / "res/table.md").read_text()
  assert "b beats a: +10.5" in table and "Holm" not in table  # one comparison: nothing to adjust


def test_runner_refuses_a_cell_off_budget_and_writes_nothing(tmp_path):
  study = _toy(tmp_path, [], budget_steps=6)
  with pytest.raises(ConfigError) as e:
    runner.run(study, root=tmp_path / "runs", results=tmp_path / "res", log=lambda s: None)
  assert e.value.field == "study.budget" and "steps = 5" in e.value.message
  assert not (tmp_path / "res").exists()


def test_table_states_the_seeds_budget_and_interval():
  text = (RESULTS / "qrim/robust/table.md").read_text()
  assert "Held-out seeds 0, 1, 2, 3, 4 (tuning seeds: none)" in text
  assert "stratified-bootstrap interval over the n = " in text
  assert "Holm over the study's 4 comparisons (2 tests x 2 pairs)" in text


# --- the cells call the library as the recorded runs did (library calls replaced by fakes)


def test_r4_cell_runs_all_seeds_in_one_protocol_run_with_the_arms_setting(tmp_path, monkeypatch):
  from jaxlab.rl.r4 import protocol

  calls = []

  def fake_run(config, **kw):
    calls.append((config.noise, config.bins, kw))
    per_seed = {
      str(s): {"config": {"noise": config.noise, "seed": s}, "seed": s, "env_steps": 32768}
      for s in kw["seeds"]
    }
    if len(kw["seeds"]) == 1:
      return per_seed[str(kw["seeds"][0])]
    return {"seeds": list(kw["seeds"]), "per_seed": per_seed}

  monkeypatch.setattr(protocol, "run", fake_run)
  out = studies.get("r4/asterix").cell("bt_noise0.5", (0, 2), tmp_path / "cell")
  assert sorted(out) == [0, 2] and len(calls) == 1  # one run: the seeds' PPO vmapped
  noise, bins, kw = calls[0]
  assert noise == 0.5 and tuple(bins) == (0.5, 1.5) and kw["method"] == "bt"
  assert kw["updates"] == 16 and kw["seeds"] == (0, 2)
  assert kw["workdir"] == tmp_path / "cell" / "seeds0-2"
  assert kw["ratings"] == "simulated" and kw["protocol"] == "offline"
  assert out[2]["seed"] == 2 and out[2]["config"]["seed"] == 2  # each seed's own record
  out = studies.get("r4/asterix").cell("bt_noise0.5", (1,), tmp_path / "cell")
  assert calls[1][2]["workdir"] == tmp_path / "cell" / "seed1" and out[1]["seed"] == 1


def test_qrim_cell_trains_unfinished_seeds_together_with_the_part_3_keys(tmp_path, monkeypatch):
  import jax

  from jaxlab.rl.qrim import robust

  calls = []

  def fake_train_arm_seeds(env, search, config, set_size, updates, keys, arm):
    calls.append(jax.random.key_data(keys).tolist())
    return [
      {"heldout_mean_return": float(i), "train_env_steps": updates * 2048, "arm_seen": arm}
      for i in range(len(keys))
    ]

  monkeypatch.setattr(robust, "train_arm_seeds", fake_train_arm_seeds)
  study = studies.get("qrim/robust")
  out = study.cell("random", (3,), tmp_path / "cell")
  assert out[3]["arm_seen"] == "random" and out[3]["config"]["seed"] == 3
  assert out[3]["train_env_steps"] == study.budget["train_env_steps"]
  out = study.cell("random", (3, 5), tmp_path / "cell")  # 3 finished: read back, 5 trained
  assert out[5]["config"]["seed"] == 5 and out[3]["heldout_mean_return"] == 0.0
  want = lambda s: jax.random.key_data(jax.random.fold_in(jax.random.key(s), 2)).tolist()
  assert calls == [[want(3)], [want(5)]]
  study.cell("random", (3, 5), tmp_path / "cell")  # finished: nothing trains
  assert len(calls) == 2


def test_dicode_cell_records_the_config_and_what_the_archive_learnt(tmp_path, monkeypatch):
  from jaxlab.rl.dicode import runner as dicode_runner

  seen = []

  def fake_run(workdir, config, curriculum, proposer, seed):
    seen.append((workdir, config.updates_per_session, curriculum, proposer["kind"], seed))
    archive = {"top": [{"score": 0.2}, {"score": 0.0}], "admitted_proposals": 4}
    return {"env_steps": 122880, "eval/return": 3.0, "archive": archive}

  monkeypatch.setattr(dicode_runner, "run", fake_run)
  out = studies.get("dicode/curricula_123k").cell("dicode", (1,), tmp_path / "cell")
  assert seen == [(tmp_path / "cell" / "seed1", 40, "dicode", "offline", 1)]
  assert out[1]["archive/best_score"] == 0.2 and out[1]["archive/scored_tasks"] == 1
  assert out[1]["config"]["curriculum"] == "dicode" and out[1]["config"]["seed"] == 1


def test_dicode_cell_trains_every_seed_of_an_arm_in_one_call(tmp_path, monkeypatch):
  from jaxlab.rl.dicode import runner as dicode_runner

  calls = []

  def fake_run_seeds(workdir, config, curriculum, proposer, seeds):
    calls.append((workdir, curriculum, proposer["kind"], seeds))
    return {s: {"env_steps": 12288, "eval/return": float(s)} for s in seeds}

  monkeypatch.setattr(dicode_runner, "run_seeds", fake_run_seeds)
  out = studies.get("dicode/curricula_12k").cell("dr", (0, 1, 2), tmp_path / "cell")
  assert calls == [(tmp_path / "cell", "dr", "offline", (0, 1, 2))]
  assert sorted(out) == [0, 1, 2] and out[2]["eval/return"] == 2.0
  assert out[1]["config"]["seed"] == 1 and out[1]["config"]["proposer"] == {"kind": None}


def test_itc_cell_evaluates_every_decoder_once_per_seed(tmp_path, monkeypatch):
  from jaxlab.rl.itc import decoder_eval
  from jaxlab.studies import itc

  built = []

  class FakeEvaluator:
    def __init__(self, config, setting, decoders, wm_dir):
      built.append(tuple(decoders))

    def seed(self, seed):
      res = {
        m: {"token_acc": [0.5 + i / 10, 0.4], "flicker": [0.1, None]}
        for i, m in enumerate(itc.ARMS)
      }
      return {**res, "real": {"flicker": [0.0, None]}, "codebook_size": 9, "world_model": {}}

  monkeypatch.setattr(decoder_eval, "Evaluator", FakeEvaluator)
  runs = tmp_path / "runs" / "itc" / "decoders"
  out = itc.cell("itc", (0,), runs / "itc")
  again = itc.cell("sample", (0,), runs / "sample")  # reads the shared result: no evaluation
  assert built == [itc.ARMS]
  assert out[0]["token_acc/h1"] == 0.7 and again[0]["token_acc/h1"] == 0.5
  assert "flicker/h2" not in out[0] and out[0]["real_flicker/h1"] == 0.0
  assert out[0]["config"]["decoder"] == "itc" and out[0]["config"]["setting"]["horizon"] == 6


def test_uhm_per_seed_reads_the_committed_runs():
  """The cell's reader, on the committed run folders: what the raw files hold."""
  from jaxlab.studies import uhm

  run = RESULTS / "uhm/size/runs/e1000_uhm"
  got = uhm.per_seed(run, (0, 1, 2), 20_000, 50)
  assert [round(got[s]["success_pct"]) for s in (0, 1, 2)] == [0, 26, 14]
  raw = json.loads((RESULTS / "uhm/size/raw/e1000_uhm/seed1.json").read_text())
  assert {k: raw[k] for k in got[1]} == got[1]
  pilot = uhm.per_seed(RESULTS / "uhm/pilot/runs/uhm", (0, 1, 2), 4000)
  assert pilot[0]["q_mae"] == pytest.approx(49.71503448486328)
