"""The uplink actor: a remote agent's WebSocket to its server, and what travels on it.

Owns: the connection to ``<server>/api/v1/agent/ws`` (dialled out: no inbound port), one
session at a time, and the spool's timers (fsync for policy "interval", age trimming, the
``SPOOL_DROPPED`` event). The spool itself and the link the node actors hold
(``gpuplaned.uplink.link.UplinkNodeLink``) belong to the daemon, so a restart of this actor
loses nothing.
Inputs: the runner's hello (through the link: the session starts once it is known); the
server's frames: ``ack`` (the spool trims), ``reply`` (a node actor's request is answered),
``request`` (``log_read``: a part of a job's log file, answered ``log_data``; ``ckpt_read``,
``ckpt_remove``, ``job_folders_remove``), ``dispatch`` and
``cancel`` (to the runner), ``log_follow`` (to the logs actor), ``heartbeat_ok``, ``ping``.
Outputs: ``hello`` (with this agent's id from ``<home>/uplink/agent-id`` and its clock); the
spooled records in seq order per stream, in ``records`` batches (consecutive records of one
stream, up to ``MAX_BATCH_RECORDS`` / ``MAX_BATCH_BYTES``), first the replay of what is
unacknowledged then what is appended meanwhile, all at most ``[uplink] replay_records_per_s``
and ``replay_bytes_per_s`` (the replay's bodies go as the spool holds them, unparsed); the
link's requests and snapshots; a ``heartbeat`` every ``[uplink] heartbeat_s`` (or the
server's, if shorter) with the spool's backlog. After a reconnection the runner gets
``Reconcile(hello_ok.active)``.
Restart: permanent. Network trouble never crashes it: it redials with exponential backoff (0.5 s
.. ``[uplink] reconnect_max_s``, 30 s by default, full jitter); a connection on which the server
has said nothing for 3 x the heartbeat interval is closed and redialled, and one closed or reset
before the upgrade's answer (a proxy with its backend down) fails the dial at once
(``gpuplaned.uplink.dial``). A refused agent token
(HTTP 401/403 at the handshake, or a ``hello_err`` about the token) is permanent: the daemon
exits with status 2 and a message naming the token problem. The token is sent only in the
``Authorization`` header, never logged.
Ready: at once (the spool is open, the connection comes when it can); ``started()`` passes
an ``UplinkHandle``.
Stop: graceful; the frames queued (the runner's goodbye among them) are sent, the
connection closed, the spool synced.
"""

from __future__ import annotations

import base64
import json
import logging
import math
import os
import random
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import attrs
import trio
from trio_websocket import ConnectionClosed, ConnectionRejected, HandshakeError, WebSocketConnection

from gpuplaned import job_folders
from gpuplaned.checkpoints import on_disk
from gpuplaned.home import attempt_dir
from gpuplaned.launching.job_files import EXIT_FILE
from gpuplaned.protocol import bounded_json
from gpuplaned.protocol.agent import (
    FRAMES,
    REPLY_BODIES,
    REQUEST_BODIES,
    Cancel,
    Dispatch,
    FrameError,
    HelloErr,
    HelloOk,
    LogFollow,
    NodeEvent,
    Ping,
    Pong,
    SweepThrottle,
)
from gpuplaned.protocol.checkpoint_ops import CheckpointRead, CheckpointRemove
from gpuplaned.protocol.converter import FieldInvalid
from gpuplaned.protocol.errors import EXIT_USAGE
from gpuplaned.protocol.job_folder_ops import JobFoldersRemove
from gpuplaned.protocol.uplink_frames import (
    MAX_BATCH_BYTES,
    MAX_BATCH_RECORDS,
    Ack,
    FrameFault,
    Heartbeat,
    HeartbeatOk,
    LogData,
    LogRead,
    Reply,
    Request,
    Skip,
)
from gpuplaned.runtime.context import ActorContext, StopSignal
from gpuplaned.uplink.dial import open_agent_ws
from gpuplaned.uplink.link import LiveTail, TokenError, UplinkContext, UplinkNodeLink, agent_token

