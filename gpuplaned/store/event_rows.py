"""Rows of the ``events`` table: insert, filtered listing, and "everything after this one".

Events are ordered by rowid (insertion order), which is also what a stream resumes from:
two events in the same millisecond keep the order in which they were recorded.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

import attrs

from gpuplaned.protocol.event_replies import EventRow



@attrs.frozen
class EventFilter:
    severities: tuple[str, ...] = ()  # empty: any
    types: tuple[str, ...] = ()
    node_id: str | None = None
    job_id: str | None = None
    run_id: str | None = None

    def matches(self, event: EventRow) -> bool:
        return ((not self.severities or event.severity in self.severities)
                and (not self.types or event.type in self.types)
                and self.node_id in (None, event.node_id)
                and self.job_id in (None, event.job_id)
                and self.run_id in (None, event.run_id))

    def where(self) -> tuple[str, list[Any]]:
        clauses: list[str] = []
        params: list[Any] = []
        for column, values in (("severity", self.severities), ("type", self.types)):
            if values:
                clauses.append(f"{column} IN ({','.join('?' * len(values))})")
                params += values
        for column, value in (("node_id", self.node_id), ("job_id", self.job_id), ("run_id", self.run_id)):
            if value is not None:
                clauses.append(f"{column} = ?")
                params.append(value)
        return " AND ".join(clauses) or "1", params


_COLUMNS = "id, ts, type, severity, node_id, job_id, run_id, step, message, context"


def _row(row: Sequence[Any]) -> EventRow:
    *head, context = row
    return EventRow(*head, context=json.loads(context) if context else {})


def insert_events(conn: sqlite3.Connection, events: Sequence[EventRow]) -> None:
    conn.executemany(
        f"INSERT INTO events ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [(e.id, e.ts, e.type, e.severity, e.node_id, e.job_id, e.run_id, e.step, e.message,
          json.dumps(e.context, separators=(",", ":")) if e.context else None) for e in events],
    )


def list_events(conn: sqlite3.Connection, where: EventFilter, limit: int,
                before_rowid: int | None = None) -> list[tuple[int, EventRow]]:
    """Newest first, with each event's rowid (what a page cursor holds)."""
    clause, params = where.where()
    if before_rowid is not None:
        clause += " AND rowid < ?"
        params.append(before_rowid)
    rows = conn.execute(f"SELECT rowid, {_COLUMNS} FROM events WHERE {clause} ORDER BY rowid DESC LIMIT ?",
                        (*params, limit)).fetchall()
    return [(r[0], _row(r[1:])) for r in rows]


def events_after(conn: sqlite3.Connection, after_id: str | None, where: EventFilter, limit: int) -> list[EventRow] | None:
    """Oldest first, the events recorded after ``after_id`` (all of them when None).

    Returns None when ``after_id`` names no event (the caller decides what a stale resume
    position means).
    """
    start = 0
    if after_id is not None:
        found = conn.execute("SELECT rowid FROM events WHERE id = ?", (after_id,)).fetchone()
        if found is None:
            return None
        start = found[0]
    clause, params = where.where()
    rows = conn.execute(f"SELECT {_COLUMNS} FROM events WHERE rowid > ? AND {clause} ORDER BY rowid LIMIT ?",
                        (start, *params, limit)).fetchall()
    return [_row(r) for r in rows]
