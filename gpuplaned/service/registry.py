"""The server's registry of connected nodes: node id -> the channel that reaches its runner."""

from __future__ import annotations

import time
from typing import Any

import trio

from gpuplaned.protocol.agent import ServerToNode


def now_ms() -> int:
    """Wall-clock milliseconds: timestamps on records, never timing logic."""
    return int(time.time() * 1000)


class NodeUnavailable(Exception):
    pass


class NodeRegistry:
    """Server side: node id -> the channel that reaches that node's runner."""

    def __init__(self) -> None:
        self._ports: dict[str, trio.MemorySendChannel[Any]] = {}

    def attach(self, node_id: str, port: trio.MemorySendChannel[Any]) -> None:
        self._ports[node_id] = port

    def detach(self, node_id: str) -> None:
        self._ports.pop(node_id, None)

    def connected(self) -> set[str]:
        return set(self._ports)

    async def send(self, node_id: str, message: ServerToNode) -> None:
        """Deliver to the node's runner (waits while its inbox is full).

        Raises:
            NodeUnavailable: the node is not connected.
        """
        port = self._ports.get(node_id)
        if port is None:
            raise NodeUnavailable(f"node {node_id} is not connected")
        await port.send(message)


