"""Rows of projects, experiments, metric definitions and primary metrics (seed 000 sections 4.2 and 9).

SDK sessions also create projects, experiments and metric definitions on first sight
(``gpuplaned.store.session_rows``, ``gpuplaned.service.api.sessions.summarize``); what is edited here
is kept by them (they only insert what is missing).

The primary metric is set per experiment (``experiment_primary_metrics``), per project
(``project_primary_metrics``) and globally (the one ``metric_definitions`` row with
``is_primary = 1``), and resolved in that order. Naming a metric no run has logged yet
creates its definition, with the direction its name suggests.

A project or experiment that runs (or jobs) still belong to is never deleted: that is a
conflict, so no run is orphaned and no run data goes with it. A project without runs is
deleted with its experiments, which hold none either.

Every function takes the caller's connection: writes run inside the store actor's
transaction (an ``ApiError`` raised here rolls that write back), reads on a reader.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from gpuplaned.domain.run_summary import best_of, better, direction_for, resolve_primary
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.ids import new_id
from gpuplaned.protocol.project_replies import Experiment, MetricDefinition, PrimaryMetric, Project
from gpuplaned.protocol.reply_words import Ref
from gpuplaned.store.paging import newest_first
from gpuplaned.tsdb import chunks
from gpuplaned.tsdb.series import RAW


# --- projects ------------------------------------------------------------------------------

_PROJECT = """SELECT p.id, p.name, p.description, p.created_at,
    (SELECT metric_name FROM project_primary_metrics WHERE project_id = p.id),
    (SELECT count(*) FROM experiments WHERE project_id = p.id),
    (SELECT count(*) FROM runs WHERE project_id = p.id)
    + (SELECT count(*) FROM runs r JOIN experiments e ON e.id = r.experiment_id
       WHERE e.project_id = p.id AND r.project_id IS NULL)
    FROM projects p"""


def find_project(conn: sqlite3.Connection, key: str) -> Project | None:
    """The project with this id, else with this name."""
    row = conn.execute(f"{_PROJECT} WHERE p.id = ?", (key,)).fetchone()
    if row is None:
        row = conn.execute(f"{_PROJECT} WHERE p.name = ?", (key,)).fetchone()
    return Project(*row) if row else None


def require_project(conn: sqlite3.Connection, key: str, field: str | None = None) -> Project:
    """Raises:
        ApiError: not_found naming ``key`` (and ``field``, when it came from a body or query).
    """
    found = find_project(conn, key)
    if found is None:
        where = f"{field}: " if field else ""
        raise ApiError(ErrorCode.NOT_FOUND, f"{where}no project {key!r} (by id or name)",
                       {"project": key, **({"field": field} if field else {})})
    return found


def list_projects(conn: sqlite3.Connection, limit: int, before: tuple[int, str] | None) -> list[Project]:
    """Newest first; ``before`` = (created_at, id) of the previous page's last project."""
    return [Project(*r) for r in newest_first(conn, _PROJECT, [], [], before, limit, alias="p")]


def _name_free(conn: sqlite3.Connection, sql: str, params: Sequence[Any], what: str, name: str) -> None:
    taken = conn.execute(sql, params).fetchone()
    if taken is not None:
        raise ApiError(ErrorCode.CONFLICT, f"name: {what} named {name!r} exists ({taken[0]})",
                       {"field": "name", "id": taken[0]})


def insert_project(conn: sqlite3.Connection, name: str, description: str | None, now_ms: int) -> str:
    """Raises:
        ApiError: conflict when the name is taken.
    """
    _name_free(conn, "SELECT id FROM projects WHERE name = ?", (name,), "a project", name)
    project_id = new_id("prj")
    conn.execute("INSERT INTO projects (id, name, description, created_at) VALUES (?, ?, ?, ?)",
                 (project_id, name, description, now_ms))
    return project_id


def update_project(conn: sqlite3.Connection, project: Project, changes: Mapping[str, Any]) -> None:
    """``changes``: ``name`` and/or ``description``."""
    if "name" in changes and changes["name"] != project.name:
        _name_free(conn, "SELECT id FROM projects WHERE name = ?", (changes["name"],), "a project", changes["name"])
    for column in ("name", "description"):
        if column in changes:
            conn.execute(f"UPDATE projects SET {column} = ? WHERE id = ?", (changes[column], project.id))


