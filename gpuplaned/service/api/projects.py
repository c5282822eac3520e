"""Projects, experiments, metric definitions and the primary metric, for the API (seed 000 §4.2, §9, §11.1).

Bodies are checked here, whole, before anything is written; every write is one store
transaction, so a refused request (400, 404, 409) changes nothing. Rules:

- Names: 1 to 200 characters, no "/" or control character, not starting with ".", no
  space at either end, not shaped like an id (``prj_<ULID>``). Projects are unique by name; experiments by name within their project. A
  project is found by its id or its name; an experiment by its id (or, under its project,
  its name).
- ``primary_metric`` (on a project or experiment) or ``PUT /primary-metric`` names any metric
  (one not logged yet gets its definition now); null clears it. It resolves experiment ->
  project -> global.
- A metric definition's ``direction`` is minimize, maximize or none (null); changing it
  recomputes that metric's best point in every run's summary, in the same transaction.
- Deleting a project or experiment that runs or jobs belong to is a 409 that names the counts.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import attrs

from gpuplaned.protocol import cursors
from gpuplaned.protocol.fields import UNSET, field, say
from gpuplaned.protocol.project_replies import (
    METRIC_SCOPES,
    Experiment,
    ExperimentList,
    ExperimentReply,
    MetricDefinition,
    MetricDefinitionList,
    MetricDefinitionReply,
    MetricDefinitionUpdated,
    PrimaryMetric,
    PrimaryMetricReply,
    Project,
    ProjectList,
    ProjectReply,
)
from gpuplaned.service import access
from gpuplaned.service.link.registry import now_ms
from gpuplaned.store import project_rows
from gpuplaned.store.writer import write
from gpuplaned.tsdb.series import MAX_NAME

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext

MAX_NAME_LEN = 200
MAX_DESCRIPTION = 2000
MAX_DISPLAY_NAME = 200
MAX_UNIT = 50
DIRECTIONS = ("minimize", "maximize", "none")
_ID = re.compile(r"^(prj|exp)_[0-9A-HJKMNP-TV-Z]{26}$")
# Also the OpenAPI pattern: a name is a path segment (/projects/{key}), so no "/", no leading "."
NAME_PATTERN = r"^[^\s/.\x00-\x1f\x7f]([^/\x00-\x1f\x7f]{0,198}[^\s/\x00-\x1f\x7f])?$"
METRIC_PATTERN = r"^[^\x00-\x1f\x7f]{1,200}$"


def _store(shared: ServerContext) -> Any:
    return access.store_port(shared, "projects")


def _readers(shared: ServerContext) -> Any:
    return access.readers(shared, "projects")


# --- checking bodies -----------------------------------------------------------------------


_NAME_RULE = (f"1 to {MAX_NAME_LEN} characters, no '/' or control characters, not starting with '.', no space at "
              "either end, and not shaped like an id; got {value!r}")
_METRIC_RULE = f"a metric name (1 to {MAX_NAME} characters, no control characters), or null"


def _not_an_id(value: str) -> str | None:
    return say(_NAME_RULE, value) if _ID.match(value) else None


def _text(limit: int) -> Any:
    return field(default=UNSET, max_length=limit, message=f"a string of at most {limit} characters, or null")


_NAME_FIELD = {"pattern": NAME_PATTERN, "check": _not_an_id, "message": _NAME_RULE,
               "description": "unique (per project, for an experiment); not shaped like an id"}
_PRIMARY = {"pattern": METRIC_PATTERN, "message": _METRIC_RULE,
            "description": "this level's primary metric (one not logged yet gets its definition now); null: inherit"}


@attrs.frozen(kw_only=True)
class ProjectCreate:
    name: str = field(**_NAME_FIELD)
    description: str | None = _text(MAX_DESCRIPTION)
    primary_metric: str | None = field(default=UNSET, **_PRIMARY)


@attrs.frozen(kw_only=True)
class ProjectPatch:
    """Only the fields present change; null clears one."""

    name: str = field(default=UNSET, **_NAME_FIELD)
    description: str | None = _text(MAX_DESCRIPTION)
    primary_metric: str | None = field(default=UNSET, **_PRIMARY)


@attrs.frozen(kw_only=True)
class ExperimentCreate(ProjectCreate):
    pass


@attrs.frozen(kw_only=True)
class ExperimentPatch(ProjectPatch):
    """Only the fields present change; null clears one."""


def _enum_or_null(values: tuple[str, ...], description: str | None = None) -> Any:
    return field(default=UNSET, enum=(*values, None), message=f"one of {', '.join(values)}, or null",
                 description=description)


@attrs.frozen(kw_only=True)
class MetricDefinitionPatch:
    direction: str | None = _enum_or_null(DIRECTIONS, "none or null: no direction; a change recomputes every "
                                                      "run's best")
    display_name: str | None = _text(MAX_DISPLAY_NAME)
    scope: str | None = _enum_or_null(METRIC_SCOPES)
    unit: str | None = _text(MAX_UNIT)


@attrs.frozen(kw_only=True)
class PrimaryMetricPut:
    """Neither project nor experiment: the global primary metric."""

    metric: str | None = field(pattern=METRIC_PATTERN, message=_METRIC_RULE,
                               description="a metric name; null clears the setting")
    project: str | None = field(default=None, min_length=1, message="an id or name",
                                description="the project's id or name")
    experiment: str | None = field(default=None, min_length=1, message="an id or name",
                                   description="the experiment's id (or its name, with project)")


def _present(body: Any) -> dict[str, Any]:
    """The fields a body named (empty text read as null)."""
    return {k: v or None if isinstance(v, str) and k != "name" else v
            for k, v in attrs.asdict(body, recurse=False).items() if v is not UNSET}


def parse_definition_patch(body: MetricDefinitionPatch) -> dict[str, Any]:
    out = _present(body)
    if out.get("direction") == "none":
        out["direction"] = None
    return out


# --- projects ------------------------------------------------------------------------------


async def list_projects(shared: ServerContext, limit: int, cursor: str | None) -> ProjectList:
    before = cursors.decode("projects", cursor, (int, str))
    found = await _readers(shared).run(lambda conn: project_rows.list_projects(conn, limit + 1, before))  # type: ignore
    page, next_cursor = cursors.split_page("projects", found, limit)
    return ProjectList(projects=page, next_cursor=next_cursor)


async def get_project(shared: ServerContext, key: str) -> ProjectReply:
    return ProjectReply(project=await _readers(shared).run(lambda conn: project_rows.require_project(conn, key)))


async def create_project(shared: ServerContext, body: ProjectCreate) -> ProjectReply:
    fields = _present(body)

    def apply(conn: Any) -> Project:
        now = now_ms()
        project_id = project_rows.insert_project(conn, fields["name"], fields.get("description"), now)
        project = project_rows.require_project(conn, project_id)
        if fields.get("primary_metric") is not None:
            project_rows.set_primary(conn, fields["primary_metric"], now, project=project)
        return project_rows.require_project(conn, project_id)

    return ProjectReply(project=await write(_store(shared), apply))


async def update_project(shared: ServerContext, key: str, body: ProjectPatch) -> ProjectReply:
    changes = _present(body)

    def apply(conn: Any) -> Project:
        project = project_rows.require_project(conn, key)
        project_rows.update_project(conn, project, changes)
        if "primary_metric" in changes:
            project_rows.set_primary(conn, changes["primary_metric"], now_ms(), project=project)
        return project_rows.require_project(conn, project.id)

    return ProjectReply(project=await write(_store(shared), apply))


async def delete_project(shared: ServerContext, key: str) -> ProjectReply:
    def apply(conn: Any) -> Project:
        project = project_rows.require_project(conn, key)
        project_rows.delete_project(conn, project)
        return project

    return ProjectReply(project=await write(_store(shared), apply))


# --- experiments ---------------------------------------------------------------------------


async def list_experiments(shared: ServerContext, project_key: str, limit: int,
                           cursor: str | None) -> ExperimentList:
    before = cursors.decode("experiments", cursor, (int, str))

    def read(conn: Any) -> list[Experiment]:
        project = project_rows.require_project(conn, project_key)
        return project_rows.list_experiments(conn, project.id, limit + 1, before)  # type: ignore[arg-type]

    page, next_cursor = cursors.split_page("experiments", await _readers(shared).run(read), limit)
    return ExperimentList(experiments=page, next_cursor=next_cursor)


async def create_experiment(shared: ServerContext, project_key: str, body: ExperimentCreate) -> ExperimentReply:
    fields = _present(body)

    def apply(conn: Any) -> Experiment:
        project = project_rows.require_project(conn, project_key)
        experiment_id = project_rows.insert_experiment(conn, project, fields["name"], fields.get("description"),
                                                       now_ms())
        experiment = project_rows.require_experiment(conn, experiment_id)
        if fields.get("primary_metric") is not None:
            project_rows.set_primary(conn, fields["primary_metric"], now_ms(), experiment=experiment)
        return project_rows.require_experiment(conn, experiment_id)

    return ExperimentReply(experiment=await write(_store(shared), apply))


async def get_experiment(shared: ServerContext, experiment_id: str) -> ExperimentReply:
    return ExperimentReply(experiment=await _readers(shared).run(
        lambda conn: project_rows.require_experiment(conn, experiment_id)))


async def update_experiment(shared: ServerContext, experiment_id: str, body: ExperimentPatch) -> ExperimentReply:
    changes = _present(body)

    def apply(conn: Any) -> Experiment:
        experiment = project_rows.require_experiment(conn, experiment_id)
        project_rows.update_experiment(conn, experiment, changes)
        if "primary_metric" in changes:
            project_rows.set_primary(conn, changes["primary_metric"], now_ms(), experiment=experiment)
        return project_rows.require_experiment(conn, experiment.id)

    return ExperimentReply(experiment=await write(_store(shared), apply))


async def delete_experiment(shared: ServerContext, experiment_id: str) -> ExperimentReply:
    def apply(conn: Any) -> Experiment:
        experiment = project_rows.require_experiment(conn, experiment_id)
        project_rows.delete_experiment(conn, experiment)
        return experiment

    return ExperimentReply(experiment=await write(_store(shared), apply))


def _scope(conn: Any, project_key: str | None, experiment_key: str | None) -> tuple[Project | None,
                                                                                    Experiment | None]:
    """The project and experiment named by a query or body (``experiment``: an id, or a name
    within ``project``)."""
    project = project_rows.require_project(conn, project_key, "project") if project_key is not None else None
    experiment = (project_rows.require_experiment(conn, experiment_key, project, "experiment")
                  if experiment_key is not None else None)
    return project, experiment


# --- metric definitions and the primary metric ---------------------------------------------


async def list_definitions(shared: ServerContext, *, project: str | None, experiment: str | None, limit: int,
                           cursor: str | None) -> MetricDefinitionList:
    before = cursors.decode("metric_definitions", cursor, (int, str))

    def read(conn: Any) -> list[MetricDefinition]:
        found_project, found_experiment = _scope(conn, project, experiment)
        return project_rows.list_definitions(conn, project_id=found_project.id if found_project else None,
                                             experiment_id=found_experiment.id if found_experiment else None,
                                             limit=limit + 1, before=before)  # type: ignore[arg-type]

    page, next_cursor = cursors.split_page("metric_definitions", await _readers(shared).run(read), limit,
                                           key=lambda d: (d.created_at, d.name))
    return MetricDefinitionList(metric_definitions=page, next_cursor=next_cursor)


async def get_definition(shared: ServerContext, name: str) -> MetricDefinitionReply:
    return MetricDefinitionReply(metric_definition=await _readers(shared).run(
        lambda conn: project_rows.require_definition(conn, name)))


async def update_definition(shared: ServerContext, name: str,
                            body: MetricDefinitionPatch) -> MetricDefinitionUpdated:
    """The edited definition, and how many runs' summaries were recomputed."""
    changes = parse_definition_patch(body)

    def apply(conn: Any) -> tuple[MetricDefinition, int]:
        updated = project_rows.update_definition(conn, project_rows.require_definition(conn, name), changes)
        return project_rows.require_definition(conn, name), updated

    definition, updated = await write(_store(shared), apply)
    return MetricDefinitionUpdated(metric_definition=definition, runs_updated=updated)


async def get_primary(shared: ServerContext, project: str | None, experiment: str | None) -> PrimaryMetricReply:
    return PrimaryMetricReply(primary_metric=await _readers(shared).run(
        lambda conn: project_rows.resolve(conn, *_scope(conn, project, experiment))))


async def put_primary(shared: ServerContext, body: PrimaryMetricPut) -> PrimaryMetricReply:
    """``{"metric": name or null, "project": id or name, "experiment": id (or name, with project)}``:
    neither project nor experiment sets the global primary metric."""
    metric, project_key, experiment_key = body.metric, body.project, body.experiment

    def apply(conn: Any) -> PrimaryMetric:
        project, experiment = _scope(conn, project_key, experiment_key)
        project_rows.set_primary(conn, metric, now_ms(), project=project, experiment=experiment)
        project = project_rows.find_project(conn, project.id) if project else None
        experiment = project_rows.find_experiment(conn, experiment.id) if experiment else None
        return project_rows.resolve(conn, project, experiment)

    return PrimaryMetricReply(primary_metric=await write(_store(shared), apply))
