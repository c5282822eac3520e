"""The Tasks extension's methods (``tasks/get``, ``tasks/list``, ``tasks/cancel``,
``tasks/result``) over jobs: a task is its job (the task id is the job id), every state is
the daemon's, so any connection, stateless as they are here, can ask about any task.

Status: QUEUED/DISPATCHING/RUNNING/LOST -> working (a LOST job has not ended: its node may
yet tell how it did), SUCCEEDED -> completed, FAILED -> failed, CANCELLED -> cancelled; the
status message has the run's step, loss and ETA.

``tasks/result`` (2025-11-25) waits for the task's end, as the spec says, woken by the
job's events and looking again every ``RECHECK_S``; the client chose to wait, and the wait
holds nothing but its own request. At 2026-07-28 there is no ``tasks/result``: ``tasks/get``
carries the final ``result`` once the task has ended (SEP-2663).
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

import mcp_types as types
import trio

from gpuplaned.mcp import tasks
from gpuplaned.mcp.table import Call
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.service.api import jobs, ui_sessions

if TYPE_CHECKING:
    from mcp.server import Server

    from gpuplaned.service.context import ServerContext

IDENTIFIER = "io.modelcontextprotocol/tasks"
RELATED_TASK = "io.modelcontextprotocol/related-task"  # _meta on a result that started a task
LIST_LIMIT = 50
RECHECK_S = 2.0  # tasks/result looks at its job this often even when no event of it came
MODERN = "2026-07-28"


def _iso(ms: int | None) -> str:
    return datetime.datetime.fromtimestamp((ms or 0) / 1000, datetime.timezone.utc).isoformat()


async def task_of(shared: ServerContext, job: Any) -> types.Task:
    handle = await tasks.handle_for(shared, job)
    updated = job.finished_at or job.started_at or job.created_at
    return types.Task(task_id=job.id, status=handle.task_status, status_message=handle.status_message,
                      created_at=_iso(job.created_at), last_updated_at=_iso(updated), ttl=None,
                      poll_interval=handle.poll_interval_ms)


def wire(task: types.Task) -> dict[str, Any]:
    """A task as it is sent: ``ttl`` stays, as null (a job's task is kept as long as the job),
    where the SDK's own serialization would drop it and leave the answer invalid (it is required)."""
    return task.model_dump(by_alias=True, mode="json")


def register(server: Server[Any], shared: ServerContext, caller_of: Any, result_of: Any, cancel_job: Any) -> None:
    """Serve the methods on ``server``; ``result_of(call, job_id)`` is a finished task's tools/call result,
    ``cancel_job(ctx, job_id)`` cancels as the ``cancel_job`` tool does (its scope, confirmation and audit)."""

    def reader(ctx: Any) -> Any:
        caller = caller_of(ctx)
        if caller is not None:
            ui_sessions.require_scope(caller, "read")
        return caller

    async def get(ctx: Any, params: types.GetTaskRequestParams) -> Any:
        caller = reader(ctx)
        task = await task_of(shared, await jobs.get_job(shared, params.task_id))
        if ctx.protocol_version < MODERN or task.status == "working":
            return wire(task)
        ended = (await result_of(Call(shared, caller, ctx), params.task_id)).model_dump(
            by_alias=True, mode="json", exclude_none=True)
        return {**wire(task), "result": ended}

    async def list_(ctx: Any, params: types.PaginatedRequestParams) -> types.ListTasksResult:
        reader(ctx)
        page, next_cursor = await jobs.list_jobs(shared, [], LIST_LIMIT, params.cursor)
        return types.ListTasksResult(tasks=[await task_of(shared, job) for job in page], next_cursor=next_cursor)

    async def cancel(ctx: Any, params: types.CancelTaskRequestParams) -> dict[str, Any]:
        # One path with the cancel_job tool: a token it would refuse without confirmation
        # cannot cancel the same job here, and the audit log has the call either way.
        await cancel_job(ctx, params.task_id)
        return wire(await task_of(shared, await jobs.get_job(shared, params.task_id)))

    async def result(ctx: Any, params: types.GetTaskPayloadRequestParams) -> Any:
        caller = reader(ctx)
        job = await _ended(shared, params.task_id)
        return await result_of(Call(shared, caller, ctx), job.id)

    for method, params_type, handler in (("tasks/get", types.GetTaskRequestParams, get),
                                         ("tasks/list", types.PaginatedRequestParams, list_),
                                         ("tasks/cancel", types.CancelTaskRequestParams, cancel),
                                         ("tasks/result", types.GetTaskPayloadRequestParams, result)):
        server.add_request_handler(method, params_type, api_errors(handler))
    server.extensions[IDENTIFIER] = {}  # 2026-07-28 clients read capabilities.extensions
    declared = server.get_capabilities

    def with_tasks(*args: Any, **kwargs: Any) -> types.ServerCapabilities:
        # 2025-11-25 clients read capabilities.tasks; task_calls answers a task-augmented tools/call.
        capabilities = declared(*args, **kwargs)
        calls = types.ServerTasksRequestsCapability(tools=types.TasksToolsCapability(call=types.TasksCallCapability()))
        capabilities.tasks = types.ServerTasksCapability(list=types.TasksListCapability(),
                                                         cancel=types.TasksCancelCapability(), requests=calls)
        return capabilities

    server.get_capabilities = with_tasks  # type: ignore[method-assign]


async def _ended(shared: ServerContext, job_id: str) -> Any:
    """The job once it has ended: woken by its events, looked at again every ``RECHECK_S``."""
    async with shared.event_feed.subscribe(maxlen=16) as live:
        while True:
            job = await jobs.get_job(shared, job_id)
            if tasks.TASK_STATUS.get(job.status) != "working":
                return job
            with trio.move_on_after(RECHECK_S):
                async for event in live:
                    if getattr(event, "job_id", None) == job_id:
                        break


def api_errors(handler: Any) -> Any:
    """An ApiError leaves as the JSON-RPC error the SDK sends, with our body as its data."""
    from mcp.shared.exceptions import MCPError

    async def wrapped(ctx: Any, params: Any) -> Any:
        try:
            return await handler(ctx, params)
        except ApiError as error:
            code = types.INVALID_PARAMS if error.code in (ErrorCode.BAD_REQUEST, ErrorCode.NOT_FOUND) else \
                types.INTERNAL_ERROR if error.code is ErrorCode.INTERNAL else -32001
            raise MCPError(code=code, message=error.message, data=error.body()["error"]) from None
    return wrapped

