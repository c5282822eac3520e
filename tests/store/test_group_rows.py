"""group_rows and job_removal_rows on a real database: the scheduler's pass honours a group's
limit and pause and the queue's pause read from their rows, a lifted hold's reason is cleared,
and clean picks ended jobs by group and by when they ended, keeping what open jobs wait for."""

from __future__ import annotations

import itertools

import pytest

from gpuplaned.protocol.agent import GpuInfo, Hello, JobStatus
from gpuplaned.protocol.errors import ApiError
from gpuplaned.protocol.job_wire import JobSpec
from gpuplaned.service.passes.dispatch import schedule
from gpuplaned.store import dependency_rows, group_rows, job_removal_rows, job_rows
from gpuplaned.store.database import open_writer

NOW = 1_700_000_000_000
HOUR = 3_600_000
_TICK = itertools.count(1)  # each job submitted a ms after the last: the queue's order is theirs


@pytest.fixture
def db(tmp_path):
    conn = open_writer(tmp_path / "gpuplane.db")
    gpus = tuple(GpuInfo(i, "Fake", 1024) for i in range(4))
    node_id, _ = job_rows.register_node(conn, Hello("n1", "0", gpus), NOW)
    yield conn, node_id
    conn.close()


def _submit(conn, node_id, group=None):
    spec = JobSpec(name="j", command=("true",), cwd="/", env={}, gpu=1)
    job_id = job_rows.insert_job(conn, spec, NOW - HOUR // 2 + next(_TICK), job_rows.capacities(conn, {node_id}))
    if group is not None:
        group_rows.put_in_group(conn, job_id, group)
    return job_id


def _placed(conn, node_id):
    return [d.job.job_id for d in schedule(conn, NOW, {node_id})]


def _end(conn, node_id, job_id, at):
    attempt = job_rows.get_job(conn, job_id).attempt
    job_rows.apply_status(conn, node_id, JobStatus(job_id, attempt, "RUNNING"), at)
    job_rows.apply_status(conn, node_id, JobStatus(job_id, attempt, "SUCCEEDED", exit_code=0), at)


def test_the_pass_holds_a_group_at_its_limit_and_lets_the_next_go_when_one_ends(db):
    conn, node = db
    group_rows.set_parallel(conn, "g", 2)
    jobs = [_submit(conn, node, "g") for _ in range(3)]
    assert _placed(conn, node) == jobs[:2]
    assert job_rows.get_job(conn, jobs[2]).queue_reason == "group g: 2 of 2 running"
    assert [(c.group.name, c.queued, c.running) for c in group_rows.list_groups(conn)] == [("g", 1, 2)]
    _end(conn, node, jobs[0], NOW)
    assert _placed(conn, node) == [jobs[2]]


def test_resuming_clears_the_hold_reason_even_when_no_slot_is_left(db):
    conn, node = db
    blockers = [_submit(conn, node) for _ in range(4)]
    assert _placed(conn, node) == blockers  # every GPU taken
    group_rows.ensure_group(conn, "g")
    group_rows.set_group_paused(conn, "g", True)
    held = _submit(conn, node, "g")
    assert _placed(conn, node) == []
    assert job_rows.get_job(conn, held).queue_reason == "group g paused"
    group_rows.set_group_paused(conn, "g", False)
    assert job_rows.get_job(conn, held).queue_reason is None
    group_rows.set_queue_paused(conn, True)
    assert _placed(conn, node) == []
    assert job_rows.get_job(conn, held).queue_reason == "queue paused"
    group_rows.set_queue_paused(conn, False)
    assert job_rows.get_job(conn, held).queue_reason is None


def test_clean_picks_by_group_and_end_time_and_keeps_what_open_jobs_wait_for(db):
    conn, node = db
    old_a, new_a, old_b = _submit(conn, node, "a"), _submit(conn, node, "a"), _submit(conn, node, "b")
    group_rows.set_queue_paused(conn, True)
    waiter = _submit(conn, node)
    group_rows.set_queue_paused(conn, False)
    assert _placed(conn, node) == [old_a, new_a, old_b, waiter]
    _end(conn, node, old_a, NOW - 3 * HOUR)
    _end(conn, node, new_a, NOW)
    _end(conn, node, old_b, NOW - 3 * HOUR)
    held = _submit(conn, node)
    dependency_rows.attach(conn, held, [old_b, waiter], "ended", NOW)  # waits for the running `waiter` too
    kept_parent = _submit(conn, node)
    group_rows.set_queue_paused(conn, True)

    assert job_removal_rows.clean(conn, group="a", ended_before_ms=NOW - HOUR, now_ms=NOW).removed == [old_a]
    assert job_rows.get_job(conn, new_a) is not None and job_rows.get_job(conn, old_b) is not None
    cleaned = job_removal_rows.clean(conn, group=None, ended_before_ms=None, now_ms=NOW)
    assert (cleaned.removed, cleaned.kept) == ([new_a], [old_b])  # `held` waits for old_b's company
    with pytest.raises(ApiError, match=f"job {old_b} cannot be removed: {held} depend on it"):
        job_removal_rows.remove_job(conn, old_b, NOW)
    with pytest.raises(ApiError, match=f"job {waiter} is DISPATCHING: cancel it first"):
        job_removal_rows.remove_job(conn, waiter, NOW)
    job_removal_rows.remove_job(conn, kept_parent, NOW)  # queued: goes
    assert job_rows.get_job(conn, kept_parent) is None


def test_priority_changes_only_a_queued_job(db):
    conn, node = db
    group_rows.set_queue_paused(conn, True)
    first, second = _submit(conn, node), _submit(conn, node)
    group_rows.set_priority(conn, second, 3)
    assert [j.job_id for j in job_rows.queued_jobs(conn)] == [second, first]
    group_rows.set_queue_paused(conn, False)
    _placed(conn, node)
    with pytest.raises(ApiError, match=f"job {first} is DISPATCHING, not QUEUED"):
        group_rows.set_priority(conn, first, 1)
    with pytest.raises(ApiError, match="no job 'job_nope'"):
        group_rows.set_priority(conn, "job_nope", 1)


def test_what_holds_the_queue_is_read_counting_only_the_groups_there_are(db):
    """A pass reads the groups with their jobs on a node in one statement (it counted every
    group's jobs in a second one, groups or none); the counts are each group's own."""
    conn, node = db
    said = []
    conn.set_trace_callback(said.append)
    assert group_rows.holds(conn).groups == {}
    assert not any("FROM jobs" in s and "job_groups" not in s for s in said)
    group_rows.set_parallel(conn, "a", 1)
    group_rows.set_parallel(conn, "b", 3)
    [_submit(conn, node, group) for group in ("a", "b", "b", "c")]
    assert len(_placed(conn, node)) == 4  # four GPUs: a's one, b's two, c's (no limit) one
    said.clear()
    groups = group_rows.holds(conn).groups
    assert {name: (g.parallel, g.running) for name, g in groups.items()} == {"a": (1, 1), "b": (3, 2), "c": (None, 1)}
    assert sum("jobs" in s for s in said) == 1
