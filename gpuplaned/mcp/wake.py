"""``wait_for_events``: a long poll over the durable event log, the same log and ids SSE and
``gpuplanectl event-hook`` resume from.

It subscribes to the live feed first, then reads the store for events after the cursor, so
nothing recorded in between is missed; the feed only wakes it, and every answer is read from
the store in log order, so a cursor handed back resumes without duplicates or gaps. With a
progress token it reports step, loss and ETA of the jobs it watches every ``PROGRESS_EVERY``
seconds, from a task of its own that never holds up the wait.
"""

from __future__ import annotations

from typing import Any

import attrs
import trio

from gpuplaned.domain.event_types import with_kinds
from gpuplaned.mcp import args as a
from gpuplaned.mcp.read_tools import event_filter
from gpuplaned.mcp.table import Call, Result, Tool, next_action
from gpuplaned.mcp.tasks import describe_progress
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.fields import doc
from gpuplaned.service import access
from gpuplaned.service.api import events, jobs, runs
from gpuplaned.store import event_rows
from gpuplaned.store.event_rows import EventFilter, EventRow

FAILED = with_kinds(["JOB_FAILED"])  # a failed attempt's event, whatever its kind

PROGRESS_EVERY = 15.0
SEND_LIMIT_S = 2.0  # a client that does not read its stream loses a progress note, never the wait


@attrs.frozen(kw_only=True)
class EventWait:
    events: list[EventRow] = doc("oldest first")
    cursor: str = doc("pass back as cursor= to wait for what comes next")
    timed_out: bool = doc("true: nothing came within timeout_s (events is empty, the cursor unchanged)")


async def _after(shared: Any, cursor: str | None, where: EventFilter, limit: int) -> list[EventRow]:
    after = None if cursor in (None, events.FROM_THE_START) else cursor
    found = await access.readers(shared, "events").run(lambda conn: event_rows.events_after(conn, after, where, limit))
    if found is None:
        raise ApiError(ErrorCode.BAD_REQUEST, f"cursor: no event {cursor!r} (pass a cursor list_events or "
                                              f"wait_for_events gave, or 0 for the first event)", {"field": "cursor"})
    return found


async def _newest(shared: Any) -> str:
    newest = (await events.list_events(shared, EventFilter(), 1, None)).events
    return newest[0].id if newest else events.FROM_THE_START


async def _progress_words(call: Call, args: a.WaitArgs) -> str:
    if args.run_id is not None:
        return describe_progress(await runs.get_summary(call.shared, args.run_id))
    watched = [await jobs.get_job(call.shared, args.job_id)] if args.job_id else \
        (await jobs.list_jobs(call.shared, ["RUNNING"], 3))[0]
    words = []
    for job in watched:
        if job.run_id and job.status == "RUNNING":
            words.append(f"{job.id}: " + describe_progress(await runs.get_summary(call.shared, job.run_id)))
        else:
            words.append(f"{job.id}: {job.status}")
    return " ".join(words) or "No job running."


async def _report_progress(call: Call, args: a.WaitArgs, started: float) -> None:
    while True:
        await trio.sleep(PROGRESS_EVERY)
        try:
            words = await _progress_words(call, args)
            with trio.move_on_after(SEND_LIMIT_S):
                await call.ctx.session.report_progress(trio.current_time() - started, None, "Waiting. " + words)
        except ApiError:
            return  # the job or run named is gone: the wait's answer will say so


def _wants_progress(ctx: Any) -> bool:
    meta = getattr(ctx, "meta", None) or {}
    token = meta.get("progress_token") if isinstance(meta, dict) else getattr(meta, "progress_token", None)
    return token is not None


async def _wait(call: Call, args: a.WaitArgs, live: Any, cursor: str, where: EventFilter) -> list[EventRow]:
    """The events after ``cursor`` once one is recorded, or [] after ``timeout_s``."""
    found: list[EventRow] = []
    try:
        async with trio.open_nursery() as nursery:
            if _wants_progress(call.ctx):
                nursery.start_soon(_report_progress, call, args, trio.current_time())
            with trio.move_on_after(args.timeout_s):
                while not found:
                    async for item in live:  # a wake-up only: the answer is read from the store
                        if getattr(item, "id", None) is None or where.matches(item):
                            break
                    found = await _after(call.shared, cursor, where, args.limit)
            nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:  # an ApiError (a stale cursor) as itself, not in a group
        api_errors = group.subgroup(ApiError)
        if api_errors is not None and api_errors is group:
            raise api_errors.exceptions[0] from None
        raise
    return found


async def wait_for_events(call: Call, args: a.WaitArgs) -> Result:
    shared, where = call.shared, event_filter(args)
    cursor = args.cursor if args.cursor is not None else await _newest(shared)
    async with shared.event_feed.subscribe(maxlen=64) as live:
        found = await _after(shared, cursor, where, args.limit)  # read before any wait, even timeout_s=0
        if not found:
            found = await _wait(call, args, live, cursor, where)
    if not found:
        return Result(f"No new event in {args.timeout_s:g} s; call again with the same cursor.",
                      EventWait(events=[], cursor=cursor, timed_out=True),
                      [next_action("wait_for_events", "keep waiting", cursor=cursor, timeout_s=args.timeout_s)])
    kinds = ", ".join(f"{e.type}" + (f" ({e.job_id})" if e.job_id else "") for e in found[:5])
    last = found[-1].id
    more = [next_action("wait_for_events", "wait for the next ones", cursor=last, timeout_s=args.timeout_s)]
    for e in found:
        if e.run_id and e.type == "RUN_FINISHED":
            more.insert(0, next_action("diagnose_run", "the run ended: how did it go", run_id=e.run_id))
        elif e.job_id and e.type in FAILED:
            more.insert(0, next_action("explain_failure", "why it failed", job_id=e.job_id))
    return Result(f"{len(found)} new event(s): {kinds}{' ...' if len(found) > 5 else ''}.",
                  EventWait(events=found, cursor=last, timed_out=False), more[:4])


TOOLS = [
    Tool(name="wait_for_events", title="Wait for events", description="Long poll (at most 50 s): the events after "
         "cursor (from list_events or a previous wait), filtered by types/severity/job/run/node, as soon as one "
         "is recorded; times out with none and the same cursor. The way to be woken in clients that start no "
         "turn on notifications.", args=a.WaitArgs, reply=EventWait, handler=wait_for_events),
]
