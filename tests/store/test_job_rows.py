"""job_rows on a real database: the state each write sets is the state table's."""

from __future__ import annotations

import pytest

from gpuplaned.domain import queue
from gpuplaned.protocol.agent import GpuInfo, Hello, JobStatus
from gpuplaned.protocol.job_wire import JobSpec
from gpuplaned.service.passes.dispatch import schedule
from gpuplaned.store import job_rows
from gpuplaned.store.database import open_writer

NOW = 1_700_000_000_000


def _submit(conn, node_id, *, max_attempts=1, name="j", at=NOW):
    spec = JobSpec(name=name, command=("true",), cwd="/", env={}, gpu=1, max_attempts=max_attempts)
    return job_rows.insert_job(conn, spec, at, job_rows.capacities(conn, {node_id}))


def _schedule(conn, node_id):
    return [d.job.job_id for d in schedule(conn, NOW, {node_id})]


def _report(conn, node_id, job_id, status, **fields):
    attempt = job_rows.get_job(conn, job_id).attempt
    return job_rows.apply_status(conn, node_id, JobStatus(job_id, attempt, status, **fields), NOW)


def _run_status(conn, job_id, attempt):
    return conn.execute("SELECT status, failure_reason FROM runs WHERE job_id = ? AND attempt = ?",
                        (job_id, attempt)).fetchone()


def test_a_job_queued_behind_another_takes_the_slot_when_it_ends(db):
    conn, node = db
    first, second = _submit(conn, node, name="a"), _submit(conn, node, name="b", at=NOW + 1)
    assert _schedule(conn, node) == [first]  # one GPU
    assert job_rows.get_job(conn, second).status == "QUEUED"
    assert _report(conn, node, first, "RUNNING").status == "RUNNING"
    assert _schedule(conn, node) == []
    outcome = _report(conn, node, first, "SUCCEEDED", exit_code=0)
    assert (outcome.applied, outcome.status, outcome.run_status) == (True, "SUCCEEDED", "SUCCEEDED")
    assert _schedule(conn, node) == [second]


def test_a_failed_attempt_with_attempts_left_is_queued_again_as_a_new_attempt(db):
    conn, node = db
    job_id = _submit(conn, node, max_attempts=2)
    _schedule(conn, node)
    _report(conn, node, job_id, "RUNNING")
    outcome = _report(conn, node, job_id, "FAILED", exit_code=1, failure_reason="EXIT_CODE", message="exit code 1")
    assert (outcome.status, outcome.run_status) == ("QUEUED", "FAILED")
    job = job_rows.get_job(conn, job_id)
    assert (job.status, job.attempt, job.run_id, job.failure_reason) == ("QUEUED", 1, None, None)
    assert _run_status(conn, job_id, 1) == ("FAILED", "EXIT_CODE")
    assert _schedule(conn, node) == [job_id]
    _report(conn, node, job_id, "RUNNING")
    assert _report(conn, node, job_id, "FAILED", exit_code=1, failure_reason="EXIT_CODE").status == "FAILED"
    job = job_rows.get_job(conn, job_id)
    assert (job.status, job.attempt, job.failure_reason) == ("FAILED", 2, "EXIT_CODE")


def test_an_attempt_that_dies_of_a_cancel_is_cancelled_without_a_retry(db):
    conn, node = db
    job_id = _submit(conn, node, max_attempts=3)
    _schedule(conn, node)
    _report(conn, node, job_id, "RUNNING")
    assert job_rows.cancel_job(conn, job_id, NOW).node_id == node  # the runner must stop it
    outcome = _report(conn, node, job_id, "FAILED", failure_reason="SIGNAL(SIGKILL)")
    assert (outcome.status, outcome.run_status) == ("CANCELLED", "CANCELLED")


def test_a_dispatch_that_never_started_goes_back_to_the_queue(db):
    conn, node = db
    job_id = _submit(conn, node)
    _schedule(conn, node)
    outcome = _report(conn, node, job_id, "REQUEUE", message="never started")
    assert (outcome.status, outcome.run_status) == ("QUEUED", "FAILED")
    assert _run_status(conn, job_id, 1) == ("FAILED", "REQUEUED")


