"""The on-disk task archive: every proposed task program, its verdict, slot and score history.

Layout (browsable with `ls` and a text editor):

  <root>/archive.json                 index: every task's metadata, written atomically
  <root>/tasks/<id>-<name>/task.py    the program exactly as proposed
  <root>/tasks/<id>-<name>/meta.json  id, name, parent, generation, status, reason, slot, scores

`status` is "validated" (passed the sandbox, waiting for evaluation), "admitted" (in the active set,
holding a conditioning slot), "rejected" (with `reason`: sandbox verdict or failed admission) or
"retired" (left the active set; its slot is free for the next admitted task). Each task's
`meta.json` is the source of truth; `archive.json` is an index derived from them. Every file is
written new and renamed over the old one, and a task's directory is complete before it is renamed
into place, so a kill at any point leaves either the old or the new state: on open, leftover
temporary files are removed, task directories missing from the index are adopted and the index is
rewritten.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import time
from typing import Any

from jaxlab.core import metrics
from jaxlab.core.errors import ConfigError

STATUSES = ("validated", "admitted", "rejected", "retired")
_TMP = ".tmp-"


def _safe_name(name: str | None) -> str:
  name = re.sub(r"[^a-z0-9_]+", "_", (name or "unnamed").lower()).strip("_")
  return (name or "unnamed")[:48]


class Archive:
  """Task programs and their history under `root` (see module docstring); survives kill/resume.

  `num_slots` bounds the admitted tasks (the width of the one-hot task conditioning); None means
  unbounded. Slots are stable while a task is admitted and reused after it is retired.
  """

  def __init__(self, root: str | os.PathLike, num_slots: int | None = None):
    self.root = pathlib.Path(root)
    self.num_slots = num_slots
    (self.root / "tasks").mkdir(parents=True, exist_ok=True)
    self._meta: dict[int, dict] = {}
    self._recover()

  # ---- persistence -------------------------------------------------------------------------------
  def _recover(self) -> None:
    """Drops unfinished writes and rebuilds the index from the task directories."""
    for p in list(self.root.glob("*.tmp")) + list((self.root / "tasks").glob(f"{_TMP}*")):
      shutil.rmtree(p) if p.is_dir() else p.unlink()
    tasks = (self.root / "tasks").resolve()
    if tasks.parent != self.root.resolve():
      self._refuse(self.root / "tasks", f"it resolves to {tasks}, outside the archive")
    for d in sorted((self.root / "tasks").iterdir()):
      if d.is_dir() and d.resolve().parent != tasks:  # a link out: never read or written
        self._refuse(d, f"it resolves to {d.resolve()}, outside {tasks}")
      for p in d.glob("*.tmp"):
        p.unlink()
      meta_path = d / "meta.json"
      if d.is_dir() and meta_path.exists() and (d / "task.py").exists():
        try:
          meta = metrics.read_json(meta_path)
        except ValueError:
          continue  # unreadable: never written by this class (writes are atomic)
        self._meta[self._check_meta(meta_path, meta)] = meta
    self._write_index()

  def _check_meta(self, meta_path: pathlib.Path, meta) -> int:
    """The task's id, once its paths are known to stay inside the archive: `dir` must name the
    very directory the file was read from (a relative `tasks/<name>`, no `..`, no link out), so
    nothing a meta.json says can make this class read or write elsewhere."""
    d = meta_path.parent
    rel = meta.get("dir") if isinstance(meta, dict) else None
    task_id = meta.get("id") if isinstance(meta, dict) else None
    tasks = (self.root / "tasks").resolve()
    if not (isinstance(task_id, int) and not isinstance(task_id, bool) and task_id >= 0):
      self._refuse(meta_path, f"its id {task_id!r} is not a task id")
    if not isinstance(rel, str) or rel != f"tasks/{d.name}":
      self._refuse(meta_path, f"its dir {rel!r} is not its own directory 'tasks/{d.name}'")
    if (self.root / rel).resolve().parent != tasks:
      self._refuse(meta_path, f"its directory resolves outside {tasks}")
    return task_id

  @staticmethod
  def _refuse(path: pathlib.Path, why: str):
    raise ConfigError(
      "workdir",
      f"{path}: {why} (an archive's paths stay inside it); fix or remove it, "
      "or choose a new --workdir",
    )

  def _write_index(self) -> None:
    metrics.write_json(
      self.root / "archive.json",
      {"num_slots": self.num_slots, "tasks": [self._meta[i] for i in sorted(self._meta)]},
    )

  def _save(self, task_id: int) -> None:
    meta = self._meta[task_id]
    metrics.write_json(self.root / meta["dir"] / "meta.json", meta)
    self._write_index()

  # ---- writing -----------------------------------------------------------------------------------
  def add(self, source: str, parent: int | None, generation: int, verdict: Any) -> int:
    """Stores a proposed program with its sandbox verdict (admitted or rejected); its id."""
    task_id = max(self._meta, default=-1) + 1
    ok = bool(getattr(verdict, "ok", False))
    name = getattr(verdict, "name", None)
    rel = f"tasks/{task_id:05d}-{_safe_name(name)}"
    meta = {
      "id": task_id,
      "name": name,
      "dir": rel,
      "parent": parent,
      "generation": int(generation),
      "status": "validated" if ok else "rejected",
      "reason": str(getattr(verdict, "reason", "")),
      "info": dict(getattr(verdict, "info", None) or {}),
      "slot": None,
      "score": None,
      "scores": [],
      "created": time.time(),
    }
    tmp = self.root / "tasks" / f"{_TMP}{task_id:05d}"
    if tmp.exists():
      shutil.rmtree(tmp)
    tmp.mkdir()
    (tmp / "task.py").write_text(source)
    metrics.write_json(tmp / "meta.json", meta)
    os.replace(tmp, self.root / rel)  # the directory appears complete or not at all
    self._meta[task_id] = meta
    self._write_index()
    return task_id

  def _get(self, task_id: int) -> dict:
    if task_id not in self._meta:
      raise KeyError(f"no task {task_id} in the archive at {self.root}")
    return self._meta[task_id]

  def admit(self, task_id: int, score: float | None = None, session: int | None = None) -> int:
    """Moves a validated task into the active set and gives it a slot; the slot."""
    meta = self._get(task_id)
    if meta["status"] not in ("validated", "retired"):
      raise ValueError(f"task {task_id} is {meta['status']}; only validated tasks are admitted")
    used = {m["slot"] for m in self._meta.values() if m["status"] == "admitted"}
    slot = next(i for i in range(len(used) + 1) if i not in used)
    if self.num_slots is not None and slot >= self.num_slots:
      raise ValueError(f"all {self.num_slots} slots are taken; retire a task first")
    meta.update(status="admitted", slot=slot, reason="")
    if score is not None:
      meta["score"] = float(score)
      meta["scores"].append({"session": session, "score": float(score)})
    self._save(task_id)
    return slot

  def update_score(self, task_id: int, score: float, session: int, **fields: Any) -> None:
    """Appends a score (and e.g. `success_rate`, `last_trained`) to the task's history."""
    meta = self._get(task_id)
    meta["score"] = float(score)
    meta["scores"].append({"session": session, "score": float(score), **fields})
    meta.update(fields)
    self._save(task_id)

  def reject(self, task_id: int, reason: str) -> None:
    """Marks a task rejected (e.g. it validated but was not admitted), keeping it on disk."""
    meta = self._get(task_id)
    meta.update(status="rejected", reason=str(reason), slot=None)
    self._save(task_id)

  def retire(self, task_id: int) -> None:
    """Takes a task out of the active set; its slot becomes free."""
    meta = self._get(task_id)
    meta.update(status="retired", last_slot=meta.get("slot"), slot=None)
    self._save(task_id)

  # ---- reading -----------------------------------------------------------------------------------
  def records(self) -> list[dict]:
    """Every task's metadata, by id."""
    return [dict(self._meta[i]) for i in sorted(self._meta)]

  def active(self) -> list[dict]:
    """The admitted tasks' metadata, by id."""
    return [m for m in self.records() if m["status"] == "admitted"]

  def get(self, task_id: int) -> dict:
    return dict(self._get(task_id))

  def source(self, task_id: int) -> str:
    return (self.root / self._get(task_id)["dir"] / "task.py").read_text()

  def slot(self, task_id: int) -> int:
    """The conditioning slot of an admitted task."""
    meta = self._get(task_id)
    if meta["status"] != "admitted":
      raise ValueError(f"task {task_id} is {meta['status']}; only admitted tasks hold a slot")
    return int(meta["slot"])

  def __len__(self) -> int:
    return len(self._meta)
