"""Rows of the ``evaluations`` table: one per EVALUATE job GPUPlane queued for a checkpoint.

Inserted QUEUED with its job, in the job's transaction (``gpuplaned.service.api.evaluations``);
RUNNING when the job's attempt starts, with that attempt's run; finished (SUCCEEDED, FAILED,
CANCELLED) in the transaction that records the job's end, with its metrics, runtime and, for
a failure, why in words. A retried job's evaluation is QUEUED again. Listed with the
checkpoint it evaluates (its run, step and path).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from gpuplaned.protocol.evaluation_replies import Evaluation
from gpuplaned.protocol.evaluation_wire import EVALUATION_STATES
from gpuplaned.protocol.ids import new_id

QUEUED, RUNNING, SUCCEEDED, FAILED, CANCELLED = EVALUATION_STATES
ENDED = (SUCCEEDED, FAILED, CANCELLED)


_SELECT = (
    "SELECT e.id, e.checkpoint_id, c.run_id, c.step, c.path, e.job_id, e.run_id, e.name, e.suite, e.dataset, "
    "e.dataset_version, e.status, e.metrics, e.error, e.runtime_s, e.created_at, e.started_at, e.finished_at "
    "FROM evaluations e JOIN checkpoints c ON c.id = e.checkpoint_id"
)


def _evaluation(row: Sequence[Any]) -> Evaluation:
    (id_, ck_id, ck_run, ck_step, ck_path, job_id, run_id, name, suite, dataset, version, status, metrics, error,
     runtime_s, created, started, finished) = row
    return Evaluation(id=id_, checkpoint_id=ck_id, checkpoint_run_id=ck_run, checkpoint_step=ck_step,
                      checkpoint_path=ck_path, job_id=job_id, run_id=run_id, name=name, suite=suite, dataset=dataset,
                      dataset_version=version, status=status, metrics=json.loads(metrics) if metrics else {},
                      error=error, runtime_s=runtime_s, created_at=created, started_at=started, finished_at=finished)


def insert(conn: sqlite3.Connection, *, checkpoint_id: str, job_id: str, name: str | None, suite: str | None,
           dataset: str | None, dataset_version: str | None, now: int) -> str:
    eval_id = new_id("eval")
    conn.execute(
        "INSERT INTO evaluations (id, checkpoint_id, job_id, name, suite, dataset, dataset_version, metrics, status, "
        "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, '{}', ?, ?)",
        (eval_id, checkpoint_id, job_id, name, suite, dataset, dataset_version, QUEUED, now))
    return eval_id


def get(conn: sqlite3.Connection, eval_id: str) -> Evaluation | None:
    row = conn.execute(f"{_SELECT} WHERE e.id = ?", (eval_id,)).fetchone()
    return _evaluation(row) if row else None


def for_job(conn: sqlite3.Connection, job_id: str) -> Evaluation | None:
    row = conn.execute(f"{_SELECT} WHERE e.job_id = ? ORDER BY e.created_at DESC LIMIT 1", (job_id,)).fetchone()
    return _evaluation(row) if row else None


def list_for_checkpoint(conn: sqlite3.Connection, checkpoint_id: str) -> list[Evaluation]:
    """Oldest first."""
    rows = conn.execute(f"{_SELECT} WHERE e.checkpoint_id = ? ORDER BY e.created_at, e.id", (checkpoint_id,))
    return [_evaluation(r) for r in rows]


def list_for_experiment(conn: sqlite3.Connection, experiment_id: str, limit: int) -> list[Evaluation]:
    """The evaluations of the checkpoints of the experiment's runs, newest first."""
    rows = conn.execute(
        f"{_SELECT} JOIN runs r ON r.id = c.run_id WHERE r.experiment_id = ? "
        "ORDER BY e.created_at DESC, e.id DESC LIMIT ?", (experiment_id, limit))
    return [_evaluation(r) for r in rows]


def started(conn: sqlite3.Connection, eval_id: str, run_id: str | None, at: int) -> None:
    conn.execute("UPDATE evaluations SET status = ?, run_id = coalesce(?, run_id), started_at = "
                 "coalesce(started_at, ?) WHERE id = ? AND status IN (?, ?)", (RUNNING, run_id, at, eval_id, QUEUED,
                                                                              RUNNING))


def add_metrics(conn: sqlite3.Connection, eval_id: str, metrics: Mapping[str, float]) -> None:
    """Merge ``metrics`` into what the evaluation holds (a later value of a name wins)."""
    row = conn.execute("SELECT metrics FROM evaluations WHERE id = ?", (eval_id,)).fetchone()
    merged = {**(json.loads(row[0]) if row and row[0] else {}), **metrics}
    conn.execute("UPDATE evaluations SET metrics = ? WHERE id = ?",
                 (json.dumps(merged, separators=(",", ":"), sort_keys=True), eval_id))


def finish(conn: sqlite3.Connection, eval_id: str, *, status: str, error: str | None, run_id: str | None,
           runtime_s: float | None, at: int) -> None:
    conn.execute("UPDATE evaluations SET status = ?, error = ?, run_id = coalesce(?, run_id), runtime_s = ?, "
                 "finished_at = ? WHERE id = ?", (status, error, run_id, runtime_s, at, eval_id))


@attrs.frozen
class Target:
    """What an evaluation of a checkpoint starts from: its file and step, and the job that
    made it (None for an SDK or imported run) with that job's folder."""

    path: str
    step: int | None
    deleted_at: int | None
    job_id: str | None
    job_cwd: str | None


def target(conn: sqlite3.Connection, checkpoint_id: str) -> Target | None:
    """None: no such checkpoint."""
    row = conn.execute(
        "SELECT c.path, c.step, c.deleted_at, r.job_id, j.working_dir FROM checkpoints c "
        "JOIN runs r ON r.id = c.run_id LEFT JOIN jobs j ON j.id = r.job_id WHERE c.id = ?",
        (checkpoint_id,)).fetchone()
    return Target(*row) if row else None


def requeue(conn: sqlite3.Connection, job_id: str) -> None:
    """The job is queued again (retried): its evaluation starts over."""
    conn.execute("UPDATE evaluations SET status = ?, metrics = '{}', error = NULL, runtime_s = NULL, "
                 "started_at = NULL, finished_at = NULL WHERE job_id = ?", (QUEUED, job_id))