def test_a_lost_job_is_lost_until_it_is_found(db):
    conn, node = db
    job_id = _submit(conn, node)
    _schedule(conn, node)
    _report(conn, node, job_id, "RUNNING")
    assert _report(conn, node, job_id, "LOST").status == "LOST"
    assert job_rows.get_job(conn, job_id).failure_reason == "LOST"
    assert _report(conn, node, job_id, "RUNNING").status == "RUNNING"  # re-adopted


def test_impossible_reports_change_nothing(db):
    conn, node = db
    job_id = _submit(conn, node)
    _schedule(conn, node)
    _report(conn, node, job_id, "RUNNING")
    outcome = _report(conn, node, job_id, "REQUEUE")  # a started attempt is not handed back
    assert (outcome.applied, outcome.reason) == (False, "a RUNNING job cannot requeue")
    assert job_rows.get_job(conn, job_id).status == "RUNNING"
    with pytest.raises(ValueError, match="'BOGUS' is not a valid NodeReport"):  # no such report can be made
        _report(conn, node, job_id, "BOGUS")


def test_an_end_reported_twice_is_ignored_the_second_time(db):
    conn, node = db
    job_id = _submit(conn, node)
    _schedule(conn, node)
    assert _report(conn, node, job_id, "SUCCEEDED", exit_code=0).applied
    outcome = _report(conn, node, job_id, "FAILED")
    assert (outcome.applied, outcome.reason) == (False, "a SUCCEEDED job cannot failed")
    stale = job_rows.apply_status(conn, node, JobStatus(job_id, 7, "FAILED"), NOW)
    assert (stale.applied, stale.reason) == (False, "stale report for attempt 7")


def test_a_nodes_hello_lists_its_active_jobs_with_their_variables_as_submitted(db):
    conn, node = db
    spec = JobSpec(name="j", command=("true",), cwd="/", env={"GPUPLANE_CKPT_DIR": "/w/saved"}, gpu=1)
    job_id = job_rows.insert_job(conn, spec, NOW, job_rows.capacities(conn, {node}))
    _schedule(conn, node)
    _, active = job_rows.register_node(conn, Hello("n1", "0", (GpuInfo(0, "Fake", 1024),)), NOW + 1)
    assert [(a.job_id, a.env) for a in active] == [(job_id, {"GPUPLANE_CKPT_DIR": "/w/saved"})]


def _queue_with_ties(conn, node, **more):
    """Jobs of mixed priorities, some submitted in the same millisecond, in a scrambled order."""
    for priority, at in [(0, NOW + 5), (2, NOW + 9), (0, NOW + 1), (0, NOW + 5), (-1, NOW), (2, NOW + 9), (5, NOW + 20)]:
        spec = JobSpec(name="j", command=("true",), cwd="/", env={}, gpu=1, priority=priority, **more)
        job_rows.insert_job(conn, spec, at, job_rows.capacities(conn, {node}))


def test_the_queue_is_read_in_the_queues_one_order(db):
    conn, node = db
    _queue_with_ties(conn, node)
    read = list(job_rows.queued_jobs(conn))
    assert len(read) == 7 and read == sorted(read, key=queue.order_key)
    assert [(j.priority, j.submitted_at - NOW) for j in read] == [(5, 20), (2, 9), (2, 9), (0, 1), (0, 5), (0, 5), (-1, 0)]
    assert [j.job_id for j in read[:3]] == [j.job_id for j in job_rows.queued_jobs(conn, limit=3)]


