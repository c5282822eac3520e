"""Job output for the API: tails and pages read from the files, and live following as SSE.

The files are the source of truth (the shim writes them straight from the job's file
descriptors); the store's ``job_logs`` tail is only a copy for quick access when the files
are gone. A live follower subscribes to the attempt's feed (``gpuplaned.service.link.log_feeds``:
the logs actor publishes what it reads anyway, SSE frames included, so fifty followers do
not read and frame every line fifty times), then catches up from the files, then takes the
feed's batches, dropping lines it already sent. Whenever the feed cannot be trusted to
have everything next (the follower lagged, a batch starts past what it has read, nothing
arrived in time because the logs actor is stopped or the job runs elsewhere) it reads the
files from where it is, at its own pace. So a slow or stalled follower never slows the
job, the daemon or other followers, and it never misses a line either.

A job that runs on a remote agent's node has its files there (``gpuplaned.service.link.remote_logs``):
a tail comes from the store's copy, and a page read from an offset (``logs --full``) is read
through the agent (``read_remote_lines``, in ``log_read`` requests) while it is attached; while
it is not, the answer is a 503 naming the node and how many stored lines there are. A live
follower of such a job takes the same feed, which the server fills with the agent's log
records after their commit, live or replayed after a link outage; where a local follower reads
the files, it reads through the agent instead (or, while the agent is away, the stored tail
where that joins up with what it has sent: ``RemoteReader``).

Resume ids: each event's id lists, per followed stream (stdout, then stderr), the byte
offset of the last line sent, ``-1`` for none. ``Last-Event-ID`` resumes after them.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import AsyncGenerator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from gpuplaned.logtail import FileTail, read_page, tail_page
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.job_states import ENDED
from gpuplaned.protocol.job_wire import Job
from gpuplaned.protocol.log_replies import LogLine, LogPage
from gpuplaned.protocol.sse_frames import format_event
from gpuplaned.runtime.broadcast import Lagged, Subscription
from gpuplaned.service.api import jobs
from gpuplaned.service.link.log_feeds import Key, LogBatch, LogFeeds
from gpuplaned.service.link.remote_logs import RemoteReader, end_at_least, read_remote_lines
from gpuplaned.store import log_rows, uplink_rows

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext

POLL = 0.05
FEED_WAIT = 0.5  # the longest wait for the logs actor's next batch before reading the files
STATUS_EVERY = 0.5
MAX_PAGE = 100_000
READ_CHUNK = 256 * 1024


def _page(job_id: str, attempt: int, stream: str, found: list[tuple[int, str]], next_offset: int | None) -> LogPage:
    lines = [LogLine(o, text) for o, text in found]
    return LogPage(job_id, attempt, stream, lines, next_offset if lines else None)


async def read_lines(shared: ServerContext, job_id: str, stream: str, *, attempt: int | None,
                     tail: int | None, offset: int | None, limit: int) -> LogPage:
    if stream not in jobs.STREAMS:  # checked first: a job that has not run yet is no excuse
        raise ApiError(ErrorCode.BAD_REQUEST, f"stream: must be stdout or stderr, not {stream!r}",
                       {"field": "stream"})
    job = await jobs.get_job(shared, job_id)
    if job.attempt == 0:
        return LogPage(job_id, 0, stream, [], None)
    path = jobs.log_path(shared, job, stream, attempt)
    number = job.attempt if attempt is None else attempt
    ended = job.status in ENDED or number < job.attempt
    if not await trio.to_thread.run_sync(path.exists):
        remote = await _remote_node(shared, job)
        if remote is not None and offset is not None:
            stored = await shared.readers.run(lambda conn: log_rows.line_count(conn, job_id, number, stream))
            found, after = await read_remote_lines(shared, remote, job_id, number, stream, offset, limit,
                                                   stored_lines=stored)
            return _page(job_id, number, stream, found, after)
        return await _stored_lines(shared, job_id, number, stream, tail if tail is not None else limit, offset)
    if offset is not None:
        found, after = await trio.to_thread.run_sync(lambda: read_page(path, offset, limit, partial=ended))
    else:
        found, after = await trio.to_thread.run_sync(
            lambda: tail_page(path, tail if tail is not None else limit, partial=ended))
    return _page(job_id, number, stream, found, after)


async def _remote_node(shared: ServerContext, job: Job) -> str | None:
    """The job's node when it is a remote agent's (its files are there), else None."""
    node_id = job.node_id
    if node_id is None:
        return None
    if shared.nodes.session(node_id) is not None:
        return node_id
    name = await shared.readers.run(lambda conn: uplink_rows.agent_node_name(conn, node_id))
    return node_id if name is not None else None


async def _stored_lines(shared: ServerContext, job_id: str, attempt: int, stream: str, count: int,
                        offset: int | None) -> LogPage:
    """The store's copy of the lines, for when the files are gone (cleaned up, another node):
    its last ``count``, or (``offset``) a page from the line at ``offset`` on. The copy keeps no
    line ends: the next page's offset is that of the next stored line, or at the end a little
    before where the line after the last would start (``end_at_least``), so a page from it
    begins with that next line all the same."""

    def query(conn: Any) -> tuple[list[tuple[int, str]], int | None]:
        if offset is None:
            rows = log_rows.last_lines(conn, job_id, attempt, stream, count)
            return rows, end_at_least(rows[-1]) if rows else None
        rows = log_rows.lines_from(conn, job_id, attempt, stream, offset, count + 1)
        if len(rows) > count:
            return rows[:count], rows[count][0]
        return rows, end_at_least(rows[-1]) if rows else None

    found, after = await shared.readers.run(query)
    return _page(job_id, attempt, stream, found, after)


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


async def follow_events(shared: ServerContext, job_id: str, stream: str, resume: str | None,
                        attempt: int | None) -> AsyncGenerator[bytes, None]:
    """SSE events for a job's output, from the resume position until the attempt has ended.

    Validates before the first yield, so errors become a normal JSON error response.
    """
    names = streams_for(stream)
    positions = parse_resume(resume, len(names))
    job = await jobs.get_job(shared, job_id)
    return _follow(shared, job, names, positions, attempt)


async def _follow(shared: ServerContext, job: Job, names: tuple[str, ...], positions: list[int],
                  attempt: int | None) -> AsyncGenerator[bytes, None]:
    while job.attempt == 0 or (attempt is not None and job.attempt < attempt):
        if job.status in ENDED:  # cancelled before it ever ran
            yield _end_event(job, job.attempt)
            return
        await trio.sleep(STATUS_EVERY)
        job = await jobs.get_job(shared, job.id)
    number = job.attempt if attempt is None else attempt
    key = (job.id, number)
    feeds = shared.log_feeds
    index = {name: i for i, name in enumerate(names)}
    # Per stream, where the next line not yet sent starts, as far as known: the files or the
    # feed have been read up to there. Lines at or before ``positions`` were sent already.
    after = [max(position, 0) for position in positions]
    node_id = await _remote_node(shared, job)
    reader: _FileReader | RemoteReader
    if node_id is None:
        reader = _FileReader([jobs.log_path(shared, job, name, number) for name in names], positions, after)
    else:  # the files are on the agent's node: the feed has what reaches the server, the agent the rest
        reader = RemoteReader(shared, node_id, key, names, positions, after)

    def frame(lines: list[tuple[int, int, str]]) -> bytes:
        # One chunk per read, not per line: each chunk is a trip through the HTTP
        # stack and a send(), which would otherwise cost ~100 us per line per follower.
        events = []
        for i, offset, text in lines:
            positions[i] = offset
            events.append(format_event(text, id=",".join(map(str, positions)), event=names[i]))
        return b"".join(events)

    def take(batch: LogBatch) -> bytes | None:
        """The events for a batch's lines not sent yet; None when lines before it were missed."""
        i = index.get(batch.stream)
        if i is None:
            return b""
        if batch.start > after[i]:
            return None
        lines = batch.lines
        first = bisect.bisect_left(lines, max(after[i], positions[i] + 1), key=_offset)
        if batch.end > after[i]:
            after[i] = batch.end
        if first == len(lines):
            return b""
        if len(names) == 1:  # the frames were built for exactly this
            positions[0] = lines[-1][0]
            return b"".join(batch.frames[first:] if first else batch.frames)
        return frame([(i, offset, text) for offset, text in lines[first:]])

    async with feeds.subscribe(*key) as feed:
        next_status = trio.current_time() + STATUS_EVERY
        heard = trio.current_time()  # the last feed item or read
        files = True  # catch up from the files first, since the feed only has what comes next
        while True:
            ended = job.status in ENDED or job.attempt != number
            if ended and not files and feed.pending:
                # What the feed holds is framed already: send it, and read only the rest
                # from the files. (Reading it all again, per follower, costs far more.)
                chunks: list[bytes] = []
                files = await _feed_chunks(feed, take, chunks)
                if chunks:
                    yield b"".join(chunks)
            if files or ended:
                lines, backlog = await reader.read(ended)
                if lines:
                    yield frame(lines)
                if backlog:
                    continue
                if ended:
                    yield _end_event(job, number)
                    return
                files = False
                heard = trio.current_time()
            now = trio.current_time()
            if now >= next_status:
                job = await jobs.get_job(shared, job.id)
                next_status = now + STATUS_EVERY
                continue
            read_at = heard + reader.quiet_for(feeds, key)
            chunks = []
            with trio.move_on_at(min(read_at, next_status)):
                item = await feed.__anext__()
                heard = trio.current_time()
                files = await _feed_chunks(feed, take, chunks, item)
            if chunks:
                yield b"".join(chunks)
            elif not files and trio.current_time() >= read_at:
                files = True


