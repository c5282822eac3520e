"""The changes stream: ``GET /api/v1/changes/stream`` (issue 33 item 3: nothing polls on a timer
while the streams are up). Its events name lists, by topic, that committed writes changed; a
page refetches the lists it shows on them. Semantics in ``gpuplaned.service.api.changes``.

A caller hears a topic only if it may read that topic's list (``LIST_ROUTES``): whatever scope
the list route needs (``gpuplaned.http.scopes``), so ``audit``, ``tokens`` and ``webhooks``
only with ``admin``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from quart import Response, g
from quart_trio import QuartTrio

from gpuplaned.http import (
    audit_routes,
    checkpoints_routes,
    evaluations_routes,
    groups_routes,
    jobs_routes,
    nodes_routes,
    sweeps_routes,
    tokens_routes,
    views_routes,
    webhook_routes,
)
from gpuplaned.http.routes import Reply, Route, Routes, SseKind, Stream
from gpuplaned.http.scopes import required_scope
from gpuplaned.http.sse import sse_response
from gpuplaned.protocol.change_replies import TOPICS, ChangedTopics
from gpuplaned.service.api import changes
from gpuplaned.service.api.tokens import grants

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext

# Each topic's list: who may read it may hear the topic.
LIST_ROUTES: Mapping[str, Route] = {
    "audit": audit_routes.LIST,
    "checkpoints": checkpoints_routes.RUN_CHECKPOINTS,
    "evaluations": evaluations_routes.LIST,
    "events": nodes_routes.EVENTS,
    "groups": groups_routes.GROUPS,
    "jobs": jobs_routes.LIST,
    "nodes": nodes_routes.NODES,
    "runs": jobs_routes.RUNS,
    "sweeps": sweeps_routes.LIST,
    "tokens": tokens_routes.LIST,
    "views": views_routes.LIST,
    "webhooks": webhook_routes.LIST,
}

api = Routes("changes")
STREAM = api.get(
    "/api/v1/changes/stream", "streamChanges", "Follow which lists change (Server-Sent Events)",
    Reply(200, Stream("ChangeStreamEvent", "One event of GET /api/v1/changes/stream: topics, sorted, each once; "
                                           "no ids (nothing to resume: a reconnect gets `ready` again).",
                      (SseKind(("ready",), ChangedTopics), SseKind(("changes",), ChangedTopics))),
          "`ready` first, listing every topic this caller may hear (refetch what you show); then `changes` "
          "events naming the topics committed writes changed since the last one: one at once for a lone "
          "change, then at most one per 500 ms, the union of what changed. Topics: "
          + ", ".join(f"`{topic}`" for topic in TOPICS) + "; `audit`, `tokens` and `webhooks` only for a caller "
          "that may read their lists. A comment every 15 s keeps it open."))


def topics_for(caller: Any) -> frozenset[str]:
    """The topics ``caller`` may hear (None: the trusted local socket, or a front without tokens: all)."""
    if caller is None:
        return frozenset(TOPICS)
    return frozenset(topic for topic, route in LIST_ROUTES.items()
                     if grants(caller.scopes, required_scope(route.rule, route.method)))


def register(app: QuartTrio, shared: ServerContext) -> None:
    @STREAM.on(app)
    async def change_stream() -> Response:
        return await sse_response(changes.follow(shared.changes, topics_for(getattr(g, "caller", None))))
