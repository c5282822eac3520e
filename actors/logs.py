"""The logs actor: keeps the last lines of every running job's output in the store.

Owns: one tailing loop over every live job attempt (both streams), reading the files the
shim writes and copying their last ``node.log_tail_lines`` lines per stream into ``job_logs``.
Inputs: ``FollowLogs`` and ``LogsEnded`` from the runner.
Outputs: store writes; and, for an attempt that has live followers, every line read,
published on its feed in ``ctx.shared.log_feeds`` (``gpuplaned.service.log_feeds``), with
each line's SSE frame encoded once for all of them. Publishing never waits: a slow
follower lags and reads the files instead, so it can never hold anything up. While any
attempt has followers the loop polls every ``FOLLOWED_POLL`` instead of ``POLL``.
Restart: permanent; a restarted tailer resumes after the last offset it stored.
Ready: immediately.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import attrs
import trio

from gpuplaned.http.sse import format_event
from gpuplaned.logtail import FileTail
from gpuplaned.runtime.context import ActorContext
from gpuplaned.service.log_feeds import LogBatch
from gpuplaned.store.writer import write

log = logging.getLogger("gpuplaned.logs")

POLL = 0.2
FOLLOWED_POLL = 0.05  # while someone follows a job live: their latency is this plus a pass
# Passes woken by jobs starting and ending come at most this often, so that a burst of
# short jobs costs a pass per interval, not two (each a trip to a worker thread) per job.
MIN_PASS_GAP = 0.02
MAX_PUBLISH = 200_000  # lines per stream per pass; beyond that followers read the files
STREAMS = ("stdout", "stderr")


@attrs.frozen
class FollowLogs:
    job_id: str
    attempt: int
    job_dir: str
    resume: bool = True  # False for an attempt that just started: nothing is stored for it yet


@attrs.frozen
class LogsEnded:
    job_id: str
    attempt: int


@attrs.frozen
class LogsStats:
    following: int
    lines_seen: int
    lines_stored: int


@attrs.define
class LogsHandle:
    following: dict[tuple[str, int], FollowLogs] = attrs.field(factory=dict)
    lines_seen: int = 0
    lines_stored: int = 0

    def statistics(self) -> LogsStats:
        return LogsStats(len(self.following), self.lines_seen, self.lines_stored)


def notify(ctx: ActorContext, message: FollowLogs | LogsEnded) -> None:
    """Tell the logs actor without ever blocking the caller (the copy is best effort)."""
    port = ctx.ports.get("logs")
    if port is None:
        return
    try:
        port.send_nowait(message)
    except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
        log.warning("logs actor is not keeping up; %r dropped (the files still have everything)", message)


async def run(ctx: ActorContext, *, task_status: trio.TaskStatus[LogsHandle] = trio.TASK_STATUS_IGNORED) -> None:
    handle = LogsHandle()
    tailer = _Tailer(ctx, handle, ctx.shared.config.node.log_tail_lines)
    feeds = getattr(ctx.shared, "log_feeds", None)
    if feeds is not None:
        feeds.on_new_feed = tailer.wake_up
    try:
        await _serve(ctx, handle, tailer, task_status)
    finally:
        if feeds is not None and feeds.on_new_feed == tailer.wake_up:
            feeds.on_new_feed = None


async def _serve(ctx: ActorContext, handle: LogsHandle, tailer: _Tailer, task_status: trio.TaskStatus[LogsHandle]) -> None:
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


class _Tailer:
    """One loop for every followed attempt: each pass reads all of them in one trip to a
    worker thread and stores what it found in one write, so a burst of short jobs costs a
    pass, not a thread hop and a transaction per job."""

    def __init__(self, ctx: ActorContext, handle: LogsHandle, keep: int) -> None:
        self.ctx = ctx
        self.handle = handle
        self.keep = keep
        self.new: list[FollowLogs] = []
        self.ended: set[tuple[str, int]] = set()
        self.wake = trio.Event()
        self.tails: dict[tuple[str, int], tuple[FollowLogs, dict[str, FileTail]]] = {}
        self.last_pass = -math.inf

    async def loop(self) -> None:
        store = self.ctx.ports["store"]
        feeds = getattr(self.ctx.shared, "log_feeds", None)
        while True:
            if self.idle:
                await self.wake.wait()
            else:
                with trio.move_on_after(FOLLOWED_POLL if feeds is not None and feeds.active else POLL):
                    await self.wake.wait()
            await trio.sleep_until(self.last_pass + MIN_PASS_GAP)
            self.last_pass = trio.current_time()
            self.wake = trio.Event()
            await self._open_new()
            ended = {key for key in self.ended if key in self.tails}  # one still to open waits a pass
            self.ended -= ended
            work = [(job, tails, key in ended, feeds is not None and feeds.wanted(key))
                    for key, (job, tails) in self.tails.items()]
            if not work:
                continue
            batches = await trio.to_thread.run_sync(_read_all, work, self.keep)
            if feeds is not None:
                for job, batch in batches:
                    feeds.publish((job.job_id, job.attempt), [b for _, _, b in batch.values() if b is not None])
            for key in ended:
                self.tails.pop(key, None)
                self.handle.following.pop(key, None)
            found = [(job, batch) for job, batch in batches if any(n for n, _, _ in batch.values())]
            if found:
                self.handle.lines_seen += sum(n for _, b in found for n, _, _ in b.values())
                self.handle.lines_stored += await write(store, lambda conn, f=found: _store_all(conn, f, self.keep))

    @property
    def idle(self) -> bool:
        return not self.tails and not self.new

    def wake_up(self) -> None:
        """A pass now (a follower has come for a job): do not wait out the poll interval."""
        if not self.idle:
            self.wake.set()

    async def _open_new(self) -> None:
        new, self.new = self.new, []
        resumed = [job for job in new if job.resume]
        starts: dict[tuple[str, int, str], int] = {}
        if resumed:
            starts = await self.ctx.shared.readers.run(lambda conn: _stored_offsets(conn, resumed))
        for job in new:
            self.tails[(job.job_id, job.attempt)] = (job, {
                s: FileTail(Path(job.job_dir) / f"{s}.log", starts.get((job.job_id, job.attempt, s)) or 0)
                for s in STREAMS
            })


def _stored_offsets(conn, jobs: list[FollowLogs]) -> dict[tuple[str, int, str], int]:  # type: ignore[no-untyped-def]
    """Where each resumed attempt's stored tail ends, per stream."""
    out = {}
    for job in jobs:
        for stream in STREAMS:
            offset = conn.execute(
                "SELECT max(offset) FROM job_logs WHERE job_id = ? AND attempt = ? AND stream = ?",
                (job.job_id, job.attempt, stream)).fetchone()[0]
            if offset is not None:
                out[(job.job_id, job.attempt, stream)] = offset
    return out


