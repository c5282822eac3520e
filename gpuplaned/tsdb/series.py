"""Series identity: (kind, owner, name) to the integer id chunks are stored under."""

from __future__ import annotations

import sqlite3

KINDS = ("node", "run")
RAW = 0
M1 = 60_000
M5 = 300_000
RES_NAMES = {RAW: "raw", M1: "1m", M5: "5m"}
MAX_NAME = 200


def check_kind(kind: object) -> str:
    if kind not in KINDS:
        raise ValueError(f"unknown series kind {kind!r}: expected 'node' or 'run'")
    return kind  # type: ignore[return-value]


def check_owner(owner: object) -> str:
    if not isinstance(owner, str) or not owner:
        raise ValueError(f"series owner must be a non-empty string, got {owner!r}")
    return owner


def check_name(name: object) -> str:
    if not isinstance(name, str) or not name or len(name) > MAX_NAME:
        raise ValueError(f"series name must be a string of 1-{MAX_NAME} characters, got {name!r}")
    return name


def ensure(conn: sqlite3.Connection, kind: str, owner: str, name: str) -> int:
    """The series id, created on first use (inside the caller's transaction)."""
    row = conn.execute(
        "SELECT id FROM ts_series WHERE kind = ? AND owner = ? AND name = ?", (kind, owner, name)
    ).fetchone()
    if row is not None:
        return row[0]
    return conn.execute(
        "INSERT INTO ts_series (kind, owner, name) VALUES (?, ?, ?)", (kind, owner, name)
    ).lastrowid


def lookup(conn: sqlite3.Connection, kind: str, owner: str, names: list[str] | None) -> dict[str, int]:
    """Ids of the named series that exist (all of the owner's when ``names`` is None)."""
    rows = conn.execute(
        "SELECT name, id FROM ts_series WHERE kind = ? AND owner = ? ORDER BY name", (kind, owner)
    ).fetchall()
    found = dict(rows)
    if names is None:
        return found
    return {n: found[n] for n in names if n in found}
