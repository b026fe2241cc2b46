"""benchmarks.compile and benchmarks.imports: what they count."""

from benchmarks import compile as compile_bench


def test_read_log_counts_only_what_happened_before_the_first_step(tmp_path):
  # A warm run: two cache reads, then the first step; the kill lands while a later program
  # compiles (no hit), which must not show as a fresh compilation.
  log = tmp_path / "warm.log"
  log.write_text(
    "trace 0.5\nlower 0.25\nhit 0\ncompile 1.0\nhit 0\ncompile 2.0\n"
    "first_step 1700000000.5\ntrace 0.1\ncompile 3.0\ncomp"
  )
  out = compile_bench.read_log(log)
  assert out["first_step"] == 1700000000.5
  assert out["count"] == {"trace": 1, "lower": 1, "hit": 2, "compile": 2}
  assert out["seconds"]["compile"] == 3.0 and out["seconds"]["trace"] == 0.5


def test_read_log_of_a_program_without_a_first_step_counts_everything(tmp_path):
  log = tmp_path / "end.log"
  log.write_text("compile 1.0\nwrite 0\ncompile 2.5\n")
  out = compile_bench.read_log(log)
  assert out["first_step"] is None
  assert out["count"] == {"compile": 2, "write": 1} and out["seconds"]["compile"] == 3.5
  assert compile_bench.read_log(tmp_path / "missing.log")["count"] == {}


def test_import_cost_measures_a_fresh_process_and_refuses_a_failed_import():
  import pytest

  from benchmarks import imports

  cpu, wall = imports.import_cost("json")
  assert 0 < cpu < 30 and cpu <= wall + 1.0
  with pytest.raises(RuntimeError, match="import no_such_module_here failed"):
    imports.import_cost("no_such_module_here")
  assert "ml_dtypes" in imports.versions()
