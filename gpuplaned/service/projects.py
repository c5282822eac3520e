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
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gpuplaned.protocol import cursors
from gpuplaned.protocol.bodies import known_object
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.service import access
from gpuplaned.service.registry import now_ms
from gpuplaned.store import project_rows
from gpuplaned.store.project_rows import Experiment, MetricDefinition, PrimaryMetric, Project
from gpuplaned.store.writer import write
from gpuplaned.tsdb.series import MAX_NAME

if TYPE_CHECKING:
    from gpuplaned.daemon import DaemonContext

MAX_NAME_LEN = 200
MAX_DESCRIPTION = 2000
MAX_DISPLAY_NAME = 200
MAX_UNIT = 50
DIRECTIONS = ("minimize", "maximize", "none")
METRIC_SCOPES = ("train", "eval", "system")
_ID = re.compile(r"^(prj|exp)_[0-9A-HJKMNP-TV-Z]{26}$")
# Also the OpenAPI pattern: a name is a path segment (/projects/{key}), so no "/", no leading "."
NAME_PATTERN = r"^[^\s/.\x00-\x1f\x7f]([^/\x00-\x1f\x7f]{0,198}[^\s/\x00-\x1f\x7f])?$"
NAME = re.compile(NAME_PATTERN)
METRIC_PATTERN = r"^[^\x00-\x1f\x7f]{1,200}$"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_PROJECT_FIELDS = {"name", "description", "primary_metric"}


def _bad(field: str, message: str, **details: Any) -> ApiError:
    return ApiError(ErrorCode.BAD_REQUEST, f"{field}: {message}", {"field": field, **details})


def _store(shared: DaemonContext) -> Any:
    return access.store_port(shared, "projects")


def _readers(shared: DaemonContext) -> Any:
    return access.readers(shared, "projects")


# --- checking bodies -----------------------------------------------------------------------


def check_name(value: Any, field: str = "name") -> str:
    if not isinstance(value, str) or not NAME.fullmatch(value) or _ID.match(value):
        raise _bad(field, f"1 to {MAX_NAME_LEN} characters, no '/' or control characters, not starting with "
                          f"'.', no space at either end, and not shaped like an id; got {value!r}")
    return value


def _optional_text(body: Mapping[str, Any], field: str, limit: int) -> str | None:
    value = body.get(field)
    if value is not None and (not isinstance(value, str) or len(value) > limit):
        raise _bad(field, f"a string of at most {limit} characters, or null")
    return value or None


def check_metric(value: Any, field: str) -> str | None:
    """A metric name (as runs log them) or None."""
    if value is not None and (not isinstance(value, str) or not 0 < len(value) <= MAX_NAME
                              or _CONTROL.search(value)):
        raise _bad(field, f"a metric name (1 to {MAX_NAME} characters, no control characters), or null")
    return value


def parse_container(body: Any, *, partial: bool) -> dict[str, Any]:
    """A project or experiment body: ``name`` (required unless ``partial``), ``description``,
    ``primary_metric``; only the fields present are returned."""
    known_object(body, _PROJECT_FIELDS)
    if not partial and "name" not in body:
        raise _bad("name", "required")
    out: dict[str, Any] = {}
    if "name" in body:
        out["name"] = check_name(body["name"])
    if "description" in body:
        out["description"] = _optional_text(body, "description", MAX_DESCRIPTION)
    if "primary_metric" in body:
        out["primary_metric"] = check_metric(body["primary_metric"], "primary_metric")
    return out


