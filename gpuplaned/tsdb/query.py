"""Reading series for charts and snapshots (read-only connections).

Resolution rule for node series (run series are always raw): a window up to 6 h reads
raw points, up to 2 days 1m buckets, beyond that 5m buckets; a resolution whose data
retention already cut inside the window gives way to the next coarser one. A rollup
query reads the finer data for the recent part its rollups do not cover yet.

Within a resolution, a window whose points fit in ``points`` comes back point by point
(width 1); otherwise each series is cut into the same aligned buckets, at most
``points`` of them, from whole-chunk, 64-point-block or rollup summaries where a bucket
covers those wholly, and from decoded points elsewhere.
"""

from __future__ import annotations

import sqlite3
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from itertools import accumulate
from operator import le
from typing import Any

from gpuplaned.tsdb import chunks, codec, series
from gpuplaned.tsdb.codec import CorruptChunk
from gpuplaned.tsdb.downsample import Buckets, columns, width_for
from gpuplaned.tsdb.series import M1, M5, RAW, RES_NAMES
from gpuplaned.tsdb.stats import NAN

MAX_POINTS = 10_000
RAW_WINDOW_MS = 6 * 3_600_000
M1_WINDOW_MS = 2 * 24 * 3_600_000
DECODE_LIMIT = 65_536  # raw points a query decodes outright before it turns to block summaries
_BLOCKS_PER_BUCKET = 4  # use block summaries once a bucket spans this many blocks
_BLOB_BATCH = 64  # chunk blobs fetched by one query in read_points


def list_names(conn: sqlite3.Connection, kind: str, owner: str) -> list[str]:
    return sorted(series.lookup(conn, series.check_kind(kind), series.check_owner(owner), None))


def latest(conn: sqlite3.Connection, kind: str, owner: str, names: list[str] | None = None) -> dict[str, dict]:
    """``{name: {"ts", "value", "step"}}``: each series' point with the greatest ts."""
    ids = series.lookup(conn, series.check_kind(kind), series.check_owner(owner), _names(names))
    out = {}
    for name, sid in ids.items():
        row = conn.execute(
            "SELECT last_ts, vlast, last_step FROM ts_chunks WHERE series_id = ?"
            " ORDER BY last_ts DESC, res, id DESC LIMIT 1", (sid,)
        ).fetchone()
        if row is not None:
            out[name] = {"ts": row[0], "value": NAN if row[1] is None else row[1], "step": row[2]}
    return out


def read_points(conn: sqlite3.Connection, kind: str, owner: str, name: str, start: int | None = None,
                end: int | None = None, *, x: str = "ts", limit: int | None = None,
                arrays: bool = False) -> dict[str, Any]:
    """Every raw point of one series with x in ``[start, end]``, by x (for export).

    ``x`` is the axis of ``start``/``end`` and of the order: ``"ts"`` (ms) or, for run
    series, ``"step"``. Points with equal ts keep the order they were ingested in; with
    ``x="step"`` points with equal steps come by ts. ``limit``: only the first that many.

    Returns ``{"ts": [...], "step": [...] or None, "value": [...]}``: lists, or with
    ``arrays`` ``array("q")``/``array("d")`` (cheaper to turn into bytes).

    Chunks whose ts ranges follow one another (the usual case: ingest writes ts-sorted
    chunks, compaction keeps them apart) are concatenated as they are; only overlapping
    chunks (late points, ranks logging one series) cost a sort. With ``limit``, reading
    stops at the first chunk that cannot hold a point before those already read.

    Raises:
        ValueError: bad kind, owner, name, axis or limit.
    """
    kind = series.check_kind(kind)
    has_steps = kind == "run"
    if x not in ("ts", "step") or (x == "step" and not has_steps):
        raise ValueError(f"x must be 'ts' (or 'step' for run series), got {x!r}")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 0):
        raise ValueError(f"limit must be a non-negative integer or None, got {limit!r}")
    sid = series.lookup(conn, kind, series.check_owner(owner), [series.check_name(name)]).get(name)
    cols = [array(code) for code, _delta in (chunks.RAW_RUN if has_steps else chunks.RAW_NODE)]
    found = [] if sid is None else chunks.select(conn, sid, RAW, *((start, end) if x == "ts" else ()))
    if x == "step":
        found = [c for c in found if (end is None or c.step_min <= end) and (start is None or c.step_max >= start)]
    # By start_ts (then id), the chunks are in ts order when each ends before the next
    # begins, or on the ts the next begins with and was ingested before it (equal ts keep
    # ingest order). Otherwise: by id, then a stable sort by ts, as compaction does.
    in_order = all(a.end_ts < b.start_ts or (a.end_ts == b.start_ts and a.id < b.id)
                   for a, b in zip(found, found[1:]))
    if not in_order:
        found.sort(key=lambda c: c.id)
    _read_chunks(conn, found, cols, has_steps, x, start, end, limit)
    out: list[Any] = cols if arrays else [col.tolist() for col in cols]
    ts = out[0] if isinstance(out[0], list) else None  # a list only when needed: tolist() is most of a check
    order = None
    if not in_order:
        ts = ts or cols[0].tolist()
        if not _ascending(ts):
            order = sorted(range(len(ts)), key=ts.__getitem__)
    if x == "step":
        steps = out[1] if isinstance(out[1], list) else cols[1].tolist()
        if not _ascending(steps if order is None else [steps[k] for k in order]):
            ts = ts or cols[0].tolist()
            order = sorted(range(len(ts)), key=lambda k: (steps[k], ts[k]))  # equal (step, ts): ingest order
    if order is not None:
        out = [array(col.typecode, map(col.__getitem__, order)) if arrays else list(map(col.__getitem__, order))
               for col in out]
    if limit is not None and len(out[0]) > limit:
        out = [col[:limit] for col in out]
    return {"ts": out[0], "step": out[1] if has_steps else None, "value": out[-1]}


