"""The logs actor: sends the server the last lines of every running job's output, and every
line of the jobs someone follows live.

Owns: one tailing loop over every live job attempt (both streams), reading the files the
shim writes.
Inputs: ``FollowLogs`` and ``LogsEnded`` from the runner (``gpuplaned.node_context.LogsPort``);
``LogFollow`` from the server through the node link: which attempts have live followers.
Outputs, through the node link (``LogLines``, one per pass): per stream the last
``node.log_tail_lines`` new lines, which the server keeps in ``job_logs``; for an attempt
that has live followers every line read, which the server publishes on its feed
(``gpuplaned.service.link.log_feeds``). A slow follower lags and reads the files instead, so it
can never hold anything up. While any attempt has followers the loop polls every
``FOLLOWED_POLL`` instead of ``POLL``, and a new follower starts a pass at once.
Restart: permanent; a restarted tailer asks the server where its stored tails end
(``LogOffsets``) and resumes there, and learns again which attempts are followed.
Ready: immediately.
"""

from __future__ import annotations

import math
from pathlib import Path

import attrs
import trio

from gpuplaned.logtail import FileTail
from gpuplaned.node_context import FollowLogs, LogsEnded, NodeContext
from gpuplaned.protocol.agent import LogChunk, LogFollow, LogLines, LogOffsets
from gpuplaned.runtime.context import ActorContext

POLL = 0.2
FOLLOWED_POLL = 0.05  # while someone follows a job live: their latency is this plus a pass
# Passes woken by jobs starting and ending come at most this often, so that a burst of
# short jobs costs a pass per interval, not two (each a trip to a worker thread) per job.
MIN_PASS_GAP = 0.02
MAX_PUBLISH = 200_000  # lines per stream per pass; beyond that followers read the files
STREAMS = ("stdout", "stderr")


@attrs.frozen
class LogsStats:
    following: int
    lines_seen: int
    lines_stored: int


@attrs.define
class LogsHandle:
    following: dict[tuple[str, int], FollowLogs] = attrs.field(factory=dict)
    lines_seen: int = 0
    lines_stored: int = 0  # handed to the server to keep (the stored tails)

    def statistics(self) -> LogsStats:
        return LogsStats(len(self.following), self.lines_seen, self.lines_stored)


async def run(ctx: ActorContext[NodeContext], *, task_status: trio.TaskStatus[LogsHandle] = trio.TASK_STATUS_IGNORED) -> None:
    handle = LogsHandle()
    tailer = _Tailer(ctx, handle, ctx.shared.config.node.log_tail_lines)
    ctx.shared.link.follow_logs(ctx.ports[ctx.name])  # LogFollow comes to this inbox
    await _serve(ctx, handle, tailer, task_status)


async def _serve(ctx: ActorContext[NodeContext], handle: LogsHandle, tailer: _Tailer,
                 task_status: trio.TaskStatus[LogsHandle]) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(tailer.loop)
        task_status.started(handle)
        async for message in ctx.inbox:
            key = (message.job_id, message.attempt)
            if isinstance(message, FollowLogs):
                if key not in handle.following:
                    handle.following[key] = message
                    if tailer.idle:
                        tailer.wake.set()  # the loop sleeps without a timeout while nothing is followed
                    tailer.new.append(message)
            elif isinstance(message, LogsEnded):
                if key in handle.following:
                    tailer.ended.add(key)
                    tailer.wake.set()
            elif isinstance(message, LogFollow):
                if message.live:
                    tailer.followed.add(key)
                    tailer.wake_up()
                else:
                    tailer.followed.discard(key)


