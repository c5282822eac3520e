"""Routes for projects, experiments, metric definitions and the primary metric (seed 000 section 11.1).

- ``GET /api/v1/projects`` (newest first, cursor pages), ``POST /api/v1/projects``
  ``{"name", "description"?, "primary_metric"?}`` -> 201 ``{"project"}``.
- ``GET|PATCH|DELETE /api/v1/projects/{project}`` (its id or name); DELETE is 409 while runs or
  jobs belong to the project.
- ``GET|POST /api/v1/projects/{project}/experiments``; ``GET|PATCH|DELETE /api/v1/experiments/{id}``.
- ``GET /api/v1/metric-definitions?project=&experiment=``; ``GET|PATCH
  /api/v1/metric-definitions/{metric}`` (the name may hold "/": ``eval/loss``), PATCH
  ``{"direction", "display_name", "unit", "scope"}`` -> ``{"metric_definition", "runs_updated"}``.
- ``GET /api/v1/primary-metric?project=&experiment=`` (resolved experiment -> project ->
  global) and ``PUT /api/v1/primary-metric`` ``{"metric", "project"?, "experiment"?}``.

Semantics and checks live in ``gpuplaned.service.api.projects``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from quart import Response
from quart_trio import QuartTrio

from gpuplaned.http.queries import DefinitionsQuery, Page, ScopeQuery
from gpuplaned.http.responses import ok
from gpuplaned.http.routes import Param, Reply, Routes
from gpuplaned.protocol.project_replies import (
    ExperimentList,
    ExperimentReply,
    MetricDefinitionList,
    MetricDefinitionReply,
    MetricDefinitionUpdated,
    PrimaryMetricReply,
    ProjectList,
    ProjectReply,
)
from gpuplaned.service.api import projects
from gpuplaned.service.api.projects import (
    ExperimentCreate,
    ExperimentPatch,
    MetricDefinitionPatch,
    PrimaryMetricPut,
    ProjectCreate,
    ProjectPatch,
)

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext


api = Routes("projects")
_PROJECT = Param("project", "the project's id (prj_<ULID>) or name")
_EXPERIMENT = Param("experiment_id", "the experiment's id (exp_<ULID>)")
_METRIC = Param("metric", "the metric's name; it may hold '/' (eval/loss)",
                {"type": "string", "minLength": 1, "maxLength": 200, "pattern": r"^\.*[^/.][^/]*(/\.*[^/.][^/]*)*$"})
_THE_PROJECT = "The project."

PROJECTS = api.get("/api/v1/projects", "listProjects", "Projects, newest first",
                   Reply(200, ProjectList, "The projects."), errors=(400,), query=Page)
CREATE_PROJECT = api.post("/api/v1/projects", "createProject", "Create a project",
                          Reply(201, ProjectReply, _THE_PROJECT), errors=(400, 409, 413), body=ProjectCreate)
PROJECT = api.get("/api/v1/projects/<project>", "getProject", "One project", Reply(200, ProjectReply, _THE_PROJECT),
                  errors=(404,), params=(_PROJECT,))
UPDATE_PROJECT = api.patch("/api/v1/projects/<project>", "updateProject", "Rename a project, or set its description "
                                                                           "or primary metric",
                           Reply(200, ProjectReply, _THE_PROJECT), errors=(400, 404, 409, 413), params=(_PROJECT,),
                           body=ProjectPatch)
DELETE_PROJECT = api.delete(
    "/api/v1/projects/<project>", "deleteProject", "Delete a project that holds no runs or jobs (with its empty "
                                                   "experiments)",
    Reply(200, ProjectReply, "The deleted project."), errors=(404, 409), params=(_PROJECT,),
    description="409 while runs or jobs belong to it: runs are never orphaned or deleted with it.")
EXPERIMENTS = api.get("/api/v1/projects/<project>/experiments", "listExperiments", "A project's experiments, newest "
                                                                                   "first",
                      Reply(200, ExperimentList, "The experiments."), errors=(400, 404), params=(_PROJECT,),
                      query=Page)
CREATE_EXPERIMENT = api.post("/api/v1/projects/<project>/experiments", "createExperiment", "Create an experiment in "
                                                                                         "a project",
                             Reply(201, ExperimentReply, "The experiment."), errors=(400, 404, 409, 413),
                             params=(_PROJECT,), body=ExperimentCreate)
EXPERIMENT = api.get("/api/v1/experiments/<experiment_id>", "getExperiment", "One experiment",
                     Reply(200, ExperimentReply, "The experiment."), errors=(404,), params=(_EXPERIMENT,))
UPDATE_EXPERIMENT = api.patch("/api/v1/experiments/<experiment_id>", "updateExperiment",
                              "Rename an experiment, or set its description or primary metric",
                              Reply(200, ExperimentReply, "The experiment."), errors=(400, 404, 409, 413),
                              params=(_EXPERIMENT,), body=ExperimentPatch)
DELETE_EXPERIMENT = api.delete("/api/v1/experiments/<experiment_id>", "deleteExperiment",
                               "Delete an experiment that holds no runs or jobs",
                               Reply(200, ExperimentReply, "The deleted experiment."), errors=(404, 409),
                               params=(_EXPERIMENT,), description="409 while runs or jobs belong to it.")
DEFINITIONS = api.get("/api/v1/metric-definitions", "listMetricDefinitions", "Metric definitions (direction, "
                                                                             "unit...), newest first",
                      Reply(200, MetricDefinitionList, "The definitions; with a project or experiment, those its "
                                                       "runs logged."), errors=(400, 404), query=DefinitionsQuery)
DEFINITION = api.get("/api/v1/metric-definitions/<path:metric>", "getMetricDefinition", "One metric definition",
                     Reply(200, MetricDefinitionReply, "The definition."), errors=(404,), params=(_METRIC,))
UPDATE_DEFINITION = api.patch(
    "/api/v1/metric-definitions/<path:metric>", "updateMetricDefinition", "Edit a metric's direction, display name, "
                                                                         "unit or scope",
    Reply(200, MetricDefinitionUpdated, "The definition, and how many runs' best points were recomputed."),
    errors=(400, 404, 413), params=(_METRIC,), body=MetricDefinitionPatch,
    description="A new direction recomputes the metric's best point in every run's summary from its stored points.")
PRIMARY = api.get("/api/v1/primary-metric", "getPrimaryMetric", "The primary metric, resolved experiment -> project "
                                                                "-> global",
                  Reply(200, PrimaryMetricReply, "The resolution and each level's setting."), errors=(404,),
                  query=ScopeQuery)
PUT_PRIMARY = api.put("/api/v1/primary-metric", "putPrimaryMetric", "Set or clear the primary metric of an "
                                                                    "experiment, a project, or globally",
                      Reply(200, PrimaryMetricReply, "The resolution after the change."), errors=(400, 404, 413),
                      body=PrimaryMetricPut)


def register(app: QuartTrio, shared: ServerContext) -> None:
    @PROJECTS.on(app)
    async def list_projects(query: Page) -> Response:
        return ok(await projects.list_projects(shared, query.limit, query.cursor or None))

    @CREATE_PROJECT.on(app)
    async def create_project(body: ProjectCreate) -> Response:
        return ok(await projects.create_project(shared, body), 201)

    @PROJECT.on(app)
    async def get_project(project: str) -> Response:
        return ok(await projects.get_project(shared, project))

    @UPDATE_PROJECT.on(app)
    async def update_project(project: str, body: ProjectPatch) -> Response:
        return ok(await projects.update_project(shared, project, body))

    @DELETE_PROJECT.on(app)
    async def delete_project(project: str) -> Response:
        return ok(await projects.delete_project(shared, project))

    @EXPERIMENTS.on(app)
    async def list_experiments(project: str, query: Page) -> Response:
        return ok(await projects.list_experiments(shared, project, query.limit, query.cursor or None))

    @CREATE_EXPERIMENT.on(app)
    async def create_experiment(project: str, body: ExperimentCreate) -> Response:
        return ok(await projects.create_experiment(shared, project, body), 201)

    @EXPERIMENT.on(app)
    async def get_experiment(experiment_id: str) -> Response:
        return ok(await projects.get_experiment(shared, experiment_id))

    @UPDATE_EXPERIMENT.on(app)
    async def update_experiment(experiment_id: str, body: ExperimentPatch) -> Response:
        return ok(await projects.update_experiment(shared, experiment_id, body))

    @DELETE_EXPERIMENT.on(app)
    async def delete_experiment(experiment_id: str) -> Response:
        return ok(await projects.delete_experiment(shared, experiment_id))

    @DEFINITIONS.on(app)
    async def list_definitions(query: DefinitionsQuery) -> Response:
        return ok(await projects.list_definitions(
            shared, project=query.project or None, experiment=query.experiment or None, limit=query.limit,
            cursor=query.cursor or None))

    @DEFINITION.on(app)
    async def get_definition(metric: str) -> Response:
        return ok(await projects.get_definition(shared, metric))

    @UPDATE_DEFINITION.on(app)
    async def update_definition(metric: str, body: MetricDefinitionPatch) -> Response:
        return ok(await projects.update_definition(shared, metric, body))

    @PRIMARY.on(app)
    async def get_primary(query: ScopeQuery) -> Response:
        return ok(await projects.get_primary(shared, query.project or None, query.experiment or None))

    @PUT_PRIMARY.on(app)
    async def put_primary(body: PrimaryMetricPut) -> Response:
        return ok(await projects.put_primary(shared, body))
