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
- **Credentials, at the headers.** A request to ``/api/`` (but signing in) or ``/mcp`` that
  carries neither ``Authorization`` nor the session cookie is answered 401 as soon as its
  headers are in, its body never read, and every 401 says ``Connection: close``: a client
  without credentials holds a connection for no longer than it takes to send the headers
  (a slow body used to keep it for ``body_timeout_s``). The app still checks what is sent.
- **Slots.** Its connection is marked as having asked (quiet ones give way first), and each
  request carries ``vouch`` (``gpuplaned.front_scope.VOUCH``) for its
  connection, which the app calls once the request authenticated.

A refused ``Host`` is 400 ``bad_request`` naming the ``Host`` and the setting.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable
from typing import Any

from gpuplaned.config import HttpFront
from gpuplaned.front_scope import VOUCH
from gpuplaned.http.connections import ConnectionCap
from gpuplaned.http.scopes import PUBLIC_RULES
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.version import API_VERSION, API_VERSION_HEADER

Asgi = Callable[[dict[str, Any], Callable[[], Awaitable[dict[str, Any]]], Callable[[dict[str, Any]], Awaitable[None]]],
                Awaitable[None]]

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
NOSNIFF = (b"x-content-type-options", b"nosniff")
CLOSE = (b"connection", b"close")
GUARDED = ("/api/", "/mcp")  # what needs credentials (the web UI's files do not: gpuplaned.http.scopes)
SESSION_COOKIE = b"gpuplane_session="  # gpuplaned.service.api.ui_sessions.COOKIE
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

    def __init__(self, app: Asgi, allowed: frozenset[str] | None, cap: ConnectionCap | None = None) -> None:
        self.app, self.allowed, self.cap = app, allowed, cap

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        send = _with_nosniff(send)
        host = _header(scope, b"host")
        if self.allowed is not None and host is not None and host_name(host) not in self.allowed:
            return await _refuse(scope, refusal(host), receive, send)
        if _lacks_credentials(scope):
            return await _refuse(scope, NO_CREDENTIALS, receive, send)
        if self.cap is not None and scope.get("client"):
            peer = tuple(scope["client"][:2])
            self.cap.asked(peer)
            scope = {**scope, VOUCH: functools.partial(self.cap.vouch, peer)}
        await self.app(scope, receive, send)


NO_CREDENTIALS = ApiError(ErrorCode.UNAUTHORIZED, "this needs credentials: an API token in Authorization: Bearer "
                                                  "(gpuplanectl token create), or a signed-in web UI session")


def _lacks_credentials(scope: dict[str, Any]) -> bool:
    path = scope.get("path", "")
    if not (path.startswith(GUARDED[0]) or path == GUARDED[1]) or path in PUBLIC_RULES:
        return False
    if any(part.split(b"=", 1)[0] in (b"token", b"access_token") for part in scope.get("query_string", b"").split(b"&")):
        return False  # the app says that a token goes in the header (400), which helps more than a 401
    return _header(scope, b"authorization") is None and SESSION_COOKIE not in (_header(scope, b"cookie") or "").encode(
        "latin-1")


def _with_nosniff(send: Any) -> Any:
    async def sending(message: dict[str, Any]) -> None:
        if message["type"] in ("http.response.start", "websocket.http.response.start"):
            headers = [(k, v) for k, v in message.get("headers", ()) if k.lower() != NOSNIFF[0]]
            if message.get("status") == 401 and message["type"] == "http.response.start":
                # No credentials, or wrong ones: this connection's slot goes back at once.
                headers = [*(pair for pair in headers if pair[0].lower() != CLOSE[0]), CLOSE]
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
