"""Keyset paging over rows listed newest first, ordered by (created_at DESC, id DESC)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any


def newest_first(conn: sqlite3.Connection, select: str, clauses: Sequence[str], params: Sequence[Any],
                 before: tuple[int, str] | None, limit: int, *, alias: str = "",
                 key: str = "id") -> list[tuple[Any, ...]]:
    """``select`` (``SELECT ... FROM ...``) filtered by ``clauses`` (ANDed, with ``params``),
    newest first, at most ``limit`` rows after ``before`` = (created_at, key) of the previous
    page's last row (see gpuplaned.protocol.cursors). ``alias``: the table's alias in
    ``select``; ``key``: the unique column that orders rows of the same millisecond."""
    created, tie = (f"{alias}.created_at", f"{alias}.{key}") if alias else ("created_at", key)
    clauses, params = list(clauses), list(params)
    if before is not None:
        clauses.append(f"({created} < ? OR ({created} = ? AND {tie} < ?))")
        params += [before[0], before[0], before[1]]
    where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
    return conn.execute(f"{select}{where} ORDER BY {created} DESC, {tie} DESC LIMIT ?", (*params, limit)).fetchall()


def one_of(column: str, values: Sequence[Any]) -> str:
    """``column IN (?, ...)`` for ``values`` (not empty)."""
    return f"{column} IN ({','.join('?' * len(values))})"
