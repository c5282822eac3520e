"""The Experiments workspace's runs (issue 33 item 1): ``POST /api/v1/workspace/runs``.

One request answers a table of up to ``MAX_RUNS`` runs: each run's flattened config and, per
metric, its count and last, min, max and best points, all read from the summary each run keeps
as its batches arrive (``gpuplaned.domain.run_summary``), never from its points. A summary
kept before min and max were gets them once, from the stored chunks, in a store write
(``workspace_rows.fill_extremes``); later batches keep them up to date.

Who may ask: a read scope, as for ``GET /api/v1/runs``; a job's SDK token and a job's own
process are held to the SDK's routes (``confined_callers``), so they cannot.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from gpuplaned.domain import flat_config
from gpuplaned.protocol.converter import FieldInvalid
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.fields import field
from gpuplaned.protocol.workspace_replies import (
    ConfigKey,
    LastPoint,
    MetricCell,
    SummaryPoint,
    WorkspaceMetric,
    WorkspaceRun,
    WorkspaceRuns,
)
from gpuplaned.service import access
from gpuplaned.store import project_rows, sweep_rows, workspace_rows
from gpuplaned.store.workspace_rows import Extremes, WorkspaceRow
from gpuplaned.store.writer import write

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext

MAX_RUNS = 1000
MAX_NAMED = 200  # projects or experiments in one selection
_WORDS = {"minimize": "min", "maximize": "max"}
_KEY = {"min_length": 1, "max_length": 200}


def _some_selector(query: WorkspaceQuery) -> None:
    if not (query.projects or query.experiments or query.sweep or query.runs):
        raise FieldInvalid("projects", "name at least one project, experiment, sweep or run")


@attrs.frozen(kw_only=True)
class WorkspaceQuery:
    """Which runs: those in any named project, experiment or sweep, and those listed."""

    projects: list[str] = field(factory=list, max_items=MAX_NAMED, items=_KEY,
                                message=f"at most {MAX_NAMED} project names or ids",
                                description="project names or ids (prj_...)")
    experiments: list[str] = field(factory=list, max_items=MAX_NAMED, items=_KEY,
                                   message=f"at most {MAX_NAMED} experiment ids",
                                   description="experiment ids (exp_...)")
    sweep: str | None = field(default=None, min_length=1, max_length=200, description="a sweep's id (swp_...)")
    runs: list[str] = field(factory=list, max_items=MAX_RUNS, items=_KEY, message=f"at most {MAX_RUNS} run ids",
                            description="run ids")
    limit: int = field(default=MAX_RUNS, minimum=1, maximum=MAX_RUNS, description="at most this many runs, newest "
                                                                                   "first")

    __attrs_post_init__ = _some_selector


def _unknown(field_name: str, index: int, what: str, key: str) -> ApiError:
    return ApiError(ErrorCode.BAD_REQUEST, f"{field_name}[{index}]: no {what} {key!r}",
                    {"field": f"{field_name}[{index}]", field_name.rstrip("s"): key})


def _select(conn: Any, query: WorkspaceQuery) -> tuple[list[WorkspaceRow], str | None, dict[str, str | None]]:
    """The runs (one more than the limit: truncated?), the primary metric and the metrics' directions.

    Raises:
        ApiError: bad_request naming the first unknown project, experiment, sweep or run.
    """
    projects = []
    for i, key in enumerate(query.projects):
        project = project_rows.find_project(conn, key)
        if project is None:
            raise _unknown("projects", i, "project", key)
        projects.append(project.id)
    for i, key in enumerate(query.experiments):
        if project_rows.find_experiment(conn, key) is None:
            raise _unknown("experiments", i, "experiment", key)
    sweep = sweep_rows.get(conn, query.sweep) if query.sweep else None
    if query.sweep and sweep is None:
        raise ApiError(ErrorCode.BAD_REQUEST, f"sweep: no sweep {query.sweep!r}", {"field": "sweep",
                                                                                  "sweep": query.sweep})
    missing = workspace_rows.missing_runs(conn, query.runs) if query.runs else []
    if missing:
        raise _unknown("runs", query.runs.index(missing[0]), "run", missing[0])
    rows = workspace_rows.select_runs(conn, project_ids=projects, experiment_ids=query.experiments,
                                      sweep_id=sweep.id if sweep else None, run_ids=query.runs, limit=query.limit + 1)
    primary = sweep.metric if sweep is not None and sweep.metric else _primary(conn, rows)
    names = sorted({name for row in rows for name in _summary_metrics(row)} | ({primary} if primary else set()))
    return rows, primary, workspace_rows.directions(conn, names)


def _primary(conn: Any, rows: list[WorkspaceRow]) -> str | None:
    """The primary metric of the runs' one experiment, else of their one project, else the global one."""
    (experiment_id, *others), (project_id, *more) = ({row.experiment_id for row in rows} or {None},
                                                     {row.project_id for row in rows} or {None})
    experiment = project_rows.find_experiment(conn, experiment_id) if experiment_id and not others else None
    project = project_rows.find_project(conn, project_id) if project_id and not more else None
    return project_rows.resolve(conn, project, experiment).metric


