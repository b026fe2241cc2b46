"""TPU-pod launcher: create a TPU VM slice, copy this repo, run one command on every worker.

  python -m launch.tpu create --name=jl --zone=us-east5-a --accelerator=v5p-32
  python -m launch.tpu copy   --name=jl --zone=us-east5-a
  python -m launch.tpu run    --name=jl --zone=us-east5-a -- \\
      python -m experiments.uhm --mesh=data:-1 --workdir=/gcs/my-bucket/uhm
  python -m launch.tpu logs   --name=jl --zone=us-east5-a
  python -m launch.tpu delete --name=jl --zone=us-east5-a

The first argument is the action; everything after ``--`` is the command, passed literally.
``--dry_run`` prints the exact gcloud commands without running them.

* ``create`` picks the TPU runtime (``--version``) that matches ``--accelerator``.
* ``copy`` ships the committed tree (``git archive HEAD``) to every worker and runs
  ``launch/setup_worker.sh`` there: a Python 3.11/3.12 virtualenv in ``~/jaxlab/.venv`` (installed
  with apt when the image lacks it; a clear error otherwise) and ``pip install -e '.[tpu,...]'``.
* ``run`` installs the extras its command needs (``experiments.uhm`` needs ``ogbench``) if they are
  missing, then starts the command in that virtualenv on every worker (``--worker=all``);
  ``jaxlab.core.distributed.initialize()`` discovers the pod and the mesh spans all hosts' chips.

The workdir must be on storage every host sees (a GCS FUSE mount such as /gcs/<bucket>, or NFS).
See docs/launch.md.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys

from absl import flags

from jaxlab.core.errors import ConfigError, require
from launch import common
from launch.common import check_text

ACTIONS = ("create", "copy", "run", "logs", "delete")
REMOTE_DIR = "~/jaxlab"
LOG_FILE = "~/jaxlab_run.log"
TARBALL = "/tmp/jaxlab_src.tar.gz"

# TPU runtime ("software version") per generation, from Google Cloud's "TPU software versions" page
# for JAX: v6e -> v2-alpha-tpuv6e, v5p -> v2-alpha-tpuv5, v5e -> v2-alpha-tpuv5-lite, v4 and
# older -> tpu-ubuntu2204-base.
RUNTIMES = {
  "v2": "tpu-ubuntu2204-base",
  "v3": "tpu-ubuntu2204-base",
  "v4": "tpu-ubuntu2204-base",
  "v5litepod": "v2-alpha-tpuv5-lite",
  "v5p": "v2-alpha-tpuv5",
  "v6e": "v2-alpha-tpuv6e",
}
ALIASES = {"v5e": "v5litepod"}  # gcloud's accelerator type for v5e is v5litepod-N

# Optional dependencies (setup.cfg extras) a program needs beyond `.[tpu]`.
EXTRAS_BY_MODULE = {
  "experiments.uhm": ("ogbench",),
  "experiments.uhm_eval": ("ogbench",),
  "experiments.study": ("ogbench",),  # the uhm/* studies read OGBench
  "envs.ogbench_generate": ("ogbench",),
  "benchmarks.uhm": ("ogbench",),
}
KNOWN_EXTRAS = ("ogbench", "quantum")


def define_flags(fv: flags.FlagValues) -> None:
  kw = dict(flag_values=fv)
  flags.DEFINE_string("name", None, "TPU VM name (lowercase letters, digits, '-').", **kw)
  flags.DEFINE_string("zone", None, "GCP zone, e.g. us-east5-a.", **kw)
  flags.DEFINE_string("project", None, "GCP project (default: gcloud's).", **kw)
  flags.DEFINE_string(
    "accelerator",
    "v5p-8",
    "create: accelerator type, e.g. v5p-32, v4-64, v5litepod-16, v6e-8.",
    **kw,
  )
  flags.DEFINE_string(
    "version", None, "create: TPU runtime (default: the one matching --accelerator).", **kw
  )
  flags.DEFINE_bool("spot", False, "create: a spot (preemptible) slice.", **kw)
  flags.DEFINE_list(
    "extras",
    [],
    "copy/run: setup.cfg extras to install besides tpu and those the command needs "
    f"({', '.join(KNOWN_EXTRAS)}).",
    **kw,
  )
  flags.DEFINE_bool("foreground", False, "run: stream the output instead of nohup.", **kw)
  flags.DEFINE_integer("log_worker", 0, "logs: which worker to tail.", **kw)
  flags.DEFINE_bool("dry_run", False, "Print the commands, run nothing.", **kw)


@dataclasses.dataclass(frozen=True)
class Options:
  """The validated launch request."""

  action: str
  name: str
  zone: str
  project: str | None = None
  accelerator: str = "v5p-8"
  version: str | None = None
  spot: bool = False
  extras: tuple[str, ...] = ()
  foreground: bool = False
  log_worker: int = 0
  dry_run: bool = False
  command: tuple[str, ...] = ()


def accelerator_type(accelerator: str) -> tuple[str, str]:
  """``(gcloud accelerator type, matching runtime)``; raises ConfigError for unknown types."""
  m = re.fullmatch(r"(v[0-9][a-z]*)-([0-9]+)", accelerator or "")
  gens = ", ".join([*RUNTIMES, *ALIASES])
  require(m is not None, "accelerator", f"{accelerator!r} is not <generation>-<cores>, e.g. v5p-32")
  gen = ALIASES.get(m.group(1), m.group(1))
  require(gen in RUNTIMES, "accelerator", f"unknown generation {m.group(1)!r}; known: {gens}")
  return f"{gen}-{m.group(2)}", RUNTIMES[gen]


def module_of(command: tuple[str, ...]) -> str | None:
  """The Python module a command runs: ``python -m x.y`` or ``python x/y.py`` -> ``x.y``."""
  for i, arg in enumerate(command):
    if arg == "-m" and i + 1 < len(command):
      return command[i + 1]
    if arg.startswith("-m") and len(arg) > 2:
      return arg[2:]
    if arg.endswith(".py") and not arg.startswith("-"):
      return arg[:-3].lstrip("./").replace("/", ".")
  return None


def extras_for(opts: Options) -> tuple[str, ...]:
  """``tpu`` plus what the command's program needs plus ``--extras``, in a stable order."""
  needed = EXTRAS_BY_MODULE.get(module_of(opts.command) or "", ())
  return ("tpu", *sorted(set(needed) | set(opts.extras)))


