"""Rows of the ``ui_sessions`` table: the web UI's signed-in browsers.

A row is keyed by the hex SHA-256 of the browser's cookie value, never the value. Rows of a
revoked token are deleted by a trigger in the revoking transaction (migration 0008);
expired rows are swept whenever a new session is made.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

import attrs

ORIGINS = ("token", "link")


@attrs.frozen
class UiSessionRow:
    id_hash: str
    origin: str  # one of ORIGINS: how the browser signed in
    token_id: str | None  # the API token it signed in with (origin "token")
    scopes: tuple[str, ...]
    created_at: int
    expires_at: int


_COLUMNS = "id_hash, origin, token_id, scopes, created_at, expires_at"


def _row(row: Sequence[Any]) -> UiSessionRow:
    id_hash, origin, token_id, scopes, created_at, expires_at = row
    return UiSessionRow(id_hash, origin, token_id, tuple(json.loads(scopes)), created_at, expires_at)


def insert_session(conn: sqlite3.Connection, row: UiSessionRow) -> None:
    """Insert ``row``, sweeping sessions that expired before it was made."""
    conn.execute("DELETE FROM ui_sessions WHERE expires_at <= ?", (row.created_at,))
    conn.execute(
        f"INSERT INTO ui_sessions ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
        (row.id_hash, row.origin, row.token_id, json.dumps(list(row.scopes)), row.created_at, row.expires_at),
    )


def get_session(conn: sqlite3.Connection, id_hash: str) -> UiSessionRow | None:
    found = conn.execute(f"SELECT {_COLUMNS} FROM ui_sessions WHERE id_hash = ?", (id_hash,)).fetchone()
    return None if found is None else _row(found)


def delete_session(conn: sqlite3.Connection, id_hash: str) -> bool:
    """Whether there was such a session."""
    return conn.execute("DELETE FROM ui_sessions WHERE id_hash = ?", (id_hash,)).rowcount > 0
