"""A list page reads its own rows, not the whole table: the runs list, newest first, in the order
of an index (``idx_runs_created``, migration 0031), so a page costs the same at 3,000 runs as at
30. Counted in SQLite VM steps (a progress handler), not timed."""

from __future__ import annotations

import pytest

from gpuplaned.store import run_rows
from gpuplaned.store.database import open_writer

T0 = 1_700_000_000_000


@pytest.fixture
def conn(tmp_path):
    db = open_writer(tmp_path / "gpuplane.db")
    yield db
    db.close()


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
