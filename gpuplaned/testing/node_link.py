"""``MemoryNodeLink``: a ``gpuplaned.node_link.NodeLink`` that plays the server for node-side
actors under test. It records what the node sends and lets the test act as the server:
``dispatch`` and ``cancel`` go to the inbox the runner's hello handed over, and
``next_report`` waits (in trio time) for the runner's next ``JobStatus``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import attrs
import trio

from gpuplaned.protocol.agent import (
    ActiveJob,
    Cancel,
    CheckpointsFound,
    Dispatch,
    Hello,
    HelloOk,
    JobSpecWire,
    JobStatus,
    LogFollow,
    LogLines,
    LogOffsets,
    NodeEvent,
    NodeSnapshot,
    SysMetrics,
)
from gpuplaned.protocol.tb_frames import TbCursors, TbFileState, TbPoints, TbStored


@attrs.define
class MemoryNodeLink:
    """The server's half of the link, in memory.

    ``active`` is what the next hello is answered with (the jobs the "server" believes the
    node has, for re-adoption). Everything the node sends is kept, in order, in the lists.
    """

    node_id: str = "nd_test"
    active: tuple[ActiveJob, ...] = ()
    hellos: list[Hello] = attrs.Factory(list)
    reports: list[JobStatus] = attrs.Factory(list)
    snapshots: list[NodeSnapshot] = attrs.Factory(list)
    metric_batches: list[SysMetrics] = attrs.Factory(list)
    node_events: list[NodeEvent] = attrs.Factory(list)
    log_passes: list[LogLines] = attrs.Factory(list)
    goodbyes: list[str] = attrs.Factory(list)
    checkpoint_finds: list[CheckpointsFound] = attrs.Factory(list)
    tb_passes: list[TbPoints] = attrs.Factory(list)
    # (job_id, attempt, path) -> cursor and rewind state: what the "server" stored of the tailer's passes
    tb_stored: dict[tuple[str, int, str], TbFileState] = attrs.Factory(dict)
    inbox: trio.MemorySendChannel[Dispatch | Cancel] | None = None
    log_inbox: trio.MemorySendChannel[LogFollow] | None = None
    registered: trio.Event = attrs.Factory(trio.Event)
    # Unbounded: a recorder must never hold the runner up; the test drains it with next_report.
    _reported: tuple[trio.MemorySendChannel[JobStatus], trio.MemoryReceiveChannel[JobStatus]] = attrs.Factory(
        lambda: trio.open_memory_channel[JobStatus](math.inf))

    # -- the NodeLink protocol -------------------------------------------------------------

    async def hello(self, hello: Hello, inbox: trio.MemorySendChannel[Dispatch | Cancel]) -> HelloOk:
        await trio.lowlevel.checkpoint()
        self.hellos.append(hello)
        self.inbox = inbox
        self.registered.set()
        return HelloOk(self.node_id, self.active)

    async def report(self, node_id: str, status: JobStatus) -> None:
        await trio.lowlevel.checkpoint()
        self.report_soon(node_id, status)

    def report_soon(self, node_id: str, status: JobStatus) -> bool:
        self.reports.append(status)
        self._reported[0].send_nowait(status)
        return True

    async def snapshot(self, node_id: str, snapshot: NodeSnapshot) -> None:
        self.snapshots.append(snapshot)
        await trio.lowlevel.checkpoint()

    async def metrics(self, node_id: str, batch: SysMetrics) -> None:
        self.metric_batches.append(batch)
        await trio.lowlevel.checkpoint()

    async def events(self, node_id: str, events: Sequence[NodeEvent]) -> None:
        self.node_events.extend(events)
        await trio.lowlevel.checkpoint()

    async def log_lines(self, lines: LogLines) -> None:
        self.log_passes.append(lines)
        await trio.lowlevel.checkpoint()

    async def log_offsets(self, request: LogOffsets) -> LogOffsets:
        await trio.lowlevel.checkpoint()
        return LogOffsets(request.attempts)  # nothing stored yet: from the start

    async def checkpoints(self, node_id: str, found: CheckpointsFound) -> None:
        self.checkpoint_finds.append(found)
        await trio.lowlevel.checkpoint()

    async def tb_points(self, node_id: str, points: TbPoints) -> TbStored:
        """Recorded, and each file's cursor kept as the server would: only from its ``after``."""
        await trio.lowlevel.checkpoint()
        self.tb_passes.append(points)
        stale = []
        for part in points.files:
            key = (points.job_id, points.attempt, part.path)
            before = self.tb_stored.get(key)
            if (before.cursor if before else None) != part.after:
                stale.append(part.path)
                continue
            rewinds = {r.series: r for r in (before.rewinds if before else ())}
            rewinds.update({r.series: r for r in part.rewinds})
            self.tb_stored[key] = TbFileState(part.path, part.cursor, tuple(rewinds.values()))
        return TbStored(points.job_id, points.attempt, tuple(stale))

    async def tb_cursors(self, request: TbCursors) -> TbCursors:
        await trio.lowlevel.checkpoint()
        files = tuple(state for (job_id, attempt, _), state in sorted(self.tb_stored.items())
                      if (job_id, attempt) == (request.job_id, request.attempt))
        return TbCursors(request.job_id, request.attempt, files)

    def follow_logs(self, inbox: trio.MemorySendChannel[LogFollow]) -> None:
        self.log_inbox = inbox

    def goodbye(self, node_id: str) -> None:
        self.goodbyes.append(node_id)

    # -- the test as the server ------------------------------------------------------------

    async def dispatch(self, job: JobSpecWire) -> None:
        assert self.inbox is not None, "no hello yet"
        await self.inbox.send(Dispatch(job))

    async def cancel(self, job_id: str, attempt: int) -> None:
        assert self.inbox is not None, "no hello yet"
        await self.inbox.send(Cancel(job_id, attempt))

    async def next_report(self) -> JobStatus:
        """The node's next report (in the order they came)."""
        return await self._reported[1].receive()
