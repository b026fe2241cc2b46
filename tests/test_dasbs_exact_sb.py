"""`exact.constant_source_sb_log_phi` (the per-site factorised exact SB controller of the constant
source, for lattices too big for the dense Sinkhorn of `exact.exact_sb_rates`): against the dense
one on 3 x 3 Ising, against direct sums on 3 x 3 Potts, through tau-leaping's exact law, and the
`experiments.dasbs_exact` program on 3 x 3."""

import json
import os

import jax.numpy as jnp
import numpy as np
import pytest
from programs import run_program

from jaxlab.sampling import energies, exact, sampler
from jaxlab.sampling import reference as ref_lib

SCHED = ref_lib.Schedule("log_linear", 0.25, 0.5)  # the CPU preset's reference
TARGET = energies.Lattice("ising", 3, 0.44)


def _grid(steps):
  return np.linspace(0.0, 1.0, steps + 1)[:-1]  # the times where tau-leaping calls the controller


def test_log_ratios_match_dense_sinkhorn():
  """Same log phi_t ratios as the Sinkhorn potentials on all 512 states, at three grid times."""
  fn, info = exact.constant_source_sb_log_phi(TARGET, SCHED, _grid(10))
  dense, _ = exact.exact_sb_rates(TARGET, SCHED, "constant")
  states = jnp.asarray(exact.enumerate_states(2, TARGET.D))
  assert info["log_phi_t"].shape == (10, 512)
  for t in (0.0, 0.3, 0.9):
    t_B = jnp.full((512,), t)
    got, want = np.asarray(fn(t_B, states)), np.asarray(dense(t_B, states))
    assert got.shape == (512, TARGET.D, 2)
    np.testing.assert_allclose(got, want, atol=1e-4)
    # not trivially zero off the diagonal: the ratios move with t
    assert np.abs(want).max() > 1.0
  # a grid with t = 1 (K_1 = identity) ends on log phi_1; the other rows do not depend on the grid
  _, closed = exact.constant_source_sb_log_phi(TARGET, SCHED, np.linspace(0.0, 1.0, 11))
  np.testing.assert_allclose(closed["log_phi_t"][-1], closed["log_phi1"], atol=1e-12)
  np.testing.assert_allclose(closed["log_phi_t"][:-1], info["log_phi_t"], atol=1e-12)


def test_potts_ratios_match_direct_sums():
  """3-state Potts (3^9 states: too many for the dense Sinkhorn): the controller's ratios equal
  log sum_y p^r_{1|t}(y | .) phi_1(y) summed directly at a few states and their neighbours. Ising
  cannot test the per-site kernel alone: its global flip symmetry makes K_t and K_t with A and B
  swapped give the same phi_t."""
  tgt = energies.Lattice("potts", 3, 0.9, q=3)
  times = _grid(10)
  fn, info = exact.constant_source_sb_log_phi(tgt, SCHED, times)
  states = exact.enumerate_states(3, tgt.D)
  x_BxD = states[np.random.default_rng(0).choice(len(states), 4, replace=False)]
  nb_Bx9x3 = np.asarray(exact.neighbour_index(x_BxD, 3))
  nb_states = states[nb_Bx9x3.reshape(-1)]
  ham = (nb_states[:, None, :] != states[None, :, :]).sum(-1)
  for k in (0, 4, 9):
    la, lb = (float(v) for v in ref_lib.log_AB(SCHED, times[k], 1.0, 3))
    direct = np.logaddexp.reduce(tgt.D * lb + ham * (la - lb) + info["log_phi1"], axis=1)
    direct = direct.reshape(nb_Bx9x3.shape)
    want = direct - np.take_along_axis(direct, x_BxD[..., None], -1)  # 0 at n = x^d
    got = np.asarray(fn(jnp.full((4,), times[k]), jnp.asarray(x_BxD)))
    np.testing.assert_allclose(got, want, atol=1e-4)


def test_tau_leaping_with_exact_controller_approaches_target():
  """The exact law of tau-leaping with this controller tends to nu as the grid refines (TV measured
  0.069 at 4 steps, 0.0041 at 64: ~ 0.26 / steps)."""
  states, pmf, _ = exact.exact_pmf(TARGET)
  mu = np.where((states == states[:, :1]).all(1), 0.5, 0.0)
  tv = {}
  for steps in (4, 64):
    fn, _ = exact.constant_source_sb_log_phi(TARGET, SCHED, _grid(steps))
    p = sampler.exact_tau_leap_marginal(fn, jnp.asarray(states), mu, SCHED, 2, steps)
    tv[steps] = 0.5 * np.abs(np.asarray(p, np.float64) - pmf).sum()
  assert tv[64] < 0.006, tv
  assert tv[4] > 0.05 and tv[4] > 8 * tv[64], tv


