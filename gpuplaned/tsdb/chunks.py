"""Chunk rows of ``ts_chunks``: building them from columns, reading them back.

Raw chunks (res 0) hold points sorted by ts: ts, step (run series only) and value.
Rollup chunks (res = bucket width) hold one row per bucket: its start, count, NaN count,
min, max, sum, last and the ts of that last value. Packed raw chunks longer than one
block also carry block summaries, so long windows are downsampled from those.
"""

from __future__ import annotations

import sqlite3
from array import array
from bisect import bisect_left

import attrs

from gpuplaned.tsdb import codec
from gpuplaned.tsdb.stats import NAN, summarize

BLOCK = 64  # points per block summary: 1M points -> 15.6k blocks to scan for a chart

RAW_NODE: codec.Layout = (("q", True), ("d", False))
RAW_RUN: codec.Layout = (("q", True), ("q", True), ("d", False))
ROLLUP: codec.Layout = (("q", True), ("q", False), ("q", False), ("d", False), ("d", False),
                        ("d", False), ("d", False), ("q", False))
# ts_lo, ts_hi, step_lo, step_hi, count, nan, min, max, sum, last (last_ts is ts_hi: sorted)
BLOCKS: codec.Layout = (("q", True), ("q", True), ("q", False), ("q", False), ("q", False),
                        ("q", False), ("d", False), ("d", False), ("d", False), ("d", False))

_COLUMNS = ("id, start_ts, end_ts, step_min, step_max, last_step, n, count, nan, "
            "vmin, vmax, vsum, vlast, last_ts, packed")


@attrs.frozen
class Chunk:
    """A chunk's summary row; its blobs are read on demand."""

    id: int
    series_id: int
    res: int
    start_ts: int
    end_ts: int
    step_min: int | None
    step_max: int | None
    last_step: int | None
    n: int
    count: int
    nan: int
    vmin: float
    vmax: float
    vsum: float
    vlast: float
    last_ts: int
    packed: int

    def what(self) -> str:
        return f"time-series chunk {self.id} (series {self.series_id}, res {self.res})"


def _chunk(series_id: int, res: int, row: tuple) -> Chunk:
    # SQLite stores NaN as NULL: read it back as NaN.
    (cid, start, end, smin, smax, slast, n, count, nan, vmin, vmax, vsum, vlast, last_ts, packed) = row
    return Chunk(cid, series_id, res, start, end, smin, smax, slast, n, count, nan,
                 NAN if vmin is None else vmin, NAN if vmax is None else vmax,
                 NAN if vsum is None else vsum, NAN if vlast is None else vlast, last_ts, packed)


def select(conn: sqlite3.Connection, series_id: int, res: int, lo: int | None = None,
           hi: int | None = None) -> list[Chunk]:
    """Chunks whose ts range meets ``[lo, hi]`` (either bound may be open), by start_ts."""
    sql = f"SELECT {_COLUMNS} FROM ts_chunks WHERE series_id = ? AND res = ?"
    args: list = [series_id, res]
    if hi is not None:
        sql += " AND start_ts <= ?"
        args.append(hi)
    if lo is not None:
        sql += " AND end_ts >= ?"
        args.append(lo)
    rows = conn.execute(sql + " ORDER BY start_ts, id", args).fetchall()
    return [_chunk(series_id, res, r) for r in rows]


def data(conn: sqlite3.Connection, chunk: Chunk, has_steps: bool) -> list[array]:
    """Decoded columns: raw ``[ts, (step,) value]`` or the rollup layout."""
    blob = _blob(conn, chunk, "data")
    layout = ROLLUP if chunk.res else (RAW_RUN if has_steps else RAW_NODE)
    cols = codec.decode(blob, layout, chunk.what())
    if len(cols[0]) != chunk.n:
        raise codec.CorruptChunk(f"{chunk.what()}: {len(cols[0])} rows, row says {chunk.n}")
    return cols


def blocks(conn: sqlite3.Connection, chunk: Chunk) -> list[array] | None:
    blob = _blob(conn, chunk, "blocks")
    return None if blob is None else codec.decode(blob, BLOCKS, chunk.what() + " blocks")


