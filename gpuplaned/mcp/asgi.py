"""The ``/mcp`` mount: a pass-through ASGI dispatcher in front of the Quart app.

``/mcp`` (exactly that path: no prefix mount, so no 307 to ``/mcp/``) goes to the MCP SDK's
streamable-HTTP handler; everything else, lifespan included, goes to the Quart app unchanged.
2026-07-28 requests stand alone. A 2025-11-25 client gets a session (``Mcp-Session-Id``), so
that the server can ask it something (a confirmation) in the middle of a call and match its
answer to that call; nothing else lives in a session (jobs, tasks and events are the
daemon's). A request naming a session this daemon never opened (one opened before a restart)
is served as a stateless one, so the client goes on unaware; only a confirmation cannot be
asked there, and is refused with the ways out. A session belongs to the caller that opened
it: another token naming it gets 404.

Who calls: on the HTTP front, ``Authorization: Bearer <token>`` (a session cookie alone is
refused: a browser must not drive an agent's tools), and a 401 carries our error body and no
``WWW-Authenticate`` (some clients read that as an OAuth challenge and stop); on the control
socket the caller is the trusted local user (None; a job's own process is refused: it has no
scope but ``sdk``, ``gpuplaned.service.api.confined_callers``), behind the loopback secret when there is
one. A token needs the ``read`` scope (an ``sdk``- or ``agent``-only token gets 403), and may
have ``[http] mcp_sessions_per_token`` sessions open at once (one more: 503 naming it), so one
token cannot spend ``MAX_SESSIONS`` for everyone. Before READY and while stopping, 503 as REST answers.

``mcp`` takes about 2 s to import, so the SDK is loaded (in a thread) and its session
manager started (in this server's nursery) on the first ``/mcp`` request, never at daemon
start and never by gpuplanectl.
"""

from __future__ import annotations

import hmac
import importlib
import json
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import trio

from gpuplaned.front_scope import vouch_for
from gpuplaned.lifecycle import DaemonState
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.service.api import confined_callers, ui_sessions

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext

log = logging.getLogger("gpuplaned.mcp")

PATH = "/mcp"
MAX_BODY = 1 << 20  # as gpuplaned.http.app's MAX_CONTENT_LENGTH
MAX_DRAIN = 1 << 20  # a refused request's body is read (up to this) so its connection stays usable
MAX_SESSIONS = 1000  # 2025-11-25 sessions open at once; one more is refused (503) until one ends
SESSION_IDLE_S = 600  # a session with no request in flight this long is closed
SESSION_HEADER = b"mcp-session-id"

Asgi = Callable[[dict[str, Any], Callable[[], Awaitable[dict[str, Any]]], Callable[[dict[str, Any]], Awaitable[None]]],
                Awaitable[None]]


async def _drain(receive: Any) -> None:
    read = 0
    while read <= MAX_DRAIN:
        message = await receive()
        if message["type"] != "http.request":
            return
        read += len(message.get("body", b""))
        if not message.get("more_body"):
            return


