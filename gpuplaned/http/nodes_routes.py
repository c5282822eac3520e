"""Routes for nodes, their metrics, and events (seed 000 section 11.1, Nodes and Events)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from quart import Response, g, request
from quart_trio import QuartTrio

from gpuplaned.http.queries import EventsQuery, EventStreamQuery
from gpuplaned.http.responses import ok
from gpuplaned.http.routes import LAST_EVENT_ID, Param, Reply, Routes, SseKind, Stream
from gpuplaned.http.sse import parse_last_event_id, sse_response
from gpuplaned.protocol.event_replies import EventList
from gpuplaned.protocol.job_replies import Lagged
from gpuplaned.protocol.node_replies import ForgottenNode, NodeList, NodeMetrics, NodeReply, NodeSnapshot
from gpuplaned.service.api import budgets, events, node_metrics, nodes_view
from gpuplaned.service.api.series_query import NodeMetricsArgs
from gpuplaned.store.event_rows import EventRow

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext


api = Routes("nodes")
# Named "node", not "key": the audit log redacts values of parameters named like secrets (key).
_NODE = Param("node", "the node's id or name")
_READINGS = "Columns downsampled to at most `points` buckets (min, max, avg, last)."

NODES = api.get("/api/v1/nodes", "listNodes", "Every node with its GPUs and latest readings",
                Reply(200, NodeList, "The nodes, by name."),
                description="A remote agent's node (`remote`) has its `link`: attached or detached, when its agent "
                            "was last heard from and its last heartbeat, the backlog of its spool and its clock's "
                            "skew. The server's own node has no link.")
NODE = api.get("/api/v1/nodes/<node>", "getNode", "One node", Reply(200, NodeReply, "The node."), errors=(404,),
               params=(_NODE,))
DRAIN = api.post("/api/v1/nodes/<node>/drain", "drainNode", "Drain a node: no new jobs, its running ones go on",
                  Reply(200, NodeReply, "The node, drained (condition DRAINED, not accepting)."), errors=(403, 404),
                  params=(_NODE,),
                  description="Kept across restarts and the node's reconnects until undrain. Jobs that only this "
                              "node could run stay QUEUED, their queue_reason saying so. Draining a drained node "
                              "changes nothing.")
UNDRAIN = api.post("/api/v1/nodes/<node>/undrain", "undrainNode", "Undrain a node: it takes new jobs again",
                   Reply(200, NodeReply, "The node, taking new jobs again."), errors=(403, 404),
                   params=(_NODE,))
FORGET = api.delete("/api/v1/nodes/<node>", "forgetNode", "Forget an offline node that is gone for good",
                    Reply(200, ForgottenNode, "It is forgotten: its record, GPU slots and metrics."), errors=(403, 404, 409),
                    params=(_NODE,),
                    description="For a node renamed or retired, which would otherwise stay OFFLINE in the list "
                                "forever. Its jobs and runs keep their history; if it says hello again, it is a new "
                                "node. 409 while it is online or a job is dispatched to or running on it.")
NODE_STREAM = api.get(
    "/api/v1/nodes/<node>/stream", "streamNode", "Follow a node's readings (Server-Sent Events)",
    Reply(200, Stream("NodeStreamEvent", "One event of GET /api/v1/nodes/{node}/stream: the node's whole current "
                                         "readings; the id is their time (ms).",
                      (SseKind(("snapshot",), NodeSnapshot, "^[0-9]+$"),)),
          "`snapshot` events: the latest readings at once (when there are any), then each new sample (about every "
          "2 s). A follower that falls behind gets the next one. A comment every 15 s keeps it open."),
    errors=(404,), params=(_NODE,))
NODE_METRICS = api.get("/api/v1/nodes/<node>/metrics", "getNodeMetrics", "A node's metric series for charts",
                       Reply(200, NodeMetrics, _READINGS), errors=(400, 404), params=(_NODE,), query=NodeMetricsArgs)
EVENTS = api.get("/api/v1/events", "listEvents", "Events, newest first", Reply(200, EventList, "The events."),
                 errors=(400,), query=EventsQuery, tag="events")
EVENT_STREAM = api.get(
    "/api/v1/events/stream", "streamEvents", "Follow events (Server-Sent Events)",
    Reply(200, Stream("EventStreamEvent", "One event of GET /api/v1/events/stream; an `event` event's id is the "
                                          "Event's id.", (SseKind(("event",), EventRow), SseKind(("lagged",), Lagged))),
          "`event` events (data: an Event as JSON, id: its id) and `lagged` events ({\"skipped\": N}) when this "
          "follower fell behind. A comment every 15 s keeps it open."),
    errors=(400,), params=(LAST_EVENT_ID,), query=EventStreamQuery, tag="events")


def register(app: QuartTrio, shared: ServerContext) -> None:
    @NODES.on(app)
    async def list_nodes() -> Response:
        return ok({"nodes": await nodes_view.list_nodes(shared)})

    @NODE.on(app)
    async def get_node(node: str) -> Response:
        return ok({"node": await nodes_view.get_node(shared, node)})

    @DRAIN.on(app)
    async def drain_node(node: str) -> Response:
        budgets.refuse_node_change(getattr(g, "caller", None), "drain", node)
        return ok({"node": await nodes_view.set_drained(shared, node, True)})

    @UNDRAIN.on(app)
    async def undrain_node(node: str) -> Response:
        budgets.refuse_node_change(getattr(g, "caller", None), "undrain", node)
        return ok({"node": await nodes_view.set_drained(shared, node, False)})

    @FORGET.on(app)
    async def forget_node(node: str) -> Response:
        budgets.refuse_node_change(getattr(g, "caller", None), "forget", node)
        return ok(await nodes_view.forget_node(shared, node))

    @NODE_STREAM.on(app)
    async def node_snapshot_stream(node: str) -> Response:
        found = await nodes_view.get_node(shared, node)
        return await sse_response(nodes_view.follow_snapshots(shared, found.id))

    @NODE_METRICS.on(app)
    async def node_metrics_query(node: str, query: NodeMetricsArgs) -> Response:
        found = await nodes_view.get_node(shared, node)
        return ok(await node_metrics.query(shared, found.id, query))

    @EVENTS.on(app)
    async def list_events(query: EventsQuery) -> Response:
        where = events.parse_filter(request.args)
        return ok(await events.list_events(shared, where, query.limit, query.cursor or None))

    @EVENT_STREAM.on(app)
    async def event_stream(query: EventStreamQuery) -> Response:
        where = events.parse_filter(request.args)
        resume = parse_last_event_id(request.headers) or query.after or None
        return await sse_response(events.follow(shared, where, resume))
