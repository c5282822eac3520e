"""What a job's change of state writes (migration 0032): every index a row is in costs a page of
the write-ahead log in each transaction that changes an indexed column. A job with no group, and a
run with no project or experiment (most of them), are in none of those three indexes, so their
changes write fewer pages; the lookups by a group, a project or an experiment still read those
indexes. Counted in the log's frames (``PRAGMA wal_checkpoint``) and in query plans, not timed."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from gpuplaned.protocol.agent import Hello, JobStatus
from gpuplaned.protocol.job_states import NodeReport
from gpuplaned.protocol.job_wire import JobSpec
from gpuplaned.service.passes.dispatch import schedule
from gpuplaned.store import group_rows, job_rows, project_rows

NOW = 1_700_000_000_000


def pages_of(conn: sqlite3.Connection, change: Callable[[], object]) -> int:
    """The pages one transaction of ``change`` writes to the log (emptied first)."""
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    conn.execute("BEGIN IMMEDIATE")
    change()
    conn.execute("COMMIT")
    _busy, frames, _done = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    return frames


def pages_of_a_job(conn: sqlite3.Connection, node: str, group: str | None = None) -> dict[str, int]:
    """A job's three changes of state as the daemon writes them: its dispatch (with its run), its
    start and its end, each in a transaction of its own."""
    spec = JobSpec(name="j", command=("true",), cwd="/", env={}, gpu=0)
    job_id = job_rows.insert_job(conn, spec, NOW, job_rows.capacities(conn, {node}))
    if group is not None:
        group_rows.put_in_group(conn, job_id, group)
    sent: list[job_rows.Dispatched] = []
    pages = {"dispatch": pages_of(conn, lambda: sent.extend(schedule(conn, NOW, {node})))}
    [item] = sent
    for name, report in (("running", NodeReport.RUNNING), ("end", NodeReport.SUCCEEDED)):
        status = JobStatus(job_id, item.job.attempt, report, exit_code=0 if report is NodeReport.SUCCEEDED else None)
        pages[name] = pages_of(conn, lambda s=status: job_rows.apply_status(conn, node, s, NOW + 1))
    assert job_rows.get_job(conn, job_id).status == "SUCCEEDED"
    return pages


def test_a_job_with_no_group_and_a_run_with_no_project_write_no_page_of_those_indexes(conn):
    node, _ = job_rows.register_node(conn, Hello("n1", "0", (), max_cpu_jobs=1), NOW)
    for warm in range(20):  # the tables past their first pages, as in any daemon that ran a while
        pages_of_a_job(conn, node, "warm" if warm % 2 else None)
    plain = pages_of_a_job(conn, node)
    grouped = pages_of_a_job(conn, node, "train")
    # A grouped job's every change moves its entry in the group index; a plain job has none there.
    assert {name: grouped[name] - plain[name] for name in plain} == {"dispatch": 1, "running": 1, "end": 1}
    # What is left of a plain job's: its row and its two indexes on its state (the queue's, its
    # node's) in each; its run's row in each, and at its dispatch the run's id, job and time
    # indexes. Its run's project and experiment indexes: none (10, 5, 5 before).
    assert plain == {"dispatch": 7, "running": 4, "end": 4}


def plan(conn: sqlite3.Connection, sql: str, *params: object) -> str:
    return " | ".join(row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params))


def test_lookups_by_group_project_and_experiment_still_read_their_indexes(conn):
    assert "idx_jobs_group" in plan(conn, "SELECT id FROM jobs WHERE group_name = ? AND status = ?", "g", "RUNNING")
    assert "idx_jobs_group" in plan(conn, "SELECT count(*) FROM jobs WHERE group_name IN (?, ?)", "a", "b")
    assert "idx_runs_exp" in plan(conn, "SELECT id FROM runs WHERE experiment_id = ? ORDER BY created_at", "e")
    assert "idx_runs_project" in plan(conn, "SELECT count(*) FROM runs WHERE project_id = ?", "p")


def test_a_projects_run_count_reads_its_experiments_runs_not_every_run_without_a_project(conn):
    # The count's second half (runs in the project's experiments, with no project of their own)
    # used to read every run with no project (all of a job queue's) and look up each one's experiment.
    found = plan(conn, f"{project_rows._PROJECT} WHERE p.id = ?", "p")
    assert "SEARCH r USING INDEX idx_runs_exp (experiment_id=?)" in found
    assert "idx_runs_project (project_id=?)" in found.split("CORRELATED SCALAR SUBQUERY 4")[0]  # its own runs
