"""Node metrics for charts: which series, over what window, at how many points.

``names`` takes exact names and shell-style patterns (``gpu0.*``, ``host.disk.*.free_bytes``);
none means every series of the node. ``window`` is a duration back from ``end`` (default
now); ``start``/``end`` may also be given as ms. The store picks raw points or rollups by
the window and downsamples to at most ``points`` buckets, keeping each bucket's min and max.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from gpuplaned import tsdb
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.fields import UNSET
from gpuplaned.protocol.node_replies import NodeMetrics
from gpuplaned.service.api.series_query import NO_SERIES, NodeMetricsArgs, duration_ms, expand_names, given, series_columns

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext

DEFAULT_WINDOW_MS = 3_600_000


async def query(shared: ServerContext, node_id: str, q: NodeMetricsArgs) -> NodeMetrics:
    if shared.readers is None:
        raise ApiError(ErrorCode.UNAVAILABLE, "this daemon's role keeps no metrics")
    end = q.end if q.end is not UNSET else int(time.time() * 1000)
    window_ms = duration_ms(q.window) if q.window is not UNSET else DEFAULT_WINDOW_MS
    start = q.start if q.start is not UNSET else max(0, end - window_ms)
    if start > end:
        raise ApiError(ErrorCode.BAD_REQUEST, "start: after end (which defaults to now)", {"field": "start"})

    def read(conn: Any) -> dict[str, Any]:
        names = expand_names(tuple(given(q.names) or ()), tsdb.list_names(conn, "node", node_id))
        if not names:
            return NO_SERIES
        return tsdb.query_series(conn, "node", node_id, names, start, end, q.points)

    result = await shared.readers.run(read)
    return NodeMetrics(node_id=node_id, start=start, end=end, **series_columns(result))
