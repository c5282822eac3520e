"""The logs actor: keeps the last lines of every running job's output in the store.

Owns: one tailing task per live job attempt (both streams), reading the files the shim
writes and copying their last ``node.log_tail_lines`` lines per stream into ``job_logs``.
Inputs: ``FollowLogs`` and ``LogsEnded`` from the runner.
Outputs: store writes. Live followers do not go through here: they read the files at
their own pace (see ``gpuplaned.service.logs``), so a slow one can never hold anything up.
Restart: permanent; a restarted tailer resumes after the last offset it stored.
Ready: immediately.
"""

from __future__ import annotations

import logging
from pathlib import Path

import attrs
import trio

from gpuplaned.logtail import FileTail
from gpuplaned.runtime.context import ActorContext
from gpuplaned.store.writer import write

log = logging.getLogger("gpuplaned.logs")

POLL = 0.2
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
    following: dict[tuple[str, int], trio.Event] = attrs.field(factory=dict)
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
    keep = ctx.shared.config.node.log_tail_lines
    async with trio.open_nursery() as nursery:
        task_status.started(handle)
        async for message in ctx.inbox:
            key = (message.job_id, message.attempt)
            if isinstance(message, FollowLogs):
                if key not in handle.following:
                    handle.following[key] = trio.Event()
                    nursery.start_soon(_tail_job, ctx, handle, message, keep)
            elif isinstance(message, LogsEnded):
                ended = handle.following.get(key)
                if ended is not None:
                    ended.set()


async def _tail_job(ctx: ActorContext, handle: LogsHandle, job: FollowLogs, keep: int) -> None:
    key = (job.job_id, job.attempt)
    ended = handle.following[key]
    store = ctx.ports["store"]
    try:
        starts: dict[str, int | None] = dict.fromkeys(STREAMS)
        if job.resume:
            starts = await ctx.shared.readers.run(lambda conn: {
                stream: conn.execute(
                    "SELECT max(offset) FROM job_logs WHERE job_id = ? AND attempt = ? AND stream = ?",
                    (job.job_id, job.attempt, stream)).fetchone()[0]
                for stream in STREAMS
            })
        tails = {s: FileTail(Path(job.job_dir) / f"{s}.log", starts[s] or 0) for s in STREAMS}
        while True:
            final = ended.is_set()
            batch = await trio.to_thread.run_sync(_read, tails, keep, final)
            seen = sum(n for n, _ in batch.values())
            if seen:
                handle.lines_seen += seen
                handle.lines_stored += await write(store, lambda conn, b=batch: _store(conn, job, b, keep))
            if final:
                return
            with trio.move_on_after(POLL):
                await ended.wait()
    finally:
        handle.following.pop(key, None)


def _read(tails: dict[str, FileTail], keep: int, final: bool) -> dict[str, tuple[int, list[tuple[int, str]]]]:
    """Per stream: how many new lines, and the last ``keep`` of them (older ones would be trimmed)."""
    out = {}
    for stream, tail in tails.items():
        count = 0
        last: list[tuple[int, str]] = []
        while True:
            lines = tail.read_new()
            count += len(lines)
            last = (last + lines)[-keep:]
            if not tail.backlog:
                break
        if final:
            flushed = tail.flush()
            count += len(flushed)
            last = (last + flushed)[-keep:]
        out[stream] = (count, last)
    return out


def _store(conn, job: FollowLogs, batch: dict[str, tuple[int, list[tuple[int, str]]]], keep: int) -> int:  # type: ignore[no-untyped-def]
    stored = 0
    for stream, (_, lines) in batch.items():
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
