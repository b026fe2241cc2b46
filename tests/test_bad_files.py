"""Bad files and addresses a user names are one line naming the flag and the file, exit 2."""

import io
import os
import pathlib
import shutil
import subprocess
import sys
import zipfile

import numpy as np
import pytest

from jaxlab.core import distributed, files
from jaxlab.core.errors import ConfigError
from jaxlab.rl.uhm import offline_data

ROOT = pathlib.Path(__file__).resolve().parents[1]
EMBEDDED = ROOT / "jaxlab" / "envs" / "data" / "cube-single-play-v0"


def _npy(shape, descr="<f8", payload=b"") -> bytes:
  buf = io.BytesIO()
  header = {"descr": descr, "fortran_order": False, "shape": shape}
  np.lib.format.write_array_header_1_0(buf, header)
  return buf.getvalue() + payload


def _lying_npz(path, shape=(2**40,)) -> pathlib.Path:
  """An .npz whose one member declares ``shape`` but holds 64 bytes."""
  with zipfile.ZipFile(path, "w") as z:
    z.writestr("observations.npy", _npy(shape, payload=bytes(64)))
  return pathlib.Path(path)


def _dataset(path, **over) -> pathlib.Path:
  n = 10
  d = dict(
    observations=np.zeros((n, 3), np.float32),
    actions=np.zeros((n, 2), np.float32),
    terminals=np.arange(n) == n - 1,
  )
  d.update(over)
  np.savez(path, **d)
  return pathlib.Path(path)


def _raises(fn, *args, match: str, field: str = "f"):
  with pytest.raises(ConfigError, match=match) as e:
    fn(*args)
  assert e.value.field == field
  return e.value


# ------------------------------------------------------------------------------- any named file


def test_a_directory_is_not_a_file(tmp_path):
  _raises(files.read_json, "f", tmp_path, match="is a directory")
  _raises(files.npz_members, "f", tmp_path, match="is a directory")


def test_a_fifo_is_refused_without_blocking(tmp_path):
  fifo = tmp_path / "x.npz"
  os.mkfifo(fifo)
  _raises(files.npz_members, "f", fifo, match="not a regular file")
  _raises(files.read_json, "f", fifo, match="not a regular file")


def test_a_symlink_loop_and_a_missing_file(tmp_path):
  loop = tmp_path / "loop.json"
  loop.symlink_to(loop.name)
  _raises(files.read_json, "f", loop, match="cannot be opened")
  _raises(files.npz_members, "f", tmp_path / "absent.npz", match="no such file")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file")
def test_a_file_without_read_permission(tmp_path):
  p = tmp_path / "x.json"
  p.write_text("{}")
  p.chmod(0)
  _raises(files.read_json, "f", p, match="no permission")


def test_empty_truncated_and_non_json_text(tmp_path):
  (tmp_path / "empty.json").write_text("")
  (tmp_path / "cut.json").write_text('{"a": [1, 2')
  (tmp_path / "bin.json").write_bytes(b"\xff\xfe\x00")
  _raises(files.read_json, "f", tmp_path / "empty.json", match="is empty")
  _raises(files.read_json, "f", tmp_path / "cut.json", match=r"not valid JSON \(line 1")
  _raises(files.read_json, "f", tmp_path / "bin.json", match="not UTF-8")


# ------------------------------------------------------------------------------------ .npz files


def test_npz_header_that_lies_about_its_size_is_refused_before_allocating(tmp_path):
  e = _raises(files.load_npz, "f", _lying_npz(tmp_path / "x.npz"), match="declares shape")
  assert "damaged or truncated" in e.message


def test_npz_larger_than_memory_is_refused(tmp_path, monkeypatch):
  path = tmp_path / "x.npz"
  np.savez(path, a=np.zeros(1000))
  monkeypatch.setattr(files, "host_memory", lambda: 4096)
  _raises(files.load_npz, "f", path, match="need 7.81 KiB; this machine has 4 KiB free")


def test_npz_object_arrays_are_refused(tmp_path):
  path = tmp_path / "x.npz"
  np.savez(path, a=np.array([{"x": 1}], dtype=object))
  _raises(files.load_npz, "f", path, match="holds Python objects")


