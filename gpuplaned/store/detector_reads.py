"""What the detector's passes read (``gpuplaned.service.passes.detector``): the running attempts,
a run's stored point count, the events that mark what was already raised, the runs that
started or finished without their lifecycle event."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from gpuplaned.domain.job_states import S


def running_attempts(conn: sqlite3.Connection) -> list[tuple[str, int, str | None, str | None]]:
    """``(job_id, attempt, node_id, run_id)`` of each running job (its latest run)."""
    return conn.execute(
        "SELECT j.id, j.attempt, j.node_id, coalesce(j.run_id, (SELECT r.id FROM runs r WHERE r.job_id = j.id "
        "ORDER BY r.created_at DESC, r.id DESC LIMIT 1)) FROM jobs j WHERE j.status = ?", (S.RUNNING.value,)).fetchall()


def running_attempt_of(conn: sqlite3.Connection, run_id: str) -> tuple[str, int] | None:
    """``(job_id, attempt)`` of the run's job while that job runs; None otherwise."""
    return conn.execute("SELECT j.id, j.attempt FROM jobs j JOIN runs r ON r.job_id = j.id WHERE r.id = ? "
                        "AND j.status = ?", (run_id, S.RUNNING.value)).fetchone()


def run_points(conn: sqlite3.Connection, run_id: str) -> int:
    """How many raw points the run's series hold."""
    return conn.execute("SELECT coalesce(sum(c.n), 0) FROM ts_chunks c JOIN ts_series s ON s.id = c.series_id "
                        "WHERE s.kind = 'run' AND s.owner = ? AND c.res = 0", (run_id,)).fetchone()[0]


def last_context(conn: sqlite3.Connection, event_type: str, job_id: str) -> dict[str, Any]:
    """The context of the job's latest event of ``event_type``; {} for none."""
    row = conn.execute("SELECT context FROM events WHERE type = ? AND job_id = ? ORDER BY rowid DESC LIMIT 1",
                       (event_type, job_id)).fetchone()
    return json.loads(row[0]) if row and row[0] else {}


def first_floor(conn: sqlite3.Connection, kinds: Sequence[str]) -> int | None:
    """The ``floor`` the first event of ``kinds`` recorded (where the lifecycle pass began)."""
    row = conn.execute(f"SELECT json_extract(context, '$.floor') FROM events WHERE type IN ({_marks(kinds)}) "
                       "ORDER BY rowid LIMIT 1", tuple(kinds)).fetchone()
    return None if row is None else row[0]


def last_ts(conn: sqlite3.Connection, kinds: Sequence[str]) -> int | None:
    """When the latest event of ``kinds`` happened."""
    return conn.execute(f"SELECT max(ts) FROM events WHERE type IN ({_marks(kinds)})", tuple(kinds)).fetchone()[0]


def started_without(conn: sqlite3.Connection, since_ms: int, event_type: str) -> list[tuple[Any, ...]]:
    """``(run_id, name, job_id, node_id, started_at)`` of the runs (not imported) started since
    ``since_ms`` that have no ``event_type`` event yet, in the order they started."""
    return conn.execute(
        "SELECT id, name, job_id, node_id, started_at FROM runs r WHERE started_at >= ? AND source != 'import' "
        "AND NOT EXISTS (SELECT 1 FROM events e WHERE e.run_id = r.id AND +e.type = ?) ORDER BY started_at",
        (since_ms, event_type)).fetchall()


def finished_without(conn: sqlite3.Connection, since_ms: int, event_type: str) -> list[tuple[Any, ...]]:
    """``(run_id, name, job_id, node_id, status, started_at, finished_at, failure_reason)`` of
    the runs (not imported) finished since ``since_ms`` without an ``event_type`` event yet."""
    return conn.execute(
        "SELECT id, name, job_id, node_id, status, started_at, finished_at, failure_reason FROM runs r "
        "WHERE finished_at >= ? AND source != 'import' "
        "AND NOT EXISTS (SELECT 1 FROM events e WHERE e.run_id = r.id AND +e.type = ?) ORDER BY finished_at",
        (since_ms, event_type)).fetchall()


def troubles(conn: sqlite3.Connection, run_id: str, limit: int) -> list[str]:
    """The ids of the run's latest ``limit`` events above info, newest first."""
    return [row[0] for row in conn.execute("SELECT id FROM events WHERE run_id = ? AND severity != 'info' "
                                           "ORDER BY rowid DESC LIMIT ?", (run_id, limit))]


def _marks(kinds: Sequence[str]) -> str:
    return ", ".join("?" * len(kinds))
