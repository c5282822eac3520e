"""RUN_STARTED and RUN_FINISHED from the runs table (``service.detector.lifecycle_pass``): once
per run across passes and a restarted detector, a run that ended while no detector ran is
still announced, history before the first detector raises nothing, imports never do."""

from __future__ import annotations

import pytest

from gpuplaned.service.passes.detector import lifecycle_pass
from gpuplaned.store.database import open_writer

T0 = 1_700_000_000_000


@pytest.fixture
def conn(tmp_path):
    db = open_writer(tmp_path / "gpuplane.db")
    yield db
    db.close()


def run(conn, run_id, started, finished=None, status="RUNNING", source="sdk"):
    conn.execute("INSERT INTO runs (id, name, source, status, created_at, started_at, finished_at) "
                 "VALUES (?, 'n', ?, ?, ?, ?, ?)", (run_id, source, status, started, started, finished))


def types(rows):
    return [(r.type, r.run_id, r.severity) for r in rows]


def test_once_per_run(conn):
    run(conn, "old", T0 - 10_000, T0 - 5000, "SUCCEEDED")  # before the first detector: history
    assert lifecycle_pass(conn, T0, floor_ms=T0) == []
    run(conn, "r1", T0 + 1000)
    assert types(lifecycle_pass(conn, T0 + 2000, T0)) == [("RUN_STARTED", "r1", "info")]
    assert lifecycle_pass(conn, T0 + 3000, T0) == []
    conn.execute("UPDATE runs SET status = 'FAILED', finished_at = ?, failure_reason = 'exit 1' WHERE id = 'r1'",
                 (T0 + 61_000,))
    (finished,) = lifecycle_pass(conn, T0 + 62_000, T0)
    assert (finished.type, finished.severity) == ("RUN_FINISHED", "info")  # the failure has its own event
    assert finished.context["status"] == "FAILED" and finished.context["duration_ms"] == 60_000
    assert lifecycle_pass(conn, T0 + 63_000, floor_ms=T0 + 63_000) == []  # a restarted detector


def test_a_run_that_ended_while_no_detector_ran(conn):
    run(conn, "r1", T0)
    lifecycle_pass(conn, T0 + 1000, T0)
    run(conn, "r2", T0 + 5000, T0 + 9000, "SUCCEEDED")  # the daemon was down meanwhile
    conn.execute("UPDATE runs SET status = 'SUCCEEDED', finished_at = ? WHERE id = 'r1'", (T0 + 8000,))
    found = types(lifecycle_pass(conn, T0 + 60_000, floor_ms=T0 + 60_000))
    assert found == [("RUN_STARTED", "r2", "info"), ("RUN_FINISHED", "r1", "info"), ("RUN_FINISHED", "r2", "info")]


def test_imported_runs_raise_nothing(conn):
    run(conn, "imp", T0 + 10, T0 + 20, "SUCCEEDED", source="import")
    assert lifecycle_pass(conn, T0 + 1000, T0) == []


def test_the_end_points_at_what_went_wrong(conn):
    run(conn, "r1", T0)
    conn.execute("INSERT INTO events (id, ts, type, severity, run_id) VALUES ('ev_1', ?, 'LOSS_NAN', 'critical', "
                 "'r1')", (T0 + 10,))
    conn.execute("UPDATE runs SET status = 'FAILED', finished_at = ? WHERE id = 'r1'", (T0 + 20,))
    rows = lifecycle_pass(conn, T0 + 1000, T0)
    assert types(rows) == [("RUN_STARTED", "r1", "info"), ("RUN_FINISHED", "r1", "info")]
    assert rows[-1].context["evidence"] == [{"kind": "event", "id": "ev_1"}]


def test_a_pass_over_many_announced_runs_looks_each_one_up_once(conn):
    """Each run is checked against its own events (``idx_events_run``), never against every event of
    the type: with the type's index the check visited every RUN_STARTED event for every run, so
    20,000 runs of the last hour made an empty pass take ~2 minutes, on the event loop."""
    count = 2000
    conn.executemany("INSERT INTO runs (id, name, source, status, created_at, started_at, finished_at) "
                     "VALUES (?, 'n', 'sdk', 'SUCCEEDED', ?, ?, ?)",
                     [(f"r{i}", T0 + i, T0 + i, T0 + i + 1) for i in range(count)])
    assert len(lifecycle_pass(conn, T0 + 10_000, T0)) == 2 * count
    thousands = []
    conn.set_progress_handler(lambda: thousands.append(1) and 0, 1000)  # each 1,000 SQLite VM steps
    try:
        assert lifecycle_pass(conn, T0 + 20_000, T0) == []
    finally:
        conn.set_progress_handler(None, 0)
    assert len(thousands) * 1000 < 200 * count  # ~60 steps a run; the type's index took ~12,000
