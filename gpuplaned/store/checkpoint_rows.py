"""Rows of the ``checkpoints`` table: registered by training scripts, never copied or read.

A path is registered once per run (``UNIQUE (run_id, path)``): a script that saves to the
same file again (``last.pt`` every epoch) moves that row to its new step, keeping its id.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

import attrs

from gpuplaned.domain.run_records import CheckpointRecord
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


_COLUMNS = "id, run_id, step, epoch, path, size_bytes, metadata, created_at"


def _checkpoint(row: Sequence[Any]) -> Checkpoint:
    ck_id, run_id, step, epoch, path, size, metadata, created = row
    return Checkpoint(ck_id, run_id, step, epoch, path, size, json.loads(metadata) if metadata else {}, created)


def register(conn: sqlite3.Connection, run_id: str, records: Sequence[CheckpointRecord], now: int) -> list[Checkpoint]:
    """Insert or move each record's row; returns the rows as stored, in the records' order."""
    out = []
    for rec in records:
        conn.execute(
            f"INSERT INTO checkpoints ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (run_id, path) DO UPDATE SET step = excluded.step, epoch = excluded.epoch, "
            "size_bytes = excluded.size_bytes, metadata = excluded.metadata, created_at = excluded.created_at",
            (new_id("ck"), run_id, rec.step, rec.epoch, rec.path, rec.size_bytes,
             json.dumps(rec.metadata, separators=(",", ":")) if rec.metadata else None,
             rec.ts if rec.ts is not None else now))
        row = conn.execute(f"SELECT {_COLUMNS} FROM checkpoints WHERE run_id = ? AND path = ?",
                           (run_id, rec.path)).fetchone()
        out.append(_checkpoint(row))
    return out


def list_for_run(conn: sqlite3.Connection, run_id: str) -> list[Checkpoint]:
    """Oldest step first (unknown steps last, by registration time)."""
    rows = conn.execute(f"SELECT {_COLUMNS} FROM checkpoints WHERE run_id = ? "
                        "ORDER BY step IS NULL, step, created_at, id", (run_id,))
    return [_checkpoint(r) for r in rows]


def get(conn: sqlite3.Connection, checkpoint_id: str) -> Checkpoint | None:
    row = conn.execute(f"SELECT {_COLUMNS} FROM checkpoints WHERE id = ?", (checkpoint_id,)).fetchone()
    return _checkpoint(row) if row else None
