"""Routes for jobs, their runs and their logs (seed 000 section 11.1, Jobs, Runs and Logs)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from quart import Response, g, request
from quart_trio import QuartTrio

from gpuplaned.http.bodies import int_arg, json_body
from gpuplaned.http.responses import ok
from gpuplaned.http.sse import parse_last_event_id, sse_response
from gpuplaned.protocol.job_wire import Job
from gpuplaned.service import jobs, logs, runs
from gpuplaned.service.tokens import grants

if TYPE_CHECKING:
    from gpuplaned.daemon import DaemonContext


def one_job(job: Job) -> dict[str, Job]:
    """A single job's reply: its env values for a caller who may write (the local socket is
    its owner), secret-looking ones excepted; names only for a read-only one."""
    caller = getattr(g, "caller", None)
    return {"job": jobs.env_view(job, values=caller is None or grants(caller.scopes, "write"))}


def register(app: QuartTrio, shared: DaemonContext) -> None:
    @app.post("/api/v1/jobs")
    async def submit_job() -> Response:
        return ok(one_job(await jobs.submit(shared, await json_body())), 201)

    @app.get("/api/v1/jobs")
    async def list_jobs() -> Response:
        statuses = jobs.parse_statuses(request.args.get("status"))
        limit = int_arg("limit", 100, 1, 10_000)
        page, next_cursor = await jobs.list_jobs(shared, statuses, limit, request.args.get("cursor"))
        return ok({"jobs": [jobs.env_view(job, values=False) for job in page], "next_cursor": next_cursor})

    @app.get("/api/v1/runs")
    async def list_runs() -> Response:
        page, next_cursor = await runs.list_runs(
            shared, job_id=request.args.get("job_id") or None, statuses=runs.parse_statuses(request.args.get("status")),
            limit=int_arg("limit", 100, 1, 10_000), cursor=request.args.get("cursor"))
        return ok({"runs": page, "next_cursor": next_cursor})

    @app.post("/api/v1/runs/metrics:query")
    async def query_run_metrics() -> Response:
        return ok(await runs.query_many(shared, await json_body()))

    @app.get("/api/v1/runs/<run_id>/summary")
    async def run_summary(run_id: str) -> Response:
        return ok({"summary": await runs.get_summary(shared, run_id)})

    @app.get("/api/v1/runs/<run_id>/metrics")
    async def run_metrics(run_id: str) -> Response:
        return ok(await runs.query_metrics(shared, run_id, request.args))

    @app.get("/api/v1/runs/<run_id>/series")
    async def run_series(run_id: str) -> Response:
        # Encoded by the service straight from the columns (a page can hold a million points).
        return Response(await runs.export_series(shared, run_id, request.args), content_type="application/json")

    @app.get("/api/v1/runs/<run_id>")
    async def get_run(run_id: str) -> Response:
        return ok(await runs.get_run_detail(shared, run_id))

    @app.get("/api/v1/jobs/<job_id>")
    async def get_job(job_id: str) -> Response:
        return ok(one_job(await jobs.get_job(shared, job_id)))

    @app.post("/api/v1/jobs/<job_id>/cancel")
    async def cancel_job(job_id: str) -> Response:
        return ok(one_job(await jobs.cancel(shared, job_id)))

    @app.post("/api/v1/jobs/<job_id>/retry")
    async def retry_job(job_id: str) -> Response:
        return ok(one_job(await jobs.retry(shared, job_id)))

    @app.get("/api/v1/jobs/<job_id>/logs")
    async def job_logs(job_id: str) -> Response:
        stream = request.args.get("stream", "stdout")
        attempt = int_arg("attempt", 0, 0, 1_000_000) or None
        tail = int_arg("tail", 0, 0, logs.MAX_PAGE) if "tail" in request.args else None
        offset = int_arg("offset", 0, 0, 1 << 62) if "offset" in request.args else None
        limit = int_arg("limit", 10_000, 1, logs.MAX_PAGE)
        if tail is None and offset is None:
            tail = 100
        return ok(await logs.read_lines(shared, job_id, stream, attempt=attempt, tail=tail, offset=offset, limit=limit))

    @app.get("/api/v1/jobs/<job_id>/logs/stream")
    async def job_log_stream(job_id: str) -> Response:
        attempt = int_arg("attempt", 0, 0, 1_000_000) or None
        resume = parse_last_event_id(request.headers) or request.args.get("position")
        events = await logs.follow_events(shared, job_id, request.args.get("stream", "all"), resume, attempt)

        return await sse_response(events)

