"""Sweep rows (issue 31 item 3): the sweep record, its trials (jobs with ``sweep_id``), what holds
them back in a scheduling pass, and each trial's best value of the sweep's metric.

A trial is an ordinary job row with ``sweep_id``, ``sweep_trial`` and ``sweep_values`` (canonical
JSON, unique per sweep: ``idx_jobs_sweep_values``), so a sweep never has two trials of the same
values, whatever submits race or are repeated.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from gpuplaned.domain.groups import SweepHold
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.job_states import ON_NODE, JobState, values
from gpuplaned.store.paging import newest_first, one_of
from gpuplaned.store.project_rows import best_point

_ON_NODE = values(ON_NODE)
_COLUMNS = ("s.id, s.name, s.kind, s.template, s.parameters, s.metric, s.goal, s.max_parallel, s.paused, "
            "s.pause_reason, s.early_stop, s.retry_on, s.experiment_id, e.name, s.token_id, s.created_at, "
            "s.cancelled_at")
_SELECT = f"SELECT {_COLUMNS} FROM sweeps s LEFT JOIN experiments e ON e.id = s.experiment_id"


@attrs.frozen
class SweepRow:
    id: str
    name: str
    kind: str
    template: str  # the job template's canonical JSON
    parameters: dict[str, Any]
    metric: str | None
    goal: str
    max_parallel: int | None
    paused: bool
    pause_reason: str | None
    early_stop: dict[str, Any] | None
    retry_on: dict[str, Any] | None
    experiment_id: str | None
    experiment: str | None
    token_id: str | None
    created_at: int
    cancelled_at: int | None


@attrs.frozen
class TrialRow:
    trial: int
    job_id: str
    status: str
    values: dict[str, Any]
    attempt: int
    run_id: str | None  # its latest attempt's run (None before its first)
    failure_reason: str | None
    queue_reason: str | None


def _row(row: Sequence[Any]) -> SweepRow:
    (id_, name, kind, template, parameters, metric, goal, max_parallel, paused, pause_reason, early_stop,
     retry_on, experiment_id, experiment, token_id, created_at, cancelled_at) = row
    return SweepRow(id_, name, kind, template, json.loads(parameters), metric, goal, max_parallel, bool(paused),
                    pause_reason, json.loads(early_stop) if early_stop else None,
                    json.loads(retry_on) if retry_on else None, experiment_id, experiment, token_id, created_at,
                    cancelled_at)


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


# --- making one ----------------------------------------------------------------------


def open_named(conn: sqlite3.Connection, name: str) -> SweepRow | None:
    """The sweep of this name that is not cancelled (None: none)."""
    row = conn.execute(f"{_SELECT} WHERE s.name = ? AND s.cancelled_at IS NULL ORDER BY s.created_at DESC LIMIT 1",
                       (name,)).fetchone()
    return _row(row) if row else None


def insert_sweep(conn: sqlite3.Connection, row: SweepRow) -> None:
    conn.execute(
        "INSERT INTO sweeps (id, name, kind, template, parameters, metric, goal, max_parallel, paused, pause_reason, "
        "early_stop, retry_on, experiment_id, token_id, created_at, cancelled_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (row.id, row.name, row.kind, row.template, _dumps(row.parameters), row.metric, row.goal, row.max_parallel,
         int(row.paused), row.pause_reason, _dumps(row.early_stop) if row.early_stop is not None else None,
         _dumps(row.retry_on) if row.retry_on is not None else None, row.experiment_id, row.token_id,
         row.created_at, row.cancelled_at))


def update_settings(conn: sqlite3.Connection, sweep_id: str, *, max_parallel: int | None, metric: str | None,
                    goal: str, early_stop: Mapping[str, Any] | None, retry_on: Mapping[str, Any] | None) -> None:
    """A repeated submit's settings win (its trials are added to the sweep that has its name)."""
    conn.execute("UPDATE sweeps SET max_parallel = ?, metric = ?, goal = ?, early_stop = ?, retry_on = ? WHERE id = ?",
                 (max_parallel, metric, goal, _dumps(early_stop) if early_stop is not None else None,
                  _dumps(retry_on) if retry_on is not None else None, sweep_id))
    _clear_holds(conn, sweep_id)


