"""Rolling node series up into 1-minute buckets (from raw) and 5-minute ones (from 1m).

A bucket is built once it is closed: it ended at least ``lag_ms`` before ``now_ms`` (the
lag lets a node's last few seconds arrive first) and, for 5m, its 1m buckets are built.
``ts_rollup_state.done_until`` records how far each series and resolution got, so a
repeated pass adds nothing and a pass cut short by a crash is rolled back whole with its
transaction. A raw point older than ``done_until`` (a node flushing its spool) sets
``dirty_from``; the next pass rebuilds from that bucket on, and the rebuild marks the 5m
resolution the same way. Buckets whose source retention already cut are left as they are.
"""

from __future__ import annotations

import sqlite3
from bisect import bisect_left
from operator import le

from gpuplaned.tsdb import chunks, stats
from gpuplaned.tsdb.compact import compact
from gpuplaned.tsdb.series import M1, M5, RAW

LAG_MS = 15_000
CHAIN = ((M1, RAW), (M5, M1))  # (resolution, built from)


def rollup_pass(conn: sqlite3.Connection, now_ms: int, *, lag_ms: int = LAG_MS,
                compact_after: bool = True) -> dict[str, int]:
    """Write function; returns buckets built per resolution and the compaction counts."""
    built = {"1m": 0, "5m": 0}
    horizon = now_ms - lag_ms
    for (sid,) in conn.execute("SELECT id FROM ts_series WHERE kind = 'node' ORDER BY id").fetchall():
        built["1m"] += _roll(conn, sid, M1, RAW, horizon)
        built["5m"] += _roll(conn, sid, M5, M1, horizon)
    if compact_after:
        built.update(compact(conn))
    return built


def _roll(conn: sqlite3.Connection, sid: int, res: int, src: int, horizon: int) -> int:
    limit = horizon
    if src != RAW:
        row = _state(conn, sid, src)
        if row is None:
            return 0
        limit = min(limit, row[0])
    to = limit // res * res
    state = _state(conn, sid, res)
    if state is None:
        first = conn.execute(
            "SELECT min(start_ts) FROM ts_chunks WHERE series_id = ? AND res = ?", (sid, src)
        ).fetchone()[0]
        if first is None:
            return 0
        done, frm = None, first // res * res
    else:
        done, dirty, floor = state
        frm = done if dirty is None else min(done, dirty // res * res)
        if floor is not None:
            frm = max(frm, -(-floor // res) * res)  # a partly deleted bucket stays as it was
    if frm >= to:
        if state is not None and state[1] is not None:
            conn.execute("UPDATE ts_rollup_state SET dirty_from = NULL WHERE series_id = ? AND res = ?",
                         (sid, res))
        return 0
    if done is not None and frm < done:
        for c in chunks.select(conn, sid, res, frm, None):
            chunks.cut(conn, c, False, None, frm, packed=False)
        if res == M1:
            conn.execute(
                "UPDATE ts_rollup_state SET dirty_from = min(coalesce(dirty_from, ?1), ?1)"
                " WHERE series_id = ?2 AND res = ?3 AND done_until > ?1", (frm, sid, M5))
    cols = _from_raw(conn, sid, res, frm, to) if src == RAW else _from_rollup(conn, sid, res, src, frm, to)
    if cols[0]:
        chunks.insert_rollup(conn, sid, res, cols, packed=False)
    conn.execute(
        "INSERT INTO ts_rollup_state (series_id, res, done_until) VALUES (?, ?, ?)"
        " ON CONFLICT (series_id, res) DO UPDATE SET done_until = excluded.done_until, dirty_from = NULL",
        (sid, res, to),
    )
    return len(cols[0])


def _state(conn: sqlite3.Connection, sid: int, res: int) -> tuple | None:
    return conn.execute(
        "SELECT done_until, dirty_from, source_floor FROM ts_rollup_state WHERE series_id = ? AND res = ?",
        (sid, res),
    ).fetchone()


def _from_raw(conn: sqlite3.Connection, sid: int, res: int, frm: int, to: int) -> list[list]:
    ts: list[int] = []
    values: list[float] = []
    for c in sorted(chunks.select(conn, sid, RAW, frm, to - 1), key=lambda c: c.id):
        part_ts, part_values = chunks.data(conn, c, False)
        i, j = bisect_left(part_ts, frm), bisect_left(part_ts, to)
        ts.extend(part_ts[i:j])
        values.extend(part_values[i:j])
    if not all(map(le, ts[:-1], ts[1:])):
        order = sorted(range(len(ts)), key=ts.__getitem__)  # stable: later ingest stays last
        ts = [ts[k] for k in order]
        values = [values[k] for k in order]
    cols: list[list] = [[] for _ in chunks.ROLLUP]
    i = 0
    while i < len(ts):
        start = ts[i] // res * res
        j = bisect_left(ts, start + res, i)
        part = values[i:j]
        nan, lo, hi, total = stats.summarize(part)
        for col, v in zip(cols, (start, j - i, nan, lo, hi, total, part[-1], ts[j - 1])):
            col.append(v)
        i = j
    return cols


def _from_rollup(conn: sqlite3.Connection, sid: int, res: int, src: int, frm: int, to: int) -> list[list]:
    buckets: dict[int, list] = {}
    for c in chunks.select(conn, sid, src, frm, to - 1):
        for start, count, nan, lo, hi, total, last, last_ts in zip(*chunks.data(conn, c, False)):
            if frm <= start < to:
                acc = buckets.get(start // res * res)
                if acc is None:
                    acc = buckets[start // res * res] = stats.empty()
                stats.merge_into(acc, count, nan, lo, hi, total, last, last_ts)
    cols: list[list] = [[] for _ in chunks.ROLLUP]
    for start in sorted(buckets):
        count, nan, lo, hi, total, last, last_ts = buckets[start]
        if count == nan:
            lo = hi = total = stats.NAN
        for col, v in zip(cols, (start, count, nan, lo, hi, total, last, last_ts)):
            col.append(v)
    return cols
