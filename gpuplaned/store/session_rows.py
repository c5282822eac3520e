"""Rows for SDK sessions and the runs they report to (sources "sdk" and "job")."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import attrs

from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.ids import new_id, uuid7
from gpuplaned.protocol.session_replies import Session


@attrs.frozen
class SessionRequest:
    run_id: str | None
    job_id: str | None
    name: str | None
    project: str | None
    experiment: str | None
    config: dict[str, Any] | None
    tags: tuple[str, ...]
    rank: int | None
    host: str | None
    pid: int | None
    session_id: str | None = None  # the SDK's own UUIDv7 (it makes one to spool under); None: the daemon's
    started_at: int | None = None  # when the script opened it (ms); None: now


_COLUMNS = "id, run_id, rank, host, pid, status, last_seq, points, created_at, finished_at"


def get_session(conn: sqlite3.Connection, session_id: str) -> Session | None:
    row = conn.execute(f"SELECT {_COLUMNS} FROM sessions WHERE id = ?", (session_id,)).fetchone()
    return Session(*row) if row else None


def list_for_run(conn: sqlite3.Connection, run_id: str) -> list[Session]:
    """The run's sessions (its ranks, its resumes), in the order they were opened."""
    return [Session(*row) for row in conn.execute(
        f"SELECT {_COLUMNS} FROM sessions WHERE run_id = ? ORDER BY rowid", (run_id,))]


def require_open(conn: sqlite3.Connection, session_id: str) -> Session:
    session = get_session(conn, session_id)
    if session is None:
        raise ApiError(ErrorCode.NOT_FOUND, f"no session {session_id!r}", {"session_id": session_id})
    return session


def open_session(conn: sqlite3.Connection, req: SessionRequest, now_ms: int) -> Session:
    """A new session on ``req.run_id`` (the run is created when unknown) or on a new run.

    With ``req.session_id`` it is idempotent: a session that exists already is returned as
    it is (the SDK re-opens its session after the daemon came back, and a spool replay opens
    it again), unless the request names another run.

    Raises:
        ApiError: CONFLICT, the session exists on another run; BAD_REQUEST, a new run names an unknown job.
    """
    # A run the SDK spooled while no daemon answered began when the script opened it, not at
    # the replay; never later than now (the script's clock may be ahead of ours).
    began = now_ms if req.started_at is None else min(req.started_at, now_ms)
    if req.session_id is not None:
        existing = get_session(conn, req.session_id)
        if existing is not None:
            if req.run_id is not None and req.run_id != existing.run_id:
                raise ApiError(ErrorCode.CONFLICT,
                               f"session {req.session_id} reports to run {existing.run_id}, not {req.run_id}",
                               {"session_id": req.session_id, "run_id": existing.run_id})
            return existing
    run_id = req.run_id or new_id("run")
    run = conn.execute("SELECT project_id, experiment_id, config FROM runs WHERE id = ?", (run_id,)).fetchone()
    config = json.dumps({"config": req.config or {}, "tags": list(req.tags)}, separators=(",", ":"))
    if run is None:
        if req.job_id is not None and conn.execute("SELECT 1 FROM jobs WHERE id = ?", (req.job_id,)).fetchone() is None:
            raise ApiError(ErrorCode.BAD_REQUEST, f"job_id: no job {req.job_id!r}", {"field": "job_id"})
        project_id, experiment_id = _placement(conn, req, now_ms)
        conn.execute(
            "INSERT INTO runs (id, job_id, project_id, experiment_id, name, source, status, config, created_at, "
            "started_at) VALUES (?, ?, ?, ?, ?, 'sdk', 'RUNNING', ?, ?, ?)",
            (run_id, req.job_id, project_id, experiment_id, req.name, config, began, began),
        )
    else:
        # Joining a run (a dispatched job's, or another rank's): the script's init() fills in
        # what the run does not have yet (a job's run has no project or config); the first wins.
        project_id, experiment_id = (None, None) if run[0] or run[1] else _placement(conn, req, now_ms)
        had = json.loads(run[2]) if run[2] else {}
        fill = config if (req.config or req.tags) and not (had.get("config") or had.get("tags")) else None
        if fill is None and (req.config or req.tags) and not list_for_run(conn, run_id):
            # The first session of a run whose config was set before it (a sweep trial's values, at
            # its dispatch): the script's own config goes over it.
            fill = json.dumps({"config": {**(had.get("config") or {}), **(req.config or {})},
                               "tags": list(dict.fromkeys([*(had.get("tags") or []), *req.tags]))},
                              separators=(",", ":"))
        conn.execute("UPDATE runs SET project_id = coalesce(project_id, ?), experiment_id = coalesce(experiment_id, ?), "
                     "name = coalesce(name, ?), config = coalesce(?, config) WHERE id = ?",
                     (project_id, experiment_id, req.name, fill, run_id))
    session = Session(req.session_id or uuid7(now_ms), run_id, req.rank, req.host, req.pid, "OPEN", None, 0, began, None)
    conn.execute(f"INSERT INTO sessions ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", attrs.astuple(session))
    return session


