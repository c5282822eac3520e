"""Rows of ``policy_actions``: the failure policies' triggers still to settle, and how each was.

A row is queued by the ``policy_actions_on_event`` trigger (0013_events_policies.sql) in the
transaction that records its event; ``gpuplaned.service.passes.failure_policies`` settles it.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import attrs

from gpuplaned.store.event_rows import EventRow

OPEN = ("pending", "waiting", "restarting")


@attrs.frozen
class OpenAction:
    job_id: str
    event_id: str
    trigger: str
    state: str
    due_at: int | None


def open_actions(conn: sqlite3.Connection, now_ms: int, limit: int = 100) -> list[OpenAction]:
    """Oldest first: the pending ones, those restarting, and those waiting that are due."""
    rows = conn.execute(
        "SELECT job_id, event_id, trigger, state, due_at FROM policy_actions WHERE state != 'done' "
        "AND (state != 'waiting' OR due_at <= ?) ORDER BY created_at, rowid LIMIT ?", (now_ms, limit)).fetchall()
    return [OpenAction(*row) for row in rows]


def next_due(conn: sqlite3.Connection) -> int | None:
    row = conn.execute("SELECT MIN(due_at) FROM policy_actions WHERE state = 'waiting'").fetchone()
    return row[0] if row else None


def event(conn: sqlite3.Connection, event_id: str) -> EventRow | None:
    row = conn.execute("SELECT id, ts, type, severity, node_id, job_id, run_id, step, message, context "
                       "FROM events WHERE id = ?", (event_id,)).fetchone()
    if row is None:
        return None
    *head, context = row
    return EventRow(*head, context=json.loads(context) if context else {})


def taken(conn: sqlite3.Connection, job_id: str, trigger: str) -> int:
    """How many times the job's policy for ``trigger`` acted (skips and waits not counted)."""
    return int(conn.execute("SELECT COUNT(*) FROM policy_actions WHERE job_id = ? AND trigger = ? "
                            "AND action IS NOT NULL AND action NOT IN ('skip', 'wait')",
                            (job_id, trigger)).fetchone()[0])


def stall_restarts(conn: sqlite3.Connection, job_id: str) -> int:
    """How many times ``on_stalled`` restarted the job (or began to: the row in ``restarting``)."""
    return int(conn.execute("SELECT COUNT(*) FROM policy_actions WHERE job_id = ? AND trigger = 'RUN_STALLED' "
                            "AND action = 'restart'", (job_id,)).fetchone()[0])


def settle(conn: sqlite3.Connection, job_id: str, event_id: str, state: str, now_ms: int, **fields: Any) -> None:
    """Move the row to ``state`` with ``fields`` (action, reason, checkpoint_id, due_at)."""
    sets = ", ".join(f"{name} = :{name}" for name in fields)
    conn.execute(f"UPDATE policy_actions SET state = :state, done_at = :done{', ' + sets if sets else ''} "
                 "WHERE job_id = :job AND event_id = :event",
                 {"state": state, "done": now_ms if state == "done" else None, "job": job_id, "event": event_id,
                  **fields})


def last_good_checkpoint(conn: sqlite3.Connection, run_id: str, before_step: int | None) -> str | None:
    """The run's newest checkpoint not deleted, before ``before_step`` when it is known."""
    row = conn.execute(
        "SELECT id FROM checkpoints WHERE run_id = ? AND deleted_at IS NULL AND (? IS NULL OR step < ?) "
        "ORDER BY step IS NULL, step DESC, created_at DESC LIMIT 1", (run_id, before_step, before_step)).fetchone()
    return row[0] if row else None


def set_env(conn: sqlite3.Connection, job_id: str, env: dict[str, str]) -> None:
    conn.execute("UPDATE jobs SET env = ? WHERE id = ?", (json.dumps(env), job_id))
