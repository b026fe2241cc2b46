"""A run never mixes seeds or overwrites another's result.

Every program with a workdir, at its tiniest settings: a valid re-run of a finished run leaves
every file byte-identical (no new file), and a re-run with another ``--seed`` exits 2 with one line
naming ``--workdir`` and the seed. Programs whose finished-run identity is tested elsewhere with the
same two cases: ``test_r4``, ``test_qrim``, ``test_goma``, ``test_decentralized`` (seed recorded by
the program), ``test_dasbs_exact_sb`` (``--out``), ``test_dicode_loop``. Files written outside a
workdir (``dasbs_exact --out``, study tables, ``dicode --compare``) are locked: a second writer
exits 2; a table of another study is not overwritten.
"""

import json
import pathlib

import pytest
from programs import run_program

from jaxlab.core import workdir

LM_TINY = [
  "--config.text=synthetic",
  "--config.vocab_size=32",
  "--config.corpus_tokens=3000",
  "--config.seq_len=16",
  "--config.batch_size=4",
  "--config.d_model=32",
  "--config.n_layers=1",
  "--config.head_dim=8",
  "--config.mlp_dim=64",
  "--config.val_batches=1",
]
CAPACITY = ["--mode=capacity", "--config.capacity.d_models=16", "--config.capacity.num_strings=8"]
CAPACITY += ["--config.capacity.length=8", "--config.capacity.steps=5"]
DASBS = ["--config.L=3", "--config.model=tabular", "--config.knots=2", "--config.batch_size=16"]
DASBS += ["--config.num_repl=2", "--config.buffer_size=32", "--config.resample_freq=3"]
DASBS += ["--config.sampling_steps=4", "--config.num_stages=2", "--config.ctrl_steps=4"]
DASBS += ["--config.corr_steps=2", "--eval_samples=64", "--mcmc_chains=8", "--mcmc_samples=8"]
DASBS += ["--mcmc_burn_in=10", "--mcmc_thin=1", "--steps=6"]
PPO = ["--env=cartpole", "--config.num_envs=4", "--config.num_steps=8", "--config.minibatches=1"]
PPO += ["--config.eval_envs=4", "--config.eval_steps=20", "--steps=2"]

UHM = ["--config.actor_hidden_dims=(32,32)", "--config.value_hidden_dims=(32,32)"]
UHM += ["--config.model_hidden_dims=(32,32)", "--config.reward_hidden_dims=(32,)"]
UHM += ["--config.batch_size=32", "--config.flow_steps=2", "--config.k_max=4", "--steps=2"]
UHM += ["--log_every=1", "--eval_episodes=1"]

PROGRAMS = {
  "example_seeds": ("experiments.example", ["--steps=20", "--log_every=10", "--seeds=2"]),
  # lm records its seeds through workdir.identity as example does; under -m slow
  "lm": pytest.param(
    ("experiments.lm", [*LM_TINY, "--steps=4", "--log_every=2"]), marks=pytest.mark.slow
  ),
  # the identity is the one lm's training mode records (above); the re-run is also
  # test_lm_reliability's
  "lm_capacity": pytest.param(("experiments.lm", [*LM_TINY, *CAPACITY]), marks=pytest.mark.slow),
  # minutes of CPU (the environment and agent build): the byte-identical re-run is also the slow
  # test_itc::test_tiny_experiment_runs_and_resumes
  "itc": pytest.param(("experiments.itc", ["--steps=1", "--log_every=1"]), marks=pytest.mark.slow),
  "dasbs": ("experiments.dasbs", DASBS),
  # PPO recorded its seed before: test_ppo's re-run test covers it in the fast suite
  "ppo": pytest.param(("experiments.ppo", PPO), marks=pytest.mark.slow),
  # ~25 s a run on 2 idle cores (MuJoCo's evaluation episodes)
  "uhm": pytest.param(("experiments.uhm", UHM), marks=pytest.mark.slow),
}


ENV = {"MUJOCO_GL": "egl"}  # headless MuJoCo (experiments.uhm's evaluation)


def _files(root: pathlib.Path) -> dict[str, bytes]:
  return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _exit_2(r, flag: str) -> str:
  errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
  assert r.returncode == 2, (r.returncode, r.stdout[-1000:], r.stderr[-2000:])
  assert len(errors) == 1 and errors[0].startswith(f"error: --{flag}:"), r.stderr[-2000:]
  assert "Traceback" not in r.stderr, r.stderr[-2000:]
  return errors[0]


@pytest.mark.parametrize("program", PROGRAMS.values(), ids=PROGRAMS.keys())
def test_finished_run_rerun_is_byte_identical_and_another_seed_is_refused(tmp_path, program):
  module, args = program
  wd = tmp_path / "run"
  args = [*args, f"--workdir={wd}"]
  run = lambda *extra: run_program(module, [*args, *extra], tmp_path, env=ENV, timeout=600)  # noqa: E731
  first = run()
  assert first.returncode == 0, first.stderr[-3000:]
  before = _files(wd)
  again = run()
  assert again.returncode == 0, again.stderr[-3000:]
  assert _files(wd) == before
  refused = run("--seeds=1,2" if "--seeds=2" in args else "--seed=1")
  line = _exit_2(refused, "workdir")
  assert ("seeds: [0, 1] -> [1, 2]" if "--seeds=2" in args else "seed: 0 -> 1") in line
  assert _files(wd) == before