def delete_project(conn: sqlite3.Connection, project: Project) -> None:
    """Delete a project holding no runs or jobs, with its (empty) experiments.

    Raises:
        ApiError: conflict, with the counts, when runs or jobs belong to it.
    """
    jobs = conn.execute("SELECT count(*) FROM jobs WHERE project_id = ? OR experiment_id IN "
                        "(SELECT id FROM experiments WHERE project_id = ?)", (project.id, project.id)).fetchone()[0]
    if project.runs or jobs:
        raise ApiError(ErrorCode.CONFLICT,
                       f"project {project.name!r} still has {project.runs} run(s) and {jobs} job(s); "
                       "it is not deleted (runs are never orphaned or deleted with their project)",
                       {"project_id": project.id, "runs": project.runs, "jobs": jobs})
    conn.execute("DELETE FROM experiments WHERE project_id = ?", (project.id,))
    conn.execute("DELETE FROM projects WHERE id = ?", (project.id,))


# --- experiments ---------------------------------------------------------------------------

_EXPERIMENT = """SELECT e.id, e.project_id, p.name, e.name, e.description, e.created_at,
    (SELECT metric_name FROM experiment_primary_metrics WHERE experiment_id = e.id),
    (SELECT count(*) FROM runs WHERE experiment_id = e.id)
    FROM experiments e JOIN projects p ON p.id = e.project_id"""


def find_experiment(conn: sqlite3.Connection, experiment_id: str) -> Experiment | None:
    row = conn.execute(f"{_EXPERIMENT} WHERE e.id = ?", (experiment_id,)).fetchone()
    return Experiment(*row) if row else None


def find_experiment_named(conn: sqlite3.Connection, project_id: str, name: str) -> Experiment | None:
    row = conn.execute(f"{_EXPERIMENT} WHERE e.project_id = ? AND e.name = ?", (project_id, name)).fetchone()
    return Experiment(*row) if row else None


def require_experiment(conn: sqlite3.Connection, experiment_id: str, project: Project | None = None,
                       field: str | None = None) -> Experiment:
    """By id; with ``project``, also by name within it.

    Raises:
        ApiError: not_found.
    """
    found = find_experiment(conn, experiment_id)
    if found is not None and project is not None and found.project_id != project.id:
        found = None
    if found is None and project is not None:
        found = find_experiment_named(conn, project.id, experiment_id)
    if found is None:
        where = f"{field}: " if field else ""
        scope = f" in project {project.name!r}" if project is not None else ""
        raise ApiError(ErrorCode.NOT_FOUND, f"{where}no experiment {experiment_id!r}{scope}",
                       {"experiment": experiment_id, **({"field": field} if field else {})})
    return found


def list_experiments(conn: sqlite3.Connection, project_id: str, limit: int,
                     before: tuple[int, str] | None) -> list[Experiment]:
    """A project's experiments, newest first."""
    rows = newest_first(conn, _EXPERIMENT, ["e.project_id = ?"], [project_id], before, limit, alias="e")
    return [Experiment(*r) for r in rows]


def insert_experiment(conn: sqlite3.Connection, project: Project, name: str, description: str | None,
                      now_ms: int) -> str:
    """Raises:
        ApiError: conflict when the project has an experiment of that name.
    """
    _name_free(conn, "SELECT id FROM experiments WHERE project_id = ? AND name = ?", (project.id, name),
               f"an experiment of project {project.name!r}", name)
    experiment_id = new_id("exp")
    conn.execute("INSERT INTO experiments (id, project_id, name, description, created_at) VALUES (?, ?, ?, ?, ?)",
                 (experiment_id, project.id, name, description, now_ms))
    return experiment_id


def update_experiment(conn: sqlite3.Connection, experiment: Experiment, changes: Mapping[str, Any]) -> None:
    if "name" in changes and changes["name"] != experiment.name:
        _name_free(conn, "SELECT id FROM experiments WHERE project_id = ? AND name = ?",
                   (experiment.project_id, changes["name"]), f"an experiment of project {experiment.project!r}",
                   changes["name"])
    for column in ("name", "description"):
        if column in changes:
            conn.execute(f"UPDATE experiments SET {column} = ? WHERE id = ?", (changes[column], experiment.id))


def delete_experiment(conn: sqlite3.Connection, experiment: Experiment) -> None:
    """Raises:
        ApiError: conflict when runs or jobs belong to it.
    """
    jobs = conn.execute("SELECT count(*) FROM jobs WHERE experiment_id = ?", (experiment.id,)).fetchone()[0]
    if experiment.runs or jobs:
        raise ApiError(ErrorCode.CONFLICT,
                       f"experiment {experiment.name!r} still has {experiment.runs} run(s) and {jobs} job(s); "
                       "it is not deleted (runs are never orphaned or deleted with their experiment)",
                       {"experiment_id": experiment.id, "runs": experiment.runs, "jobs": jobs})
    conn.execute("DELETE FROM experiments WHERE id = ?", (experiment.id,))