def batch_stored(conn: sqlite3.Connection, session_id: str, seq: int) -> bool:
    """Whether the session's batch ``seq`` is stored already."""
    return conn.execute("SELECT 1 FROM ts_batches WHERE source = ? AND seq = ?", (session_id, seq)).fetchone() is not None


def record_batch(conn: sqlite3.Connection, session_id: str, seq: int, points: int) -> None:
    conn.execute("UPDATE sessions SET last_seq = max(coalesce(last_seq, -1), ?), points = points + ? WHERE id = ?",
                 (seq, points, session_id))


def finish_session(conn: sqlite3.Connection, session_id: str, status: str, now_ms: int) -> Session:
    """Close the session; an SDK run whose sessions are all closed takes the last status."""
    session = require_open(conn, session_id)
    if session.status == "OPEN":
        conn.execute("UPDATE sessions SET status = ?, finished_at = ? WHERE id = ?", (status, now_ms, session_id))
        still_open = conn.execute("SELECT count(*) FROM sessions WHERE run_id = ? AND status = 'OPEN'",
                                  (session.run_id,)).fetchone()[0]
        if not still_open:  # a job's run belongs to the runner: only SDK runs end here
            conn.execute("UPDATE runs SET status = ?, finished_at = ? WHERE id = ? AND source = 'sdk'",
                         (status, now_ms, session.run_id))
    found = get_session(conn, session_id)
    assert found is not None
    return found


def _named(conn: sqlite3.Connection, table: str, name: str, now_ms: int) -> str:
    row = conn.execute(f"SELECT id FROM {table} WHERE name = ?", (name,)).fetchone()
    if row:
        return row[0]
    new = new_id("prj")
    conn.execute(f"INSERT INTO {table} (id, name, created_at) VALUES (?, ?, ?)", (new, name, now_ms))
    return new


def _placement(conn: sqlite3.Connection, req: SessionRequest, now_ms: int) -> tuple[str | None, str | None]:
    return placement(conn, req.project, req.experiment, now_ms)


def placement(conn: sqlite3.Connection, project: str | None, experiment: str | None,
              now_ms: int) -> tuple[str | None, str | None]:
    """The (project, experiment) ids of these names, made on first sight; an experiment
    without a project goes under the "default" project, which the run then names too."""
    project_id = _named(conn, "projects", project, now_ms) if project else None
    if not experiment:
        return project_id, None
    experiment_id = _experiment(conn, project_id, experiment, now_ms)
    if project_id is None:
        project_id = conn.execute("SELECT project_id FROM experiments WHERE id = ?", (experiment_id,)).fetchone()[0]
    return project_id, experiment_id


def _experiment(conn: sqlite3.Connection, project_id: str | None, name: str, now_ms: int) -> str:
    if project_id is None:
        project_id = _named(conn, "projects", "default", now_ms)
    row = conn.execute("SELECT id FROM experiments WHERE project_id = ? AND name = ?", (project_id, name)).fetchone()
    if row:
        return row[0]
    new = new_id("exp")
    conn.execute("INSERT INTO experiments (id, project_id, name, created_at) VALUES (?, ?, ?, ?)",
                 (new, project_id, name, now_ms))
    return new


def store_env(conn: sqlite3.Connection, session_id: str, env: dict[str, Any]) -> bool:
    """Keep the process environment a session reports on its run; the first one (rank 0,
    usually) wins, so ranks do not overwrite each other. True when this one was kept."""
    session = require_open(conn, session_id)
    return conn.execute("UPDATE runs SET env_snapshot = ? WHERE id = ? AND env_snapshot IS NULL",
                        (json.dumps(env, separators=(",", ":")), session.run_id)).rowcount == 1
