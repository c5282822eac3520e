"""The point of a run series nearest each of some steps (what a checkpoint listing shows beside
each checkpoint), read from the few chunks around each step rather than the whole series.

For a step, the point before is the last at or before it (by step, then ts: what
``query_series`` calls the last), the point after the first past it; the nearer wins, a tie
going to the one before. Only chunks that can hold either are decoded: those whose step range
spans the step, and the nearest wholly on each side. Read-only, like every read here.
"""

from __future__ import annotations

import sqlite3
from bisect import bisect_right
from collections.abc import Callable, Sequence

from gpuplaned.tsdb import chunks, series
from gpuplaned.tsdb.series import RAW

__all__ = ["nearest_points", "points_at_or_before"]

_Point = tuple[int, int, float]  # step, ts, value
_Columns = tuple[Sequence[int], Sequence[int], Sequence[float]]  # steps, ts, values, by (step, ts)


def nearest_points(conn: sqlite3.Connection, owner: str, name: str,
                   steps: Sequence[int]) -> list[tuple[int, float] | None]:
    """``(step, value)`` of run series ``name``'s point nearest each of ``steps``; None where the
    series has no point (or does not exist).

    Raises:
        ValueError: a bad owner or name.
    """
    def nearest(step: int, found: list[chunks.Chunk], points: _Decode) -> _Point | None:
        before = _before(step, [c for c in found if c.step_min <= step], points)
        after = _after(step, [c for c in found if c.step_max > step], points)
        if before is None or (after is not None and after[0] - step < step - before[0]):
            return after
        return before

    return _each_step(conn, owner, name, steps, nearest)


def points_at_or_before(conn: sqlite3.Connection, owner: str, name: str,
                        steps: Sequence[int]) -> list[tuple[int, float] | None]:
    """``(step, value)`` of run series ``name``'s last point at or before each of ``steps`` (by
    step, then ts): what a checkpoint is ranked by. None where there is none.

    Raises:
        ValueError: a bad owner or name.
    """
    return _each_step(conn, owner, name, steps,
                      lambda step, found, points: _before(step, [c for c in found if c.step_min <= step], points))


_Decode = Callable[[chunks.Chunk], _Columns]


def _each_step(conn: sqlite3.Connection, owner: str, name: str, steps: Sequence[int],
               pick: Callable[[int, list[chunks.Chunk], _Decode], _Point | None]) -> list[tuple[int, float] | None]:
    """``pick``'s point for each step, over the series' raw chunks, each decoded at most once."""
    sid = series.lookup(conn, "run", series.check_owner(owner), [series.check_name(name)]).get(name)
    if sid is None:
        return [None] * len(steps)
    found = [c for c in chunks.select(conn, sid, RAW) if c.n and c.step_min is not None and c.step_max is not None]
    decoded: dict[int, _Columns] = {}

    def points(chunk: chunks.Chunk) -> _Columns:
        """The chunk's steps, ts and values by (step, ts), decoded once."""
        if chunk.id not in decoded:
            ts, st, values = chunks.data(conn, chunk, True)
            listed = st.tolist()
            if sorted(listed) != listed:  # steps out of ts order (timsort checks sorted ones in one pass)
                order = sorted(range(len(st)), key=lambda i: (st[i], ts[i]))
                ts, st, values = ([col[i] for i in order] for col in (ts, st, values))
            decoded[chunk.id] = (st, ts, values)
        return decoded[chunk.id]

    out: list[tuple[int, float] | None] = []
    for step in steps:
        found_point = pick(step, found, points)
        out.append(None if found_point is None else (found_point[0], found_point[2]))
    return out


def _before(step: int, below: list[chunks.Chunk], points: _Decode) -> _Point | None:
    whole = max((c.step_max for c in below if c.step_max <= step), default=None)
    best: _Point | None = None
    for c in below:
        if c.step_max > step or c.step_max == whole:
            st, ts, values = points(c)
            at = bisect_right(st, step) - 1
            if at >= 0 and (best is None or (st[at], ts[at]) > best[:2]):
                best = (st[at], ts[at], values[at])
    return best


def _after(step: int, above: list[chunks.Chunk], points: _Decode) -> _Point | None:
    whole = min((c.step_min for c in above if c.step_min > step), default=None)
    best: _Point | None = None
    for c in above:
        if c.step_min <= step or c.step_min == whole:
            st, ts, values = points(c)
            at = bisect_right(st, step)
            if at < len(st) and (best is None or (st[at], ts[at]) < best[:2]):
                best = (st[at], ts[at], values[at])
    return best
