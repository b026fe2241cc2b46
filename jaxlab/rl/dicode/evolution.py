"""The archive's side of a DiCode session (arXiv 2602.08194): scores, admission, evolution.

After a session each trained archive task gets its learnability score (:func:`score_tasks`), and
the session's candidates are admitted by score, compare-and-swap as the reference (:func:`admit`):
with room in the active set when the score reaches ``min_entry_score``, else in place of the
lowest-scored active task when they beat it, else retired with the reason. Every ``E`` sessions an
evolution round runs (:func:`evolve`): parents from the archive's :func:`frontier` -> proposer
(model or offline mutation) -> ``sandbox.validate`` (rejections are recorded with their reason
and never stop the run) -> the survivors become the next session's candidates. On resume every
archived task still in use goes through the sandbox again (:func:`revalidate`), and candidates of
an interrupted round that never trained are retired (:func:`reject_interrupted`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jaxlab.rl.dicode import archive as archive_lib
from jaxlab.rl.dicode import curriculum as curriculum_lib


def open_archive(root, seeds: dict[str, str], num_slots: int):
  """The run's archive (``num_slots - 1`` task slots: the last one is the original game's); on
  first use the seed tasks other than the original game are added and admitted."""
  from jaxlab.rl.dicode import sandbox

  archive = archive_lib.Archive(root, num_slots - 1)
  if len(archive) == 0:
    for name in sorted(seeds):
      if name != curriculum_lib.ORIGINAL:
        verdict = sandbox.Verdict(True, "seed task", name, {"seed": True})
        archive.admit(archive.add(seeds[name], None, 0, verdict))
  return archive


def frontier(active: list[dict], k: int) -> list[dict]:
  """Parents for evolution: learnable active tasks (``0 < p < 1``) by score, then the rest by
  score. Simplified from the reference's lineage-aware frontier (no "superseded by a child"
  filter, no branching cap)."""
  learnable = [r for r in active if 0.0 < r.get("success_rate", -1.0) < 1.0]
  rest = [r for r in active if r not in learnable]
  ranked = sorted(learnable, key=lambda r: -r["score"]) + sorted(rest, key=lambda r: -r["score"])
  return ranked[:k]


def candidate_records(archive) -> list[dict]:
  """Archive tasks that passed the sandbox but were neither admitted nor retired yet."""
  return [m for m in archive.records() if m["status"] == "validated"]


def score_tasks(archive, curriculum, plan, stats, session: int, config, log) -> None:
  """Appends each trained archive task's score to its history; admits the plan's candidates."""
  candidates = set(plan.candidates)
  for task_id, st in zip(plan.ids, stats):
    if task_id is None:
      continue
    status = archive.get(task_id)["status"]
    archive.update_score(
      task_id,
      st["score"],
      session,
      success_rate=st["success_rate"],
      finished=st["finished"],
      last_trained=session,
    )
    if task_id in candidates and status == "validated":
      admit(archive, task_id, st["score"], session, config, log)
  curriculum.candidates = [c for c in curriculum.candidates if c not in candidates]


def admit(archive, task_id, score: float, session: int, config, log) -> None:
  """Compare-and-swap: room and ``score >= min_entry_score``, or beat the worst active task."""
  c = config
  active = curriculum_lib.active_records(archive)
  room = len(active) < min(c.capacity, c.num_slots - 1)
  if room and score >= c.min_entry_score:
    archive.admit(task_id, score, session)
  elif room:
    archive.reject(task_id, f"score {score:.4g} below the entry threshold {c.min_entry_score}")
  else:
    worst = min(active, key=lambda r: (r["score"], -r["last_trained"]))
    if score > worst["score"]:
      archive.retire(worst["id"])
      archive.admit(task_id, score, session)
      log(f"[dicode] task {task_id} (score {score:.3g}) replaced task {worst['id']}")
    else:
      archive.reject(
        task_id, f"score {score:.4g} does not beat the worst active task's {worst['score']:.4g}"
      )


def evolve(
  archive, curriculum, proposer, validate: Callable, config, context: dict, rng, log
) -> dict:
  """One evolution round after session ``context["session"]``: frontier parents -> proposals ->
  sandbox -> candidates of the curriculum; returns the round's record.

  Each parent gets its share of ``proposals`` (so every child's parent is known). A proposer
  that fails (e.g. an endpoint that went away) or a rejected program costs that proposal only.
  """
  c, session = config, context["session"]
  parents = frontier(curriculum_lib.active_records(archive), c.parents)
  shares = (
    [c.proposals // len(parents) + (i < c.proposals % len(parents)) for i in range(len(parents))]
    if parents
    else []
  )
  children: list[tuple[str, Any]] = []
  for parent, n in zip(parents, shares):
    if n == 0:
      continue
    try:
      sources = proposer.propose([parent], context, n, int(rng.integers(2**31 - 1)))
    except Exception as e:  # noqa: BLE001  (the run goes on without this parent's children)
      log(f"[dicode] proposer failed for parent {parent['id']}: {type(e).__name__}: {e}")
      sources = []
    children += [(src, parent["id"]) for src in sources]
  verdicts = validate([src for src, _ in children]) if children else []
  valid, rejected = [], []
  for (source, parent_id), verdict in zip(children, verdicts):
    task_id = archive.add(source, parent_id, session + 1, verdict)
    if verdict.ok:
      valid.append(task_id)
    else:
      rejected.append({"id": task_id, "reason": verdict.reason})
      log(f"[dicode] rejected proposal {task_id}: {verdict.reason}")
  curriculum.candidates = list(curriculum.candidates) + valid
  log(
    f"[dicode] evolution after session {session}: {len(children)} proposed, "
    f"{len(valid)} passed the sandbox, {len(rejected)} rejected"
  )
  return {
    "session": session,
    "parents": [p["id"] for p in parents],
    "proposed": len(children),
    "valid": valid,
    "rejected": rejected,
  }


def revalidate(archive, validate: Callable, log) -> None:
  """Every archived task still in use (admitted or validated) goes through the sandbox again
  before anything loads it here: its status is a file's word, not a verdict of this process.
  The shipped seed tasks are this program's own code. ConfigError("workdir") naming the file."""
  from jaxlab.core.errors import ConfigError
  from jaxlab.rl.dicode import seeds

  shipped = set(seeds.load_seed_tasks().values())
  used = [r for r in archive.records() if r["status"] in ("admitted", "validated")]
  todo = [(r, archive.source(r["id"])) for r in used]
  todo = [(r, src) for r, src in todo if src not in shipped]
  if not todo:
    return
  log(f"[dicode] re-validating {len(todo)} archived task(s) in the sandbox")
  for (rec, _), verdict in zip(todo, validate([src for _, src in todo])):
    if not verdict.ok:
      path = archive.root / rec["dir"] / "task.py"
      raise ConfigError(
        "workdir",
        f"{path} ({rec['status']}) is rejected by the sandbox on resume: {verdict.reason}; "
        "fix or remove it, or choose a new --workdir",
      )


def reject_interrupted(archive, candidates) -> None:
  """Retires the validated tasks that are not the curriculum's ``candidates``: children of an
  evolution round the loop never committed, so never trained."""
  keep = set(candidates)
  for rec in candidate_records(archive):
    if rec["id"] not in keep:
      archive.reject(rec["id"], "interrupted: the loop stopped before its evaluation session")


def archive_summary(archive, top: int = 10) -> dict:
  """Counts by status, rejection reasons (sandbox and admission), the top active tasks."""
  records = archive.records()
  counts_ = {s: sum(r["status"] == s for r in records) for s in archive_lib.STATUSES}
  reasons: dict[str, int] = {}
  for r in records:
    if r["status"] == "rejected":
      reasons[r["reason"]] = reasons.get(r["reason"], 0) + 1
  active = sorted(curriculum_lib.active_records(archive), key=lambda r: -r["score"])
  keep = ("id", "name", "score", "success_rate", "slot", "parent", "generation", "dir")
  return {
    "tasks": len(records),
    "proposed": sum(r["generation"] > 0 or r.get("parent") is not None for r in records),
    "by_status": counts_,
    "admitted_proposals": sum(
      r["status"] == "admitted" and not r.get("info", {}).get("seed") for r in records
    ),
    "rejection_reasons": dict(sorted(reasons.items(), key=lambda kv: -kv[1])),
    "top": [{k: r.get(k) for k in keep} for r in active[:top]],
  }


def selection_counts(summary: dict) -> dict:
  """How much the archive selected, from :func:`archive_summary`'s record: the proposals made,
  those rejected by the sandbox, those the admission rejected by score (below the entry
  threshold, or not beating the worst active task of a full archive), the active tasks they
  replaced (retired), and the admitted proposals. The admission's reasons start with "score"
  (:func:`admit`); "interrupted" rejections count in neither."""
  reasons = summary.get("rejection_reasons") or {}
  by_score = sum(n for r, n in reasons.items() if r.startswith("score "))
  interrupted = sum(n for r, n in reasons.items() if r.startswith("interrupted"))
  rejected = (summary.get("by_status") or {}).get("rejected", 0)
  return {
    "proposals": summary.get("proposed", 0),
    "rejected_by_sandbox": rejected - by_score - interrupted,
    "rejected_by_score": by_score,
    "replaced": (summary.get("by_status") or {}).get("retired", 0),
    "admitted_proposals": summary.get("admitted_proposals", 0),
  }
