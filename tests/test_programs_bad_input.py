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


def _check_one_line(r, flag, workdir, cwd):
  """As `_check_refused`, and the error is the only line on stderr (no warning after it)."""
  _check_refused(r, flag, workdir, cwd)
  assert len(r.stderr.strip().splitlines()) == 1, r.stderr[-2000:]


# A --config=path.py that does not give a config: each way of failing is one line naming the file.
BAD_CONFIG_FILES = {
  "syntax": ("def get_config(:\n", "SyntaxError"),
  "raises": ("def get_config():\n  raise RuntimeError('boom')\n", "raised RuntimeError: boom"),
  "no_get_config": ("x = 1\n", "defines no get_config()"),
  "plain_dict": ("def get_config():\n  return {'lr': 1.0}\n", "returned dict"),
  "bad_import": ("import no_such_module_xyz\n", "ModuleNotFoundError"),
}


@pytest.mark.parametrize("kind", sorted(BAD_CONFIG_FILES))
def test_a_config_file_that_does_not_load_is_a_bad_config_flag(tmp_path, kind):
  from jaxlab.core import experiment

  text, why = BAD_CONFIG_FILES[kind]
  path = tmp_path / f"{kind}.py"
  path.write_text(text)
  with pytest.raises(experiment.BadConfigFile) as e:
    experiment.load_config_file(str(path))
  assert (
    e.value.flag == "config" and e.value.message.startswith(f"{path}: ") and why in str(e.value)
  )


def test_a_config_file_that_is_no_file_is_a_bad_config_flag(tmp_path):
  from jaxlab.core import experiment

  for spec, why in [("/dev/null", "not a Python file"), (str(tmp_path / "no.py"), "no such file")]:
    with pytest.raises(experiment.BadConfigFile, match=why):
      experiment.load_config_file(spec)
  (tmp_path / "ok.py").write_text(
    "import ml_collections\ndef get_config(a):\n  return ml_collections.ConfigDict({'a': a})\n"
  )
  assert experiment.load_config_file(f"{tmp_path / 'ok.py'}:x").a == "x"


def test_integers_past_32_bits_and_schedules_of_too_many_chunks_are_refused():
  from jaxlab.core import experiment
  from jaxlab.core.errors import ConfigError

  config = {"n": 3, "sizes": (4, 2**31), "ok": True}
  with pytest.raises(ConfigError, match="2147483648 overflows a 32-bit integer") as e:
    experiment.check_config_ints(config)
  assert e.value.field == "config.sizes"
  experiment.check_config_ints({"n": -(2**31), "flag": True, "x": 1e300})
  with pytest.raises(ConfigError, match="use at least 100") as e:
    experiment.check_chunks(10**8, log_every=1)
  assert e.value.field == "log_every"
  experiment.check_chunks(10**8, log_every=100, ckpt_every=0)


# Through the programs: the same refusals on the command line, one line each. The config file
# cases run on one program of each config style that reads files (define_config_file).
PROGRAM_CASES = [
  ("experiments.lm", ["--config={tmp}/raises.py"], "--config: {tmp}/raises.py: get_config()"),
  ("experiments.lm", ["--config=/dev/null"], "--config: /dev/null: not a Python file"),
  ("experiments.example", ["--steps=2147483648"], "--steps: 2147483648 overflows"),
  ("experiments.example", ["--log_every=9223372036854775808"], "--log_every: 9223372036854775808"),
  ("experiments.example", ["--steps=100000000", "--log_every=1"], "--log_every: 1 cuts"),
  (
    "experiments.example",
    ["--config.num_examples=4294967296"],
    "--config.num_examples: 4294967296",
  ),
  ("experiments.dasbs_exact", ["--seed=9223372036854775808"], "--seed: 9223372036854775808"),
  ("experiments.goma", ["--methods=eg,goma,eg"], "--methods: lists eg more than once"),
  ("experiments.goma", ["--methods=goma_stochastic"], "--methods: goma_stochastic is for stoch"),
  ("experiments.uhm_eval", ["--eval_episodes=2147483648"], "--eval_episodes: 2147483648"),
]


@pytest.mark.parametrize(
  "module, args, text", PROGRAM_CASES, ids=[f"{m}:{' '.join(a)}" for m, a, _ in PROGRAM_CASES]
)
def test_overflowing_numbers_bad_config_files_and_nonsense_are_one_line(
  tmp_path, module, args, text
):
  cwd = tmp_path / "cwd"
  cwd.mkdir()
  (tmp_path / "raises.py").write_text(BAD_CONFIG_FILES["raises"][0])
  args = [a.format(tmp=tmp_path) for a in args] + [f"--workdir={tmp_path / 'run'}"]
  r = run_program(module, args, cwd, timeout=120)
  _check_one_line(r, text.split(":")[0], tmp_path / "run", cwd)
  assert f"error: {text.format(tmp=tmp_path)}" in r.stderr, r.stderr[-2000:]


def test_uhm_evaluation_episodes_are_bounded():
  from jaxlab.core.errors import ConfigError
  from jaxlab.rl.uhm import task

  task.check_eval_episodes(task.MAX_EVAL_EPISODES)
  for n in (0, task.MAX_EVAL_EPISODES + 1):
    with pytest.raises(ConfigError, match="eval_episodes"):
      task.check_eval_episodes(n)