def _read_chunks(conn: sqlite3.Connection, found: list[chunks.Chunk], cols: list[array], has_steps: bool, x: str,
                 start: int | None, end: int | None, limit: int | None) -> None:
    """Append the points of ``found`` with x in ``[start, end]`` to ``cols``, in that order."""
    if limit is not None:
        # Stop once no chunk left can hold an x below the highest read (strictly: an equal
        # x further on could belong before some of the points read).
        firsts = list(accumulate(reversed([c.start_ts if x == "ts" else c.step_min for c in found]), min))[::-1]
    read, top = 0, None
    decoded = _decoded(conn, found, has_steps)
    for k, c in enumerate(found):
        if limit is not None and read >= limit and top is not None and firsts[k] > top:
            break
        part = next(decoded)
        n = len(part[0])
        if x == "ts":
            i = 0 if start is None else bisect_left(part[0], start)
            j = n if end is None else bisect_right(part[0], end)
            if i > 0 or j < n:
                part = [col[i:j] for col in part]
        elif (start is not None and c.step_min < start) or (end is not None and c.step_max > end):
            keep = [i for i, s in enumerate(part[1]) if (start is None or s >= start) and (end is None or s <= end)]
            part = [array(col.typecode, map(col.__getitem__, keep)) for col in part]
        if not part[0]:
            continue
        for into, more in zip(cols, part):
            into.extend(more)
        if limit is not None:
            read += len(part[0])
            high = c.end_ts if x == "ts" else c.step_max  # the chunk's: at most reads a chunk more
            top = high if top is None else max(top, high)


def _decoded(conn: sqlite3.Connection, found: list[chunks.Chunk], has_steps: bool) -> Iterator[list[array]]:
    """The decoded columns of each chunk (as ``chunks.data``), decoded as they are asked
    for; the blobs are fetched ``_BLOB_BATCH`` at a time (a query per chunk cost more than
    decoding a small plain one)."""
    layout = chunks.RAW_RUN if has_steps else chunks.RAW_NODE
    for lo in range(0, len(found), _BLOB_BATCH):
        group = found[lo:lo + _BLOB_BATCH]
        blobs = dict(conn.execute(f"SELECT id, data FROM ts_chunks WHERE id IN ({','.join('?' * len(group))})",
                                  [c.id for c in group]))
        for c in group:
            if c.id not in blobs:
                raise CorruptChunk(f"{c.what()} vanished while being read")
            cols = codec.decode(blobs[c.id], layout, c.what())
            if len(cols[0]) != c.n:
                raise CorruptChunk(f"{c.what()}: {len(cols[0])} rows, row says {c.n}")
            yield cols


def _ascending(values: list) -> bool:
    return sorted(values) == values  # timsort sees a sorted list in one pass, comparing like types fast


