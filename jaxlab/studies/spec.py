"""A study as data: what it claims, its arms and seeds, its budget, its declared tests, its cell.

    Study(
      name="r4/cartpole",
      claim="R4 ... (arXiv 2601.09236).",
      arms=("true", "r4_noise0", "rbrl_noise0", ...),
      control="rbrl_noise0",
      pairs=(("r4_noise0", "rbrl_noise0"), ("r4_noise0", "bt_noise0"), ...),
      seeds=(0, 1, 2),            # held out: the table's replicates
      tuning_seeds=(),            # seeds that chose settings (none here); disjoint from `seeds`
      budget={"ppo_updates": 24, "env_steps": 49152},
      tests=(stats.Test("superiority", "heldout/kendall_tau"),),
      cell=r4_cell,               # cell(arm, seeds, workdir) -> {seed: summary}
    )

A cell runs one arm for the seeds it is given (all at once when the method trains seeds together,
else one after the other) in ``workdir`` and returns per seed a flat summary: ``config`` (what ran)
and the metrics. :mod:`jaxlab.studies.runner` writes each seed's summary once, as
``<results>/raw/<arm>/seed<k>.json``, and builds the table from those files only.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re
from collections.abc import Callable, Mapping
from typing import Any

from jaxlab.core import stats
from jaxlab.core.errors import ConfigError, require

Cell = Callable[[str, tuple[int, ...], pathlib.Path], dict[int, dict]]
RESULTS = pathlib.Path("docs", "results")  # where the committed studies live, from the clone's root
_NAME = re.compile(r"[a-z0-9][a-z0-9_]*/[a-z0-9][a-z0-9_]*")
_ARM = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@:-]*")  # a folder name on every file system we use


@dataclasses.dataclass(frozen=True)
class Study:
  """One study (module docstring); validated on creation (:class:`ConfigError` naming the field).

  Attributes:
    name: ``<method>/<study>``.
    claim: the paper's claim under test, one sentence, with its arXiv id.
    arms: the arms, in table order.
    control: the arm the others are tested against (unless ``pairs`` names the comparisons).
    seeds: the held-out evaluation seeds: each arm runs every one; the table's replicates.
    tuning_seeds: the seeds used to choose settings; never also evaluation seeds.
    budget: what is equal across arms (updates, environment steps); a summary that reports one of
      these keys must report this value.
    tests: the declared tests (metric, kind, margin, direction); run on every pair.
    cell: ``cell(arm, seeds, workdir) -> {seed: summary}``.
    pairs: ``(arm, control)`` comparisons; empty: every other arm against ``control``.
    metrics: what the table reports per arm; empty: the tests' metrics.
    note: one paragraph under the table's header (how the raw files came to be, what differs).
  """

  name: str
  claim: str
  arms: tuple[str, ...]
  control: str
  seeds: tuple[int, ...]
  tuning_seeds: tuple[int, ...]
  budget: Mapping[str, Any]
  tests: tuple[stats.Test, ...]
  cell: Cell
  pairs: tuple[tuple[str, str], ...] = ()
  metrics: tuple[str, ...] = ()
  note: str = ""

  def __post_init__(self):
    # Frozen: normalise the sequences once, so a spec written with lists compares and hashes.
    set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731
    set_("arms", tuple(self.arms))
    set_("seeds", tuple(int(s) for s in self.seeds))
    set_("tuning_seeds", tuple(int(s) for s in self.tuning_seeds))
    set_("tests", tuple(self.tests))
    set_("pairs", tuple((str(a), str(b)) for a, b in self.pairs))
    set_("budget", dict(self.budget))
    set_("metrics", tuple(self.metrics) or tuple(dict.fromkeys(t.metric for t in self.tests)))
    validate(self)

  @property
  def method(self) -> str:
    return self.name.split("/")[0]

  @property
  def study(self) -> str:
    return self.name.split("/")[1]

  @property
  def results(self) -> pathlib.Path:
    """``docs/results/<method>/<study>/`` (relative to the clone's root)."""
    return RESULTS / self.method / self.study

  def comparisons(self) -> tuple[tuple[str, str], ...]:
    """The ``(arm, control)`` pairs every declared test is run on."""
    return self.pairs or tuple((a, self.control) for a in self.arms if a != self.control)


def validate(study: Study) -> None:
  """Raises :class:`ConfigError` naming the first bad field of ``study``."""
  s = study
  require(
    isinstance(s.name, str) and _NAME.fullmatch(s.name) is not None,
    "study.name",
    f"must be <method>/<study> in lower case, got {s.name!r}",
  )
  require(bool(s.claim.strip()), "study.claim", f"{s.name}: state the paper's claim")
  require(bool(s.arms), "study.arms", f"{s.name}: name at least one arm")
  bad = [a for a in s.arms if not isinstance(a, str) or _ARM.fullmatch(a) is None]
  require(not bad, "study.arms", f"{s.name}: {bad[0]!r} is not a folder name" if bad else "")
  require(len(set(s.arms)) == len(s.arms), "study.arms", f"{s.name}: an arm repeats: {s.arms}")
  require(s.control in s.arms, "study.control", f"{s.name}: {s.control!r} is not one of {s.arms}")
  require(bool(s.seeds), "study.seeds", f"{s.name}: name at least one evaluation seed")
  for field, seeds in (("seeds", s.seeds), ("tuning_seeds", s.tuning_seeds)):
    require(all(x >= 0 for x in seeds), f"study.{field}", f"{s.name}: must be >= 0, got {seeds}")
    require(len(set(seeds)) == len(seeds), f"study.{field}", f"{s.name}: repeats a seed {seeds}")
  shared = sorted(set(s.seeds) & set(s.tuning_seeds))
  if shared:
    raise ConfigError(
      "study.tuning_seeds",
      f"{s.name}: seeds {shared} chose settings and cannot also be held-out evaluation seeds",
    )
  require(bool(s.budget), "study.budget", f"{s.name}: state what is equal across arms")
  require(callable(s.cell), "study.cell", f"{s.name}: must be cell(arm, seeds, workdir)")
  for arm, control in s.pairs:
    for a in (arm, control):
      require(a in s.arms, "study.pairs", f"{s.name}: {a!r} is not one of {s.arms}")
    require(arm != control, "study.pairs", f"{s.name}: {arm!r} against itself")
  for t in s.tests:
    require(
      isinstance(t, stats.Test), "study.tests", f"{s.name}: {t!r} is not a jaxlab.core.stats.Test"
    )
    require(
      t.metric in s.metrics,
      "study.tests",
      f"{s.name}: the test's metric {t.metric!r} is not reported (metrics: {s.metrics})",
    )
  require(
    not s.tests or bool(s.comparisons()), "study.pairs", f"{s.name}: the tests compare nothing"
  )


def with_fields(config, fields: Mapping[str, Any]):
  """A copy of the ConfigDict ``config`` with the dotted ``fields`` set (a study's settings)."""
  c = config.copy_and_resolve_references()
  for name, value in fields.items():
    *parents, leaf = name.split(".")
    node = c
    for p in parents:
      node = node[p]
    node[leaf] = value
  return c
