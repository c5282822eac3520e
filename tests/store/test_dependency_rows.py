"""dependency_rows on a real database: held jobs are skipped by the queue, a failure cancels the
chain behind it in the same transaction, and a retry with dependants puts the chain back."""

from __future__ import annotations

import pytest

from gpuplaned.protocol.agent import GpuInfo, Hello, JobStatus
from gpuplaned.protocol.errors import ApiError
from gpuplaned.protocol.job_wire import JobSpec
from gpuplaned.service.passes.dispatch import schedule
from gpuplaned.store import dependency_rows, job_rows
from gpuplaned.store.database import open_writer

NOW = 1_700_000_000_000


@pytest.fixture
def db(tmp_path):
    conn = open_writer(tmp_path / "gpuplane.db")
    node_id, _ = job_rows.register_node(conn, Hello("n1", "0", (GpuInfo(0, "Fake", 1024), GpuInfo(1, "Fake", 1024))),
                                        NOW)
    yield conn, node_id
    conn.close()


def _submit(conn, node_id, name, after=(), when="succeeded", at=NOW):
    spec = JobSpec(name=name, command=("true",), cwd="/", env={}, gpu=1)
    job_id = job_rows.insert_job(conn, spec, at, job_rows.capacities(conn, {node_id}))
    if after:
        dependency_rows.attach(conn, job_id, list(after), when, at)
    return job_id


def _run(conn, node_id, job_id, end, exit_code):
    placed = [d.job.job_id for d in schedule(conn, NOW, {node_id})]
    assert job_id in placed
    job = job_rows.get_job(conn, job_id)
    job_rows.apply_status(conn, node_id, JobStatus(job_id, job.attempt, "RUNNING"), NOW)
    job_rows.apply_status(conn, node_id, JobStatus(job_id, job.attempt, end, exit_code=exit_code,
                                                   failure_reason="EXIT_CODE" if end == "FAILED" else None), NOW)


def _state(conn, job_id):
    job = job_rows.get_job(conn, job_id)
    return job.status, job.failure_reason


def test_a_held_job_is_not_scheduled_and_says_what_it_waits_for(db):
    conn, node = db
    a = _submit(conn, node, "a")
    b = _submit(conn, node, "b", after=[a], at=NOW + 1)
    placed = [d.job.job_id for d in schedule(conn, NOW, {node})]
    assert placed == [a]  # two GPUs free, but b waits for a
    job = job_rows.get_job(conn, b)
    assert job.queue_reason == f"after {a} (DISPATCHING)"
    assert [(link.job_id, link.status) for link in job.dependencies] == [(a, "DISPATCHING")]
    assert job.after == "succeeded"
    assert [link.job_id for link in job_rows.get_job(conn, a).dependants] == [b]
    listed = {j.id: j for j in job_rows.list_jobs(conn)}
    assert listed[b].queue_reason == f"after {a} (DISPATCHING)"


def test_a_failure_in_the_middle_of_a_chain_cancels_the_rest_and_retry_puts_it_back(db):
    conn, node = db
    a = _submit(conn, node, "a")
    b = _submit(conn, node, "b", after=[a], at=NOW + 1)
    c = _submit(conn, node, "c", after=[b], at=NOW + 2)
    _run(conn, node, a, "SUCCEEDED", 0)
    assert job_rows.get_job(conn, b).queue_reason is None  # released: it waits for a slot only
    _run(conn, node, b, "FAILED", 3)
    assert _state(conn, c) == ("CANCELLED", "DEPENDENCY_FAILED")
    assert job_rows.get_job(conn, c).failure_message == f"dependency {b} FAILED"

    with pytest.raises(ApiError, match="can never run"):  # c alone cannot: b is still FAILED
        job_rows.retry_job(conn, c, asked_ms=NOW)
    job_rows.retry_job(conn, b, asked_ms=NOW, with_dependants=True)
    assert _state(conn, b) == ("QUEUED", None) and _state(conn, c) == ("QUEUED", None)
    assert job_rows.get_job(conn, c).queue_reason == f"after {b} (QUEUED)"
    _run(conn, node, b, "SUCCEEDED", 0)
    _run(conn, node, c, "SUCCEEDED", 0)


