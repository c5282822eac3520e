"""Dropping old node data per resolution; run (training) series are kept forever.

A point (or a rollup bucket, by its start) older than ``now_ms - keep`` is deleted: whole
chunks by their summary row, and a chunk across the cutoff is rewritten without its old
part. Run ``rollup_pass`` first, so raw data is rolled up before it goes. The cutoff is
recorded as the source floor of the coarser resolution so a later rebuild there never
recomputes a bucket from partly deleted data.
"""

from __future__ import annotations

import sqlite3

from gpuplaned.tsdb import chunks
from gpuplaned.tsdb.series import M1, M5, RAW

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
_BUILT_FROM = {RAW: M1, M1: M5}


def retention_pass(
    conn: sqlite3.Connection,
    now_ms: int,
    *,
    raw_ms: int | None = DAY_MS,
    m1_ms: int | None = 7 * DAY_MS,
    m5_ms: int | None = 30 * DAY_MS,
    batches_ms: int | None = 7 * DAY_MS,
) -> dict[str, int]:
    """Write function; a ``*_ms`` of None keeps that data forever.

    Returns the points (raw) or buckets (1m, 5m) deleted and the dedupe records dropped
    (``batches``: after that long a resent batch is stored again).
    """
    for label, keep in (("raw_ms", raw_ms), ("m1_ms", m1_ms), ("m5_ms", m5_ms), ("batches_ms", batches_ms)):
        if keep is not None and (not isinstance(keep, int) or keep <= 0):
            raise ValueError(f"retention {label} must be a positive integer or None, got {keep!r}")
    counts = {"raw": 0, "1m": 0, "5m": 0, "batches": 0}
    for res, label, keep in ((RAW, "raw", raw_ms), (M1, "1m", m1_ms), (M5, "5m", m5_ms)):
        if keep is not None:
            counts[label] = _expire(conn, res, now_ms - keep)
    if batches_ms is not None:
        counts["batches"] = conn.execute(
            "DELETE FROM ts_batches WHERE received_ms < ?", (now_ms - batches_ms,)
        ).rowcount
    return counts


def _expire(conn: sqlite3.Connection, res: int, cutoff: int) -> int:
    node_series = "SELECT id FROM ts_series WHERE kind = 'node'"
    old = conn.execute(
        f"SELECT id, n FROM ts_chunks WHERE res = ? AND end_ts < ? AND series_id IN ({node_series})",
        (res, cutoff),
    ).fetchall()
    chunks.delete(conn, [cid for cid, _ in old])
    removed = sum(n for _, n in old)
    across = conn.execute(
        f"SELECT DISTINCT series_id FROM ts_chunks WHERE res = ? AND start_ts < ? AND end_ts >= ?"
        f" AND series_id IN ({node_series})",
        (res, cutoff, cutoff),
    ).fetchall()
    for (sid,) in across:
        for c in chunks.select(conn, sid, res, cutoff, cutoff - 1):
            removed += chunks.cut(conn, c, False, cutoff, None, packed=True)
    if res in _BUILT_FROM:
        conn.execute(
            "UPDATE ts_rollup_state SET source_floor = max(coalesce(source_floor, ?1), ?1)"
            f" WHERE res = ?2 AND series_id IN ({node_series})",
            (cutoff, _BUILT_FROM[res]),
        )
    return removed
