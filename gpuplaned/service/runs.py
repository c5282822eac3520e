"""Runs for the API: each attempt of a job is a run (seed 000 section 4.1)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuplaned.protocol import cursors
from gpuplaned.protocol.errors import ApiError, ErrorCode
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
