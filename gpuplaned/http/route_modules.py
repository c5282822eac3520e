"""The API's route modules, listed once.

Importing one declares its routes (``gpuplaned.http.routes.ALL``), which the OpenAPI document
describes (``openapi``); ``app.create_app`` registers each of them on the app. Beside these the
app registers what declares no route of the document: the agents' WebSocket (``agent_routes``),
the document itself (``openapi_routes``: ``openapi.DOCUMENT``) and, on the HTTP front, the web
UI (``ui_routes``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from gpuplaned.http import (
    audit_routes,
    auth_routes,
    checkpoints_routes,
    control_routes,
    diagnosis_routes,
    evaluations_routes,
    groups_routes,
    import_routes,
    jobs_routes,
    nodes_routes,
    projects_routes,
    sessions_routes,
    sweeps_routes,
    tokens_routes,
    views_routes,
    webhook_routes,
    workspace_routes,
    metric_stream_routes,
    changes_routes,  # last: it imports the list routes whose scopes it follows
)

if TYPE_CHECKING:
    from quart_trio import QuartTrio

    from gpuplaned.service.context import ServerContext


class RouteModule(Protocol):
    def register(self, app: QuartTrio, shared: ServerContext) -> None: ...


# As imported above, whose order is the routes' order in the document. One imported but left
# out here would be described but not served: tests/http/test_openapi.py fails on it.
DOCUMENTED: tuple[RouteModule, ...] = (
    audit_routes,
    auth_routes,
    checkpoints_routes,
    control_routes,
    diagnosis_routes,
    evaluations_routes,
    groups_routes,
    import_routes,
    jobs_routes,
    nodes_routes,
    projects_routes,
    sessions_routes,
    sweeps_routes,
    tokens_routes,
    views_routes,
    webhook_routes,
    workspace_routes,
    metric_stream_routes,
    changes_routes,
)
