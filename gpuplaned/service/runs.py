"""Runs for the API: each attempt of a job is a run (seed 000 section 4.1)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gpuplaned import tsdb
from gpuplaned.domain import run_summary
from gpuplaned.protocol import cursors
from gpuplaned.protocol.bodies import known_object
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.service.registry import now_ms
from gpuplaned.service.series_query import expand_names, json_finite, parse_names, parse_points, parse_range
from gpuplaned.store import projects as project_rows
from gpuplaned.store import runs as run_rows
from gpuplaned.store.runs import Run

if TYPE_CHECKING:
    from gpuplaned.daemon import DaemonContext

RUN_STATES = ("RUNNING", "SUCCEEDED", "FAILED", "CANCELLED", "LOST")


def _readers(shared: DaemonContext):  # type: ignore[no-untyped-def]
    if shared.readers is None:
        raise ApiError(ErrorCode.UNAVAILABLE, "this daemon's role keeps no runs")
    return shared.readers


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
    page = found[:limit]
    return page, cursors.encode("runs", page[-1].created_at, page[-1].id) if len(found) > limit else None


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
