"""The server's half of the node link (``gpuplaned.node_link.NodeLink``), in memory.

In role ``all`` both sides share the process: ``LocalNodeLink`` is what the node-side
actors (runner, logs, monitor, ckptwatch, tbtail) hold as "the server", and its calls run the server's side
in the caller's task: the store writes, the live feeds, waking the scheduler.
``NodeRegistry`` is how the scheduler reaches a node's runner. A remote agent holds an
uplink with the same calls (``gpuplaned.uplink.link.UplinkNodeLink``) and the server a
WebSocket-backed entry in the registry (``agent_link.AgentSession``); the messages are the
same wire types.

Exactly once: a remote agent's records (``gpuplaned.service.link.agent_link``) come with ``once``, the
record's ``(node, stream, seq)``. Its effect then runs in ONE transaction that first claims the seq
(``store.uplink_rows.claim``): a seq claimed before changes nothing and publishes nothing. What is
published to live followers goes out only after that commit, and only when applied.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import trio

from gpuplaned import tsdb
from gpuplaned.domain.diagnosis import evidence
from gpuplaned.domain.diagnosis.failure import memory_curve
from gpuplaned.domain.event_types import JOB_WAITING
from gpuplaned.domain.job_states import JobState, NodeReport, failure_event
from gpuplaned.protocol.agent import (
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
from gpuplaned.protocol.errors import ApiError
from gpuplaned.protocol.ids import new_id
from gpuplaned.protocol.tb_frames import TbCursors, TbPoints, TbStored
from gpuplaned.service.api import evaluations
from gpuplaned.service.api.diagnosis import gpu_samples
from gpuplaned.service.api.events import job_failure_row
from gpuplaned.service.api.run_records import store_found
from gpuplaned.service.link.log_feeds import Key, batches_of
from gpuplaned.service.link.registry import now_ms
from gpuplaned.service.link.tb_points import store_points, stored_cursors
from gpuplaned.service.passes.checkpoint_arrival import checkpoints_arrived
from gpuplaned.service.passes.dispatch import wake_scheduler
from gpuplaned.store import event_rows, job_rows, log_rows, node_rows, uplink_rows
from gpuplaned.store.event_rows import EventRow
from gpuplaned.store.writer import Write, write

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext

log = logging.getLogger("gpuplaned.nodes")

# A pass's lines for live followers up to this many get their SSE frames on the event loop;
# more go to a worker thread, so that a job printing fast never stalls the API.
FRAMES_INLINE = 200


@attrs.frozen
class Once:
    """A remote record's identity: applied only in the transaction that claims ``seq`` on ``stream``."""

    node_id: str
    stream: str
    seq: int


class NotOnNode(Exception):
    """A node's record names a job attempt or run that is not on that node: refused whole, nothing
    stored (a node writes only about its own jobs: their events, logs, checkpoints, TensorBoard)."""


def require_on_node(conn: Any, node_id: str, attempts: Sequence[tuple[str, int | None]],
                    run_id: str | None = None) -> None:
    """Raise ``NotOnNode`` unless every ``(job id, attempt)`` (None: any attempt) and ``run_id`` is
    on the node (``node_rows.foreign_attempts``, ``node_rows.run_on_node``)."""
    foreign = node_rows.foreign_attempts(conn, node_id, attempts)
    if foreign:
        named = ", ".join(job if attempt is None else f"{job} attempt {attempt}" for job, attempt in foreign[:3])
        raise NotOnNode(f"job {named}{', ...' if len(foreign) > 3 else ''} is not on node {node_id}")
    if run_id is not None and not node_rows.run_on_node(conn, node_id, run_id):
        raise NotOnNode(f"run {run_id} did not run on node {node_id}")


def claimed(conn: Any, once: Once | None) -> bool:
    """True when the effect is to run: no ``once`` (the in-memory link), or a seq not applied before."""
    return once is None or uplink_rows.claim(conn, once.node_id, once.stream, once.seq)


def _log_level(event: Any) -> int:
    """An event is logged at its severity: info events (a run's start and end, an evaluation's
    result) are not warnings."""
    return logging.INFO if event.severity == "info" else logging.WARNING


