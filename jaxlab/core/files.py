"""Files a user names (a data set, a sidecar, a ratings CSV): bad ones are one ``ConfigError``.

A directory, a FIFO, a symlink loop, an unreadable, empty, truncated or wrongly formatted file
raises ``ConfigError(field, "<path>: ...")`` naming the flag and the file, never a traceback, and
never blocks: the kind of file is checked with ``stat`` before it is opened.

``.npz`` archives are read header first (`npz_members`): every member's declared shape and dtype
must match the bytes it holds and fit in the host's memory before anything is allocated, and
object arrays are refused (no pickles).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import stat
import zipfile
from typing import Any

import numpy as np

from jaxlab.core.errors import ConfigError
from jaxlab.core.resources import host_memory, human

TEXT_LIMIT = 256 * 2**20  # a sidecar or CSV larger than this is not what the flag expects
# RuntimeError: an encrypted zip member
_READ_ERRORS = (
  OSError,
  EOFError,
  zipfile.BadZipFile,
  ValueError,
  RuntimeError,
  NotImplementedError,
)


def check_file(field: str, path) -> str:
  """``path`` as a string when it is an existing, readable regular file; else ConfigError."""
  path = os.fspath(path)
  try:
    st = os.stat(path)
  except FileNotFoundError:
    raise ConfigError(field, f"{path}: no such file") from None
  except OSError as e:  # a symlink loop, a name too long, a component that is a file
    raise ConfigError(field, f"{path}: cannot be opened ({e.strerror})") from None
  if stat.S_ISDIR(st.st_mode):
    raise ConfigError(field, f"{path}: is a directory, not a file")
  if not stat.S_ISREG(st.st_mode):
    # a FIFO would block the open until a writer appears
    raise ConfigError(field, f"{path}: not a regular file (a FIFO, socket or device)")
  if not os.access(path, os.R_OK):
    raise ConfigError(field, f"{path}: no permission to read it")
  return path


def read_bytes(field: str, path, limit: int = TEXT_LIMIT) -> bytes:
  path = check_file(field, path)
  if os.path.getsize(path) > limit:
    raise ConfigError(field, f"{path}: larger than {human(limit)}; not the file expected here")
  try:
    with open(path, "rb") as f:
      return f.read()
  except OSError as e:
    raise ConfigError(field, f"{path}: cannot be read ({e.strerror})") from None


def read_text(field: str, path, limit: int = TEXT_LIMIT) -> str:
  """The UTF-8 text of a regular file."""
  data = read_bytes(field, path, limit)
  try:
    return data.decode("utf-8")
  except UnicodeDecodeError as e:
    raise ConfigError(field, f"{path}: not UTF-8 text (byte {e.start})") from None


def read_json(field: str, path, limit: int = TEXT_LIMIT) -> Any:
  """A JSON file's value; an empty, truncated or non-JSON file is ConfigError."""
  text = read_text(field, path, limit)
  if not text.strip():
    raise ConfigError(field, f"{os.fspath(path)}: is empty, expected JSON")
  try:
    return json.loads(text)
  except (ValueError, RecursionError) as e:
    where = f" (line {e.lineno}: {e.msg})" if isinstance(e, json.JSONDecodeError) else ""
    raise ConfigError(field, f"{os.fspath(path)}: not valid JSON{where}") from None


@dataclasses.dataclass(frozen=True)
class Member:
  """One array of an ``.npz`` as its header declares it."""

  shape: tuple
  dtype: np.dtype

  @property
  def nbytes(self) -> int:
    return math.prod(self.shape) * self.dtype.itemsize


def _read_header(m) -> tuple[tuple, np.dtype]:
  version = np.lib.format.read_magic(m)
  if version == (1, 0):
    shape, _, dtype = np.lib.format.read_array_header_1_0(m)
  elif version == (2, 0):
    shape, _, dtype = np.lib.format.read_array_header_2_0(m)
  else:  # 3.0 (utf-8 field names) has no public reader
    shape, _, dtype = np.lib.format._read_array_header(m, version)
  return tuple(shape), np.dtype(dtype)


