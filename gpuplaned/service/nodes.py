"""The link between node-side actors (runner) and the server side (store, scheduler).

In role ``all`` both sides share the process: ``LocalNodeLink`` is what the runner holds
as "the server", and ``NodeRegistry`` is how the scheduler reaches a node's runner. A
remote agent will get an uplink with the same two calls (``hello`` and ``report``) and
the server a WebSocket-backed entry in the registry; the messages are the same wire types.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import trio

from gpuplaned.store.writer import write
from gpuplaned.protocol.agent import Hello, HelloOk, JobStatus, ServerToNode
from gpuplaned.store import jobs as job_rows

if TYPE_CHECKING:
    from gpuplaned.daemon import DaemonContext

log = logging.getLogger("gpuplaned.nodes")


def now_ms() -> int:
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


def wake_scheduler(shared: DaemonContext) -> None:
    """Ask for a scheduling pass soon; never blocks (a pending wake is as good as two)."""
    port = shared.supervisor.ports.get("scheduler")
    if port is None:
        return
    try:
        port.send_nowait(WAKE)
    except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
        pass


class _Wake:
    def __repr__(self) -> str:
        return "WAKE"


WAKE = _Wake()


class LocalNodeLink:
    """Node side, role all: the runner's view of the server."""

    def __init__(self, shared: DaemonContext) -> None:
        self._shared = shared

    async def hello(self, hello: Hello, inbox: trio.MemorySendChannel[Any]) -> HelloOk:
        node_id, active = await write(self._shared.supervisor.ports["store"],
                                      lambda conn: job_rows.register_node(conn, hello, now_ms()))
        self._shared.nodes.attach(node_id, inbox)
        wake_scheduler(self._shared)
        return HelloOk(node_id, tuple(active))

    async def report(self, node_id: str, status: JobStatus) -> None:
        outcome = await write(self._shared.supervisor.ports["store"],
                              lambda conn: job_rows.apply_status(conn, node_id, status, now_ms()))
        if not outcome.applied:
            log.warning("ignored %s report for %s attempt %d: %s", status.status, status.job_id,
                        status.attempt, outcome.reason)
        else:
            log.info("job %s attempt %d: %s", status.job_id, status.attempt, outcome.status)
        if outcome.applied and outcome.status != "RUNNING":
            wake_scheduler(self._shared)

    def goodbye(self, node_id: str) -> None:
        """The runner is going away: no more dispatches to this node until its next hello.

        Whether a node is online is the registry's answer (``connected()``), not a column,
        so nothing has to be written here, which matters while the daemon is being torn down.
        """
        self._shared.nodes.detach(node_id)
