"""Rows of the ``api_tokens`` table: insert, fetch by id, list, revoke, and mark as used.

``limits`` (0014) holds an agent token's ``TokenLimits`` as JSON, NULL for none. ``job_id`` (0029)
names the job whose SDK a token is (``gpuplaned.service.api.job_tokens``), NULL for a user's.

A row holds the hex SHA-256 of a token's secret, never the secret. Names are unique among
tokens not revoked (a partial unique index), so a revoked name can be reused.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

import attrs

from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.job_states import ENDED, values
from gpuplaned.protocol.token_limits import TokenLimits, dump_limits, load_limits


@attrs.frozen
class TokenRow:
    id: str
    name: str
    secret_hash: str
    scopes: tuple[str, ...]
    created_at: int
    expires_at: int | None
    last_used_at: int | None
    revoked_at: int | None
    limits: TokenLimits | None = None
    job_id: str | None = None  # a job's SDK token: held to that job's runs


_COLUMNS = "id, name, secret_hash, scopes, created_at, expires_at, last_used_at, revoked_at, limits, job_id"


def _row(row: Sequence[Any]) -> TokenRow:
    id_, name, secret_hash, scopes, *times, limits, job_id = row
    return TokenRow(id_, name, secret_hash, tuple(json.loads(scopes)), *times, load_limits(limits), job_id)


def insert_token(conn: sqlite3.Connection, row: TokenRow) -> None:
    """Raises:
        ApiError: ``conflict`` when a token not revoked already has this name.
    """
    taken = conn.execute("SELECT id FROM api_tokens WHERE name = ? AND revoked_at IS NULL", (row.name,)).fetchone()
    if taken is not None:
        raise ApiError(ErrorCode.CONFLICT, f"name: a token named {row.name!r} exists ({taken[0]}); "
                                           "revoke it first or pick another name",
                       {"field": "name", "token_id": taken[0]})
    conn.execute(
        f"INSERT INTO api_tokens ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (row.id, row.name, row.secret_hash, json.dumps(list(row.scopes)), row.created_at, row.expires_at,
         row.last_used_at, row.revoked_at, dump_limits(row.limits), row.job_id),
    )


def get_token(conn: sqlite3.Connection, token_id: str) -> TokenRow | None:
    found = conn.execute(f"SELECT {_COLUMNS} FROM api_tokens WHERE id = ?", (token_id,)).fetchone()
    return None if found is None else _row(found)


def list_tokens(conn: sqlite3.Connection, limit: int = 100, before_id: str | None = None) -> list[TokenRow]:
    """Newest first (ids are ULIDs: creation order); ``before_id``: the previous page's last."""
    where, params = ("WHERE id < ?", [before_id]) if before_id is not None else ("", [])
    rows = conn.execute(f"SELECT {_COLUMNS} FROM api_tokens {where} ORDER BY id DESC LIMIT ?", (*params, limit))
    return [_row(r) for r in rows]


def find_token(conn: sqlite3.Connection, id_or_name: str) -> TokenRow | None:
    """The token with this id; else the one not revoked with this name; else the newest revoked one."""
    found = get_token(conn, id_or_name)
    if found is not None:
        return found
    named = conn.execute(
        f"SELECT {_COLUMNS} FROM api_tokens WHERE name = ? ORDER BY revoked_at IS NULL DESC, id DESC LIMIT 1",
        (id_or_name,),
    ).fetchone()
    return None if named is None else _row(named)


def revoke_token(conn: sqlite3.Connection, id_or_name: str, now_ms: int) -> TokenRow | None:
    """Revoke the token ``find_token`` names (a revoked one keeps its first ``revoked_at``);
    None when there is none."""
    found = find_token(conn, id_or_name)
    if found is None:
        return None
    if found.revoked_at is None:
        conn.execute("UPDATE api_tokens SET revoked_at = ? WHERE id = ?", (now_ms, found.id))
        found = attrs.evolve(found, revoked_at=now_ms)
    return found


def revoke_job_tokens(conn: sqlite3.Connection, job_id: str, now_ms: int) -> int:
    """Revoke every live SDK token of ``job_id`` (its attempt ended, or a new one is dispatched);
    how many were."""
    return conn.execute("UPDATE api_tokens SET revoked_at = ? WHERE job_id = ? AND revoked_at IS NULL",
                        (now_ms, job_id)).rowcount


def touch_token(conn: sqlite3.Connection, token_id: str, now_ms: int) -> None:
    conn.execute("UPDATE api_tokens SET last_used_at = max(coalesce(last_used_at, 0), ?) WHERE id = ?",
                 (now_ms, token_id))


def budgeted_tokens(conn: sqlite3.Connection) -> list[TokenRow]:
    """Tokens with a GPU-hour budget and a job not ended (the budget pass walks these; a revoked
    or expired token's jobs still run, so they still count)."""
    ended = values(ENDED)  # a LOST job may run on, charged
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM api_tokens t WHERE limits IS NOT NULL "
        "AND json_extract(limits, '$.gpu_hours') IS NOT NULL "
        "AND EXISTS (SELECT 1 FROM jobs j WHERE j.token_id = t.id "
        f"AND j.status NOT IN ({', '.join('?' * len(ended))})) ORDER BY id", ended)
    return [_row(r) for r in rows]
