"""Rows of the ``checkpoints`` table: registered by training scripts or found on the node by
the checkpoint watcher (``register_found``), never copied or read.

A path is registered once per run (``UNIQUE (run_id, path)``): a script that saves to the
same file again (``last.pt`` every epoch) moves that row to its new step, keeping its id.
A found checkpoint carries its fingerprint: the same path found again with the same
fingerprint changes nothing, and one the SDK registered first gains the fingerprint; the
SDK registering a file the watcher found first adds its step and metadata, and no event.
Each registration links the row into its run's chain (``parent_id``, ``_linked``); retention
marks a row ``deleted_at`` once its file is gone (``mark_deleted``), and a path saved anew
is live again.
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
    parent_id: str | None = None  # the resume chain: the run's previous checkpoint, or what the run resumed from
    deleted_at: int | None = None  # retention deleted its file (the row stays, for the lineage)


_INSERTED = "id, run_id, step, epoch, path, size_bytes, metadata, created_at"
_COLUMNS = f"{_INSERTED}, fingerprint, full_hash, verified_at, parent_id, deleted_at"


def _checkpoint(row: Sequence[Any]) -> Checkpoint:
    ck_id, run_id, step, epoch, path, size, metadata, created, *known = row  # fingerprint .. deleted_at
    return Checkpoint(ck_id, run_id, step, epoch, path, size, json.loads(metadata) if metadata else {}, created,
                      *known)


def register(conn: sqlite3.Connection, run_id: str, records: Sequence[CheckpointRecord], now: int) -> list[Checkpoint]:
    """Insert or move each record's row; returns the rows that are news, as stored, in the
    records' order: not one the watcher registered already (``_watchers``)."""
    out = []
    for rec in records:
        if _watchers(conn, run_id, rec):
            _linked(conn, run_id, rec.path)
            continue
        conn.execute(
            f"INSERT INTO checkpoints ({_INSERTED}) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (run_id, path) DO UPDATE SET step = excluded.step, epoch = excluded.epoch, "
            "size_bytes = excluded.size_bytes, metadata = excluded.metadata, created_at = excluded.created_at, "
            # Saved anew: what was known of the old file no longer holds.
            "fingerprint = NULL, full_hash = NULL, verified_at = NULL, deleted_at = NULL",
            (new_id("ck"), run_id, rec.step, rec.epoch, rec.path, rec.size_bytes,
             json.dumps(rec.metadata, separators=(",", ":")) if rec.metadata else None,
             rec.ts if rec.ts is not None else now))
        out.append(_linked(conn, run_id, rec.path))
    return out


def _watchers(conn: sqlite3.Connection, run_id: str, rec: CheckpointRecord) -> bool:
    """Whether ``rec`` is a file the watcher registered already (a fingerprint, not deleted,
    no other step or size): it was told then, so the script's word adds its step, epoch and
    metadata to the row, keeps the fingerprint, and is no news."""
    row = conn.execute("SELECT id, step, size_bytes, metadata FROM checkpoints WHERE run_id = ? AND path = ?"
                       " AND fingerprint IS NOT NULL AND deleted_at IS NULL", (run_id, rec.path)).fetchone()
    if row is None or _differ(rec.step, row[1]) or _differ(rec.size_bytes, row[2]):
        return False
    metadata = {**(json.loads(row[3]) if row[3] else {}), **rec.metadata}
    conn.execute("UPDATE checkpoints SET step = coalesce(?, step), epoch = coalesce(?, epoch), metadata = ?"
                 " WHERE id = ?", (rec.step, rec.epoch, json.dumps(metadata, separators=(",", ":")), row[0]))
    return True


def _differ(told: Any, known: Any) -> bool:
    return told is not None and known is not None and told != known


