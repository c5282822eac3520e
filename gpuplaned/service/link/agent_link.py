"""The server's side of a remote agent's uplink (``/api/v1/agent/ws``; the contract is
``gpuplaned.protocol.uplink_frames``), and the scheduler's liveness sweep over such links.

``AgentSession`` owns one WebSocket connection, given as a ``Transport`` (the HTTP layer adapts
Quart's; no Quart here):

1. Handshake: the first frame must be a good ``hello`` (``ping`` is answered before it). A node
   name belongs to the agent token that first said hello as it (``nodes.agent_token_id``), attached
   or not, until ``node forget``; the server's own node is never an agent's. A name whose node is
   still attached is taken over only by the same ``agent_id`` (the old connection is closed);
   anything else is ``hello_err`` and the connection closes, before any job or env is sent. ``hello_ok`` carries the jobs
   the server believes are on the node (LOST ones and missed cancels too), the stored high-water
   mark of every record stream, the server's clock and the heartbeat period.
2. The node is attached in the ``NodeRegistry`` with a channel: dispatches, cancels (and whatever
   the session sends itself: acks, replies) go out through one writer task, in order.
3. The receive loop applies records in order, and acks after the commit; it waits for each
   write, so a replay is held to the store's pace. A ``records`` batch of node metrics is
   merged into one ingest, in one transaction with its seqs (``uplink_rows.claim_batch``);
   any other record goes through ``LocalNodeLink`` with ``once``, one transaction a record.
   A batch is acked once, with its last seq, after the last commit. A stream's seqs go one
   after another: a seq past the next one that no ``skip`` frame announced is refused, and the
   connection closed. A record about a job attempt or run not on this node is refused
   (``nodes.NotOnNode``): acked, its seq claimed, said once a connection. It answers requests,
   heartbeats, snapshots, goodbye, ping.
   Nothing heard for 3 heartbeats closes the connection (a stalled one looks like this).
4. Hostile frames (over ``MAX_FRAME``, not JSON, too deep, unknown types, bad fields) get an
   ``error`` frame naming the problem and change nothing; an oversized one also closes.

Closing detaches the node; its jobs are not touched then. The sweep (``sweep``, run on the
scheduler's tick: the scheduler owns LOST detection) marks a remote node silent for 3 heartbeats
and not attached OFFLINE and its DISPATCHING/RUNNING jobs LOST with one AGENT_DISCONNECTED event,
and requeues a dispatch an attached agent has not started within ``[uplink] dispatch_ack_s`` (at
most 3 times; the next time the job fails).
"""

from __future__ import annotations

import bisect
import itertools
import json
import logging
import math
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import trio

import gpuplaned
from gpuplaned import tsdb
from gpuplaned.domain.event_types import AGENT_DISCONNECTED, AGENT_RECONNECTED
from gpuplaned.protocol import bounded_json
from gpuplaned.protocol.job_states import NodeReport
from gpuplaned.protocol.agent import (
    FRAMES,
    RECORD_BODIES,
    REPLY_BODIES,
    REQUEST_BODIES,
    STREAM_OF,
    Cancel,
    CheckpointsFound,
    FrameError,
    Hello,
    HelloErr,
    HelloOk,
    JobStatus,
    LogLines,
    LogOffsets,
    NodeEvents,
    NodeSnapshot,
    Ping,
    Pong,
    SysMetrics,
)
from gpuplaned.protocol.converter import FieldInvalid, structure, unstructure
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.ids import new_id
from gpuplaned.protocol.run_replies import RunSummaryReply
from gpuplaned.protocol.tb_frames import TbCursors, TbPoints
from gpuplaned.protocol.uplink_frames import (
    Ack,
    FrameFault,
    Goodbye,
    Heartbeat,
    HeartbeatOk,
    MAX_SEQ_SKIP,
    Record,
    Records,
    Reply,
    Request,
    SessionCall,
    SessionReply,
    Skip,
)
from gpuplaned.service import access
from gpuplaned.service.api import confined_callers, runs, sessions
from gpuplaned.service.api.events import job_failure_row
from gpuplaned.service.link.nodes import LocalNodeLink, NotOnNode, Once, require_on_node
from gpuplaned.service.link.registry import NodeUnavailable, now_ms
from gpuplaned.service.passes import folder_removal
from gpuplaned.service.passes.dispatch import wake_scheduler
from gpuplaned.store import event_rows, job_rows, node_rows, run_owners, uplink_rows
from gpuplaned.store.event_rows import EventRow
from gpuplaned.store.writer import write

if TYPE_CHECKING:
    from gpuplaned.service.api.ui_sessions import Caller
    from gpuplaned.service.context import ServerContext

log = logging.getLogger("gpuplaned.agent_link")

MAX_FRAME = 4 << 20  # bytes of one frame (a tailer pass of tb_points can be big)
OUTBOX = 256  # frames queued for the writer; a full one holds up the receive loop and dispatches
MISSED_BEATS = 3  # silent this many heartbeats: the connection is closed, the node judged lost
MAX_DISPATCH_REQUEUES = 3  # a job whose dispatch is not started goes back to the queue this often, then fails
DRAIN_S = 2.0  # how long the frames queued when the session ends may take to go out
CLOSE_POLICY = 1008  # WebSocket close codes: policy violation (a bad hello)
CLOSE_TOO_BIG = 1009
CLOSE_NORMAL = 1000


