r"""Runs a registered study of a method, or rebuilds its table from the per-seed results.

  python -m experiments.study --list                      # the studies, with their claims
  python -m experiments.study r4/cartpole                 # run what is unfinished, then the table
  python -m experiments.study r4/cartpole --table         # only the table, from the raw files
  python -m experiments.study uhm/size --root=/scratch/runs --results=runs/uhm_size

A study is data in `jaxlab.studies` (claim, arms, held-out and tuning seeds, budget, declared
tests, cell). Each arm's cell runs in ``<root>/<method>/<study>/<arm>`` for the seeds that have no
result yet; each seed's result is written once, as
``<results>/raw/<arm>/seed<k>.json`` (default results: ``docs/results/<method>/<study>``), so a
stopped study resumes and a finished one runs nothing. The table (``table.md``, ``table.csv``) is
built from the raw files only, through `jaxlab.core.stats`: per arm the IQM and the mean with
stratified-bootstrap 95 % intervals over seeds, then the declared tests with their verdicts.
"""

from __future__ import annotations

import sys

from absl import flags

from jaxlab import studies
from jaxlab.core import experiment
from jaxlab.core.errors import ConfigError

flags.DEFINE_bool("table", False, "Only rebuild table.md / table.csv from the raw results.")
flags.DEFINE_bool("list", False, "List the registered studies and their claims.")
flags.DEFINE_string("root", "runs/study", "Folder of the cells' run directories.")
flags.DEFINE_string(
  "results", "", "Folder of the raw results and the table (default: the study's)."
)
FLAGS = flags.FLAGS
UNUSED_FLAGS = experiment.RUN_FLAGS  # out of --help
_NAMES: list[str] = []  # the positional arguments, taken out of argv before absl parses it


def split_positional(argv: list[str]) -> tuple[list[str], list[str]]:
  """``(argv without positional arguments, the positional arguments)``; a value after a non-boolean
  flag given without ``=`` (``--root runs``) stays with its flag."""
  rest, names, value_next = argv[:1], [], False
  for a in argv[1:]:
    if value_next or a.startswith("-"):
      name = a.lstrip("-").split("=")[0]
      value_next = not value_next and a.startswith("--") and "=" not in a
      value_next = value_next and name in FLAGS and not FLAGS[name].boolean
      rest.append(a)
    else:
      names.append(a)
  return rest, names


def _fail(message: str) -> None:
  print(f"error: <method>/<name> (the positional argument): {message}", file=sys.stderr, flush=True)
  sys.exit(2)


def main(argv):
  del argv
  for a in sys.argv[1:]:  # in the order typed: the first one is named
    name = a.lstrip("-").split("=")[0]
    if name in UNUSED_FLAGS and name in FLAGS and FLAGS[name].present:
      raise ConfigError(name, "is not used by experiments.study (a study sets its own)")
  allowed = ", ".join(studies.names())
  if FLAGS.list:
    for name in studies.names():
      print(f"{name}: {studies.get(name).claim}")
    return
  if len(_NAMES) != 1:
    _fail(f"give one study, got {len(_NAMES)} ({' '.join(_NAMES)}); allowed: {allowed}")
  try:
    study = studies.get(_NAMES[0])
  except ConfigError:
    _fail(f"unknown study {_NAMES[0]!r}; allowed: {allowed}")
  results = FLAGS.results or None
  studies.runner.run(study, root=FLAGS.root, results=results, only_table=FLAGS.table)
  print(f"{study.name} -> {results or study.results}/table.md, table.csv")


if __name__ == "__main__":
  sys.argv, _NAMES[:] = split_positional(sys.argv)
  experiment.run(main)
