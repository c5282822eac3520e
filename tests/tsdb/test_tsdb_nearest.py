"""nearest_points: a run series' point nearest each step, from the chunks around it: across
chunk edges, with steps out of ts order (a resumed run logging again), ties to the one before,
and a series or steps with nothing near."""

from __future__ import annotations

from gpuplaned import tsdb
from gpuplaned.tsdb.nearest import nearest_points, points_at_or_before

T0 = 1_700_000_000_000


def put(db, steps, values, seq):
    cols = {"ts": [T0 + seq * 1000 + i for i in range(len(steps))], "step": list(steps), "value": list(values)}
    db.write(lambda c: tsdb.ingest(c, "run", "r1", {"loss": cols}, source="s", seq=seq, now_ms=T0))


def test_the_nearest_point_across_chunks(db):
    put(db, [0, 10, 20], [1.0, 2.0, 3.0], 1)
    put(db, [40, 50], [4.0, 5.0], 2)  # another chunk: 30 lies between the two
    got = nearest_points(db.reader, "r1", "loss", [0, 12, 30, 34, 36, 49, 99, 5])
    assert got == [(0, 1.0), (10, 2.0), (20, 3.0), (40, 4.0), (40, 4.0), (50, 5.0), (50, 5.0), (0, 1.0)]


def test_steps_out_of_order_and_a_step_logged_twice(db):
    put(db, [30, 10, 20], [3.0, 1.0, 2.0], 1)  # one chunk, by ts: steps go back
    put(db, [20], [2.5], 2)  # step 20 again, later: the last at a step is the one taken
    assert nearest_points(db.reader, "r1", "loss", [20, 11, 26]) == [(20, 2.5), (10, 1.0), (30, 3.0)]


def test_nothing_to_find(db):
    assert nearest_points(db.reader, "r1", "loss", [1, 2]) == [None, None]
    put(db, [5], [1.0], 1)
    assert nearest_points(db.reader, "r1", "loss", []) == []
    assert nearest_points(db.reader, "r1", "loss", [1_000_000]) == [(5, 1.0)]


def test_the_last_point_at_or_before_each_step(db):
    put(db, [0, 10, 20], [0.5, 1.0, 2.0], 1)
    put(db, [20, 30], [2.5, 3.0], 2)  # step 20 again, later, in another chunk: the later one counts
    got = points_at_or_before(db.reader, "r1", "loss", [0, 9, 10, 25, 99, -1])
    assert got == [(0, 0.5), (0, 0.5), (10, 1.0), (20, 2.5), (30, 3.0), None]
    assert points_at_or_before(db.reader, "r1", "nope", [5]) == [None]