def trial_keys(conn: sqlite3.Connection, sweep_id: str) -> tuple[dict[str, int], int]:
    """The sweep's trials (values key -> trial number), and the number its next trial takes."""
    keys = dict(conn.execute("SELECT sweep_values, sweep_trial FROM jobs WHERE sweep_id = ?", (sweep_id,)).fetchall())
    return keys, max(keys.values(), default=-1) + 1


def mark_trials(conn: sqlite3.Connection, sweep_id: str, trials: Iterable[tuple[str, int, str]]) -> None:
    """Make each new job the sweep's trial: ``(job id, trial number, values key)`` (canonical JSON)."""
    conn.executemany("UPDATE jobs SET sweep_id = ?, sweep_trial = ?, sweep_values = ? WHERE id = ?",
                     ((sweep_id, trial, key, job_id) for job_id, trial, key in trials))


# --- reads ---------------------------------------------------------------------------


def get(conn: sqlite3.Connection, sweep_id: str) -> SweepRow | None:
    row = conn.execute(f"{_SELECT} WHERE s.id = ?", (sweep_id,)).fetchone()
    return _row(row) if row else None


def require(conn: sqlite3.Connection, sweep_id: str) -> SweepRow:
    """Raises ApiError not_found naming the id."""
    found = get(conn, sweep_id)
    if found is None:
        raise ApiError(ErrorCode.NOT_FOUND, f"no sweep {sweep_id!r}", {"sweep_id": sweep_id})
    return found


def list_sweeps(conn: sqlite3.Connection, *, token_id: str | None = None, limit: int = 1000) -> list[SweepRow]:
    """Newest first; ``token_id``: only the sweeps that token submitted."""
    clauses, params = (["s.token_id = ?"], [token_id]) if token_id is not None else ([], [])
    return [_row(r) for r in newest_first(conn, _SELECT, clauses, params, None, limit, alias="s")]


def counts(conn: sqlite3.Connection, sweep_ids: Iterable[str]) -> dict[str, dict[str, int]]:
    """Each sweep's trials counted by job status."""
    ids = list(sweep_ids)
    out: dict[str, dict[str, int]] = {i: {} for i in ids}
    if not ids:
        return out
    for sweep_id, status, n in conn.execute(
            f"SELECT sweep_id, status, count(*) FROM jobs WHERE {one_of('sweep_id', ids)} GROUP BY sweep_id, status",
            ids):
        out[sweep_id][status] = n
    return out


def trials(conn: sqlite3.Connection, sweep_id: str) -> list[TrialRow]:
    """The sweep's trials, by number, each with its latest run."""
    runs = dict(conn.execute(
        "SELECT r.job_id, r.id FROM runs r JOIN jobs j ON j.id = r.job_id WHERE j.sweep_id = ? "
        "ORDER BY r.attempt, r.created_at", (sweep_id,)).fetchall())  # the last attempt's wins
    return [TrialRow(trial, job_id, status, json.loads(vals), attempt, run_id or runs.get(job_id), failure,
                     reason if status == JobState.QUEUED.value else None)
            for trial, job_id, status, vals, attempt, run_id, failure, reason in conn.execute(
                "SELECT sweep_trial, id, status, sweep_values, attempt, run_id, failure_reason, queue_reason FROM jobs "
                "WHERE sweep_id = ? ORDER BY sweep_trial", (sweep_id,))]


def bests(conn: sqlite3.Connection, run_ids: Sequence[str], metric: str, goal: str) -> dict[str, tuple[float, int]]:
    """``(value, step)`` of each run's best point of ``metric`` (lowest for goal min, highest for max)."""
    if not run_ids:
        return {}
    direction = "minimize" if goal == "min" else "maximize"
    out: dict[str, tuple[float, int]] = {}
    ids = list(run_ids)
    for start in range(0, len(ids), 500):  # SQLite's bound on parameters
        part = ids[start:start + 500]
        for owner, series_id in conn.execute(
                f"SELECT owner, id FROM ts_series WHERE kind = 'run' AND name = ? AND {one_of('owner', part)}",
                (metric, *part)):
            found = best_point(conn, series_id, direction)
            if found is not None:
                out[owner] = found
    return out