class Transport(Protocol):
    """One WebSocket connection, accepted already."""

    async def receive(self) -> str | bytes: ...

    async def send(self, text: str) -> None: ...

    async def close(self, code: int, reason: str) -> None: ...


class Refused(Exception):
    """The hello is refused: ``hello_err`` with this message, then close."""


def frame_size(raw: str | bytes) -> int:
    if isinstance(raw, bytes):
        return len(raw)
    return len(raw) if len(raw) * 4 <= MAX_FRAME else len(raw.encode("utf-8", "surrogatepass"))


_RECORDS_HEAD = '{"type":"records",'  # how the agent begins a records frame
_RECORDS_HEADS = (_RECORDS_HEAD, _RECORDS_HEAD.encode())


def within_depth(body: Any) -> bool:
    """Whether ``body`` (decoded without the bound) is nested no deeper than ``bounded_json`` allows."""
    try:
        bounded_json.loads(json.dumps(body))
    except (ValueError, RecursionError):
        return False
    return True


def read_frame(raw: str | bytes) -> Any:
    """A frame from the wire, or the ``FrameError`` naming why it is none."""
    if frame_size(raw) > MAX_FRAME:
        return FrameError(f"frame over {MAX_FRAME} bytes")
    try:
        if raw[:len(_RECORDS_HEAD)] in _RECORDS_HEADS:
            # The depth bound costs a batch of small records 40 % more than its decoding: its
            # bodies are bounded where they are read instead (``_records``; seqs are ints).
            data = json.loads(raw)
        else:
            data = bounded_json.loads(raw)
    except RecursionError:
        return FrameError(f"not a JSON frame: {bounded_json.TooDeep()}")
    except ValueError as exc:  # UnicodeDecodeError and bounded_json.TooDeep too
        return FrameError(f"not a JSON frame: {exc}")
    kind = data.get("type") if isinstance(data, dict) else None
    try:
        return FRAMES.structure(data)
    except FieldInvalid as fault:
        where = f"{fault.field}: " if fault.field else ""
        if kind in FRAMES.tags:
            return FrameError(f"bad {kind}: {where}{fault.message}")
        return FrameError(f"not a frame this server reads: {where}{fault.message}")


def _metric_columns(bodies: Sequence[Any]) -> dict[str, dict[str, list[Any]]] | None:
    """The points of ``sys_metrics`` bodies as ingest columns, or None when a body is not
    plainly one (it then goes the checked way, ``RECORD_BODIES``, on its own). The shape is
    checked a column at a time (``map`` and sets, in C): a replay brings a million points."""
    try:
        if ({body["type"] for body in bodies} != {"sys_metrics"} or set(map(len, bodies)) != {3}
                or {type(body["seq"]) for body in bodies} != {int}):
            return None
        points = [point for body in bodies for point in body["points"]]
    except (TypeError, KeyError):  # a body not an object, a key missing, points not a list
        return None
    if not points:
        return {}
    if set(map(type, points)) != {list} or set(map(len, points)) != {3}:
        return None
    names, stamps, values = zip(*points)
    value_types = set(map(type, values))
    if set(map(type, names)) != {str} or set(map(type, stamps)) != {int} or not value_types <= {float, int}:
        return None
    if value_types != {float}:
        values = tuple(map(float, values))
    series = set(names)
    if len(series) == 1:
        return {names[0]: {"ts": list(stamps), "value": list(values)}}
    columns: dict[str, dict[str, list[Any]]] = {name: {"ts": [], "value": []} for name in series}
    for name, ts, value in zip(names, stamps, values):
        column = columns[name]
        column["ts"].append(ts)
        column["value"].append(value)
    return columns


def _fault_text(fault: FieldInvalid) -> str:
    return f"{fault.field}: {fault.message}" if fault.field else fault.message


