"""A list page reads its own rows, not the whole table (migration 0031): the runs list, newest
first, in the order of an index, so a page costs the same at 3,000 runs as at 30; a job's events
and the warnings, by their own indexes. Counted in SQLite VM steps (a progress handler), not timed."""

from __future__ import annotations

from gpuplaned.protocol.event_replies import EventRow
from gpuplaned.store import event_rows, run_rows
from gpuplaned.store.event_rows import EventFilter

T0 = 1_700_000_000_000


def add_runs(conn, count: int) -> None:
    # three runs a millisecond, as a sweep's trials start: the id orders those of one millisecond
    conn.executemany("INSERT INTO runs (id, name, source, status, created_at, started_at) "
                     "VALUES (?, 'n', 'sdk', 'RUNNING', ?, ?)",
                     [(f"run_{i:05d}", T0 + i // 3, T0 + i) for i in range(count)])


def steps_of(conn, read) -> tuple[object, int]:
    hundreds: list[int] = []
    conn.set_progress_handler(lambda: hundreds.append(1) and 0, 100)
    try:
        return read(), 100 * len(hundreds)
    finally:
        conn.set_progress_handler(None, 0)


def test_a_page_of_the_runs_list_costs_the_same_whatever_the_runs_behind_it(conn):
    add_runs(conn, 3000)
    page, steps = steps_of(conn, lambda: run_rows.list_runs(conn, limit=50))
    assert [r.id for r in page] == [f"run_{i:05d}" for i in range(2999, 2949, -1)]  # newest first, ties by id
    assert steps < 20_000  # ~3,300; without the index every run was read and sorted: ~214,000
    second, _ = steps_of(conn, lambda: run_rows.list_runs(
        conn, limit=50, before=(T0 + 2950 // 3, "run_02950")))
    assert [r.id for r in second] == [f"run_{i:05d}" for i in range(2949, 2899, -1)]  # the next page follows on


def test_the_runs_list_is_read_in_the_index_order(conn):
    plan = " ".join(row[3] for row in conn.execute(
        "EXPLAIN QUERY PLAN SELECT id FROM runs ORDER BY created_at DESC, id DESC LIMIT 50"))
    assert "idx_runs_created" in plan and "TEMP B-TREE" not in plan


def test_a_jobs_events_and_the_warnings_are_read_without_the_other_events(conn):
    events = [EventRow(f"ev_{i:05d}", T0 + i, "RUN_FINISHED", "info", "nd_1", f"job_{i // 2:05d}", f"run_{i:05d}",
                       None, "finished", {}) for i in range(4000)]
    events[10] = EventRow("ev_warn", T0 + 10, "LOSS_SPIKE", "warning", "nd_1", "job_00005", "run_00010", 7, "spike", {})
    event_rows.insert_events(conn, events)
    found, steps = steps_of(conn, lambda: event_rows.list_events(conn, EventFilter(job_id="job_00003"), 50))
    assert [e.id for _, e in found] == ["ev_00007", "ev_00006"]
    assert steps < 2_000  # ~300; every event was read before: ~52,000
    found, steps = steps_of(conn, lambda: event_rows.list_events(conn, EventFilter(severities=("warning", "error")), 50))
    assert [e.id for _, e in found] == ["ev_warn"]
    assert steps < 2_000