def _read_all(work, keep: int):  # type: ignore[no-untyped-def]
    """Runs on a worker thread: every followed attempt's new lines, finally flushed for ended ones."""
    return [(job, _read(tails, keep, final, publish)) for job, tails, final, publish in work]


def _read(tails: dict[str, FileTail], keep: int, final: bool,
          publish: bool = False) -> dict[str, tuple[int, list[tuple[int, str]], LogBatch | None]]:
    """Per stream: how many new lines, the last ``keep`` of them (older ones would be trimmed)
    and, with ``publish``, all of them as a batch for live followers (None when there are
    none, or too many to hold: the followers then see the gap and read the files)."""
    out = {}
    for stream, tail in tails.items():
        count = 0
        last: list[tuple[int, str]] = []
        start = tail.offset
        every: list[tuple[int, str]] | None = [] if publish else None
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
        batch = None
        if every:
            frames = [format_event(text, id=str(offset), event=stream) for offset, text in every]
            batch = LogBatch(stream, start, tail.offset, every, frames)
        out[stream] = (count, last, batch)
    return out


def _store_all(conn, found, keep: int) -> int:  # type: ignore[no-untyped-def]
    return sum(_store(conn, job, batch, keep) for job, batch in found)


def _store(conn, job: FollowLogs, batch: dict[str, tuple[int, list[tuple[int, str]], LogBatch | None]], keep: int) -> int:  # type: ignore[no-untyped-def]
    stored = 0
    for stream, (_, lines, _) in batch.items():
        if not lines:
            continue
        stored += conn.executemany(
            "INSERT OR IGNORE INTO job_logs (job_id, attempt, stream, offset, line) VALUES (?, ?, ?, ?, ?)",
            [(job.job_id, job.attempt, stream, offset, text) for offset, text in lines],
        ).rowcount
        conn.execute(
            "DELETE FROM job_logs WHERE job_id = ? AND attempt = ? AND stream = ? AND offset < ("
            " SELECT offset FROM job_logs WHERE job_id = ? AND attempt = ? AND stream = ?"
            " ORDER BY offset DESC LIMIT 1 OFFSET ?)",
            (job.job_id, job.attempt, stream, job.job_id, job.attempt, stream, keep - 1),
        )
    return stored