class AgentSession:
    """One remote agent's connection (see the module's docstring)."""

    def __init__(self, shared: ServerContext, transport: Transport, token_id: str | None = None) -> None:
        self._shared = shared
        self._transport = transport
        self._token_id = token_id  # the agent token that opened the connection (None: the Unix socket)
        self._link = LocalNodeLink(shared)
        self._out_send, self._out_receive = trio.open_memory_channel[Any](OUTBOX)
        self._scope = trio.CancelScope()
        self._ids = itertools.count(1)
        self._pending: dict[int, tuple[trio.Event, list[Reply]]] = {}
        self._acked: dict[str, int] = {}  # committed marks: a resend at or below is acked at once
        self._skipped: dict[str, int] = {}  # seqs the agent said it spent unsent (``Skip``), per stream
        self.foreign_refused = 0  # records naming a job not on this node (refused; said once a link)
        self._closing: tuple[int, str] | None = None
        self.node_id: str | None = None
        self.heartbeat_s = shared.config.uplink.heartbeat_s

    # --- what others call ------------------------------------------------------------------

    async def request(self, body: Any, timeout: float) -> Any:
        """Ask the agent (``log_read``) and wait up to ``timeout`` s for its reply's body.

        Raises:
            NodeUnavailable: the connection closed before the reply came.
            ApiError: the agent answered with an error, or ``unavailable`` on a timeout.
        """
        request_id = next(self._ids)
        got = trio.Event()
        slot: list[Reply] = []
        self._pending[request_id] = (got, slot)
        try:
            try:
                await self._out_send.send(Request(request_id, REQUEST_BODIES.unstructure(body)))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                raise NodeUnavailable(f"node {self.node_id}: its agent's connection closed") from None
            with trio.move_on_after(timeout):
                await got.wait()
        finally:
            self._pending.pop(request_id, None)
        if not slot:
            if got.is_set():
                raise NodeUnavailable(f"node {self.node_id}: its agent's connection closed")
            raise ApiError(ErrorCode.UNAVAILABLE, f"node {self.node_id}: its agent did not answer within {timeout:g} s",
                           {"node_id": self.node_id})
        reply = slot[0]
        if reply.error is not None:
            try:
                code = ErrorCode(reply.error.code)
            except ValueError:
                code = ErrorCode.INTERNAL
            raise ApiError(code, f"node {self.node_id}: {reply.error.message}", {"node_id": self.node_id})
        try:
            return REPLY_BODIES.structure(reply.body)
        except FieldInvalid as fault:
            raise ApiError(ErrorCode.INTERNAL, f"node {self.node_id}: a bad reply from its agent: "
                           f"{_fault_text(fault)}") from None

    def replace(self) -> None:
        """The same agent connected again: this connection is the stale one."""
        log.info("agent of node %s connected again; closing its older connection", self.node_id)
        self._closing = (CLOSE_NORMAL, "replaced by a newer connection of this agent")
        self._scope.cancel()

    # --- the connection --------------------------------------------------------------------

    async def run(self) -> None:
        """Serve the connection until it closes (the peer's close arrives as a cancel or an error
        from ``receive``, which the caller handles)."""
        hello = await self._handshake()
        if hello is None:
            return
        node_id = self.node_id
        assert node_id is not None
        registry = self._shared.nodes
        registry.attach(node_id, self._out_send, self)
        wake_scheduler(self._shared)
        try:
            with self._scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._writer)
                    nursery.start_soon(_tidy_folders, self._shared, node_id)
                    await self._receive_loop()
                    # What is queued (the error frame that closes it, acks) still goes out, briefly.
                    registry.detach(node_id, self._out_send)
                    self._out_send.close()
                    nursery.cancel_scope.deadline = trio.current_time() + DRAIN_S
        finally:
            registry.detach(node_id, self._out_send)
            self._out_send.close()
            if self.foreign_refused > 1:
                log.warning("agent of node %s: %d records about other nodes' jobs refused on this connection",
                            node_id, self.foreign_refused)
            for got, _slot in self._pending.values():
                got.set()  # with no reply: the asker learns the connection closed
            with trio.move_on_after(2, shield=True):
                await self._flush_heard(node_id)
                if self._closing is not None:
                    try:
                        await self._transport.close(*self._closing)
                    except Exception:  # the peer is gone already
                        pass
            log.info("agent of node %s disconnected", node_id)

    async def _flush_heard(self, node_id: str) -> None:
        heard = self._shared.nodes.last_heard(node_id)
        if heard is not None:
            await write(self._shared.supervisor.ports["store"],
                        lambda conn: node_rows.heard_from(conn, node_id, heard), small=True)

    async def _send_now(self, frame: Any) -> None:
        await self._transport.send(json.dumps(FRAMES.unstructure(frame)))

    async def _handshake(self) -> Hello | None:
        while True:
            raw = await self._transport.receive()
            frame = read_frame(raw)
            if isinstance(frame, Ping):
                await self._send_now(Pong(gpuplaned.__version__))
                continue
            if isinstance(frame, FrameError) and frame_size(raw) > MAX_FRAME:
                await self._refuse(frame, CLOSE_TOO_BIG)
                return None
            if isinstance(frame, FrameError):
                text = frame.message
                await self._refuse(HelloErr(text) if text.startswith("bad hello") else frame, CLOSE_POLICY)
                return None
            if not isinstance(frame, Hello):
                await self._refuse(FrameError(f"say hello first: a {FRAMES.tag_of(frame)} frame before it"),
                                   CLOSE_POLICY)
                return None
            try:
                ok = await self._hello(frame)
            except Refused as refused:
                log.warning("agent hello for node %r refused: %s", frame.node_name, refused)
                await self._refuse(HelloErr(str(refused)), CLOSE_POLICY)
                return None
            await self._send_now(ok)
            return frame

    async def _refuse(self, frame: Any, code: int) -> None:
        await self._send_now(frame)
        await self._transport.close(code, getattr(frame, "message", "")[:100])

    async def _hello(self, hello: Hello) -> HelloOk:
        shared = self._shared
        registry = shared.nodes
        now = now_ms()

        def register(conn: Any) -> tuple[str, list[Any], dict[str, int], EventRow | None]:
            known = uplink_rows.by_name(conn, hello.node_name)
            self._check_owner(hello, known)
            if known is not None and known.node_id in registry.connected():
                if not known.uplink or known.agent_id is None or known.agent_id != hello.agent_id:
                    raise Refused(f"node name {hello.node_name!r} belongs to a connected node"
                                  + (" (another agent: its agent_id differs)" if known.uplink else ""))
            was_offline = known is not None and known.uplink and known.status == "OFFLINE"
            node_id, active = job_rows.register_node(conn, hello, now)
            uplink_rows.set_link(conn, node_id, hello.agent_id, uplink=True, token_id=self._token_id)
            event = None
            if was_offline:
                event = EventRow(new_id("ev"), now, AGENT_RECONNECTED, "info", node_id, None, None, None,
                                 f"the agent of node {hello.node_name} is connected again", {})
                event_rows.insert_events(conn, [event])
            return node_id, active, uplink_rows.acked(conn, node_id), event

        node_id, active, acked, event = await write(shared.supervisor.ports["store"], register, small=True)
        self.node_id = node_id
        self._acked = dict(acked)
        registry.heard(node_id, now)
        if hello.ts_ms is not None:
            registry.set_skew(node_id, hello.ts_ms - now)
        if event is not None:
            shared.event_feed.publish(event)
        log.info("agent hello from %s (%s, agent %s): node %s, %d active job(s)", hello.node_name,
                 hello.agent_version, hello.agent_id, node_id, len(active))
        return HelloOk(node_id, tuple(active), acked, now_ms(), self.heartbeat_s)

    def _check_owner(self, hello: Hello, known: uplink_rows.NodeLinkRow | None) -> None:
        """Refuse a name that is not this agent token's to take: the server's own node, or a node
        an other agent token registered (whether or not it is connected now). A name is freed by
        ``gpuplanectl node forget``, which deletes the node's row."""
        config = self._shared.config
        name = hello.node_name
        if (config.role == "all" and name == config.node.name) or (known is not None and not known.uplink):
            raise Refused(f"node name {name!r} is the server's own node; an agent may not say hello as it "
                          "(give the agent another --node-name)")
        if known is None or known.token_id is None or self._token_id is None:
            return  # a new name, one registered before names were bound, or the trusted Unix socket
        if known.token_id != self._token_id:
            raise Refused(f"node name {name!r} belongs to the agent token that registered it, not to this one; "
                          f"an admin frees the name with `gpuplanectl node forget {name}`")

    async def _writer(self) -> None:
        async with self._out_receive:
            async for frame in self._out_receive:
                await self._send_now(frame)

    async def _receive_loop(self) -> None:
        node_id = self.node_id
        assert node_id is not None
        registry = self._shared.nodes
        silence = MISSED_BEATS * self.heartbeat_s
        while True:
            raw: str | bytes | None = None
            with trio.move_on_after(silence):
                raw = await self._transport.receive()
            if raw is None:
                log.warning("agent of node %s silent for %g s; closing its connection", node_id, silence)
                self._closing = (CLOSE_NORMAL, "no heartbeat")
                return
            registry.heard(node_id, now_ms())
            frame = read_frame(raw)
            if isinstance(frame, FrameError):
                await self._out_send.send(frame)
                if frame_size(raw) > MAX_FRAME:
                    self._closing = (CLOSE_TOO_BIG, "frame too big")
                    return
                continue
            if not await self._handle(node_id, frame):
                return

    async def _handle(self, node_id: str, frame: Any) -> bool:
        """Act on one frame; False: close the connection."""
        out = self._out_send
        match frame:
            case Record():
                return await self._record(node_id, frame)
            case Records():
                return await self._records(node_id, frame)
            case Skip():
                return await self._skip(node_id, frame)
            case Request():
                await out.send(await self._answer(node_id, frame))
            case Reply():
                waiting = self._pending.get(frame.id)
                if waiting is None:
                    log.warning("agent of node %s replied to request %d, which nobody awaits", node_id, frame.id)
                else:
                    waiting[1].append(frame)
                    waiting[0].set()
            case Heartbeat():
                now = now_ms()
                self._shared.nodes.heartbeat(node_id, frame, now)
                await out.send(HeartbeatOk(now))
            case NodeSnapshot():
                await self._link.snapshot(node_id, frame)
            case Goodbye():
                log.info("agent of node %s says goodbye: no more dispatches to it", node_id)
                self._shared.nodes.detach(node_id, out)
            case Ping():
                await out.send(Pong(gpuplaned.__version__))
            case Pong() | Ack():
                pass
            case Hello():
                await out.send(FrameError("hello: this connection said hello already"))
            case _:
                await out.send(FrameError(f"a {FRAMES.tag_of(frame)} frame is not read by the server "
                                          "(the agent sends record, request, reply, heartbeat, node_snapshot, "
                                          "goodbye, ping)"))
        return True

    async def _records(self, node_id: str, batch: Records) -> bool:
        """Apply a batch in order (node metrics in one transaction); ack its last seq after the
        last commit. False: a record failed (see ``_record``); what was committed stays, and
        the agent learns the stored marks from its next hello."""
        stream, seqs = batch.stream, batch.seqs
        fresh = bisect.bisect_right(seqs, self._acked.get(stream, 0))
        if fresh < len(seqs):
            expected = self._next_seq(stream)
            if seqs[fresh] != expected or seqs[-1] - seqs[fresh] != len(seqs) - 1 - fresh:
                jump, want = next((seq, want) for seq, want in zip(seqs[fresh:], itertools.count(expected))
                                  if seq != want)
                return await self._refuse_jump(node_id, stream, jump, want)
            columns = _metric_columns(batch.bodies[fresh:]) if stream == "metrics" else None
            if columns is not None:
                if not await self._store_metrics(node_id, seqs[fresh:], batch.bodies[fresh:], columns):
                    return False
            else:
                for seq, body in zip(seqs[fresh:], batch.bodies[fresh:]):
                    if not within_depth(body):
                        await self._ack_invalid(node_id, Record(stream, seq, {}), "nested too deeply", ack=False)
                        continue
                    if not await self._record(node_id, Record(stream, seq, body), ack=False):
                        return False
        self._acked[stream] = max(self._acked.get(stream, 0), seqs[-1])
        await self._out_send.send(Ack(stream, seqs[-1]))
        return True

    async def _store_metrics(self, node_id: str, seqs: tuple[int, ...], bodies: tuple[Any, ...],
                             columns: dict[str, dict[str, list[Any]]]) -> bool:
        """Node metric bodies as one ingest (the first body's seq names it in ``ts_batches``),
        in the transaction that claims their seqs."""
        stream = "metrics"

        def store(conn: Any) -> None:
            node_rows.heard_from(conn, node_id, now_ms())
            first = uplink_rows.claim_batch(conn, node_id, stream, seqs)
            if first == len(seqs):
                return
            points = columns if first == 0 else _metric_columns(bodies[first:])
            assert points is not None
            tsdb.ingest(conn, "node", node_id, points, source=node_id, seq=bodies[first]["seq"])

        try:
            await write(self._shared.supervisor.ports["store"], store)
        except ValueError as exc:  # points the store refuses: applied one by one, the bad ones dropped
            log.warning("a batch of %d metric records of node %s refused as a whole (%s); applied one by one",
                        len(seqs), node_id, exc)
            for seq, body in zip(seqs, bodies):
                if not await self._record(node_id, Record(stream, seq, body), ack=False):
                    return False
        except Exception:
            log.exception("metric records %d..%d of node %s not applied; the agent will resend them", seqs[0],
                          seqs[-1], node_id)
            self._closing = (1011, "records could not be stored; reconnect and resend")
            return False
        return True

    async def _record(self, node_id: str, record: Record, *, ack: bool = True) -> bool:
        """Apply one record in order; ack it after its commit (unless ``ack`` is False: a
        batch's part). False: it failed and must be resent (not acked; the connection closes
        so that no later seq passes it)."""
        if record.seq <= self._acked.get(record.stream, 0):
            if ack:
                await self._out_send.send(Ack(record.stream, record.seq))  # stored before: a resend
            return True
        if record.seq != self._next_seq(record.stream):
            return await self._refuse_jump(node_id, record.stream, record.seq, self._next_seq(record.stream))
        try:
            body = RECORD_BODIES.structure(record.body)
        except FieldInvalid as fault:
            return await self._ack_invalid(node_id, record, f"bad body: {_fault_text(fault)}", ack=ack)
        if STREAM_OF[type(body)] != record.stream:
            return await self._ack_invalid(node_id, record, f"a {RECORD_BODIES.tag_of(body)} record belongs "
                                                            f"on stream {STREAM_OF[type(body)]!r}", ack=ack)
        once = Once(node_id, record.stream, record.seq)
        link = self._link
        try:
            match body:
                case JobStatus():
                    await link.report(node_id, body, once=once)
                case SysMetrics():
                    await link.metrics(node_id, body, once=once)
                case NodeEvents():
                    await link.events(node_id, body.events, once=once)
                case LogLines():
                    await link.log_lines(body, once=once)
                case CheckpointsFound():
                    await link.checkpoints(node_id, body, once=once)
        except NotOnNode as exc:
            return await self._refuse_foreign(node_id, record, str(exc), ack=ack)
        except (ValueError, ApiError) as exc:  # a body the store refuses: it never will take it
            return await self._ack_invalid(node_id, record, str(getattr(exc, "message", exc)), ack=ack)
        except Exception:
            return self._unstored(node_id, record, "not applied")
        return await self._done_with(record, ack)

    async def _done_with(self, record: Record, ack: bool) -> bool:
        """``record`` is stored or claimed: the stream has it, and the agent is told (unless the
        caller acks a whole batch itself)."""
        self._acked[record.stream] = max(self._acked.get(record.stream, 0), record.seq)
        if ack:
            await self._out_send.send(Ack(record.stream, record.seq))
        return True

    def _unstored(self, node_id: str, record: Record, what: str) -> bool:
        """The store failed to take ``record``: nothing is acked, and the link closes so that the
        agent resends it from its spool after reconnecting."""
        log.exception("record %s/%d of node %s: %s; the agent will resend it", record.stream, record.seq, node_id,
                      what)
        self._closing = (1011, "a record could not be stored; reconnect and resend")
        return False

    async def _ack_invalid(self, node_id: str, record: Record, reason: str, *, ack: bool = True,
                           tell: bool = True) -> bool:
        """A record that can never be applied: its seq is claimed (the stream goes on from it after
        a reconnect too), it is acked, and the agent told why (unless ``tell`` is False)."""
        if tell:
            log.warning("record %s/%d of node %s can never be applied, acked and dropped: %s", record.stream,
                        record.seq, node_id, reason)
            await self._out_send.send(FrameError(f"record {record.stream}/{record.seq}: {reason}"))
        try:
            await write(self._shared.supervisor.ports["store"],
                        lambda conn: uplink_rows.claim(conn, node_id, record.stream, record.seq), small=True)
        except Exception:
            return self._unstored(node_id, record, "its seq not claimed")
        return await self._done_with(record, ack)

    async def _refuse_foreign(self, node_id: str, record: Record, reason: str, *, ack: bool = True) -> bool:
        """A record about a job that is not on this node: dropped like an invalid one, logged and
        told once a link (a hostile agent could send a million), counted always."""
        self.foreign_refused += 1
        first = self.foreign_refused == 1
        if first:
            log.warning("agent of node %s sent a record about another node's job, refused: %s (record %s/%d; "
                        "further ones on this connection are refused and counted, not logged)", node_id, reason,
                        record.stream, record.seq)
            await self._out_send.send(FrameError(
                f"record {record.stream}/{record.seq} refused: {reason}; a node writes only about its own jobs "
                "(further such records on this connection are refused without a word)"))
        return await self._ack_invalid(node_id, record, reason, ack=ack, tell=False)

    def _next_seq(self, stream: str) -> int:
        """The one seq ``stream`` may go on with: after what is stored and what a ``Skip`` passed over."""
        return max(self._acked.get(stream, 0), self._skipped.get(stream, 0)) + 1

    async def _refuse_jump(self, node_id: str, stream: str, seq: int, want: int) -> bool:
        """A seq past the stream's next one (``want``), unannounced: it would pass over records
        never sent (and a forged mark near 2**63 would have every later record dropped as a
        resend). Nothing of its frame is stored; the agent is told, and the connection closes."""
        reason = (f"seq jump on stream {stream!r}: got {seq}, the next is {want} (a stream's seqs go one after "
                  "another; seqs spent unsent are announced with a skip frame first); nothing of the frame stored")
        log.warning("agent of node %s: %s; closing its connection", node_id, reason)
        await self._out_send.send(FrameError(reason))
        self._closing = (CLOSE_POLICY, f"seq jump on stream {stream}: got {seq}, the next is {want}")
        return False

    async def _skip(self, node_id: str, skip: Skip) -> bool:
        """The agent spent seqs without sending them (its spool dropped them, or jumped after a
        power cut): the stream goes on after ``through``. At most ``MAX_SEQ_SKIP`` at once."""
        floor = self._next_seq(skip.stream) - 1
        if skip.through <= floor:
            return True  # passed already (a resend, or records stored since)
        if skip.through - floor > MAX_SEQ_SKIP:
            reason = (f"skip on stream {skip.stream!r} to {skip.through} passes over {skip.through - floor} seqs, "
                      f"more than {MAX_SEQ_SKIP} at once")
            log.warning("agent of node %s: %s; closing its connection", node_id, reason)
            await self._out_send.send(FrameError(reason))
            self._closing = (CLOSE_POLICY, f"skip on stream {skip.stream} too far")
            return False
        log.info("agent of node %s spent %s seqs %d..%d unsent: %s", node_id, skip.stream, floor + 1, skip.through,
                 skip.reason or "no reason given")
        self._skipped[skip.stream] = skip.through
        return True

    async def _require_own(self, node_id: str, attempts: Sequence[tuple[str, int]]) -> None:
        """A node reads only its own jobs' stored state (log offsets, TensorBoard cursors).

        Raises:
            ApiError: forbidden, naming the attempt that is another node's.
        """
        try:
            await access.readers(self._shared, "jobs").run(lambda conn: require_on_node(conn, node_id, attempts))
        except NotOnNode as exc:
            raise ApiError(ErrorCode.FORBIDDEN, f"{exc}; a node reads only about its own jobs") from None

    async def _answer(self, node_id: str, request: Request) -> Reply:
        try:
            body = REQUEST_BODIES.structure(request.body)
        except FieldInvalid as fault:
            return Reply(request.id, error=FrameFault(ErrorCode.BAD_REQUEST.value, f"bad request body: "
                                                                                  f"{_fault_text(fault)}"))
        link = self._link
        try:
            match body:
                case LogOffsets():
                    await self._require_own(node_id, body.attempts)
                    answer: Any = await link.log_offsets(body)
                case TbPoints():
                    try:
                        answer = await link.tb_points(node_id, body)
                    except NotOnNode as exc:
                        self.foreign_refused += 1
                        if self.foreign_refused == 1:
                            log.warning("agent of node %s sent TensorBoard points of another node's job, refused: "
                                        "%s (further ones are counted, not logged)", node_id, exc)
                        raise ApiError(ErrorCode.FORBIDDEN, f"{exc}; a node writes only about its own jobs") from None
                case TbCursors():
                    await self._require_own(node_id, [(body.job_id, body.attempt)])
                    answer = await link.tb_cursors(body)
                case SessionCall():
                    answer = await session_call(self._shared, body, node_id)
                case _:
                    return Reply(request.id, error=FrameFault(
                        ErrorCode.BAD_REQUEST.value, f"a {REQUEST_BODIES.tag_of(body)} request is the server's to "
                                                     "ask, not to answer"))
        except ApiError as exc:
            return Reply(request.id, error=FrameFault(exc.code.value, exc.message))
        return Reply(request.id, REPLY_BODIES.unstructure(answer))