def parse_definition_patch(body: Any) -> dict[str, Any]:
    known_object(body, {"direction", "display_name", "scope", "unit"})
    out: dict[str, Any] = {}
    if "direction" in body:
        direction = body["direction"]
        if direction is not None and direction not in DIRECTIONS:
            raise _bad("direction", f"one of {', '.join(DIRECTIONS)}, or null (none)", allowed=list(DIRECTIONS))
        out["direction"] = None if direction == "none" else direction
    if "scope" in body:
        scope = body["scope"]
        if scope is not None and scope not in METRIC_SCOPES:
            raise _bad("scope", f"one of {', '.join(METRIC_SCOPES)}, or null", allowed=list(METRIC_SCOPES))
        out["scope"] = scope
    if "display_name" in body:
        out["display_name"] = _optional_text(body, "display_name", MAX_DISPLAY_NAME)
    if "unit" in body:
        out["unit"] = _optional_text(body, "unit", MAX_UNIT)
    return out


# --- projects ------------------------------------------------------------------------------


async def list_projects(shared: DaemonContext, limit: int, cursor: str | None) -> tuple[list[Project], str | None]:
    before = cursors.decode("projects", cursor, (int, str))
    found = await _readers(shared).run(lambda conn: project_rows.list_projects(conn, limit + 1, before))  # type: ignore
    return cursors.split_page("projects", found, limit)


async def get_project(shared: DaemonContext, key: str) -> Project:
    return await _readers(shared).run(lambda conn: project_rows.require_project(conn, key))


async def create_project(shared: DaemonContext, body: Any) -> Project:
    fields = parse_container(body, partial=False)

    def apply(conn: Any) -> Project:
        now = now_ms()
        project_id = project_rows.insert_project(conn, fields["name"], fields.get("description"), now)
        project = project_rows.require_project(conn, project_id)
        if fields.get("primary_metric") is not None:
            project_rows.set_primary(conn, fields["primary_metric"], now, project=project)
        return project_rows.require_project(conn, project_id)

    return await write(_store(shared), apply)


async def update_project(shared: DaemonContext, key: str, body: Any) -> Project:
    changes = parse_container(body, partial=True)

    def apply(conn: Any) -> Project:
        project = project_rows.require_project(conn, key)
        project_rows.update_project(conn, project, changes)
        if "primary_metric" in changes:
            project_rows.set_primary(conn, changes["primary_metric"], now_ms(), project=project)
        return project_rows.require_project(conn, project.id)

    return await write(_store(shared), apply)


async def delete_project(shared: DaemonContext, key: str) -> Project:
    def apply(conn: Any) -> Project:
        project = project_rows.require_project(conn, key)
        project_rows.delete_project(conn, project)
        return project

    return await write(_store(shared), apply)


# --- experiments ---------------------------------------------------------------------------


async def list_experiments(shared: DaemonContext, project_key: str, limit: int,
                           cursor: str | None) -> tuple[list[Experiment], str | None]:
    before = cursors.decode("experiments", cursor, (int, str))

    def read(conn: Any) -> list[Experiment]:
        project = project_rows.require_project(conn, project_key)
        return project_rows.list_experiments(conn, project.id, limit + 1, before)  # type: ignore[arg-type]

    return cursors.split_page("experiments", await _readers(shared).run(read), limit)


async def create_experiment(shared: DaemonContext, project_key: str, body: Any) -> Experiment:
    fields = parse_container(body, partial=False)

    def apply(conn: Any) -> Experiment:
        project = project_rows.require_project(conn, project_key)
        experiment_id = project_rows.insert_experiment(conn, project, fields["name"], fields.get("description"),
                                                       now_ms())
        experiment = project_rows.require_experiment(conn, experiment_id)
        if fields.get("primary_metric") is not None:
            project_rows.set_primary(conn, fields["primary_metric"], now_ms(), experiment=experiment)
        return project_rows.require_experiment(conn, experiment_id)

    return await write(_store(shared), apply)


async def get_experiment(shared: DaemonContext, experiment_id: str) -> Experiment:
    return await _readers(shared).run(lambda conn: project_rows.require_experiment(conn, experiment_id))