def waiting_row(node_id: str, status: JobStatus, reason: str, now: int) -> EventRow:
    """JOB_WAITING: the node's runner holds the attempt, not started, for ``reason`` (a new one)."""
    return EventRow(new_id("ev"), status.at_ms or now, JOB_WAITING, "info", node_id, status.job_id, None, None,
                    f"job {status.job_id} attempt {status.attempt} waits to start: {reason}",
                    {"attempt": status.attempt, "reason": reason})


def oom_memory_curve(conn: Any, node_id: str, status: JobStatus, now: int) -> list[dict[str, Any]]:
    """An OOM's evidence: the attempt's GPUs' memory over its run (none for any other failure)."""
    if failure_event(status.failure_reason)[0] != "OOM":
        return []
    job = job_rows.get_job(conn, status.job_id)
    if job is None or job.started_at is None:
        return []
    gpu = gpu_samples(conn, node_id, job.gpu_indexes, job.started_at, status.at_ms or now,
                      ("memory_used_mb", "memory_total_mb"))
    return memory_curve(node_id, gpu)


@attrs.frozen
class _SaidOnCommit:
    """The answer to a report nobody waits on (``LocalNodeLink.report_soon``): what ``report``
    does after its commit (``said``), done by the store as it answers, with no task to wake."""

    said: Callable[[JobStatus, job_rows.StatusOutcome, list[EventRow]], None]
    status: JobStatus

    def resolve(self, value: tuple[job_rows.StatusOutcome, list[EventRow]]) -> None:
        try:
            self.said(self.status, *value)
        except Exception:  # noqa: BLE001 - the store's loop must go on; the report is committed
            log.exception("after the %s report for %s attempt %d", self.status.status, self.status.job_id,
                          self.status.attempt)

    def fail(self, error: BaseException) -> None:
        log.error("the %s report for %s attempt %d was not recorded: %s", self.status.status, self.status.job_id,
                  self.status.attempt, error)


