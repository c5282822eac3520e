"""Routes of the Experiments workspace (issue 33 item 1).

- ``POST /api/v1/workspace/runs`` ``{"projects", "experiments", "sweep", "runs", "limit"}`` (a
  read, with its selection in a body: ``gpuplaned.http.scopes.READ_RULES``) -> the runs with
  their flattened configs and metric summaries, the metrics and the config keys.

Semantics live in ``gpuplaned.service.api.workspace``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from quart import Response
from quart_trio import QuartTrio

from gpuplaned.http.responses import ok
from gpuplaned.http.routes import Reply, Routes
from gpuplaned.protocol.workspace_replies import WorkspaceRuns
from gpuplaned.service.api import workspace
from gpuplaned.service.api.workspace import WorkspaceQuery

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext

api = Routes("workspace")

RUNS = api.post("/api/v1/workspace/runs", "workspaceRuns", "The runs of projects, experiments or a sweep, with "
                                                            "their configs and metric summaries (the Experiments "
                                                            "table)",
                Reply(200, WorkspaceRuns, "The runs, newest first, and the metrics and config keys across them."),
                errors=(400, 413), body=WorkspaceQuery,
                description="A run matches when it is in any named project (or an experiment of it), experiment "
                            "or sweep, or is listed. 400 names the first unknown project, experiment, sweep or run "
                            "(details.field). Per metric: count, last, min, max and best (by its direction), each "
                            "with its step, from the summary kept as batches arrive.")


def register(app: QuartTrio, shared: ServerContext) -> None:
    @RUNS.on(app)
    async def workspace_runs(body: WorkspaceQuery) -> Response:
        return ok(await workspace.workspace_runs(shared, body))
