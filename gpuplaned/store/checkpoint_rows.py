"""Rows of the ``checkpoints`` table: registered by training scripts or found on the node by
the checkpoint watcher (``register_found``), never copied or read.

A path is registered once per run (``UNIQUE (run_id, path)``): a script that saves to the
same file again (``last.pt`` every epoch) moves that row to its new step, keeping its id.
A found checkpoint carries its fingerprint: the same path found again with the same
fingerprint changes nothing, and one the SDK registered first gains the fingerprint.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

import attrs

from gpuplaned.domain.run_records import CheckpointRecord
from gpuplaned.protocol.agent import FoundCheckpoint
from gpuplaned.protocol.ids import new_id


@attrs.frozen
class Checkpoint:
    id: str
    run_id: str
    step: int | None
    epoch: float | None
    path: str
    size_bytes: int | None
    metadata: dict[str, Any]
    created_at: int
    fingerprint: str | None = None
    full_hash: str | None = None  # taken by the first verify that found it unchanged
    verified_at: int | None = None


_INSERTED = "id, run_id, step, epoch, path, size_bytes, metadata, created_at"
_COLUMNS = f"{_INSERTED}, fingerprint, full_hash, verified_at"


def _checkpoint(row: Sequence[Any]) -> Checkpoint:
    ck_id, run_id, step, epoch, path, size, metadata, created, fingerprint, full_hash, verified_at = row
    return Checkpoint(ck_id, run_id, step, epoch, path, size, json.loads(metadata) if metadata else {}, created,
                      fingerprint, full_hash, verified_at)


def register(conn: sqlite3.Connection, run_id: str, records: Sequence[CheckpointRecord], now: int) -> list[Checkpoint]:
    """Insert or move each record's row; returns the rows as stored, in the records' order."""
    out = []
    for rec in records:
        conn.execute(
            f"INSERT INTO checkpoints ({_INSERTED}) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (run_id, path) DO UPDATE SET step = excluded.step, epoch = excluded.epoch, "
            "size_bytes = excluded.size_bytes, metadata = excluded.metadata, created_at = excluded.created_at, "
            # Saved anew: what was known of the old file no longer holds.
            "fingerprint = NULL, full_hash = NULL, verified_at = NULL",
            (new_id("ck"), run_id, rec.step, rec.epoch, rec.path, rec.size_bytes,
             json.dumps(rec.metadata, separators=(",", ":")) if rec.metadata else None,
             rec.ts if rec.ts is not None else now))
        row = conn.execute(f"SELECT {_COLUMNS} FROM checkpoints WHERE run_id = ? AND path = ?",
                           (run_id, rec.path)).fetchone()
        out.append(_checkpoint(row))
    return out


def register_found(conn: sqlite3.Connection, run_id: str, found: FoundCheckpoint, now: int) -> Checkpoint | None:
    """Insert a checkpoint the node's watcher found; returns its row when it is news (a new
    path, or a new fingerprint of a path found before), None when it was known: found before
    with this fingerprint, or registered by the script (which then gains the fingerprint)."""
    known = conn.execute("SELECT fingerprint FROM checkpoints WHERE run_id = ? AND path = ?",
                         (run_id, found.path)).fetchone()
    if known is not None and known[0] == found.fingerprint:
        return None
    metadata = json.dumps({"source": "watcher", "kind": found.kind}, separators=(",", ":"))
    conn.execute(
        f"INSERT INTO checkpoints ({_INSERTED}, fingerprint) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (run_id, path) DO UPDATE SET step = coalesce(excluded.step, step), "
        "epoch = coalesce(excluded.epoch, epoch), size_bytes = excluded.size_bytes, "
        "fingerprint = excluded.fingerprint, full_hash = NULL, verified_at = NULL",
        (new_id("ck"), run_id, found.step, found.epoch, found.path, found.size_bytes, metadata, now,
         found.fingerprint))
    if known is not None and known[0] is None:
        return None  # the script registered it: its CHECKPOINT_CREATED was told then
    row = conn.execute(f"SELECT {_COLUMNS} FROM checkpoints WHERE run_id = ? AND path = ?",
                       (run_id, found.path)).fetchone()
    return _checkpoint(row)


def list_for_run(conn: sqlite3.Connection, run_id: str) -> list[Checkpoint]:
    """Oldest step first (unknown steps last, by registration time)."""
    rows = conn.execute(f"SELECT {_COLUMNS} FROM checkpoints WHERE run_id = ? "
                        "ORDER BY step IS NULL, step, created_at, id", (run_id,))
    return [_checkpoint(r) for r in rows]


def get(conn: sqlite3.Connection, checkpoint_id: str) -> Checkpoint | None:
    row = conn.execute(f"SELECT {_COLUMNS} FROM checkpoints WHERE id = ?", (checkpoint_id,)).fetchone()
    return _checkpoint(row) if row else None


def set_full_hash(conn: sqlite3.Connection, checkpoint_id: str, full_hash: str, now: int) -> None:
    """Keep the full hash a verify took (only while none is kept: the first one stands)."""
    conn.execute("UPDATE checkpoints SET full_hash = ?, verified_at = ? WHERE id = ? AND full_hash IS NULL",
                 (full_hash, now, checkpoint_id))
