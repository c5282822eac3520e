"""``build_server(shared)``: the low-level MCP server over the tool table.

Each tool is listed from its declaration (input schema from its attrs class, output schema
from its reply class, annotations from the policy table) and called through ``_call``: the
scope is checked, the arguments structured by the one converter (the REST error for a bad
one), the handler run, the call audited (``gpuplaned.service.api.audit``, via ``mcp``), and the
answer sent as structured content with the summary first. Who calls comes from the ASGI
mount (``asgi``): a ``Caller`` for a token on the HTTP front, None on the control socket.

``tasks/cancel`` is ``cancel_job`` by another name (``_cancel_task``): the same scope,
confirmation and handler, audited as ``tasks/cancel`` with the job's id.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import attrs
import mcp_types as types
from mcp.server import Server

import gpuplaned
from gpuplaned.mcp import confirm, content, schemas, task_calls, task_methods, write_tools
from gpuplaned.mcp.policy import POLICY
from gpuplaned.mcp.table import Call, Result, Tool
from gpuplaned.mcp.tools import BY_NAME, RAW_ARGS, TOOLS, check
from gpuplaned.protocol.converter import structure, unstructure
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.service.api import audit, ui_sessions

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext

log = logging.getLogger("gpuplaned.mcp")

CALLER = "gpuplane.caller"  # the ASGI scope key the mount sets
INSTRUCTIONS = ("GPUPlane runs training jobs on the user's GPUs. Start with the `study` prompt (before a sweep: "
                "`run_sweep_safely`). Long work returns a task handle at once: wake with wait_for_events or poll "
                "get_job/get_run_summary, never sleep.")


def caller_of(ctx: Any) -> Any:
    request = getattr(ctx, "request", None)
    scope = getattr(request, "scope", None) or {}
    if CALLER not in scope:
        raise ApiError(ErrorCode.UNAUTHORIZED, "no caller: MCP is served only through the daemon's /mcp mount")
    return scope[CALLER]


def tool_declaration(tool: Tool) -> types.Tool:
    policy = POLICY[tool.name]
    return types.Tool(
        name=tool.name, title=tool.title, description=tool.description,
        input_schema=schemas.input_schema(tool.args, tool.extra, tool.extra_required),
        output_schema=schemas.output_schema(tool.reply),
        annotations=types.ToolAnnotations(title=tool.title, read_only_hint=policy.read_only,
                                          destructive_hint=policy.destructive, idempotent_hint=policy.idempotent,
                                          open_world_hint=False),
        execution=task_calls.execution(tool))


def _error_result(error: ApiError) -> types.CallToolResult:
    return types.CallToolResult(is_error=True, content=[types.TextContent(type="text", text=json.dumps(error.body()))])


def _result(result: Result) -> types.CallToolResult:
    body = schemas.flatten(result.summary, unstructure(result.data), unstructure(result.next_actions))
    body = json.loads(json.dumps(body, allow_nan=False))  # what the wire carries: no NaN, no stray types
    return types.CallToolResult(content=[types.TextContent(type="text", text=json.dumps(body, separators=(",", ":")))],
                                structured_content=body)


def _arguments(tool: Tool, raw: dict[str, Any]) -> tuple[Any, bool]:
    raw = dict(raw)
    dry_run = raw.pop("dry_run", False) if "dry_run" in tool.extra else False
    if not isinstance(dry_run, bool):
        raise ApiError(ErrorCode.BAD_REQUEST, "dry_run: must be a boolean", {"field": "dry_run"})
    if tool.name in RAW_ARGS:
        return raw, dry_run
    return structure(raw, tool.args, what="arguments"), dry_run


def _caller_or_none(ctx: Any) -> Any:
    try:
        return caller_of(ctx)
    except ApiError:
        return None


@attrs.define
class _Outcome:
    """What the audit records of one call: "ok", "input_required" or the error's code."""

    outcome: str = "ok"
    detail: str | None = None


@asynccontextmanager
async def _audited(shared: ServerContext, ctx: Any, action: str, arguments: dict[str, Any]
                   ) -> AsyncIterator[_Outcome]:
    """Audit the call made inside, however it ends (an error goes on being raised)."""
    entry = _Outcome()
    try:
        yield entry
    except ApiError as error:
        entry.outcome, entry.detail = error.code.value, error.message
        raise
    except Exception as error:
        entry.outcome, entry.detail = ErrorCode.INTERNAL.value, type(error).__name__
        raise
    finally:
        await audit.record(shared, caller=_caller_or_none(ctx), via="mcp", action=action, arguments=arguments,
                           outcome=entry.outcome, detail=entry.detail)


