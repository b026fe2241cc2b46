"""experiments.dasbs: config validation by field, the preset config file, bad input exits 2, a tiny
end-to-end run with resume, and the benchmark's flags."""

import importlib.util
import json
import os
import pathlib

import numpy as np
import pytest
from programs import run_program

from jaxlab.core.errors import ConfigError
from jaxlab.sampling import dasbs

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIG_FILE = ROOT / "experiments" / "configs" / "dasbs.py"


def _config_module():
  spec = importlib.util.spec_from_file_location("dasbs_config_file", CONFIG_FILE)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


@pytest.mark.parametrize(
  "overrides, field",
  [
    (dict(noise="cosine"), "config.noise"),
    (dict(gamma=0.0), "config.gamma"),
    (dict(alpha=-1.0), "config.alpha"),
    (dict(target="potts", q=1), "config.q"),
    (dict(target="potts", h=0.5), "config.h"),
    (dict(beta=-1.0), "config.beta"),
    (dict(beta=float("nan")), "config.beta"),
    (dict(lr=float("nan")), "config.lr"),
    (dict(lr=float("inf")), "config.lr"),
    (dict(L=2), "config.L"),
    (dict(corr_loss="tm"), "config.corr_loss"),  # with the constant source
    (dict(buffer_size=32), "config.buffer_size"),
    (dict(hidden=30), "config.hidden"),
    (dict(model="tabular"), "config.model"),  # 2^64 states
    (dict(dm_eps=1.0), "config.dm_eps"),
    (dict(target="glass"), "config.target"),
  ],
)
def test_make_spec_names_the_bad_field(overrides, field):
  config = dasbs.get_config()
  config.update(**overrides)
  with pytest.raises(ConfigError) as e:
    dasbs.make_spec(config)
  assert e.value.field == field, (e.value.field, e.value.message)


def test_presets_are_valid_config_files():
  module = _config_module()
  assert set(module.PRESETS) == {
    f"{t}_{p}" for t in ("ising", "potts") for p in ("high", "critical", "low")
  }
  for name in module.PRESETS:
    spec = dasbs.make_spec(module.get_config(name))
    assert spec.num_stages == 5 and spec.model == "ropesit" and spec.sched.alpha == 0.5
  default = dasbs.make_spec(module.get_config())
  assert (default.target.kind, default.target.L, default.target.beta) == ("ising", 24, 0.4407)
  assert (default.source, default.ctrl_loss, default.corr_loss, default.lr) == (
    "constant",
    "tm",
    "dm",
    5e-4,
  )
  potts = dasbs.make_spec(module.get_config("potts_low"))
  assert (potts.target.N, potts.target.L, potts.sched.gamma, potts.buffer_size) == (
    4,
    16,
    0.25,
    4096,
  )
  # the CPU presets (docs/results/dasbs/notes.md): beta_c on 4 x 4, 1250 steps, refills every 5
  # steps; the default one with the corrector (alpha 0.5, gamma 0.25, 5 x (150 + 100), batch 128,
  # cosine lr, no corrector EMA, target path weights), the other memoryless (alpha 0.01, gamma 1,
  # no corrector, cosine lr)
  for name in ("ising_critical_cpu", "ising_critical_cpu_memoryless"):
    cpu = dasbs.make_spec(module.get_config(name))
    assert (cpu.target.L, cpu.target.beta, cpu.total_steps, cpu.num_stages) == (4, 0.4407, 1250, 5)
    assert (cpu.resample_freq, cpu.lr, cpu.num_repl, cpu.source) == (5, 1e-3, 4, "constant")
  cpu = dasbs.make_spec(module.get_config("ising_critical_cpu_memoryless"))
  assert (cpu.sched.alpha, cpu.sched.gamma, cpu.corr_steps, cpu.lr_schedule) == (
    0.01,
    1.0,
    0,
    "cosine",
  )
  # memoryless: a site keeps its source value over [0, 1] w.p. within 1 % of 1/2
  keep = (1 + np.exp(-float(cpu.sched.Gamma(0.0, 1.0)))) / 2
  assert 0.5 < keep < 0.505 + 1e-6
  ipf = dasbs.make_spec(module.get_config("ising_critical_cpu"))
  assert (ipf.sched.alpha, ipf.sched.gamma, ipf.ctrl_steps, ipf.corr_steps) == (0.5, 0.25, 150, 100)
  # twice the memoryless preset's pairs per step, same buffer refills per phase
  assert (ipf.batch_size, ipf.buffer_size, cpu.batch_size, cpu.buffer_size) == (128, 1024, 64, 512)
  assert (ipf.ctrl_loss, ipf.corr_loss, ipf.corr_ema, ipf.lr_schedule) == (
    "tm",
    "dm",
    False,
    "cosine",
  )
  # the SB's coupling through the path weights, and corr-DM's Rao-Blackwellised t = 0 target
  assert (ipf.path_weights, ipf.corr_dm_eps, cpu.path_weights) == ("target", 1.0, "none")
  with pytest.raises(SystemExit) as e:
    module.get_config("ising_hot")
  assert e.value.code == 2