def query_series(
    conn: sqlite3.Connection,
    kind: str,
    owner: str,
    names: list[str] | None,
    start: int | None = None,
    end: int | None = None,
    points: int = 1000,
    x: str = "ts",
) -> dict:
    """Chart columns for ``names`` (all of the owner's when None) over ``[start, end]``.

    ``start``/``end`` are in ``x`` units (ms for ``ts``, steps for ``step``; ``step`` is for
    run series only); None means the series' first or last point. Returns
    ``{"resolution": "raw"|"1m"|"5m", "width": w, "x": [...], "series": {name: {"min",
    "max", "avg", "last", "count", "nan"}}}``: ``x`` holds the start of each non-empty
    bucket (the point's own x when ``width`` is 1), the series columns line up with it and
    hold None where that series has no point.

    Raises:
        ValueError: bad kind, owner, names, axis, window or ``points``.
    """
    kind = series.check_kind(kind)
    owner = series.check_owner(owner)
    if x not in ("ts", "step") or (x == "step" and kind != "run"):
        raise ValueError(f"x must be 'ts' (or 'step' for run series), got {x!r}")
    if not isinstance(points, int) or isinstance(points, bool) or not 1 <= points <= MAX_POINTS:
        raise ValueError(f"points must be an integer from 1 to {MAX_POINTS}, got {points!r}")
    for label, bound in (("start", start), ("end", end)):
        if bound is not None and (not isinstance(bound, int) or isinstance(bound, bool)):
            raise ValueError(f"{label} must be an integer or None, got {bound!r}")
    ids = series.lookup(conn, kind, owner, _names(names))
    wanted = list(ids) if names is None else list(names)
    start, end = _extent(conn, list(ids.values()), x, start, end)
    if start is None or end is None or start > end:
        if start is not None and end is not None:
            raise ValueError(f"start {start} is after end {end}")
        return _result(RAW, 1, {}, wanted, [])
    res = RAW if kind == "run" else _resolution(conn, list(ids.values()), start, end)
    if res == RAW:
        width, per_series = _raw(conn, ids, x, kind == "run", start, end, points)
    else:
        width, per_series = _rollups(conn, ids, res, start, end, points)
    keys = sorted(set().union(*(b.acc for b in per_series.values())))
    return _result(res, width, per_series, wanted, keys)


def _names(names: list[str] | None) -> list[str] | None:
    if names is None:
        return None
    if isinstance(names, str) or not all(isinstance(n, str) for n in names):
        raise ValueError(f"names must be a list of series names, got {names!r}")
    return list(names)


def _result(res: int, width: int, per_series: dict[str, Buckets], wanted: list[str], keys: list[int]) -> dict:
    return {
        "resolution": RES_NAMES[res],
        "width": width,
        "x": [k * width for k in keys],
        "series": {n: columns(per_series.get(n) or Buckets(width), keys) for n in wanted},
    }


def _extent(conn, sids, x, start, end):
    if not sids or (start is not None and end is not None):
        return start, end
    marks = ",".join("?" * len(sids))
    if x == "ts":
        sql = f"SELECT min(start_ts), max(end_ts) FROM ts_chunks WHERE series_id IN ({marks})"
    else:
        sql = f"SELECT min(step_min), max(step_max) FROM ts_chunks WHERE res = 0 AND series_id IN ({marks})"
    lo, hi = conn.execute(sql, sids).fetchone()
    return (lo if start is None else start), (hi if end is None else end)


def _resolution(conn: sqlite3.Connection, sids: list[int], start: int, end: int) -> int:
    window = end - start
    res = RAW if window <= RAW_WINDOW_MS else M1 if window <= M1_WINDOW_MS else M5
    # Retention cut the finer data inside the window: read the coarser resolution.
    for finer, coarser in ((RAW, M1), (M1, M5)):
        if res == finer and any((_state(conn, sid, coarser)[1] or start) > start for sid in sids):
            res = coarser
    return res


def _state(conn: sqlite3.Connection, sid: int, res: int) -> tuple[int | None, int | None]:
    """``(done_until, source_floor)`` of a rollup resolution."""
    row = conn.execute(
        "SELECT done_until, source_floor FROM ts_rollup_state WHERE series_id = ? AND res = ?", (sid, res)
    ).fetchone()
    return (None, None) if row is None else row


