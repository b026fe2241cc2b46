"""Experiment conventions: bad flags exit 2 with one message naming the flag, no workdir left."""

import json
import os
import subprocess
import sys

import pytest
from programs import run_program


def _run(args, cwd):
  return run_program("experiments.example", args, cwd)


@pytest.mark.parametrize(
  "args, flag",
  [
    (["--steps=-5"], "--steps"),
    (["--log_every=0"], "--log_every"),
    (["--ckpt_every=-1"], "--ckpt_every"),
    (["--mesh=data:3"], "--mesh"),
    (["--mesh=data:3,fsdp:-1"], "--mesh"),
    (["--mesh=bogus"], "--mesh"),
    (["--config.nope=1"], "--config.nope"),
    (["--config.lr=-1"], "--config.lr"),
    (["--config.lr=abc"], "config.lr"),
    (["--config.lr=nan"], "--config.lr"),
    (["--config.noise=inf"], "--config.noise"),
    (["--keep=0"], "--keep"),
    (["--mesh=data:1,data:1"], "--mesh"),
    (["--config.batch_size=30", "--mesh=data:8"], "--config.batch_size"),
    (["--not_a_flag=1"], "not_a_flag"),
    (["positional"], "positional"),
    (["--coordinator_address=h:1"], "--coordinator_address"),
    (["--seeds=0"], "--seeds"),
    (["--seeds=1,1"], "--seeds"),
    (["--seeds=2", "--mesh=data:-1"], "--seeds"),
    (["--seeds=4096", "--config.num_examples=1000000"], "--seeds"),
  ],
)
def test_bad_input_exits_2_without_workdir(tmp_path, args, flag):
  workdir = tmp_path / "run"
  r = _run([f"--workdir={workdir}", *args], tmp_path)
  assert r.returncode == 2, (r.stdout, r.stderr[-1500:])
  lines = [l for l in r.stderr.strip().splitlines() if l.startswith("error:")]
  assert len(lines) == 1 and flag in lines[0], r.stderr[-1500:]
  assert "Traceback" not in r.stderr
  assert not workdir.exists()


@pytest.mark.parametrize(
  "arg, line",
  [
    ("--steps=abc", "error: --steps: must be an integer, got 'abc'"),
    ("--steps=1e3", "error: --steps: must be an integer, got '1e3'"),
    ("--config.lr=abc", "error: --config.lr: must be a number, got 'abc'"),
    ("--profile=maybe", "error: --profile: must be true or false, got 'maybe'"),
    ("--bogus=1", "error: --bogus: unknown flag (--help lists them)"),
  ],
)
def test_absl_parse_errors_read_like_jaxlab_errors(tmp_path, arg, line):
  """absl's own messages (``flag --x=v: ...``) in the one form ``error: --<flag>: <allowed>``."""
  r = _run([f"--workdir={tmp_path / 'run'}", arg], tmp_path)
  assert r.returncode == 2 and r.stderr.strip() == line, r.stderr


def test_example_runs_and_resumes(tmp_path):
  workdir = tmp_path / "run"
  r = _run(
    [
      f"--workdir={workdir}",
      "--steps=200",
      "--log_every=50",
      "--mesh=data:-1",
      "--config.batch_size=64",
    ],
    tmp_path,
  )
  assert r.returncode == 0, r.stderr[-2000:]
  summary = json.loads((workdir / "summary.json").read_text())
  assert summary["step"] == 200 and summary["eval/w_err"] < 0.5
  assert (workdir / "curves.png").stat().st_size > 1000
  r = _run([f"--workdir={workdir}", "--steps=300", "--log_every=50", "--config.lr=0.5"], tmp_path)
  assert r.returncode == 2 and "config.json" not in r.stderr and "lr: 0.01 -> 0.5" in r.stderr
  r = _run(
    [f"--workdir={workdir}", "--steps=300", "--log_every=50", "--config.batch_size=64"], tmp_path
  )
  assert r.returncode == 0, r.stderr[-2000:]
  assert "resuming from checkpoint at step 200" in r.stderr + r.stdout
  assert json.loads((workdir / "summary.json").read_text())["step"] == 300


