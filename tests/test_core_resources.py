"""Sizes that cannot fit are refused before allocation; workdir helpers for programs that do not
go through the runtime (a finished run's record, an output folder checked before computing)."""

import json

import pytest

from jaxlab.core import resources, workdir
from jaxlab.core.errors import ConfigError


def test_check_fits_refuses_more_than_the_machine_names_the_field():
  limit = resources.device_memory()
  resources.check_fits(limit // 2, "config.num_envs", "observations")
  with pytest.raises(ConfigError) as e:
    resources.check_fits(limit * 3, "config.num_envs", "observations")
  assert e.value.field == "config.num_envs" and "observations" in e.value.message
  resources.check_fits(limit * 3, "config.num_envs", "observations", devices=4)  # split over 4
  with pytest.raises(ConfigError):
    resources.check_fits(float("inf"), "config.x", "x")


def test_check_int32():
  resources.check_int32("config.pool", 2**31 - 1)
  with pytest.raises(ConfigError, match="overflows"):
    resources.check_int32("config.pool", 2**31)


def test_finished_returns_the_record_or_none(tmp_path):
  assert workdir.finished(tmp_path) is None
  (tmp_path / "summary.json").write_text(json.dumps({"step": 3}))
  assert workdir.finished(tmp_path) == {"step": 3}
  (tmp_path / "summary.json").write_text("{not json")
  with pytest.raises(ConfigError) as e:
    workdir.finished(tmp_path)
  assert e.value.field == "workdir"


def test_check_writable_creates_nothing(tmp_path):
  target = tmp_path / "a" / "b"
  assert workdir.check_writable(target, "out") == target
  assert not (tmp_path / "a").exists()
  (tmp_path / "file").write_text("x")
  with pytest.raises(ConfigError) as e:
    workdir.check_writable(tmp_path / "file" / "sub", "out")
  assert e.value.field == "out"


def test_check_free_sees_a_busy_workdir_and_writes_nothing(tmp_path):
  workdir.check_free(tmp_path / "new")  # no workdir yet: free, and nothing created
  assert not (tmp_path / "new").exists()
  with workdir.session(tmp_path / "run"):
    with pytest.raises(ConfigError, match="in use by pid") as e:
      workdir.check_free(tmp_path / "run")
    assert e.value.field == "workdir"
  workdir.check_free(tmp_path / "run")  # released
  assert (tmp_path / "run" / workdir.LOCK).read_bytes() == b""  # no pid left: re-runs identical
