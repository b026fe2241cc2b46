"""Every program (``experiments.*``, ``benchmarks.*``, ``envs.ogbench_generate``) meets the shared
kinds of bad input the same way: exit 2, one line naming the flag the user typed, no traceback,
nothing written (no workdir, nothing in the current directory). The method-specific cases (sizes
that cannot fit, malformed files, endpoints, re-runs) are in each method's tests and in
tests/test_reliability.py."""

import pathlib

import pytest
from programs import REPO, run_program

PROGRAMS = sorted(
  f"{folder}.{p.stem}"
  for folder in ("experiments", "benchmarks")
  for p in pathlib.Path(REPO, folder).glob("*.py")
  if p.stem != "__init__"
) + ["envs.ogbench_generate"]

CASES = [
  (["--no_such_flag=1"], "--no_such_flag"),  # an unknown name (absl's parser)
  (["--steps=0"], "--steps"),  # a zero size (or a shared flag the program does not use)
  (["--workdir={tmp}/a_file"], "--workdir"),  # a workdir that cannot be one
]


def _check_refused(r, flag, workdir, cwd):
  """Exit 2, exactly one ``error: <flag>...`` line, no traceback, nothing written."""
  errors = [line for line in r.stderr.strip().splitlines() if line.startswith("error:")]
  assert r.returncode == 2, (r.returncode, r.stdout[-1000:], r.stderr[-2000:])
  assert "Traceback" not in r.stderr, r.stderr[-2000:]
  assert len(errors) == 1 and errors[0].startswith(f"error: {flag}"), r.stderr[-2000:]
  assert not workdir.exists() and list(cwd.iterdir()) == []


def _has_config(module: str) -> bool:
  path = pathlib.Path(REPO, *module.split(".")).with_suffix(".py")
  return "define_config" in path.read_text()


PARAMS = [(m, a, f) for m in PROGRAMS for a, f in CASES] + [
  (m, ["--config.no_such_field=1"], "--config.no_such_field") for m in PROGRAMS if _has_config(m)
]


@pytest.mark.parametrize(
  "module, args, flag", PARAMS, ids=[f"{m}:{a[0].split('=')[0]}" for m, a, _ in PARAMS]
)
def test_shared_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, module, args, flag):
  cwd = tmp_path / "cwd"
  cwd.mkdir()
  (tmp_path / "a_file").write_text("not a folder")
  args = [a.format(tmp=tmp_path) for a in args]
  if module.startswith("experiments.") and not any(a.startswith("--workdir=") for a in args):
    args.append(f"--workdir={tmp_path / 'run'}")  # the benchmarks and the generator have none
  _check_refused(run_program(module, args, cwd, timeout=300), flag, tmp_path / "run", cwd)


# A float field and a size field of each program's config: a non-finite number, a negative, a
# zero and an oversized size (refused before allocation, with the memory estimate or as an int32
# overflow) are each one line naming the field.
FIELDS = {
  "experiments.uhm": ("config.actor_noise", "config.batch_size"),
  "experiments.ppo": ("config.gamma", "config.num_envs"),
  "experiments.r4": ("config.noise", "config.pool"),
  "experiments.qrim": ("config.gamma", "config.trials"),
  "experiments.dicode": ("config.bonus_k", "config.ppo.num_envs"),
  "experiments.itc": ("config.wm_lr", "config.ppo.num_envs", "config.imag_batch"),
  "experiments.goma": ("config.sigma", "config.d", "config.n"),
  "experiments.decentralized": ("config.lr", "config.n"),
  "experiments.dasbs": ("config.beta", "config.batch_size", "config.buffer_size"),
  "experiments.lm": ("config.lr", "config.batch_size"),
  "experiments.example": ("config.lr", "config.batch_size"),
}
VALUES = [
  (0, "nan"),
  (1, "-1"),
  (1, "0"),
  (2, "1000000000000"),  # the size field again, or one whose cross-field rules come later
]
FIELD_PARAMS = [
  (m, fields[min(i, len(fields) - 1)], v) for m, fields in FIELDS.items() for i, v in VALUES
]


@pytest.mark.parametrize(
  "module, field, value", FIELD_PARAMS, ids=[f"{m}:{f}={v}" for m, f, v in FIELD_PARAMS]
)
def test_bad_sizes_and_numbers_are_one_line_exit_2(tmp_path, module, field, value):
  cwd = tmp_path / "cwd"
  cwd.mkdir()
  args = [f"--{field}={value}", f"--workdir={tmp_path / 'run'}"]
  _check_refused(run_program(module, args, cwd, timeout=300), f"--{field}", tmp_path / "run", cwd)
