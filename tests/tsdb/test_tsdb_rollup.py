"""Rollups equal what they summarize, cover closed buckets only, and are built once."""

from __future__ import annotations

import math
import random

import pytest

from gpuplaned import tsdb
from gpuplaned.tsdb import chunks

MIN = 60_000
T0 = 1_700_000_040_000 // (5 * MIN) * (5 * MIN)  # a 5-minute boundary


def node_points(rnd, start, minutes, every_ms=2000):
    ts, values = [], []
    for i in range(minutes * MIN // every_ms):
        ts.append(start + i * every_ms + rnd.randint(0, 999))
        odd = rnd.random() < 0.01
        values.append(rnd.choice([math.nan, math.inf, -math.inf]) if odd else rnd.uniform(0, 100))
    return ts, values


def ingest(db, owner, name, ts, values, seq):
    db.write(lambda c: tsdb.ingest(c, "node", owner, {name: {"ts": ts, "value": values}},
                                   source=owner, seq=seq, now_ms=T0))


def rollups(conn, owner, name, res):
    """``{bucket_start: (count, nan, min, max, avg, last)}`` as stored."""
    sid = conn.execute("SELECT id FROM ts_series WHERE owner = ? AND name = ?", (owner, name)).fetchone()[0]
    out = {}
    for c in chunks.select(conn, sid, res):
        for start, count, nan, lo, hi, total, last, _ in zip(*chunks.data(conn, c, False)):
            assert start not in out
            avg = total / (count - nan) if count > nan else math.nan
            out[start] = (count, nan, lo, hi, avg, last)
    return out


def expected(ts, values, res, before):
    """The same summaries computed straight from the points (the later ts wins "last")."""
    groups = {}
    for t, v in sorted(zip(ts, values), key=lambda p: p[0]):
        if t // res * res < before:
            groups.setdefault(t // res * res, []).append(v)
    out = {}
    for start, vs in groups.items():
        real = [v for v in vs if not math.isnan(v)]
        total = math.fsum(real) if real and not (math.inf in real and -math.inf in real) else math.nan
        out[start] = (len(vs), len(vs) - len(real), min(real, default=math.nan), max(real, default=math.nan),
                      total / len(real) if real else math.nan, vs[-1])
    return out


def assert_same(got, want):
    assert got.keys() == want.keys()
    for k in want:
        for a, b in zip(got[k], want[k]):
            assert (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-12), (k, got[k], want[k])


def test_rollups_equal_the_raw_points_they_summarize_and_only_closed_buckets(db):
    rnd = random.Random(3)
    ts, values = node_points(rnd, T0, 33)
    ingest(db, "n1", "gpu0.utilization", ts, values, 1)
    now = T0 + 21 * MIN + 30_000  # minute 21 is still open; so is the 5m bucket from minute 20
    built = db.write(lambda c: tsdb.rollup_pass(c, now, lag_ms=0))
    assert built["1m"] == 21 and built["5m"] == 4
    assert_same(rollups(db.reader, "n1", "gpu0.utilization", MIN), expected(ts, values, MIN, T0 + 21 * MIN))
    assert_same(rollups(db.reader, "n1", "gpu0.utilization", 5 * MIN),
                expected(ts, values, 5 * MIN, T0 + 20 * MIN))


def test_lag_keeps_recent_buckets_open(db):
    ts, values = node_points(random.Random(4), T0, 10)
    ingest(db, "n1", "m", ts, values, 1)
    db.write(lambda c: tsdb.rollup_pass(c, T0 + 5 * MIN + 10_000, lag_ms=15_000))
    assert max(rollups(db.reader, "n1", "m", MIN)) == T0 + 3 * MIN


def test_a_repeated_pass_changes_nothing(db):
    ts, values = node_points(random.Random(5), T0, 30)
    ingest(db, "n1", "m", ts, values, 1)
    now = T0 + 31 * MIN
    db.write(lambda c: tsdb.rollup_pass(c, now, lag_ms=0))
    before = (rollups(db.reader, "n1", "m", MIN), rollups(db.reader, "n1", "m", 5 * MIN))
    again = db.write(lambda c: tsdb.rollup_pass(c, now, lag_ms=0))
    assert (again["1m"], again["5m"]) == (0, 0)
    assert_same(rollups(db.reader, "n1", "m", MIN), before[0])
    assert_same(rollups(db.reader, "n1", "m", 5 * MIN), before[1])


def test_an_interrupted_pass_leaves_nothing_and_the_next_one_is_right(db):
    ts, values = node_points(random.Random(6), T0, 12)
    ingest(db, "n1", "m", ts, values, 1)

    def crash(conn):
        tsdb.rollup_pass(conn, T0 + 11 * MIN, lag_ms=0)
        raise RuntimeError("killed mid-pass")

    with pytest.raises(RuntimeError):
        db.write(crash)
    assert db.reader.execute("SELECT count(*) FROM ts_rollup_state").fetchone()[0] == 0
    db.write(lambda c: tsdb.rollup_pass(c, T0 + 11 * MIN, lag_ms=0))
    assert_same(rollups(db.reader, "n1", "m", MIN), expected(ts, values, MIN, T0 + 11 * MIN))


def test_late_points_rebuild_their_buckets_at_both_resolutions(db):
    rnd = random.Random(7)
    ts, values = node_points(rnd, T0, 20)
    ingest(db, "n1", "m", ts, values, 1)
    db.write(lambda c: tsdb.rollup_pass(c, T0 + 20 * MIN, lag_ms=0))
    late_ts = [T0 + 3 * MIN + 500, T0 + 12 * MIN + 7]
    late_values = [1000.0, -1000.0]
    ingest(db, "n1", "m", late_ts, late_values, 2)
    db.write(lambda c: tsdb.rollup_pass(c, T0 + 20 * MIN, lag_ms=0))
    all_ts, all_values = ts + late_ts, values + late_values
    assert_same(rollups(db.reader, "n1", "m", MIN), expected(all_ts, all_values, MIN, T0 + 20 * MIN))
    assert_same(rollups(db.reader, "n1", "m", 5 * MIN), expected(all_ts, all_values, 5 * MIN, T0 + 20 * MIN))


def test_run_series_get_no_rollups_but_are_compacted(db):
    db.write(lambda c: tsdb.ingest(c, "run", "r", {"loss": {"ts": [T0], "step": [1], "value": [1.0]}},
                                   source="r", seq=1))
    built = db.write(lambda c: tsdb.rollup_pass(c, T0 + 60 * MIN))
    assert (built["1m"], built["5m"]) == (0, 0)
    assert db.reader.execute("SELECT res, packed FROM ts_chunks").fetchall() == [(0, 1)]
