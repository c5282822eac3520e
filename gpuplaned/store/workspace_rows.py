"""The Experiments workspace's reads: the runs a selection names, with what a table of them
shows (config, summary, sweep trial), in one query; and the summaries' min and max filled in
for metrics summarised before those were kept (``gpuplaned.service.api.workspace``)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

import attrs

from gpuplaned.store.paging import one_of
from gpuplaned.store.project_rows import best_point


@attrs.frozen
class WorkspaceRow:
    id: str
    name: str | None
    status: str
    job_id: str | None
    project_id: str | None
    project: str | None
    experiment_id: str | None
    experiment: str | None
    sweep_id: str | None
    sweep_trial: int | None
    sweep_values: dict[str, Any] | None
    settings: dict[str, Any]  # what init() passed: {"config": ..., "tags": [...]}
    created_at: int
    ended_at: int | None
    summary: dict[str, Any] | None


_SELECT = """SELECT r.id, r.name, r.status, r.job_id, p.id, p.name, r.experiment_id, e.name, j.sweep_id, j.sweep_trial,
    j.sweep_values, r.config, r.created_at, r.finished_at, r.summary
    FROM runs r
    LEFT JOIN experiments e ON e.id = r.experiment_id
    LEFT JOIN projects p ON p.id = COALESCE(r.project_id, e.project_id)
    LEFT JOIN jobs j ON j.id = r.job_id"""


def select_runs(conn: sqlite3.Connection, *, project_ids: Sequence[str], experiment_ids: Sequence[str],
                sweep_id: str | None, run_ids: Sequence[str], limit: int) -> list[WorkspaceRow]:
    """The runs in any of the projects (directly, or through an experiment of theirs), the
    experiments or the sweep, or listed: newest first, at most ``limit``."""
    clauses: list[str] = []
    params: list[Any] = []
    for column, values in (("r.project_id", project_ids), ("e.project_id", project_ids),
                           ("r.experiment_id", experiment_ids), ("r.id", run_ids)):
        if values:
            clauses.append(one_of(column, values))
            params += values
    if sweep_id is not None:
        clauses.append("j.sweep_id = ?")
        params.append(sweep_id)
    if not clauses:
        return []
    rows = conn.execute(f"{_SELECT} WHERE {' OR '.join(clauses)} ORDER BY r.created_at DESC, r.id DESC LIMIT ?",
                        (*params, limit)).fetchall()
    return [WorkspaceRow(*row[:10], json.loads(row[10]) if row[10] else None, json.loads(row[11]) if row[11] else {},
                         row[12], row[13], json.loads(row[14]) if row[14] else None) for row in rows]


def missing_runs(conn: sqlite3.Connection, run_ids: Sequence[str]) -> list[str]:
    """Of ``run_ids``, those no run has."""
    found = {row[0] for row in conn.execute(f"SELECT id FROM runs WHERE {one_of('id', run_ids)}", list(run_ids))}
    return [run_id for run_id in run_ids if run_id not in found]


def directions(conn: sqlite3.Connection, names: Sequence[str]) -> dict[str, str | None]:
    """Each defined metric's direction (minimize, maximize or None)."""
    out: dict[str, str | None] = {}
    for at in range(0, len(names), 500):  # SQLite's limit on parameters
        part = names[at:at + 500]
        out.update(conn.execute(f"SELECT name, direction FROM metric_definitions WHERE {one_of('name', part)}",
                                part).fetchall())
    return out


Extremes = tuple[tuple[float, int] | None, tuple[float, int] | None]  # (value, step) of the min and the max


def stored_extremes(conn: sqlite3.Connection, wanted: Iterable[tuple[str, str]]) -> dict[tuple[str, str], Extremes]:
    """The lowest and highest finite points of each (run, metric) from its stored chunks (each
    chunk row's min and max leave usually one chunk to decode)."""
    out: dict[tuple[str, str], Extremes] = {}
    for run_id, name in wanted:
        row = conn.execute("SELECT id FROM ts_series WHERE kind = 'run' AND owner = ? AND name = ?",
                           (run_id, name)).fetchone()
        if row is None:
            out[run_id, name] = (None, None)
        else:
            out[run_id, name] = (best_point(conn, row[0], "minimize"), best_point(conn, row[0], "maximize"))
    return out


def fill_extremes(conn: sqlite3.Connection, wanted: Iterable[tuple[str, str]]) -> dict[tuple[str, str], Extremes]:
    """In the store's transaction: the min and max of each (run, metric) whose summary still
    lacks them, from its stored points, kept in the summary (a batch stored since then keeps
    them up to date: ``gpuplaned.domain.run_summary``). Returns what each summary holds now."""
    by_run: dict[str, list[str]] = {}
    for run_id, name in wanted:
        by_run.setdefault(run_id, []).append(name)
    out: dict[tuple[str, str], Extremes] = {}
    for run_id, names in by_run.items():
        row = conn.execute("SELECT summary FROM runs WHERE id = ?", (run_id,)).fetchone()
        summary = json.loads(row[0]) if row and row[0] else None
        metrics = (summary or {}).get("metrics") or {}
        missing = [name for name in names if name in metrics and "min" not in metrics[name]]
        for (_run, name), extremes in stored_extremes(conn, [(run_id, name) for name in missing]).items():
            for key, point in zip(("min", "max"), extremes):
                metrics[name][key] = None if point is None else {"step": point[1], "value": point[0]}
        for name in names:
            if name in metrics:
                out[run_id, name] = tuple(None if metrics[name].get(key) is None else
                                          (metrics[name][key]["value"], metrics[name][key]["step"])
                                          for key in ("min", "max"))  # type: ignore[assignment]
        if missing:
            conn.execute("UPDATE runs SET summary = ? WHERE id = ?", (json.dumps(summary, separators=(",", ":")),
                                                                     run_id))
    return out
