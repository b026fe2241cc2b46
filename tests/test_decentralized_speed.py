"""The speed study's pieces (jaxlab.optim.decentralized.speed, jaxlab.studies.decentralized): the
L²(λ) quantities against a NumPy transcription, the reconstructed condition, the speed metrics,
the stochastic runs and the study's declaration."""

import csv
import json

import jax
import numpy as np
import pytest

from jaxlab.core import stats
from jaxlab.optim import decentralized as dec
from jaxlab.optim.decentralized import speed, stability
from jaxlab.studies import decentralized as study_mod
from jaxlab.studies import runner


def _transcribed(w, a, lam):
  """The quantities written out from their definitions, without geometry.py's helpers."""
  n = len(lam)
  big = np.diag(np.sqrt(lam))
  small = np.diag(1 / np.sqrt(lam))
  p = np.eye(n) - np.outer(np.ones(n), lam)  # I − J_λ, J_λ = 1λᵀ
  star = lambda b: np.array([[lam[j] * b[j, i] / lam[i] for j in range(n)] for i in range(n)])
  norm = lambda b: np.linalg.norm(big @ b @ small, 2)  # the L²(λ) operator norm
  mu = np.sort(np.abs(np.linalg.eigvals(w)))[::-1]
  nu = np.sort(np.abs(np.linalg.eigvalsh(big @ a @ small)))[::-1]
  rho_w, rho_a = norm(p @ w @ p), norm(p @ a @ p)
  wt = p @ w @ p
  return {
    "gap_W": 1 - mu[1],
    "gap_lam_A": 1 - nu[1],
    "rho_lam_W": rho_w,
    "rho_lam_A": rho_a,
    "rho_sym_W": norm(0.5 * (wt + star(wt))),
    "asym_W": norm(w - star(w)),
    "asym_A": norm(a - star(a)),
    "penalty_W": rho_w - mu[1],
    "n_max_lam": n * lam.max(),
  }


CASES = [("star", "dirichlet", 2.0), ("path", "dirichlet", 0.5), ("barabasi_albert", "degree", 1)]


@pytest.mark.parametrize("topology,kind,alpha", CASES)
def test_cell_quantities_match_the_numpy_transcription(topology, kind, alpha):
  g = dec.make_graph(topology, 7, seed=1)
  lam = dec.make_lambda(kind, g, alpha=alpha, seed=3)
  got = speed.cell_quantities(g, lam)
  want = _transcribed(dec.metropolis(g), dec.row_stochastic(g, lam), lam)
  for k, v in want.items():
    assert got[k] == pytest.approx(v, abs=1e-10), k
  # A is λ-self-adjoint: no penalty, and its one-step factor is 1 − its gap
  assert got["asym_A"] < 1e-12 and got["rho_lam_A"] == pytest.approx(1 - got["gap_lam_A"])
  # W's penalty is non-negative and bounded by the self-adjoint part plus half the asymmetry
  assert got["penalty_W"] >= -1e-12
  assert got["rho_lam_W"] <= got["rho_sym_W"] + 0.5 * got["asym_W"] + 1e-12


def test_uniform_lambda_has_no_penalty_and_unequal_lambda_has_one():
  g = dec.make_graph("path", 6)
  uniform = speed.cell_quantities(g, np.full(6, 1 / 6))
  assert uniform["asym_W"] < 1e-12 and abs(uniform["penalty_W"]) < 1e-12
  assert uniform["drift_W"] < 1e-12
  skewed = speed.cell_quantities(g, dec.make_lambda("dirichlet", g, alpha=0.5, seed=0))
  assert skewed["asym_W"] > 0.1 and skewed["penalty_W"] > 1e-3 and skewed["drift_W"] > 1e-3


