"""What retention and the checkpoint listing read beside the checkpoints themselves: what
still uses a run's checkpoints, and their evaluations.

A checkpoint is in use while an evaluation of it is unfinished (its row is queued or
running, or its job has not ended), while a job that has not ended will resume from it
(``jobs.resume_from``), while a run that has not finished resumed from it
(``runs.resumed_from``), and while another row, of this run or another, names the same file
or one inside it (deleting a folder would take that one too). A checkpoint a failure policy
kept (``policy_actions.checkpoint_id``: the last good one before a NaN stop) is always in use.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from gpuplaned.protocol.job_states import ENDED, values
from gpuplaned.store.checkpoint_rows import Checkpoint

# A job's, and an evaluation's, ended states (a LOST job's run may still write checkpoints).
_ENDED_SQL = ", ".join(f"'{s}'" for s in values(ENDED))


def in_use(conn: sqlite3.Connection, run_id: str, checkpoints: Sequence[Checkpoint]) -> dict[str, list[str]]:
    """``{checkpoint id: [what uses it, in words]}`` for the run's ``checkpoints`` that are used."""
    out: dict[str, list[str]] = {}
    for ck_id, ev_id, job_id in conn.execute(
            "SELECT e.checkpoint_id, e.id, e.job_id FROM evaluations e JOIN checkpoints c ON c.id = e.checkpoint_id "
            "LEFT JOIN jobs j ON j.id = e.job_id WHERE c.run_id = ? "
            f"AND (e.status NOT IN ({_ENDED_SQL}) OR (j.id IS NOT NULL AND j.status NOT IN ({_ENDED_SQL})))",
            (run_id,)):
        out.setdefault(ck_id, []).append(f"evaluation {ev_id}" + (f" (job {job_id})" if job_id else "")
                                         + " is not finished")
    for ck_id, job_id in conn.execute(
            "SELECT j.resume_from, j.id FROM jobs j JOIN checkpoints c ON c.id = j.resume_from "
            f"WHERE c.run_id = ? AND j.status NOT IN ({_ENDED_SQL})", (run_id,)):
        out.setdefault(ck_id, []).append(f"job {job_id} will resume from it")
    for ck_id, other in conn.execute(
            "SELECT r.resumed_from, r.id FROM runs r JOIN checkpoints c ON c.id = r.resumed_from "
            "WHERE c.run_id = ? AND r.finished_at IS NULL", (run_id,)):
        out.setdefault(ck_id, []).append(f"run {other} resumed from it and has not finished")
    for ck_id, trigger, event_id in conn.execute(
            "SELECT a.checkpoint_id, a.trigger, a.event_id FROM policy_actions a JOIN checkpoints c "
            "ON c.id = a.checkpoint_id WHERE c.run_id = ?", (run_id,)):
        out.setdefault(ck_id, []).append(f"the last good checkpoint before {trigger} ({event_id}), kept by policy")
    for ck in checkpoints:
        for other_id, other_run, other_path in conn.execute(
                "SELECT id, run_id, path FROM checkpoints WHERE id != :id AND deleted_at IS NULL "
                "AND (path = :path OR substr(path, 1, length(:path) + 1) = :path || '/' "
                "OR substr(:path, 1, length(path) + 1) = path || '/')", {"id": ck.id, "path": ck.path.rstrip("/")}):
            where = ("the same file" if other_path.rstrip("/") == ck.path.rstrip("/")
                     else "inside it" if len(other_path) > len(ck.path) else "a folder around it")
            out.setdefault(ck.id, []).append(f"checkpoint {other_id} of run {other_run} is {where}")
    return out


def evaluations_by_checkpoint(conn: sqlite3.Connection, run_id: str) -> dict[str, list[dict[str, Any]]]:
    """``{checkpoint id: [evaluation, newest first]}`` for the run's checkpoints."""
    out: dict[str, list[dict[str, Any]]] = {}
    for ev_id, ck_id, job_id, status, suite, dataset, metrics, created in conn.execute(
            "SELECT e.id, e.checkpoint_id, e.job_id, e.status, e.suite, e.dataset, e.metrics, e.created_at "
            "FROM evaluations e JOIN checkpoints c ON c.id = e.checkpoint_id WHERE c.run_id = ? "
            "ORDER BY e.created_at DESC, e.id DESC", (run_id,)):
        try:
            decoded = json.loads(metrics) if metrics else {}
        except ValueError:
            decoded = {}
        out.setdefault(ck_id, []).append({"id": ev_id, "job_id": job_id, "status": status, "suite": suite,
                                          "dataset": dataset, "metrics": decoded if type(decoded) is dict else {},
                                          "created_at": created})
    return out
