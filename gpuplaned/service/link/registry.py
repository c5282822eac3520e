"""The server's registry of connected nodes: node id -> the channel that reaches its runner.

A remote agent's node (``gpuplaned.service.link.agent_link.AgentSession``) is attached with its session,
which also answers the server's own requests to it (``request``), and the registry keeps what
``node list`` shows of its link in memory (``link_info``): when it was last heard from, its spool
backlog and its clock's skew, kept after it detaches too.
"""

from __future__ import annotations

import math
import time
from typing import Any, Protocol

import attrs
import trio

from gpuplaned.domain import gpu_free
from gpuplaned.protocol.agent import NodeSnapshot, ServerToNode
from gpuplaned.protocol.uplink_frames import Heartbeat
from gpuplaned.runtime import eager
from gpuplaned.runtime.broadcast import Broadcast


NODES_CHANGED = frozenset({"nodes"})


def now_ms() -> int:
    """Wall-clock milliseconds: timestamps on records, never timing logic."""
    return int(time.time() * 1000)


class NodeUnavailable(Exception):
    pass


class RemoteLink(Protocol):
    """What the registry needs of a remote agent's session (``agent_link.AgentSession``)."""

    async def request(self, body: Any, timeout: float) -> Any: ...

    def replace(self) -> None:
        """Another connection of the same agent took over: close this one."""


@attrs.frozen
class LinkInfo:
    """A remote node's link as ``node list`` shows it."""

    state: str  # "attached" or "detached"
    last_heard_ms: int | None  # wall clock: any frame from the agent
    last_heartbeat_ms: int | None
    backlog_records: int | None  # the agent's spool, as its last heartbeat said
    backlog_bytes: int | None
    skew_ms: int | None  # the agent's clock minus the server's (from its hello and heartbeats)


@attrs.define
class _Link:
    session: RemoteLink | None = None
    last_heard_ms: int | None = None
    last_heartbeat_ms: int | None = None
    backlog_records: int | None = None
    backlog_bytes: int | None = None
    skew_ms: int | None = None


