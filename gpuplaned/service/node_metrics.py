"""Node metrics for charts: which series, over what window, at how many points.

``names`` takes exact names and shell-style patterns (``gpu0.*``, ``host.disk.*.free_bytes``);
none means every series of the node. ``window`` is a duration back from ``end`` (default
now); ``start``/``end`` may also be given as ms. The store picks raw points or rollups by
the window and downsamples to at most ``points`` buckets, keeping each bucket's min and max.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

from gpuplaned import tsdb
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.service.series_query import expand_names, json_finite, parse_names, parse_points, parse_range

if TYPE_CHECKING:
    from gpuplaned.daemon import DaemonContext

DEFAULT_WINDOW_MS = 3_600_000


@attrs.frozen
class MetricsQuery:
    names: tuple[str, ...]  # empty: all
    start: int | None
    end: int | None
    window_ms: int | None
    points: int


def parse_query(args: Mapping[str, str]) -> MetricsQuery:
    start, end, window_ms = parse_range(args, default_window_ms=DEFAULT_WINDOW_MS)
    return MetricsQuery(parse_names(args), start, end, window_ms, parse_points(args))


async def query(shared: DaemonContext, node_id: str, q: MetricsQuery) -> dict[str, Any]:
    if shared.readers is None:
        raise ApiError(ErrorCode.UNAVAILABLE, "this daemon's role keeps no metrics")
    end = q.end if q.end is not None else int(time.time() * 1000)
    start = q.start if q.start is not None else max(0, end - (q.window_ms or DEFAULT_WINDOW_MS))
    if start > end:
        raise ApiError(ErrorCode.BAD_REQUEST, "start: after end (which defaults to now)", {"field": "start"})

    def read(conn: Any) -> dict[str, Any]:
        names = expand_names(q.names, tsdb.list_names(conn, "node", node_id))
        if not names:
            return {"resolution": "raw", "width": 1, "x": [], "series": {}}
        return tsdb.query_series(conn, "node", node_id, names, start, end, q.points)

    result = await shared.readers.run(read)
    return {"node_id": node_id, "start": start, "end": end, **json_finite(result)}
