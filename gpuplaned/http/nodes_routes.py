"""Routes for nodes, their metrics, and events (seed 000 section 11.1, Nodes and Events)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from quart import Response, request
from quart_trio import QuartTrio

from gpuplaned.http.bodies import int_arg
from gpuplaned.http.responses import ok
from gpuplaned.http.sse import parse_last_event_id, sse_response
from gpuplaned.service import events, node_metrics, nodes_view

if TYPE_CHECKING:
    from gpuplaned.daemon import DaemonContext


def register(app: QuartTrio, shared: DaemonContext) -> None:
    @app.get("/api/v1/nodes")
    async def list_nodes() -> Response:
        return ok({"nodes": await nodes_view.list_nodes(shared)})

    @app.get("/api/v1/nodes/<key>")
    async def get_node(key: str) -> Response:
        return ok({"node": await nodes_view.get_node(shared, key)})

    @app.delete("/api/v1/nodes/<key>")
    async def forget_node(key: str) -> Response:
        return ok({"forgotten": await nodes_view.forget_node(shared, key)})

    @app.get("/api/v1/nodes/<key>/stream")
    async def node_snapshot_stream(key: str) -> Response:
        node = await nodes_view.get_node(shared, key)
        return await sse_response(nodes_view.follow_snapshots(shared, node.id))

    @app.get("/api/v1/nodes/<key>/metrics")
    async def node_metrics_query(key: str) -> Response:
        node = await nodes_view.get_node(shared, key)
        query = node_metrics.parse_query(request.args)
        return ok(await node_metrics.query(shared, node.id, query))

    @app.get("/api/v1/events")
    async def list_events() -> Response:
        where = events.parse_filter(request.args)
        limit = int_arg("limit", 100, 1, 10_000)
        page, next_cursor = await events.list_events(shared, where, limit, request.args.get("cursor"))
        return ok({"events": page, "next_cursor": next_cursor})

    @app.get("/api/v1/events/stream")
    async def event_stream() -> Response:
        where = events.parse_filter(request.args)
        resume = parse_last_event_id(request.headers) or request.args.get("after") or None
        return await sse_response(events.follow(shared, where, resume))
