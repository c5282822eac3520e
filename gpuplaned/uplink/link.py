"""``UplinkNodeLink``: the node link of role agent (``gpuplaned.node_link.NodeLink``), over the uplink.

The node-side actors call it exactly as they call the in-memory link of role all; what
travels is decided here, by kind of message:

- **Records** (``report``, ``metrics``, ``events``, ``log_lines``, ``checkpoints``): appended
  to the spool (``gpuplaned.uplink.spool``) with the next seq of their stream, and the
  uplink actor's sender is woken. These calls never raise: the spool is durable, and what
  it holds reaches the server once the link is up, exactly once (the server dedupes by seq).
- **Snapshots**: only the latest matters, so one is sent only while connected and dropped
  otherwise (the monitor sends the next one in ~2 s).
- **Requests** (``log_offsets``, ``tb_points``, ``tb_cursors``, the agent app's SDK calls):
  sent over the live connection, and the caller waits for the reply. While the link is
  down a request waits up to ``REQUEST_WAIT_S`` for it, then raises ``LinkDown``; a
  connection lost under a request fails it with ``LinkDown`` too. The TensorBoard tailer
  reads again from its stored cursors after a raise; the logs actor cannot do without its
  offsets, so ``log_offsets`` waits for the link instead of raising (its files keep
  everything meanwhile; the tailer goes on where it stopped).
- **Server to node** (``Dispatch``, ``Cancel``, ``LogFollow``): the uplink actor hands them
  to the inboxes given with ``hello`` and ``follow_logs``.

The uplink actor (``actors/uplink.py``) owns the connection and tells this object of it:
``attach`` once the server answered a hello (the first ``HelloOk`` answers the runner's
``hello``; each later one, after a reconnection, reaches the runner as ``Reconcile``),
``detach`` when the connection ends.
"""

from __future__ import annotations

import collections
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import trio

from gpuplaned.config import Config
from gpuplaned.node_link import Reconcile
from gpuplaned.protocol.agent import (
    FRAMES,
    RECORD_BODIES,
    REPLY_BODIES,
    REQUEST_BODIES,
    STREAM_OF,
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
    NodeEvents,
    NodeSnapshot,
    SweepThrottle,
    SysMetrics,
)
from gpuplaned.protocol.converter import FieldInvalid
from gpuplaned.protocol.tb_frames import TbCursors, TbPoints, TbStored
from gpuplaned.protocol.uplink_frames import Goodbye, Reply, SessionCall, SessionReply

__all__ = ["LinkDown", "LinkRefused", "LiveTail", "TokenError", "UplinkContext", "UplinkNodeLink", "agent_token"]

log = logging.getLogger("gpuplaned.uplink")

REQUEST_WAIT_S = 10.0  # how long a request waits for a link that is down
TAIL_MAX = 10_000  # records a session's sender may lag behind the appends before it re-reads the spool
OUTBOX_SIZE = 256  # frames queued for the connection's writer (requests, replies, snapshots, goodbye)


class LinkDown(Exception):
    """The server cannot be reached now (no connection, or it was lost under the request)."""


class LinkRefused(Exception):
    """The server answered a request with an error (``FrameFault``)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class TokenError(Exception):
    """No usable agent token: the daemon cannot run as an agent (exit 2)."""


def agent_token(cfg: Config, env: Mapping[str, str]) -> str:
    """The agent's token: ``GPUPLANE_TOKEN``, else the contents of ``[uplink] token_file``.

    Raises:
        TokenError: neither is set, or the file cannot be read or is empty.
    """
    token = env.get("GPUPLANE_TOKEN", "").strip()
    if token:
        return token
    path = cfg.uplink.token_file
    if path is None:
        raise TokenError("role agent needs an agent token: set GPUPLANE_TOKEN or [uplink] token_file "
                         "(make one on the server with `gpuplanectl token create NAME --scope agent`)")
    try:
        text = path.expanduser().read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise TokenError(f"cannot read the agent token file {path}: {getattr(exc, 'strerror', None) or exc}") from None
    if not text:
        raise TokenError(f"the agent token file {path} is empty")
    return text


class _Waiter:
    """One answer awaited: set once, with a value or an error."""

    def __init__(self) -> None:
        self._event = trio.Event()
        self._value: Any = None
        self._error: BaseException | None = None

    def set(self, value: Any) -> None:
        if not self._event.is_set():
            self._value = value
            self._event.set()

    def fail(self, error: BaseException) -> None:
        if not self._event.is_set():
            self._error = error
            self._event.set()

    async def wait(self) -> Any:
        await self._event.wait()
        if self._error is not None:
            raise self._error
        return self._value


@attrs.frozen
class LinkStatus:
    """What the agent's control app shows of the link."""

    state: str  # waiting (no hello from the runner yet) | connecting | connected | refused
    server: str
    node_id: str | None
    connected_since_ms: int | None
    last_error: str | None
    connections: int  # sessions begun since the daemon started
    backlog_records: int
    backlog_bytes: int
    backlog_oldest_ms: int | None
    clock_skew_ms: int | None  # the server's clock minus ours, from the last heartbeat answer