def test_example_partial_and_finished_runs_refuse_another_seed_and_may_be_extended(tmp_path):
  """The single-seed case of the test above, with a resume of a partial run in between."""
  wd = tmp_path / "run"
  args = ["--log_every=10", "--ckpt_every=10", f"--workdir={wd}"]
  run = lambda *extra: run_program("experiments.example", [*args, *extra], tmp_path)  # noqa: E731
  assert run("--steps=10").returncode == 0
  before = _files(wd)
  assert "seed: 0 -> 1" in _exit_2(run("--steps=20", "--seed=1"), "workdir")
  assert _files(wd) == before
  longer = run("--steps=20")  # --steps may change on resume
  assert longer.returncode == 0, longer.stderr[-2000:]
  assert json.loads((wd / "summary.json").read_text())["step"] == 20
  before = _files(wd)
  assert run("--steps=20").returncode == 0 and _files(wd) == before
  assert "seed: 0 -> 1" in _exit_2(run("--steps=20", "--seed=1"), "workdir")
  assert _files(wd) == before


# ------------------------------------------------------------------ the identity, in-process


def test_identity_is_recorded_and_another_seed_refused(tmp_path):
  with workdir.identity([3]), workdir.session(tmp_path / "a", {"lr": 0.1}):
    pass
  assert json.loads((tmp_path / "a" / "config.json").read_text()) == {"lr": 0.1, "seed": 3}
  with pytest.raises(workdir.ConfigError, match=r"seed: 3 -> 4"):
    with workdir.identity([4]), workdir.session(tmp_path / "a", {"lr": 0.1}):
      pass
  with workdir.identity([0, 1]), workdir.session(tmp_path / "b", {"lr": 0.1}):
    pass
  assert json.loads((tmp_path / "b" / "config.json").read_text())["seeds"] == [0, 1]
  with workdir.session(tmp_path / "c", {"lr": 0.1}):  # outside identity(): as given
    pass
  assert json.loads((tmp_path / "c" / "config.json").read_text()) == {"lr": 0.1}


# ------------------------------------------------------------------ files outside a workdir


def test_output_lock_refuses_a_second_writer(tmp_path):
  with workdir.output_lock(tmp_path, "out"):
    with pytest.raises(workdir.ConfigError, match="another process is writing"):
      with workdir.output_lock(tmp_path, "out"):
        pass
  with workdir.output_lock(tmp_path, "out"):  # released
    pass
  assert list(tmp_path.iterdir()) == []  # no lock file among the outputs


def test_write_atomic_leaves_an_unchanged_file_alone(tmp_path):
  path = workdir.write_atomic(tmp_path / "t.md", "a\n")
  stamp = path.stat().st_mtime_ns
  workdir.write_atomic(path, "a\n")
  assert path.stat().st_mtime_ns == stamp and path.read_text() == "a\n"
  workdir.write_atomic(path, "b\n")
  assert path.read_text() == "b\n" and sorted(p.name for p in tmp_path.iterdir()) == ["t.md"]


def test_dasbs_exact_out_being_written_refuses_a_second_run(tmp_path):
  out = tmp_path / "r.json"
  args = ["--L=3", "--steps=4", "--samples=32", "--seeds=1", f"--out={out}"]
  with workdir.output_lock(tmp_path, "out"):  # a first run computing for this folder
    r = run_program("experiments.dasbs_exact", args, tmp_path)
  assert "another process is writing" in _exit_2(r, "out")
  assert not out.exists()


def test_dicode_compare_is_locked_and_another_comparison_refused(tmp_path):
  from jaxlab.core.errors import ConfigError
  from jaxlab.rl.dicode import reporting

  runs = []
  for name, ret in (("a", 10.0), ("b", 20.0)):
    (tmp_path / name).mkdir()
    summary = {"curriculum": name, "eval/return": ret, "eval/return_pct": ret / 2}
    (tmp_path / name / "summary.json").write_text(json.dumps(summary))
    runs.append(tmp_path / name)
  out = tmp_path / "cmp"
  reporting.compare(runs, out)
  before = _files(out)
  assert {"comparison.json", "comparison.png", "config.json"} <= set(before)
  reporting.compare(runs, out)  # the same comparison again: the same bytes
  assert _files(out) == before
  with pytest.raises(ConfigError, match="another config"):
    reporting.compare(runs[:1], out)
  with workdir.session(out), pytest.raises(ConfigError, match="in use"):
    reporting.compare(runs, out)
  assert _files(out) == before


def test_study_table_is_locked_and_another_studys_table_kept(tmp_path):
  from jaxlab.core.errors import ConfigError
  from jaxlab.studies import runner

  class Study:
    name = "x/y"

  (tmp_path / "table.md").write_text("# other/study\n")
  with pytest.raises(ConfigError, match="another study's table"):
    runner.table(Study(), tmp_path)
  assert (tmp_path / "table.md").read_text() == "# other/study\n"
  with workdir.output_lock(tmp_path, "results"):
    with pytest.raises(ConfigError, match="another process is writing"):
      runner.table(Study(), tmp_path)
