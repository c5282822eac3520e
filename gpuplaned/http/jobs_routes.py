"""Routes for jobs, their runs and their logs (seed 000 section 11.1, Jobs, Runs and Logs)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs
from quart import Response, g, request
from quart_trio import QuartTrio

from gpuplaned.http.queries import JobsQuery, LogsQuery, LogStreamQuery, RunsQuery
from gpuplaned.http.responses import ok
from gpuplaned.http.routes import LAST_EVENT_ID, Param, Reply, Routes, SseKind, Stream
from gpuplaned.http.sse import parse_last_event_id, sse_response
from gpuplaned.protocol.batch_wire import BatchSubmit, BatchSubmitted
from gpuplaned.protocol.evaluation_wire import RetryBody
from gpuplaned.protocol.fields import UNSET, field
from gpuplaned.protocol.job_replies import JobList, JobReply, LogEnd, SubmitPlanReply
from gpuplaned.protocol.job_wire import Job, JobSubmit
from gpuplaned.protocol.log_replies import LogPage
from gpuplaned.protocol.run_replies import RunList, RunMetrics, RunMetricsMany, RunReply, RunSeries, RunSummaryReply
from gpuplaned.service.api import batches, jobs, logs, runs
from gpuplaned.service.api.jobs import STREAMS
from gpuplaned.service.api.runs import RunMetricsQuery, SeriesQuery
from gpuplaned.service.api.series_query import RunMetricsArgs

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext


@attrs.frozen(kw_only=True)
class SubmitQuery:
    dry_run: str = field(default=UNSET, enum=("true", "false"),
                         description="true: say what the submit would do (200, SubmitPlan) and write nothing")


api = Routes("jobs")
_JOB = Param("job_id", "the job's id (job_<ULID>)")
_RUN = Param("run_id", "the run's id")

SUBMIT = api.post("/api/v1/jobs", "submitJob", "Queue a job", Reply(201, JobReply, "The job, queued or already "
                                                                                  "dispatched."),
                  errors=(400, 403, 413), body=JobSubmit, query=SubmitQuery,
                  also=(Reply(200, SubmitPlanReply, "dry_run=true: what the submit would do; nothing was written."),),
                  description="A token with limits (GPUs per job, nodes, directories, queued jobs, a GPU-hour "
                              "budget) is refused past them with 403, details.limit naming the limit and, for the "
                              "budget, details.remaining_gpu_hours. dry_run=true answers 200 with the plan: would "
                              "(dispatch, queue or refuse), node, GPUs, queue position, budget after.")
BATCH = api.post("/api/v1/jobs:batch", "submitJobs", "Queue many jobs at once: all of them or none",
                 Reply(201, BatchSubmitted, "The jobs, queued, in the body's order."), errors=(400, 403, 413),
                 body=BatchSubmit,
                 description="One transaction: each entry is admitted as POST /api/v1/jobs admits one (a token's "
                             "limits, and its budget for the whole batch together); if any is refused none is "
                             "queued, and details.refused names each refused entry (index, field, code, limit, "
                             "message). 403 when every refusal is a token's limit, else 400. With "
                             "Idempotency-Key a repeat gets the first reply and queues nothing more.")
LIST = api.get("/api/v1/jobs", "listJobs", "Jobs, newest first", Reply(200, JobList, "The jobs."), errors=(400,),
               query=JobsQuery)
RUNS = api.get("/api/v1/runs", "listRuns", "Runs (each attempt of a job), newest first",
               Reply(200, RunList, "The runs."), errors=(400,), query=RunsQuery)
METRICS_QUERY = api.post("/api/v1/runs/metrics:query", "queryRunsMetrics", "Several runs' series in one call "
                                                                           "(overlaid charts)",
                         Reply(200, RunMetricsMany, "One RunMetrics per run, in the order asked."),
                         errors=(400, 404, 409, 413), body=RunMetricsQuery, tag="runs")
SUMMARY = api.get("/api/v1/runs/<run_id>/summary", "getRunSummary", "A run's summary: latest and best per metric, "
                                                                    "progress, trend, warnings",
                  Reply(200, RunSummaryReply, "The summary (kept up to date as batches arrive)."), errors=(404,),
                  params=(_RUN,), tag="runs")
METRICS = api.get("/api/v1/runs/<run_id>/metrics", "getRunMetrics", "A run's metric series for charts",
                  Reply(200, RunMetrics, "Columns downsampled to at most `points` buckets (min, max, avg, last)."),
                  errors=(400, 404), params=(_RUN,), query=RunMetricsArgs, tag="runs")
SERIES = api.get("/api/v1/runs/<run_id>/series", "getRunSeries", "One series of a run, every raw point (export)",
                 Reply(200, RunSeries, "The points, in x order; next_cursor when more are left."), errors=(400, 404),
                 params=(_RUN,), query=SeriesQuery, tag="runs",
                 description="For a full read (the metrics route downsamples). encoding=base64 is the fast way for "
                             "a program: each column the base64 of its little-endian values.")
RUN = api.get("/api/v1/runs/<run_id>", "getRun", "One run", Reply(200, RunReply, "The run."), errors=(404,),
              params=(Param("run_id", "the run's id (run_<ULID>)"),))
JOB = api.get("/api/v1/jobs/<job_id>", "getJob", "One job", Reply(200, JobReply, "The job."), errors=(404,),
              params=(_JOB,))
CANCEL = api.post("/api/v1/jobs/<job_id>/cancel", "cancelJob", "Cancel a queued or running job",
                  Reply(200, JobReply, "The job; a running one ends once its process has stopped."), errors=(404, 409),
                  params=(_JOB,))
RETRY = api.post("/api/v1/jobs/<job_id>/retry", "retryJob", "Queue an ended job again",
                 Reply(200, JobReply, "The job, queued again."), errors=(400, 404, 409, 413), params=(_JOB,),
                 body=RetryBody, body_required=False,
                 description="With resume_from (best, last or a checkpoint id of the job's lineage) its next attempts "
                             "get GPUPLANE_RESUME_FROM and GPUPLANE_RESUME_STEP and their runs record resumed_from; "
                             "without it they start afresh. 404: an unknown job or checkpoint; 409: the job has not "
                             "ended, has no checkpoint (with a value, for best), or the checkpoint is another job's, "
                             "deleted or its file gone.")
LOGS = api.get("/api/v1/jobs/<job_id>/logs", "getJobLogs", "A page of a job's output",
               Reply(200, LogPage, "The lines."), errors=(400, 404), params=(_JOB,), query=LogsQuery, tag="logs",
               description="Without tail or offset: the last 100 lines. With offset: the lines from that byte offset "
                           "on (after it, when it is > 0), up to limit.")
LOG_STREAM = api.get(
    "/api/v1/jobs/<job_id>/logs/stream", "streamJobLogs", "Follow a job's output (Server-Sent Events)",
    Reply(200, Stream("LogStreamEvent", "One event of GET /api/v1/jobs/{job_id}/logs/stream: a line of output (its "
                                        "id is the resume position: per stream followed, the offset of the last line "
                                        "sent, -1 for none), or the final `end`.",
                      (SseKind(STREAMS, None, r"^-?[0-9]+(,-?[0-9]+)?$"), SseKind(("end",), LogEnd))),
          "Events `stdout` and `stderr` (one line each; the id is the resume position), then one `end` event with "
          "status, attempt, exit_code and failure_reason. A comment every 15 s keeps it open."),
    errors=(400, 404), params=(_JOB, LAST_EVENT_ID), query=LogStreamQuery, tag="logs")


def one_job(job: Job) -> dict[str, Job]:
    """A single job's reply: its env values for a caller who may write (the local socket is
    its owner), secret-looking ones excepted; names only for a read-only one."""
    return {"job": jobs.view_for(job, getattr(g, "caller", None))}


def register(app: QuartTrio, shared: ServerContext) -> None:
    @SUBMIT.on(app)
    async def submit_job(body: JobSubmit, query: SubmitQuery) -> Response:
        caller = getattr(g, "caller", None)
        if query.dry_run == "true":
            return ok(SubmitPlanReply(plan=await jobs.plan(shared, body, caller=caller)))
        return ok(one_job(await jobs.submit(shared, body, caller=caller)), 201)

    @BATCH.on(app)
    async def submit_jobs(body: BatchSubmit) -> Response:
        caller = getattr(g, "caller", None)
        queued = await batches.submit_many(shared, body, caller=caller)
        return ok({"jobs": [jobs.view_for(job, caller) for job in queued]}, 201)

    @LIST.on(app)
    async def list_jobs(query: JobsQuery) -> Response:
        statuses = jobs.parse_statuses(query.status or None)
        page, next_cursor = await jobs.list_jobs(shared, statuses, query.limit, query.cursor or None,
                                                 query.group or None, query.sweep or None)
        return ok({"jobs": [jobs.env_view(job, values=False) for job in page], "next_cursor": next_cursor})

    @RUNS.on(app)
    async def list_runs(query: RunsQuery) -> Response:
        page, next_cursor = await runs.list_runs(
            shared, job_id=query.job_id or None, statuses=runs.parse_statuses(query.status or None),
            limit=query.limit, cursor=query.cursor or None)
        return ok({"runs": page, "next_cursor": next_cursor})

    @METRICS_QUERY.on(app)
    async def query_run_metrics(body: RunMetricsQuery) -> Response:
        return ok(await runs.query_many(shared, body))

    @SUMMARY.on(app)
    async def run_summary(run_id: str) -> Response:
        return ok(RunSummaryReply(summary=await runs.get_summary(shared, run_id, getattr(g, "caller", None))))

    @METRICS.on(app)
    async def run_metrics(run_id: str, query: RunMetricsArgs) -> Response:
        return ok(await runs.query_metrics(shared, run_id, query))

    @SERIES.on(app)
    async def run_series(run_id: str, query: SeriesQuery) -> Response:
        # Encoded by the service straight from the columns (a page can hold a million points).
        return Response(await runs.export_series(shared, run_id, query), content_type="application/json")

    @RUN.on(app)
    async def get_run(run_id: str) -> Response:
        return ok(await runs.get_run_detail(shared, run_id))

    @JOB.on(app)
    async def get_job(job_id: str) -> Response:
        return ok(one_job(await jobs.get_job(shared, job_id)))

    @CANCEL.on(app)
    async def cancel_job(job_id: str) -> Response:
        return ok(one_job(await jobs.cancel(shared, job_id, caller=getattr(g, "caller", None))))

    @RETRY.on(app)
    async def retry_job(job_id: str, body: RetryBody) -> Response:
        return ok(one_job(await jobs.retry(shared, job_id, body, caller=getattr(g, "caller", None))))

    @LOGS.on(app)
    async def job_logs(job_id: str, query: LogsQuery) -> Response:
        tail = None if query.tail is UNSET else query.tail
        offset = None if query.offset is UNSET else query.offset
        if tail is None and offset is None:
            tail = 100
        return ok(await logs.read_lines(shared, job_id, query.stream, attempt=query.attempt or None, tail=tail,
                                        offset=offset, limit=query.limit))

    @LOG_STREAM.on(app)
    async def job_log_stream(job_id: str, query: LogStreamQuery) -> Response:
        resume = parse_last_event_id(request.headers) or query.position or None
        events = await logs.follow_events(shared, job_id, query.stream, resume, query.attempt or None)

        return await sse_response(events)
