"""Dialling the server's agent WebSocket: trio-websocket's ``open_websocket_url``, except that a
server that hangs up before it answers the upgrade fails the dial at once.

trio-websocket waits for the answer to the upgrade until its connect timeout, even when the TCP
connection is gone already: its reader task sees the EOF (or the reset), records an abnormal
closure and ends, and nothing wakes the dial that waits for the handshake. A TCP proxy or a load
balancer whose backend is down does exactly that (it accepts, then closes), so every server
restart behind one cost an agent the whole timeout before it could redial. Here the stream under
the handshake says when it ends, and the dial fails then with the reason (``HungUp``); a server
that keeps the connection open and says nothing still fails at the timeout (``ConnectionTimeout``).
"""

from __future__ import annotations

import os
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from urllib.parse import urlsplit

import trio
from trio_websocket import ConnectionTimeout, HandshakeError, WebSocketConnection, wrap_client_stream


class HungUp(HandshakeError):
    """The connection ended before the server answered the WebSocket upgrade: closed, reset, or
    its TLS handshake failed."""


_UNANSWERED = "before it answered the WebSocket upgrade"


class _Watched(trio.abc.Stream):
    """The stream under a WebSocket: tells ``on_end`` (once, while armed) why it ended, when the
    peer closed or reset it, and otherwise passes everything through."""

    def __init__(self, stream: trio.abc.Stream, on_end: Callable[[str], None]) -> None:
        self.stream = stream
        self.on_end: Callable[[str], None] | None = on_end

    def _ended(self, how: str) -> None:
        if self.on_end is not None:
            on_end, self.on_end = self.on_end, None
            on_end(how)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        try:
            await self.stream.send_all(data)
        except trio.BrokenResourceError as exc:
            self._ended(_broken(exc))
            raise

    async def wait_send_all_might_not_block(self) -> None:
        await self.stream.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        try:
            data = await self.stream.receive_some(max_bytes)
        except trio.BrokenResourceError as exc:
            self._ended(_broken(exc))
            raise
        if not data:
            self._ended(f"the server closed the connection {_UNANSWERED}")
        return data

    async def aclose(self) -> None:
        await self.stream.aclose()


def _broken(exc: trio.BrokenResourceError) -> str:
    cause = exc.__cause__
    if isinstance(cause, ssl.SSLError):  # trio's SSLStream: a TLS failure, not the network's
        return f"the TLS handshake with the server failed ({cause.reason or cause}) {_UNANSWERED}"
    return f"the server reset the connection {_UNANSWERED}"


@asynccontextmanager
async def open_agent_ws(url: str, *, headers: list[tuple[bytes, bytes]], max_message_size: int,
                        connect_timeout: float, disconnect_timeout: float) -> AsyncIterator[WebSocketConnection]:
    """A client WebSocket to ``url`` (``ws://`` or ``wss://``), closed on exit.

    Raises:
        HungUp: the server closed or reset the connection before it answered the upgrade.
        ConnectionTimeout: no answer to the upgrade within ``connect_timeout``.
        HandshakeError: the connection could not be made (its ``OSError`` is the cause).
        ConnectionRejected: the server answered the upgrade with an HTTP status.
    """
    try:
        async with trio.open_nursery() as nursery:
            ws, stream = await _handshake(nursery, url, headers, max_message_size, connect_timeout)
            try:
                yield ws
            finally:
                try:
                    with trio.move_on_after(disconnect_timeout):
                        await ws.aclose()
                finally:
                    await trio.aclose_forcefully(stream)
                    nursery.cancel_scope.cancel()  # the reader task, if the close handshake did not end it
    except BaseExceptionGroup as group:
        # One failure (the reader task's rejection, the caller's own exception) is raised as
        # itself, as open_websocket_url does, so the caller's ``except`` clauses see it.
        leaf = _single_leaf(group)
        if leaf is None:
            raise
        _reraise(leaf)


async def _handshake(nursery: trio.Nursery, url: str, headers: list[tuple[bytes, bytes]], max_message_size: int,
                     timeout: float) -> tuple[WebSocketConnection, _Watched]:
    parts = urlsplit(url)
    secure = parts.scheme == "wss"
    host = parts.hostname or ""
    port = parts.port or (443 if secure else 80)
    resource = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    host_header = parts.netloc.rpartition("@")[2]
    hung_up: list[str] = []
    with trio.move_on_after(timeout):
        try:
            if secure:
                raw: trio.abc.Stream = await trio.open_ssl_over_tcp_stream(host, port, https_compatible=True)
            else:
                raw = await trio.open_tcp_stream(host, port)
        except OSError as exc:
            raise HandshakeError(f"cannot connect to {host_header}: {_connect_error(exc)}") from exc
        with trio.CancelScope() as waiting:

            def on_end(how: str) -> None:
                hung_up.append(how)
                waiting.cancel()

            stream = _Watched(raw, on_end)
            try:
                ws = await wrap_client_stream(nursery, stream, host_header, resource, extra_headers=headers,
                                              max_message_size=max_message_size)
            except BaseException:
                await trio.aclose_forcefully(stream)
                raise
            stream.on_end = None  # from here on an end is the session's to notice
            return ws, stream
        await trio.aclose_forcefully(stream)
        raise HungUp(hung_up[0])
    raise ConnectionTimeout(f"no answer to the WebSocket upgrade within {timeout:g} s")


def _connect_error(exc: OSError) -> str:
    """The reason a connect failed: trio's "all attempts to connect ... failed" holds each
    address's own error (refused, unreachable) in its cause."""
    tried = exc.__cause__
    if isinstance(tried, BaseExceptionGroup):
        reasons = {os.strerror(e.errno).lower() for e in tried.exceptions if isinstance(e, OSError) and e.errno}
        if reasons:
            return ", ".join(sorted(reasons))
    return os.strerror(exc.errno).lower() if exc.errno else str(exc)


def _single_leaf(group: BaseExceptionGroup) -> BaseException | None:
    error: BaseException = group
    while isinstance(error, BaseExceptionGroup):
        if len(error.exceptions) != 1:
            return None
        error = error.exceptions[0]
    return error


def _reraise(error: BaseException) -> None:
    """Raise ``error`` keeping its own cause and context (not the group it came in)."""
    cause, context, suppress = error.__cause__, error.__context__, error.__suppress_context__
    try:
        raise error
    finally:
        error.__cause__, error.__context__, error.__suppress_context__ = cause, context, suppress
        del error