# --- SDK calls forwarded by an agent (the same functions as gpuplaned/http/sessions_routes.py) ---
# Each is the call of a process on the agent's host, held to its own (confined_callers): the
# job the agent names, which must be on its node, or else that node's jobs' runs.

_ID = "([A-Za-z0-9_-]+)"
Handler = Callable[["ServerContext", tuple[str, ...], Any, "Caller"], Awaitable[tuple[int, Any]]]


async def _open(shared: ServerContext, _: tuple[str, ...], body: Any, caller: Caller) -> tuple[int, Any]:
    return 201, await sessions.open_session(shared, structure(body or {}, sessions.SessionCreate), caller)


async def _run_sessions(shared: ServerContext, path: tuple[str, ...], _: Any, caller: Caller) -> tuple[int, Any]:
    return 200, await sessions.list_run_sessions(shared, path[0])


async def _get(shared: ServerContext, path: tuple[str, ...], _: Any, caller: Caller) -> tuple[int, Any]:
    return 200, await sessions.get_session(shared, path[0])


async def _batch(shared: ServerContext, path: tuple[str, ...], body: Any, caller: Caller) -> tuple[int, Any]:
    return 200, await sessions.add_batch(shared, path[0], structure(body or {}, sessions.BatchCreate), caller)


async def _env(shared: ServerContext, path: tuple[str, ...], body: Any, caller: Caller) -> tuple[int, Any]:
    return 200, await sessions.add_env(shared, path[0], body or {}, caller)