async def update_experiment(shared: DaemonContext, experiment_id: str, body: Any) -> Experiment:
    changes = parse_container(body, partial=True)

    def apply(conn: Any) -> Experiment:
        experiment = project_rows.require_experiment(conn, experiment_id)
        project_rows.update_experiment(conn, experiment, changes)
        if "primary_metric" in changes:
            project_rows.set_primary(conn, changes["primary_metric"], now_ms(), experiment=experiment)
        return project_rows.require_experiment(conn, experiment.id)

    return await write(_store(shared), apply)


async def delete_experiment(shared: DaemonContext, experiment_id: str) -> Experiment:
    def apply(conn: Any) -> Experiment:
        experiment = project_rows.require_experiment(conn, experiment_id)
        project_rows.delete_experiment(conn, experiment)
        return experiment

    return await write(_store(shared), apply)


def _scope(conn: Any, project_key: str | None, experiment_key: str | None) -> tuple[Project | None,
                                                                                    Experiment | None]:
    """The project and experiment named by a query or body (``experiment``: an id, or a name
    within ``project``)."""
    project = project_rows.require_project(conn, project_key, "project") if project_key is not None else None
    experiment = (project_rows.require_experiment(conn, experiment_key, project, "experiment")
                  if experiment_key is not None else None)
    return project, experiment


def _key(value: Any, field: str) -> str | None:
    if value is not None and (not isinstance(value, str) or not value):
        raise _bad(field, "an id or name")
    return value


# --- metric definitions and the primary metric ---------------------------------------------


async def list_definitions(shared: DaemonContext, *, project: str | None, experiment: str | None, limit: int,
                           cursor: str | None) -> tuple[list[MetricDefinition], str | None]:
    before = cursors.decode("metric_definitions", cursor, (int, str))

    def read(conn: Any) -> list[MetricDefinition]:
        found_project, found_experiment = _scope(conn, project, experiment)
        return project_rows.list_definitions(conn, project_id=found_project.id if found_project else None,
                                             experiment_id=found_experiment.id if found_experiment else None,
                                             limit=limit + 1, before=before)  # type: ignore[arg-type]

    return cursors.split_page("metric_definitions", await _readers(shared).run(read), limit,
                              key=lambda d: (d.created_at, d.name))


async def get_definition(shared: DaemonContext, name: str) -> MetricDefinition:
    return await _readers(shared).run(lambda conn: project_rows.require_definition(conn, name))


async def update_definition(shared: DaemonContext, name: str, body: Any) -> tuple[MetricDefinition, int]:
    """The edited definition, and how many runs' summaries were recomputed."""
    changes = parse_definition_patch(body)

    def apply(conn: Any) -> tuple[MetricDefinition, int]:
        updated = project_rows.update_definition(conn, project_rows.require_definition(conn, name), changes)
        return project_rows.require_definition(conn, name), updated

    return await write(_store(shared), apply)


async def get_primary(shared: DaemonContext, project: str | None, experiment: str | None) -> PrimaryMetric:
    return await _readers(shared).run(lambda conn: project_rows.resolve(conn, *_scope(conn, project, experiment)))


async def put_primary(shared: DaemonContext, body: Any) -> PrimaryMetric:
    """``{"metric": name or null, "project": id or name, "experiment": id (or name, with project)}``:
    neither project nor experiment sets the global primary metric."""
    known_object(body, {"metric", "project", "experiment"})
    if "metric" not in body:
        raise _bad("metric", "required (a metric name, or null to clear)")
    metric = check_metric(body["metric"], "metric")
    project_key, experiment_key = _key(body.get("project"), "project"), _key(body.get("experiment"), "experiment")

    def apply(conn: Any) -> PrimaryMetric:
        project, experiment = _scope(conn, project_key, experiment_key)
        project_rows.set_primary(conn, metric, now_ms(), project=project, experiment=experiment)
        project = project_rows.find_project(conn, project.id) if project else None
        experiment = project_rows.find_experiment(conn, experiment.id) if experiment else None
        return project_rows.resolve(conn, project, experiment)

    return await write(_store(shared), apply)
