"""The ``idempotency_keys`` table: one row per (caller scope, key), the first request's body
hash, and once answered its status and body (``gpuplaned.http.idempotency`` decides)."""

from __future__ import annotations

import sqlite3
from typing import Any

import attrs


@attrs.frozen
class KeptKey:
    body_hash: str
    status: int | None  # None while the first request is still being answered
    response: Any


def drop_before(conn: sqlite3.Connection, created_before_ms: int) -> None:
    conn.execute("DELETE FROM idempotency_keys WHERE created_at < ?", (created_before_ms,))


def find(conn: sqlite3.Connection, scope: str, key: str) -> KeptKey | None:
    row = conn.execute("SELECT body_hash, status, response FROM idempotency_keys WHERE scope = ? AND key = ?",
                       (scope, key)).fetchone()
    return KeptKey(*row) if row else None


def reserve(conn: sqlite3.Connection, scope: str, key: str, body_hash: str, now_ms: int) -> None:
    conn.execute("INSERT INTO idempotency_keys (scope, key, body_hash, created_at) VALUES (?, ?, ?, ?)",
                 (scope, key, body_hash, now_ms))


def forget(conn: sqlite3.Connection, scope: str, key: str) -> None:
    conn.execute("DELETE FROM idempotency_keys WHERE scope = ? AND key = ?", (scope, key))


def keep_answer(conn: sqlite3.Connection, scope: str, key: str, status: int, body: bytes) -> None:
    conn.execute("UPDATE idempotency_keys SET status = ?, response = ? WHERE scope = ? AND key = ?",
                 (status, body, scope, key))