async def _finish(shared: ServerContext, path: tuple[str, ...], body: Any, caller: Caller) -> tuple[int, Any]:
    return 200, await sessions.finish_session(shared, path[0], structure(body or {}, sessions.SessionFinish), caller)


async def _summary(shared: ServerContext, path: tuple[str, ...], _: Any, caller: Caller) -> tuple[int, Any]:
    return 200, RunSummaryReply(summary=await runs.get_summary(shared, path[0], caller))


SESSION_CALLS: tuple[tuple[str, re.Pattern[str], Handler], ...] = (
    ("POST", re.compile("/api/v1/sessions"), _open),
    ("GET", re.compile(f"/api/v1/runs/{_ID}/sessions"), _run_sessions),
    ("GET", re.compile(f"/api/v1/sessions/{_ID}"), _get),
    ("POST", re.compile(f"/api/v1/sessions/{_ID}/batches"), _batch),
    ("POST", re.compile(f"/api/v1/sessions/{_ID}/env"), _env),
    ("POST", re.compile(f"/api/v1/sessions/{_ID}/finish"), _finish),
    ("GET", re.compile(f"/api/v1/runs/{_ID}/summary"), _summary),
)


async def session_call(shared: ServerContext, call: SessionCall, node_id: str) -> SessionReply:
    """Answer an SDK call the agent of ``node_id`` took on its socket, as the HTTP route would
    (errors included), held to the job whose process made it, or to the node's jobs."""
    try:
        caller = await _relayed_caller(shared, call.job_id, node_id)
        for method, pattern, handler in SESSION_CALLS:
            match = pattern.fullmatch(call.path)
            if match is not None and method == call.method:
                status, value = await handler(shared, match.groups(), call.body, caller)
                return SessionReply(status, unstructure(value))
        raise ApiError(ErrorCode.NOT_FOUND, f"no such endpoint: {call.method} {call.path}")
    except ApiError as exc:
        return SessionReply(exc.code.http_status, exc.body())


