"""``job_logs``: the last lines of each stream of each job attempt, a copy of the log files'
tails for quick access (and for when the files are gone). The node's log tailer sends them
through the node link; the server keeps them here, trimmed to the node's ``log_tail_lines``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence

from gpuplaned.protocol.agent import LogChunk


def stored_offsets(conn: sqlite3.Connection, attempts: Iterable[tuple[str, int]],
                   streams: Sequence[str] = ("stdout", "stderr")) -> list[tuple[str, int, str, int]]:
    """Where each attempt's stored tail ends, per stream: ``(job_id, attempt, stream, offset)``."""
    out = []
    for job_id, attempt in attempts:
        for stream in streams:
            offset = conn.execute(
                "SELECT max(offset) FROM job_logs WHERE job_id = ? AND attempt = ? AND stream = ?",
                (job_id, attempt, stream)).fetchone()[0]
            if offset is not None:
                out.append((job_id, attempt, stream, offset))
    return out


def keep_tails(conn: sqlite3.Connection, chunks: Iterable[LogChunk], keep: int) -> int:
    """Store the last ``keep`` lines of each chunk and drop what falls out of each stream's
    last ``keep``; returns how many lines were new."""
    stored = 0
    for chunk in chunks:
        lines = chunk.lines[-keep:] if keep > 0 else ()
        if not lines:
            continue
        job_id, attempt, stream = chunk.job_id, chunk.attempt, chunk.stream
        stored += conn.executemany(
            "INSERT OR IGNORE INTO job_logs (job_id, attempt, stream, offset, line) VALUES (?, ?, ?, ?, ?)",
            [(job_id, attempt, stream, offset, text) for offset, text in lines],
        ).rowcount
        conn.execute(
            "DELETE FROM job_logs WHERE job_id = ? AND attempt = ? AND stream = ? AND offset < ("
            " SELECT offset FROM job_logs WHERE job_id = ? AND attempt = ? AND stream = ?"
            " ORDER BY offset DESC LIMIT 1 OFFSET ?)",
            (job_id, attempt, stream, job_id, attempt, stream, keep - 1),
        )
    return stored
