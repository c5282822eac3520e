"""Chart queries: resolution by window, at most `points` aligned buckets, spikes kept."""

from __future__ import annotations

import math
import random

import pytest

from gpuplaned import tsdb
from gpuplaned.tsdb import query

MIN = 60_000
HOUR = 60 * MIN
DAY = 24 * HOUR
NOW = 1_700_000_100_000 // (5 * MIN) * (5 * MIN)


@pytest.fixture
def week(db):
    """Two GPU series at 10 s samples over 7 days, rolled up, plus 30 s not rolled up yet."""
    rnd = random.Random(2)
    ts = list(range(NOW - 7 * DAY, NOW + 30_000, 10_000))
    data = {f"gpu{i}.utilization": [rnd.uniform(0, 100) for _ in ts] for i in range(2)}
    data["gpu1.utilization"][len(ts) // 2] = 1e6  # one spike
    for seq, i in enumerate(range(0, len(ts), 5000)):
        batch = {name: {"ts": ts[i:i + 5000], "value": vs[i:i + 5000]} for name, vs in data.items()}
        db.write(lambda c: tsdb.ingest(c, "node", "n", batch, source="n", seq=seq))
    db.write(lambda c: tsdb.rollup_pass(c, NOW, lag_ms=0))
    return ts, data


def test_a_week_reads_5m_rollups_into_at_most_points_buckets(db, week):
    ts, data = week
    q = tsdb.query_series(db.reader, "node", "n", ["gpu0.utilization", "gpu1.utilization"],
                          NOW - 7 * DAY, NOW + 30_000, points=1000)
    assert q["resolution"] == "5m"
    assert q["width"] % (5 * MIN) == 0 and len(q["x"]) <= 1000
    assert q["x"] == sorted(q["x"]) and all(x % q["width"] == 0 for x in q["x"])
    w = q["width"]
    for name, values in data.items():
        col = q["series"][name]
        assert sum(col["count"]) == len(ts)  # the raw tail after the rollups is included
        want_max = {}
        for t, v in zip(ts, values):
            want_max[t // w * w] = max(v, want_max.get(t // w * w, -math.inf))
        assert dict(zip(q["x"], col["max"])) == want_max
    assert max(q["series"]["gpu1.utilization"]["max"]) == 1e6


def test_resolution_follows_the_window(db, week):
    names = ["gpu0.utilization"]
    assert tsdb.query_series(db.reader, "node", "n", names, NOW - 6 * HOUR, NOW, 2000)["resolution"] == "raw"
    day = tsdb.query_series(db.reader, "node", "n", names, NOW - DAY, NOW, 2000)
    assert day["resolution"] == "1m" and day["width"] == MIN and len(day["x"]) == 24 * 60 + 1
    assert tsdb.query_series(db.reader, "node", "n", names, NOW - 3 * DAY, NOW, 2000)["resolution"] == "5m"


def test_a_window_whose_points_fit_comes_back_point_by_point(db, week):
    ts, data = week
    q = tsdb.query_series(db.reader, "node", "n", ["gpu0.utilization"], NOW - 10 * MIN, NOW - 1, 100)
    assert q["width"] == 1
    assert q["x"] == [t for t in ts if NOW - 10 * MIN <= t < NOW]
    assert q["series"]["gpu0.utilization"]["last"] == data["gpu0.utilization"][ts.index(q["x"][0]):][:60]


def run_series(db, n, spike_at):
    rnd = random.Random(9)
    ts, t = [], 1_700_000_000_000
    for _ in range(n):
        t += rnd.randint(100, 300)
        ts.append(t)
    values = [2.0 * math.exp(-i / n) + rnd.gauss(0, 0.01) for i in range(n)]
    values[spike_at] = 50.0
    values[spike_at + 1000] = math.nan
    for seq, i in enumerate(range(0, n, 10_000)):
        batch = {"loss": {"ts": ts[i:i + 10_000], "step": range(i, min(i + 10_000, n)), "value": values[i:i + 10_000]}}
        db.write(lambda c: tsdb.ingest(c, "run", "r", batch, source="sdk", seq=seq))
    db.write(tsdb.compact)
    return ts, values


@pytest.mark.parametrize("points", [100, 500])  # 100: from block summaries; 500: from points
@pytest.mark.parametrize("x", ["step", "ts"])
def test_downsampling_a_long_series_keeps_a_single_spike(db, x, points):
    n = 100_000
    ts, values = run_series(db, n, spike_at=61_234)
    q = tsdb.query_series(db.reader, "run", "r", ["loss"], points=points, x=x)
    col = q["series"]["loss"]
    assert q["resolution"] == "raw" and len(q["x"]) <= points
    assert sum(col["count"]) == n and sum(col["nan"]) == 1
    assert max(col["max"]) == 50.0 and sorted(col["max"])[-2] < 3
    spike_x = 61_234 if x == "step" else ts[61_234]
    i = col["max"].index(50.0)
    assert q["x"][i] - q["width"] <= spike_x < q["x"][i] + 2 * q["width"]
    assert col["min"][-1] == pytest.approx(values[-1], abs=0.1) and col["last"][-1] == values[-1]


def test_step_window_of_a_run(db):
    run_series(db, 20_000, spike_at=5)
    q = tsdb.query_series(db.reader, "run", "r", ["loss", "acc"], 100, 199, points=1000, x="step")
    assert q["x"] == list(range(100, 200)) and q["width"] == 1
    assert q["series"]["acc"]["last"] == [None] * 100


def test_unknown_owner_gives_empty_columns(db):
    q = tsdb.query_series(db.reader, "run", "nobody", ["loss"], points=10)
    assert q["x"] == [] and q["series"] == {"loss": {k: [] for k in ("min", "max", "avg", "last", "count", "nan")}}


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        ({"kind": "gpu"}, "unknown series kind"),
        ({"points": 0}, "points must be an integer from 1 to"),
        ({"points": query.MAX_POINTS + 1}, "points must be an integer from 1 to"),
        ({"x": "step", "kind": "node"}, "x must be 'ts'"),
        ({"x": "epoch"}, "x must be 'ts'"),
        ({"start": 10, "end": 5}, "start 10 is after end 5"),
        ({"start": 1.5}, "start must be an integer"),
        ({"names": "loss"}, "names must be a list"),
    ],
)
def test_bad_queries_raise_value_error(db, kwargs, problem):
    args = {"kind": "run", "owner": "r", "names": ["loss"], "points": 100} | kwargs
    db.write(lambda c: tsdb.ingest(c, "run", "r", {"loss": {"ts": [1], "step": [1], "value": [1]}}, source="s", seq=1))
    with pytest.raises(ValueError, match=problem):
        tsdb.query_series(db.reader, **args)