async def _relayed_caller(shared: ServerContext, job_id: str | None, node_id: str) -> Caller:
    """Raises:
        ApiError: forbidden, when the agent names a job of another node (or none at all).
    """
    if job_id is not None:
        on = await access.readers(shared, "jobs").run(lambda conn: run_owners.job_node(conn, job_id))
        if on != node_id:
            raise ApiError(ErrorCode.FORBIDDEN, f"job {job_id} is not on node {node_id}: a node's processes report "
                           "only to its own jobs", {"job_id": job_id})
    return confined_callers.node_caller(node_id, job_id)


async def _tidy_folders(shared: ServerContext, node_id: str) -> None:
    """Removed jobs' folders that wait for this node's agent (``folder_removal``), now it is here."""
    try:
        await folder_removal.run(shared, {node_id})
    except Exception:  # noqa: BLE001 - tidying must never cut the link; asked again at the next hello
        log.exception("agent of node %s: removing removed jobs' folders failed", node_id)


# --- the liveness sweep (the scheduler's tick) -------------------------------------------------------

async def sweep(shared: ServerContext) -> None:
    """Judge every remote node's link: LOST after silence, requeue unacknowledged dispatches."""
    if shared.readers is None:
        return
    cfg = shared.config.uplink
    registry = shared.nodes
    nodes = await shared.readers.run(uplink_rows.remote_nodes)
    now = now_ms()
    # Wall clock on purpose: "last heard" outlives this process (the column), and the agent's
    # silence is judged against it after a server restart too.
    silent_before = now - int(MISSED_BEATS * cfg.heartbeat_s * 1000)
    connected = registry.connected()
    for node in nodes:
        if node.node_id in connected:
            await _requeue_unacked(shared, node.node_id, node.name, now - int(cfg.dispatch_ack_s * 1000),
                                   cfg.dispatch_ack_s)
            continue
        heard = max(node.last_heartbeat_at or 0, registry.last_heard(node.node_id) or 0)
        if node.status == "ONLINE" and heard < silent_before:
            await _lose(shared, node.node_id, node.name, heard, silent_before)