def _member(field: str, path: str, z: zipfile.ZipFile, info: zipfile.ZipInfo) -> Member:
  key = info.filename[:-4]
  with z.open(info) as m:
    shape, dtype = _read_header(m)
    header = m.tell()
  if dtype.hasobject:
    raise ConfigError(field, f"{path}: '{key}' holds Python objects (dtype {dtype}); not loaded")
  member = Member(shape, dtype)
  if member.nbytes != info.file_size - header:
    raise ConfigError(
      field,
      f"{path}: '{key}' declares shape {shape} {dtype} ({human(member.nbytes)}) but holds "
      f"{human(max(info.file_size - header, 0))}; the file is damaged or truncated",
    )
  return member


def npy_member(field: str, path) -> Member:
  """A ``.npy`` file's array from its header, checked against the file's size."""
  path = check_file(field, path)
  try:
    with open(path, "rb") as f:
      shape, dtype = _read_header(f)
      header = f.tell()
  except _READ_ERRORS as e:
    raise ConfigError(field, f"{path}: not a readable .npy file ({_why(e)})") from None
  member = Member(shape, dtype)
  size = os.path.getsize(path) - header
  if dtype.hasobject or member.nbytes != size:
    raise ConfigError(
      field,
      f"{path}: declares shape {shape} {dtype} ({human(member.nbytes)}) but holds "
      f"{human(max(size, 0))}; the file is damaged or truncated",
    )
  return member


def npz_members(field: str, path) -> dict[str, Member]:
  """``{key: Member}`` of an ``.npz`` from its headers alone, checked before anything is loaded."""
  path = check_file(field, path)
  if os.path.getsize(path) == 0:
    raise ConfigError(field, f"{path}: is empty, expected an .npz file")
  try:
    with zipfile.ZipFile(path) as z:
      infos = z.infolist()
      bad = [i.filename for i in infos if not i.filename.endswith(".npy")]
      if bad:
        raise ConfigError(field, f"{path}: member {bad[0]!r} is not an .npy array")
      members = {i.filename[:-4]: _member(field, path, z, i) for i in infos}
  except ConfigError:
    raise
  except _READ_ERRORS as e:
    raise ConfigError(field, f"{path}: not a readable .npz file ({_why(e)})") from None
  total, free = sum(m.nbytes for m in members.values()), host_memory()
  if total > free:
    raise ConfigError(
      field, f"{path}: its arrays need {human(total)}; this machine has {human(free)} free"
    )
  return members


def _why(e: Exception) -> str:
  text = str(e).splitlines()[0] if str(e) else ""
  return f"{type(e).__name__}: {text[:160]}" if text else type(e).__name__


def check_real(field: str, path, members: dict[str, Member], keys=None) -> None:
  """Arrays of ``keys`` (default all) hold real numbers: bool, int or float (not complex)."""
  for k in members if keys is None else keys:
    dtype = members[k].dtype
    if dtype.kind not in "biuf":
      raise ConfigError(
        field, f"{os.fspath(path)}: '{k}' has dtype {dtype}; expected real numbers (int or float)"
      )


def load_npz(field: str, path, keys=None, real=None) -> dict[str, np.ndarray]:
  """The arrays ``keys`` (default all) of an ``.npz``, after `npz_members`'s checks.

  ``real``: keys (or True for all) whose dtype must be real (`check_real`)."""
  members = npz_members(field, path)
  keys = list(members) if keys is None else list(keys)
  missing = [k for k in keys if k not in members]
  if missing:
    raise ConfigError(field, f"{os.fspath(path)}: missing key(s) {missing}; has {list(members)}")
  if real:
    check_real(field, path, members, keys if real is True else real)
  try:
    with np.load(os.fspath(path), allow_pickle=False) as f:
      return {k: f[k] for k in keys}
  except _READ_ERRORS as e:
    raise ConfigError(field, f"{os.fspath(path)}: not a readable .npz file ({_why(e)})") from None
