"""Events for the API: record (store, then fan out live), list with filters, and follow as SSE.

A follower subscribes to the live feed *before* it reads what it missed from the store, and
skips live events it has already sent, so nothing falls between the replay and the feed.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from gpuplaned.domain.diagnosis import evidence
from gpuplaned.domain.event_types import EVENT_TYPES, with_kinds
from gpuplaned.domain.job_states import failure_event
from gpuplaned.protocol.sse_frames import format_event
from gpuplaned.protocol import cursors
from gpuplaned.protocol.agent import JobStatus, NodeEvent
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.event_replies import EventList
from gpuplaned.protocol.ids import new_id
from gpuplaned.runtime.broadcast import Lagged
from gpuplaned.service import access
from gpuplaned.store import event_rows
from gpuplaned.protocol.vocabulary import SEVERITIES
from gpuplaned.store.event_rows import EventFilter, EventRow
from gpuplaned.store.writer import write

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext

REPLAY_LIMIT = 10_000
FROM_THE_START = "0"  # a resume further back than this many events starts from the newest of them


def _split(raw: str | None) -> tuple[str, ...]:
    return tuple(part.strip() for part in (raw or "").split(",") if part.strip())


def parse_filter(args: Mapping[str, str]) -> EventFilter:
    """``?severity=&type=&node_id=&job_id=&run_id=`` as a filter; a type matches its more
    specific kinds too (JOB_FAILED: OOM and JOB_TIMEOUT, ``event_types.with_kinds``)."""
    severities = tuple(s.lower() for s in _split(args.get("severity")))
    bad = [s for s in severities if s not in SEVERITIES]
    if bad:
        raise ApiError(ErrorCode.BAD_REQUEST, f"severity: must be one of {', '.join(SEVERITIES)}, not {', '.join(bad)}",
                       {"field": "severity", "allowed": list(SEVERITIES)})
    types = tuple(t.upper() for t in _split(args.get("type")))
    unknown = [t for t in types if t not in EVENT_TYPES]
    if unknown:
        raise ApiError(ErrorCode.BAD_REQUEST, f"type: no event type {', '.join(unknown)} (the types: "
                       f"{', '.join(EVENT_TYPES)})", {"field": "type", "allowed": list(EVENT_TYPES)})
    return EventFilter(severities, with_kinds(types), args.get("node_id") or None, args.get("job_id") or None,
                       args.get("run_id") or None)


def to_json(event: EventRow) -> dict[str, Any]:
    return attrs.asdict(event)


async def record_node_events(shared: ServerContext, node_id: str, events: Sequence[NodeEvent]) -> list[EventRow]:
    """Store what a node reported, then publish it to live followers."""
    rows = [EventRow(new_id("ev"), e.ts, e.type, e.severity, node_id, e.job_id, None, None, e.message,
                     evidence.bind_node(e.context, node_id)) for e in events]
    if rows:
        await write(shared.supervisor.ports["store"], lambda conn: event_rows.insert_events(conn, rows))
        for row in rows:
            shared.event_feed.publish(row)
    return rows


def job_failure_row(node_id: str, status: JobStatus, run_id: str | None, retrying: bool, now: int,
                    proofs: Sequence[Mapping[str, Any]] = ()) -> EventRow:
    """The event of a failed attempt: JOB_FAILED, JOB_TIMEOUT or OOM (see ``failure_event``),
    with the exit code, the line of output that tells why and ``proofs`` as its evidence (an
    OOM's GPU memory curve)."""
    kind, severity = failure_event(status.failure_reason)
    what = {"OOM": "ran out of memory", "JOB_TIMEOUT": "timed out"}.get(kind, "failed")
    message = f"job {status.job_id} attempt {status.attempt} {what}: {status.message or status.failure_reason}"
    if status.log_line:
        message += f" ({status.log_line})"
    context = {"attempt": status.attempt, "failure_reason": status.failure_reason, "exit_code": status.exit_code,
               "signal": status.signal, "log_line": status.log_line, "retrying": retrying}
    if proofs:
        context["evidence"] = [dict(p) for p in proofs]
    return EventRow(new_id("ev"), status.at_ms or now, kind, severity, node_id, status.job_id, run_id, None,
                    message, context)


def _readers(shared: ServerContext) -> Any:
    return access.readers(shared, "events")


async def list_events(shared: ServerContext, where: EventFilter, limit: int,
                      cursor: str | None = None) -> EventList:
    """A page of events, newest first, and the cursor of the next page (None: no more)."""
    before = cursors.decode("events", cursor, (int,))
    rows = await _readers(shared).run(
        lambda conn: event_rows.list_events(conn, where, limit + 1, before[0] if before else None))
    page, next_cursor = cursors.split_page("events", rows, limit, key=lambda r: (r[0],))
    return EventList(events=[row for _, row in page], next_cursor=next_cursor)


def _frame(event: EventRow) -> bytes:
    return format_event(json.dumps(to_json(event), separators=(",", ":")), id=event.id, event="event")


async def follow(shared: ServerContext, where: EventFilter, last_event_id: str | None) -> AsyncGenerator[bytes, None]:
    """SSE frames: the events after ``last_event_id`` (none: only new ones; "0": all), then live ones."""
    readers = _readers(shared)
    async with shared.event_feed.subscribe(maxlen=1024) as live:
        sent: set[str] = set()
        if last_event_id is not None:
            # "0" means from the first event: a follower that listed none yet misses nothing
            # recorded between its list and this stream.
            after = None if last_event_id == FROM_THE_START else last_event_id
            missed = await readers.run(lambda conn: event_rows.events_after(conn, after, where, REPLAY_LIMIT))
            for event in missed or ():
                sent.add(event.id)
                yield _frame(event)
        async for item in live:
            if isinstance(item, Lagged):
                yield format_event(json.dumps({"skipped": item.skipped}), event="lagged")
                continue
            if item.id in sent:
                sent.discard(item.id)
                continue
            if where.matches(item):
                yield _frame(item)
