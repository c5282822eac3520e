"""Task-augmented ``tools/call``: long work answered with the task itself, in both eras.

- **2025-11-25:** the client asks, with ``params.task`` (``{"ttl": ...}``), on a tool whose
  declaration says ``execution.taskSupport = "optional"`` (the write tools: their answer is
  a job). The answer is ``CreateTaskResult``, ``{"task": {...}}``; ``tasks/get`` follows it
  and ``tasks/result`` waits for its end (``task_methods``). A tool that makes no task
  (a read, or a dry run) refuses the request and says to call it plainly.
- **2026-07-28** (the ``io.modelcontextprotocol/tasks`` extension): the server decides. When
  the request's client capabilities declare the extension and the answer started a task,
  the answer is the task, flattened, with ``resultType: "task"``; ``tasks/get`` carries the
  final result once the task has ended. A client that did not declare it gets the plain
  ``CallToolResult`` (with the related-task ``_meta``), as before.

The tool runs exactly as a plain call does (scope, arguments, confirmation, audit); only its
answer is reshaped. That is done here, as server middleware around the SDK's own
serialization, because the SDK sieves every ``tools/call`` answer as a ``CallToolResult`` and
would drop a ``CreateTaskResult``; a middleware that returns its own wire form is trusted to
(mcp 2.3.0, ``ServerRunner._on_request``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs
import mcp_types as types
from mcp.shared.exceptions import MCPError

from gpuplaned.mcp import task_methods
from gpuplaned.mcp.tools import BY_NAME
from gpuplaned.service.api import jobs

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext

MODERN = "2026-07-28"


def makes_tasks(tool: Any) -> bool:
    """Does the tool's answer carry a task (a job it started or changed)?"""
    return attrs.has(tool.reply) and "task" in attrs.fields_dict(tool.reply)


def execution(tool: Any) -> types.ToolExecution | None:
    return types.ToolExecution(task_support="optional") if makes_tasks(tool) else None


def _declares_extension(ctx: Any) -> bool:
    capabilities = ctx.session.client_capabilities
    return bool(capabilities is not None and (capabilities.extensions or {}).get(task_methods.IDENTIFIER) is not None)


def _task_id(answer: dict[str, Any]) -> str | None:
    related = (answer.get("_meta") or {}).get(task_methods.RELATED_TASK) or {}
    return related.get("taskId")


def _refusal(answer: dict[str, Any]) -> MCPError:
    """A task was asked for and none was made: the tool's own error if it failed, else why not."""
    if answer.get("isError"):
        text = next((c.get("text") for c in answer.get("content") or () if c.get("type") == "text"), None)
        return MCPError(code=types.INVALID_PARAMS, message="the tool failed before any task was made", data=text)
    return MCPError(code=types.INVALID_PARAMS, message="this call makes no task (a dry run answers at once): "
                                                       "call it without params.task")


def middleware(shared: ServerContext) -> Any:
    """The server middleware that reshapes a task-making ``tools/call`` answer (see the module)."""

    async def task_augmented(ctx: Any, call_next: Any) -> Any:
        params = ctx.params if isinstance(ctx.params, dict) else {}
        if ctx.method != "tools/call":
            return await call_next(ctx)
        legacy = ctx.protocol_version < MODERN
        asked = legacy and params.get("task") is not None
        if asked:
            tool = BY_NAME.get(params.get("name"))
            if tool is None or not makes_tasks(tool):
                raise MCPError(code=types.METHOD_NOT_FOUND,
                               message=f"tool {params.get('name')!r} does not run as a task (its taskSupport is "
                                       f"forbidden): call it without params.task")
        answer = await call_next(ctx)
        if not (asked or (not legacy and _declares_extension(ctx))) or answer.get("resultType") == "input_required":
            return answer
        job_id = _task_id(answer)
        if job_id is None:
            if asked:
                raise _refusal(answer)
            return answer
        task = (await task_methods.task_of(shared, await jobs.get_job(shared, job_id))).model_dump(
            by_alias=True, mode="json")  # ttl stays, as null: a job's task is kept as long as the job
        meta = {task_methods.RELATED_TASK: {"taskId": job_id}}
        if legacy:
            return {"task": task, "_meta": meta}
        return {"resultType": "task", **task, "_meta": {**(answer.get("_meta") or {}), **meta}}

    return task_augmented
