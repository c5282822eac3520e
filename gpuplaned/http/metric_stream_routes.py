"""``GET /api/v1/runs/{id}/metrics/stream?names=``: a run's new points as Server-Sent Events
(``gpuplaned.service.link.metric_feeds``), resumable with ``Last-Event-ID``; and
``GET /api/v1/runs/metrics/stream?run_ids=a,b&names=``, the same for several runs on one
connection (a browser holds six to a host), each ``points`` event naming its run.

A chart opens the stream first, reads the series (``GET /api/v1/runs/{id}/metrics``) once the
``ready`` event came, and merges what follows (a point may be in both: same step and ts).
On ``reset`` it reads the series again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs
from quart import Response, request
from quart_trio import QuartTrio

from gpuplaned.http.routes import LAST_EVENT_ID, Param, Reply, Routes, SseKind, Stream
from gpuplaned.http.sse import parse_last_event_id, sse_response
from gpuplaned.protocol.fields import UNSET, field
from gpuplaned.protocol.metric_stream_frames import RunStreamedPoints, StreamedPoints, StreamReady, StreamReset
from gpuplaned.service.api import runs, workspace
from gpuplaned.service.api.series_query import MAX_NAMES, names_fault

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext

_ID = "^[0-9a-f]{8}-[0-9]+$"


def _names() -> Any:
    return field(default=UNSET, min_items=1, items={"min_length": 1, "pattern": r"^[A-Za-z0-9_.*?\[\]/-]{1,200}$"},
                 message="not a metric name or pattern: {value!r}", check=names_fault, schema={"maxItems": MAX_NAMES},
                 description="comma-separated names or shell patterns (train/*); absent: every series")


@attrs.frozen(kw_only=True)
class MetricStreamQuery:
    names: list[str] = _names()


MAX_FOLLOWED = 64  # runs on one stream (the feeds keep the last batches of this many runs)


@attrs.frozen(kw_only=True)
class RunsStreamQuery:
    run_ids: list[str] = field(min_items=1, max_items=MAX_FOLLOWED, items={"min_length": 1, "max_length": 100},
                               message=f"comma-separated run ids, 1 to {MAX_FOLLOWED}",
                               description=f"comma-separated run ids (1 to {MAX_FOLLOWED})")
    names: list[str] = _names()


api = Routes("runs")

STREAM = api.get(
    "/api/v1/runs/<run_id>/metrics/stream", "streamRunMetrics", "Follow a run's new points (Server-Sent Events)",
    Reply(200, Stream("RunMetricsStreamEvent", "One event of GET /api/v1/runs/{id}/metrics/stream; ids are "
                                               "<epoch>-<seq>, to resume from with Last-Event-ID.",
                      (SseKind(("points",), StreamedPoints, _ID), SseKind(("ready",), StreamReady, _ID),
                       SseKind(("reset",), StreamReset, _ID))),
          "`points`: one committed batch's points of the wanted series, each batch once; `ready` (first, without "
          "Last-Event-ID): read the series now, then merge what follows; `reset`: the resume point is gone (a "
          "daemon restart, too old, or this follower fell behind): read the series again. A comment every 15 s "
          "keeps it open."),
    errors=(400, 404), params=(Param("run_id", "the run's id (run_<ULID>)"), LAST_EVENT_ID),
    query=MetricStreamQuery)


STREAM_MANY = api.get(
    "/api/v1/runs/metrics/stream", "streamRunsMetrics", "Follow several runs' new points on one stream "
                                                        "(Server-Sent Events)",
    Reply(200, Stream("RunsMetricsStreamEvent", "One event of GET /api/v1/runs/metrics/stream; ids are <epoch>-<seq> "
                                                "(the daemon's, one for all the runs), to resume from with "
                                                "Last-Event-ID.",
                      (SseKind(("points",), RunStreamedPoints, _ID), SseKind(("ready",), StreamReady, _ID),
                       SseKind(("reset",), StreamReset, _ID))),
          "As GET /api/v1/runs/{id}/metrics/stream for each run: `points` names its run; `ready` (first, without "
          "Last-Event-ID): read the series now; `reset`: a resume point is gone: read every run's series again."),
    errors=(400, 404), params=(LAST_EVENT_ID,), query=RunsStreamQuery)


def register(app: QuartTrio, shared: ServerContext) -> None:
    @STREAM_MANY.on(app)
    async def stream_runs_metrics(query: RunsStreamQuery) -> Response:
        await workspace.require_runs(shared, query.run_ids)  # 404 naming an unknown run
        names = () if query.names is UNSET else tuple(query.names)
        resume = parse_last_event_id(request.headers)
        return await sse_response(shared.metric_feeds.follow_many(query.run_ids, names, resume))

    @STREAM.on(app)
    async def stream_run_metrics(run_id: str, query: MetricStreamQuery) -> Response:
        await runs.get_run(shared, run_id)  # 404 for an unknown run
        names = () if query.names is UNSET else tuple(query.names)
        resume = parse_last_event_id(request.headers)
        return await sse_response(shared.metric_feeds.follow(run_id, names, resume))
