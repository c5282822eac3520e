"""Job output for the API: tails and pages read from the files, and live following as SSE.

The files are the source of truth (the shim writes them straight from the job's file
descriptors); the store's ``job_logs`` tail is only a copy for quick access when the files
are gone. A follower reads the files at its own pace: nothing is buffered for it in the
daemon, so a slow or stalled follower never slows the job, the daemon or other followers,
and it never misses a line either.

Resume ids: each event's id lists, per followed stream (stdout, then stderr), the byte
offset of the last line sent, ``-1`` for none. ``Last-Event-ID`` resumes after them.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any

import attrs
import trio

from gpuplaned.domain.jobs import TERMINAL, JobState
from gpuplaned.http.sse import format_event
from gpuplaned.logtail import FileTail, read_from, read_tail
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.jobs import Job
from gpuplaned.service import jobs

if TYPE_CHECKING:
    from gpuplaned.daemon import DaemonContext

POLL = 0.05
STATUS_EVERY = 0.5
MAX_PAGE = 100_000
READ_CHUNK = 256 * 1024


@attrs.frozen
class LogLine:
    offset: int
    line: str


@attrs.frozen
class LogPage:
    job_id: str
    attempt: int
    stream: str
    lines: list[LogLine]
    next_offset: int | None  # pass as offset= (with after) to continue; None when empty


async def read_lines(shared: DaemonContext, job_id: str, stream: str, *, attempt: int | None,
                     tail: int | None, offset: int | None, limit: int) -> LogPage:
    if stream not in jobs.STREAMS:  # checked first: a job that has not run yet is no excuse
        raise ApiError(ErrorCode.BAD_REQUEST, f"stream: must be stdout or stderr, not {stream!r}",
                       {"field": "stream"})
    job = await jobs.get_job(shared, job_id)
    if job.attempt == 0:
        return LogPage(job_id, 0, stream, [], None)
    path = jobs.log_path(shared, job, stream, attempt)
    number = job.attempt if attempt is None else attempt
    ended = JobState(job.status) in TERMINAL or number < job.attempt
    if not await trio.to_thread.run_sync(path.exists):
        return await _stored_tail(shared, job_id, number, stream, tail if tail is not None else limit, offset)
    if offset is not None:
        found = await trio.to_thread.run_sync(
            lambda: read_from(path, offset, limit, after=offset > 0, partial=ended))
    else:
        found = await trio.to_thread.run_sync(read_tail, path, tail if tail is not None else limit)
    lines = [LogLine(o, text) for o, text in found]
    return LogPage(job_id, number, stream, lines, lines[-1].offset if lines else None)


async def _stored_tail(shared: DaemonContext, job_id: str, attempt: int, stream: str, count: int,
                       after: int | None) -> LogPage:
    """The store's copy of the last lines, for when the files are gone (cleaned up, another node)."""

    def query(conn: Any) -> list[tuple[int, str]]:
        rows = conn.execute(
            "SELECT offset, line FROM job_logs WHERE job_id = ? AND attempt = ? AND stream = ? AND offset > ? "
            "ORDER BY offset DESC LIMIT ?", (job_id, attempt, stream, -1 if after is None else after, count),
        ).fetchall()
        return rows[::-1]

    lines = [LogLine(o, text) for o, text in await shared.readers.run(query)]
    return LogPage(job_id, attempt, stream, lines, lines[-1].offset if lines else None)


def parse_resume(raw: str | None, count: int) -> list[int]:
    if raw is None:
        return [-1] * count
    try:
        values = [int(v) for v in raw.split(",")]
    except ValueError:
        raise ApiError(ErrorCode.BAD_REQUEST, f"bad resume position {raw!r}", {"field": "Last-Event-ID"}) from None
    if len(values) != count or any(v < -1 for v in values):
        raise ApiError(ErrorCode.BAD_REQUEST, f"resume position {raw!r} does not match the streams followed",
                       {"field": "Last-Event-ID"})
    return values


def streams_for(name: str) -> tuple[str, ...]:
    if name == "all":
        return jobs.STREAMS
    if name not in jobs.STREAMS:
        raise ApiError(ErrorCode.BAD_REQUEST, f"stream: must be stdout, stderr or all, not {name!r}",
                       {"field": "stream"})
    return (name,)


def _end_event(job: Job, attempt: int) -> bytes:
    data = {"status": job.status if job.attempt == attempt else "RETRIED", "attempt": attempt,
            "exit_code": job.exit_code, "failure_reason": job.failure_reason}
    return format_event(json.dumps(data), event="end")


async def follow_events(shared: DaemonContext, job_id: str, stream: str, resume: str | None,
                        attempt: int | None) -> AsyncGenerator[bytes, None]:
    """SSE events for a job's output, from the resume position until the attempt has ended.

    Validates before the first yield, so errors become a normal JSON error response.
    """
    names = streams_for(stream)
    positions = parse_resume(resume, len(names))
    job = await jobs.get_job(shared, job_id)
    return _follow(shared, job, names, positions, attempt)


async def _follow(shared: DaemonContext, job: Job, names: tuple[str, ...], positions: list[int],
                  attempt: int | None) -> AsyncGenerator[bytes, None]:
    while job.attempt == 0 or (attempt is not None and job.attempt < attempt):
        if JobState(job.status) in TERMINAL:  # cancelled before it ever ran
            yield _end_event(job, job.attempt)
            return
        await trio.sleep(STATUS_EVERY)
        job = await jobs.get_job(shared, job.id)
    number = job.attempt if attempt is None else attempt
    tails = []
    for i, name in enumerate(names):
        path = jobs.log_path(shared, job, name, number)
        tails.append((i, name, FileTail(path, max(positions[i], 0)), positions[i]))
    next_status = trio.current_time() + STATUS_EVERY

    def read(final: bool) -> tuple[list[tuple[int, str, int, str]], bool]:
        """At most one chunk per stream, so memory stays bounded on a huge log."""
        out = []
        for i, name, tail, skip in tails:
            for offset, text in tail.read_new(READ_CHUNK):
                if offset == skip and positions[i] == skip and skip >= 0:
                    continue  # the line the follower saw last, read again to find its end
                out.append((i, name, offset, text))
            if final and not tail.backlog:
                out.extend((i, name, o, t) for o, t in tail.flush())
        return out, any(tail.backlog for _, _, tail, _ in tails)

    while True:
        ended = JobState(job.status) in TERMINAL or job.attempt != number
        lines, backlog = await trio.to_thread.run_sync(read, ended)
        if lines:
            # One chunk per read, not per line: each chunk is a trip through the HTTP
            # stack and a send(), which would otherwise cost ~100 us per line per follower.
            events = []
            for i, name, offset, text in lines:
                positions[i] = offset
                events.append(format_event(text, id=",".join(map(str, positions)), event=name))
            yield b"".join(events)
        if backlog:
            continue
        if ended:
            yield _end_event(job, number)
            return
        if not lines:
            await trio.sleep(POLL)
        if trio.current_time() >= next_status:
            job = await jobs.get_job(shared, job.id)
            next_status = trio.current_time() + STATUS_EVERY