def _raw(conn, ids, x, has_steps, start, end, points):
    found = {n: _raw_chunks(conn, sid, x, start, end) for n, sid in ids.items()}
    per_series = {}
    if sum(c.n for cs in found.values() for c in cs) <= DECODE_LIMIT:
        decoded = {n: [_chunk_points(conn, c, has_steps, x, start, end) for c in cs] for n, cs in found.items()}
        distinct: set[int] = set()
        for parts in decoded.values():
            for part in parts:
                distinct.update(part[0])
        width = 1 if len(distinct) <= points else width_for(start, end, points, 1)
        for n, parts in decoded.items():
            per_series[n] = b = Buckets(width)
            for part in parts:
                _add_points(b, part)
        return width, per_series
    width = width_for(start, end, points, 1)
    for n, cs in found.items():
        per_series[n] = b = Buckets(width)
        for c in cs:
            _add_chunk(conn, b, c, has_steps, x, start, end)
    return width, per_series


def _raw_chunks(conn, sid, x, start, end):
    if x == "ts":
        return chunks.select(conn, sid, RAW, start, end)
    return [c for c in chunks.select(conn, sid, RAW) if c.step_min <= end and c.step_max >= start]


def _chunk_points(conn, c, has_steps, x, start, end):
    """The chunk's points with x in ``[start, end]``: ``(xs, tss, values, sorted_by_x)``."""
    cols = chunks.data(conn, c, has_steps)
    ts, vs = cols[0], cols[-1]
    xs = ts if x == "ts" else cols[1]
    if xs is ts or all(map(le, xs[:-1], xs[1:])):
        i, j = bisect_left(xs, start), bisect_right(xs, end)
        return xs[i:j], ts[i:j], vs[i:j], True
    keep = [k for k, step in enumerate(xs) if start <= step <= end]
    return [xs[k] for k in keep], [ts[k] for k in keep], [vs[k] for k in keep], False


def _add_points(b: Buckets, part) -> None:
    xs, tss, values, in_order = part
    if in_order:
        b.add_sorted_points(xs, tss, values)
    else:
        b.add_points(xs, tss, values)


def _add_chunk(conn, b: Buckets, c: chunks.Chunk, has_steps: bool, x: str, start: int, end: int) -> None:
    lo, hi = (c.start_ts, c.end_ts) if x == "ts" else (c.step_min, c.step_max)
    inside = start <= lo and hi <= end
    if inside and lo // b.width == hi // b.width:
        b.add_summary(lo, hi, c.count, c.nan, c.vmin, c.vmax, c.vsum, c.vlast, c.last_ts)
        return
    block_span = (hi - lo) * chunks.BLOCK / c.n
    if inside and c.packed and c.n > chunks.BLOCK and b.width >= _BLOCKS_PER_BUCKET * block_span:
        cols = chunks.blocks(conn, c)
        if cols is not None:
            ts_lo, ts_hi, s_lo, s_hi, counts, nans, los, his, totals, lasts = cols
            x_lo, x_hi = (ts_lo, ts_hi) if x == "ts" else (s_lo, s_hi)
            mids = [(a + z) >> 1 for a, z in zip(x_lo, x_hi)]
            if all(map(le, mids[:-1], mids[1:])):
                b.add_sorted_summaries(mids, counts, nans, los, his, totals, lasts, ts_hi)
            else:
                for row in zip(x_lo, x_hi, counts, nans, los, his, totals, lasts, ts_hi):
                    b.add_summary(*row)
            return
    _add_points(b, _chunk_points(conn, c, has_steps, x, start, end))


def _rollups(conn, ids, res, start, end, points):
    span = end // res - start // res + 1
    width = res if span <= points else width_for(start, end, points, res)
    per_series = {}
    for n, sid in ids.items():
        per_series[n] = b = Buckets(width)
        lo = start
        # Coarse to fine: each layer starts where the coarser one's built buckets stop,
        # and raw points cover what no rollup covers yet.
        for layer in (M5, M1):
            done = _state(conn, sid, layer)[0] if layer <= res else None
            hi = end if done is None else min(end, done - 1)
            if done is None or lo > hi:
                continue
            for c in chunks.select(conn, sid, layer, lo, hi):
                b.add_rollup(*chunks.data(conn, c, False), lo, hi)
            lo = hi + 1
        if lo <= end:
            for c in chunks.select(conn, sid, RAW, lo, end):
                _add_points(b, _chunk_points(conn, c, False, "ts", lo, end))
    return width, per_series