def test_vmapped_seeds_equal_each_seed_alone(tmp_path):
  """--seeds: every seed draws its own problem and batches; seed 3 of a vmapped run is the run
  --seed=3 alone, and the summary holds each seed's numbers and their means."""
  common = ["--steps=60", "--log_every=20"]
  r = _run([f"--workdir={tmp_path / 'v'}", "--seeds=1,3", *common], tmp_path)
  assert r.returncode == 0, r.stderr[-2000:]
  r = _run([f"--workdir={tmp_path / 's'}", "--seed=3", *common], tmp_path)
  assert r.returncode == 0, r.stderr[-2000:]
  both = json.loads((tmp_path / "v" / "summary.json").read_text())
  alone = json.loads((tmp_path / "s" / "summary.json").read_text())
  assert both["seeds"] == [1, 3] and "seeds" not in alone
  for k in ("train/loss", "eval/w_err"):
    assert both["per_seed"]["3"][k] == pytest.approx(alone[k], rel=1e-5, abs=1e-7), k
    assert both[k] == pytest.approx((both["per_seed"]["1"][k] + both["per_seed"]["3"][k]) / 2)
  assert both["per_seed"]["1"]["eval/w_err"] != pytest.approx(alone["eval/w_err"], rel=1e-3)


def test_unwritable_workdir_is_one_line(tmp_path):
  ro = tmp_path / "ro"
  ro.mkdir()
  ro.chmod(0o500)
  try:
    if os.access(ro, os.W_OK):
      pytest.skip("running as a user that ignores permissions")
    r = _run([f"--workdir={ro}", "--steps=10"], tmp_path)
  finally:
    ro.chmod(0o700)
  assert r.returncode == 2 and "Traceback" not in r.stderr
  assert "--workdir" in r.stderr.strip().splitlines()[-1]


def test_nothing_is_written_to_the_current_directory(tmp_path):
  cwd = tmp_path / "cwd"
  cwd.mkdir()
  r = _run([f"--workdir={tmp_path / 'run'}", "--steps=20"], cwd)
  assert r.returncode == 0, r.stderr[-2000:]
  assert list(cwd.iterdir()) == []


@pytest.mark.parametrize(
  "args, flag",
  [
    (["--config.nope=1"], "--config.nope"),
    (["--config=missing_file.py"], "--config"),
    (["--config=experiments/configs/dasbs.py:bogus"], "--config"),
  ],
)
def test_bad_config_file_flags_exit_2(tmp_path, args, flag):
  """Config-file flags (big_vision style) get the same one-line exit 2 as config dicts."""
  import pathlib

  root = pathlib.Path(__file__).resolve().parents[1]
  args = [a.replace("experiments/", f"{root}/experiments/") for a in args]
  r = run_program("experiments.dasbs", [f"--workdir={tmp_path / 'run'}", *args], tmp_path)
  assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-1500:]
  assert r.stderr.strip().splitlines()[-1].startswith(f"error: {flag}")
  assert not (tmp_path / "run").exists()


def _compile_log(path):
  """Counts of each event of a ``$JAXLAB_COMPILE_LOG`` file (``jaxlab.core.runtime``)."""
  counts = {}
  for line in path.read_text().splitlines():
    counts[line.split()[0]] = counts.get(line.split()[0], 0) + 1
  return counts