def _run(module, args, cwd):
  return run_program(module, args, cwd, drop=("XLA_FLAGS",), timeout=600)


@pytest.mark.parametrize(
  "args, flag",
  [
    (["--config.noise=cosine"], "--config.noise"),
    (["--config.beta=nan"], "--config.beta"),
    (["--config.target=potts", "--config.h=0.5"], "--config.h"),
    ([f"--config={CONFIG_FILE}:ising_hot"], "--config"),
    (["--mcmc_thin=0"], "--mcmc_thin"),
    (["--seeds=0"], "--seeds"),
    (["--seeds=1,1"], "--seeds"),
    (["--seeds=2", "--mesh=data:-1"], "--seeds"),
    # sizes that cannot fit, refused before anything is built (CPU preset otherwise)
    ([f"--config={CONFIG_FILE}:ising_critical_cpu", "--config.hidden=1000000"], "--config.hidden"),
    ([f"--config={CONFIG_FILE}:ising_critical_cpu", "--config.L=1000"], "--config.L"),
    ([f"--config={CONFIG_FILE}:ising_critical_cpu", "--eval_samples=100000000"], "--eval_samples"),
    ([f"--config={CONFIG_FILE}:ising_critical_cpu", "--mcmc_chains=100000000"], "--mcmc_chains"),
    (
      [
        f"--config={CONFIG_FILE}:ising_critical_cpu",
        "--config.batch_size=1000000",
        "--config.buffer_size=1000000",
      ],
      "--config.batch_size",
    ),
  ],
)
def test_bad_input_exits_2_with_one_line(tmp_path, args, flag):
  workdir = tmp_path / "run"
  r = _run("experiments.dasbs", [f"--workdir={workdir}", *args], tmp_path)
  assert r.returncode == 2, (r.stdout, r.stderr[-1500:])
  lines = [l for l in r.stderr.strip().splitlines() if l.startswith("error:")]
  assert len(lines) == 1 and flag in lines[0], r.stderr[-1500:]
  assert "Traceback" not in r.stderr
  assert not workdir.exists() and os.listdir(tmp_path) == []


TINY = [
  "--config.L=3",
  "--config.model=tabular",
  "--config.knots=2",
  "--config.batch_size=16",
  "--config.num_repl=2",
  "--config.buffer_size=32",
  "--config.resample_freq=3",
  "--config.sampling_steps=4",
  "--config.num_stages=2",
  "--config.ctrl_steps=4",
  "--config.corr_steps=2",
  "--eval_samples=64",
  "--mcmc_chains=8",
  "--mcmc_samples=8",
  "--mcmc_burn_in=10",
  "--mcmc_thin=1",
]


