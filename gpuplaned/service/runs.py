"""Runs for the API: each attempt of a job is a run (seed 000 section 4.1)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gpuplaned import tsdb
from gpuplaned.domain import run_summary
from gpuplaned.protocol import columns as columns_codec
from gpuplaned.protocol import cursors
from gpuplaned.protocol.bodies import known_object
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.service import access
from gpuplaned.service.registry import now_ms
from gpuplaned.service.series_query import (
    MAX_MS,
    expand_names,
    json_finite,
    parse_names,
    parse_points,
    parse_range,
)
from gpuplaned.store import project_rows
from gpuplaned.store import run_rows
from gpuplaned.store.run_rows import Run

if TYPE_CHECKING:
    from gpuplaned.daemon import DaemonContext

RUN_STATES = ("RUNNING", "SUCCEEDED", "FAILED", "CANCELLED", "LOST")


def _readers(shared: DaemonContext) -> Any:
    return access.readers(shared, "runs")


def parse_statuses(raw: str | None) -> list[str]:
    statuses = [s.strip().upper() for s in (raw or "").split(",") if s.strip()]
    bad = [s for s in statuses if s not in RUN_STATES]
    if bad:
        raise ApiError(ErrorCode.BAD_REQUEST, f"status: unknown run state(s) {', '.join(bad)}",
                       {"field": "status", "states": list(RUN_STATES)})
    return statuses


async def list_runs(shared: DaemonContext, *, job_id: str | None, statuses: list[str], limit: int,
                    cursor: str | None) -> tuple[list[Run], str | None]:
    before = cursors.decode("runs", cursor, (int, str))
    found = await _readers(shared).run(lambda conn: run_rows.list_runs(
        conn, job_id=job_id, statuses=statuses, limit=limit + 1, before=before))  # type: ignore[arg-type]
    return cursors.split_page("runs", found, limit)  # rows without env_snapshot: GET /runs/{id} has it


async def get_run(shared: DaemonContext, run_id: str) -> Run:
    run = await _readers(shared).run(lambda conn: run_rows.get_run(conn, run_id))
    if run is None:
        raise ApiError(ErrorCode.NOT_FOUND, f"no run {run_id!r}", {"run_id": run_id})
    return run


async def query_metrics(shared: DaemonContext, run_id: str, args: Mapping[str, str]) -> dict[str, Any]:
    """Chart columns of a run's metrics: ``names`` (patterns allowed), ``x`` step (default) or
    ts, ``start``/``end`` in x units or ``window`` (ts only), at most ``points`` buckets keeping
    each one's min and max. No range: the whole run."""
    x = args.get("x") or "step"
    if x not in ("step", "ts"):
        raise ApiError(ErrorCode.BAD_REQUEST, f"x: step or ts, not {x!r}", {"field": "x"})
    if x == "step" and args.get("window"):
        raise ApiError(ErrorCode.BAD_REQUEST, "window: only with x=ts (steps have no duration)", {"field": "window"})
    names, points = parse_names(args), parse_points(args)
    start, end, window_ms = parse_range(args, default_window_ms=None)
    if window_ms is not None:
        end = end if end is not None else now_ms()
        start = max(0, end - window_ms)
    await get_run(shared, run_id)  # 404 for an unknown run

    def read(conn: Any) -> dict[str, Any]:
        found = expand_names(names, tsdb.list_names(conn, "run", run_id))
        if not found:
            return {"resolution": "raw", "width": 1, "x": [], "series": {}}
        return tsdb.query_series(conn, "run", run_id, found, start, end, points, x)

    result = await _readers(shared).run(read)
    return {"run_id": run_id, "x_axis": x, **json_finite(result)}


async def get_run_detail(shared: DaemonContext, run_id: str) -> dict[str, Any]:
    """``GET /runs/{id}``: the run, its project and experiment, and its primary metric."""

    def read(conn: Any) -> dict[str, Any]:
        run = run_rows.get_run(conn, run_id)
        if run is None:
            raise ApiError(ErrorCode.NOT_FOUND, f"no run {run_id!r}", {"run_id": run_id})
        primary, direction, summary = project_rows.run_context(conn, run_id)
        return {"run": run, "project": primary.project, "experiment": primary.experiment,
                "primary_metric": run_summary.primary_view(summary, primary.metric, primary.source, direction)}

    return await _readers(shared).run(read)


