"""The reads of a sweep's policies (issue 31 items 3 and 4): which sweeps early stopping judges and
their trials' runs, the failed trials ``retry_on`` may queue again, and the trials that failed
within their first minute since a sweep was last paused for it.

The decisions are ``gpuplaned.domain.early_stopping``'s and ``gpuplaned.domain.sweep_policies``';
the passes that act on them are in ``gpuplaned.service.passes``.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from typing import Any

import attrs

from gpuplaned.domain.sweep_policies import FLAPPING_WINDOW_MS, RETRY_REASONS, SWEEP_PAUSED
from gpuplaned.protocol.job_states import FailureReason, JobState
from gpuplaned.store.paging import one_of


@attrs.frozen
class JudgedSweep:
    id: str
    name: str
    metric: str
    goal: str
    early_stop: dict[str, Any]


@attrs.frozen
class TrialRun:
    job_id: str
    trial: int
    status: str
    attempt: int
    run_id: str | None  # its current attempt's run, or its last one's once it ended
    node_id: str | None
    started_at: int | None
    cancel_requested: bool


def judged_sweeps(conn: sqlite3.Connection) -> list[JudgedSweep]:
    """The sweeps with early stopping, a metric and a trial running: those a pass judges."""
    rows = conn.execute(
        "SELECT s.id, s.name, s.metric, s.goal, s.early_stop FROM sweeps s WHERE s.early_stop IS NOT NULL "
        "AND s.metric IS NOT NULL AND s.cancelled_at IS NULL AND EXISTS (SELECT 1 FROM jobs j WHERE "
        "j.sweep_id = s.id AND j.status = ?) ORDER BY s.created_at", (JobState.RUNNING.value,)).fetchall()
    return [JudgedSweep(id_, name, metric, goal, json.loads(early_stop))
            for id_, name, metric, goal, early_stop in rows]


def trial_runs(conn: sqlite3.Connection, sweep_id: str) -> list[TrialRun]:
    """The sweep's trials that have had a run, by trial number."""
    rows = conn.execute(
        "SELECT j.id, j.sweep_trial, j.status, j.attempt, coalesce(j.run_id, (SELECT r.id FROM runs r WHERE "
        "r.job_id = j.id ORDER BY r.attempt DESC, r.created_at DESC LIMIT 1)), j.node_id, j.started_at, "
        "j.cancel_requested FROM jobs j WHERE j.sweep_id = ? ORDER BY j.sweep_trial", (sweep_id,)).fetchall()
    return [TrialRun(job_id, trial, status, attempt, run_id, node_id, started, bool(cancel))
            for job_id, trial, status, attempt, run_id, node_id, started, cancel in rows if run_id is not None]


@attrs.frozen
class FailedTrial:
    job_id: str
    trial: int
    sweep_id: str
    sweep: str
    failure_reason: str | None
    retry_on: dict[str, Any]
    reasons: tuple[str | None, ...]  # the failure reasons of all its attempts' runs, oldest first


def failed_trials(conn: sqlite3.Connection) -> list[FailedTrial]:
    """The FAILED trials of the sweeps with ``retry_on`` that are not cancelled, whose failure
    could be a cause of it (``RETRY_REASONS``: an exit code's never is)."""
    rows = conn.execute(
        "SELECT j.id, j.sweep_trial, s.id, s.name, j.failure_reason, s.retry_on FROM jobs j JOIN sweeps s ON "
        "s.id = j.sweep_id WHERE j.status = ? AND s.retry_on IS NOT NULL AND s.cancelled_at IS NULL AND "
        f"{one_of('j.failure_reason', RETRY_REASONS)} ORDER BY s.created_at, j.sweep_trial",
        (JobState.FAILED.value, *RETRY_REASONS)).fetchall()
    out = []
    for job_id, trial, sweep_id, name, failure, retry_on in rows:
        reasons = tuple(r for (r,) in conn.execute(
            "SELECT failure_reason FROM runs WHERE job_id = ? AND status = ? ORDER BY attempt, created_at",
            (job_id, JobState.FAILED.value)))
        out.append(FailedTrial(job_id, trial, sweep_id, name, failure, json.loads(retry_on), reasons))
    return out


# A run FAILED for these never ran the trial's command: its dispatch went back to the queue, or its
# node never said it started it. The node's trouble, not the trial's: no flapping.
_NOT_THE_TRIALS = (FailureReason.REQUEUED.value, FailureReason.DISPATCH_TIMEOUT.value)


@attrs.frozen
class FastFailures:
    sweep_id: str
    sweep: str
    job_ids: tuple[str, ...]  # the trials, each once, that failed within their first minute


def fast_failures(conn: sqlite3.Connection, sweep_ids: Iterable[str] | None = None) -> list[FastFailures]:
    """For each sweep neither paused nor cancelled (of ``sweep_ids``, or all), its trials whose
    attempt failed within ``FLAPPING_WINDOW_MS`` of starting (or could not start), since the
    sweep's last ``SWEEP_PAUSED`` event; only sweeps with at least one."""
    ids = list(sweep_ids) if sweep_ids is not None else None
    if ids == []:
        return []
    where = f" AND {one_of('s.id', ids)}" if ids else ""
    rows = conn.execute(
        "SELECT s.id, s.name, r.job_id FROM sweeps s JOIN jobs j ON j.sweep_id = s.id JOIN runs r ON r.job_id = j.id "
        "WHERE s.paused = 0 AND s.cancelled_at IS NULL AND r.status = ? AND r.finished_at IS NOT NULL "
        f"AND coalesce(r.failure_reason, '') NOT IN ({','.join('?' * len(_NOT_THE_TRIALS))}) "
        "AND (r.started_at IS NULL OR r.finished_at - r.started_at < ?) "
        "AND r.finished_at > coalesce((SELECT max(e.ts) FROM events e WHERE e.type = ? "
        "AND json_extract(e.context, '$.sweep_id') = s.id), 0)" + where +
        " ORDER BY s.id, r.finished_at",
        (JobState.FAILED.value, *_NOT_THE_TRIALS, FLAPPING_WINDOW_MS, SWEEP_PAUSED, *(ids or ()))
    ).fetchall()
    found: dict[str, tuple[str, dict[str, None]]] = {}
    for sweep_id, name, job_id in rows:
        found.setdefault(sweep_id, (name, {}))[1][job_id] = None
    return [FastFailures(sweep_id, name, tuple(jobs)) for sweep_id, (name, jobs) in found.items()]