# --- metric definitions --------------------------------------------------------------------

_DEFINITION = "SELECT name, display_name, direction, scope, unit, is_primary, created_at FROM metric_definitions"


def _definition(row: Sequence[Any]) -> MetricDefinition:
    name, display_name, direction, scope, unit, is_primary, created_at = row
    return MetricDefinition(name, display_name, direction, scope, unit, bool(is_primary), created_at)


def get_definition(conn: sqlite3.Connection, name: str) -> MetricDefinition | None:
    row = conn.execute(f"{_DEFINITION} WHERE name = ?", (name,)).fetchone()
    return _definition(row) if row else None


def require_definition(conn: sqlite3.Connection, name: str) -> MetricDefinition:
    found = get_definition(conn, name)
    if found is None:
        raise ApiError(ErrorCode.NOT_FOUND, f"no metric definition {name!r} (a metric gets one when a run first "
                                            "logs it)", {"metric": name})
    return found


def ensure_definition(conn: sqlite3.Connection, name: str, now_ms: int) -> None:
    """First sight: a definition with the direction the name suggests (an existing one is kept)."""
    conn.execute("INSERT OR IGNORE INTO metric_definitions (name, direction, created_at) VALUES (?, ?, ?)",
                 (name, direction_for(name), now_ms))


def directions(conn: sqlite3.Connection, names: Sequence[str], now_ms: int) -> dict[str, str | None]:
    """Each name's direction, a definition made first for those new (``ensure_definition``)."""
    conn.executemany("INSERT OR IGNORE INTO metric_definitions (name, direction, created_at) VALUES (?, ?, ?)",
                     [(name, direction_for(name), now_ms) for name in names])
    return dict(conn.execute(f"SELECT name, direction FROM metric_definitions WHERE name IN "
                             f"({','.join('?' * len(names))})", tuple(names)))


def list_definitions(conn: sqlite3.Connection, *, project_id: str | None, experiment_id: str | None, limit: int,
                     before: tuple[int, str] | None) -> list[MetricDefinition]:
    """Newest first (then by name, descending); with a project or experiment, only the metrics
    its runs logged. ``before`` = (created_at, name) of the previous page's last definition."""
    clauses: list[str] = []
    params: list[Any] = []
    if project_id is not None:
        clauses.append("name IN (SELECT s.name FROM ts_series s JOIN runs r ON r.id = s.owner "
                       "LEFT JOIN experiments e ON e.id = r.experiment_id WHERE s.kind = 'run' "
                       "AND (r.project_id = ? OR (r.project_id IS NULL AND e.project_id = ?)))")
        params += [project_id, project_id]
    if experiment_id is not None:
        clauses.append("name IN (SELECT s.name FROM ts_series s JOIN runs r ON r.id = s.owner "
                       "WHERE s.kind = 'run' AND r.experiment_id = ?)")
        params.append(experiment_id)
    return [_definition(r) for r in newest_first(conn, _DEFINITION, clauses, params, before, limit, key="name")]


def update_definition(conn: sqlite3.Connection, definition: MetricDefinition, changes: Mapping[str, Any]) -> int:
    """Apply ``changes`` (display_name, direction, scope, unit). A new direction recomputes the
    best point of that metric in every run's summary; returns how many runs were updated."""
    for column in ("display_name", "direction", "scope", "unit"):
        if column in changes:
            conn.execute(f"UPDATE metric_definitions SET {column} = ? WHERE name = ?",
                         (changes[column], definition.name))
    if "direction" in changes and changes["direction"] != definition.direction:
        return recompute_best(conn, definition.name, changes["direction"])
    return 0


def recompute_best(conn: sqlite3.Connection, name: str, direction: str | None) -> int:
    """Set ``metrics[name].direction`` and ``.best`` in the summary of every run that logged
    ``name``, from its stored points: the best is kept incrementally by direction, so a changed
    direction invalidates it. Returns how many summaries changed."""
    updated = 0
    owners = conn.execute("SELECT owner, id FROM ts_series WHERE kind = 'run' AND name = ?", (name,)).fetchall()
    for run_id, series_id in owners:
        row = conn.execute("SELECT summary FROM runs WHERE id = ?", (run_id,)).fetchone()
        if row is None or not row[0]:
            continue
        summary = json.loads(row[0])
        metric = (summary.get("metrics") or {}).get(name)
        if metric is None:
            continue
        metric["direction"] = direction
        best = best_point(conn, series_id, direction)
        if best is None:
            metric.pop("best", None)
        else:
            metric["best"] = {"step": best[1], "value": best[0]}
        conn.execute("UPDATE runs SET summary = ? WHERE id = ?", (json.dumps(summary, separators=(",", ":")), run_id))
        updated += 1
    return updated


