"""Route declarations: what a route takes and answers, said once.

A routes module declares each route at import time (``Routes.post(...)`` and friends): its
rule, body class, query class, reply type and error statuses. Inside ``register`` the same
``Route`` mounts the handler (``@ROUTE.on(app)``): the body is structured into its attrs
class and the query into its own, through the one converter, before the handler runs, so a
handler receives ``body=`` and ``query=`` already checked. ``gpuplaned.http.openapi``
documents the app from these declarations (``ALL``); ``tests/http/test_openapi.py`` fails
when a route of the app has none.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
from quart import Response, g, request
from quart_trio import QuartTrio

from gpuplaned.http.bodies import json_body, query_args
from gpuplaned.protocol.converter import structure
from gpuplaned.store.writer import riding


@attrs.frozen
class Reply:
    """The success reply: ``type`` an attrs class (JSON) or a ``Stream`` (Server-Sent Events)."""

    status: int
    type: Any
    description: str
    headers: dict[str, Any] = attrs.field(factory=dict)  # beyond X-GPUPlane-API, e.g. Set-Cookie


@attrs.frozen
class SseKind:
    """One kind of event in a stream: its name(s), the attrs class of its JSON data (None: plain
    text) and the pattern of its id (None: it has none)."""

    names: tuple[str, ...]
    data: Any = None
    id_pattern: str | None = None


@attrs.frozen
class Stream:
    name: str  # the component schema of one event
    description: str
    kinds: tuple[SseKind, ...]


@attrs.frozen
class Param:
    """A path parameter (``schema`` None: one path segment) or a header."""

    name: str
    description: str
    schema: dict[str, Any] | None = None
    where: str = "path"


LAST_EVENT_ID = Param("Last-Event-ID", "sent by a reconnecting EventSource: resume after this event (wins over the "
                                       "query)", where="header")


@attrs.frozen
class Route:
    method: str
    rule: str  # werkzeug's: /api/v1/jobs/<job_id>
    operation_id: str
    summary: str
    tag: str
    reply: Reply
    errors: tuple[int, ...] = ()
    body: type | None = None
    body_required: bool = True
    query: type | None = None
    params: tuple[Param, ...] = ()
    description: str | None = None
    also: tuple[Reply, ...] = ()  # other success replies (a dry run's 200 beside a submit's 201)

    def on(self, app: QuartTrio) -> Callable[[Callable[..., Awaitable[Response]]], Callable[..., Any]]:
        """Mount ``handler`` on ``app``; it gets the path's values, and ``body``/``query`` when declared."""
        def mount(handler: Callable[..., Awaitable[Response]]) -> Callable[..., Any]:
            @functools.wraps(handler)
            async def view(**path: Any) -> Response:
                if self.query is not None:
                    path["query"] = query_args(self.query)
                if self.body is not None:
                    empty = not self.body_required and not (await request.get_data()).strip()
                    path["body"] = structure({} if empty else await json_body(), self.body)
                # Made once the body is read: the handler's first write carries it (store.writer.Rider).
                make = getattr(g, "make_store_rider", None)
                g.store_rider = await make() if make is not None else None
                with riding(g.store_rider):
                    return await handler(**path)

            app.add_url_rule(self.rule, view_func=view, methods=[self.method])
            return handler

        return mount


ALL: list[Route] = []  # every route declared, in declaration order


class Routes:
    """A routes module's declarations, all with one tag."""

    def __init__(self, tag: str) -> None:
        self.tag = tag

    def declare(self, method: str, rule: str, operation_id: str, summary: str, reply: Reply,
                **more: Any) -> Route:
        route = Route(method, rule, operation_id, summary, more.pop("tag", self.tag), reply, **more)
        ALL.append(route)
        return route

    def get(self, *args: Any, **more: Any) -> Route:
        return self.declare("GET", *args, **more)

    def post(self, *args: Any, **more: Any) -> Route:
        return self.declare("POST", *args, **more)

    def put(self, *args: Any, **more: Any) -> Route:
        return self.declare("PUT", *args, **more)

    def patch(self, *args: Any, **more: Any) -> Route:
        return self.declare("PATCH", *args, **more)

    def delete(self, *args: Any, **more: Any) -> Route:
        return self.declare("DELETE", *args, **more)
