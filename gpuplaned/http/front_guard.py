"""What the TCP front checks of every request before any route sees it, ``/mcp`` included.

- **Host.** A front bound to loopback answers only a ``Host`` that names this machine
  (``localhost``, ``127.0.0.1``, ``[::1]``, with any port) or one of ``[http] allowed_hosts``.
  DNS rebinding: a page of ``evil.example`` whose name is made to point at 127.0.0.1 reaches
  the loopback front from the victim's own browser, as same-origin to itself, so it could read
  whatever needs no credentials and spend whatever its requests may; the ``Host`` it sends is
  still ``evil.example``. An SSH tunnel's clients send ``localhost:PORT``, which passes. A front
  bound beyond loopback checks no ``Host`` unless ``allowed_hosts`` is set (its own address
  and the loopback names pass then too); ``"*"`` turns the check off. A request without
  ``Host`` (HTTP/1.0) is no browser's, and passes.
- **nosniff.** Every answer says ``X-Content-Type-Options: nosniff``, so a browser never reads
  a JSON error or a log line as HTML or script.

A refused ``Host`` is 400 ``bad_request`` naming the ``Host`` and the setting.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from gpuplaned.config import HttpFront
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.version import API_VERSION, API_VERSION_HEADER

Asgi = Callable[[dict[str, Any], Callable[[], Awaitable[dict[str, Any]]], Callable[[dict[str, Any]], Awaitable[None]]],
                Awaitable[None]]

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
NOSNIFF = (b"x-content-type-options", b"nosniff")
SETTING = "[http] allowed_hosts"


def allowed_hosts(front: HttpFront, configured: tuple[str, ...] | None) -> frozenset[str] | None:
    """The host names ``front`` answers (lower case, no port); None: any."""
    if configured is None and not front.loopback:
        return None  # as before: a front on a LAN address is reached by names we cannot know
    if configured is not None and "*" in configured:
        return None
    return LOOPBACK_NAMES | {front.host.lower()} | set(configured or ())


def host_name(header: str) -> str:
    """``Host``'s name, lower case, without its port or an IPv6 address's brackets."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:header.find("]")] if "]" in header else header
    name, sep, port = header.rpartition(":")
    return (name if sep and port.isdigit() else header).rstrip(".")


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def refusal(host: str) -> ApiError:
    return ApiError(ErrorCode.BAD_REQUEST, f"this front does not answer to Host {host!r}: a front on loopback answers "
                                           f"localhost, 127.0.0.1 and [::1] (any port); add the name to {SETTING} "
                                           f"in the daemon's config to reach it by another",
                    {"reason": "host", "host": host, "setting": SETTING})


class FrontGuard:
    """``app`` behind the Host check and with ``nosniff`` on every answer."""

    def __init__(self, app: Asgi, allowed: frozenset[str] | None) -> None:
        self.app, self.allowed = app, allowed

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        send = _with_nosniff(send)
        host = _header(scope, b"host")
        if self.allowed is not None and host is not None and host_name(host) not in self.allowed:
            return await _refuse(scope, refusal(host), receive, send)
        await self.app(scope, receive, send)


def _with_nosniff(send: Any) -> Any:
    async def sending(message: dict[str, Any]) -> None:
        if message["type"] in ("http.response.start", "websocket.http.response.start"):
            headers = [(k, v) for k, v in message.get("headers", ()) if k.lower() != NOSNIFF[0]]
            message = {**message, "headers": [*headers, NOSNIFF]}
        await send(message)
    return sending


async def _refuse(scope: dict[str, Any], error: ApiError, receive: Any, send: Any) -> None:
    body = json.dumps(error.body()).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               (API_VERSION_HEADER.lower().encode(), str(API_VERSION).encode())]
    if scope["type"] == "websocket":  # refused before the handshake: an HTTP answer, as a route's would be
        await send({"type": "websocket.http.response.start", "status": error.code.http_status, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body})
        return
    # A body left unread ends the connection with the reply (gpuplaned.http.connections).
    await send({"type": "http.response.start", "status": error.code.http_status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
