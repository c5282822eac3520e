"""Rows behind the projects API on a real migrated database: a run series' best point read
chunk by chunk (loose and compacted), recomputed into run summaries when a direction changes."""

from __future__ import annotations

import json
import math

import pytest

from gpuplaned import tsdb
from gpuplaned.domain.run_summary import best_of
from gpuplaned.store import project_rows
from gpuplaned.store.database import open_writer


@pytest.fixture
def conn(tmp_path):
    c = open_writer(tmp_path / "g.db")
    yield c
    c.close()


def add_run(conn, run_id, batches, name="eval/score"):
    conn.execute("INSERT INTO runs (id, source, status, created_at) VALUES (?, 'sdk', 'RUNNING', 0)", (run_id,))
    for seq, (steps, values) in enumerate(batches):
        tsdb.ingest(conn, "run", run_id, {name: {"step": steps, "ts": [1000 + s for s in steps], "value": values}},
                    source=run_id, seq=seq)
    summary = {"metrics": {name: {"count": sum(len(v) for _, v in batches), "direction": None}}}
    conn.execute("UPDATE runs SET summary = ? WHERE id = ?", (json.dumps(summary), run_id))
    return conn.execute("SELECT id FROM ts_series WHERE owner = ? AND name = ?", (run_id, name)).fetchone()[0]


def wavy(n, offset=0):
    return list(range(offset, offset + n)), [math.sin(s / 7.0) * (1 + s % 13) for s in range(offset, offset + n)]


@pytest.mark.parametrize("compacted", [False, True])
def test_best_point_matches_a_full_scan(conn, compacted):
    batches = [wavy(500, 500 * i) for i in range(8)]
    batches.append(([4000, 4001, 4002], [math.nan, math.inf, -math.inf]))
    sid = add_run(conn, "run_a", batches)
    if compacted:
        tsdb.compact(conn)
    steps = [s for b in batches for s in b[0]]
    values = [v for b in batches for v in b[1]]
    for direction in ("minimize", "maximize"):
        assert project_rows.best_point(conn, sid, direction) == best_of(steps, values, direction)
    assert project_rows.best_point(conn, sid, None) is None


def test_a_tie_across_chunks_keeps_the_lowest_step(conn):
    sid = add_run(conn, "run_t", [([10, 11], [5.0, 1.0]), ([1, 2], [1.0, 3.0])])
    assert project_rows.best_point(conn, sid, "minimize") == (1.0, 1)


def test_recompute_best_rewrites_each_summary(conn):
    add_run(conn, "run_1", [([0, 1, 2], [3.0, 1.0, 2.0])])
    add_run(conn, "run_2", [([0], [math.nan])])
    add_run(conn, "run_3", [([0], [1.0])], name="other")
    assert project_rows.recompute_best(conn, "eval/score", "minimize") == 2

    def metric(run_id):
        return json.loads(conn.execute("SELECT summary FROM runs WHERE id = ?", (run_id,)).fetchone()[0])[
            "metrics"]["eval/score"]

    assert metric("run_1") == {"count": 3, "direction": "minimize", "best": {"step": 1, "value": 1.0}}
    assert metric("run_2") == {"count": 1, "direction": "minimize"}  # NaN is never a best
    project_rows.recompute_best(conn, "eval/score", "maximize")
    assert metric("run_1")["best"] == {"step": 0, "value": 3.0}
    project_rows.recompute_best(conn, "eval/score", None)
    assert "best" not in metric("run_1")
