"""The pieces of the dasbs/ising4_time study (docs/dasbs.md, "Study"): the exact energy law, W1,
MCMC for a CPU-time budget, and the declared spec."""

import pathlib
import sys

import jax
import numpy as np
import pytest
import scipy.stats

from jaxlab.sampling import energies, exact, mcmc, metrics


@pytest.fixture(scope="module")
def laws():
  """Exact energy-per-spin laws of 3 x 3 Ising at beta_c, ferromagnetic and antiferromagnetic."""
  ferro = energies.Lattice("ising", 3, 0.4407)
  anti = energies.Lattice("ising", 3, 0.4407, J=-1.0)
  return ferro, exact.energy_law(ferro), exact.energy_law(anti)


def test_energy_law_matches_enumerated_mean(laws):
  tgt, (levels, probs), _ = laws
  assert probs.sum() == pytest.approx(1.0, abs=1e-12)
  assert np.all(np.diff(levels) > 0)
  u = exact.enumerated_observables(tgt)["u_per_site"]
  assert float(levels @ probs) == pytest.approx(u, abs=1e-12)


def test_wasserstein1_matches_scipy():
  rng = np.random.default_rng(0)
  a = rng.integers(-8, 9, 300) / 4.0  # lattice energies repeat: ties on the grid
  b, wb = rng.normal(size=50), rng.random(50)
  want = scipy.stats.wasserstein_distance(a, b, None, wb)
  assert metrics.wasserstein1(a, b, None, wb) == pytest.approx(want, rel=1e-10)
  assert metrics.wasserstein1(a, a) == 0.0
  assert metrics.wasserstein1([0.0], [2.0]) == pytest.approx(2.0)


@pytest.mark.parametrize("method", ["sw", "metropolis"])
def test_mcmc_for_a_time_budget_samples_the_exact_law(laws, method):
  """``seconds=0`` stops after the first chunk: a fixed number of sweeps, so no timing in the test.
  The tolerance separates the ferromagnetic law from the antiferromagnetic one (the coupling's
  sign flipped) by a factor of more than 10."""
  tgt, (levels, probs), (levels_anti, probs_anti) = laws
  run = mcmc.run_for(jax.random.key(0), tgt, 0.0, method, 64, 400, 50)
  assert run["energies"].shape == (350, 64) and list(run["chunk_sweeps"]) == [350]
  e = run["energies"] / tgt.D
  w1 = metrics.wasserstein1(e, levels, None, probs)
  w1_anti = metrics.wasserstein1(e, levels_anti, None, probs_anti)
  tol = 0.03
  assert w1 < tol, (method, w1)
  assert w1_anti > 10 * tol, (method, w1_anti)
  # the sampler's chains mix: the energy's tau_int is a few sweeps at 3 x 3
  assert mcmc.integrated_autocorr(e) < 20


def test_study_spec_validates_and_matches_the_cpu_preset():
  sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
  from experiments.configs import dasbs as presets
  from jaxlab import studies
  from jaxlab.studies import dasbs as study_lib

  study = studies.get("dasbs/ising4_time")
  assert set(study.seeds).isdisjoint(study.tuning_seeds) and set(range(10)) <= set(
    study.tuning_seeds
  )
  assert len(study.seeds) >= 5
  assert {t.metric for t in study.tests} <= set(study.metrics)
  preset = presets.get_config("ising_critical_cpu")
  oracle = study_lib.dasbs_config("dasbs_preset_oracle")
  paper = study_lib.dasbs_config("dasbs_paper")
  schedule = set(study_lib.SCHEDULE)
  for k in preset:
    if k not in schedule:
      assert oracle[k] == preset[k], k  # the preset's sizes and options, a shorter schedule
  assert paper.path_weights == "none" and paper.lr_schedule == "constant" and paper.corr_ema
  assert {k for k in paper if paper[k] != oracle[k]} == set(study_lib.ORACLE)
  steps = oracle.num_stages * (oracle.ctrl_steps + oracle.corr_steps)
  assert study.budget["dasbs_steps"] == steps


def test_checkerboard_metropolis_leaves_a_zero_energy_cycle():
  """A 4 x 4 state in which every flip costs 0: with every site of a colour flipped at once the
  checkerboard move is deterministic and the chain cycles through energy-0 states forever."""
  tgt = energies.Lattice("ising", 4, 0.4407)
  x = np.array([[1, 1, 0, 1], [0, 0, 0, 1], [0, 1, 1, 1], [0, 1, 0, 0]]).reshape(1, 16)
  x = np.repeat(x, 8, 0).astype(np.int32)
  assert np.all(np.asarray(tgt.energy(x)) == 0)
  sweep = jax.jit(lambda k, x: mcmc.metropolis_sweep(k, tgt, x))
  energies_seen = []
  for i in range(20):
    x = sweep(jax.random.key(i), x)
    energies_seen.append(np.asarray(tgt.energy(x)))
  assert np.any(np.asarray(energies_seen) != 0)


def test_committed_raw_files_record_what_the_spec_runs():
  """A rerun of a cell must run what the committed raw files record (else resuming would mix)."""
  import json

  from jaxlab import studies
  from jaxlab.core.metrics import jsonable
  from jaxlab.studies import dasbs as study_lib

  study = studies.get("dasbs/ising4_time")
  for arm in study.arms:
    for seed in study.seeds:
      path = study.results / "raw" / arm / f"seed{seed}.json"
      if not path.exists():
        continue
      rec = json.loads(path.read_text())
      if arm.startswith("dasbs"):
        want = json.loads(json.dumps(jsonable(study_lib.dasbs_config(arm))))
        assert {k: rec["config"][k] for k in want} == want, arm
      else:
        assert rec["config"]["seconds"] == study_lib.MCMC_SECONDS and rec["config"]["method"] == arm
