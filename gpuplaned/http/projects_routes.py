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

Semantics and checks live in ``gpuplaned.service.projects``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from quart import Response, request
from quart_trio import QuartTrio

from gpuplaned.http.bodies import int_arg, json_body
from gpuplaned.http.responses import ok
from gpuplaned.service import projects

if TYPE_CHECKING:
    from gpuplaned.daemon import DaemonContext


def _arg(name: str) -> str | None:
    return request.args.get(name) or None


def register(app: QuartTrio, shared: DaemonContext) -> None:
    @app.get("/api/v1/projects")
    async def list_projects() -> Response:
        page, next_cursor = await projects.list_projects(shared, int_arg("limit", 100, 1, 10_000), _arg("cursor"))
        return ok({"projects": page, "next_cursor": next_cursor})

    @app.post("/api/v1/projects")
    async def create_project() -> Response:
        return ok({"project": await projects.create_project(shared, await json_body())}, 201)

    @app.get("/api/v1/projects/<project>")
    async def get_project(project: str) -> Response:
        return ok({"project": await projects.get_project(shared, project)})

    @app.patch("/api/v1/projects/<project>")
    async def update_project(project: str) -> Response:
        return ok({"project": await projects.update_project(shared, project, await json_body())})

    @app.delete("/api/v1/projects/<project>")
    async def delete_project(project: str) -> Response:
        return ok({"project": await projects.delete_project(shared, project)})

    @app.get("/api/v1/projects/<project>/experiments")
    async def list_experiments(project: str) -> Response:
        page, next_cursor = await projects.list_experiments(shared, project, int_arg("limit", 100, 1, 10_000),
                                                            _arg("cursor"))
        return ok({"experiments": page, "next_cursor": next_cursor})

    @app.post("/api/v1/projects/<project>/experiments")
    async def create_experiment(project: str) -> Response:
        return ok({"experiment": await projects.create_experiment(shared, project, await json_body())}, 201)

    @app.get("/api/v1/experiments/<experiment_id>")
    async def get_experiment(experiment_id: str) -> Response:
        return ok({"experiment": await projects.get_experiment(shared, experiment_id)})

    @app.patch("/api/v1/experiments/<experiment_id>")
    async def update_experiment(experiment_id: str) -> Response:
        return ok({"experiment": await projects.update_experiment(shared, experiment_id, await json_body())})

    @app.delete("/api/v1/experiments/<experiment_id>")
    async def delete_experiment(experiment_id: str) -> Response:
        return ok({"experiment": await projects.delete_experiment(shared, experiment_id)})

    @app.get("/api/v1/metric-definitions")
    async def list_definitions() -> Response:
        page, next_cursor = await projects.list_definitions(
            shared, project=_arg("project"), experiment=_arg("experiment"),
            limit=int_arg("limit", 100, 1, 10_000), cursor=_arg("cursor"))
        return ok({"metric_definitions": page, "next_cursor": next_cursor})

    @app.get("/api/v1/metric-definitions/<path:metric>")
    async def get_definition(metric: str) -> Response:
        return ok({"metric_definition": await projects.get_definition(shared, metric)})

    @app.patch("/api/v1/metric-definitions/<path:metric>")
    async def update_definition(metric: str) -> Response:
        definition, updated = await projects.update_definition(shared, metric, await json_body())
        return ok({"metric_definition": definition, "runs_updated": updated})

    @app.get("/api/v1/primary-metric")
    async def get_primary() -> Response:
        return ok({"primary_metric": await projects.get_primary(shared, _arg("project"), _arg("experiment"))})

    @app.put("/api/v1/primary-metric")
    async def put_primary() -> Response:
        return ok({"primary_metric": await projects.put_primary(shared, await json_body())})
