"""Merging a series' small chunks into big packed ones.

Ingest and rollup write one small plain chunk per call; left alone, a node series would
hold a row per few points. ``compact`` finds series with plain chunks (a partial index
keeps that cheap), merges runs of adjacent small chunks up to ``target_points`` and
stores them packed, with block summaries. Every point survives: the merged columns are
the concatenation of the old ones, sorted by ts.
"""

from __future__ import annotations

import sqlite3
from array import array
from operator import le

from gpuplaned.tsdb import chunks

TARGET_POINTS = 8192
# Points rewritten in one call at most (about 0.2 s on this 2-CPU machine): the call runs in the
# store's write transaction, which holds every other write back (SDK batches, job states)
# until it commits. A backlog (a run of millions of points just logged) is worked off over
# several calls; ``compact`` says whether some is left.
MAX_POINTS_PER_CALL = 200_000


def compact(conn: sqlite3.Connection, *, target_points: int = TARGET_POINTS,
            max_points: int = MAX_POINTS_PER_CALL) -> dict[str, int]:
    """Write function; returns ``{"chunks_in": merged away, "chunks_out": written, "more":
    1 if loose chunks are left for another call else 0}``."""
    if target_points < chunks.BLOCK:
        raise ValueError(f"target_points must be at least {chunks.BLOCK}, got {target_points}")
    loose = conn.execute(
        "SELECT DISTINCT c.series_id, c.res, s.kind FROM ts_chunks c"
        " JOIN ts_series s ON s.id = c.series_id WHERE c.packed = 0"
    ).fetchall()
    totals = {"chunks_in": 0, "chunks_out": 0, "more": 0}
    done = 0
    for sid, res, kind in loose:
        has_steps = kind == "run" and res == 0
        for group in _groups(chunks.select(conn, sid, res), target_points):
            if done >= max_points:
                totals["more"] = 1
                return totals
            totals["chunks_in"] += len(group)
            totals["chunks_out"] += _rewrite(conn, sid, res, has_steps, group, target_points)
            done += sum(c.n for c in group)
    return totals


def _groups(found: list[chunks.Chunk], target: int) -> list[list[chunks.Chunk]]:
    """Runs of adjacent small chunks worth rewriting (two or more, or any plain one)."""
    groups: list[list[chunks.Chunk]] = []
    run: list[chunks.Chunk] = []
    size = 0

    def close() -> None:
        if len(run) > 1 or (run and not run[0].packed):
            groups.append(list(run))
        run.clear()

    for c in found:
        small = not c.packed or c.n < target // 2
        if not small or size + c.n > target:
            close()
            size = 0
        if small:
            run.append(c)
            size += c.n
    close()
    return groups


def _rewrite(conn: sqlite3.Connection, sid: int, res: int, has_steps: bool,
             group: list[chunks.Chunk], target: int) -> int:
    # Concatenate in insertion (id) order, then a stable sort by ts: of equal timestamps
    # the later-ingested point stays last.
    cols = None
    for c in sorted(group, key=lambda c: c.id):
        part = chunks.data(conn, c, has_steps)
        if cols is None:
            cols = part
        else:
            for into, more in zip(cols, part):
                into.extend(more)
    assert cols is not None
    ts = cols[0]
    if not all(map(le, ts[:-1], ts[1:])):
        order = sorted(range(len(ts)), key=ts.__getitem__)
        cols = [array(col.typecode, map(col.__getitem__, order)) for col in cols]
    chunks.delete(conn, [c.id for c in group])
    written = 0
    for i in range(0, len(cols[0]), target):
        piece = [col[i:i + target] for col in cols]
        if res:
            chunks.insert_rollup(conn, sid, res, piece, packed=True)
        elif has_steps:
            chunks.insert_raw(conn, sid, piece[0], piece[1], piece[2], packed=True)
        else:
            chunks.insert_raw(conn, sid, piece[0], None, piece[1], packed=True)
        written += 1
    return written
