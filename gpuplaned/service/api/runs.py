"""Runs for the API: each attempt of a job is a run (seed 000 section 4.1)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import attrs

from gpuplaned import tsdb
from gpuplaned.domain import run_progress, run_summary
from gpuplaned.protocol import columns as columns_codec
from gpuplaned.protocol import cursors
from gpuplaned.protocol.converter import FieldInvalid, structure
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.fields import UNSET, field
from gpuplaned.protocol.job_states import RUN_STATES
from gpuplaned.protocol.run_replies import (
    SERIES_ENCODINGS,
    HealthWarning,
    Progress,
    RunMetrics,
    RunMetricsMany,
    RunPrimaryMetric,
    RunReply,
    RunSummary,
)
from gpuplaned.service import access
from gpuplaned.service.api import confined_callers
from gpuplaned.service.link.registry import now_ms
from gpuplaned.service.passes import detector
from gpuplaned.service.api.series_query import (
    MAX_MS,
    NO_SERIES,
    RunMetricsArgs,
    duration_ms,
    expand_names,
    given,
    series_columns,
)
from gpuplaned.store import project_rows
from gpuplaned.store import run_rows
from gpuplaned.store.run_rows import Run
from gpuplaned.tsdb.query import MAX_POINTS

if TYPE_CHECKING:
    from gpuplaned.service.api.ui_sessions import Caller
    from gpuplaned.service.context import ServerContext


def _readers(shared: ServerContext) -> Any:
    return access.readers(shared, "runs")


def parse_statuses(raw: str | None) -> list[str]:
    statuses = [s.strip().upper() for s in (raw or "").split(",") if s.strip()]
    bad = [s for s in statuses if s not in RUN_STATES]
    if bad:
        raise ApiError(ErrorCode.BAD_REQUEST, f"status: unknown run state(s) {', '.join(bad)}",
                       {"field": "status", "states": list(RUN_STATES)})
    return statuses


async def list_runs(shared: ServerContext, *, job_id: str | None, statuses: list[str], limit: int,
                    cursor: str | None) -> tuple[list[Run], str | None]:
    before = cursors.decode("runs", cursor, (int, str))
    found = await _readers(shared).run(lambda conn: run_rows.list_runs(
        conn, job_id=job_id, statuses=statuses, limit=limit + 1, before=before))  # type: ignore[arg-type]
    return cursors.split_page("runs", found, limit)  # rows without env_snapshot: GET /runs/{id} has it


async def get_run(shared: ServerContext, run_id: str) -> Run:
    run = await _readers(shared).run(lambda conn: run_rows.get_run(conn, run_id))
    if run is None:
        raise ApiError(ErrorCode.NOT_FOUND, f"no run {run_id!r}", {"run_id": run_id})
    return run


async def query_metrics(shared: ServerContext, run_id: str, args: RunMetricsArgs) -> RunMetrics:
    """Chart columns of a run's metrics: ``names`` (patterns allowed), ``x`` step (default) or
    ts, ``start``/``end`` in x units or ``window`` (ts only), at most ``points`` buckets keeping
    each one's min and max. No range: the whole run."""
    x, names, points = args.x, tuple(given(args.names) or ()), args.points
    start, end = given(args.start), given(args.end)
    if args.window is not UNSET:
        end = end if end is not None else now_ms()
        start = max(0, end - duration_ms(args.window))
    await get_run(shared, run_id)  # 404 for an unknown run

    def read(conn: Any) -> dict[str, Any]:
        found = expand_names(names, tsdb.list_names(conn, "run", run_id))
        if not found:
            return NO_SERIES
        return tsdb.query_series(conn, "run", run_id, found, start, end, points, x)

    result = await _readers(shared).run(read)
    return RunMetrics(run_id=run_id, x_axis=x, **series_columns(result))


async def get_run_detail(shared: ServerContext, run_id: str) -> RunReply:
    """``GET /runs/{id}``: the run, its project and experiment, and its primary metric."""

    def read(conn: Any) -> RunReply:
        run = run_rows.get_run(conn, run_id)
        if run is None:
            raise ApiError(ErrorCode.NOT_FOUND, f"no run {run_id!r}", {"run_id": run_id})
        primary, direction, summary = project_rows.run_context(conn, run_id)
        view = run_summary.primary_view(summary, primary.metric, primary.source, direction)
        return RunReply(run=run, project=primary.project, experiment=primary.experiment,
                        primary_metric=None if view is None else RunPrimaryMetric(**view))

    return await _readers(shared).run(read)


