"""When a series had points, from summaries only: its extent, and marks for finding gaps in
time, without decoding a point (``gpuplaned.service.api.diagnosis``: a run's pace and stalls).

A packed chunk gives each of its 64-point blocks' first and last ts; a plain chunk (one
ingest batch, not compacted yet) its own first and last. A long stretch between two
consecutive marks holds no point but at most a block's on either side: a gap is seen to
within 64 points (a block across it spans it), one inside a plain chunk's span is seen as
that span (a batch that long is itself a stall of the sender).
"""

from __future__ import annotations

import sqlite3

from gpuplaned.tsdb import chunks, series
from gpuplaned.tsdb.series import RAW


def extent(conn: sqlite3.Connection, kind: str, owner: str, name: str) -> dict[str, int] | None:
    """``{"first_ts", "last_ts", "first_step", "last_step"}`` of the raw points (steps: the
    lowest and highest, None for node series); None when the series has none."""
    sid = series.lookup(conn, series.check_kind(kind), series.check_owner(owner), [series.check_name(name)]).get(name)
    if sid is None:
        return None
    row = conn.execute("SELECT min(start_ts), max(end_ts), min(step_min), max(step_max) FROM ts_chunks"
                       " WHERE series_id = ? AND res = ?", (sid, RAW)).fetchone()
    if row[0] is None:
        return None
    return {"first_ts": row[0], "last_ts": row[1], "first_step": row[2], "last_step": row[3]}


def time_marks(conn: sqlite3.Connection, kind: str, owner: str, name: str) -> list[int]:
    """Sorted ts (ms) at which the series' raw points begin and end, per block or plain chunk."""
    sid = series.lookup(conn, series.check_kind(kind), series.check_owner(owner), [series.check_name(name)]).get(name)
    if sid is None:
        return []
    marks: list[int] = []
    for c in chunks.select(conn, sid, RAW):
        cols = chunks.blocks(conn, c) if c.packed and c.n > chunks.BLOCK else None
        if cols is None:
            marks += (c.start_ts, c.end_ts)
        else:
            for lo, hi in zip(cols[0], cols[1]):
                marks += (lo, hi)
    marks.sort()
    return marks