async def _run(shared: ServerContext, ctx: Any, params: types.CallToolRequestParams, *, asked_by: str | None = None
               ) -> types.CallToolResult | types.InputRequiredResult:
    tool = BY_NAME.get(params.name)
    if tool is None:
        raise ApiError(ErrorCode.NOT_FOUND, f"no tool {params.name!r}", {"tools": sorted(BY_NAME)})
    caller = caller_of(ctx)
    policy = POLICY[tool.name]
    if caller is not None:
        ui_sessions.require_scope(caller, policy.scope)
    parsed, dry_run = _arguments(tool, params.arguments or {})
    if policy.destructive and not dry_run:
        what = (tool.question(parsed) if tool.question is not None
                else f"{tool.name.replace('_', ' ')} {getattr(parsed, 'job_id', None) or 'it'}")
        ask = await confirm.confirm(ctx, caller, params, what, f"{tool.name}:{what}", asked_by=asked_by,
                                    by_hand=tool.by_hand or "")
        if ask is not None:
            return ask
    result = await tool.handler(Call(shared, caller, ctx, dry_run), parsed)
    answer = _result(result)
    task = getattr(result.data, "task", None)
    if task is not None:
        # The job is the task that tasks/get follows; task_calls turns the answer into the task
        # itself where the client asked for one (2025-11-25) or declared the extension (2026-07-28).
        answer.meta = {**(answer.meta or {}), task_methods.RELATED_TASK: {"taskId": task.task_id}}
    return answer


async def _cancel_task(shared: ServerContext, ctx: Any, job_id: str) -> None:
    """``tasks/cancel``: the ``cancel_job`` tool's own path, so a token it refuses is refused here too.

    Raises:
        ApiError: as ``cancel_job`` would answer it (forbidden, with ``confirmation_required``, when
            nobody confirmed).
    """
    async with _audited(shared, ctx, "tasks/cancel", {"job_id": job_id}):
        params = types.CallToolRequestParams(name="cancel_job", arguments={"job_id": job_id})
        await _run(shared, ctx, params, asked_by="tasks/cancel")


async def _finished(call: Call, job_id: str) -> types.CallToolResult:
    """A task's final result: what the write tool that made it answers about the ended job."""
    return _result(await write_tools.task_result(call, job_id))


def build_server(shared: ServerContext) -> Server[Any]:
    """The MCP server of ``shared``'s daemon. Raises PolicyGap when a tool has no policy."""
    check()
    declared = [tool_declaration(tool) for tool in TOOLS]
    input_schemas = {tool.name: tool.input_schema for tool in declared}

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=declared)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams
                        ) -> types.CallToolResult | types.InputRequiredResult:
        try:
            async with _audited(shared, ctx, params.name, params.arguments or {}) as entry:
                answer = await _run(shared, ctx, params)
                if isinstance(answer, types.InputRequiredResult):
                    entry.outcome = "input_required"
                return answer
        except ApiError as error:
            return _error_result(error)
        except Exception as error:
            log.exception("MCP tool %s failed", params.name)
            return _error_result(ApiError(ErrorCode.INTERNAL, f"internal error: {type(error).__name__}"))

    async def list_templates(ctx: Any, params: Any) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=content.TEMPLATES)

    async def list_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=content.RESOURCES)

    async def read_resource(ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        caller = caller_of(ctx)
        if caller is not None:
            ui_sessions.require_scope(caller, "read")
        return await content.read_resource(shared, str(params.uri))

    async def list_prompts(ctx: Any, params: Any) -> types.ListPromptsResult:
        return types.ListPromptsResult(prompts=content.PROMPTS)

    async def get_prompt(ctx: Any, params: types.GetPromptRequestParams) -> types.GetPromptResult:
        return content.get_prompt(caller_of(ctx), params.name, params.arguments or {})

    server: Server[Any] = Server(
        "gpuplane", version=gpuplaned.__version__, title="GPUPlane", instructions=INSTRUCTIONS,
        # Without it the SDK runs the whole tools/list on every call to check its Mcp-Param headers.
        get_tool_input_schema=input_schemas.get,
        on_list_tools=list_tools, on_call_tool=call_tool, on_list_resource_templates=list_templates,
        on_list_resources=list_resources, on_read_resource=task_methods.api_errors(read_resource),
        on_list_prompts=list_prompts, on_get_prompt=task_methods.api_errors(get_prompt))
    task_methods.register(server, shared, caller_of, _finished,
                          lambda ctx, job_id: _cancel_task(shared, ctx, job_id))
    server.middleware.append(task_calls.middleware(shared))  # inside the SDK's OpenTelemetry span
    return server
