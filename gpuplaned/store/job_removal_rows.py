"""Removing jobs (``job remove``, ``clean``; issue 31 item 2): which jobs may go, and their rows.

What a removed job takes with it: its ``jobs`` row, its dependency edges, its output in the
store (``job_logs``), its TensorBoard read positions (``tb_cursors``) and its policy actions; its
folders are recorded to delete where they lie (``folder_removal_rows``).
What stays: its runs (an experiment's record: metrics, checkpoints, summaries), which no longer
name a job; an evaluation's record, likewise; the event log. Files are the service's to remove
(``gpuplaned.service.passes.folder_removal``): only the job's own folders.

Only a QUEUED or an ended job goes; one on a node must be cancelled first. A job that open
(not ended) jobs depend on is never removed: they would wait for it forever. ``job remove``
refuses it naming them; ``clean`` keeps it and says so.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

import attrs

from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.job_states import ENDED, OPEN, JobState, values
from gpuplaned.store import folder_removal_rows
from gpuplaned.store.paging import one_of

_ENDED = values(ENDED)
_OPEN = values(OPEN)
_REMOVABLE = frozenset({JobState.QUEUED.value, *_ENDED})


@attrs.frozen
class Cleaned:
    removed: list[str]
    kept: list[str]  # matched, but open jobs depend on them


def remove_job(conn: sqlite3.Connection, job_id: str, now_ms: int) -> None:
    """Remove one queued or ended job.

    Raises:
        ApiError: not_found; conflict naming its state (on a node: cancel it first) or the open
            jobs that depend on it.
    """
    row = conn.execute("SELECT status FROM jobs WHERE id = ?", (job_id,)).fetchone()
    if row is None:
        raise ApiError(ErrorCode.NOT_FOUND, f"no job {job_id!r}", {"job_id": job_id})
    status = row[0]
    if status not in _REMOVABLE:
        raise ApiError(ErrorCode.CONFLICT, f"job {job_id} is {status}: cancel it first (job cancel {job_id}), "
                       "then remove it once it has ended", {"job_id": job_id, "status": status})
    waiting = open_dependants(conn, [job_id]).get(job_id, [])
    if waiting:
        raise ApiError(ErrorCode.CONFLICT, f"job {job_id} cannot be removed: {', '.join(waiting)} depend on it and "
                       "would wait for it forever; cancel or remove them first",
                       {"job_id": job_id, "dependants": waiting})
    _delete(conn, [job_id], now_ms)


def clean(conn: sqlite3.Connection, *, group: str | None, ended_before_ms: int | None, now_ms: int) -> Cleaned:
    """Remove the ended jobs (of ``group``; that ended before ``ended_before_ms``), but those that
    open jobs depend on."""
    cleaned = cleanable(conn, group=group, ended_before_ms=ended_before_ms)
    _delete(conn, cleaned.removed, now_ms)
    return cleaned


def cleanable(conn: sqlite3.Connection, *, group: str | None, ended_before_ms: int | None) -> Cleaned:
    """What ``clean`` would remove and keep, changing nothing (a dry run)."""
    clauses, params = [one_of("status", _ENDED)], list(_ENDED)
    if group is not None:
        clauses.append("group_name = ?")
        params.append(group)
    if ended_before_ms is not None:
        clauses.append("COALESCE(finished_at, created_at) <= ?")
        params.append(ended_before_ms)
    matched = [r[0] for r in conn.execute(f"SELECT id FROM jobs WHERE {' AND '.join(clauses)} ORDER BY id", params)]
    held = open_dependants(conn, matched)
    return Cleaned([j for j in matched if j not in held], sorted(held))


def open_dependants(conn: sqlite3.Connection, job_ids: Sequence[str]) -> dict[str, list[str]]:
    """For each of ``job_ids`` that open jobs depend on: their ids."""
    out: dict[str, list[str]] = {}
    for start in range(0, len(job_ids), 500):
        chunk = list(job_ids[start:start + 500])
        rows = conn.execute(
            f"SELECT d.depends_on, d.job_id FROM job_dependencies d JOIN jobs j ON j.id = d.job_id "
            f"WHERE {one_of('d.depends_on', chunk)} AND {one_of('j.status', _OPEN)} ORDER BY d.job_id",
            (*chunk, *_OPEN))
        for parent, child in rows:
            out.setdefault(parent, []).append(child)
    return out


def _delete(conn: sqlite3.Connection, job_ids: Sequence[str], now_ms: int) -> None:
    folder_removal_rows.schedule(conn, job_ids, now_ms)  # while their runs still name them
    for start in range(0, len(job_ids), 500):
        chunk = list(job_ids[start:start + 500])
        ids = one_of("job_id", chunk)
        for table in ("job_logs", "tb_cursors", "policy_actions"):
            conn.execute(f"DELETE FROM {table} WHERE {ids}", chunk)
        conn.execute(f"UPDATE runs SET job_id = NULL WHERE {ids}", chunk)
        conn.execute(f"UPDATE evaluations SET job_id = NULL WHERE {ids}", chunk)
        conn.execute(f"UPDATE gpu_slots SET owner_job_id = NULL WHERE {one_of('owner_job_id', chunk)}", chunk)
        conn.execute(f"DELETE FROM jobs WHERE {one_of('id', chunk)}", chunk)  # its dependency edges cascade
