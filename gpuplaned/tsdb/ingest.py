"""Storing a batch of points: validated whole, stored once per (source, seq).

Runs inside the caller's open write transaction (the store actor's SAVEPOINT) and never
begins or commits one itself. Points are columnar per series, so the hot path handles
arrays, not per-point objects: each series becomes one plain chunk, which ``compact``
later merges and compresses.
"""

from __future__ import annotations

import math
import sqlite3
import time
from array import array
from collections.abc import Mapping, Sequence
from operator import le

import attrs

from gpuplaned.tsdb import chunks, series
from gpuplaned.tsdb.series import M1

MAX_BATCH_POINTS = 1_000_000


@attrs.frozen
class IngestResult:
    duplicate: bool  # this (source, seq) was stored before; nothing was written
    points: int
    series: int


@attrs.frozen
class _Columns:
    name: str
    ts: array
    steps: array | None
    values: array


def ingest(
    conn: sqlite3.Connection,
    kind: str,
    owner: str,
    points: Mapping[str, Mapping[str, Sequence]],
    *,
    source: str,
    seq: int,
    now_ms: int | None = None,
) -> IngestResult:
    """Store ``points`` = ``{name: {"ts": [...], "value": [...], "step": [...]}}``.

    ``step`` is required for run series and refused for node series. Within a batch and
    across batches, points may come in any ts order.

    Raises:
        ValueError: bad kind, owner, name, column or batch; nothing is written.
    """
    kind = series.check_kind(kind)
    owner = series.check_owner(owner)
    if not isinstance(source, str) or not source:
        raise ValueError(f"ingest source must be a non-empty string, got {source!r}")
    if not isinstance(seq, int) or isinstance(seq, bool):
        raise ValueError(f"ingest seq must be an integer, got {seq!r}")
    if not isinstance(points, Mapping):
        raise ValueError("ingest points must be a mapping of series name to columns")
    batch = [_columns(kind, name, cols) for name, cols in points.items()]
    total = sum(len(c.ts) for c in batch)
    if total > MAX_BATCH_POINTS:
        raise ValueError(f"ingest batch has {total} points, more than {MAX_BATCH_POINTS}")
    received = int(time.time() * 1000) if now_ms is None else now_ms
    stored = conn.execute(
        "INSERT OR IGNORE INTO ts_batches (source, seq, received_ms) VALUES (?, ?, ?)",
        (source, seq, received),
    ).rowcount
    if not stored:
        return IngestResult(duplicate=True, points=0, series=0)
    written = 0
    for cols in batch:
        if not cols.ts:
            continue
        sid = series.ensure(conn, kind, owner, cols.name)
        chunks.insert_raw(conn, sid, cols.ts, cols.steps, cols.values, packed=False)
        written += 1
        if kind == "node":
            _mark_late(conn, sid, cols.ts[0])
    return IngestResult(duplicate=False, points=total, series=written)


def _mark_late(conn: sqlite3.Connection, sid: int, first_ts: int) -> None:
    # A point older than what the 1m rollup already covers gets its buckets rebuilt.
    conn.execute(
        "UPDATE ts_rollup_state SET dirty_from = min(coalesce(dirty_from, ?1), ?1)"
        " WHERE series_id = ?2 AND res = ?3 AND done_until > ?1",
        (first_ts, sid, M1),
    )


def _columns(kind: str, name: object, cols: object) -> _Columns:
    name = series.check_name(name)
    if not isinstance(cols, Mapping):
        raise ValueError(f"series {name!r}: columns must be a mapping with 'ts' and 'value'")
    extra = set(cols) - {"ts", "value", "step"}
    if extra:
        raise ValueError(f"series {name!r}: unknown columns {sorted(extra)}")
    for key in ("ts", "value") + (("step",) if kind == "run" else ()):
        if key not in cols:
            raise ValueError(f"series {name!r}: missing column {key!r}")
    if kind == "node" and "step" in cols:
        raise ValueError(f"series {name!r}: node series have no 'step' column")
    ts = _ints(name, "ts", cols["ts"])
    steps = _ints(name, "step", cols["step"]) if kind == "run" else None
    values = _floats(name, cols["value"])
    for key, col in (("value", values), ("step", steps)):
        if col is not None and len(col) != len(ts):
            raise ValueError(f"series {name!r}: ts has {len(ts)} points but {key} has {len(col)}")
    if not all(map(le, ts[:-1], ts[1:])):
        ts, steps, values = _sorted(ts, steps, values)
    return _Columns(name, ts, steps, values)


def _ints(name: str, key: str, col: object) -> array:
    try:
        return array("q", col)  # type: ignore[arg-type]
    except OverflowError:
        raise ValueError(f"series {name!r}: {key} out of the 64-bit range") from None
    except TypeError:
        for v in col if isinstance(col, Sequence) else ():
            if isinstance(v, float) and not math.isfinite(v):
                raise ValueError(f"series {name!r}: {key} must be finite, got {v}") from None
        raise ValueError(f"series {name!r}: {key} must be a sequence of integers") from None


def _floats(name: str, col: object) -> array:
    if isinstance(col, (str, bytes)):
        raise ValueError(f"series {name!r}: value must be a sequence of numbers")
    try:
        return array("d", col)  # type: ignore[arg-type]
    except (TypeError, OverflowError):
        raise ValueError(f"series {name!r}: value must be a sequence of numbers") from None


def _sorted(ts: array, steps: array | None, values: array) -> tuple[array, array | None, array]:
    # Stable: points with the same ts keep their order, so the later one stays "last".
    order = sorted(range(len(ts)), key=ts.__getitem__)
    return (
        array("q", map(ts.__getitem__, order)),
        None if steps is None else array("q", map(steps.__getitem__, order)),
        array("d", map(values.__getitem__, order)),
    )
