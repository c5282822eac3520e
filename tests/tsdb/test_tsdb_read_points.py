"""read_points, the export read: every point in order, whatever the chunks look like.

It concatenates chunks that follow one another and sorts only when they overlap, and with a
limit it stops reading early; ``reference`` is the plain way (every chunk by ingest order,
a stable sort by ts, then the range, the step order and the limit). The two must agree on
series built of touching, overlapping, late and compacted chunks.
"""

from __future__ import annotations

import math
import random
from array import array

import pytest

from gpuplaned import tsdb
from gpuplaned.tsdb import chunks, codec, series
from gpuplaned.tsdb.series import RAW

T0 = 1_700_000_000_000


def reference(conn, kind, owner, name, start=None, end=None, x="ts", limit=None):
    has_steps = kind == "run"
    sid = series.lookup(conn, kind, owner, [name]).get(name)
    cols = [[], [], []] if has_steps else [[], []]
    for c in sorted(chunks.select(conn, sid, RAW) if sid else [], key=lambda c: c.id):
        for into, more in zip(cols, chunks.data(conn, c, has_steps)):
            into.extend(more)
    rows = sorted(zip(*cols), key=lambda r: r[0])  # stable: equal ts stay in ingest order
    axis = 0 if x == "ts" else 1
    rows = [r for r in rows if (start is None or r[axis] >= start) and (end is None or r[axis] <= end)]
    if x == "step":
        rows.sort(key=lambda r: r[1])  # stable: equal steps stay by ts
    rows = rows[:limit]
    out = [list(c) for c in zip(*rows)] if rows else [[] for _ in cols]
    return {"ts": out[0], "step": out[1] if has_steps else None, "value": out[-1]}


def same(got, want):
    return repr(got) == repr(want)  # NaN equals NaN in a repr


