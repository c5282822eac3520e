"""How the daemon's HTTP servers treat connections: keep-alive, ``Connection: close``, the TCP cap.

Owns: a patch of Hypercorn 0.18's trio server, installed once for both fronts (the control
socket and the TCP front), and the TCP front's connection cap.

Why a patch (it belongs upstream, in Hypercorn): Hypercorn's trio ``TCPServer`` does its
connection bookkeeping, starting the keep-alive timer and closing the connection after
``Connection: close`` or an early reply, inside the ASGI app's own ``send()`` of the last
body chunk, so under the app's cancel scopes. Quart-Trio 0.12 cancels its per-request nursery
as soon as it receives ``http.disconnect``, and Hypercorn hands it that message at the start of
the same bookkeeping (``H11Protocol._maybe_recycle`` closes the stream first). The rest then
runs cancelled: ``TrioSingleTask.restart`` starts the idle task with ``nursery.start()`` from the
cancelled scope, where trio leaves a task that calls ``started()`` in the caller's cancelled
nursery, so the timer dies as it starts; ``_close()`` dies at ``send_eof``'s checkpoint. No
connection was ever closed by the server (a 10-line QuartTrio app shows it). The upstream fix,
in ``hypercorn/trio/tcp_server.py``: shield the ``Closed`` and ``Updated`` branches of
``TCPServer.protocol_send`` as its ``RawData`` branch already is. A second, smaller defect
there: once the peer has closed, ``TCPServer.run`` still waits for the keep-alive timer before
it closes its side, so every connection a client dropped holds a descriptor for that long;
the fix is to stop the idle task when ``_read_data`` returns. A third: ``_close`` sends the
EOF outside ``send_lock``, and trio's ``send_eof`` holds the send side across a checkpoint, so
a reply sent then raised ``trio.BusyResourceError`` into the app (seen once, as 18 of them,
issue 29); the fix is to take the lock for it. ``_TCPServer`` below carries exactly these
three changes until a release has them. And one for speed: the keep-alive timer is one task a
connection whose deadline moves (``_IdleTimer``) instead of a task started (``nursery.start``)
and cancelled around every request; a request on a new connection costs the server ~7% less
CPU (``bench/http_stack_bench.py``'s stack, 0.92 -> 0.86 ms).

The rest is ours: a reply sent before the request's body was all read says
``Connection: close`` (the server closes then, rather than read the rest of the body as the
next request); h2c (HTTP/2 over cleartext, by ``Upgrade`` or prior knowledge) is not served:
no client of ours needs it, and it would bring HTTP/2's own attack surface to an open port;
and the TCP front takes at most ``[http] max_connections`` connections, answering the excess
503 and closing them at once, so no client can spend the daemon's file descriptors.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
from typing import Any

import attrs
import h11
import hypercorn.protocol
import hypercorn.trio.run
import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.events import Closed, RawData
from hypercorn.protocol.events import Response, StreamClosed
from hypercorn.protocol.h11 import H11Protocol
from hypercorn.trio.tcp_server import TCPServer

from gpuplaned.config import HttpLimits
from gpuplaned.launching.peers import PEER, PeerCred, peer_cred
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.version import API_VERSION, API_VERSION_HEADER
from gpuplaned.runtime import eager

GRACE = 3.0  # seconds in-flight requests get at shutdown, on either front
_CAP = "gpuplane_connection_cap"  # the attribute of a hypercorn Config that carries a ConnectionCap


@attrs.define(eq=False)
class Slot:
    """One open TCP connection of a front: where it comes from, and who proved themselves on it."""

    address: str
    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)  # cancelled: the connection is closed
    holder: str | None = None  # the token (or browser session) a request on it authenticated as
    asked: bool = False  # a whole request head came on it (a client at work, not a socket left quiet)
    agent: bool = False  # held by an agent's WebSocket


@attrs.define
class ConnectionCap:
    """The open TCP connections of one front (``[http]`` limits; see the module docstring).

    A connection arrives anonymous; at the cap (``limit`` in all, ``per_address`` from one
    address) the oldest anonymous one is closed to let it in (one that never sent a whole request
    head before one that did), and only when every slot is held
    is it refused. ``vouch`` makes a connection held once a request on it authenticated, but only
    ``per_token`` of one token's, and non-agents leave ``agent_reserve`` slots free; past those a
    token's connections stay anonymous, so nobody without credentials, and no one token, can keep
    the others out.
    """

    limit: int
    per_address: int = 1_000_000
    per_token: int = 1_000_000
    agent_reserve: int = 0
    slots: dict[tuple[str, int], Slot] = attrs.field(factory=dict)  # by peer (host, port), oldest first
    refused: int = 0
    evicted: int = 0

    @property
    def open(self) -> int:
        return len(self.slots)

    def admit(self, peer: tuple[str, int]) -> Slot | None:
        """A slot for a new connection from ``peer``, or None (refused: every one is held)."""
        from_address = [slot for slot in self.slots.values() if slot.address == peer[0]]
        crowd = (from_address if len(from_address) >= self.per_address
                 else list(self.slots.values()) if len(self.slots) >= self.limit else None)
        if crowd is not None:
            # Quiet ones first: a client that connects to ask sends its request at once, and must
            # not lose its connection while that request is being authenticated.
            anonymous = [slot for slot in crowd if slot.holder is None]
            victim = next((slot for slot in anonymous if not slot.asked), anonymous[0] if anonymous else None)
            if victim is None:
                self.refused += 1
                return None
            self._drop(victim)
            victim.scope.cancel()
            self.evicted += 1
        slot = Slot(peer[0])
        self.slots[peer] = slot
        return slot

    def leave(self, peer: tuple[str, int], slot: Slot) -> None:
        if self.slots.get(peer) is slot:
            del self.slots[peer]

    def _drop(self, victim: Slot) -> None:
        for peer, slot in self.slots.items():
            if slot is victim:
                del self.slots[peer]
                return

    def asked(self, peer: tuple[str, int]) -> None:
        """A whole request head came on ``peer``'s connection."""
        if (slot := self.slots.get(peer)) is not None:
            slot.asked = True

    def vouch(self, peer: tuple[str, int], holder: str, *, agent: bool = False) -> None:
        """A request on ``peer``'s connection authenticated as ``holder``: hold its slot, within the shares."""
        slot = self.slots.get(peer)
        if slot is None or slot.holder is not None:
            return
        held = [other for other in self.slots.values() if other.holder is not None]
        if sum(other.holder == holder for other in held) >= self.per_token:
            return
        reserve = min(self.agent_reserve, self.limit // 2)
        if not agent and sum(not other.agent for other in held) >= self.limit - reserve:
            return
        slot.holder, slot.agent = holder, agent


class _WithPeer:
    """The app, seen through one Unix-socket connection: every request's scope names its peer."""

    def __init__(self, app: Any, peer: PeerCred) -> None:
        self.app, self.peer = app, peer

    async def __call__(self, scope: dict[str, Any], *args: Any) -> None:
        await self.app({**scope, PEER: self.peer}, *args)


def cap_for(limits: HttpLimits) -> ConnectionCap:
    return ConnectionCap(limits.max_connections, limits.max_connections_per_address,
                         limits.max_connections_per_token, limits.agent_connections_reserved)


def limit_connections(cfg: HypercornConfig, cap: ConnectionCap) -> None:
    """Hold the server run with ``cfg`` to ``cap``; a server without one takes any number."""
    setattr(cfg, _CAP, cap)


def _refusal(limit: int) -> bytes:
    body = json.dumps(ApiError(ErrorCode.UNAVAILABLE, f"the HTTP front has no connection free: each of its {limit} "
                               "([http] max_connections), or of those this address may have "
                               "([http] max_connections_per_address), is held by an authenticated caller; "
                               "retry later",
                               {"limit": limit}).body()).encode()
    head = (f"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n{API_VERSION_HEADER}: {API_VERSION}\r\nretry-after: 1\r\n"
            "x-content-type-options: nosniff\r\n"
            "connection: close\r\n\r\n")
    return head.encode() + body


class _IdleTimer:
    """Hypercorn's keep-alive timer (``TrioSingleTask`` of ``_idle_timeout``) as one watcher a
    connection: ``restart`` arms it (the connection is idle: it is closed once the keep-alive
    timeout passes, or at once when the server terminates), ``stop`` disarms it (a request is
    under way), ``end`` lets the watcher go (the connection is done). Neither arming nor
    disarming starts, cancels or waits for a task."""

    def __init__(self, server: TCPServer) -> None:
        self.server = server
        self.scope: trio.CancelScope | None = None
        self.armed = False
        self.ended = False

    async def restart(self, task_group: Any, action: Any) -> None:
        if self.ended:
            return
        if self.scope is None:
            self.scope = trio.CancelScope()
            task_group._nursery.start_soon(self._watch)
        self.armed = True
        self.scope.deadline = trio.current_time() + self.server.config.keep_alive_timeout

    async def stop(self) -> None:
        self.armed = False
        if self.scope is not None:
            self.scope.deadline = math.inf

    def end(self) -> None:
        self.ended = True
        if self.scope is not None:
            self.scope.cancel()

    async def _watch(self) -> None:
        assert self.scope is not None
        with self.scope:
            await self.server.context.terminated.wait()
        # Timed out while idle, or the server is terminating: an idle connection is closed now;
        # one with a request under way is closed by Hypercorn once its reply is sent.
        if not self.ended and self.armed:
            with trio.CancelScope(shield=True):
                await self.server._initiate_server_close()


class _TCPServer(TCPServer):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.idle_task = _IdleTimer(self)

    async def protocol_send(self, event: Any) -> None:
        if isinstance(event, RawData):
            if isinstance(self.stream, trio.SocketStream):  # not TLS: its bytes go to the socket as they are
                await self._send_raw(event.data)
            else:
                await super().protocol_send(event)  # already shielded upstream
            return
        with trio.CancelScope(shield=True):  # the upstream fix: see the module docstring
            await super().protocol_send(event)

    async def _send_raw(self, data: bytes) -> None:
        """Upstream's ``RawData`` send, without a turn of the scheduler where none is needed
        (``runtime.eager``: the lock, and the bytes straight into the socket), shielded as
        upstream: half a reply would garble the connection. Upstream's took three turns for each
        of a reply's three sends (its head, its body and the empty end of a sized body): a third
        of a request's task steps."""
        await eager.acquire(self.send_lock)
        try:
            with trio.CancelScope(shield=True):
                await eager.write(self.stream.socket.fileno(), self.stream, data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            await self.protocol.handle(Closed())
        finally:
            self.send_lock.release()

    async def _close(self) -> None:
        # Upstream sends the EOF outside ``send_lock``; trio's ``send_eof`` checkpoints while it
        # holds the stream's send side, so a reply's ``send_all`` started then (an SSE frame, a
        # response body) raised ``BusyResourceError`` into the app. Take the lock for it; a send
        # already under way (one a client that does not read holds up) is ended by ``aclose``.
        lock = self.send_lock
        if lock.statistics().owner is trio.lowlevel.current_task():
            await super()._close()  # from our own send's failure: nobody else is sending
            return
        try:
            lock.acquire_nowait()
        except trio.WouldBlock:
            await self.stream.aclose()
            return
        try:
            await super()._close()
        finally:
            lock.release()

    async def _read_data(self) -> None:
        await super()._read_data()
        # The peer closed (or reading failed): close now, not when the keep-alive timer ends
        # (upstream, the connection's task group waits for that timer, holding the descriptor).
        self.idle_task.end()

    async def run(self) -> None:
        peer_of_socket = peer_cred(self.stream.socket)
        if peer_of_socket is not None:  # the control socket: the app tells a job's process from the user
            self.app = _WithPeer(self.app, peer_of_socket)
        cap: ConnectionCap | None = getattr(self.config, _CAP, None)
        if cap is None:
            await super().run()
            return
        try:
            peer = tuple(self.stream.socket.getpeername()[:2])
        except OSError:  # gone before we looked
            await self.stream.aclose()
            return
        slot = cap.admit(peer)
        if slot is None:
            await self._refuse(cap.limit)
            return
        try:
            with slot.scope:
                await super().run()
        finally:
            cap.leave(peer, slot)
            if slot.scope.cancel_called:  # made room for a newcomer: upstream's close was cancelled
                with trio.CancelScope(shield=True):
                    await self.stream.aclose()

    async def _refuse(self, limit: int) -> None:
        with trio.move_on_after(1.0):  # a client that does not read gets no reply
            try:
                await self.stream.send_all(_refusal(limit))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
        await self.stream.aclose()


class _H11Protocol(H11Protocol):
    _held_head: bytes | None = None  # a sized reply's head, until its body's first bytes (``_send_h11_event``)

    async def _check_protocol(self, event: h11.Request) -> None:
        """Serve every request as HTTP/1.1: ``Upgrade: h2c`` is ignored (RFC 9110 lets a server),
        and a client that assumes HTTP/2 gets an HTTP/1.1 error for its ``PRI`` preface."""

    async def stream_send(self, event: Any) -> None:
        if isinstance(event, Response) and event.status_code >= 200:
            if self.connection.their_state is h11.SEND_BODY:
                # Answered before the body was all read (a 404, 405, OPTIONS, 408 or 413): the
                # rest of it is still coming, so this connection ends with the reply.
                kept = [(name, value) for name, value in event.headers if name.lower() != b"connection"]
                headers = [*kept, (b"connection", b"close")]
            else:
                # How long the connection is kept idle, so that a client stops reusing it in time
                # rather than send a request as it is closed (gpuplanectl's client reads it).
                headers = [*event.headers, (b"keep-alive", self._keep_alive)]
            event = dataclasses.replace(event, headers=headers)
        elif isinstance(event, StreamClosed):
            # A head still held: the app ended before its body (it failed). The client gets the
            # head, as upstream sends it, then the connection closes on the body it lacks.
            await self._send_held_head()
        await super().stream_send(event)

    async def _send_held_head(self) -> None:
        held, self._held_head = self._held_head, None
        if held is not None:
            await self.send(RawData(data=held))

    @functools.cached_property
    def _keep_alive(self) -> bytes:
        return b"timeout=%d" % math.floor(self.config.keep_alive_timeout)

    async def _send_h11_event(self, event: Any) -> None:
        """A reply with a sized body goes out as its head and that body in one write, as
        ``OneWriteConnection`` sends a request: upstream writes the head and the body apart,
        so the client woke for the head, then again for the body (and it took a write more).
        Whatever is sent next carries a held head; a reply whose body is streamed (SSE: no
        ``content-length``) or empty sends its head at once."""
        if self._held_head is None and not (isinstance(event, h11.Response) and _sized(event.headers)):
            await super()._send_h11_event(event)
            return
        try:
            data = self.connection.send(event)
        except h11.LocalProtocolError:
            await self._send_held_head()
            if self.connection.their_state != h11.ERROR:
                raise
            return
        if self._held_head is None:
            self._held_head = data
        else:
            self._held_head += data
            await self._send_held_head()


def _sized(headers: Any) -> bool:
    """A reply head names a body length above zero (h11 gives names lower-cased)."""
    for name, value in headers:
        if name == b"content-length":
            return value != b"0"
    return False


def hypercorn_config(bind: str, limits: HttpLimits) -> HypercornConfig:
    """Hypercorn's settings for one of the daemon's fronts (``bind``: a Hypercorn bind string)."""
    install()  # closes idle and finished connections (see the module docstring)
    cfg = HypercornConfig()
    cfg.bind = [bind]
    cfg.accesslog = None
    cfg.errorlog = logging.getLogger("gpuplaned.hypercorn")
    cfg.graceful_timeout = GRACE
    # Also bounds the time to a complete request head. Hypercorn's read_timeout is not used:
    # it times every read, so it would cut SSE streams and WebSockets that the client is quiet on.
    cfg.keep_alive_timeout = limits.keep_alive_timeout_s
    return cfg


def install() -> None:
    """Put the patched classes where Hypercorn's trio worker looks them up. Idempotent."""
    hypercorn.trio.run.TCPServer = _TCPServer  # type: ignore[misc]
    hypercorn.protocol.H11Protocol = _H11Protocol  # type: ignore[misc]