def run_placement(conn: sqlite3.Connection, sweep_id: str) -> tuple[str | None, str | None]:
    """The (project id, experiment id) a trial's run lands in."""
    row = conn.execute("SELECT e.project_id, e.id FROM sweeps s JOIN experiments e ON e.id = s.experiment_id "
                       "WHERE s.id = ?", (sweep_id,)).fetchone()
    return (row[0], row[1]) if row else (None, None)


def trial_jobs(conn: sqlite3.Connection, sweep_id: str, statuses: Iterable[str]) -> list[str]:
    """The ids of the sweep's trials in ``statuses``, by trial number."""
    wanted = list(statuses)
    return [r[0] for r in conn.execute(
        f"SELECT id FROM jobs WHERE sweep_id = ? AND {one_of('status', wanted)} ORDER BY sweep_trial",
        (sweep_id, *wanted))]


def trial_numbers(conn: sqlite3.Connection, job_ids: Sequence[str]) -> dict[str, tuple[str, int]]:
    """Each of ``job_ids`` that is a sweep's trial: its sweep's id and its trial number."""
    ids = list(job_ids)
    return {job_id: (sweep_id, trial) for job_id, sweep_id, trial in conn.execute(
        f"SELECT id, sweep_id, sweep_trial FROM jobs WHERE {one_of('id', ids)} AND sweep_id IS NOT NULL "
        "AND sweep_trial IS NOT NULL", ids)} if ids else {}


def set_max_parallel(conn: sqlite3.Connection, sweep_id: str, max_parallel: int | None) -> None:
    """The sweep's max-parallel (None: no limit); its trials held by the old limit are said anew."""
    conn.execute("UPDATE sweeps SET max_parallel = ? WHERE id = ?", (max_parallel, sweep_id))
    _clear_holds(conn, sweep_id)


def trial_nodes(conn: sqlite3.Connection, sweep_id: str) -> list[str]:
    """The nodes that hold any of the sweep's trials now (dispatched, running, or lost there)."""
    return [r[0] for r in conn.execute(
        f"SELECT DISTINCT node_id FROM jobs WHERE sweep_id = ? AND node_id IS NOT NULL AND "
        f"{one_of('status', _ON_NODE)} ORDER BY node_id", (sweep_id, *_ON_NODE))]


# --- holds ---------------------------------------------------------------------------


def holds(conn: sqlite3.Connection) -> dict[str, SweepHold]:
    """Each sweep (by id) that holds its trials back now: paused, or with a parallel limit."""
    found = conn.execute("SELECT id, name, paused, max_parallel FROM sweeps WHERE cancelled_at IS NULL AND "
                         "(paused = 1 OR max_parallel IS NOT NULL)").fetchall()
    if not found:
        return {}
    running = dict(conn.execute(
        f"SELECT sweep_id, count(*) FROM jobs WHERE {one_of('status', _ON_NODE)} AND sweep_id IS NOT NULL "
        "GROUP BY sweep_id", _ON_NODE).fetchall())
    return {id_: SweepHold(name, bool(paused), limit, running.get(id_, 0)) for id_, name, paused, limit in found}


def set_paused(conn: sqlite3.Connection, sweep_id: str, paused: bool, reason: str | None) -> None:
    conn.execute("UPDATE sweeps SET paused = ?, pause_reason = ? WHERE id = ?",
                 (int(paused), reason if paused else None, sweep_id))
    if not paused:
        _clear_holds(conn, sweep_id)


def set_cancelled(conn: sqlite3.Connection, sweep_id: str, now_ms: int) -> None:
    conn.execute("UPDATE sweeps SET cancelled_at = coalesce(cancelled_at, ?) WHERE id = ?", (now_ms, sweep_id))


def _clear_holds(conn: sqlite3.Connection, sweep_id: str) -> None:
    """A hold was lifted or changed: the trials it held wait for capacity until the next pass says
    otherwise (as ``group_rows``' holds)."""
    conn.execute("UPDATE jobs SET queue_reason = NULL WHERE sweep_id = ? AND status = ? AND queue_reason LIKE 'sweep %'",
                 (sweep_id, JobState.QUEUED.value))
