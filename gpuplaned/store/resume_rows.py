"""Resuming a job from a checkpoint: ``jobs.resume_from`` and what a dispatch makes of it.

``gpuplanectl job retry JOB --resume-from best|last|CKPT`` stores the checkpoint in
``jobs.resume_from`` (``gpuplaned.service.passes.resume`` picks it); each attempt dispatched while it
is set gets ``GPUPLANE_RESUME_FROM`` (the path) and ``GPUPLANE_RESUME_STEP`` (its step, when
known), and its run records ``resumed_from`` and ``resume_step``: the first link of the run's
checkpoints' ``parent_id`` chain. A retry without it clears it: that attempt starts afresh.

A job's lineage is the checkpoints of its runs and those its runs resumed from: the ones it
may resume from.
"""

from __future__ import annotations

import sqlite3

import attrs

from gpuplaned.protocol.evaluation_wire import RESUME_FROM_VAR, RESUME_STEP_VAR


@attrs.frozen
class ResumePoint:
    checkpoint_id: str
    path: str
    step: int | None
    run_id: str
    deleted_at: int | None = None

    def env(self) -> dict[str, str]:
        """What the resumed attempt is told."""
        return {RESUME_FROM_VAR: self.path, **({RESUME_STEP_VAR: str(self.step)} if self.step is not None else {})}


_SELECT = "SELECT c.id, c.path, c.step, c.run_id, c.deleted_at FROM checkpoints c"


def resume_point(conn: sqlite3.Connection, checkpoint_id: str | None) -> ResumePoint | None:
    if checkpoint_id is None:
        return None
    row = conn.execute(f"{_SELECT} WHERE c.id = ?", (checkpoint_id,)).fetchone()
    return ResumePoint(*row) if row else None


def lineage(conn: sqlite3.Connection, job_id: str) -> list[ResumePoint]:
    """The job's lineage, deleted ones included, newest registration first."""
    rows = conn.execute(
        f"{_SELECT} WHERE c.run_id IN (SELECT id FROM runs WHERE job_id = ?) "
        "OR c.id IN (SELECT resumed_from FROM runs WHERE job_id = ?) "
        "ORDER BY c.created_at DESC, c.step IS NULL, c.step DESC, c.id DESC", (job_id, job_id))
    return [ResumePoint(*row) for row in rows]


def owner_job(conn: sqlite3.Connection, checkpoint_id: str) -> str | None:
    """The job whose run saved the checkpoint (None: a run with no job)."""
    row = conn.execute("SELECT r.job_id FROM checkpoints c JOIN runs r ON r.id = c.run_id WHERE c.id = ?",
                       (checkpoint_id,)).fetchone()
    return row[0] if row else None


def set_resume_from(conn: sqlite3.Connection, job_id: str, checkpoint_id: str | None) -> None:
    conn.execute("UPDATE jobs SET resume_from = ? WHERE id = ?", (checkpoint_id, job_id))
