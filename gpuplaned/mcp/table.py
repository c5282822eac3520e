"""A tool, declared once: its name, words, argument class, reply class and handler. The server
lists it from this declaration (schemas from ``schemas``) and calls it through ``dispatch``;
``policy`` says which scope it needs and how it is marked.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import attrs

from gpuplaned.protocol.fields import doc

if TYPE_CHECKING:
    from gpuplaned.service.api.ui_sessions import Caller
    from gpuplaned.service.context import ServerContext

DRY_RUN = {"dry_run": {"type": "boolean", "default": False,
                       "description": "say what would happen (node, GPUs, queue position, budget after) and do "
                                      "nothing"}}


@attrs.frozen(kw_only=True)
class NextAction:
    tool: str
    arguments: dict[str, Any]
    why: str


@attrs.frozen
class Result:
    """What a handler returns: the summary an agent reads first, the data, what to call next."""

    summary: str
    data: Any
    next_actions: list[NextAction] = attrs.field(factory=list)


@attrs.define
class Call:
    """One tools/call: who asks, through which request (progress, elicitation), with what."""

    shared: ServerContext
    caller: Caller | None  # None: the trusted control socket
    ctx: Any  # mcp's ServerRequestContext
    dry_run: bool = False


Handler = Callable[[Call, Any], Awaitable[Result]]


@attrs.frozen(kw_only=True)
class Tool:
    name: str
    title: str
    description: str
    args: type  # an attrs class, structured by the one converter
    reply: type  # the attrs class of ``data``
    handler: Handler
    extra: dict[str, Any] = attrs.field(factory=dict)  # properties beside ``args``' (dry_run)
    extra_required: tuple[str, ...] = ()
    # A destructive tool: what the user is asked to allow, from its arguments (None: "<tool> <job_id>"),
    # and the command the user may type instead, named when nobody can be asked.
    question: Callable[[Any], str] | None = None
    by_hand: str | None = None


@attrs.frozen(kw_only=True)
class TaskHandle:
    """Long work started and not waited for: poll it (or wait_for_events) until it ends."""

    task_id: str = doc("the job's id: the task is the job, whose state lives in the daemon")
    job_id: str
    status: str = doc("the job's state")
    task_status: str = doc(enum=("working", "input_required", "completed", "failed", "cancelled"))
    status_message: str = doc("step, loss and ETA where the run reports them")
    poll_interval_ms: int = doc("poll no more often than this", minimum=5000, maximum=30000)
    poll: list[NextAction] = doc("the calls that tell how it goes")


def next_action(tool: str, why: str, **arguments: Any) -> NextAction:
    return NextAction(tool=tool, arguments=arguments, why=why)