def test_rejects_field_and_bad_grids():
  with pytest.raises(ValueError, match="h = 0"):
    exact.constant_source_sb_log_phi(energies.Lattice("ising", 3, 0.44, h=0.1), SCHED, _grid(4))
  for times in (np.array([0.0, 0.3, 0.9]), np.array([]), np.array([0.5, 0.25])):
    with pytest.raises(ValueError, match="uniform"):
      exact.constant_source_sb_log_phi(TARGET, SCHED, times)


def test_program_floor_and_flag_errors(tmp_path):
  """`experiments.dasbs_exact` on 3 x 3: the floor line and --out, and one-line exit-2 errors."""
  out = tmp_path / "floor.json"
  args = ["--L=3", "--steps=8", "--samples=256", "--seeds=2", f"--out={out}"]
  proc = run_program("experiments.dasbs_exact", args, tmp_path, drop=("XLA_FLAGS",))
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert "exact controller, 8 tau-leaps: err_u" in proc.stdout
  res = json.loads(out.read_text())
  assert res["steps"] == 8 and len(res["err_u_per_seed"]) == 2 and abs(res["err_u"]) < 0.2
  assert sorted(p.name for p in tmp_path.iterdir()) == ["floor.json"]
  bad = run_program(
    "experiments.dasbs_exact", ["--workdir=x", "--beta=0.3"], tmp_path, drop=("XLA_FLAGS",)
  )
  assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
    "error: --beta: is taken from the --workdir run's config.json; remove it"
  ]


@pytest.mark.parametrize(
  "args, flag, text",
  [
    (["--steps=100000000"], "--steps", "this machine has"),
    (["--steps=10000000000"], "--steps", "overflows"),
    (["--samples=3000000000"], "--samples", "overflows"),
    (["--samples=60000000"], "--samples", "this machine has"),
    (["--beta=nan"], "--beta", "finite"),
    (["--seeds=0"], "--seeds", "in [1, "),
  ],
)
def test_program_refuses_what_cannot_fit_up_front(tmp_path, args, flag, text):
  out = tmp_path / "o" / "r.json"
  (tmp_path / "o").mkdir()
  proc = run_program("experiments.dasbs_exact", [*args, f"--out={out}"], tmp_path, timeout=120)
  err = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
  assert proc.returncode == 2 and len(err) == 1, proc.stderr[-2000:]
  assert err[0].startswith(f"error: {flag}:") and text in err[0] and "Traceback" not in proc.stderr
  assert list((tmp_path / "o").iterdir()) == []


def test_program_rerun_leaves_out_unchanged_and_refuses_other_settings(tmp_path):
  out = tmp_path / "r.json"
  args = ["--L=3", "--steps=4", "--samples=32", "--seeds=1", f"--out={out}"]
  first = run_program("experiments.dasbs_exact", args, tmp_path, drop=("XLA_FLAGS",))
  assert first.returncode == 0, first.stderr[-2000:]
  assert "tabulating the exact controller" in first.stdout  # a line before each long phase
  before = out.read_bytes()
  again = run_program("experiments.dasbs_exact", args, tmp_path, drop=("XLA_FLAGS",))
  assert again.returncode == 0 and "nothing rewritten" in again.stdout, again.stderr[-2000:]
  other = run_program("experiments.dasbs_exact", [*args, "--seed=1"], tmp_path)
  err = [line for line in other.stderr.splitlines() if line.startswith("error:")]
  assert other.returncode == 2 and len(err) == 1 and err[0].startswith("error: --out:"), err
  assert "seed: 0 -> 1" in err[0] and out.read_bytes() == before
  assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]
  ro = tmp_path / "ro"
  ro.mkdir(mode=0o500)
  try:
    if not os.access(ro, os.W_OK):
      bad = run_program("experiments.dasbs_exact", [*args[:-1], f"--out={ro}/r.json"], tmp_path)
      assert bad.returncode == 2 and "error: --out:" in bad.stderr and "Traceback" not in bad.stderr
  finally:
    ro.chmod(0o700)
