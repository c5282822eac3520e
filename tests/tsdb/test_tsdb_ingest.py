"""Ingest: points round-trip exactly, batches are stored once, bad input is refused whole."""

from __future__ import annotations

import math
import re

import pytest

from gpuplaned import tsdb

T0 = 1_700_000_000_000


def put(db, kind, owner, points, seq=1, source="s"):
    return db.write(lambda c: tsdb.ingest(c, kind, owner, points, source=source, seq=seq, now_ms=T0))


def same_floats(a, b):
    return len(a) == len(b) and all((x != x and y != y) or x == y for x, y in zip(a, b))


def test_points_round_trip_with_nan_inf_negative_and_any_order(db):
    ts = [T0 + 300, T0 + 100, T0 + 200, T0 + 50]
    values = [math.nan, -2.5, math.inf, -math.inf]
    result = put(db, "run", "r1", {"loss": {"ts": ts, "step": [3, 1, 2, 0], "value": values}})
    assert result == tsdb.IngestResult(duplicate=False, points=4, series=1)
    got = tsdb.read_points(db.reader, "run", "r1", "loss")
    assert got["ts"] == sorted(ts)
    assert got["step"] == [0, 1, 2, 3]
    assert same_floats(got["value"], [-math.inf, -2.5, math.inf, math.nan])


def test_batches_out_of_order_across_calls_come_back_sorted(db):
    put(db, "node", "n1", {"gpu0.utilization": {"ts": [T0 + 2000, T0 + 4000], "value": [2, 4]}}, seq=1)
    put(db, "node", "n1", {"gpu0.utilization": {"ts": [T0, T0 + 3000], "value": [0, 3]}}, seq=2)
    got = tsdb.read_points(db.reader, "node", "n1", "gpu0.utilization")
    assert got == {"ts": [T0, T0 + 2000, T0 + 3000, T0 + 4000], "step": None, "value": [0.0, 2.0, 3.0, 4.0]}


def test_exact_duplicate_timestamps_are_both_kept_in_ingest_order(db):
    put(db, "node", "n1", {"m": {"ts": [T0, T0], "value": [1, 2]}}, seq=1)
    put(db, "node", "n1", {"m": {"ts": [T0], "value": [3]}}, seq=2)
    assert tsdb.read_points(db.reader, "node", "n1", "m")["value"] == [1.0, 2.0, 3.0]
    db.write(tsdb.compact)
    assert tsdb.read_points(db.reader, "node", "n1", "m")["value"] == [1.0, 2.0, 3.0]
    q = tsdb.query_series(db.reader, "node", "n1", ["m"], points=10)
    assert q["x"] == [T0]
    assert q["series"]["m"]["count"] == [3] and q["series"]["m"]["last"] == [3.0]
    assert (q["series"]["m"]["min"], q["series"]["m"]["max"]) == ([1.0], [3.0])


def test_a_resent_source_seq_is_stored_once(db):
    batch = {"loss": {"ts": [T0], "step": [1], "value": [0.5]}}
    assert not put(db, "run", "r1", batch, seq=7).duplicate
    again = put(db, "run", "r1", batch, seq=7)
    assert again == tsdb.IngestResult(duplicate=True, points=0, series=0)
    assert not put(db, "run", "r1", batch, seq=7, source="other").duplicate
    assert tsdb.read_points(db.reader, "run", "r1", "loss")["value"] == [0.5, 0.5]


@pytest.mark.parametrize(
    ("kind", "cols", "problem"),
    [
        ("gpu", {"ts": [T0], "value": [1]}, "unknown series kind 'gpu'"),
        ("node", {"ts": [T0, T0 + 1], "value": [1]}, "ts has 2 points but value has 1"),
        ("run", {"ts": [T0], "step": [1, 2], "value": [1]}, "ts has 1 points but step has 2"),
        ("node", {"ts": [float("nan")], "value": [1]}, "ts must be finite"),
        ("node", {"ts": [float("inf")], "value": [1]}, "ts must be finite"),
        ("node", {"ts": [1.5], "value": [1]}, "ts must be a sequence of integers"),
        ("node", {"ts": [T0], "value": ["x"]}, "value must be a sequence of numbers"),
        ("node", {"ts": [T0], "value": [None]}, "value must be a sequence of numbers"),
        ("run", {"ts": [T0], "value": [1]}, "missing column 'step'"),
        ("node", {"ts": [T0], "step": [1], "value": [1]}, "node series have no 'step' column"),
        ("node", {"ts": [2**63], "value": [1]}, "ts out of the 64-bit range"),
        ("node", {"ts": [T0], "value": [1], "unit": ["%"]}, "unknown columns ['unit']"),
    ],
)
def test_bad_input_raises_value_error_naming_the_problem_and_writes_nothing(db, kind, cols, problem):
    good = {"ts": [T0], "value": [1]} | ({"step": [1]} if kind == "run" else {})
    with pytest.raises(ValueError, match=re.escape(problem)):
        put(db, kind, "o", {"good": good, "bad": cols})
    assert db.reader.execute("SELECT count(*) FROM ts_chunks").fetchone()[0] == 0
    assert db.reader.execute("SELECT count(*) FROM ts_batches").fetchone()[0] == 0


def test_bad_batch_identity_is_refused(db):
    with pytest.raises(ValueError, match="source"):
        db.write(lambda c: tsdb.ingest(c, "node", "n", {}, source="", seq=1))
    with pytest.raises(ValueError, match="seq"):
        db.write(lambda c: tsdb.ingest(c, "node", "n", {}, source="a", seq="1"))
    with pytest.raises(ValueError, match="owner"):
        db.write(lambda c: tsdb.ingest(c, "node", "", {}, source="a", seq=1))
    with pytest.raises(ValueError, match="series name"):
        db.write(lambda c: tsdb.ingest(c, "node", "n", {"": {"ts": [], "value": []}}, source="a", seq=1))


def test_list_names_and_latest(db):
    put(db, "node", "n1", {"gpu0.utilization": {"ts": [T0, T0 + 2000], "value": [10, math.nan]},
                           "host.cpu_percent": {"ts": [T0 + 1000], "value": [5]}})
    put(db, "run", "r1", {"loss": {"ts": [T0, T0 + 5], "step": [1, 2], "value": [2.0, 1.5]}}, seq=2)
    assert tsdb.list_names(db.reader, "node", "n1") == ["gpu0.utilization", "host.cpu_percent"]
    assert tsdb.list_names(db.reader, "node", "nope") == []
    snap = tsdb.latest(db.reader, "node", "n1")
    assert snap["host.cpu_percent"] == {"ts": T0 + 1000, "value": 5.0, "step": None}
    assert snap["gpu0.utilization"]["ts"] == T0 + 2000 and math.isnan(snap["gpu0.utilization"]["value"])
    assert tsdb.latest(db.reader, "run", "r1", ["loss", "missing"]) == {"loss": {"ts": T0 + 5, "value": 1.5, "step": 2}}
