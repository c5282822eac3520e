"""Rows of the ``audit_log`` table (0014): insert, page newest first, and drop the old ones."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from gpuplaned.protocol.audit_replies import AuditRow

_COLUMNS = "id, ts, caller_kind, token_id, token_name, via, action, arguments, outcome, detail"


def _row(row: Sequence[Any]) -> AuditRow:
    *head, arguments, outcome, detail = row
    return AuditRow(*head, arguments=json.loads(arguments), outcome=outcome, detail=detail)


def insert(conn: sqlite3.Connection, row: AuditRow) -> None:
    """``row.id`` is ignored: SQLite numbers the row."""
    conn.execute(f"INSERT INTO audit_log ({_COLUMNS.removeprefix('id, ')}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                 (row.ts, row.caller_kind, row.token_id, row.token_name, row.via, row.action,
                  json.dumps(row.arguments, separators=(",", ":"), default=str), row.outcome, row.detail))


def page(conn: sqlite3.Connection, *, token_name: str | None, limit: int, before_id: int | None) -> list[AuditRow]:
    """Newest first; ``before_id``: the previous page's last row."""
    clauses, params = [], []
    if token_name is not None:
        clauses.append("token_name = ?")
        params.append(token_name)
    if before_id is not None:
        clauses.append("id < ?")
        params.append(before_id)
    where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
    rows = conn.execute(f"SELECT {_COLUMNS} FROM audit_log {where} ORDER BY id DESC LIMIT ?", (*params, limit))
    return [_row(r) for r in rows]


def drop_before(conn: sqlite3.Connection, ts: int) -> int:
    """Delete the rows recorded before ``ts`` (ms); how many went."""
    return conn.execute("DELETE FROM audit_log WHERE ts < ?", (ts,)).rowcount