def _blob(conn: sqlite3.Connection, chunk: Chunk, column: str) -> bytes | None:
    row = conn.execute(f"SELECT {column} FROM ts_chunks WHERE id = ?", (chunk.id,)).fetchone()
    if row is None:
        raise codec.CorruptChunk(f"{chunk.what()} vanished while being read")
    return row[0]


def delete(conn: sqlite3.Connection, ids: list[int]) -> None:
    conn.executemany("DELETE FROM ts_chunks WHERE id = ?", [(i,) for i in ids])


def insert_raw(conn: sqlite3.Connection, series_id: int, ts, steps, values, packed: bool) -> None:
    """Store points already sorted by ts (``steps`` None for node series)."""
    nan, vmin, vmax, vsum = summarize(values)
    cols = [ts, values] if steps is None else [ts, steps, values]
    blob = codec.encode(cols, RAW_NODE if steps is None else RAW_RUN, packed)
    block_blob = _block_summaries(ts, steps, values) if packed and len(ts) > BLOCK else None
    conn.execute(
        "INSERT INTO ts_chunks (series_id, res, packed, start_ts, end_ts, step_min, step_max,"
        " last_step, n, count, nan, vmin, vmax, vsum, vlast, last_ts, data, blocks)"
        " VALUES (?, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (series_id, int(packed), ts[0], ts[-1],
         None if steps is None else min(steps), None if steps is None else max(steps),
         None if steps is None else steps[-1], len(ts), len(ts), nan, vmin, vmax, vsum,
         values[-1], ts[-1], blob, block_blob),
    )


def insert_rollup(conn: sqlite3.Connection, series_id: int, res: int, cols: list, packed: bool) -> None:
    """Store rollup buckets ``[start, count, nan, min, max, sum, last, last_ts]`` sorted by start."""
    start, count, nan, mins, maxs, sums, lasts, last_tss = cols
    latest = max(range(len(start)), key=last_tss.__getitem__)
    vmin = min((m for m in mins if m == m), default=NAN)
    vmax = max((m for m in maxs if m == m), default=NAN)
    vsum = sum(s for s, c, k in zip(sums, count, nan) if c > k)
    conn.execute(
        "INSERT INTO ts_chunks (series_id, res, packed, start_ts, end_ts, n, count, nan, vmin,"
        " vmax, vsum, vlast, last_ts, data) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (series_id, res, int(packed), start[0], start[-1], len(start), sum(count), sum(nan),
         vmin, vmax, vsum, lasts[latest], last_tss[latest], codec.encode(cols, ROLLUP, packed)),
    )


def _block_summaries(ts, steps, values) -> bytes:
    cols: list[list] = [[] for _ in BLOCKS]
    for i in range(0, len(ts), BLOCK):
        j = min(i + BLOCK, len(ts))
        part = values[i:j]
        nan, lo, hi, total = summarize(part)
        if steps is None:
            s_lo = s_hi = 0
        else:
            s_lo, s_hi = min(steps[i:j]), max(steps[i:j])
        for col, v in zip(cols, (ts[i], ts[j - 1], s_lo, s_hi, j - i, nan, lo, hi, total, part[-1])):
            col.append(v)
    return codec.encode(cols, BLOCKS, packed=True, planes=False)


def cut(conn: sqlite3.Connection, chunk: Chunk, has_steps: bool, lo: int | None, hi: int | None,
        packed: bool) -> int:
    """Keep only the rows with ``lo <= ts < hi`` of ``chunk``; returns how many were removed."""
    cols = data(conn, chunk, has_steps)
    ts = cols[0]
    i = 0 if lo is None else bisect_left(ts, lo)
    j = len(ts) if hi is None else bisect_left(ts, hi)
    delete(conn, [chunk.id])
    if i < j:
        piece = [col[i:j] for col in cols]
        if chunk.res:
            insert_rollup(conn, chunk.series_id, chunk.res, piece, packed)
        else:
            insert_raw(conn, chunk.series_id, piece[0], piece[1] if has_steps else None,
                       piece[-1], packed)
    return len(ts) - (j - i) if i < j else len(ts)
