"""Rows of the ``runs`` table: one per attempt of a job, per run a script opened with the SDK
(``session_rows``), and per run imported from a folder (``gpuplanectl run import``, ``import_rows``)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

import attrs

from gpuplaned.protocol.run_wire import Run

from gpuplaned.store.paging import newest_first, one_of


def _columns(env_snapshot: str) -> str:
    return ("id, job_id, attempt, node_id, name, source, status, created_at, started_at, finished_at, "
            f"exit_code, failure_reason, {env_snapshot}, "
            "(SELECT name FROM projects WHERE projects.id = runs.project_id), "
            "(SELECT name FROM experiments WHERE experiments.id = runs.experiment_id), config, "
            f"{_METRIC_SOURCES}, resumed_from, resume_step")


# sdk: a session stored points; tensorboard: the tailer stored points (runs.tb_points), or an
# import-run's series (read from event files).
_METRIC_SOURCES = ("EXISTS (SELECT 1 FROM sessions WHERE sessions.run_id = runs.id AND sessions.points > 0), "
                   "runs.tb_points > 0 OR (runs.source = 'import' AND EXISTS (SELECT 1 FROM ts_series "
                   "WHERE ts_series.kind = 'run' AND ts_series.owner = runs.id))")


_COLUMNS = _columns("env_snapshot")
_LIST_COLUMNS = _columns("NULL")  # a list leaves out each run's environment (kilobytes a run)


def _run(row: Sequence[Any]) -> Run:
    *fields, env, project, experiment, config, sdk, tensorboard, resumed_from, resume_step = row
    settings = json.loads(config) if config else {}
    sources = [name for name, fed in (("sdk", sdk), ("tensorboard", tensorboard)) if fed]
    return Run(*fields, env_snapshot=json.loads(env) if env else None, project=project, experiment=experiment,
               config=settings.get("config"), tags=settings.get("tags") or [], metric_sources=sources,
               resumed_from=resumed_from, resume_step=resume_step)


def get_run(conn: sqlite3.Connection, run_id: str) -> Run | None:
    row = conn.execute(f"SELECT {_COLUMNS} FROM runs WHERE id = ?", (run_id,)).fetchone()
    return _run(row) if row else None


def list_runs(conn: sqlite3.Connection, *, job_id: str | None = None, statuses: Sequence[str] = (),
              limit: int = 100, before: tuple[int, str] | None = None) -> list[Run]:
    """Newest first; ``before`` = (created_at, id) of the last run of the previous page."""
    clauses: list[str] = []
    params: list[Any] = []
    if job_id is not None:
        clauses.append("job_id = ?")
        params.append(job_id)
    if statuses:
        clauses.append(one_of("status", statuses))
        params += statuses
    rows = newest_first(conn, f"SELECT {_LIST_COLUMNS} FROM runs", clauses, params, before, limit)
    return [_run(r) for r in rows]


@attrs.frozen
class Origin:
    """Whose a run is: its job's attempt on a node (all None for an SDK run outside a job), the
    token that opened it, when it started."""

    job_id: str | None
    attempt: int | None
    node_id: str | None
    created_by: str | None
    started_at: int | None


def origin(conn: sqlite3.Connection, run_id: str) -> Origin | None:
    """None: no such run."""
    row = conn.execute("SELECT job_id, attempt, node_id, created_by, started_at FROM runs WHERE id = ?",
                       (run_id,)).fetchone()
    return Origin(*row) if row else None


def run_exists(conn: sqlite3.Connection, run_id: str) -> bool:
    return conn.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone() is not None


def settings(conn: sqlite3.Connection, run_id: str) -> dict[str, Any]:
    """What the script passed to ``init``: ``{"config": ..., "tags": [...]}``; {} for none (or no run)."""
    row = conn.execute("SELECT config FROM runs WHERE id = ?", (run_id,)).fetchone()
    return json.loads(row[0]) if row and row[0] else {}


def summary(conn: sqlite3.Connection, run_id: str) -> dict[str, Any] | None:
    """The run's summary (``gpuplaned.domain.run_summary``); None before its first point, or no run."""
    row = conn.execute("SELECT summary FROM runs WHERE id = ?", (run_id,)).fetchone()
    return json.loads(row[0]) if row and row[0] else None


def set_summary(conn: sqlite3.Connection, run_id: str, summary: dict[str, Any]) -> None:
    conn.execute("UPDATE runs SET summary = ? WHERE id = ?", (json.dumps(summary, separators=(",", ":")), run_id))


def experiment_runs(conn: sqlite3.Connection, experiment_id: str) -> list[str]:
    """The ids of an experiment's runs, oldest first."""
    return [row[0] for row in conn.execute("SELECT id FROM runs WHERE experiment_id = ? ORDER BY created_at, id",
                                           (experiment_id,))]


def latest_of_job(conn: sqlite3.Connection, job_id: str) -> str | None:
    """The run of the job's latest attempt; None before its first."""
    row = conn.execute("SELECT id FROM runs WHERE job_id = ? ORDER BY attempt DESC LIMIT 1", (job_id,)).fetchone()
    return row[0] if row else None