async def _lose(shared: ServerContext, node_id: str, name: str, heard: int, silent_before: int) -> None:
    registry = shared.nodes

    def apply(conn: Any) -> EventRow | None:
        if node_id in registry.connected():  # its hello came in meanwhile
            return None
        if heard:
            node_rows.heard_from(conn, node_id, heard)
        if not node_rows.mark_offline(conn, node_id, silent_before):
            return None
        now = now_ms()
        lost = []
        for job_id, attempt in job_rows.active_on_node(conn, node_id):
            report = JobStatus(job_id, attempt, NodeReport.LOST.value, failure_reason="LOST",
                               message=f"node {name}'s agent stopped answering", at_ms=now)
            if job_rows.apply_status(conn, node_id, report, now).applied:
                lost.append(job_id)
        silent_s = (now - heard) / 1000 if heard else math.inf
        event = EventRow(new_id("ev"), now, AGENT_DISCONNECTED, "warning", node_id, None, None, None,
                         f"the agent of node {name} is silent ({silent_s:.0f} s): node OFFLINE, "
                         f"{len(lost)} job(s) LOST; they keep running there and are reconciled when it is back",
                         {"jobs": lost, "last_heard_ms": heard or None})
        event_rows.insert_events(conn, [event])
        return event

    event = await write(shared.supervisor.ports["store"], apply, small=True)
    if event is not None:
        log.warning("%s", event.message)
        shared.event_feed.publish(event)