def fill(db, rng, kind="run"):
    """A series of several batches: in order, touching, overlapping, late, with equal ts and
    steps that go back (a resume); compacted now and then."""
    ts, step = T0, 0
    for seq in range(rng.randint(1, 12)):
        n = rng.choice([1, 2, 5, 40, 100, 300])
        shape = rng.choice(["next", "next", "touch", "overlap", "late", "same", "resume"])
        if shape == "touch":
            ts -= 10  # begins on the ts the last batch ended with
        elif shape == "overlap":
            ts -= 10 * rng.randint(2, 50)
        elif shape == "late":
            ts = T0 - 10 * rng.randint(1, 500)
        elif shape == "resume":
            step = max(0, step - rng.randint(1, 200))
        tss = [ts + 10 * i for i in range(n)] if shape != "same" else [ts] * n
        if rng.random() < 0.3:
            rng.shuffle(tss)  # ingest sorts a batch
        cols = {"ts": tss, "value": [rng.choice([rng.random(), math.nan, math.inf, 1.0]) for _ in range(n)]}
        if kind == "run":
            cols["step"] = [step + i // rng.choice([1, 1, 2]) for i in range(n)]
        db.write(lambda c, cols=cols, seq=seq: tsdb.ingest(c, kind, "o", {"m": cols}, source="s", seq=seq))
        ts = max(tss) + 10
        step = max(cols.get("step", [0])) + 1
        if rng.random() < 0.3:
            target = rng.choice([64, 128, 8192])
            db.write(lambda c, target=target: tsdb.compact(c, target_points=target))


@pytest.mark.parametrize("seed", range(40))
def test_read_points_matches_the_plain_way(db, seed):
    rng = random.Random(seed)
    kind = "run" if seed % 4 else "node"
    fill(db, rng, kind)
    all_ts = tsdb.read_points(db.reader, kind, "o", "m")["ts"]
    lo, hi = min(all_ts), max(all_ts)
    for _ in range(25):
        x = rng.choice(["ts", "step"]) if kind == "run" else "ts"
        if x == "ts":
            start = rng.choice([None, lo, rng.randint(lo - 50, hi + 50)])
            end = rng.choice([None, hi, rng.randint(lo - 50, hi + 50)])
        else:
            start = rng.choice([None, 0, rng.randint(0, 800)])
            end = rng.choice([None, rng.randint(0, 1000)])
        limit = rng.choice([None, None, 0, 1, 7, rng.randint(1, 500), 10**6])
        want = reference(db.reader, kind, "o", "m", start, end, x, limit)
        got = tsdb.read_points(db.reader, kind, "o", "m", start, end, x=x, limit=limit)
        assert same(got, want), (x, start, end, limit)
        arrays = tsdb.read_points(db.reader, kind, "o", "m", start, end, x=x, limit=limit, arrays=True)
        assert isinstance(arrays["value"], array) and same({k: v if v is None else v.tolist()
                                                            for k, v in arrays.items()}, want)


def test_in_order_chunks_are_read_without_a_sort_and_a_limit_stops_early(db, monkeypatch):
    for seq in range(10):
        steps = list(range(seq * 100, seq * 100 + 100))
        db.write(lambda c, seq=seq, steps=steps: tsdb.ingest(
            c, "run", "o", {"m": {"ts": [T0 + 10 * s for s in steps], "step": steps, "value": [float(s) for s in steps]}},
            source="s", seq=seq))
    decoded = []
    decode = codec.decode
    monkeypatch.setattr(codec, "decode", lambda blob, layout, what: decoded.append(what) or decode(blob, layout, what))
    got = tsdb.read_points(db.reader, "run", "o", "m", 250, None, x="step", limit=120)
    assert got["step"] == list(range(250, 370)) and len(decoded) == 2  # steps 200-299 and 300-399
    decoded.clear()
    got = tsdb.read_points(db.reader, "run", "o", "m", T0 + 10 * 250, None, limit=100)
    assert got["step"] == list(range(250, 350)) and len(decoded) == 2


def test_the_axis_and_the_limit_are_checked(db):
    with pytest.raises(ValueError, match="x must be"):
        tsdb.read_points(db.reader, "node", "o", "m", x="step")
    with pytest.raises(ValueError, match="x must be"):
        tsdb.read_points(db.reader, "run", "o", "m", x="wall")
    with pytest.raises(ValueError, match="limit"):
        tsdb.read_points(db.reader, "run", "o", "m", limit=-1)
    assert tsdb.read_points(db.reader, "run", "o", "nothing", limit=5) == {"ts": [], "step": [], "value": []}


def put(db, seq, ts, steps, values):
    db.write(lambda c: tsdb.ingest(c, "run", "o", {"m": {"ts": ts, "step": steps, "value": values}},
                                   source="s", seq=seq))


def test_a_late_chunk_ending_on_the_ts_an_earlier_one_begins_with_comes_after_it_there(db):
    put(db, 0, [T0 + 10, T0 + 20], [1, 2], [0.1, 0.2])
    put(db, 1, [T0 + 5, T0 + 10], [0, 1], [0.3, 0.4])  # later, ends on T0 + 10
    got = tsdb.read_points(db.reader, "run", "o", "m")
    assert got["value"] == [0.3, 0.1, 0.4, 0.2]  # of the two at T0 + 10, the one stored first
    assert same(got, reference(db.reader, "run", "o", "m"))


def test_a_limit_does_not_stop_before_an_equal_step_with_an_earlier_ts(db):
    put(db, 0, [T0 + 100, T0 + 200], [0, 6], [0.1, 0.2])
    put(db, 1, [T0 + 150], [6], [0.3])  # overlaps the first: read after it, yet first at step 6
    got = tsdb.read_points(db.reader, "run", "o", "m", x="step", limit=2)
    assert got["value"] == [0.1, 0.3]
    assert same(got, reference(db.reader, "run", "o", "m", x="step", limit=2))
