"""Run series whose steps go back: dropping a series' points from a step on, and what is left.

A resumed training run logs again from its checkpoint's step, and TensorBoard's rule (see
``gpuplaned.tensorboard.rewind``) says the newer points replace the older ones from there:
``drop_from_step`` removes the stored points of one run series with ``step >= step``, inside
the caller's write transaction (like every write function here). Chunks wholly at or past
the step go by their summary row; a chunk across it is rewritten with the points before it
(still sorted by ts, packed as it was). ``remaining`` then says what a run summary keeps of
the series: how many points, the latest by (step, ts), and the last finite values (the
loss rules' window, remade without the dropped ones).
"""

from __future__ import annotations

import sqlite3
import math
from array import array

import attrs

from gpuplaned.tsdb import chunks, series
from gpuplaned.tsdb.series import RAW

__all__ = ["Remaining", "drop_from_step", "remaining"]


def drop_from_step(conn: sqlite3.Connection, owner: str, name: str, step: int) -> int:
    """Remove the points of run series ``name`` of ``owner`` with ``step >= step``; returns
    how many were removed (0 for a series that does not exist)."""
    owner = series.check_owner(owner)
    sid = series.lookup(conn, "run", owner, [series.check_name(name)]).get(name)
    if sid is None:
        return 0
    removed = 0
    for chunk in chunks.select(conn, sid, RAW):
        if chunk.step_max is None or chunk.step_max < step:
            continue
        if chunk.step_min is not None and chunk.step_min >= step:
            chunks.delete(conn, [chunk.id])
            removed += chunk.n
            continue
        ts, steps, values = chunks.data(conn, chunk, has_steps=True)
        keep = [i for i, s in enumerate(steps) if s < step]
        chunks.delete(conn, [chunk.id])
        removed += chunk.n - len(keep)
        if keep:
            chunks.insert_raw(conn, sid, array("q", (ts[i] for i in keep)), array("q", (steps[i] for i in keep)),
                              array("d", (values[i] for i in keep)), packed=bool(chunk.packed))
    return removed


@attrs.frozen
class Remaining:
    count: int
    latest: tuple[int, int, float] | None  # (step, ts, value) of the greatest (step, ts); None: no point left
    series_id: int | None
    last_finite: tuple[float, ...] = ()  # the last ``finite`` finite values by (step, ts), oldest first


def remaining(conn: sqlite3.Connection, owner: str, name: str, finite: int = 0) -> Remaining:
    """How many points run series ``name`` holds, its latest point by (step, ts), and its
    last ``finite`` finite values."""
    sid = series.lookup(conn, "run", series.check_owner(owner), [series.check_name(name)]).get(name)
    if sid is None:
        return Remaining(0, None, None)
    found = chunks.select(conn, sid, RAW)
    if not found:
        return Remaining(0, None, sid)
    top = max(c.step_max for c in found if c.step_max is not None)
    latest: tuple[int, int, float] | None = None
    for chunk in found:  # only the chunks that reach the top step are decoded
        if chunk.step_max != top:
            continue
        ts, steps, values = chunks.data(conn, chunk, has_steps=True)
        for i, s in enumerate(steps):
            if s == top and (latest is None or ts[i] > latest[1]):
                latest = (s, ts[i], values[i])
    return Remaining(sum(c.n for c in found), latest, sid, _last_finite(conn, found, finite))


def _last_finite(conn: sqlite3.Connection, found: list[chunks.Chunk], n: int) -> tuple[float, ...]:
    """The last ``n`` finite values by (step, ts): chunks are decoded from the highest step
    down, only until no chunk left can hold a later point than the ``n`` kept."""
    if n <= 0:
        return ()
    kept: list[tuple[int, int, float]] = []
    for chunk in sorted(found, key=lambda c: c.step_max if c.step_max is not None else -1, reverse=True):
        if len(kept) >= n and chunk.step_max is not None and chunk.step_max < kept[-n][0]:
            break
        ts, steps, values = chunks.data(conn, chunk, has_steps=True)
        kept += ((s, t, v) for s, t, v in zip(steps, ts, values) if math.isfinite(v))
        kept.sort()
    return tuple(v for _s, _t, v in kept[-n:])
