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
    assert db.write(tsdb.compact) == {"chunks_in": 0, "chunks_out": 0}


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