async def get_summary(shared: ServerContext, run_id: str, caller: Caller | None = None) -> RunSummary:
    """The run's summary: per metric the latest and best point and count (and, for losses, the
    trend), the run's progress, and warnings (seed 000 section 10.2); and its primary metric,
    resolved experiment -> project -> global when asked, with that metric's latest and best.
    A job's process (``confined_callers``) reads only its own runs'."""
    await confined_callers.require_own_run(shared, run_id, caller)
    def read(conn: Any) -> tuple[Any, ...]:
        primary, direction, summary = project_rows.run_context(conn, run_id)
        config = run_rows.settings(conn, run_id).get("config")  # what init(config=) passed
        return primary, direction, summary, config, detector.open_stall(conn, run_id)

    primary, direction, summary, config, stalled = await _readers(shared).run(read)
    health = [HealthWarning(**warning) for warning in run_progress.health(summary, run_summary.SPIKE_GAP)]
    shown = run_summary.public(summary)
    view = run_summary.primary_view(summary, primary.metric, primary.source, direction)
    progress = Progress(**run_progress.progress(summary, config))
    return RunSummary(run_id=run_id, metrics=shown["metrics"], progress=progress, warnings=shown["warnings"],
                      health=health + ([stalled] if stalled else []),
                      primary_metric=None if view is None else RunPrimaryMetric(**view))


MAX_QUERY_RUNS = 50


def _names(value: Any) -> str | None:
    if isinstance(value, str) or (isinstance(value, list) and all(isinstance(n, str) for n in value)):
        return None
    return "strings"


@attrs.frozen(kw_only=True)
class RunMetricsQuery:
    """What GET /runs/{id}/metrics takes, for several runs at once."""

    run_ids: list[str] = field(min_items=1, max_items=MAX_QUERY_RUNS, items={"min_length": 1},
                               message=f"a list of 1 to {MAX_QUERY_RUNS} run ids")
    names: Any = field(default=None, check=_names, schema={
        "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
        "description": "names or patterns, comma-separated or a list; absent: all"})
    x: str | None = field(default=None, enum=("step", "ts"))
    start: int | None = field(default=None, minimum=0, maximum=MAX_MS)
    end: int | None = field(default=None, minimum=0, maximum=MAX_MS)
    points: int | None = field(default=None, minimum=1, maximum=MAX_POINTS)


async def query_many(shared: ServerContext, query: RunMetricsQuery) -> RunMetricsMany:
    """Several runs' series in one call, for overlaid charts (``POST /runs/metrics:query``):
    ``{"run_ids": [...], "names": "a,b" or [...], "x": "step", "start", "end", "points"}``."""
    names = query.names.split(",") if isinstance(query.names, str) else query.names or []
    wanted = {"names": [n.strip() for n in names if n.strip()] or None, "x": query.x, "start": query.start,
              "end": query.end, "points": query.points}
    args = structure({k: v for k, v in wanted.items() if v is not None}, RunMetricsArgs)
    return RunMetricsMany(runs=[await query_metrics(shared, run_id, args) for run_id in dict.fromkeys(query.run_ids)])


SERIES_COLUMNS = ("step", "ts", "value")
DEFAULT_SERIES_LIMIT = 100_000
MAX_SERIES_LIMIT = 1_000_000
_NONFINITE = ("NaN", "Infinity", "-Infinity")


def _not_after_end(query: SeriesQuery) -> None:
    if query.start is not UNSET and query.end is not UNSET and query.start > query.end:
        raise FieldInvalid("start", "must not be after end")


_X_RANGE = {"minimum": 0, "maximum": MAX_MS}


@attrs.frozen(kw_only=True)
class SeriesQuery:
    """``GET /runs/{id}/series``'s parameters."""

    name: str = field(min_length=1, max_length=200, message="the series' name (1 to 200 characters)",
                      description="the series' exact name")
    x: str = field(default="step", enum=("step", "ts"), description="the axis of start and end, and the order")
    start: int = field(default=UNSET, **_X_RANGE, description="first x (step, or ms with x=ts); absent: the first "
                                                             "point")
    end: int = field(default=UNSET, **_X_RANGE, description="last x, included; absent: the last point")
    limit: int = field(default=DEFAULT_SERIES_LIMIT, minimum=1, maximum=MAX_SERIES_LIMIT,
                       description="at most this many points")
    columns: list[str] = field(factory=lambda: list(SERIES_COLUMNS), min_items=1, items={"enum": SERIES_COLUMNS},
                               message=f"comma-separated, of {', '.join(SERIES_COLUMNS)}",
                               description="comma-separated columns; absent: all three")
    encoding: str = field(default="json", enum=SERIES_ENCODINGS, description="json: numbers; base64: little-endian "
                                                                              "int64 (step, ts) and float64 (value)")
    cursor: str = field(default=UNSET, description="next_cursor of the previous page (opaque)")

    __attrs_post_init__ = _not_after_end