class LiveTail:
    """Records appended while a session is up, in append order, for its sender: reading them
    back from the spool's files at every append would cost a scan of the live segment each.
    Bounded: past ``TAIL_MAX`` it is emptied and ``overflowed`` set, and the sender reads
    the spool again from where it is (the rare path: a server slower than the node)."""

    def __init__(self) -> None:
        self.records: collections.deque[tuple[str, int, dict[str, Any]]] = collections.deque()
        self.overflowed = False
        self.wake = trio.Event()

    def add(self, stream: str, seq: int, body: dict[str, Any]) -> None:
        if len(self.records) >= TAIL_MAX:
            self.records.clear()
            self.overflowed = True
        elif not self.overflowed:
            self.records.append((stream, seq, body))
        self.wake.set()


class UplinkNodeLink:
    """The server, as the node side of a remote agent sees it (see the module docstring).

    ``spool`` is a ``gpuplaned.uplink.spool.Spool``, opened by the daemon for its whole life
    (an uplink actor's restart keeps it, and what it holds).
    """

    def __init__(self, spool: Any, server: str) -> None:
        self.spool = spool
        self.server = server
        self.node_id: str | None = None
        self.state = "waiting"
        self.last_error: str | None = None
        self.refusal: str | None = None  # why the server refused this agent for good (its token)
        self.connections = 0
        self.connected_since_ms: int | None = None
        self.clock_skew_ms: int | None = None
        self.hello_message: Hello | None = None
        self.hello_known = trio.Event()  # the runner said hello: the uplink may dial
        self.redial = trio.Event()  # the runner said hello again: a fresh session lists its jobs
        self._runner_inbox: trio.MemorySendChannel[Any] | None = None
        self._logs_inbox: trio.MemorySendChannel[LogFollow] | None = None
        self._hello_waiter: _Waiter | None = None
        # The live connection's frames: unstructured, or (a str) JSON text already.
        self._outbox: trio.MemorySendChannel[dict[str, Any] | str] | None = None
        self._connected = trio.Event()
        self._pending: dict[int, _Waiter] = {}
        self._next_id = 1
        self._tail: LiveTail | None = None
        self.records_spooled = 0

    # -- NodeLink: records ------------------------------------------------------------------

    async def report(self, node_id: str, status: JobStatus) -> None:
        self.record(status)

    def report_soon(self, node_id: str, status: JobStatus) -> bool:
        self.record(status)  # spooled in order already; nothing is left to wait for
        return True

    async def metrics(self, node_id: str, batch: SysMetrics) -> None:
        self.record(batch)

    async def events(self, node_id: str, events: Sequence[NodeEvent]) -> None:
        self.record(NodeEvents(tuple(events)))

    async def log_lines(self, lines: LogLines) -> None:
        self.record(lines)

    async def checkpoints(self, node_id: str, found: CheckpointsFound) -> None:
        self.record(found)

    def record(self, body: JobStatus | SysMetrics | NodeEvents | LogLines | CheckpointsFound) -> None:
        """Spool ``body`` on its stream and wake the sender. Never raises: a spool that cannot
        take it (a full disk) is logged, and the node goes on."""
        stream = STREAM_OF[type(body)]
        data = RECORD_BODIES.unstructure(body)
        try:
            seq = self.spool.append(stream, data)
        except Exception:  # noqa: BLE001 - a node message must never crash its actor
            log.exception("could not spool a %s record; it is lost", RECORD_BODIES.tag_of(body))
            return
        self.records_spooled += 1
        tail = self._tail
        if tail is not None:
            tail.add(stream, seq, data)

    def record_event(self, event: NodeEvent) -> None:
        """A node event of the link's own (``SPOOL_DROPPED``), on the events stream."""
        self.record(NodeEvents((event,)))

    def open_tail(self) -> LiveTail:
        """What is appended from now on, for a session's sender (which replays the spool
        first, then follows this); one at a time, replaced at each session."""
        self._tail = LiveTail()
        return self._tail

    def close_tail(self, tail: LiveTail) -> None:
        if self._tail is tail:
            self._tail = None

    # -- NodeLink: unsequenced ----------------------------------------------------------------

    async def snapshot(self, node_id: str, snapshot: NodeSnapshot) -> None:
        self.send_nowait(FRAMES.unstructure(snapshot))  # dropped while down: only the latest matters

    def goodbye(self, node_id: str) -> None:
        self._runner_inbox = None  # no dispatch reaches a runner that has gone
        self.send_nowait(FRAMES.unstructure(Goodbye()))

    def send_nowait(self, frame: dict[str, Any]) -> bool:
        """Queue ``frame`` for the live connection; False (dropped) while the link is down or full."""
        if self._outbox is None:
            return False
        try:
            self._outbox.send_nowait(frame)
        except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
            return False
        return True

    # -- NodeLink: hello, follow ----------------------------------------------------------------

    async def hello(self, hello: Hello, inbox: trio.MemorySendChannel[Dispatch | Cancel]) -> HelloOk:
        """Remember the runner's hello and inbox; the answer is the next session's ``HelloOk``
        (a runner back from a restart gets a fresh session, whose hello lists its jobs)."""
        self.hello_message = hello
        self._runner_inbox = inbox
        waiter = self._hello_waiter = _Waiter()
        self.hello_known.set()
        if self._outbox is not None:
            self.redial.set()
        try:
            ok: HelloOk = await waiter.wait()
        finally:
            if self._hello_waiter is waiter:
                self._hello_waiter = None
        return ok

    def follow_logs(self, inbox: trio.MemorySendChannel[LogFollow]) -> None:
        self._logs_inbox = inbox

    # -- NodeLink: requests ---------------------------------------------------------------------

    async def log_offsets(self, request: LogOffsets) -> LogOffsets:
        """The stored tails' ends; waits for the link however long it is down (the logs
        actor has no way on without them)."""
        while True:
            try:
                answer = await self.ask(request)
            except LinkDown as exc:
                log.info("log offsets of %d attempt(s) wait for the link: %s", len(request.attempts), exc)
                continue
            except LinkRefused as exc:
                # Read from the files' start: the server keeps a tail's lines by offset, once.
                log.warning("the server could not say where stored log tails end (%s); re-reading the files", exc)
                return LogOffsets(request.attempts)
            if not isinstance(answer, LogOffsets):
                log.warning("the server answered log offsets with a %s; re-reading the files", type(answer).__name__)
                return LogOffsets(request.attempts)
            return answer

    async def tb_points(self, node_id: str, points: TbPoints) -> TbStored:
        return self._expect(await self.ask(points), TbStored)

    async def tb_cursors(self, request: TbCursors) -> TbCursors:
        return self._expect(await self.ask(request), TbCursors)

    async def session_call(self, call: SessionCall, raw: bytes | None = None) -> SessionReply:
        """An SDK call forwarded to the server; ``LinkDown`` at once while the link is down.
        Its body goes out as it came: ``raw``, its JSON text (parsed once, to check it), spliced
        in, else the parsed body as it is (the converter's walk over a batch of 10,000 points
        would cost three times its decoding, its encoding once more)."""
        wire: dict[str, Any] | str = {"type": REQUEST_BODIES.tag_of(call), "method": call.method, "path": call.path,
                                      **({"job_id": call.job_id} if call.job_id is not None else {}),
                                      "body": call.body}  # last: spliced in below
        if raw is not None and call.body is not None:
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:  # JSON in another encoding: sent re-encoded
                pass
            else:
                head = json.dumps({**wire, "body": None}, separators=(",", ":"))
                wire = head[:-len("null}")] + text + "}"
        return self._expect(await self.ask(call, wait_s=0.0, wire=wire), SessionReply)

    async def ask(self, body: Any, *, wait_s: float = REQUEST_WAIT_S, wire: dict[str, Any] | str | None = None) -> Any:
        """Send ``body`` (one of ``REQUEST_BODIES``; ``wire``: it unstructured already, or its
        JSON text) as a request and return the reply's body.

        Raises:
            LinkDown: no connection within ``wait_s``, or it ended before the reply.
            LinkRefused: the server answered with an error, or with a reply that cannot be read.
        """
        outbox = await self._wait_connected(wait_s)
        request_id = self._next_id
        self._next_id += 1
        waiter = self._pending[request_id] = _Waiter()
        # The frame as FRAMES.unstructure(Request(...)) makes it, without a second walk of the body.
        frame: dict[str, Any] | str
        if isinstance(wire, str):
            frame = f'{{"type":"request","id":{request_id},"body":{wire}}}'
        else:
            frame = {"type": "request", "id": request_id,
                     "body": wire if wire is not None else REQUEST_BODIES.unstructure(body)}
        try:
            try:
                await outbox.send(frame)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                raise LinkDown("the connection to the server ended") from None
            reply: Reply = await waiter.wait()
        finally:
            self._pending.pop(request_id, None)
        if reply.error is not None:
            raise LinkRefused(reply.error.code, reply.error.message)
        try:
            return REPLY_BODIES.structure(reply.body)
        except FieldInvalid as fault:
            raise LinkRefused("bad_reply", f"unreadable reply: {fault.field or 'body'}: {fault.message}") from None

    @staticmethod
    def _expect(answer: Any, kind: type) -> Any:
        if not isinstance(answer, kind):
            raise LinkRefused("bad_reply", f"expected a {kind.__name__} reply, got a {type(answer).__name__}")
        return answer

    async def _wait_connected(self, wait_s: float) -> trio.MemorySendChannel[dict[str, Any] | str]:
        if self._outbox is None and wait_s > 0:
            with trio.move_on_after(wait_s):
                await self._connected.wait()
        if self._outbox is None:
            raise LinkDown(f"the server {self.server} is not connected ({self.last_error or self.state})")
        return self._outbox

    # -- the uplink actor's side -------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self._outbox is not None

    def attach(self, outbox: trio.MemorySendChannel[dict[str, Any] | str], ok: HelloOk) -> None:
        """A session is up: requests and unsequenced frames go to ``outbox``; the runner's
        pending hello is answered with ``ok``, else (a reconnection) the runner reconciles."""
        self.node_id = ok.node_id
        self._outbox = outbox
        self.state = "connected"
        self.last_error = None
        self.connections += 1
        self.connected_since_ms = int(time.time() * 1000)
        self._connected.set()
        waiter = self._hello_waiter
        if waiter is not None:
            self._hello_waiter = None
            waiter.set(ok)
        elif self._runner_inbox is not None:
            try:
                self._runner_inbox.send_nowait(Reconcile(ok.active))
            except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
                log.warning("the runner is not keeping up; the reconciliation of %d job(s) is skipped",
                            len(ok.active))

    def detach(self, reason: str) -> None:
        """The session ended: requests in flight fail with ``LinkDown``."""
        if self._outbox is not None:
            self._outbox.close()
        self._outbox = None
        self.connected_since_ms = None
        if self.refusal is None:
            self.state = "connecting"
            self.last_error = reason
        if self._connected.is_set():
            self._connected = trio.Event()
        pending, self._pending = self._pending, {}
        for waiter in pending.values():
            waiter.fail(LinkDown(f"the connection to the server ended ({reason})"))

    def refused(self, reason: str) -> None:
        self.state = "refused"
        self.refusal = self.last_error = reason

    def on_reply(self, reply: Reply) -> None:
        waiter = self._pending.get(reply.id)
        if waiter is None:
            log.warning("a reply to request %d, which nobody waits for (any more)", reply.id)
            return
        waiter.set(reply)

    def to_runner(self, message: Dispatch | Cancel | SweepThrottle) -> None:
        self._deliver(self._runner_inbox, message, "runner")

    def to_logs(self, message: LogFollow) -> None:
        self._deliver(self._logs_inbox, message, "logs actor")

    @staticmethod
    def _deliver(inbox: trio.MemorySendChannel[Any] | None, message: Any, whom: str) -> None:
        if inbox is None:
            log.warning("no %s to take %r; dropped (the server sends it again or times it out)", whom, message)
            return
        try:
            inbox.send_nowait(message)
        except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
            log.warning("the %s is not keeping up; %r dropped (the server sends it again or times it out)",
                        whom, message)

    def status(self) -> LinkStatus:
        try:
            backlog = self.spool.backlog()
            records, size, oldest = backlog.records, backlog.bytes, backlog.oldest_ms
        except Exception:  # noqa: BLE001 - a status page must answer
            records, size, oldest = 0, 0, None
        return LinkStatus(self.state, self.server, self.node_id, self.connected_since_ms, self.last_error,
                          self.connections, records, size, oldest, self.clock_skew_ms)

    def close(self) -> None:
        """At the daemon's exit: what is spooled reaches the disk (the spool's own close)."""
        self.detach("the daemon stops")
        try:
            self.spool.close()
        except Exception:  # noqa: BLE001 - shutting down: say it, go on
            log.exception("could not close the uplink spool")


@attrs.define
class UplinkContext:
    """What the uplink actor gets as ``ctx.shared``: the link it serves, and the daemon's exit
    for a permanent refusal (``fail(reason, exit_status)``)."""

    config: Config
    link: UplinkNodeLink
    fail: Callable[[str, int], None]