log = logging.getLogger("gpuplaned.uplink")

WS_PATH = "/api/v1/agent/ws"
MAX_FRAME = 4 << 20  # the contract's bound on one frame, either way
CONNECT_TIMEOUT_S = 10.0
HELLO_TIMEOUT_S = 10.0
CLOSE_TIMEOUT_S = 2.0
BACKOFF_MIN_S = 0.5
BACKOFF_MAX_S = 30.0
STALL_BEATS = 3  # heartbeat intervals without a frame from the server: the connection is dead
TRIM_EVERY_S = 10.0  # the spool's age bound is enforced at least this often
SPOOL_DROPPED = "SPOOL_DROPPED"
AGENT_ID_FILE = "agent-id"


@attrs.frozen
class UplinkStats:
    state: str
    node_id: str | None
    connections: int
    records_spooled: int
    records_sent: int
    acks: int
    backlog_records: int
    backlog_bytes: int


@attrs.define
class UplinkHandle:
    link: UplinkNodeLink
    records_sent: int = 0
    acks: int = 0

    def statistics(self) -> UplinkStats:
        status = self.link.status()
        return UplinkStats(status.state, status.node_id, status.connections, self.link.records_spooled,
                           self.records_sent, self.acks, status.backlog_records, status.backlog_bytes)


# -- the pure parts -------------------------------------------------------------------------


def ws_url(server: str) -> str:
    """``http[s]://host[:port][/prefix]`` -> ``ws[s]://host[:port][/prefix]/api/v1/agent/ws``."""
    parts = urlsplit(server)
    scheme = {"http": "ws", "https": "wss", "ws": "ws", "wss": "wss"}.get(parts.scheme)
    if scheme is None or not parts.hostname:
        raise ValueError(f"the server URL {server!r} is not http(s)://HOST[:PORT]")
    return urlunsplit((scheme, parts.netloc, parts.path.rstrip("/") + WS_PATH, "", ""))


def backoff_delay(failures: int, *, low: float = BACKOFF_MIN_S, high: float = BACKOFF_MAX_S,
                  rng: random.Random | None = None) -> float:
    """Full jitter: uniform in [0, min(high, low * 2**failures)], at least a tenth of ``low``
    (a server that refuses at once is not hammered)."""
    ceiling = min(high, low * 2 ** min(failures, 30))
    return max(low / 10, (rng or random).uniform(0, ceiling))


class Pacer:
    """At most ``rate`` records and ``byte_rate`` bytes a second, with at most a second's burst
    banked while idle. ``delay(now, n, size)``: how long to wait after sending ``n`` more
    records of ``size`` bytes."""

    def __init__(self, rate: float, byte_rate: float = math.inf) -> None:
        self.rate = rate
        self.byte_rate = byte_rate
        self.start: float | None = None
        self.count = 0
        self.bytes = 0

    def _due(self) -> float:
        assert self.start is not None
        return self.start + max(self.count / self.rate, self.bytes / self.byte_rate)

    def delay(self, now: float, n: int = 1, size: int = 0) -> float:
        if self.start is None or now - self._due() > 1.0:
            self.start, self.count, self.bytes = now, 0, 0
        self.count += n
        self.bytes += size
        return max(0.0, self._due() - now)


SKIP_REASON = "the spool dropped them (full or too old), or its counters jumped after a power cut"


def consecutive_runs(seqs: list[int], bodies: list[bytes]) -> list[tuple[list[int], list[bytes]]]:
    """A batch cut where its seqs are not consecutive (mostly it is one run: checked at once)."""
    if seqs[-1] - seqs[0] == len(seqs) - 1:
        return [(seqs, bodies)]
    cuts = [i for i in range(1, len(seqs)) if seqs[i] != seqs[i - 1] + 1]
    bounds = [0, *cuts, len(seqs)]
    return [(seqs[a:b], bodies[a:b]) for a, b in zip(bounds, bounds[1:])]


