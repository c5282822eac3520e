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


_STREAM = "job_id = ? AND attempt = ? AND stream = ?"


def line_count(conn: sqlite3.Connection, job_id: str, attempt: int, stream: str) -> int:
    """How many lines of the stream's tail are stored."""
    return conn.execute(f"SELECT count(*) FROM job_logs WHERE {_STREAM}", (job_id, attempt, stream)).fetchone()[0]


def first_offset(conn: sqlite3.Connection, job_id: str, attempt: int, stream: str) -> int | None:
    """Where the stored tail begins; None when nothing is stored."""
    return conn.execute(f"SELECT min(offset) FROM job_logs WHERE {_STREAM}", (job_id, attempt, stream)).fetchone()[0]


def lines_after(conn: sqlite3.Connection, job_id: str, attempt: int, stream: str, position: int,
                limit: int) -> list[tuple[int, str]]:
    """Up to ``limit`` stored ``(offset, line)`` after ``position``, in order."""
    return conn.execute(f"SELECT offset, line FROM job_logs WHERE {_STREAM} AND offset > ? ORDER BY offset LIMIT ?",
                        (job_id, attempt, stream, position, limit)).fetchall()


def lines_from(conn: sqlite3.Connection, job_id: str, attempt: int, stream: str, offset: int,
               limit: int) -> list[tuple[int, str]]:
    """Up to ``limit`` stored ``(offset, line)`` from ``offset`` on, in order."""
    return conn.execute(f"SELECT offset, line FROM job_logs WHERE {_STREAM} AND offset >= ? ORDER BY offset LIMIT ?",
                        (job_id, attempt, stream, offset, limit)).fetchall()


def last_lines(conn: sqlite3.Connection, job_id: str, attempt: int, stream: str,
               count: int) -> list[tuple[int, str]]:
    """The last ``count`` stored ``(offset, line)``, in order."""
    return conn.execute(f"SELECT offset, line FROM job_logs WHERE {_STREAM} ORDER BY offset DESC LIMIT ?",
                        (job_id, attempt, stream, count)).fetchall()[::-1]


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