def test_tiny_run_resumes_and_reports(tmp_path):
  workdir = tmp_path / "run"
  r = _run("experiments.dasbs", [f"--workdir={workdir}", "--steps=6", *TINY], tmp_path)
  assert r.returncode == 0, r.stderr[-3000:]
  first = json.loads((workdir / "summary.json").read_text())
  assert first["step"] == 6 and np.isfinite(first["train/loss"])
  # one stage = 6 steps: the sampler is scored after it (signed error against the exact U)
  (err,) = first["stage_err_u_signed"]
  u = first["eval/stage_u_per_spin"]
  assert err == pytest.approx(u - first["eval/exact/u_per_spin"]) and -2.5 < u < 0
  r = _run("experiments.dasbs", [f"--workdir={workdir}", *TINY], tmp_path)
  assert r.returncode == 0, r.stderr[-3000:]
  assert "resuming from checkpoint at step 6" in r.stdout + r.stderr
  s = json.loads((workdir / "summary.json").read_text())
  assert s["step"] == 12 and s["resumed_from"] == 6 and s["mcmc/method"] == "sw"
  for k in ("energy_w2", "abs_err_u_per_spin", "ess_target", "mag", "exact/u_per_spin"):
    assert np.isfinite(s[f"eval/{k}"]), k
  assert "provenance" in s and "energy_w2=" in r.stdout
  assert len(s["stage_err_u_signed"]) == 1 and "signed err_u after each stage" in r.stdout
  for name in ("config.json", "metrics.csv", "curves.png", "energy_hist.png"):
    assert (workdir / name).exists(), name
  assert sorted(os.listdir(tmp_path)) == ["run"]  # nothing written to the current directory


def test_benchmark_rejects_unused_shared_flags(tmp_path):
  r = _run("benchmarks.dasbs", ["--steps=5"], tmp_path)
  assert r.returncode == 2 and "error: --steps: is not used" in r.stderr, r.stderr[-1500:]
  missing = tmp_path / "nope"
  r = _run("benchmarks.dasbs", [f"--trained_workdir={missing}"], tmp_path)
  assert r.returncode == 2 and "error: --trained_workdir: no such directory" in r.stderr
  assert not missing.exists()
  # a folder without checkpoints is read, never given a checkpoints/ folder; sizes that cannot
  # fit and zero sizes are refused before any timing
  cpu = f"--config={CONFIG_FILE}:ising_critical_cpu"
  (tmp_path / "empty").mkdir()
  for args, flag in [
    ([f"--trained_workdir={tmp_path / 'empty'}"], "--trained_workdir"),
    (["--num_samples=1000000000"], "--num_samples"),
    (["--num_samples=0"], "--num_samples"),
    (["--mcmc_chains=100000000"], "--mcmc_chains"),
  ]:
    r = _run("benchmarks.dasbs", [cpu, *args], tmp_path)
    err = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert r.returncode == 2 and len(err) == 1 and err[0].startswith(f"error: {flag}:"), r.stderr
    assert "Traceback" not in r.stderr and not r.stdout
  assert list((tmp_path / "empty").iterdir()) == []


def test_printed_result_puts_unweighted_errors_and_target_ess_first():
  from jaxlab.sampling import metrics

  res = {"ess": 0.9, "ess_target": 0.1, "abs_err_u_per_spin": 0.17, "energy_w2": 0.3}
  res |= {"abs_err_f_per_spin": 0.007, "abs_err_u_per_spin_is": 0.01, "mag": 0.0}
  line = metrics.result_line(res)
  names = [part.split("=")[0] for part in line.split()]
  assert names[:3] == ["err_u_unweighted", "energy_w2", "ess_target"]
  assert names[-1] == "ess_log_rnd" and "err_f_reweighted=0.007" in line


def test_presets_only_change_library_fields():
  """Every preset starts from `dasbs.get_config()` and sets only fields it has, each to a value
  other than the library's (a default is declared once)."""
  module = _config_module()
  library = dasbs.get_config()
  for name, fields in {**module.PRESETS, **module.CPU_PRESETS}.items():
    assert set(fields) <= set(library), name
  for part in (module.ISING, module.POTTS, module.UNIFORM, module.LONG):
    assert all(library[k] != v for k, v in part.items()), part


def test_evaluation_and_exact_check_configs_name_the_flag():
  from jaxlab.sampling import evaluation, exact_check

  for mod, field, value in [
    (evaluation, "mcmc_thin", 0),
    (evaluation, "stage_eval_samples", -1),
    (exact_check, "L", 5),
    (exact_check, "samples", 0),
    (exact_check, "beta", float("nan")),
  ]:
    c = mod.get_config()
    c[field] = value
    with pytest.raises(ConfigError) as e:
      mod.validate_config(c)
    assert e.value.field == field
  bins = evaluation.energy_bins(np.array([-2.0, -1.0]), np.array([0.0]))
  assert np.allclose(np.diff(bins), 1.0) and bins[0] == -2.5
  assert evaluation.mcmc_method(dasbs.make_spec(dasbs.get_config()).target) == "sw"
