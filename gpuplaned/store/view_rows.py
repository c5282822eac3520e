"""Rows of ``views``: a UI page's URL state under a short random id (``gpuplaned.service.api.views``)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from gpuplaned.protocol.view_replies import View

_COLUMNS = "id, page, state, name, created_at"


def _view(row: Sequence[Any]) -> View:
    return View(*row)


def find_by_hash(conn: sqlite3.Connection, state_hash: str) -> View | None:
    row = conn.execute(f"SELECT {_COLUMNS} FROM views WHERE state_hash = ?", (state_hash,)).fetchone()
    return _view(row) if row else None


def insert_view(conn: sqlite3.Connection, view: View, state_hash: str, token_id: str | None) -> None:
    conn.execute("INSERT INTO views (id, page, state, state_hash, name, token_id, created_at) "
                 "VALUES (?, ?, ?, ?, ?, ?, ?)",
                 (view.id, view.page, view.state, state_hash, view.name, token_id, view.created_at))


def get_view(conn: sqlite3.Connection, view_id: str) -> tuple[View, str | None] | None:
    """The view and whose it is; None: no such view."""
    row = conn.execute(f"SELECT {_COLUMNS}, token_id FROM views WHERE id = ?", (view_id,)).fetchone()
    return (_view(row[:5]), row[5]) if row else None


def count_of(conn: sqlite3.Connection, token_id: str) -> int:
    """How many views ``token_id`` has made (and not deleted)."""
    return conn.execute("SELECT count(*) FROM views WHERE token_id = ?", (token_id,)).fetchone()[0]


def id_taken(conn: sqlite3.Connection, view_id: str) -> bool:
    return conn.execute("SELECT 1 FROM views WHERE id = ?", (view_id,)).fetchone() is not None


def list_views(conn: sqlite3.Connection, *, saved: bool, page: str | None, limit: int) -> list[View]:
    """Newest first; ``saved``: the named ones only."""
    clauses, params = [], []
    if saved:
        clauses.append("name IS NOT NULL")
    if page is not None:
        clauses.append("page = ?")
        params.append(page)
    where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
    rows = conn.execute(f"SELECT {_COLUMNS} FROM views{where} ORDER BY created_at DESC, id DESC LIMIT ?",
                        (*params, limit)).fetchall()
    return [_view(row) for row in rows]


def delete_view(conn: sqlite3.Connection, view_id: str) -> None:
    conn.execute("DELETE FROM views WHERE id = ?", (view_id,))