@pytest.mark.parametrize("strategy", ["I", "II"])
def test_lambda_average_drift_is_the_non_self_adjoint_term(strategy):
  """ATC: x̄_λ⁺ = x̄_λ − γλᵀBSG + λᵀ(B − B*_λ)e with e = X − 1x̄_λ; zero for (II)'s A."""
  g = dec.make_graph("star", 6)
  lam = dec.make_lambda("dirichlet", g, alpha=1.0, seed=2)
  b, s = dec.mixing_and_scale(strategy, g, lam)
  rng = np.random.default_rng(0)
  x, grad, gamma = rng.normal(size=(6, 3)), rng.normal(size=(6, 3)), 0.1
  new = b @ (x - gamma * s[:, None] * grad)
  e = x - lam @ x
  drift = speed.lambda_average_drift(b, lam)
  np.testing.assert_allclose(lam @ new, lam @ x - gamma * lam @ b @ (s[:, None] * grad) + drift @ e)
  if strategy == "II":
    np.testing.assert_allclose(drift, 0, atol=1e-14)
  else:
    assert np.abs(drift).max() > 1e-3


def test_condition_is_rho_A_at_most_rho_W_below_one():
  assert speed.condition_II(0.90, 0.95) and speed.condition_II(0.95, 0.95)
  assert not speed.condition_II(0.96, 0.95)
  assert not speed.condition_II(0.5, 1.0) and not speed.condition_II(0.5, 3.0)  # vacuous for (I)


@pytest.mark.parametrize("topology,kind,alpha", CASES)
def test_condition_is_the_gap_form_with_the_penalty(topology, kind, alpha):
  """ρ_λ(A) ≤ ρ_λ(W) < 1 ⟺ gap_λ(A) ≥ gap(W) − π_W and ρ_λ(W) < 1."""
  g = dec.make_graph(topology, 7, seed=1)
  q = speed.cell_quantities(g, dec.make_lambda(kind, g, alpha=alpha, seed=3))
  gap_form = q["gap_lam_A"] >= q["gap_W"] - q["penalty_W"] - 1e-12 and q["rho_lam_W"] < 1
  assert q["condition_II"] == gap_form
  assert q["gap_predicts_II"] == (q["gap_lam_A"] > q["gap_W"])


def test_a_cell_where_the_condition_holds_with_a_smaller_gap():
  """The abstract's case: (II)'s gap is smaller than (I)'s, yet ρ_λ(A) ≤ ρ_λ(W) < 1 (the study's
  grid with λ ~ Dir(5), graph seed 0)."""
  config = dec.get_config()
  g = dec.make_graph("grid", 16, seed=config.graph_seed)
  q = speed.cell_quantities(g, dec.make_lambda("dirichlet", g, alpha=5.0, seed=config.graph_seed))
  assert q["gap_lam_A"] < q["gap_W"] and q["condition_II"]


def test_speed_metrics():
  gaps = np.array([[1.0, 0.1, 0.01], [1.0, np.nan, 1e-20]])
  np.testing.assert_allclose(speed.log_gap_auc(gaps), [-1.0, (0 + 6 - 12) / 3])
  curve = np.array([[1.0, 0.5, 0.2, 0.05], [1.0, 0.9, 0.8, 0.7]])
  np.testing.assert_array_equal(speed.steps_to_target(curve, np.array([0.3, 0.3])), [3, 5])
  np.testing.assert_array_equal(speed.steps_to_target(curve, np.array([1.0, 0.7])), [1, 4])


def test_schedule():
  assert float(speed.schedule(0.2, 50, 0.0)) == pytest.approx(0.2)
  assert float(speed.schedule(0.2, 0, 100.0)) == pytest.approx(0.2)
  assert float(speed.schedule(0.2, 100, 100.0)) == pytest.approx(0.1)


@pytest.fixture(scope="module")
def tiny():
  g = dec.make_graph("path", 4)
  lam = dec.make_lambda("dirichlet", g, alpha=2.0, seed=0)
  probs = {s: dec.least_squares(4, d=3, m=6, seed=s, batch_size=2) for s in (0, 1)}
  limits = {s: stability.largest_stable_lr("I", g, lam, p) for s, p in probs.items()}
  runs = [(0, 0.3, 0.0), (1, 0.3, 0.0), (1, 0.3, 5.0)]
  return g, lam, probs, limits, speed.run_grid("I", g, lam, probs, runs, 30, limits=limits)


def test_run_grid_constant_runs_equal_run_of_each_seed(tiny):
  g, lam, probs, limits, gaps = tiny
  for i, s in enumerate((0, 1)):
    alone = dec.run("I", g, lam, probs[s], 30, 0.3 * limits[s], key=jax.random.key(s))
    np.testing.assert_allclose(gaps[i], alone.gap, rtol=1e-4, atol=1e-6)