def best_point(conn: sqlite3.Connection, series_id: int, direction: str | None) -> tuple[float, int] | None:
    """``(value, step)`` of a run series' best finite point (on a tie, the lowest step).

    Each chunk row carries its min and max, so chunks are decoded best-first and only while
    one could still hold a value as good as the best found: usually one chunk.
    """
    if direction is None:
        return None
    found = chunks.select(conn, series_id, RAW)
    edge = (lambda c: c.vmin) if direction == "minimize" else (lambda c: c.vmax)
    ordered = sorted((c for c in found if edge(c) == edge(c)),  # an all-NaN chunk has no extreme
                     key=edge, reverse=direction == "maximize")
    best: tuple[float, int] | None = None
    for chunk in ordered:
        if best is not None and better(direction, best[0], edge(chunk)):
            break
        _ts, steps, values = chunks.data(conn, chunk, has_steps=True)
        here = best_of(steps, values, direction)
        if here is not None and (best is None or better(direction, here[0], best[0])
                                 or (here[0] == best[0] and here[1] < best[1])):
            best = here
    return best


# --- primary metrics -----------------------------------------------------------------------


def set_primary(conn: sqlite3.Connection, metric: str | None, now_ms: int, *, project: Project | None = None,
                experiment: Experiment | None = None) -> None:
    """Set (or with None, clear) the primary metric of an experiment, else a project, else globally."""
    if metric is not None:
        ensure_definition(conn, metric, now_ms)
    if experiment is not None:
        table, key, owner = "experiment_primary_metrics", "experiment_id", experiment.id
    elif project is not None:
        table, key, owner = "project_primary_metrics", "project_id", project.id
    else:
        conn.execute("UPDATE metric_definitions SET is_primary = (name IS ?) WHERE is_primary = 1 OR name IS ?",
                     (metric, metric))
        return
    if metric is None:
        conn.execute(f"DELETE FROM {table} WHERE {key} = ?", (owner,))
    else:
        conn.execute(f"INSERT INTO {table} ({key}, metric_name, created_at) VALUES (?, ?, ?) "
                     f"ON CONFLICT ({key}) DO UPDATE SET metric_name = excluded.metric_name", (owner, metric, now_ms))


def global_primary(conn: sqlite3.Connection) -> str | None:
    row = conn.execute("SELECT name FROM metric_definitions WHERE is_primary = 1 ORDER BY name LIMIT 1").fetchone()
    return row[0] if row else None


def resolve(conn: sqlite3.Connection, project: Project | None, experiment: Experiment | None) -> PrimaryMetric:
    """The primary metric for an experiment (and its project), a project, or globally."""
    if experiment is not None and project is None:
        project = find_project(conn, experiment.project_id)
    settings = {"experiment": experiment.primary_metric if experiment else None,
                "project": project.primary_metric if project else None,
                "global": global_primary(conn)}
    metric, source = resolve_primary(settings["experiment"], settings["project"], settings["global"])
    return PrimaryMetric(metric, source, Ref(project.id, project.name) if project else None,
                         Ref(experiment.id, experiment.name) if experiment else None, settings)


def run_context(conn: sqlite3.Connection, run_id: str) -> tuple[PrimaryMetric, str | None, dict[str, Any] | None]:
    """A run's primary metric (by its experiment, then project: an experiment's project when the
    run names none), that metric's direction and the run's stored summary.

    Raises:
        ApiError: not_found for an unknown run.
    """
    row = conn.execute("SELECT project_id, experiment_id, summary FROM runs WHERE id = ?", (run_id,)).fetchone()
    if row is None:
        raise ApiError(ErrorCode.NOT_FOUND, f"no run {run_id!r}", {"run_id": run_id})
    project_id, experiment_id, summary = row
    experiment = find_experiment(conn, experiment_id) if experiment_id else None
    project_id = project_id or (experiment.project_id if experiment else None)
    project = find_project(conn, project_id) if project_id else None
    primary = resolve(conn, project, experiment)
    definition = get_definition(conn, primary.metric) if primary.metric else None
    return primary, definition.direction if definition else None, json.loads(summary) if summary else None
