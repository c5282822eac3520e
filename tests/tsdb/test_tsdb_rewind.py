"""drop_from_step: a run series' points from a step on go, in plain and packed chunks, and
``remaining`` tells what is left (count, latest by step, the last finite values)."""

from __future__ import annotations

from gpuplaned import tsdb

T0 = 1_700_000_000_000


def put(db, steps, seq, name="loss"):
    cols = {"ts": [T0 + s * 10 + seq for s in steps], "step": list(steps), "value": [float(s) for s in steps]}
    db.write(lambda c: tsdb.ingest(c, "run", "r1", {name: cols}, source="s", seq=seq, now_ms=T0))


def test_points_from_the_step_on_go_and_the_rest_stays(db):
    put(db, range(0, 50), 1)
    put(db, range(50, 100), 2)
    put(db, range(0, 100), 3, name="acc")  # another series is left alone
    assert db.write(lambda c: tsdb.drop_from_step(c, "r1", "loss", 30)) == 70
    got = tsdb.read_points(db.reader, "run", "r1", "loss", x="step")
    assert got["step"] == list(range(30))
    assert len(tsdb.read_points(db.reader, "run", "r1", "acc")["step"]) == 100
    left = tsdb.remaining(db.reader, "r1", "loss")
    assert (left.count, left.latest) == (30, (29, T0 + 291, 29.0))


def test_packed_chunks_are_cut_too_and_new_points_follow(db):
    put(db, range(0, 1000), 1)
    db.write(lambda c: tsdb.compact(c))
    assert db.write(lambda c: tsdb.drop_from_step(c, "r1", "loss", 900)) == 100
    put(db, range(900, 950), 2)
    got = tsdb.read_points(db.reader, "run", "r1", "loss", x="step")
    assert got["step"] == list(range(950))
    assert tsdb.remaining(db.reader, "r1", "loss").count == 950


def test_nothing_to_drop(db):
    assert db.write(lambda c: tsdb.drop_from_step(c, "r1", "nope", 0)) == 0
    put(db, range(10), 1)
    assert db.write(lambda c: tsdb.drop_from_step(c, "r1", "loss", 10)) == 0
    assert db.write(lambda c: tsdb.drop_from_step(c, "r1", "loss", 0)) == 10
    assert tsdb.remaining(db.reader, "r1", "loss").latest is None


def test_the_last_finite_values_by_step_across_chunks(db):
    put(db, range(50, 100), 1)  # an earlier batch holds the later steps
    put(db, range(0, 50), 2)
    nan = {"ts": [T0 + 5000], "step": [99], "value": [float("nan")]}
    db.write(lambda c: tsdb.ingest(c, "run", "r1", {"loss": nan}, source="s", seq=3, now_ms=T0))
    db.write(lambda c: tsdb.drop_from_step(c, "r1", "loss", 60))
    assert tsdb.remaining(db.reader, "r1", "loss", finite=15).last_finite == tuple(float(s) for s in range(45, 60))
    assert tsdb.remaining(db.reader, "r1", "loss").last_finite == ()
