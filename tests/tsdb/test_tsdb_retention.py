"""Retention drops only old node data, per resolution, and never touches run series."""

from __future__ import annotations

from gpuplaned import tsdb
from gpuplaned.tsdb import chunks

MIN = 60_000
DAY = 24 * 60 * MIN
NOW = 1_700_000_100_000 // (5 * MIN) * (5 * MIN)


def stored(conn, owner, res):
    sid = conn.execute("SELECT id FROM ts_series WHERE owner = ?", (owner,)).fetchone()[0]
    return sorted(t for c in chunks.select(conn, sid, res) for t in chunks.data(conn, c, owner == "r")[0])


def test_retention_deletes_only_old_node_data_and_never_run_metrics(db):
    start = NOW - 40 * DAY
    ts = list(range(start, NOW, 30_000))  # 40 days at one point per 30 s
    db.write(lambda c: tsdb.ingest(c, "node", "n", {"m": {"ts": ts, "value": [float(i % 97) for i in range(len(ts))]}},
                                   source="n", seq=1, now_ms=start))
    db.write(lambda c: tsdb.ingest(c, "run", "r", {"loss": {"ts": ts, "step": range(len(ts)), "value": [1.0] * len(ts)}},
                                   source="r", seq=1, now_ms=NOW))
    db.write(lambda c: tsdb.rollup_pass(c, NOW, lag_ms=0))
    raw, m1, m5 = stored(db.reader, "n", 0), stored(db.reader, "n", MIN), stored(db.reader, "n", 5 * MIN)

    counts = db.write(lambda c: tsdb.retention_pass(c, NOW))

    keep = {0: NOW - DAY, MIN: NOW - 7 * DAY, 5 * MIN: NOW - 30 * DAY}
    for res, before, label in ((0, raw, "raw"), (MIN, m1, "1m"), (5 * MIN, m5, "5m")):
        after = stored(db.reader, "n", res)
        assert after == [t for t in before if t >= keep[res]]
        assert counts[label] == len(before) - len(after) > 0
    assert counts["batches"] == 1  # the node batch was received 40 days ago
    assert stored(db.reader, "r", 0) == ts
    again = db.write(lambda c: tsdb.retention_pass(c, NOW))
    assert again == {"raw": 0, "1m": 0, "5m": 0, "batches": 0}


def test_retention_is_configurable_and_none_keeps_forever(db):
    ts = list(range(NOW - 3 * DAY, NOW, 60_000))
    db.write(lambda c: tsdb.ingest(c, "node", "n", {"m": {"ts": ts, "value": [1.0] * len(ts)}}, source="n", seq=1))
    counts = db.write(lambda c: tsdb.retention_pass(c, NOW, raw_ms=None, batches_ms=None))
    assert counts["raw"] == 0 and stored(db.reader, "n", 0) == ts
    counts = db.write(lambda c: tsdb.retention_pass(c, NOW, raw_ms=DAY // 2))
    assert stored(db.reader, "n", 0) == [t for t in ts if t >= NOW - DAY // 2]


def test_a_rebuild_after_retention_leaves_cut_buckets_alone(db):
    ts = list(range(NOW - 2 * DAY, NOW, 10_000))
    db.write(lambda c: tsdb.ingest(c, "node", "n", {"m": {"ts": ts, "value": [2.0] * len(ts)}}, source="n", seq=1))
    db.write(lambda c: tsdb.rollup_pass(c, NOW, lag_ms=0))
    db.write(lambda c: tsdb.retention_pass(c, NOW))
    before = stored(db.reader, "n", MIN)
    # A very late point, older than the raw that retention kept, must not shrink old buckets.
    db.write(lambda c: tsdb.ingest(c, "node", "n", {"m": {"ts": [NOW - 2 * DAY + 5], "value": [9.0]}},
                                   source="n", seq=2))
    db.write(lambda c: tsdb.rollup_pass(c, NOW, lag_ms=0))
    assert stored(db.reader, "n", MIN) == before
    q = tsdb.query_series(db.reader, "node", "n", ["m"], NOW - 2 * DAY, NOW - DAY - MIN, points=5000)
    assert q["resolution"] == "1m" and set(q["series"]["m"]["count"]) == {6}
