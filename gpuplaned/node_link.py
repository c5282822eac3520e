"""The node link: how the node-side actors (runner, logs, monitor, ckptwatch, tbtail) reach the server.

A node-side actor holds a ``NodeLink`` and nothing else of the server: no store, no
service, no HTTP. Every message is a wire type of ``gpuplaned.protocol.agent``, so the
same calls work in memory and over a network:

- role ``all``: ``gpuplaned.service.link.nodes.LocalNodeLink`` is the server's half, called in
  the node actor's own task (the daemon wires it);
- tests: ``gpuplaned.testing`` has a memory link that records what the node sent;
- issue "remote agents": the uplink sends the same messages as JSON frames over WebSocket.

What a node sends is about itself and its own jobs: the server refuses a record or a tailer pass
that names a job attempt or run not on the node (``gpuplaned.service.link.nodes.NotOnNode``).

The server's messages to the node (``ServerToNode``) come on channels the node hands over:
the runner's inbox with its ``hello`` (``Dispatch``, ``Cancel``), the logs actor's with
``follow_logs`` (``LogFollow``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import attrs
import trio

from gpuplaned.protocol.agent import (
    ActiveJob,
    Cancel,
    CheckpointsFound,
    Dispatch,
    Hello,
    HelloOk,
    JobStatus,
    LogFollow,
    LogLines,
    LogOffsets,
    NodeEvent,
    NodeSnapshot,
    SysMetrics,
)
from gpuplaned.protocol.tb_frames import TbCursors, TbPoints, TbStored

__all__ = ["NodeLink", "Reconcile"]


@attrs.frozen
class Reconcile:
    """Link to runner (node-internal, never on the wire): the link is back after an outage,
    and these are the jobs the server believes are on this node (``HelloOk.active``). The
    runner reports those still running as RUNNING again, adopts those it does not track
    (which reports how they ended while the link was down, or LOST), and cancels those
    with ``cancel_requested``."""

    active: tuple[ActiveJob, ...]


class NodeLink(Protocol):
    """The server, as the node side sees it."""

    async def hello(self, hello: Hello, inbox: trio.MemorySendChannel[Dispatch | Cancel]) -> HelloOk:
        """Register the node; the server sends its dispatches and cancels to ``inbox`` from now
        on, and answers with the node's id and the jobs it believes the node has."""
        ...

    async def report(self, node_id: str, status: JobStatus) -> None:
        """A job attempt's change of state (RUNNING, how it ended, REQUEUE, LOST)."""
        ...

    def report_soon(self, node_id: str, status: JobStatus) -> bool:
        """``report`` without waiting for it (a job's start): queued now, so it is applied before
        any report made after this call. False: it could not be queued now (the server's queue
        is full): ``report`` it instead."""
        ...

    async def snapshot(self, node_id: str, snapshot: NodeSnapshot) -> None:
        """The node's latest readings (every monitor sample)."""
        ...

    async def metrics(self, node_id: str, batch: SysMetrics) -> None:
        """A batch of node metric points. Raises when the server could not take it: the
        node keeps the points for the next batch."""
        ...

    async def events(self, node_id: str, events: Sequence[NodeEvent]) -> None:
        """What the node's health rules noticed."""
        ...

    async def log_lines(self, lines: LogLines) -> None:
        """One pass of the log tailer: the tails to keep, and all lines of followed attempts."""
        ...

    async def log_offsets(self, request: LogOffsets) -> LogOffsets:
        """Where the server's stored tail of each of ``request.attempts`` ends, per stream."""
        ...

    async def checkpoints(self, node_id: str, found: CheckpointsFound) -> None:
        """Register checkpoints the node found complete in a job's folders, once per (run,
        path). Raises when the server could not take them: the node offers them again."""
        ...

    async def tb_points(self, node_id: str, points: TbPoints) -> TbStored:
        """Store one TensorBoard tailer pass over a job attempt's event files, each file's
        points with its cursor, once; the answer names the files whose part was stale.
        Raises when the server could not take it: the node reads again from the stored cursors."""
        ...

    async def tb_cursors(self, request: TbCursors) -> TbCursors:
        """The stored cursors (and rewind state) of a job attempt's event files."""
        ...

    def follow_logs(self, inbox: trio.MemorySendChannel[LogFollow]) -> None:
        """Send ``LogFollow`` to ``inbox`` whenever an attempt gains its first live follower
        or loses its last; at once, one ``LogFollow(live=True)`` per attempt followed now
        (a restarted logs actor learns what it must publish). A later call replaces the inbox."""
        ...

    def goodbye(self, node_id: str) -> None:
        """The runner is going away: no more dispatches to this node until its next hello."""
        ...
