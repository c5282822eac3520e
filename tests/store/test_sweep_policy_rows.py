"""The store's part of a sweep's policies: a stop's reason kept through the attempt's end
(job_rows), and the reads of ``sweep_policy_rows`` on a real SQLite file."""

from __future__ import annotations

import json

from gpuplaned.protocol.agent import JobStatus
from gpuplaned.protocol.event_replies import EventRow
from gpuplaned.protocol.job_wire import JobSpec
from gpuplaned.service.passes.dispatch import schedule
from gpuplaned.store import job_rows, sweep_policy_rows
from gpuplaned.store.event_rows import insert_events

NOW = 1_700_000_000_000


def _sweep(conn, sweep_id, *, early_stop=None, retry_on=None, metric="loss"):
    conn.execute("INSERT INTO sweeps (id, name, kind, template, parameters, metric, goal, early_stop, retry_on, "
                 "created_at) VALUES (?, ?, 'list', '{}', '[]', ?, 'min', ?, ?, ?)",
                 (sweep_id, sweep_id.removeprefix("swp_"), metric, json.dumps(early_stop) if early_stop else None,
                  json.dumps(retry_on) if retry_on else None, NOW))


def _trial(conn, node_id, sweep_id, trial, *, max_attempts=1):
    spec = JobSpec(name=f"t{trial}", command=("true",), cwd="/", env={}, gpu=0, max_attempts=max_attempts)
    job_id = job_rows.insert_job(conn, spec, NOW, job_rows.capacities(conn, {node_id}))
    conn.execute("UPDATE jobs SET sweep_id = ?, sweep_trial = ?, sweep_values = ? WHERE id = ?",
                 (sweep_id, trial, json.dumps({"i": trial}), job_id))
    return job_id


def _run(conn, node, job_id, at=NOW):
    assert job_id in [d.job.job_id for d in schedule(conn, at, {node})]
    _report(conn, node, job_id, "RUNNING", at_ms=at)


def _report(conn, node, job_id, status, **fields):
    attempt = job_rows.get_job(conn, job_id).attempt
    return job_rows.apply_status(conn, node, JobStatus(job_id, attempt, status, **fields), NOW)


def test_an_early_stop_ends_cancelled_with_its_reason_whatever_the_node_says(db):
    conn, node = db
    _sweep(conn, "swp_a")
    job_id = _trial(conn, node, "swp_a", 0)
    _run(conn, node, job_id)
    assert job_rows.cancel_job(conn, job_id, NOW, reason="EARLY_STOPPED").node_id == node
    # The job caught SIGTERM and exited 0: the node says CANCELLED, with no reason of its own.
    outcome = _report(conn, node, job_id, "CANCELLED", exit_code=0)
    assert (outcome.status, outcome.run_status) == ("CANCELLED", "CANCELLED")
    job = job_rows.get_job(conn, job_id)
    assert (job.status, job.failure_reason) == ("CANCELLED", "EARLY_STOPPED")
    assert conn.execute("SELECT failure_reason FROM runs WHERE id = ?", (job.run_id,)).fetchone()[0] == "EARLY_STOPPED"


def test_a_stopped_job_that_ended_on_its_own_first_keeps_its_own_end(db):
    conn, node = db
    _sweep(conn, "swp_a")
    job_id = _trial(conn, node, "swp_a", 0)
    _run(conn, node, job_id)
    job_rows.cancel_job(conn, job_id, NOW, reason="EARLY_STOPPED")
    _report(conn, node, job_id, "SUCCEEDED", exit_code=0)  # it had finished before the stop reached it
    job = job_rows.get_job(conn, job_id)
    assert (job.status, job.failure_reason) == ("SUCCEEDED", None)
    # A plain cancel records no reason, as before.
    other = _trial(conn, node, "swp_a", 1)
    _run(conn, node, other)
    job_rows.cancel_job(conn, other, NOW)
    _report(conn, node, other, "CANCELLED")
    assert job_rows.get_job(conn, other).failure_reason is None