def test_the_cascade_is_transitive_and_leaves_other_conditions_alone(db):
    conn, node = db
    a = _submit(conn, node, "a")
    b = _submit(conn, node, "b", after=[a])
    c = _submit(conn, node, "c", after=[b])
    anyway = _submit(conn, node, "anyway", after=[c], when="ended")
    cleanup = _submit(conn, node, "cleanup", after=[a], when="failed")
    _run(conn, node, a, "FAILED", 1)
    assert _state(conn, b) == ("CANCELLED", "DEPENDENCY_FAILED")
    assert _state(conn, c) == ("CANCELLED", "DEPENDENCY_FAILED")
    # --after-any: c ended (cancelled), so it runs; --after-failed: a failed, so it runs
    placed = {d.job.job_id for d in schedule(conn, NOW, {node})}
    assert placed == {anyway, cleanup}


def test_after_failed_is_cancelled_when_everything_succeeded(db):
    conn, node = db
    a = _submit(conn, node, "a")
    notify = _submit(conn, node, "notify", after=[a], when="failed")
    _run(conn, node, a, "SUCCEEDED", 0)
    assert _state(conn, notify) == ("CANCELLED", "DEPENDENCY_FAILED")


def test_cancelling_a_queued_dependency_cancels_its_dependants(db):
    conn, node = db
    a = _submit(conn, node, "a")
    b = _submit(conn, node, "b", after=[a])
    job_rows.cancel_job(conn, a, NOW)
    assert _state(conn, b) == ("CANCELLED", "DEPENDENCY_FAILED")


def test_a_dependency_already_failed_cancels_the_new_job_at_once(db):
    conn, node = db
    a = _submit(conn, node, "a")
    _run(conn, node, a, "FAILED", 1)
    b = _submit(conn, node, "b", after=[a])
    assert _state(conn, b) == ("CANCELLED", "DEPENDENCY_FAILED")


def test_unknown_ids_are_refused_and_named(db):
    conn, node = db
    a = _submit(conn, node, "a")
    with pytest.raises(ApiError) as refused:
        _submit(conn, node, "b", after=[a, "job_nope", "job_gone"])
    assert refused.value.message == "after: no job job_nope, job_gone"
    assert refused.value.details == {"field": "after", "unknown": ["job_nope", "job_gone"]}


def test_a_cycle_is_refused(db):
    conn, node = db
    a = _submit(conn, node, "a")
    # Only a job that names itself (or a batch) can close one: make the edge by hand.
    b = _submit(conn, node, "b", after=[a])
    with pytest.raises(ApiError, match=f"cycle of dependencies {a} -> {b} -> {a}"):
        dependency_rows.attach(conn, a, [b], "succeeded", NOW)


def test_a_dry_run_previews_what_the_dependencies_would_do(db):
    conn, node = db
    a = _submit(conn, node, "a")
    assert dependency_rows.preview(conn, [a, "job_nope"], "succeeded") == (True, "after: no job job_nope")
    assert dependency_rows.preview(conn, [a], "succeeded") == (False, f"after {a} (QUEUED)")
    _run(conn, node, a, "FAILED", 1)
    assert dependency_rows.preview(conn, [a], "ended") is None
    assert dependency_rows.preview(conn, [a], "succeeded") == (
        False, f"it would be cancelled at once (DEPENDENCY_FAILED): dependency {a} FAILED")


def test_the_daemons_own_requeue_goes_on_with_the_job_whatever_its_dependencies_do_since(db):
    conn, node = db
    a = _submit(conn, node, "a")
    b = _submit(conn, node, "b", after=[a])
    _run(conn, node, a, "SUCCEEDED", 0)
    _run(conn, node, b, "FAILED", 1)
    job_rows.retry_job(conn, a, asked_ms=NOW)
    _run(conn, node, a, "FAILED", 1)  # b's dependency can no longer be met...
    job_rows.retry_job(conn, b)  # ...but a failure policy's requeue of b is not refused
    assert _state(conn, b) == ("QUEUED", None)
    assert [d.job.job_id for d in schedule(conn, NOW, {node})] == [b]
