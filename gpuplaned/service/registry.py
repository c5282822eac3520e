"""The server's registry of connected nodes: node id -> the channel that reaches its runner."""

from __future__ import annotations

import time
from typing import Any

import trio

from gpuplaned.protocol.agent import NodeSnapshot, ServerToNode
from gpuplaned.runtime.broadcast import Broadcast


def now_ms() -> int:
    """Wall-clock milliseconds: timestamps on records, never timing logic."""
    return int(time.time() * 1000)


class NodeUnavailable(Exception):
    pass


class NodeRegistry:
    """Server side: node id -> the channel that reaches that node's runner."""

    def __init__(self) -> None:
        self._ports: dict[str, trio.MemorySendChannel[Any]] = {}
        self._snapshots: dict[str, NodeSnapshot] = {}
        self.snapshot_feed: Broadcast[tuple[str, NodeSnapshot]] = Broadcast()  # (node id, snapshot), live

    def attach(self, node_id: str, port: trio.MemorySendChannel[Any]) -> None:
        self._ports[node_id] = port

    def detach(self, node_id: str) -> None:
        self._ports.pop(node_id, None)
        self._snapshots.pop(node_id, None)  # stale readings must not pass for live ones

    def connected(self) -> set[str]:
        return set(self._ports)

    def update_snapshot(self, node_id: str, snapshot: NodeSnapshot) -> bool:
        """Keep a connected node's latest readings; True when its verdict on new work changed."""
        if node_id not in self._ports:
            return False
        before = self._snapshots.get(node_id)
        self._snapshots[node_id] = snapshot
        self.snapshot_feed.publish((node_id, snapshot))
        return before is None or (before.accepting, before.blocked_gpus) != (snapshot.accepting, snapshot.blocked_gpus)

    def snapshot(self, node_id: str) -> NodeSnapshot | None:
        return self._snapshots.get(node_id)

    def snapshots(self) -> dict[str, NodeSnapshot]:
        """Latest readings per connected node (what the scheduler must respect)."""
        return dict(self._snapshots)

    async def send(self, node_id: str, message: ServerToNode) -> None:
        """Deliver to the node's runner (waits while its inbox is full).

        Raises:
            NodeUnavailable: the node is not connected.
        """
        port = self._ports.get(node_id)
        if port is None:
            raise NodeUnavailable(f"node {node_id} is not connected")
        await port.send(message)