class _FileReader:
    """A live follower's reads of the local files: the catch-up, and whatever the feed missed.

    Shares the follower's ``positions`` and ``after`` and moves both on."""

    def __init__(self, paths: list[Path], positions: list[int], after: list[int]) -> None:
        self._paths = paths
        self._positions = positions
        self._after = after
        self._tails = [FileTail(path, max(position, 0)) for path, position in zip(paths, positions)]

    @staticmethod
    def quiet_for(feeds: LogFeeds, key: Key) -> float:
        # While the logs actor passes over this attempt, wait for its next batch; else
        # (stopped, restarting, the job runs elsewhere) read the files every POLL.
        return FEED_WAIT if feeds.served_within(key, FEED_WAIT) else POLL

    async def read(self, final: bool) -> tuple[list[tuple[int, int, str]], bool]:
        return await trio.to_thread.run_sync(self._read, final)

    def _read(self, final: bool) -> tuple[list[tuple[int, int, str]], bool]:
        """At most one chunk per stream, so memory stays bounded on a huge log."""
        tails, positions, after = self._tails, self._positions, self._after
        out = []
        for i, tail in enumerate(tails):
            if after[i] > tail.offset:  # the feed took this stream further than the file was read
                tail = tails[i] = FileTail(self._paths[i], after[i])
            out.extend((i, offset, text) for offset, text in tail.read_new(READ_CHUNK) if offset > positions[i])
            if final and not tail.backlog:
                out.extend((i, offset, text) for offset, text in tail.flush() if offset > positions[i])
            after[i] = tail.offset
        return out, any(tail.backlog for tail in tails)


async def _feed_chunks(feed: Subscription[LogBatch], take: Callable[[LogBatch], bytes | None],
                       chunks: list[bytes], item: LogBatch | Lagged | None = None) -> bool:
    """Add the events of ``item`` (if given) and of every item the feed holds already to
    ``chunks`` (``take`` makes them); True when the files must be read instead: the
    follower lagged, or the feed skipped lines it had not read."""
    while True:
        if item is not None:
            chunk = None if isinstance(item, Lagged) else take(item)
            if chunk is None:
                return True
            if chunk:
                chunks.append(chunk)
        if not feed.pending:
            return False
        item = await feed.__anext__()


def _offset(line: tuple[int, str]) -> int:
    return line[0]