def records_frame(stream: str, seqs: list[int], bodies: list[bytes]) -> str:
    """A ``records`` frame's text around bodies that are JSON text already (the spool's)."""
    return (f'{{"type":"records","stream":"{stream}","seqs":[{",".join(map(str, seqs))}],"bodies":['
            + b",".join(bodies).decode("ascii") + "]}")


class _Permanent(Exception):
    """The server refused this agent for good (its token): the daemon exits."""


class _Retry(Exception):
    """This session is over; dial again after the backoff."""


def is_token_refusal(message: str) -> bool:
    return "token" in message.lower()


def load_agent_id(directory: Path) -> str:
    """This agent's stable id (a UUID made once, kept in ``<home>/uplink/agent-id``)."""
    path = directory / AGENT_ID_FILE
    try:
        text = path.read_text(encoding="ascii").strip()
        uuid.UUID(text)
        return text
    except (OSError, ValueError):
        pass
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    agent_id = str(uuid.uuid4())
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, agent_id.encode() + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return agent_id


def read_log(home: Path, request: LogRead) -> LogData:
    """Up to ``request.limit`` bytes of a job attempt's log from ``request.offset`` (on a thread).

    Raises:
        FileNotFoundError: no such attempt or log on this node.
    """
    job_dir = attempt_dir(home, request.job_id, request.attempt)
    path = job_dir / f"{request.stream}.log"
    ended = (job_dir / EXIT_FILE).exists()  # before the read: a file seen ended has all of it
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        f.seek(request.offset)
        raw = f.read(request.limit)
    return LogData(request.job_id, request.attempt, request.stream, request.offset,
                   base64.b64encode(raw).decode("ascii"), size, ended)


def _dumps(frame: dict[str, Any]) -> str:
    return json.dumps(frame, separators=(",", ":"), allow_nan=False)


def _now_ms() -> int:
    return int(time.time() * 1000)


# -- the actor ------------------------------------------------------------------------------


async def run(ctx: ActorContext[UplinkContext], *, task_status: trio.TaskStatus[UplinkHandle] = trio.TASK_STATUS_IGNORED) -> None:
    shared = ctx.shared
    link = shared.link
    cfg = shared.config
    handle = UplinkHandle(link)
    try:
        token = agent_token(cfg, os.environ)
        url = ws_url(link.server)
    except (TokenError, ValueError) as exc:
        link.refused(str(exc))
        shared.fail(str(exc), EXIT_USAGE)
        task_status.started(handle)
        return
    agent_id = await trio.to_thread.run_sync(load_agent_id, cfg.home / "uplink")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_keep_spool, link, cfg.uplink)
        task_status.started(handle)
        with trio.CancelScope() as dialling:
            nursery.start_soon(_cancel_on, ctx.stop_requested, dialling)
            try:
                await _dial_forever(ctx, link, url, token, agent_id, handle)
            except _Permanent as exc:
                link.refused(str(exc))
                log.error("%s", exc)
                shared.fail(str(exc), EXIT_USAGE)
        nursery.cancel_scope.cancel()
    link.spool.sync()