def validate(opts: Options) -> Options:
  require(
    opts.action in ACTIONS,
    "action",
    f"give one of {', '.join(ACTIONS)} as the first argument"
    + (f", got {opts.action!r}" if opts.action else ""),
  )
  require(opts.name is not None, "name", "is required (the TPU VM name)")
  require(opts.zone is not None, "zone", "is required, e.g. --zone=us-east5-a")
  check_text(
    "name",
    opts.name,
    r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?",
    "lowercase letters, digits and '-', starting with a letter (GCP resource names)",
  )
  check_text("zone", opts.zone, r"[a-z]+-[a-z]+[0-9]+-[a-z]", "e.g. us-east5-a")
  check_text(
    "project",
    opts.project,
    r"([a-z0-9.-]+:)?[a-z][-a-z0-9]{4,28}[a-z0-9]",
    "a GCP project id, e.g. my-project-123",
  )
  if opts.version is not None:
    check_text("version", opts.version, r"[A-Za-z0-9._-]+", "e.g. v2-alpha-tpuv5")
  accelerator_type(opts.accelerator)
  for extra in opts.extras:
    require(
      extra in KNOWN_EXTRAS, "extras", f"unknown extra {extra!r}; known: {', '.join(KNOWN_EXTRAS)}"
    )
  require(opts.log_worker >= 0, "log_worker", f"must be >= 0, got {opts.log_worker}")
  if opts.action == "run":
    common.require_command(opts.command, "python -m experiments.uhm --mesh=data:-1")
  else:
    require(not opts.command or opts.action == "copy", "--", f"{opts.action} takes no command")
  return opts