def test_run_grid_decay_starts_at_the_same_step_then_departs(tiny):
  g, lam, probs, limits, gaps = tiny
  np.testing.assert_allclose(gaps[2, 0], gaps[1, 0], rtol=1e-5)  # γ₀ is the constant step
  assert np.abs(gaps[2, 5:] - gaps[1, 5:]).max() > 1e-4


def test_the_study_is_declared():
  s = study_mod.STUDY
  assert s.name == "decentralized/speed" and len(s.arms) == 40 and len(s.comparisons()) == 20
  assert not set(s.seeds) & set(s.tuning_seeds) and len(s.seeds) >= 10
  assert all(t.kind == "superiority" and not t.higher_is_better for t in s.tests)
  assert len(s.tests) * len(s.comparisons()) == 80
  assert all(a.endswith(".II") and c == a[:-1] for a, c in s.comparisons())
  assert study_mod.parse_arm("barabasi_albert.dir0.5.II") == ("barabasi_albert", "dir0.5", "II")
  assert s.budget["grid_points"] == len(speed.FRACTIONS) == 5


def _fake_results(root):
  """One cell's raw record and a table.csv with its four tests (II faster on two metrics)."""
  cell = "star.degree"
  q = {k: 0.5 for k in study_mod._QUANTITIES} | {"condition_II": True, "gap_predicts_II": False}
  raw = root / "raw" / f"{cell}.II" / "seed10.json"
  raw.parent.mkdir(parents=True)
  raw.write_text(json.dumps({"arm": f"{cell}.II", "seed": 10, **q}))
  rows = []
  for m, diff, p in zip(study_mod.METRICS, ("-0.5", "+0.2", "-3", "-1"), (0.001, 0.5, 0.02, 0.9)):
    rows.append({"section": "test", "metric": m, "arm": f"{cell}.II", "diff": f"{diff} [x, y]"})
    rows[-1]["p"] = repr(p)
  with open(root / "table.csv", "w") as f:
    w = csv.DictWriter(f, runner._CSV_FIELDS, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)


def test_conditions_count_the_classes_with_holm_over_the_tests(tmp_path):
  _fake_results(tmp_path)
  md = study_mod.conditions_markdown(study_mod.STUDY, tmp_path)
  holm = stats.holm([0.001, 0.5, 0.02, 0.9], 4)
  assert holm[0] < 0.05 and holm[2] > 0.05  # 0.02 x 3 = 0.06: not shown after Holm
  auc = md.split("## auc_constant")[1].split("##")[0]
  assert "condition holds (1 cells): (II) shown faster (Holm p < 0.05) in 1" in auc
  assert "condition predicts the faster strategy in 1/1" in auc
  assert "gap only predicts the faster strategy in 0/1" in auc
  steps = md.split("## steps_constant")[1].split("##")[0]
  assert "shown faster (Holm p < 0.05) in 0, faster on the mean in 1" in steps
  assert "over all 4 tested comparisons" in md


def test_committed_conditions_rebuild_from_the_committed_results(tmp_path):
  path = study_mod.STUDY.results / "conditions.md"
  if not path.exists():
    pytest.skip("the study has no committed results")
  assert study_mod.conditions_markdown() == path.read_text()


def test_committed_records_are_the_declared_settings():
  """A resumed arm must run what the committed raw files record (else the seeds would mix)."""
  raw = sorted((study_mod.STUDY.results / "raw").glob("*/seed*.json"))
  if not raw:
    pytest.skip("the study has no committed results")
  for path in raw:
    rec = json.loads(path.read_text())
    c = rec["config"]
    assert c["fractions"] == list(speed.FRACTIONS) and c["tuning_seeds"] == [0, 1, 2, 3]
    assert (c["decay_k0"], c["target"], c["batch_size"]) == (100.0, 0.01, 5)
    assert rec["steps"] == study_mod.STEPS and rec["arm"] == c["arm"]
    assert set(c["chosen_fraction"].values()) <= set(speed.FRACTIONS)