@pytest.mark.parametrize("priority", [-2, -1, 0, 2, 9])
def test_a_dry_runs_place_in_line_is_the_place_the_job_gets(db, priority):
    conn, node = db
    _queue_with_ties(conn, node)
    spec = JobSpec(name="j", command=("true",), cwd="/", env={}, gpu=1, priority=priority)
    _, position = queue.in_line(list(job_rows.queued_jobs(conn)), queue.as_queued(spec, "planned", NOW + 20))
    job_id = job_rows.insert_job(conn, spec, NOW + 20, job_rows.capacities(conn, {node}))
    assert [j.job_id for j in job_rows.queued_jobs(conn)].index(job_id) + 1 == position


def test_a_pass_that_changes_nothing_writes_nothing(db):
    conn, node = db
    _queue_with_ties(conn, node, gpu_model="A100")  # no node has one: each waits with that reason
    reason = "no node has 1 GPU(s) whose model contains 'A100' (the most on one matching node: 0)"
    assert [j.stored_reason for j in job_rows.queued_jobs(conn)] == [reason] * 7
    before = conn.total_changes
    assert _schedule(conn, node) == []  # it looks at each job and finds the reason it holds
    assert conn.total_changes == before
    conn.execute("UPDATE gpu_slots SET model = 'NVIDIA A100-SXM4-80GB' WHERE node_id = ?", (node,))
    (placed,) = _schedule(conn, node)
    assert job_rows.get_job(conn, placed).priority == 5
    assert [j.stored_reason for j in job_rows.queued_jobs(conn)] == [None] * 6  # they wait for the GPU now


def test_only_an_evaluate_jobs_reports_look_up_an_evaluation(db):
    """A job's RUNNING and end reports read no evaluation unless it is an EVALUATE job (the
    only kind that has one): two lookups a job fewer in a drain."""
    from gpuplaned.service.api import evaluations

    conn, node = db
    said = []
    plain = _submit(conn, node)
    spec = JobSpec(name="e", command=("true",), cwd="/", env={}, gpu=0, type="EVALUATE")
    judged = job_rows.insert_job(conn, spec, NOW + 1, job_rows.capacities(conn, {node}))
    assert sorted(_schedule(conn, node)) == sorted([plain, judged])
    conn.set_trace_callback(said.append)
    for job_id, evaluates in ((plain, False), (judged, True)):
        for status, fields in (("RUNNING", {}), ("SUCCEEDED", {"exit_code": 0})):
            attempt = job_rows.get_job(conn, job_id).attempt
            report = JobStatus(job_id, attempt, status, **fields)
            outcome = job_rows.apply_status(conn, node, report, NOW)
            assert outcome.applied and outcome.evaluates is evaluates
            said.clear()
            assert evaluations.after_report(conn, report, outcome, NOW) == []  # no evaluation row here
            assert any("FROM evaluations" in s for s in said) is evaluates


def test_each_nodes_cpu_jobs_are_counted_in_the_read_of_the_nodes(tmp_path):
    """A pass reads the nodes with their CPU jobs on a node in one statement (plus each node's
    GPU slots): a statement a node fewer on every job end. The counts are each node's own."""
    conn = open_writer(tmp_path / "gpuplane.db")
    a, _ = job_rows.register_node(conn, Hello("a", "0", (), max_cpu_jobs=4), NOW)
    b, _ = job_rows.register_node(conn, Hello("b", "0", (GpuInfo(0, "Fake", 1024),), max_cpu_jobs=4), NOW)
    for i, (gpu, node) in enumerate(((0, "a"), (0, "a"), (0, "b"), (1, "b"), (0, "a"))):
        spec = JobSpec(name=f"j{i}", command=("true",), cwd="/", env={}, gpu=gpu, node=node)
        job_rows.insert_job(conn, spec, NOW + i, job_rows.capacities(conn, {a, b}))
    assert len(schedule(conn, NOW, {a, b})) == 5
    said = []
    conn.set_trace_callback(said.append)
    found = {c.name: (c.cpu_jobs, c.free_gpus) for c in job_rows.capacities(conn, {a, b})}
    assert found == {"a": (3, ()), "b": (1, ())}
    assert len(said) == 3  # the nodes with their CPU jobs, then each node's GPU slots
    conn.close()