async def get_summary(shared: DaemonContext, run_id: str) -> dict[str, Any]:
    """The run's summary: per metric the latest and best point and count (and, for losses, the
    trend), the run's progress, and warnings (seed 000 section 10.2); and its primary metric,
    resolved experiment -> project -> global when asked, with that metric's latest and best."""
    primary, direction, summary = await _readers(shared).run(lambda conn: project_rows.run_context(conn, run_id))
    return {"run_id": run_id, **run_summary.public(summary),
            "primary_metric": run_summary.primary_view(summary, primary.metric, primary.source, direction)}


MAX_QUERY_RUNS = 50


async def query_many(shared: DaemonContext, body: Any) -> dict[str, Any]:
    """Several runs' series in one call, for overlaid charts (``POST /runs/metrics:query``):
    ``{"run_ids": [...], "names": "a,b" or [...], "x": "step", "start", "end", "points"}``."""
    known_object(body, {"run_ids", "names", "x", "start", "end", "points"})
    run_ids = body.get("run_ids")
    if (not isinstance(run_ids, list) or not 1 <= len(run_ids) <= MAX_QUERY_RUNS
            or not all(isinstance(r, str) and r for r in run_ids)):
        raise ApiError(ErrorCode.BAD_REQUEST, f"run_ids: a list of 1 to {MAX_QUERY_RUNS} run ids", {"field": "run_ids"})
    names = body.get("names")
    if isinstance(names, list):
        if not all(isinstance(n, str) for n in names):
            raise ApiError(ErrorCode.BAD_REQUEST, "names: strings", {"field": "names"})
        names = ",".join(names)
    args = {k: str(v) for k, v in (("names", names), ("x", body.get("x")), ("start", body.get("start")),
                                   ("end", body.get("end")), ("points", body.get("points"))) if v is not None}
    return {"runs": [await query_metrics(shared, run_id, args) for run_id in dict.fromkeys(run_ids)]}


SERIES_COLUMNS = ("step", "ts", "value")
SERIES_ENCODINGS = ("json", "base64")
DEFAULT_SERIES_LIMIT = 100_000
MAX_SERIES_LIMIT = 1_000_000
_NONFINITE = ("NaN", "Infinity", "-Infinity")


async def export_series(shared: DaemonContext, run_id: str, args: Mapping[str, str]) -> bytes:
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
    name = args.get("name") or ""
    if not 0 < len(name) <= 200:
        raise ApiError(ErrorCode.BAD_REQUEST, "name: the series' name (1 to 200 characters)", {"field": "name"})
    x = args.get("x") or "step"
    if x not in ("step", "ts"):
        raise ApiError(ErrorCode.BAD_REQUEST, f"x: step or ts, not {x!r}", {"field": "x"})
    start, end = _bound(args, "start"), _bound(args, "end")
    if start is not None and end is not None and start > end:
        raise ApiError(ErrorCode.BAD_REQUEST, "start: must not be after end", {"field": "start"})
    limit = _bound(args, "limit", 1, MAX_SERIES_LIMIT)
    limit = DEFAULT_SERIES_LIMIT if limit is None else limit
    columns = _choice_list(args, "columns", SERIES_COLUMNS)
    encoding = args.get("encoding") or "json"
    if encoding not in SERIES_ENCODINGS:
        raise ApiError(ErrorCode.BAD_REQUEST, f"encoding: json or base64, not {encoding!r}", {"field": "encoding"})
    skip = 0
    after = cursors.decode(f"series:{x}", args.get("cursor"), (int, int))
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


def _bound(args: Mapping[str, str], field: str, low: int = 0, high: int = MAX_MS) -> int | None:
    raw = args.get(field)
    if raw is None or raw == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ApiError(ErrorCode.BAD_REQUEST, f"{field}: an integer, not {raw!r}", {"field": field}) from None
    if not low <= value <= high:
        raise ApiError(ErrorCode.BAD_REQUEST, f"{field}: from {low} to {high}, got {value}", {"field": field})
    return value


def _choice_list(args: Mapping[str, str], field: str, choices: tuple[str, ...]) -> tuple[str, ...]:
    raw = args.get(field)
    if raw is None:
        return choices
    picked = [c.strip() for c in raw.split(",") if c.strip()]
    bad = [c for c in picked if c not in choices]
    if not picked or bad:
        raise ApiError(ErrorCode.BAD_REQUEST, f"{field}: comma-separated, of {', '.join(choices)}",
                       {"field": field})
    return tuple(c for c in choices if c in picked)


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
