"""Job dependency rows (``submit --after``): the edges, the queued jobs they hold back, and the
cascade when one can never be met. What a job's dependencies mean (met, waiting, never) is
``gpuplaned.domain.dependencies``'s; this writes what it decides, inside the transaction that
ended the dependency, so a job is never left held by one that has ended.

A queued job held by a dependency has ``dependencies_pending = 1``; the scheduler's queue read
skips it (``job_rows.queued_jobs``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from gpuplaned.domain import dependencies
from gpuplaned.domain.dependencies import Verdict
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.job_states import FailureReason, JobState
from gpuplaned.store.paging import one_of

Links = list[tuple[str, str]]  # (job id, status), in id order


def attach(conn: sqlite3.Connection, job_id: str, after: Sequence[str], when: str, now_ms: int) -> list[str]:
    """Make the new queued job ``job_id`` depend on ``after`` under ``when``: held while one has
    not ended, cancelled at once (DEPENDENCY_FAILED) if they can never be met. Returns the ids of
    the jobs cancelled (it alone, or none).

    Raises:
        ApiError: bad_request naming the ids that name no job, or the cycle they would close.
    """
    wanted = list(dict.fromkeys(after))  # each once, in their order
    missing = dependencies.unknown(wanted, _existing(conn, wanted))
    if missing:
        raise ApiError(ErrorCode.BAD_REQUEST, f"after: no job {', '.join(missing)}",
                       {"field": "after", "unknown": missing})
    loop = dependencies.cycle({job_id: wanted, **_edges_from(conn, wanted)}, job_id)
    if loop:
        raise ApiError(ErrorCode.BAD_REQUEST, f"after: a cycle of dependencies {' -> '.join(loop)}",
                       {"field": "after", "cycle": loop})
    conn.executemany("INSERT INTO job_dependencies (job_id, depends_on, condition) VALUES (?, ?, ?)",
                     [(job_id, parent, when) for parent in wanted])
    return _decide(conn, job_id, now_ms)


def settle(conn: sqlite3.Connection, ended_id: str, now_ms: int) -> list[str]:
    """``ended_id`` has just ended: release its queued dependants whose dependencies are now met,
    and cancel (DEPENDENCY_FAILED) those that can never run, with their own dependants,
    transitively. Returns the ids of the jobs cancelled."""
    held = conn.execute(
        "SELECT d.job_id FROM job_dependencies d JOIN jobs j ON j.id = d.job_id "
        "WHERE d.depends_on = ? AND j.status = ? AND j.dependencies_pending = 1 ORDER BY d.job_id",
        (ended_id, JobState.QUEUED.value)).fetchall()
    cancelled: list[str] = []
    for (job_id,) in held:
        cancelled += _decide(conn, job_id, now_ms)
    return cancelled


def recheck(conn: sqlite3.Connection, job_id: str, now_ms: int) -> list[str]:
    """A job with dependencies has just been queued again (a retry): hold it while they are
    pending, cancel it if they can never be met. Returns the ids of the jobs cancelled."""
    return _decide(conn, job_id, now_ms) if _condition(conn, job_id) is not None else []


def preview(conn: sqlite3.Connection, after: Sequence[str], when: str) -> tuple[bool, str] | None:
    """What a new job depending on ``after`` under ``when`` would meet (a submit's dry run), as
    (refused, in words): the refusal of unknown ids (``after: no job ...``), or why it would wait,
    or that it would be cancelled at once; None: its dependencies are met already."""
    wanted = list(dict.fromkeys(after))
    found = dict(conn.execute(f"SELECT id, status FROM jobs WHERE {one_of('id', wanted)}", wanted).fetchall())
    missing = dependencies.unknown(wanted, found)
    if missing:
        return True, f"after: no job {', '.join(missing)}"
    states = {job_id: found[job_id] for job_id in wanted}
    verdict = dependencies.verdict(when, states.values())
    if verdict is Verdict.WAIT:
        return False, dependencies.waiting_reason(when, states)
    if verdict is Verdict.NEVER:
        return False, f"it would be cancelled at once (DEPENDENCY_FAILED): {dependencies.never_reason(when, states)}"
    return None


def never_met(conn: sqlite3.Connection, job_id: str) -> str | None:
    """Why the job's dependencies can never be met now (None: they can, or it has none)."""
    when, states = state_of(conn, job_id)
    if when is None or dependencies.verdict(when, states.values()) is not Verdict.NEVER:
        return None
    return dependencies.never_reason(when, states)


def cancelled_chain(conn: sqlite3.Connection, job_id: str) -> list[str]:
    """The job's dependants cancelled with DEPENDENCY_FAILED, and theirs, transitively, parents
    before their dependants (``job retry --with-dependants`` queues them again in this order)."""
    out: list[str] = []
    seen = {job_id}
    frontier = [job_id]
    while frontier:
        rows = conn.execute(
            f"SELECT DISTINCT d.job_id FROM job_dependencies d JOIN jobs j ON j.id = d.job_id "
            f"WHERE {one_of('d.depends_on', frontier)} AND j.status = ? AND j.failure_reason = ? ORDER BY d.job_id",
            (*frontier, JobState.CANCELLED.value, FailureReason.DEPENDENCY_FAILED.value)).fetchall()
        frontier = [r[0] for r in rows if r[0] not in seen]
        seen.update(frontier)
        out += frontier
    return out


def state_of(conn: sqlite3.Connection, job_id: str) -> tuple[str | None, dict[str, str]]:
    """The job's condition (None: it has no dependencies) and each dependency's status."""
    rows = conn.execute(
        "SELECT d.condition, d.depends_on, j.status FROM job_dependencies d JOIN jobs j ON j.id = d.depends_on "
        "WHERE d.job_id = ? ORDER BY d.depends_on", (job_id,)).fetchall()
    return (rows[0][0] if rows else None), {parent: status for _, parent, status in rows}


def links(conn: sqlite3.Connection, job_ids: Sequence[str]) -> tuple[dict[str, tuple[str, Links]], dict[str, Links]]:
    """For each of ``job_ids`` that has any: its condition and dependencies, and its dependants
    (job ids with their status), in two reads."""
    if not job_ids:
        return {}, {}
    ids = list(job_ids)
    needs: dict[str, tuple[str, Links]] = {}
    for job_id, when, parent, status in conn.execute(
            "SELECT d.job_id, d.condition, d.depends_on, j.status FROM job_dependencies d "
            f"JOIN jobs j ON j.id = d.depends_on WHERE {one_of('d.job_id', ids)} ORDER BY d.depends_on", ids):
        needs.setdefault(job_id, (when, []))[1].append((parent, status))
    needed_by: dict[str, Links] = {}
    for parent, child, status in conn.execute(
            "SELECT d.depends_on, d.job_id, j.status FROM job_dependencies d "
            f"JOIN jobs j ON j.id = d.job_id WHERE {one_of('d.depends_on', ids)} ORDER BY d.job_id", ids):
        needed_by.setdefault(parent, []).append((child, status))
    return needs, needed_by


def _decide(conn: sqlite3.Connection, job_id: str, now_ms: int) -> list[str]:
    when, states = state_of(conn, job_id)
    assert when is not None
    found = dependencies.verdict(when, states.values())
    if found is Verdict.NEVER:
        return _cancel(conn, job_id, dependencies.never_reason(when, states), now_ms)
    conn.execute("UPDATE jobs SET dependencies_pending = ? WHERE id = ?", (int(found is Verdict.WAIT), job_id))
    return []


def _cancel(conn: sqlite3.Connection, job_id: str, why: str, now_ms: int) -> list[str]:
    """Cancel a queued job whose dependencies can never be met, then settle its own dependants."""
    done = conn.execute(
        "UPDATE jobs SET status = ?, finished_at = ?, failure_reason = ?, failure_message = ?, "
        "dependencies_pending = 0 WHERE id = ? AND status = ?",
        (JobState.CANCELLED.value, now_ms, FailureReason.DEPENDENCY_FAILED.value, why, job_id,
         JobState.QUEUED.value)).rowcount
    if not done:
        return []
    return [job_id, *settle(conn, job_id, now_ms)]


def _existing(conn: sqlite3.Connection, ids: list[str]) -> list[str]:
    return [r[0] for r in conn.execute(f"SELECT id FROM jobs WHERE {one_of('id', ids)}", ids)]


def _edges_from(conn: sqlite3.Connection, ids: list[str]) -> dict[str, list[str]]:
    """The dependencies reachable from ``ids`` (job id -> what it depends on), for the cycle check."""
    edges: dict[str, list[str]] = {}
    frontier = list(ids)
    while frontier:
        rows = conn.execute(f"SELECT job_id, depends_on FROM job_dependencies WHERE {one_of('job_id', frontier)}",
                            frontier).fetchall()
        nxt = []
        for child, parent in rows:
            edges.setdefault(child, []).append(parent)
            if parent not in edges:
                nxt.append(parent)
        frontier = [p for p in dict.fromkeys(nxt) if p not in edges]
    return edges


def _condition(conn: sqlite3.Connection, job_id: str) -> str | None:
    row = conn.execute("SELECT condition FROM job_dependencies WHERE job_id = ? LIMIT 1", (job_id,)).fetchone()
    return row[0] if row else None
