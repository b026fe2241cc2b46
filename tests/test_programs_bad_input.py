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
  r = run_program(module, args, cwd, timeout=300)
  errors = [line for line in r.stderr.strip().splitlines() if line.startswith("error:")]
  assert r.returncode == 2, (r.returncode, r.stdout[-1000:], r.stderr[-2000:])
  assert "Traceback" not in r.stderr, r.stderr[-2000:]
  assert len(errors) == 1 and errors[0].startswith(f"error: {flag}"), r.stderr[-2000:]
  assert not (tmp_path / "run").exists() and list(cwd.iterdir()) == []
