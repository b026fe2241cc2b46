"""`dicode/selection`'s metrics: what the archive's admission selected, and the headline success.

A real archive (no JAX) filled to capacity: a candidate below the worst active task is rejected by
score, one above it replaces that task, one the sandbox refused counts as such; the counts are
read back from `archive_summary` as the study's raw files record it.
"""

from __future__ import annotations

import ml_collections
import pytest

from jaxlab.rl.dicode import evolution, sandbox
from jaxlab.studies import dicode as study

SOURCE = 'NAME = "t"\n'


def _config(capacity: int):
  c = ml_collections.ConfigDict()
  c.capacity, c.num_slots, c.min_entry_score = capacity, 16, 0.0
  return c


def _add(archive, ok=True, reason="ok"):
  return archive.add(SOURCE, 0, 1, sandbox.Verdict(ok, reason, "t"))


def test_full_archive_rejects_by_score_and_replaces_the_worst(tmp_path):
  archive = evolution.open_archive(tmp_path / "a", {}, 16)
  config, logs = _config(2), []
  for score in (0.1, 0.2):  # room: both admitted
    evolution.admit(archive, _add(archive), score, 0, config, logs.append)
  low, high = _add(archive), _add(archive)
  evolution.admit(archive, low, 0.05, 1, config, logs.append)  # below the worst (0.1): rejected
  evolution.admit(archive, high, 0.15, 1, config, logs.append)  # beats 0.1: replaces it
  _add(archive, ok=False, reason="time limit: ran past 1 CPU seconds")
  summary = evolution.archive_summary(archive)
  counts = evolution.selection_counts(summary)
  assert counts == {
    "proposals": 5,
    "rejected_by_sandbox": 1,
    "rejected_by_score": 1,
    "replaced": 1,
    "admitted_proposals": 2,
  }
  assert archive.get(low)["reason"].startswith("score 0.05 does not beat")
  assert sorted(r["score"] for r in archive.active()) == [0.15, 0.2]


def test_interrupted_rejections_are_neither_sandbox_nor_score():
  summary = {
    "proposed": 3,
    "by_status": {"rejected": 3, "retired": 0},
    "rejection_reasons": {
      "interrupted: the loop stopped before its evaluation session": 1,
      "score 0 below the entry threshold 0.1": 1,
      "memory limit: MemoryError": 1,
    },
  }
  counts = evolution.selection_counts(summary)
  assert (counts["rejected_by_sandbox"], counts["rejected_by_score"]) == (1, 1)


def test_study_metrics_flatten_success_and_selection():
  summary = {
    "achievements": {"place_table": 0.25, "collect_wood": 0.75},
    "archive": {
      "proposed": 2,
      "admitted_proposals": 1,
      "by_status": {"rejected": 1, "retired": 1},
      "rejection_reasons": {"score 0.01 does not beat the worst active task's 0.2": 1},
      "top": [{"score": 0.2}, {"score": 0.0}],
    },
  }
  got = study.derived_selection(summary)
  assert got[f"eval/success/{study.HEADLINE}"] == summary["achievements"][study.HEADLINE]
  assert got["eval/success/collect_wood"] == 0.75
  assert (got["archive/rejected_by_score"], got["archive/replaced"]) == (1, 1)
  assert got["archive/best_score"] == 0.2 and got["archive/scored_tasks"] == 1
  assert "archive/proposals" not in study.derived_selection({"achievements": {}})


@pytest.mark.parametrize("name", ["dicode/selection", "dicode/selection_probe"])
def test_selection_studies_declare_the_headline_and_keep_tuning_seeds_apart(name):
  from jaxlab import studies

  s = studies.get(name)
  if name == "dicode/selection":
    assert s.budget["env_steps"] == 20 * study.SELECTION_U * 16 * 64
    assert s.tests[0].metric == f"eval/success/{study.HEADLINE}"
    assert all(t.comparisons == 4 for t in s.tests)
    assert not set(s.seeds) & set(s.tuning_seeds)
    assert study.SELECTION["capacity"] < 3 * study.SELECTION["proposals"]
  else:
    assert s.seeds == study.TUNING_SEEDS
    assert s.budget["env_steps"] == 20 * study.PROBE_U * 16 * 64