def test_compile_cache_is_on_by_default_and_serves_the_second_run(tmp_path):
  """Every program keeps its compiled programs (the folder is in the start-up line); the second
  run of a command compiles nothing: every compilation is a persistent-cache hit, one for each
  entry the first run wrote, and it computes the same numbers; ``off`` reads and keeps none."""
  cache = tmp_path / "xla"
  runs, logs = [], []
  for w in ("a", "b", "c"):
    logs.append(tmp_path / f"{w}.log")
    env = {"JAXLAB_COMPILE_CACHE": str(cache), "JAXLAB_COMPILE_LOG": str(logs[-1])}
    off = ["--compile_cache=off"] if w == "c" else []
    args = [f"--workdir={tmp_path / w}", "--steps=40", *off]
    runs.append(run_program("experiments.example", args, tmp_path, env=env))
    assert runs[-1].returncode == 0, runs[-1].stderr[-2000:]
    if w == "a":
      entries = sorted(p.name for p in cache.iterdir())
  for r in runs[:2]:
    assert f"compile cache {cache}" in r.stdout + r.stderr
  assert "compile cache off" in runs[2].stdout + runs[2].stderr
  cold, warm, off = (_compile_log(p) for p in logs)
  assert cold["write"] == cold["compile"] > 0 and "hit" not in cold, cold
  assert warm["hit"] == warm["compile"] == cold["write"] and "write" not in warm, (cold, warm)
  assert off["compile"] == cold["compile"] and "hit" not in off and "write" not in off, off
  assert cold["first_step"] == warm["first_step"] == 1
  assert len([e for e in entries if e.endswith("-cache")]) == cold["write"]
  assert sorted(p.name for p in cache.iterdir()) == entries
  rows = [json.loads((tmp_path / w / "summary.json").read_text()) for w in ("a", "b")]
  assert rows[0]["train/loss"] == rows[1]["train/loss"]


def test_a_cache_left_broken_by_a_killed_process_is_repaired_and_written_again(tmp_path):
  """A process killed between JAX's two writes of an entry leaves ``<key>-cache`` without
  ``<key>-atime``; JAX's size-bounded cache then fails every later write (every run recompiles).
  Enabling the cache repairs the folder first, so the next run's programs are written."""
  cache = tmp_path / "xla"
  cache.mkdir()
  (cache / "jit_orphan-0123-cache").write_bytes(b"x" * 64)  # killed before its -atime
  (cache / "jit_gone-4567-atime").write_bytes(b"\0" * 8)  # its -cache evicted, then killed
  code = (
    "import jax, jax.numpy as jnp\n"
    "from jaxlab.core import experiment\n"
    f"experiment.enable_compile_cache({str(cache)!r})\n"
    "print(jax.jit(lambda x: jnp.sin(x) * 3.5 + x)(jnp.ones(3)).sum())\n"
  )
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr[-2000:]
  names = sorted(p.name for p in cache.iterdir() if not p.name.startswith("."))
  written = [n for n in names if n.endswith("-cache") and "orphan" not in n]
  assert written, names  # without the repair: only the orphan is there
  assert "jit_orphan-0123-atime" in names and "jit_gone-4567-atime" not in names, names
  assert all(n[: -len("-cache")] + "-atime" in names for n in names if n.endswith("-cache"))


_BACKGROUND_REPORTS = r"""
import _thread, ctypes, sys, threading, time
from jaxlab.core import experiment

experiment._quiet_background_reports()

def python_thread():
  raise RuntimeError("python thread failed")

def native_report():  # native code reporting a failed callback: PyErr_Print -> sys.excepthook
  assert ctypes.pythonapi.PyRun_SimpleString(b"raise RuntimeError('Event loop is closed')") == -1

def raw_thread():
  raise RuntimeError("raw thread failed")

for target in (python_thread, native_report):
  t = threading.Thread(target=target, name=target.__name__)
  t.start()
  t.join()
_thread.start_new_thread(raw_thread, ())
time.sleep(0.5)
raise ValueError("the main thread's own error")
"""


def test_background_errors_are_one_line_each_and_the_main_error_keeps_its_traceback(tmp_path):
  r = subprocess.run(
    [sys.executable, "-c", _BACKGROUND_REPORTS], capture_output=True, text=True, cwd=tmp_path
  )
  lines = r.stderr.strip().splitlines()
  warnings = [line for line in lines if line.startswith("warning:")]
  assert warnings[:2] == [
    "warning: background thread python_thread: RuntimeError: python thread failed",
    "warning: background thread native_report: RuntimeError: Event loop is closed",
  ], r.stderr
  assert len(warnings) == 3 and warnings[2].startswith(
    "warning: Exception ignored in thread started by: <function raw_thread"
  ), r.stderr
  assert warnings[2].endswith(": RuntimeError: raw thread failed"), r.stderr
  assert r.stderr.count("Traceback") == 1 and lines[-1].startswith("ValueError: the main"), r.stderr