def test_npz_empty_truncated_and_wrong_format(tmp_path):
  (tmp_path / "empty.npz").write_bytes(b"")
  (tmp_path / "text.npz").write_text("observations,actions\n1,2\n")
  good = _dataset(tmp_path / "good.npz")
  (tmp_path / "cut.npz").write_bytes(good.read_bytes()[: good.stat().st_size // 2])
  _raises(files.load_npz, "f", tmp_path / "empty.npz", match="is empty")
  for name in ("text.npz", "cut.npz"):
    _raises(files.load_npz, "f", tmp_path / name, match="not a readable .npz file")
  assert set(files.load_npz("f", good)) == {"observations", "actions", "terminals"}


# ------------------------------------------------------------------------------- UHM / OGBench


def test_ogbench_file_with_complex_actions_is_refused(tmp_path):
  from jaxlab.envs import ogbench as og

  path = _dataset(tmp_path / "x.npz", actions=np.zeros((10, 2), np.complex64))
  with pytest.raises(og.DatasetError, match="'actions' has dtype complex64") as e:
    og.check_dataset_file(str(path), need_qpos=False)
  assert e.value.field == "dataset_dir"


def test_ogbench_file_whose_header_lies_is_a_dataset_error(tmp_path):
  from jaxlab.envs import ogbench as og

  with pytest.raises(og.DatasetError, match="declares shape"):
    og.check_dataset_file(str(_lying_npz(tmp_path / "x.npz")), need_qpos=False)


def test_ogbench_sidecar_that_is_a_directory_or_malformed(tmp_path):
  from jaxlab.envs import ogbench as og

  (tmp_path / "dir.json").mkdir()
  (tmp_path / "bad.json").write_text('{"episodes": ')
  (tmp_path / "list.json").write_text("[1]")
  for name, msg in (("dir", "is a directory"), ("bad", "not valid JSON"), ("list", "not an")):
    with pytest.raises(og.DatasetError, match=msg) as e:
      og._read_meta(str(tmp_path / f"{name}.json"))
    assert e.value.field == "dataset_dir"
  assert og._read_meta(str(tmp_path / "absent.json")) is None


def test_offline_data_with_complex_actions_is_refused():
  n = 4
  d = {k: np.zeros(n, np.float32) for k in ("rewards", "masks", "terminals")}
  d.update(observations=np.zeros((n, 3)), next_observations=np.zeros((n, 3)))
  d["actions"] = np.ones((n, 2), np.complex128)
  with pytest.raises(ConfigError, match="dtype complex128") as e:
    offline_data.make_offline_data(d)
  assert e.value.field == "data.actions"


def test_lm_shard_truncated_or_of_another_dtype_is_refused_at_the_index(tmp_path):
  from jaxlab.lm import shards

  built = shards.build(["abcdefgh " * 40] * 12, "bytes", 256, val_fraction=0.2)
  index = shards.write(tmp_path, built, shard_tokens=100, recipe={})
  first = tmp_path / index["splits"]["train"]["shards"][0]
  good = first.read_bytes()
  first.write_bytes(good[:-10])
  with pytest.raises(ConfigError, match="damaged or truncated") as e:
    shards.read_index(tmp_path)
  assert e.value.field == "config.data_dir"
  np.save(first, np.frombuffer(good[128:], np.uint16).astype(np.uint32))
  with pytest.raises(ConfigError, match=r"uint32, the index says \(100,\) uint16"):
    shards.read_index(tmp_path)


# ------------------------------------------------------------------------- --coordinator_address


@pytest.mark.parametrize("address", ["host:notaport", ":::", "[::1", "a b:1", "host:99999", ""])
def test_garbage_coordinator_address_is_refused(address):
  with pytest.raises(ValueError, match="is not host:port"):
    distributed.plan(address, 2, 0, env={})


@pytest.mark.parametrize("address", ["localhost:1234", "10.0.0.1:80", "[::1]:8476", "gpu-01.x:1"])
def test_good_coordinator_addresses_pass(address):
  assert distributed.plan(address, 2, 1, env={})["coordinator_address"] == address


# ------------------------------------------------------------------------------------- programs


def _program(*args) -> subprocess.CompletedProcess:
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  cmd = [sys.executable, "-m", *args]
  return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)


def _one_line_exit_2(r: subprocess.CompletedProcess, *needles: str) -> None:
  assert r.returncode == 2, r.stderr
  lines = r.stderr.strip().splitlines()
  assert len(lines) == 1, r.stderr
  for needle in needles:
    assert needle in lines[0], lines[0]


def _copy_embedded(folder: pathlib.Path) -> pathlib.Path:
  folder.mkdir()
  for suffix in (".npz", "-val.npz"):
    shutil.copy(f"{EMBEDDED}{suffix}", folder / f"{EMBEDDED.name}{suffix}")
  return folder


def test_uhm_with_a_sidecar_that_is_a_directory_is_one_line(tmp_path):
  data = _copy_embedded(tmp_path / "data")
  (data / f"{EMBEDDED.name}.npz.json").mkdir()
  wd = tmp_path / "run"
  r = _program("experiments.uhm", f"--dataset_dir={data}", f"--workdir={wd}", "--steps=2")
  _one_line_exit_2(r, "error: --dataset_dir:", "npz.json: is a directory")
  assert not wd.exists()


def test_uhm_with_a_lying_npz_header_is_one_line(tmp_path):
  data = _copy_embedded(tmp_path / "data")
  _lying_npz(data / f"{EMBEDDED.name}.npz")
  wd = tmp_path / "run"
  r = _program("experiments.uhm", f"--dataset_dir={data}", f"--workdir={wd}", "--steps=2")
  _one_line_exit_2(r, "error: --dataset_dir:", f"{EMBEDDED.name}.npz: 'observations' declares")
  assert not wd.exists()


def test_program_with_a_garbage_coordinator_address_is_one_line(tmp_path):
  wd = tmp_path / "run"
  args = ["--coordinator_address=host:notaport", "--num_processes=2", "--process_id=0"]
  r = _program("experiments.example", *args, f"--workdir={wd}", "--steps=2")
  _one_line_exit_2(r, "error: --coordinator_address:", "'host:notaport' is not host:port")
  assert not wd.exists()