class LocalNodeLink:
    """The node link of role all: the node-side actors' view of the server (``NodeLink``)."""

    def __init__(self, shared: ServerContext) -> None:
        self._shared = shared
        self._logs_inbox: trio.MemorySendChannel[LogFollow] | None = None

    async def hello(self, hello: Hello, inbox: trio.MemorySendChannel[Dispatch | Cancel]) -> HelloOk:
        def register(conn: Any) -> tuple[str, list[Any]]:
            node_id, active = job_rows.register_node(conn, hello, now_ms())
            uplink_rows.set_link(conn, node_id, None, uplink=False)  # this daemon's own node
            return node_id, active

        node_id, active = await write(self._shared.supervisor.ports["store"], register)
        self._shared.nodes.attach(node_id, inbox)
        wake_scheduler(self._shared)
        return HelloOk(node_id, tuple(active))

    async def report(self, node_id: str, status: JobStatus, *, once: Once | None = None) -> None:
        if status.status not in (NodeReport.RUNNING, NodeReport.LOST, NodeReport.WAITING):
            # An end frees a slot or a CPU place. Woken just before the report is queued, the
            # scheduler's pass is queued behind it (the store takes writes in order), mostly
            # into the same transaction, and the next queued job takes the place at once.
            wake_scheduler(self._shared)
        outcome, events = await write(self._shared.supervisor.ports["store"], self._applying(node_id, status, once),
                                      small=True)
        self._said(status, outcome, events)

    def report_soon(self, node_id: str, status: JobStatus) -> bool:
        """Queued as a lazy write (``Write.lazy``): a short job's start shares the transaction
        of its end instead of taking one of its own. Only a start comes this way."""
        assert status.status is NodeReport.RUNNING, status
        said = _SaidOnCommit(self._said, status)
        try:
            self._shared.supervisor.ports["store"].send_nowait(
                Write(self._applying(node_id, status, None), said, small=True, lazy=True))
        except trio.WouldBlock:
            return False
        return True

    def _applying(self, node_id: str, status: JobStatus,
                  once: Once | None) -> Callable[[Any], tuple[job_rows.StatusOutcome, list[EventRow]]]:
        """The report's change, for the store's transaction, with the events it raises."""

        def apply(conn: Any) -> tuple[job_rows.StatusOutcome, list[EventRow]]:
            if not claimed(conn, once):
                return job_rows.StatusOutcome(False, reason="a record applied before"), []
            now = now_ms()
            outcome = job_rows.apply_status(conn, node_id, status, now)
            # In the same transaction as the end it tells of: never one without the other.
            events = []
            if outcome.applied and status.status == NodeReport.FAILED and outcome.run_status == NodeReport.FAILED:
                retried = outcome.status == JobState.QUEUED.value
                events.append(job_failure_row(node_id, status, outcome.run_id, retried, now,
                                              oom_memory_curve(conn, node_id, status, now)))
                event_rows.insert_events(conn, events)
            if outcome.waiting is not None:  # a new reason to wait, not the same one said again
                events.append(waiting_row(node_id, status, outcome.waiting, now))
                event_rows.insert_events(conn, events)
            events += evaluations.after_report(conn, status, outcome, now)  # an EVALUATE job's evaluation
            return outcome, events

        return apply

    def _said(self, status: JobStatus, outcome: job_rows.StatusOutcome, events: list[EventRow]) -> None:
        """After the report's commit: its log line, and its events to their followers."""
        if not outcome.applied:
            log.warning("ignored %s report for %s attempt %d: %s", status.status, status.job_id,
                        status.attempt, outcome.reason)
            return
        if status.status != NodeReport.WAITING:  # a wait's news is its event's, below
            log.info("job %s attempt %d: %s", status.job_id, status.attempt, outcome.status)
        for row in events:  # after the commit: followers never see an event that was rolled back
            self._shared.event_feed.publish(row)
            log.log(_log_level(row), "event %s for job %s attempt %d", row.type, status.job_id, status.attempt)

    async def snapshot(self, node_id: str, snapshot: NodeSnapshot) -> None:
        """The node's latest readings; a change in what it accepts may free work to dispatch."""
        if self._shared.nodes.update_snapshot(node_id, snapshot):
            wake_scheduler(self._shared)

    async def metrics(self, node_id: str, batch: SysMetrics, *, once: Once | None = None) -> None:
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
            if not claimed(conn, once):
                return None
            return tsdb.ingest(conn, "node", node_id, columns, source=node_id, seq=batch.seq)

        await write(self._shared.supervisor.ports["store"], store)

    async def events(self, node_id: str, events: Sequence[NodeEvent], *, once: Once | None = None) -> None:
        """Store what the node's health rules noticed, then publish it to live followers."""
        rows = [EventRow(new_id("ev"), e.ts, e.type, e.severity, node_id, e.job_id, None, None, e.message,
                         evidence.bind_node(e.context, node_id)) for e in events]

        def store(conn: Any) -> bool:
            require_on_node(conn, node_id, [(e.job_id, None) for e in events if e.job_id is not None])
            if not claimed(conn, once):
                return False
            event_rows.insert_events(conn, rows)
            return True

        if (rows or once is not None) and not await write(self._shared.supervisor.ports["store"], store):
            return
        for row in rows:
            self._shared.event_feed.publish(row)
            log.log(_log_level(row), "event %s on %s: %s", row.type, node_id, row.message)

    async def log_lines(self, lines: LogLines, *, once: Once | None = None) -> None:
        """Feed the attempts' live followers first (they wait on it), then keep the tails.

        A remote record (``once``): its tails are kept first, and the followers fed only when
        it had not been applied before (a resend must not show them its lines twice). Every
        chunk with lines of a followed attempt is fed, the tails-only ones too (a remote agent
        that was not told of the followers sends only those): its batch covers only its lines."""
        tails = [c for c in lines.chunks if c.lines]
        if once is not None:
            # A remote node's pass: only its own attempts (the local node's own actors are trusted).
            attempts = [(c.job_id, c.attempt) for c in lines.chunks] + [(job, attempt) for job, attempt in lines.served]

            def keep(conn: Any) -> bool:
                require_on_node(conn, once.node_id, attempts)
                if not claimed(conn, once):
                    return False
                if tails:
                    log_rows.keep_tails(conn, tails, lines.tail_lines)
                return True  # nothing to keep (no tails) is still a record applied

            if not await write(self._shared.supervisor.ports["store"], keep):
                return
            tails = []
        feeds = self._shared.log_feeds
        followed = [c for c in lines.chunks if c.lines and feeds.wanted((c.job_id, c.attempt))]
        if sum(len(c.lines) for c in followed) > FRAMES_INLINE:
            batches = await trio.to_thread.run_sync(batches_of, followed)
        else:
            batches = batches_of(followed)
        for key in lines.served:
            feeds.publish(key, batches.pop(key, []))
        for key, unasked in batches.items():  # a pass not meant for followers (a remote agent's) has lines too
            feeds.publish(key, unasked, served=False)
        if tails:
            await write(self._shared.supervisor.ports["store"],
                        lambda conn: log_rows.keep_tails(conn, tails, lines.tail_lines))

    async def log_offsets(self, request: LogOffsets) -> LogOffsets:
        readers = self._shared.readers
        assert readers is not None  # a role with a store, or there would be no local link
        found = await readers.run(lambda conn: log_rows.stored_offsets(conn, request.attempts))
        return LogOffsets(request.attempts, tuple(found))

    async def checkpoints(self, node_id: str, found: CheckpointsFound, *, once: Once | None = None) -> None:
        """Register what the node's watcher found; each new one's CHECKPOINT_CREATED is
        published after the commit. A find for a run that is not the job's is dropped."""
        shared = self._shared
        try:
            def store(conn: Any) -> list[EventRow]:
                require_on_node(conn, node_id, [(found.job_id, found.attempt)], found.run_id)
                return store_found(conn, found.job_id, found.run_id, found.checkpoints, now_ms()) \
                    if claimed(conn, once) else []

            rows = await write(shared.supervisor.ports["store"], store, small=True)
        except ApiError as exc:
            log.warning("checkpoints from %s dropped: %s", node_id, exc.message)
            return
        for row in rows:
            shared.event_feed.publish(row)
            log.info("checkpoint %s of job %s", row.context.get("path"), found.job_id)
        checkpoints_arrived(shared, rows)

    async def tb_points(self, node_id: str, points: TbPoints) -> TbStored:
        """Store a TensorBoard tailer pass in one transaction (``service/link/tb_points.py``); its
        loss and skipped-record events are published after the commit. A pass for a run that
        is not the job attempt's is dropped: reading it again would not change that."""
        shared = self._shared
        ingested: list[dict[str, Any]] = []
        try:
            def store(conn: Any) -> tuple[TbStored, list[EventRow]]:
                require_on_node(conn, node_id, [(points.job_id, points.attempt)], points.run_id)
                return store_points(conn, points, now_ms(), ingested, shared.config.detector)

            stored, events = await write(shared.supervisor.ports["store"], store)
        except ApiError as exc:
            log.warning("TensorBoard points from %s dropped: %s", node_id, exc.message)
            return TbStored(points.job_id, points.attempt)
        for metrics in ingested:  # after the commit, like the SDK's batches
            shared.metric_feeds.publish(points.run_id, metrics)
        for row in events:
            shared.event_feed.publish(row)
        return stored

    async def tb_cursors(self, request: TbCursors) -> TbCursors:
        readers = self._shared.readers
        assert readers is not None  # a role with a store, or there would be no local link
        return await readers.run(lambda conn: stored_cursors(conn, request))

    def follow_logs(self, inbox: trio.MemorySendChannel[LogFollow]) -> None:
        self._logs_inbox = inbox
        feeds = self._shared.log_feeds
        feeds.on_change = self._log_follow
        for key in feeds.keys():
            self._log_follow(key, True)

    def _log_follow(self, key: Key, live: bool) -> None:
        if self._logs_inbox is None:
            return
        try:
            self._logs_inbox.send_nowait(LogFollow(key[0], key[1], live))
        except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
            # Its followers read the files instead, as they do whenever the feed is quiet.
            log.warning("logs actor is not keeping up; live following of %s attempt %d not passed on", *key)

    def goodbye(self, node_id: str) -> None:
        """The runner is going away: no more dispatches to this node until its next hello.

        Whether a node is online is the registry's answer (``connected()``), not a column,
        so nothing has to be written here, which matters while the daemon is being torn down.
        """
        self._shared.nodes.detach(node_id)
