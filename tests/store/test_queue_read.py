"""The scheduler's read of the queue (``job_rows.queued_jobs``) on a real database: in the
queue's order, straight from the index, however many jobs share a submit time."""

from __future__ import annotations

import pytest

from gpuplaned.protocol.agent import GpuInfo, Hello
from gpuplaned.protocol.job_wire import JobSpec
from gpuplaned.store import job_rows
from gpuplaned.store.database import open_writer

NOW = 1_700_000_000_000


@pytest.fixture
def conn(tmp_path):
    conn = open_writer(tmp_path / "gpuplane.db")
    job_rows.register_node(conn, Hello("n1", "0", (), max_cpu_jobs=1), NOW)
    yield conn
    conn.close()


def _queue(conn, count, *, at=NOW, priority=0):
    nodes = job_rows.capacities(conn)
    spec = JobSpec(name="trial", command=("true",), cwd="/", env={}, gpu=0, priority=priority)
    return [job_rows.insert_job(conn, spec, at, nodes) for _ in range(count)]


def test_jobs_that_share_a_submit_time_are_read_by_priority_then_id(conn):
    later = _queue(conn, 3, at=NOW + 5)
    together = _queue(conn, 40)  # a sweep's trials: one transaction, one created_at
    urgent = _queue(conn, 2, at=NOW + 9, priority=5)
    read = [j.job_id for j in job_rows.queued_jobs(conn)]
    assert read == urgent + sorted(together) + later
    assert together == sorted(together)  # ids rise in the order they were made


def test_the_queue_is_read_from_its_index_without_sorting(conn):
    """A pass runs on every submit and every job end and stops at its first unplaceable job:
    a sort (SQLite's temp B-tree) would read every job sharing the first one's submit time
    first, a whole sweep's trials on every pass."""
    _queue(conn, 5)
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    queued = job_rows.queued_jobs(conn)
    next(queued)
    queued.close()
    conn.set_trace_callback(None)
    [read] = [s for s in statements if s.lstrip().upper().startswith("SELECT") and "FROM jobs" in s]
    plan = [row[-1] for row in conn.execute(f"EXPLAIN QUERY PLAN {read}")]
    assert any("idx_jobs_queue" in step for step in plan), plan
    assert not any("TEMP B-TREE" in step for step in plan), plan


def test_what_queued_jobs_ask_for_is_decoded_once_per_kind(conn):
    """A pass that reads on past its last slot (a held group or sweep) looks at every queued
    job, on every submit and every job end: alike jobs (a sweep's trials) are decoded once."""
    a100 = tuple(GpuInfo(i, "NVIDIA A100", 81_920) for i in range(2))
    job_rows.register_node(conn, Hello("n2", "0", a100, labels=("a100", "fast")), NOW)
    nodes = job_rows.capacities(conn)
    gpu = JobSpec(name="big", command=("true",), cwd="/", env={}, gpu=2, labels=("a100", "fast"), node="n2",
                  gpu_model="A100", min_gpu_memory_mb=40_000, placement="spread")
    big = job_rows.insert_job(conn, gpu, NOW, nodes)
    trials = _queue(conn, 30, at=NOW + 1)
    job_rows._asks.cache_clear()
    read = {j.job_id: j for j in job_rows.queued_jobs(conn)}
    assert job_rows._asks.cache_info().misses == 2  # one kind of trial, one big job
    b = read[big]
    assert (b.gpu, b.labels, b.node, b.gpu_model, b.min_gpu_memory_mb, b.placement) == (
        2, ("a100", "fast"), "n2", "A100", 40_000, "spread")
    t = read[trials[-1]]
    assert (t.gpu, t.labels, t.node, t.gpu_model, t.min_gpu_memory_mb, t.placement) == (0, (), None, None, None, None)