async def _refuse(error: ApiError, receive: Any, send: Any) -> None:
    if error.code not in (ErrorCode.UNAUTHORIZED, ErrorCode.FORBIDDEN):
        await _drain(receive)
    # else its body is left unread: a caller without the right credentials gets its answer at
    # once, and its connection ends with it (gpuplaned.http.connections, front_guard)
    body = json.dumps(error.body()).encode()
    await send({"type": "http.response.start", "status": error.code.http_status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


class McpMount:
    """The ASGI app a front serves: ``/mcp`` to MCP, the rest to ``app``."""

    def __init__(self, shared: ServerContext, app: Asgi, nursery: trio.Nursery, *, tokens: bool = False,
                 secret: str | None = None) -> None:
        self.shared, self.app, self.nursery = shared, app, nursery
        self.tokens = tokens
        self.expected = f"Bearer {secret}".encode() if secret else None
        self._handlers: tuple[Asgi, Asgi] | None = None  # (with sessions, stateless)
        self._starting = trio.Lock()
        self._session_owner: OrderedDict[str, str] = OrderedDict()  # session id -> who opened it
        self._open_sessions: dict[str, Any] = {}  # the SDK manager's live sessions, by id

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("path") != PATH:
            return await self.app(scope, receive, send)
        try:
            caller = await self._caller(scope)
        except ApiError as error:
            return await _refuse(error, receive, send)
        who = "local" if caller is None else caller.key
        session = _header(scope, SESSION_HEADER)
        if caller is not None and session is None and scope.get("method") == "POST":
            if (error := self._over_session_share(who)) is not None:
                return await _refuse(error, receive, send)
        owner = self._session_owner.get(session) if session is not None else who
        if owner is not None and owner != who:
            return await _refuse(ApiError(ErrorCode.NOT_FOUND, "no such MCP session: initialize a new one"),
                                 receive, send)
        with_sessions, stateless = await self._mcp()
        scope = {**scope, "gpuplane.caller": caller}
        if owner is None:  # a session from before a restart: nothing was in it, so go on without
            scope["headers"] = [(k, v) for k, v in scope.get("headers", ()) if k.lower() != SESSION_HEADER]
            return await stateless(scope, receive, send)
        await with_sessions(scope, receive, self._noting_sessions(send, who))

    def _over_session_share(self, who: str) -> ApiError | None:
        """Why ``who`` may not open one more session (a POST without ``Mcp-Session-Id`` may be an
        ``initialize``), or None: one token must not spend the daemon's ``MAX_SESSIONS`` for all."""
        share = self.shared.config.http_limits.mcp_sessions_per_token
        held = sum(1 for session, owner in self._session_owner.items()
                   if owner == who and session in self._open_sessions)
        if held < share:
            return None
        return ApiError(ErrorCode.UNAVAILABLE, f"this token has {held} MCP sessions open, its share "
                        f"([http] mcp_sessions_per_token = {share}); end one (DELETE /mcp with its "
                        "Mcp-Session-Id) or let one idle out, then initialize again",
                        {"limit": share, "setting": "[http] mcp_sessions_per_token"})

    def _noting_sessions(self, send: Any, who: str) -> Any:
        """``send``, remembering who a session the answer opens belongs to."""
        async def noting(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                for key, value in message.get("headers", ()):
                    if key.lower() == SESSION_HEADER:
                        self._session_owner[value.decode("latin-1")] = who
                        while len(self._session_owner) > 2 * MAX_SESSIONS:  # ended ones go first
                            self._session_owner.popitem(last=False)
            await send(message)
        return noting

    async def _caller(self, scope: dict[str, Any]) -> Any:
        query = scope.get("query_string", b"").decode("latin-1")
        if any(part.split("=", 1)[0] in ("token", "access_token") for part in query.split("&")):
            raise ApiError(ErrorCode.BAD_REQUEST, "API tokens go in the Authorization header, never in the URL")
        caller = None
        if self.expected is not None:
            given = (_header(scope, b"authorization") or "").encode()
            if not hmac.compare_digest(given, self.expected):
                raise ApiError(ErrorCode.UNAUTHORIZED, "missing or wrong bearer token for the control endpoint")
        if self.tokens:
            caller = await ui_sessions.authenticate(self.shared, authorization=_header(scope, b"authorization"),
                                                    cookie=None, method="POST")
            # read at least: MCP's tools show the daemon's state. An sdk- or agent-only token (a
            # training script's, a node's) has no business here; a write tool also needs write.
            ui_sessions.require_scope(caller, "read")
            vouch_for(scope, caller.key)
        else:
            job = confined_callers.of_peer(self.shared, scope)
            if job is not None:  # a job's process acts for its run alone: no tools for it
                confined_callers.require_sdk_route(job, None, scope)
        state = self.shared.lifecycle.state
        if state is DaemonState.NOT_READY:
            raise ApiError(ErrorCode.NOT_READY, "gpuplaned is starting; retry shortly", {"state": state.value})
        if state is not DaemonState.READY:
            raise ApiError(ErrorCode.STOPPING, "gpuplaned is shutting down", {"state": state.value})
        return caller

    async def _mcp(self) -> tuple[Asgi, Asgi]:
        if self._handlers is None:
            async with self._starting:
                if self._handlers is None:
                    self._handlers = await self.nursery.start(self._run_managers)
        return self._handlers

    async def _run_managers(self, *, task_status: trio.TaskStatus[tuple[Asgi, Asgi]] = trio.TASK_STATUS_IGNORED
                            ) -> None:
        server_module = await trio.to_thread.run_sync(importlib.import_module, "gpuplaned.mcp.server")
        from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
        from mcp.server.transport_security import TransportSecuritySettings

        server = server_module.build_server(self.shared)
        common = dict(
            json_response=False, max_request_body_size=MAX_BODY,  # the REST API's limit, not the SDK's 4 MiB
            # The SDK's DNS-rebinding guard would refuse every Host but loopback (421), so remote
            # agents could not connect. Rebinding attacks ride a browser's ambient credentials;
            # /mcp takes none (a bearer header only, never the cookie), so the guard buys nothing.
            security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False))
        with_sessions = StreamableHTTPSessionManager(app=server, stateless=False, max_sessions=MAX_SESSIONS,
                                                     session_idle_timeout=SESSION_IDLE_S, **common)
        # Which sessions are still open (ended or idled out ones leave it): the SDK keeps no public
        # view of it, so each token's share is counted from its own table.
        self._open_sessions = with_sessions._server_instances
        stateless = StreamableHTTPSessionManager(app=server, stateless=True, **common)
        async with with_sessions.run(), stateless.run():
            log.info("MCP served at %s", PATH)
            task_status.started((StreamableHTTPASGIApp(with_sessions), StreamableHTTPASGIApp(stateless)))
            await trio.sleep_forever()


async def serve(shared: ServerContext, app: Asgi, cfg: Any, *, shutdown_trigger: Callable[[], Awaitable[None]],
                tokens: bool = False, secret: str | None = None, guard: Callable[[Asgi], Asgi] | None = None,
                task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:
    """Hypercorn's ``serve`` of ``app`` with ``/mcp`` mounted; the MCP manager stops with it.
    ``guard`` wraps the whole (the TCP front's ``gpuplaned.http.front_guard``)."""
    from hypercorn.trio import serve as hypercorn_serve

    async with trio.open_nursery() as nursery:
        mount = McpMount(shared, app, nursery, tokens=tokens, secret=secret)

        async def serve_then_stop(task_status: trio.TaskStatus[Any]) -> None:
            served = guard(mount) if guard is not None else mount
            await hypercorn_serve(served, cfg, shutdown_trigger=shutdown_trigger, task_status=task_status)
            nursery.cancel_scope.cancel()  # the MCP manager, if it was started, goes with the server

        task_status.started(await nursery.start(serve_then_stop))
