"""The sweep failures pass's transaction (service/passes/sweep_failures.settle) on a real SQLite file:
each acts once, however often it runs."""

from __future__ import annotations

import json

from gpuplaned.protocol.agent import JobStatus
from gpuplaned.protocol.job_wire import JobSpec
from gpuplaned.service.passes.dispatch import schedule
from gpuplaned.service.passes.sweep_failures import settle
from gpuplaned.store import job_rows, sweep_rows

NOW = 1_700_000_000_000


def _sweep(conn, sweep_id, retry_on=None):
    conn.execute("INSERT INTO sweeps (id, name, kind, template, parameters, goal, retry_on, created_at) "
                 "VALUES (?, ?, 'list', '{}', '[]', 'min', ?, ?)",
                 (sweep_id, sweep_id.removeprefix("swp_"), json.dumps(retry_on) if retry_on else None, NOW))


def _failed(conn, node, sweep_id, trial, reason, *, ran_ms=1000):
    spec = JobSpec(name=f"t{trial}", command=("true",), cwd="/", env={}, gpu=0)
    job_id = job_rows.insert_job(conn, spec, NOW, job_rows.capacities(conn, {node}))
    conn.execute("UPDATE jobs SET sweep_id = ?, sweep_trial = ?, sweep_values = ? WHERE id = ?",
                 (sweep_id, trial, json.dumps({"t": trial}), job_id))
    _attempt(conn, node, job_id, reason, ran_ms)
    return job_id


def _attempt(conn, node, job_id, reason, ran_ms=1000):
    assert job_id in [d.job.job_id for d in schedule(conn, NOW, {node})]
    attempt = job_rows.get_job(conn, job_id).attempt
    job_rows.apply_status(conn, node, JobStatus(job_id, attempt, "RUNNING", at_ms=NOW - ran_ms), NOW)
    job_rows.apply_status(conn, node, JobStatus(job_id, attempt, "FAILED", exit_code=1, failure_reason=reason,
                                                at_ms=NOW), NOW)


def test_retry_on_requeues_once_per_failure_up_to_its_count(db):
    conn, node = db
    _sweep(conn, "swp_r", {"causes": ["OOM"], "times": 1})
    job_id = _failed(conn, node, "swp_r", 0, "OOM", ran_ms=120_000)
    acted = settle(conn, NOW)
    assert acted.requeued == 1 and [e.type for e in acted.events] == ["POLICY_ACTION"]
    assert acted.events[0].context["policy"] == "retry_on" and "retry 1 of 1" in acted.events[0].message
    assert job_rows.get_job(conn, job_id).status == "QUEUED"
    assert settle(conn, NOW).events == []  # queued already: nothing more
    _attempt(conn, node, job_id, "OOM", ran_ms=120_000)  # its retry fails the same way: final
    assert settle(conn, NOW).events == []
    job = job_rows.get_job(conn, job_id)
    assert (job.status, job.attempt) == ("FAILED", 2)


def test_three_fast_failures_pause_the_sweep_once(db):
    conn, node = db
    _sweep(conn, "swp_f")
    ids = [_failed(conn, node, "swp_f", k, "EXIT_CODE") for k in range(2)]
    assert settle(conn, NOW).events == []  # two: not yet
    ids.append(_failed(conn, node, "swp_f", 2, "EXIT_CODE"))
    acted = settle(conn, NOW)
    [event] = acted.events
    assert (event.type, event.context["job_ids"], event.context["reason"]) == (
        "SWEEP_PAUSED", ids, "3 trials failed within their first minute")
    row = sweep_rows.get(conn, "swp_f")
    assert row.paused and row.pause_reason == "3 trials failed within their first minute"
    assert settle(conn, NOW + 1).events == []  # paused: once
    # Resumed (by a person): the failures before the pause no longer count.
    sweep_rows.set_paused(conn, "swp_f", False, None)
    assert settle(conn, NOW + 2).events == []