def _summary_metrics(row: WorkspaceRow) -> dict[str, Any]:
    return (row.summary or {}).get("metrics") or {}


async def require_runs(shared: ServerContext, run_ids: list[str]) -> None:
    """Raises:
        ApiError: not_found naming the first of ``run_ids`` that no run has (``run_ids[i]``).
    """
    missing = await access.readers(shared, "runs").run(lambda conn: workspace_rows.missing_runs(conn, run_ids))
    if missing:
        at = run_ids.index(missing[0])
        raise ApiError(ErrorCode.NOT_FOUND, f"run_ids[{at}]: no run {missing[0]!r}",
                       {"field": f"run_ids[{at}]", "run_id": missing[0]})


async def _extremes(shared: ServerContext, wanted: list[tuple[str, str]]) -> dict[tuple[str, str], Extremes]:
    """Min and max for summaries kept before they were: stored once by the store; read only
    (and asked again next time) where this daemon cannot write now."""
    try:
        port = access.store_port(shared, "runs")
    except ApiError:
        return await access.readers(shared, "runs").run(lambda conn: workspace_rows.stored_extremes(conn, wanted))
    return await write(port, lambda conn: workspace_rows.fill_extremes(conn, wanted))


def _point(point: dict[str, Any] | None) -> SummaryPoint | None:
    return None if point is None else SummaryPoint(point["step"], point["value"])


def _cell(metric: dict[str, Any], extremes: Extremes | None) -> MetricCell:
    latest = metric.get("latest")
    if extremes is not None:
        low, high = (None if p is None else SummaryPoint(p[1], p[0]) for p in extremes)
    else:
        low, high = _point(metric.get("min")), _point(metric.get("max"))
    return MetricCell(count=metric.get("count", 0), last=None if latest is None else LastPoint(latest["step"],
                                                                                               latest["value"]),
                      min=low, max=high, best=_point(metric.get("best")))


def _config(row: WorkspaceRow) -> dict[str, Any]:
    """The flattened config; a sweep trial's values fill the keys it lacks (the script may not
    have passed them to init)."""
    settings = row.settings.get("config")
    config = flat_config.flatten(settings if isinstance(settings, dict) else {})
    for key, value in (row.sweep_values or {}).items():
        config.setdefault(key, value)
    return config


async def workspace_runs(shared: ServerContext, query: WorkspaceQuery) -> WorkspaceRuns:
    """The selected runs, newest first, with their configs and metric summaries; the metrics
    (primary first, then by name) and config keys (with their types) across them."""
    rows, primary, directions = await access.readers(shared, "runs").run(lambda conn: _select(conn, query))
    truncated = len(rows) > query.limit
    rows = rows[:query.limit]
    wanted = [(row.id, name) for row in rows for name, metric in _summary_metrics(row).items() if "min" not in metric]
    filled = await _extremes(shared, wanted) if wanted else {}
    runs, configs, names = [], [], set()
    for row in rows:
        config = _config(row)
        configs.append(config)
        metrics = {name: _cell(metric, filled.get((row.id, name))) for name, metric in _summary_metrics(row).items()}
        names.update(metrics)
        tags = row.settings.get("tags")
        runs.append(WorkspaceRun(
            id=row.id, name=row.name, status=row.status, job_id=row.job_id, project=row.project,
            experiment=row.experiment, experiment_id=row.experiment_id, sweep_id=row.sweep_id,
            sweep_trial=row.sweep_trial, tags=list(tags) if isinstance(tags, list) else [], created_at=row.created_at,
            ended_at=row.ended_at, config={k: flat_config.json_safe(v) for k, v in config.items()}, metrics=metrics))
    order = sorted(names | ({primary} if primary else set()), key=lambda n: (n != primary, n))
    return WorkspaceRuns(
        runs=runs,
        metrics=[WorkspaceMetric(name, _WORDS.get(directions.get(name) or ""), name == primary) for name in order],
        config_keys=[ConfigKey(key, types) for key, types in flat_config.key_types(configs).items()],
        primary_metric=primary, truncated=truncated)