def test_judged_sweeps_need_early_stop_a_metric_and_a_running_trial(db):
    conn, node = db
    _sweep(conn, "swp_judged", early_stop={"rule": "median"})
    _sweep(conn, "swp_no_metric", early_stop={"rule": "median"}, metric=None)
    _sweep(conn, "swp_off")
    _sweep(conn, "swp_idle", early_stop={"rule": "asha"})
    for sweep in ("swp_judged", "swp_no_metric"):  # the node runs two CPU jobs at once
        _run(conn, node, _trial(conn, node, sweep, 0))
    _trial(conn, node, "swp_off", 0)
    _trial(conn, node, "swp_idle", 0)  # queued: nothing to judge yet
    assert [s.id for s in sweep_policy_rows.judged_sweeps(conn)] == ["swp_judged"]
    [trial] = sweep_policy_rows.trial_runs(conn, "swp_judged")
    assert (trial.status, trial.started_at, trial.cancel_requested) == ("RUNNING", NOW, False)
    assert sweep_policy_rows.trial_runs(conn, "swp_idle") == []  # no run yet


def test_failed_trials_are_those_retry_on_could_cover(db):
    conn, node = db
    _sweep(conn, "swp_r", retry_on={"causes": ["OOM"], "times": 1})
    ids = []
    for k, reason in enumerate(("OOM", "EXIT_CODE")):
        job_id = _trial(conn, node, "swp_r", k)
        ids.append(job_id)
        _run(conn, node, job_id)
        _report(conn, node, job_id, "FAILED", exit_code=1, failure_reason=reason)
    oom = ids[0]
    [found] = sweep_policy_rows.failed_trials(conn)
    assert (found.job_id, found.failure_reason, found.reasons, found.retry_on) == (oom, "OOM", ("OOM",),
                                                                                    {"causes": ["OOM"], "times": 1})


def test_fast_failures_count_each_trial_once_since_the_last_pause(db):
    conn, node = db
    _sweep(conn, "swp_f")
    fast = _trial(conn, node, "swp_f", 0)
    _run(conn, node, fast, NOW)
    conn.execute("UPDATE jobs SET started_at = ? WHERE id = ?", (NOW - 1000, fast))
    conn.execute("UPDATE runs SET started_at = ? WHERE job_id = ?", (NOW - 1000, fast))
    _report(conn, node, fast, "FAILED", exit_code=1, failure_reason="EXIT_CODE")
    slow = _trial(conn, node, "swp_f", 1)
    _run(conn, node, slow, NOW - 120_000)
    _report(conn, node, slow, "FAILED", exit_code=1, failure_reason="EXIT_CODE")  # after two minutes: not fast
    twice = _trial(conn, node, "swp_f", 2, max_attempts=2)
    for _ in range(2):  # two fast failures of one trial (its own retry between them)
        _run(conn, node, twice, NOW - 1000)
        _report(conn, node, twice, "FAILED", exit_code=1, failure_reason="EXIT_CODE")
    requeued = _trial(conn, node, "swp_f", 3)  # its dispatch never started: the node's trouble, not the trial's
    assert requeued in [d.job.job_id for d in schedule(conn, NOW, {node})]
    _report(conn, node, requeued, "REQUEUE", message="never started")
    [found] = sweep_policy_rows.fast_failures(conn)
    assert (found.sweep_id, found.job_ids) == ("swp_f", (fast, twice))
    # Paused for it: failures before that no longer count.
    insert_events(conn, [EventRow("ev_p", NOW, "SWEEP_PAUSED", "warning", None, None, None, None, "paused",
                                  {"sweep_id": "swp_f"})])
    assert sweep_policy_rows.fast_failures(conn) == []
    conn.execute("UPDATE sweeps SET paused = 1 WHERE id = 'swp_f'")
    conn.execute("DELETE FROM events")
    assert sweep_policy_rows.fast_failures(conn) == []  # a paused sweep is not looked at
