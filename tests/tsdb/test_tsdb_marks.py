"""``time_marks``: when a series had points, from chunk and block summaries, so a gap in time
shows between two marks before and after compaction."""

from __future__ import annotations

from gpuplaned import tsdb
from gpuplaned.tsdb.marks import extent, time_marks


def _batch(db, seq, first_ts, n):
    points = {"loss": {"ts": [first_ts + 10 * k for k in range(n)], "value": [1.0] * n,
                       "step": [seq * 1000 + k for k in range(n)]}}
    db.write(lambda c: tsdb.ingest(c, "run", "run_A", points, source="s", seq=seq))


def _widest_gap(marks):
    return max((b - a, a, b) for a, b in zip(marks, marks[1:]))


def test_a_gap_between_batches_shows_plain_and_packed(db):
    _batch(db, 0, 0, 500)
    _batch(db, 1, 5_000, 500)
    _batch(db, 2, 600_000, 500)  # nothing from 9,990 to 600,000
    plain = time_marks(db.reader, "run", "run_A", "loss")
    assert plain == [0, 4_990, 5_000, 9_990, 600_000, 604_990]
    db.write(lambda c: tsdb.compact(c))
    packed = time_marks(db.reader, "run", "run_A", "loss")
    assert len(packed) == 2 * -(-1500 // 64) and packed == sorted(packed)
    # a block across the gap holds points on both sides: the gap is seen to within a block
    _, a, b = _widest_gap(packed)
    assert 9_990 - 640 <= a <= 9_990 and 600_000 <= b <= 600_000 + 640
    assert time_marks(db.reader, "run", "run_A", "nothing") == [] and extent(db.reader, "run", "run_A", "x") is None
    assert extent(db.reader, "run", "run_A", "loss") == {"first_ts": 0, "last_ts": 604_990, "first_step": 0,
                                                          "last_step": 2_499}
