"""Rows of ``tb_cursors``: where the TensorBoard tailer stands in each event file of a job
attempt, written in the same transaction as the points read up to there (migration 0011).

``advance`` is a compare and set: a file's cursor moves only from the one the node says it
continued from, so a part sent twice (a retry after a lost answer) or read from a stale
cursor stores nothing. ``state`` holds the rewind rule's state the file's reads left, as
JSON ``[[series, file, folder, first_step], ...]``. ``reads`` numbers the reads stored: the
tsdb batch of a read is named by it, never by the offsets, which repeat when a file is
truncated and written anew under the same inode.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from gpuplaned.protocol.tb_frames import TbCursor, TbFileState, TbRewind


def stored(conn: sqlite3.Connection, job_id: str, attempt: int) -> list[TbFileState]:
    """The stored cursor and rewind state of each file of the attempt, by path."""
    rows = conn.execute("SELECT path, inode, offset, state FROM tb_cursors WHERE job_id = ? AND attempt = ?"
                        " ORDER BY path", (job_id, attempt)).fetchall()
    return [TbFileState(path, TbCursor(inode, offset), _rewinds(state)) for path, inode, offset, state in rows]


def cursor_of(conn: sqlite3.Connection, job_id: str, attempt: int, path: str) -> TbCursor | None:
    row = conn.execute("SELECT inode, offset FROM tb_cursors WHERE job_id = ? AND attempt = ? AND path = ?",
                       (job_id, attempt, path)).fetchone()
    return TbCursor(*row) if row else None


def advance(conn: sqlite3.Connection, job_id: str, attempt: int, path: str, after: TbCursor | None,
            cursor: TbCursor, rewinds: Sequence[TbRewind], now_ms: int) -> int | None:
    """Move the file's cursor from ``after`` (None: no row yet) to ``cursor`` and merge its
    rewind state; returns this read's number (1 for the file's first), or None, changing
    nothing, when the stored cursor is not ``after``."""
    if cursor_of(conn, job_id, attempt, path) != after:
        return None
    row = conn.execute("SELECT state, reads FROM tb_cursors WHERE job_id = ? AND attempt = ? AND path = ?",
                       (job_id, attempt, path)).fetchone()
    state = {r.series: r for r in _rewinds(row[0] if row else None)}
    state.update({r.series: r for r in rewinds})
    text = json.dumps([[r.series, r.file, r.folder, r.first_step] for r in state.values()],
                      separators=(",", ":")) if state else None
    reads = (row[1] if row else 0) + 1
    conn.execute(
        "INSERT INTO tb_cursors (job_id, attempt, path, inode, offset, state, reads, updated_at)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (job_id, attempt, path) DO UPDATE SET inode = excluded.inode, offset = excluded.offset,"
        " state = excluded.state, reads = excluded.reads, updated_at = excluded.updated_at",
        (job_id, attempt, path, cursor.inode, cursor.offset, text, reads, now_ms))
    return reads


def count_points(conn: sqlite3.Connection, run_id: str, points: int) -> None:
    """Count ``points`` more of the run's points as read from TensorBoard event files."""
    if points:
        conn.execute("UPDATE runs SET tb_points = tb_points + ? WHERE id = ?", (points, run_id))


def _rewinds(text: str | None) -> tuple[TbRewind, ...]:
    if not text:
        return ()
    return tuple(TbRewind(str(s), str(f), str(d), int(first)) for s, f, d, first in json.loads(text))