async def _cancel_on(event: trio.Event | StopSignal, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


async def _dial_forever(ctx: ActorContext[UplinkContext], link: UplinkNodeLink, url: str, token: str,
                        agent_id: str, handle: UplinkHandle) -> None:
    cfg = ctx.shared.config.uplink
    ceiling = cfg.reconnect_max_s
    failures = 0
    while True:
        await link.hello_known.wait()
        link.redial = trio.Event()
        link.state = "connecting"
        reason = "redialled for the runner's new hello"
        try:
            await _session(ctx, link, url, token, agent_id, handle)
            failures = 0
        except _Retry as exc:
            reason = str(exc)
        except ConnectionRejected as exc:
            if exc.status_code in (401, 403):
                raise _Permanent(f"the server {link.server} refused the agent token (HTTP {exc.status_code}"
                                 f"{': ' + _rejection_message(exc) if _rejection_message(exc) else ''}); "
                                 "check GPUPLANE_TOKEN or [uplink] token_file: it must be a live token "
                                 "with the agent scope") from None
            reason = f"the server refused the WebSocket handshake with HTTP {exc.status_code}"
        except (HandshakeError, ConnectionClosed, OSError, trio.BrokenResourceError) as exc:
            reason = f"cannot reach {link.server}: {_describe(exc)}"
        finally:
            link.detach(reason)
        if link.refusal is not None:  # said by the server, whatever closing the connection raised after
            raise _Permanent(link.refusal)
        if link.redial.is_set():
            continue
        delay = backoff_delay(failures, high=ceiling)
        failures += 1
        log.warning("uplink to %s down (%s); dialling again in %.1f s", link.server, reason, delay)
        await trio.sleep(delay)


def _rejection_message(exc: ConnectionRejected) -> str:
    try:
        body = json.loads(exc.body or b"")
        return str(body["error"]["message"])[:200]
    except (ValueError, KeyError, TypeError):
        return ""


def _describe(exc: BaseException) -> str:
    cause = exc.__cause__ or exc.__context__
    text = str(exc) or (str(cause) if cause is not None else "") or type(exc).__name__
    return text


class _Session:
    """One connection's shared state between its tasks."""

    def __init__(self, ws: WebSocketConnection, link: UplinkNodeLink, interval: float) -> None:
        self.ws = ws
        self.link = link
        self.interval = interval
        self.last_heard = trio.current_time()
        self.ended: str | None = None
        self.scope: trio.CancelScope | None = None

    def end(self, reason: str) -> None:
        if self.ended is None:
            self.ended = reason
        if self.scope is not None:
            self.scope.cancel()

    async def send(self, frame: dict[str, Any]) -> None:
        await self.ws.send_message(_dumps(frame))


async def _session(ctx: ActorContext[UplinkContext], link: UplinkNodeLink, url: str, token: str, agent_id: str,
                   handle: UplinkHandle) -> None:
    """One connection: hello, then records, requests and heartbeats until it ends (``_Retry``)
    or the runner says hello again (returns)."""
    cfg = ctx.shared.config
    headers = [(b"Authorization", f"Bearer {token}".encode())]
    async with open_agent_ws(url, headers=headers, max_message_size=MAX_FRAME, connect_timeout=CONNECT_TIMEOUT_S,
                             disconnect_timeout=CLOSE_TIMEOUT_S) as ws:
        assert link.hello_message is not None
        hello = attrs.evolve(link.hello_message, agent_id=agent_id, ts_ms=_now_ms())
        await ws.send_message(_dumps(FRAMES.unstructure(hello)))
        try:
            ok = await _await_hello_ok(ws, link)
        except _Permanent as exc:
            link.refused(str(exc))
            raise
        link.spool.set_floor(dict(ok.acked))
        interval = min(cfg.uplink.heartbeat_s, ok.heartbeat_s or cfg.uplink.heartbeat_s)
        session = _Session(ws, link, interval)
        outbox_send, outbox_receive = trio.open_memory_channel[dict[str, Any] | str](256)
        tail = link.open_tail()
        try:
            with trio.CancelScope() as session.scope:
                async with trio.open_nursery() as nursery:
                    link.attach(outbox_send, ok)
                    log.info("uplink to %s up: node %s, %d job(s) the server lists here, backlog %d record(s)",
                             link.server, ok.node_id, len(ok.active), link.spool.backlog().records)
                    nursery.start_soon(_guard, session, _read_frames, session, link, ctx.shared, nursery, handle)
                    nursery.start_soon(_guard, session, _pump_outbox, session, outbox_receive)
                    nursery.start_soon(_guard, session, _pump_records, session, link, tail,
                                       Pacer(cfg.uplink.replay_records_per_s, cfg.uplink.replay_bytes_per_s), handle,
                                       dict(ok.acked))
                    nursery.start_soon(_guard, session, _heartbeats, session, link)
                    nursery.start_soon(_watch_stall, session)
                    await link.redial.wait()
                    session.end("the runner said hello again")
                    return
        finally:
            link.close_tail(tail)
            link.detach(session.ended or "the session ended")
            with trio.CancelScope(shield=True), trio.move_on_after(CLOSE_TIMEOUT_S):
                await _flush(ws, outbox_receive)  # the goodbye of a runner that stopped, among others
        if not link.redial.is_set():
            raise _Retry(session.ended or "the session ended")


async def _flush(ws: WebSocketConnection, outbox: trio.MemoryReceiveChannel[dict[str, Any] | str]) -> None:
    while True:
        try:
            frame = outbox.receive_nowait()
        except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
            return
        try:
            await ws.send_message(frame if isinstance(frame, str) else _dumps(frame))
        except (ConnectionClosed, trio.BrokenResourceError, OSError):
            return


async def _guard(session: _Session, fn: Any, *args: Any) -> None:
    """Run one of the session's tasks; the connection failing under it ends the session."""
    try:
        await fn(*args)
    except ConnectionClosed as exc:
        reason = exc.reason
        session.end(f"the server closed the connection ({reason.code}{': ' + reason.reason if reason.reason else ''})"
                    if reason is not None else "the server closed the connection")
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
        session.end(f"the connection failed: {_describe(exc)}")
    except _Retry as exc:
        session.end(str(exc))
    except _Permanent as exc:
        session.link.refused(str(exc))
        session.end(str(exc))


async def _await_hello_ok(ws: WebSocketConnection, link: UplinkNodeLink) -> HelloOk:
    with trio.move_on_after(HELLO_TIMEOUT_S):
        while True:
            frame = _parse(await ws.get_message())
            if isinstance(frame, HelloOk):
                return frame
            if isinstance(frame, HelloErr):
                if is_token_refusal(frame.message):
                    raise _Permanent(f"the server {link.server} refused the agent token: {frame.message}")
                raise _Retry(f"the server refused the hello: {frame.message}")
            if isinstance(frame, Ping):
                await ws.send_message(_dumps(FRAMES.unstructure(Pong())))
            elif isinstance(frame, FrameError):
                raise _Retry(f"the server could not read the hello: {frame.message}")
            elif frame is not None:
                log.warning("uplink: a %s frame before hello_ok ignored", FRAMES.tag_of(frame))
    raise _Retry(f"no answer to the hello within {HELLO_TIMEOUT_S:g} s")


def _parse(raw: str | bytes) -> Any:
    """A frame from the server, or None (logged) when it cannot be read: a bad frame is the
    server's bug, never a reason to drop the connection."""
    try:
        return FRAMES.structure(bounded_json.loads(raw))
    except ValueError as exc:  # FieldInvalid, TooDeep and JSON errors are ValueErrors
        where = f"{exc.field}: " if isinstance(exc, FieldInvalid) and exc.field else ""
        log.warning("uplink: unreadable frame from the server ignored: %s%s", where, exc)
        return None


async def _read_frames(session: _Session, link: UplinkNodeLink, shared: UplinkContext, nursery: trio.Nursery,
                       handle: UplinkHandle) -> None:
    ws = session.ws
    while True:
        raw = await ws.get_message()
        session.last_heard = trio.current_time()
        frame = _parse(raw)
        match frame:
            case Ack(stream=stream, seq=seq):
                link.spool.ack(stream, seq)
                handle.acks += 1
            case Reply():
                link.on_reply(frame)
            case Request():
                nursery.start_soon(_guard, session, _answer, session, shared, frame)
            case Dispatch() | Cancel() | SweepThrottle():
                link.to_runner(frame)
            case LogFollow():
                link.to_logs(frame)
            case HeartbeatOk(ts_ms=ts_ms):
                link.clock_skew_ms = ts_ms - _now_ms()
            case Ping():
                link.send_nowait(FRAMES.unstructure(Pong()))
            case Pong() | None:
                pass
            case FrameError(message=message):
                log.warning("uplink: the server says: %s", message)
            case HelloErr(message=message):
                if is_token_refusal(message):
                    raise _Permanent(f"the server {link.server} refused the agent token: {message}")
                raise _Retry(f"the server ended the session: {message}")
            case _:
                log.warning("uplink: unexpected %s frame from the server ignored", FRAMES.tag_of(frame))


async def _answer(session: _Session, shared: UplinkContext, request: Request) -> None:
    """The server's request (``log_read``, ``ckpt_read``, ``ckpt_remove``, ``job_folders_remove``), answered with the same id."""
    reply: Reply
    try:
        body = REQUEST_BODIES.structure(request.body)
    except FieldInvalid as fault:
        reply = Reply(request.id, error=FrameFault("bad_request", f"{fault.field or 'body'}: {fault.message}"))
    else:
        try:
            reply = await _reply_to(shared, request.id, body)
        except Exception as exc:  # noqa: BLE001 - one request gone wrong must not cut the link (or crash the actor)
            log.exception("uplink: the server's %s request failed", REQUEST_BODIES.tag_of(body))
            reply = Reply(request.id, error=FrameFault("internal", f"the agent failed: {type(exc).__name__}"))
    await session.send(FRAMES.unstructure(reply))


async def _reply_to(shared: UplinkContext, request_id: int, body: Any) -> Reply:
    if isinstance(body, LogRead):
        return await _read_log_reply(shared, request_id, body)
    if isinstance(body, CheckpointRead):  # gpuplanectl ckpt verify of one of this node's checkpoints
        reading = await trio.to_thread.run_sync(on_disk.read, body.path, body.roots)
        return Reply(request_id, REPLY_BODIES.unstructure(reading))
    if isinstance(body, CheckpointRemove):  # retention: one of this node's registered checkpoints
        return Reply(request_id, REPLY_BODIES.unstructure(await trio.to_thread.run_sync(on_disk.remove, body)))
    if isinstance(body, JobFoldersRemove):  # job remove / clean of jobs that ran here
        removal = await trio.to_thread.run_sync(job_folders.remove, shared.config.jobs_home, body)
        return Reply(request_id, REPLY_BODIES.unstructure(removal))
    return Reply(request_id, error=FrameFault("bad_request", f"an agent does not answer {REQUEST_BODIES.tag_of(body)}"))


async def _read_log_reply(shared: UplinkContext, request_id: int, body: LogRead) -> Reply:
    try:
        data = await trio.to_thread.run_sync(read_log, shared.config.jobs_home, body)
    except FileNotFoundError:
        return Reply(request_id, error=FrameFault(
            "not_found", f"no {body.stream} log of job {body.job_id} attempt {body.attempt} on this node"))
    except OSError as exc:
        return Reply(request_id, error=FrameFault("unavailable", f"cannot read the log: {exc.strerror}"))
    # A log_read asks for at most 1 MiB: its base64 is well inside a frame.
    return Reply(request_id, REPLY_BODIES.unstructure(data))


async def _pump_outbox(session: _Session, outbox: trio.MemoryReceiveChannel[dict[str, Any] | str]) -> None:
    async for frame in outbox:
        await session.ws.send_message(frame if isinstance(frame, str) else _dumps(frame))


async def _pump_records(session: _Session, link: UplinkNodeLink, tail: LiveTail, pacer: Pacer,
                        handle: UplinkHandle, stored: dict[str, int]) -> None:
    """Every unacked record, in order per stream, in batches: the spool's replay, then the
    live tail (and the spool again if the tail overflowed). A batch ends where the stream
    changes, so the records keep their append order across streams too."""
    cursor = link.spool.acked()
    sent = dict(stored)  # per stream: the last seq the server has (its hello said) or was sent since

    async def send(stream: str, seqs: list[int], bodies: list[bytes]) -> None:
        # The server takes a stream's seqs one after another: seqs spent unsent (dropped by the
        # spool, a power cut's jump) are announced first, each gap with its own skip frame.
        for run_seqs, run_bodies in consecutive_runs(seqs, bodies):
            if run_seqs[0] > sent.get(stream, 0) + 1:
                await session.send(FRAMES.unstructure(Skip(stream, run_seqs[0] - 1, SKIP_REASON)))
            await session.ws.send_message(records_frame(stream, run_seqs, run_bodies))
            sent[stream] = run_seqs[-1]
        cursor[stream] = seqs[-1]
        handle.records_sent += len(seqs)
        wait = pacer.delay(trio.current_time(), len(seqs), sum(map(len, bodies)))
        if wait > 0.005:
            await trio.sleep(wait)

    while True:
        tail.overflowed = False
        for stream, seqs, bodies in link.spool.unacked_batches(cursor, MAX_BATCH_RECORDS, MAX_BATCH_BYTES):
            await send(stream, seqs, bodies)
        while not tail.overflowed:
            tail.wake = trio.Event()
            while tail.records and not tail.overflowed:
                stream, seqs, bodies = _tail_batch(tail, cursor)
                if seqs:
                    await send(stream, seqs, bodies)
            if not tail.overflowed:
                await tail.wake.wait()


def _tail_batch(tail: LiveTail, cursor: dict[str, int]) -> tuple[str, list[int], list[bytes]]:
    """The next batch off the live tail (records of one stream above ``cursor``, bodies encoded);
    empty when what the tail held was sent already."""
    stream = tail.records[0][0]
    seqs: list[int] = []
    bodies: list[bytes] = []
    size = 0
    mark = cursor.get(stream, 0)
    while tail.records and tail.records[0][0] == stream and len(seqs) < MAX_BATCH_RECORDS:
        _, seq, data = tail.records[0]
        body = json.dumps(data, separators=(",", ":")).encode("ascii")
        if seqs and size + len(body) > MAX_BATCH_BYTES:
            break
        tail.records.popleft()
        if seq > mark:
            seqs.append(seq)
            bodies.append(body)
            size += len(body)
            mark = seq
    return stream, seqs, bodies


async def _heartbeats(session: _Session, link: UplinkNodeLink) -> None:
    while True:
        backlog = link.spool.backlog()
        await session.send(FRAMES.unstructure(Heartbeat(_now_ms(), backlog.records, backlog.bytes,
                                                        backlog.oldest_ms)))
        await trio.sleep(session.interval)


async def _watch_stall(session: _Session) -> None:
    limit = STALL_BEATS * session.interval
    while True:
        await trio.sleep_until(session.last_heard + limit)
        if trio.current_time() - session.last_heard >= limit:
            session.end(f"no frame from the server for {limit:g} s (stalled)")
            return


async def _keep_spool(link: UplinkNodeLink, cfg: Any) -> None:
    """The spool's timers: fsync (policy "interval"), the age bound, and what bounds dropped."""
    tick = cfg.fsync_interval_s if cfg.fsync == "interval" else 1.0
    next_trim = trio.current_time() + TRIM_EVERY_S
    while True:
        await trio.sleep(tick)
        spool = link.spool
        try:
            if cfg.fsync == "interval":
                spool.sync()
            if trio.current_time() >= next_trim:
                next_trim = trio.current_time() + TRIM_EVERY_S
                spool.trim()
            dropped = spool.take_dropped()
        except Exception:  # noqa: BLE001 - a disk problem must not stop the uplink; said once a tick
            log.exception("uplink spool upkeep failed")
            continue
        if dropped is not None:
            ranges = ", ".join(f"{stream} {dropped.counts[stream]} (seq {first}..{last})"
                               for stream, (first, last) in sorted(dropped.seqs.items()))
            message = f"the uplink spool was full or too old and dropped records the server never got: {ranges}"
            log.warning("%s", message)
            link.record_event(NodeEvent(SPOOL_DROPPED, "warning", message, _now_ms(), context={
                "counts": dict(dropped.counts), "seqs": {s: list(r) for s, r in dropped.seqs.items()},
                "oldest_ms": dropped.oldest_ms, "newest_ms": dropped.newest_ms}))
