"""Compaction keeps every point; a damaged chunk is an error, never wrong numbers."""

from __future__ import annotations

import math
import random

import pytest

from gpuplaned import tsdb
from gpuplaned.tsdb import query

T0 = 1_700_000_000_000


def test_compaction_keeps_every_point_and_packs_chunks(db):
    rnd = random.Random(1)  # distinct ts: the order among equal ones is not promised
    pool = iter(rnd.sample(range(10_000_000), 60 * 400))
    for seq in range(60):
        ts = [T0 + next(pool) for _ in range(rnd.randint(1, 400))]
        values = [rnd.choice([rnd.gauss(0, 1), math.nan]) for _ in ts]
        db.write(lambda c: tsdb.ingest(c, "run", "r", {"loss": {"ts": ts, "step": [t - T0 for t in ts], "value": values}},
                                       source="sdk", seq=seq))
    before = tsdb.read_points(db.reader, "run", "r", "loss")
    result = db.write(lambda c: tsdb.compact(c, target_points=4096))
    assert result["chunks_in"] == 60 and result["chunks_out"] < 10
    after = tsdb.read_points(db.reader, "run", "r", "loss")
    assert after["ts"] == before["ts"] and after["step"] == before["step"]
    assert [str(v) for v in after["value"]] == [str(v) for v in before["value"]]
    assert db.reader.execute("SELECT count(*) FROM ts_chunks WHERE packed = 0").fetchone()[0] == 0
    assert db.write(tsdb.compact) == {"chunks_in": 0, "chunks_out": 0, "more": 0}


def test_a_compaction_backlog_is_worked_off_a_bounded_share_at_a_time(db):
    for seq in range(40):  # 40 loose chunks of 500 points, two series
        steps = list(range(seq * 500, seq * 500 + 500))
        db.write(lambda c, steps=steps, seq=seq: tsdb.ingest(c, "run", "r", {
            name: {"ts": [T0 + s for s in steps], "step": steps, "value": [float(s) for s in steps]} for name in ("a", "b")},
            source="sdk", seq=seq))
    before = {n: tsdb.read_points(db.reader, "run", "r", n) for n in ("a", "b")}
    calls = []
    while not calls or calls[-1]["more"]:
        calls.append(db.write(lambda c: tsdb.compact(c, target_points=4096, max_points=5_000)))
        assert len(calls) < 20
    # each call stops once it has rewritten 5,000 points (groups are up to 4,096: at most two a call)
    assert all(c["chunks_in"] <= 16 for c in calls) and len(calls) >= 5
    assert sum(c["chunks_in"] for c in calls) == 80
    assert {n: tsdb.read_points(db.reader, "run", "r", n) for n in ("a", "b")} == before
    assert db.reader.execute("SELECT count(*) FROM ts_chunks WHERE packed = 0").fetchone()[0] == 0


@pytest.mark.parametrize("column", ["data", "blocks"])
def test_a_damaged_chunk_raises_a_clear_error(db, column, monkeypatch):
    monkeypatch.setattr(query, "DECODE_LIMIT", 0)  # read block summaries, not points
    ts = list(range(T0, T0 + 1000 * 200, 200))
    db.write(lambda c: tsdb.ingest(c, "run", "r", {"loss": {"ts": ts, "step": range(1000), "value": [1.0] * 1000}},
                                   source="s", seq=1))
    db.write(tsdb.compact)
    blob = bytearray(db.writer.execute(f"SELECT {column} FROM ts_chunks").fetchone()[0])
    blob[len(blob) // 2] ^= 0xFF
    db.writer.execute(f"UPDATE ts_chunks SET {column} = ?", (bytes(blob),))
    with pytest.raises(tsdb.CorruptChunk, match=r"time-series chunk \d+ .*checksum"):
        if column == "data":
            tsdb.read_points(db.reader, "run", "r", "loss")
        else:
            tsdb.query_series(db.reader, "run", "r", ["loss"], points=2)


def test_a_truncated_plain_chunk_raises(db):
    db.write(lambda c: tsdb.ingest(c, "node", "n", {"m": {"ts": [T0, T0 + 1], "value": [1, 2]}}, source="s", seq=1))
    db.writer.execute("UPDATE ts_chunks SET data = substr(data, 1, 5)")
    with pytest.raises(tsdb.CorruptChunk, match="too short"):
        tsdb.read_points(db.reader, "node", "n", "m")


def test_the_rollup_actor_comes_back_soon_while_compaction_has_a_backlog():
    from gpuplaned.actors.rollup import BACKLOG_PAUSE_S, next_pause

    assert next_pause({"chunks_in": 40, "more": 1}, 60.0) == BACKLOG_PAUSE_S
    assert next_pause({"chunks_in": 40, "more": 0}, 60.0) == 60.0
    assert next_pause({"more": 1}, 0.1) == 0.1  # never slower than the configured period
