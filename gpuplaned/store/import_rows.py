"""Rows of an imported run (``gpuplanectl run import DIR``, source ``import``).

The run is keyed by its dir's realpath (``runs.import_key``, unique): ``claim`` returns the
run already imported from it, or makes a new one, RUNNING until ``finish`` marks it
SUCCEEDED (a finished run's files: the import cannot tell how the training itself ended).
What the import found (the dir, its signature, what it stored, what it skipped) is kept on
the run beside its config, under ``import``. The dir's stdout and stderr logs are registered
as the run's ``artifacts`` of kind ``log`` (path, stream, size, lines), never copied: the log
tails the API keeps are a job attempt's (``job_logs``), and an imported run has no job;
``service.run_logs`` reads the files themselves back.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterable
from typing import Any

import attrs

from gpuplaned.protocol.ids import new_id
from gpuplaned.store.session_rows import placement

LOG_KIND = "log"


@attrs.frozen
class Claim:
    run_id: str
    created: bool  # made by this claim
    finished: bool  # an earlier import of the dir finished: nothing is to be read again
    record: dict[str, Any]  # the run's ``import`` record: dir, signature, and once finished what was stored


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def claim(conn: sqlite3.Connection, key: str, signature: str, *, name: str | None, project: str | None,
          experiment: str | None, now_ms: int) -> Claim:
    """The run imported from the dir ``key``, made RUNNING on first sight."""
    row = conn.execute("SELECT id, status, config FROM runs WHERE import_key = ?", (key,)).fetchone()
    if row is not None:
        settings = json.loads(row[2]) if row[2] else {}
        return Claim(row[0], False, row[1] != "RUNNING", settings.get("import") or {})
    run_id = new_id("run")
    project_id, experiment_id = placement(conn, project, experiment, now_ms)
    record = {"dir": key, "signature": signature}
    conn.execute(
        "INSERT INTO runs (id, project_id, experiment_id, name, source, status, config, created_at, import_key) "
        "VALUES (?, ?, ?, ?, 'import', 'RUNNING', ?, ?, ?)",
        (run_id, project_id, experiment_id, name or os.path.basename(key) or key,
         _dumps({"config": {}, "tags": [], "import": record}), now_ms, key))
    return Claim(run_id, True, False, record)


def finish(conn: sqlite3.Connection, run_id: str, record: dict[str, Any], *, started_at: int | None,
           finished_at: int | None, now_ms: int) -> None:
    """Mark the import done: the run SUCCEEDED, its times those of its files, ``record`` kept."""
    row = conn.execute("SELECT config FROM runs WHERE id = ?", (run_id,)).fetchone()
    settings = json.loads(row[0]) if row and row[0] else {}
    settings["import"] = {**(settings.get("import") or {}), **record}
    conn.execute("UPDATE runs SET status = 'SUCCEEDED', config = ?, started_at = coalesce(?, started_at, created_at), "
                 "finished_at = coalesce(?, ?) WHERE id = ?",
                 (_dumps(settings), started_at, finished_at, now_ms, run_id))


def add_logs(conn: sqlite3.Connection, run_id: str, logs: Iterable[tuple[str, dict[str, Any]]], now_ms: int) -> int:
    """Register the run's log files (path, metadata) once each; returns how many were new."""
    known = {r[0] for r in conn.execute("SELECT path FROM artifacts WHERE run_id = ? AND kind = ?",
                                        (run_id, LOG_KIND))}
    new = [(new_id("art"), run_id, LOG_KIND, path, _dumps(meta), now_ms) for path, meta in logs if path not in known]
    conn.executemany("INSERT INTO artifacts (id, run_id, kind, path, metadata, created_at) VALUES (?, ?, ?, ?, ?, ?)",
                     new)
    return len(new)


def list_logs(conn: sqlite3.Connection, run_id: str) -> list[dict[str, Any]]:
    """The run's registered log files, by path."""
    rows = conn.execute("SELECT path, metadata FROM artifacts WHERE run_id = ? AND kind = ? ORDER BY path",
                        (run_id, LOG_KIND))
    return [{"path": path, **(json.loads(meta) if meta else {})} for path, meta in rows]