class NodeRegistry:
    """Server side: node id -> the channel that reaches that node's runner."""

    def __init__(self, changes: Broadcast[frozenset[str]] | None = None) -> None:
        """``changes``: told ``nodes`` with each live snapshot, attach and detach (the readings
        and the online state node lists show)."""
        self._changes = changes
        self._ports: dict[str, trio.MemorySendChannel[Any]] = {}
        self._snapshots: dict[str, NodeSnapshot] = {}
        # Each node's GPU utilisation readings, for ``[scheduler] max_free_util`` (``withheld``).
        self._util: dict[str, gpu_free.UtilWindow] = {}
        # What the scheduler's last full reading of the queue said was withheld, and when
        # (monotonic s): ``gpuplaned.service.passes.dispatch.run_pass`` reads the queue through
        # again when that changes, and now and then while it lasts.
        self.withheld_said: tuple[dict[str, dict[int, str]], float] = ({}, -math.inf)
        self._links: dict[str, _Link] = {}  # remote nodes only; kept after they detach
        self.snapshot_feed: Broadcast[tuple[str, NodeSnapshot]] = Broadcast()  # (node id, snapshot), live

    def attach(self, node_id: str, port: trio.MemorySendChannel[Any], session: RemoteLink | None = None) -> None:
        """Route the node's messages to ``port``; ``session``: a remote agent's (an earlier
        connection of it still attached is told to close)."""
        self._ports[node_id] = port
        self._changed()
        if session is not None:
            link = self._links.setdefault(node_id, _Link())
            old, link.session = link.session, session
            if old is not None and old is not session:
                old.replace()

    def detach(self, node_id: str, port: trio.MemorySendChannel[Any] | None = None) -> None:
        """No more messages to the node; ``port``: only if it is still the one attached (a
        replaced connection closing must not detach the one that replaced it)."""
        if port is not None and self._ports.get(node_id) is not port:
            return
        self._ports.pop(node_id, None)
        self._changed()
        self._snapshots.pop(node_id, None)  # stale readings must not pass for live ones
        self._util.pop(node_id, None)
        link = self._links.get(node_id)
        if link is not None:
            link.session = None

    def _changed(self) -> None:
        if self._changes is not None and not self._changes.closed:
            self._changes.publish(NODES_CHANGED)

    def heard(self, node_id: str, at_ms: int) -> None:
        """Any frame from a remote node's agent: it is alive (cheap: in memory only)."""
        self._links.setdefault(node_id, _Link()).last_heard_ms = at_ms

    def heartbeat(self, node_id: str, beat: Heartbeat, at_ms: int) -> None:
        link = self._links.setdefault(node_id, _Link())
        link.last_heard_ms = link.last_heartbeat_ms = at_ms
        link.backlog_records, link.backlog_bytes = beat.backlog_records, beat.backlog_bytes
        link.skew_ms = beat.ts_ms - at_ms

    def set_skew(self, node_id: str, skew_ms: int) -> None:
        self._links.setdefault(node_id, _Link()).skew_ms = skew_ms

    def last_heard(self, node_id: str) -> int | None:
        link = self._links.get(node_id)
        return link.last_heard_ms if link else None

    def link_info(self, node_id: str) -> LinkInfo | None:
        """A remote node's link (None: the node never had one since this server started)."""
        link = self._links.get(node_id)
        if link is None:
            return None
        state = "attached" if link.session is not None and node_id in self._ports else "detached"
        return LinkInfo(state, link.last_heard_ms, link.last_heartbeat_ms, link.backlog_records,
                        link.backlog_bytes, link.skew_ms)

    def session(self, node_id: str) -> RemoteLink | None:
        """The attached remote agent's session of the node, if any."""
        link = self._links.get(node_id)
        return link.session if link is not None and node_id in self._ports else None

    async def request(self, node_id: str, body: Any, timeout: float) -> Any:
        """Ask the node's remote agent (``agent_link.AgentSession.request``).

        Raises:
            NodeUnavailable: no remote agent of the node is attached.
        """
        session = self.session(node_id)
        if session is None:
            raise NodeUnavailable(f"node {node_id} has no agent attached")
        return await session.request(body, timeout)

    def connected(self) -> set[str]:
        return set(self._ports)

    def update_snapshot(self, node_id: str, snapshot: NodeSnapshot) -> bool:
        """Keep a connected node's latest readings; True when its verdict on new work changed."""
        if node_id not in self._ports:
            return False
        before = self._snapshots.get(node_id)
        self._snapshots[node_id] = snapshot
        window = self._util.get(node_id)
        if window is None:
            window = self._util[node_id] = gpu_free.UtilWindow()
        window.add(gpu_free.uses_of(snapshot.gpus))
        self.snapshot_feed.publish((node_id, snapshot))
        self._changed()
        return before is None or (before.accepting, before.blocked_gpus) != (snapshot.accepting, snapshot.blocked_gpus)

    def snapshot(self, node_id: str) -> NodeSnapshot | None:
        return self._snapshots.get(node_id)

    def snapshots(self) -> dict[str, NodeSnapshot]:
        """Latest readings per connected node (what the scheduler must respect)."""
        return dict(self._snapshots)

    def withheld(self, rule: gpu_free.UtilRule) -> dict[str, dict[int, str]]:
        """Per connected node, the GPUs that take no new job now and why
        (``gpuplaned.domain.gpu_free.withheld``): what the node withholds, and under ``rule``
        (``[scheduler] max_free_util``) what is too busy. Nodes with none are left out."""
        out = {}
        for node_id, snapshot in self._snapshots.items():
            if not snapshot.blocked_gpus and rule.max_free_util is None:
                continue  # the common case, on every pass: nothing to read
            found = gpu_free.withheld(gpu_free.uses_of(snapshot.gpus), snapshot.blocked_gpus,
                                      self._util.get(node_id), rule)
            if found:
                out[node_id] = found
        return out

    async def send(self, node_id: str, message: ServerToNode) -> None:
        """Deliver to the node's runner (waits while its inbox is full).

        Raises:
            NodeUnavailable: the node is not connected.
        """
        port = self._ports.get(node_id)
        if port is None:
            raise NodeUnavailable(f"node {node_id} is not connected")
        try:
            await eager.send(port, message)  # no turn of the scheduler for each job a pass places
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            # A remote agent's connection closed just now: as if it had not been connected.
            raise NodeUnavailable(f"node {node_id} is not connected") from None