def options(fv: flags.FlagValues, command, action: str | None) -> Options:
  extras = tuple(fv.extras)
  return validate(
    common.from_flags(Options, fv, action=action, extras=extras, command=tuple(command))
  )


def parse(argv: list[str]) -> Options:
  """``[action] [flags] [-- command]`` -> validated :class:`Options` (library use and tests)."""
  own, command = common.split_command(argv)
  action = own.pop(0) if own and not own[0].startswith("-") else None
  return options(common.parse_flags(define_flags, "launch.tpu", own), command, action)


def _base(opts: Options) -> list[str]:
  extra = [f"--zone={opts.zone}"]
  if opts.project:
    extra.append(f"--project={opts.project}")
  return extra


def _ssh(opts: Options, command: str, worker: str = "all") -> list[str]:
  return (
    ["gcloud", "compute", "tpus", "tpu-vm", "ssh", opts.name]
    + _base(opts)
    + [f"--worker={worker}", f"--command={command}"]
  )


def _setup(opts: Options, if_missing: bool) -> str:
  mode = " --if-missing" if if_missing else ""
  return f"bash launch/setup_worker.sh{mode} {','.join(extras_for(opts))}"


def commands(opts: Options) -> list[list[str]]:
  """The gcloud commands for one action (what ``--dry_run`` prints)."""
  if opts.action == "create":
    accel, runtime = accelerator_type(opts.accelerator)
    cmd = (
      ["gcloud", "compute", "tpus", "tpu-vm", "create", opts.name]
      + _base(opts)
      + [f"--accelerator-type={accel}", f"--version={opts.version or runtime}"]
    )
    return [cmd + ["--spot"] if opts.spot else cmd]
  if opts.action == "copy":
    # The committed tree: identical code on every worker, no stray local files.
    return [
      ["git", "archive", "--format=tar.gz", "-o", TARBALL, "HEAD"],
      ["gcloud", "compute", "tpus", "tpu-vm", "scp", TARBALL, f"{opts.name}:/tmp/"]
      + _base(opts)
      + ["--worker=all"],
      _ssh(
        opts,
        f"mkdir -p {REMOTE_DIR} && tar -xzf {TARBALL} -C {REMOTE_DIR} && "
        f"cd {REMOTE_DIR} && {_setup(opts, if_missing=False)}",
      ),
    ]
  if opts.action == "run":
    user = common.join(opts.command)
    prefix = f"cd {REMOTE_DIR} && {_setup(opts, if_missing=True)} && . .venv/bin/activate && "
    if opts.foreground:
      return [_ssh(opts, f"{prefix}JAXLAB_TPU_POD=1 {user}")]
    # Only the command is detached: a failing setup is reported by ssh before anything starts.
    return [
      _ssh(opts, f"{prefix}{{ JAXLAB_TPU_POD=1 nohup {user} > {LOG_FILE} 2>&1 < /dev/null & }}")
    ]
  if opts.action == "logs":
    return [_ssh(opts, f"tail -n 200 -f {LOG_FILE}", worker=str(opts.log_worker))]
  if opts.action == "delete":
    return [
      ["gcloud", "compute", "tpus", "tpu-vm", "delete", opts.name] + _base(opts) + ["--quiet"]
    ]
  raise ConfigError("action", f"unknown action {opts.action!r}")


def _warn_uncommitted() -> None:
  """``copy`` ships HEAD: say so when the working tree differs from it."""
  try:
    out = subprocess.run(
      ["git", "status", "--porcelain", "--untracked-files=no"],
      capture_output=True,
      text=True,
      check=True,
    ).stdout
  except (OSError, subprocess.CalledProcessError):
    return
  if out.strip():
    print(
      f"warning: copy ships the last commit; {len(out.splitlines())} changed file(s) are not "
      "committed and will not reach the workers",
      file=sys.stderr,
      flush=True,
    )


def run(opts: Options) -> int:
  if opts.action == "copy":
    _warn_uncommitted()
  return common.execute(commands(opts), opts.dry_run)


def main(fv: flags.FlagValues, command: list[str], action: str | None) -> int:
  return run(options(fv, command, action))


if __name__ == "__main__":
  common.entry(main, define_flags, positional=True)