def register_found(conn: sqlite3.Connection, run_id: str, found: FoundCheckpoint, now: int, *,
                   source: str = "watcher") -> Checkpoint | None:
    """Insert a checkpoint the node's watcher found; returns its row when it is news (a new
    path, or a new fingerprint of a path found before), None when it was known: found before
    with this fingerprint, or registered by the script (which then gains the fingerprint)."""
    known = conn.execute("SELECT fingerprint FROM checkpoints WHERE run_id = ? AND path = ?",
                         (run_id, found.path)).fetchone()
    if known is not None and known[0] == found.fingerprint:
        return None
    metadata = json.dumps({"source": source, "kind": found.kind}, separators=(",", ":"))  # "import": import-run
    conn.execute(
        f"INSERT INTO checkpoints ({_INSERTED}, fingerprint) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (run_id, path) DO UPDATE SET step = coalesce(excluded.step, step), "
        "epoch = coalesce(excluded.epoch, epoch), size_bytes = excluded.size_bytes, "
        "fingerprint = excluded.fingerprint, full_hash = NULL, verified_at = NULL, deleted_at = NULL",
        (new_id("ck"), run_id, found.step, found.epoch, found.path, found.size_bytes, metadata, now,
         found.fingerprint))
    if known is not None and known[0] is None:
        return None  # the script registered it: its CHECKPOINT_CREATED was told then
    return _linked(conn, run_id, found.path)


def _linked(conn: sqlite3.Connection, run_id: str, path: str) -> Checkpoint:
    """The row of ``path``, (re)linked into the run's chain by step: its parent is the run's
    checkpoint before it (the greatest smaller step; for one without a step, the greatest
    step), else the checkpoint the run resumed from; the next one by step becomes its child.
    A row that moved (a path saved anew at another step) first hands its children to its old
    parent, so the chain never loops. Links to other runs' checkpoints are left alone."""
    ck_id, step, old_parent = conn.execute("SELECT id, step, parent_id FROM checkpoints WHERE run_id = ? AND path = ?",
                                           (run_id, path)).fetchone()
    conn.execute("UPDATE checkpoints SET parent_id = ? WHERE run_id = ? AND parent_id = ?", (old_parent, run_id, ck_id))
    before = conn.execute(
        "SELECT id FROM checkpoints WHERE run_id = ? AND id != ? AND step IS NOT NULL"
        + ("" if step is None else " AND step < ?") + " ORDER BY step DESC, created_at DESC, id DESC LIMIT 1",
        (run_id, ck_id) if step is None else (run_id, ck_id, step)).fetchone()
    if before is None:
        before = conn.execute("SELECT resumed_from FROM runs WHERE id = ?", (run_id,)).fetchone()
    conn.execute("UPDATE checkpoints SET parent_id = ? WHERE id = ?", (before[0] if before else None, ck_id))
    if step is not None:  # the next step's checkpoints hang from this one now
        conn.execute("UPDATE checkpoints SET parent_id = ? WHERE run_id = ? AND id != ? AND step = "
                     "(SELECT min(step) FROM checkpoints WHERE run_id = ? AND step > ?)",
                     (ck_id, run_id, ck_id, run_id, step))
    return _checkpoint(conn.execute(f"SELECT {_COLUMNS} FROM checkpoints WHERE id = ?", (ck_id,)).fetchone())


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


def mark_deleted(conn: sqlite3.Connection, ck: Checkpoint, now: int) -> bool:
    """Mark ``ck``'s row deleted (its file is gone); False when it already was, or when the path
    was registered anew since ``ck`` was read (another fingerprint or registration time)."""
    return conn.execute("UPDATE checkpoints SET deleted_at = ? WHERE id = ? AND deleted_at IS NULL "
                        "AND fingerprint IS ? AND created_at = ?",
                        (now, ck.id, ck.fingerprint, ck.created_at)).rowcount == 1


def held_by_another(conn: sqlite3.Connection, run_id: str, path: str, fingerprint: str | None) -> bool:
    """Another run has a live checkpoint at ``path`` with this fingerprint (the same file)."""
    return conn.execute("SELECT 1 FROM checkpoints WHERE path = ? AND run_id != ? AND fingerprint = ? "
                        "AND deleted_at IS NULL LIMIT 1", (path, run_id, fingerprint)).fetchone() is not None


def runs_of(conn: sqlite3.Connection, checkpoint_ids: Sequence[str]) -> set[str]:
    """The runs the checkpoints belong to."""
    if not checkpoint_ids:
        return set()
    return {row[0] for row in conn.execute(
        f"SELECT DISTINCT run_id FROM checkpoints WHERE id IN ({','.join('?' * len(checkpoint_ids))})",
        list(checkpoint_ids))}
