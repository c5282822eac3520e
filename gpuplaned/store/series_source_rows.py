"""The ``run_series_sources`` table: which source feeds each series of a run, ``sdk`` or
``tensorboard`` (``gpuplaned.service.api.series_owner`` decides who wins a name)."""

from __future__ import annotations

import sqlite3
from collections.abc import Collection, Sequence


def sources(conn: sqlite3.Connection, run_id: str, names: Collection[str]) -> dict[str, str]:
    """The source of each of ``names`` that has one."""
    if not names:
        return {}
    return dict(conn.execute(f"SELECT name, source FROM run_series_sources WHERE run_id = ? AND name IN "
                             f"({','.join('?' * len(names))})", (run_id, *names)))


def claim_new(conn: sqlite3.Connection, run_id: str, names: Sequence[str], source: str) -> None:
    """``names`` are ``source``'s where no source has them yet."""
    conn.executemany("INSERT OR IGNORE INTO run_series_sources (run_id, name, source) VALUES (?, ?, ?)",
                     [(run_id, name, source) for name in names])


def claim(conn: sqlite3.Connection, run_id: str, names: Sequence[str], source: str) -> None:
    """``names`` are ``source``'s from now on, whoever had them."""
    conn.executemany("INSERT INTO run_series_sources (run_id, name, source) VALUES (?, ?, ?) "
                     "ON CONFLICT (run_id, name) DO UPDATE SET source = excluded.source",
                     [(run_id, name, source) for name in names])