async def export_series(shared: ServerContext, run_id: str, query: SeriesQuery) -> bytes:
    """``GET /runs/{id}/series``: every raw point of one series, in x order, as a JSON body.

    ``name`` (required); ``x`` step (default) or ts: the axis of ``start``/``end`` (both
    included) and of the order (equal steps by ts, equal ts in ingest order); ``limit``
    points a page (``next_cursor`` then names where the next begins); ``columns``, a
    subset of step,ts,value; ``encoding`` json (numbers; NaN and infinities are null and
    listed in ``nonfinite``) or base64 (each column the base64 of its little-endian int64
    or float64 values, NaN and infinities as they are).

    The body is encoded here, on the reader's thread, with ``json.dumps`` straight from the
    columns: a 100k-point page has no per-point Python step but the C encoder's.
    """
    name, x, limit, encoding = query.name, query.x, query.limit, query.encoding
    start = None if query.start is UNSET else query.start
    end = None if query.end is UNSET else query.end
    columns = tuple(c for c in SERIES_COLUMNS if c in query.columns)
    skip = 0
    after = cursors.decode(f"series:{x}", query.cursor or None, (int, int))
    if after is not None:
        start, skip = after  # where the previous page ended, and how many points at that x it had
        if skip < 0 or (end is not None and start > end):
            raise ApiError(ErrorCode.BAD_REQUEST, "cursor: not a cursor for this range", {"field": "cursor"})

    def read(conn: Any) -> bytes:
        if run_rows.get_run(conn, run_id) is None:
            raise ApiError(ErrorCode.NOT_FOUND, f"no run {run_id!r}", {"run_id": run_id})
        if name not in tsdb.list_names(conn, "run", run_id):
            raise ApiError(ErrorCode.NOT_FOUND, f"run {run_id} has no series {name!r}", {"run_id": run_id, "name": name})
        points = tsdb.read_points(conn, "run", run_id, name, start, end, x=x, limit=skip + limit + 1,
                                  arrays=encoding == "base64")
        xs = points[x]
        more = len(xs) > skip + limit
        cursor = None
        if more:
            last = skip + limit - 1
            at = last
            while at > 0 and xs[at - 1] == xs[last]:
                at -= 1
            cursor = cursors.encode(f"series:{x}", xs[last], last + 1 - at)
        page = {k: points[k][skip:skip + limit] for k in SERIES_COLUMNS}
        return _series_body({"run_id": run_id, "name": name, "x_axis": x, "encoding": encoding,
                             "count": len(page["value"])}, page, columns, encoding, cursor)

    return await _readers(shared).run(read)


def _series_body(head: dict[str, Any], page: dict[str, Any], columns: tuple[str, ...], encoding: str,
                 cursor: str | None) -> bytes:
    """The reply's JSON, assembled from the head and one JSON text per column: a base64
    column goes in as the bytes it is (json.dumps would scan it for escapes)."""
    values = page["value"]
    nonfinite: dict[str, list[int]] = {k: [] for k in _NONFINITE}
    total = sum(values)
    if total - total != 0:  # a NaN or an infinity somewhere (or only an overflowing sum)
        for i, v in enumerate(values):
            if v != v:
                nonfinite["NaN"].append(i)
            elif v - v != 0:
                nonfinite["Infinity" if v > 0 else "-Infinity"].append(i)
        if encoding == "json" and any(nonfinite.values()):
            page = {**page, "value": [v if v - v == 0 else None for v in values]}
    parts = [json.dumps({**head, "nonfinite": nonfinite, "next_cursor": cursor}, separators=(",", ":")).encode()[:-1]]
    for column in columns:
        col = page[column]
        if encoding == "base64":
            parts += [b',"', column.encode(), b'":"', columns_codec.encode(col), b'"']
        else:
            parts += [b',"', column.encode(), b'":', json.dumps(col, separators=(",", ":"), allow_nan=False).encode()]
    parts.append(b"}")
    return b"".join(parts)
