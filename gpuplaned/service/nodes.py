"""The link between node-side actors (runner) and the server side (store, scheduler).

In role ``all`` both sides share the process: ``LocalNodeLink`` is what the runner holds
as "the server", and ``NodeRegistry`` is how the scheduler reaches a node's runner. A
remote agent will get an uplink with the same two calls (``hello`` and ``report``) and
the server a WebSocket-backed entry in the registry; the messages are the same wire types.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import trio

from gpuplaned import tsdb
from gpuplaned.protocol.agent import Hello, HelloOk, JobStatus, NodeEvent, NodeSnapshot, SysMetrics
from gpuplaned.service.dispatch import deliver, run_pass
from gpuplaned.service.events import job_failure_row, record_node_events
from gpuplaned.service.registry import now_ms
from gpuplaned.store import event_rows
from gpuplaned.store import job_rows
from gpuplaned.store import node_rows
from gpuplaned.store.writer import write

if TYPE_CHECKING:
    from gpuplaned.daemon import DaemonContext

log = logging.getLogger("gpuplaned.nodes")


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
        shared = self._shared

        def apply(conn: Any) -> tuple[job_rows.StatusOutcome, list[job_rows.Dispatched], list[Any]]:
            now = now_ms()
            outcome = job_rows.apply_status(conn, node_id, status, now)
            # In the same transaction as the end it tells of: never one without the other.
            events = []
            if outcome.applied and status.status == "FAILED" and outcome.run_status == "FAILED":
                events.append(job_failure_row(node_id, status, outcome.run_id, outcome.status == "QUEUED", now))
                event_rows.insert_events(conn, events)
            # A slot or a CPU place may have come free: fill it in the same transaction.
            ended = outcome.applied and outcome.status not in ("RUNNING", "LOST")
            return outcome, run_pass(shared, conn) if ended else [], events

        outcome, dispatched, events = await write(shared.supervisor.ports["store"], apply, small=True)
        if not outcome.applied:
            log.warning("ignored %s report for %s attempt %d: %s", status.status, status.job_id,
                        status.attempt, outcome.reason)
            return
        log.info("job %s attempt %d: %s", status.job_id, status.attempt, outcome.status)
        for row in events:  # after the commit: followers never see an event that was rolled back
            shared.event_feed.publish(row)
            log.warning("event %s for job %s attempt %d", row.type, status.job_id, status.attempt)
        await deliver(shared, dispatched)

    async def snapshot(self, node_id: str, snapshot: NodeSnapshot) -> None:
        """The node's latest readings; a change in what it accepts may free work to dispatch."""
        if self._shared.nodes.update_snapshot(node_id, snapshot):
            wake_scheduler(self._shared)

    async def metrics(self, node_id: str, batch: SysMetrics) -> None:
        """Store a batch of node metric points; a batch seen before (same seq) is stored once."""
        columns: dict[str, dict[str, list[Any]]] = {}
        for name, ts, value in batch.points:
            series = columns.get(name)
            if series is None:
                series = columns[name] = {"ts": [], "value": []}
            series["ts"].append(ts)
            series["value"].append(value)

        def store(conn: Any) -> Any:
            # A batch every few seconds is the node's heartbeat: written with it, at no extra commit.
            node_rows.heard_from(conn, node_id, now_ms())
            return tsdb.ingest(conn, "node", node_id, columns, source=node_id, seq=batch.seq)

        await write(self._shared.supervisor.ports["store"], store)

    async def events(self, node_id: str, events: Sequence[NodeEvent]) -> None:
        for row in await record_node_events(self._shared, node_id, events):
            level = logging.WARNING if row.severity != "info" else logging.INFO
            log.log(level, "event %s on %s: %s", row.type, node_id, row.message)

    def goodbye(self, node_id: str) -> None:
        """The runner is going away: no more dispatches to this node until its next hello.

        Whether a node is online is the registry's answer (``connected()``), not a column,
        so nothing has to be written here, which matters while the daemon is being torn down.
        """
        self._shared.nodes.detach(node_id)