async def _requeue_unacked(shared: ServerContext, node_id: str, name: str, before_ms: int, ack_s: float) -> None:
    readers = shared.readers
    assert readers is not None
    stale = await readers.run(lambda conn: job_rows.unacked_dispatches(conn, node_id, before_ms))
    for job_id, attempt, tries in stale:
        message = f"node {name} did not start the dispatch within {ack_s:g} s"
        if tries < MAX_DISPATCH_REQUEUES:
            status = JobStatus(job_id, attempt, NodeReport.REQUEUE.value, failure_reason=job_rows.DISPATCH_TIMEOUT,
                               message=message)
            outcome = await write(shared.supervisor.ports["store"],
                                  lambda conn, s=status: job_rows.apply_status(conn, node_id, s, now_ms()), small=True)
            if outcome.applied:
                log.warning("%s: job %s attempt %d back to the queue (%d of %d)", message, job_id, attempt,
                            tries + 1, MAX_DISPATCH_REQUEUES)
        else:
            final = f"{message}, after {MAX_DISPATCH_REQUEUES} times back in the queue: given up"
            def fail(conn: Any, job_id: str = job_id, attempt: int = attempt, final: str = final) -> EventRow | None:
                now = now_ms()
                run_id = job_rows.fail_dispatch(conn, job_id, attempt, final, now)
                if run_id is None:
                    return None
                status = JobStatus(job_id, attempt, NodeReport.FAILED.value, failure_reason=job_rows.DISPATCH_TIMEOUT,
                                   message=final, at_ms=now)
                event = job_failure_row(node_id, status, run_id, False, now)
                event_rows.insert_events(conn, [event])
                return event

            event = await write(shared.supervisor.ports["store"], fail, small=True)
            if event is None:
                continue
            log.warning("job %s: %s", job_id, final)
            shared.event_feed.publish(event)
        try:  # should the dispatch arrive late after all, the agent must not run that attempt
            await shared.nodes.send(node_id, Cancel(job_id, attempt))
        except NodeUnavailable:
            pass
    if stale:
        wake_scheduler(shared)