class _Tailer:
    """One loop for every followed attempt: each pass reads all of them in one trip to a
    worker thread and sends what it found in one message, so a burst of short jobs costs a
    pass, not a thread hop and a transaction per job."""

    def __init__(self, ctx: ActorContext[NodeContext], handle: LogsHandle, keep: int) -> None:
        self.ctx = ctx
        self.handle = handle
        self.keep = keep
        self.new: list[FollowLogs] = []
        self.ended: set[tuple[str, int]] = set()
        self.followed: set[tuple[str, int]] = set()  # attempts with live followers (LogFollow)
        self.wake = trio.Event()
        self.tails: dict[tuple[str, int], tuple[FollowLogs, dict[str, FileTail]]] = {}
        self.last_pass = -math.inf

    async def loop(self) -> None:
        link = self.ctx.shared.link
        while True:
            if self.idle:
                await self.wake.wait()
            else:
                with trio.move_on_after(FOLLOWED_POLL if self.followed else POLL):
                    await self.wake.wait()
            await trio.sleep_until(self.last_pass + MIN_PASS_GAP)
            self.last_pass = trio.current_time()
            self.wake = trio.Event()
            await self._open_new()
            ended = {key for key in self.ended if key in self.tails}  # one still to open waits a pass
            self.ended -= ended
            work = [(job, tails, key in ended, key in self.followed) for key, (job, tails) in self.tails.items()]
            if not work:
                continue
            batches = await trio.to_thread.run_sync(_read_all, work, self.keep)
            for key in ended:
                self.tails.pop(key, None)
                self.handle.following.pop(key, None)
            chunks = tuple(chunk for batch in batches for _, chunk in batch.values() if chunk is not None)
            served = tuple((job.job_id, job.attempt) for job, _, _, followed in work if followed)
            self.handle.lines_seen += sum(n for batch in batches for n, _ in batch.values())
            if chunks or served:
                await link.log_lines(LogLines(self.keep, chunks, served))
                self.handle.lines_stored += sum(min(len(c.lines), self.keep) for c in chunks)

    @property
    def idle(self) -> bool:
        return not self.tails and not self.new

    def wake_up(self) -> None:
        """A pass now (a follower has come for a job): do not wait out the poll interval."""
        if not self.idle:
            self.wake.set()

    async def _open_new(self) -> None:
        new, self.new = self.new, []
        resumed = tuple((job.job_id, job.attempt) for job in new if job.resume)
        starts: dict[tuple[str, int, str], int] = {}
        if resumed:
            stored = await self.ctx.shared.link.log_offsets(LogOffsets(resumed))
            starts = {(job_id, attempt, stream): offset for job_id, attempt, stream, offset in stored.offsets}
        for job in new:
            self.tails[(job.job_id, job.attempt)] = (job, {
                s: FileTail(Path(job.job_dir) / f"{s}.log", starts.get((job.job_id, job.attempt, s)) or 0)
                for s in STREAMS
            })


Work = tuple[FollowLogs, dict[str, FileTail], bool, bool]  # (attempt, its tails, final, followed)
Read = dict[str, tuple[int, LogChunk | None]]  # per stream: how many new lines, what to send


def _read_all(work: list[Work], keep: int) -> list[Read]:
    """Runs on a worker thread: every followed attempt's new lines, finally flushed for ended ones."""
    return [_read(job, tails, keep, final, followed) for job, tails, final, followed in work]


def _read(job: FollowLogs, tails: dict[str, FileTail], keep: int, final: bool, followed: bool = False) -> Read:
    """Per stream: how many new lines, and the chunk to send: all of them for an attempt
    with live followers (``complete``), else the last ``keep`` (older ones would be trimmed),
    also when there are too many to hold (the followers then see the gap and read the files);
    None when there is nothing new."""
    out: Read = {}
    for stream, tail in tails.items():
        count = 0
        last: list[tuple[int, str]] = []
        start = tail.offset
        every: list[tuple[int, str]] | None = [] if followed else None
        while True:
            lines = tail.read_new()
            count += len(lines)
            last = (last + lines)[-keep:]
            if every is not None:
                if len(every) + len(lines) > MAX_PUBLISH:
                    every = None
                else:
                    every.extend(lines)
            if not tail.backlog:
                break
        if final:
            flushed = tail.flush()
            count += len(flushed)
            last = (last + flushed)[-keep:]
            if every is not None:
                every += flushed
        chunk = None
        if every:
            chunk = LogChunk(job.job_id, job.attempt, stream, start, tail.offset, tuple(every), complete=True)
        elif last:
            chunk = LogChunk(job.job_id, job.attempt, stream, start, tail.offset, tuple(last))
        out[stream] = (count, chunk)
    return out
