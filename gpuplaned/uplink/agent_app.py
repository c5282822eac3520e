"""``create_agent_app``: what a remote agent's control socket serves (role agent; no store, no service layer).

An agent holds no jobs table, runs or metrics of its own: its server has them. Its local
socket (published in the runtime dir's port-file like any daemon's, so the SDK and
``gpuplanectl`` find it unchanged) serves only:

- ``GET /api/v1/daemon``: the daemon (role agent, state, endpoints) and ``uplink``: the
  link's state, the server's URL, the node id, the spool's backlog;
- ``GET /api/v1/actors``, ``GET /api/v1/actors/<name>``, ``POST /api/v1/actors/<name>/<verb>``
  and ``POST /api/v1/daemon/shutdown``, as every daemon does (in the same words as the server:
  ``gpuplaned.runtime.actor_control``);
- the SDK's calls (``/api/v1/sessions...``, ``GET /api/v1/runs/<id>/summary``), forwarded to
  the server over the uplink as ``session_call`` requests, the server's answer passed back
  as it is. While the link is down they get 503 ``not_ready`` naming it: the SDK then keeps
  its points in its own spool and replays them later (stored once per session and seq).

Anything else is a 404 that says this is an agent and which server serves it. Errors have
the API's shape, ``{"error": {"code", "message", "details"}}``.

It is a plain ASGI 3 application, served by Hypercorn like the server's app, and on purpose
no Quart: an idle agent must stay small, and Quart with Flask, Werkzeug, Jinja and the rest
cost it ~12 MB of memory and ~220 modules for eight routes. What clients see is what the
Quart app answered: the same routes and matching (Werkzeug's: a ``<name>`` is one non-empty
segment, ``//`` inside a path is not merged, leading slashes are), the same JSON (compact,
sorted keys, ASCII, a newline at the end), statuses, messages and headers.
"""

from __future__ import annotations

import hmac
import json
import logging
import math
import re
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

import attrs
import trio

import gpuplaned
from gpuplaned.launching.peers import PEER, JobPeer, PeerCred, beyond_sdk, identify_once, unclaimed
from gpuplaned.lifecycle import DaemonState
from gpuplaned.protocol import bounded_json
from gpuplaned.protocol.converter import FieldInvalid, check, unstructure
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.uplink_frames import SessionCall
from gpuplaned.protocol.version import API_VERSION, API_VERSION_HEADER
from gpuplaned.runtime import actor_control
from gpuplaned.uplink.link import LinkDown, LinkRefused, UplinkNodeLink

__all__ = ["AgentApp", "AgentRequestStats", "create_agent_app"]

log = logging.getLogger("gpuplaned.agent_app")

MAX_BODY = 1 << 20  # as the server's API takes

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
AgentApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# As the server's Quart app writes JSON (Flask's provider out of debug mode). Our own bodies
# come from attrs classes and hold no NaN; the server's answers are passed on as they are.
_ENCODE = json.JSONEncoder(ensure_ascii=True, sort_keys=True, separators=(",", ":"), allow_nan=False).encode
_ENCODE_VERBATIM = json.JSONEncoder(ensure_ascii=True, sort_keys=True, separators=(",", ":")).encode

_SEGMENT = "([^/]+)"  # Werkzeug's default converter: one non-empty segment
_REST = "([^/].*)"  # its path converter: the rest, slashes included, not beginning with one


@attrs.define
class AgentRequestStats:
    requests: int = 0
    errors: int = 0


class _Request(NamedTuple):
    method: str
    path: str
    query_string: bytes
    headers: list[tuple[bytes, bytes]]
    receive: Receive
    peer: PeerCred | None = None  # the process that connected (the control socket)
    job_id: str | None = None  # the job that process is of (``answer`` finds it)

    def header(self, name: bytes) -> bytes | None:
        return next((value for key, value in self.headers if key == name), None)


class _Reply(NamedTuple):
    status: int
    data: bytes
    headers: tuple[tuple[bytes, bytes], ...] = ()


class _Gone(Exception):
    """The client went away before its body was all there: nobody to answer."""


Handler = Callable[..., Awaitable[_Reply]]


def _json(status: int, body: Any, *, verbatim: bool = False, headers: tuple[tuple[bytes, bytes], ...] = ()) -> _Reply:
    """A JSON reply; ``verbatim``: the server's answer, encoded as it is, whatever it holds."""
    data = ((_ENCODE_VERBATIM if verbatim else _ENCODE)(body) + "\n").encode()
    return _Reply(status, data, (*headers, (b"content-type", b"application/json")))


def _ok(value: Any, status: int = 200) -> _Reply:
    return _json(status, unstructure(value))


async def _send(send: Send, reply: _Reply, *, head: bool = False) -> None:
    await send({"type": "http.response.start", "status": reply.status, "headers": [
        *reply.headers, (b"content-length", str(len(reply.data)).encode()),
        (API_VERSION_HEADER.lower().encode(), str(API_VERSION).encode())]})
    await send({"type": "http.response.body", "body": b"" if head else reply.data})  # HEAD: GET's headers only


async def _read_body(request: _Request, timeout_s: float | None) -> bytes:
    """The request's body, refused past ``MAX_BODY`` (413) or ``timeout_s`` (408)."""
    too_large = ApiError(ErrorCode.PAYLOAD_TOO_LARGE, f"the body is over {MAX_BODY} bytes")
    length = request.header(b"content-length")  # h11 has checked it is a number
    if length is not None and int(length) > MAX_BODY:
        raise too_large  # before reading any of it
    chunks: list[bytes] = []
    size = 0
    with trio.move_on_after(math.inf if timeout_s is None else timeout_s):
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                raise _Gone()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > MAX_BODY:  # a chunked body says its size only as it comes
                raise too_large
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)
    raise ApiError(ErrorCode.REQUEST_TIMEOUT, "the body did not arrive in time")


def create_agent_app(shared: Any, *, secret: str | None = None,
                     body_timeout_s: float | None = None) -> tuple[AgentApp, AgentRequestStats]:
    """The agent's ASGI app over ``shared`` (the daemon's context: config, lifecycle,
    endpoint, supervisor, ``request_shutdown``, and ``uplink``, the ``UplinkNodeLink``).

    Args:
        secret: when set (the loopback-TCP fallback), every request must carry
            ``Authorization: Bearer <secret>``.
        body_timeout_s: the longest a request's body may take to arrive; then 408.
            None: no limit.
    """
    stats = AgentRequestStats()
    expected = f"Bearer {secret}".encode() if secret else None
    link: UplinkNodeLink = shared.uplink

    def gate(request: _Request) -> None:
        if expected is not None and not hmac.compare_digest(request.header(b"authorization") or b"", expected):
            raise ApiError(ErrorCode.UNAUTHORIZED, "missing or wrong bearer token for the control endpoint")
        state = shared.lifecycle.state
        if state is DaemonState.NOT_READY and request.path != "/api/v1/daemon":
            raise ApiError(ErrorCode.NOT_READY, f"the agent is starting (its link to {link.server} is "
                                                f"{link.state}); retry shortly", {"state": state.value})
        if state not in (DaemonState.READY, DaemonState.NOT_READY) and not (
                request.method == "GET" and request.path == "/api/v1/daemon"):
            raise ApiError(ErrorCode.STOPPING, "gpuplaned is shutting down", {"state": state.value})

    async def get_daemon(request: _Request) -> _Reply:
        body = unstructure(actor_control.daemon_info(shared, gpuplaned.__version__))
        body["uplink"] = unstructure(link.status())
        return _json(200, body)

    async def shutdown(request: _Request) -> _Reply:
        # The reply leaves first: the request only wakes the daemon's main task.
        shared.request_shutdown("shutdown requested over the control API")
        return _ok({"state": DaemonState.STOPPING.value}, 202)

    async def get_actors(request: _Request) -> _Reply:
        return _ok({"actors": actor_control.list_actors(shared.supervisor)})

    async def get_actor(request: _Request, name: str) -> _Reply:
        return _ok({"actor": actor_control.get_actor(shared.supervisor, name)})

    async def actor_command(request: _Request, name: str, verb: str) -> _Reply:
        running = shared.lifecycle.state is DaemonState.READY
        return _ok({"actor": await actor_control.command_actor(shared.supervisor, name, verb, running=running)})

    async def forward(request: _Request, *_: str) -> _Reply:
        """An SDK call, to the server over the uplink; its answer as the server gave it."""
        raw = await _read_body(request, body_timeout_s)
        body = None
        if raw:
            try:
                body = bounded_json.loads(raw)
            except ValueError as exc:
                raise ApiError(ErrorCode.BAD_REQUEST, f"the body is not JSON: {exc}") from None
            if not isinstance(body, dict):
                raise ApiError(ErrorCode.BAD_REQUEST, "the body must be a JSON object")
        path = request.path + (f"?{request.query_string.decode('latin-1')}" if request.query_string else "")
        try:
            call = check({"method": request.method, "path": path, "body": body, "job_id": request.job_id},
                         SessionCall)
        except FieldInvalid as fault:
            raise ApiError(ErrorCode.BAD_REQUEST, f"{fault.field or 'request'}: {fault.message}") from None
        try:
            reply = await link.session_call(call, raw if body is not None else None)
        except LinkDown:
            raise ApiError(ErrorCode.NOT_READY, f"this agent's link to its server {link.server} is down "
                                                f"({link.last_error or link.state}); retry later",
                           {"server": link.server, "link": link.state}) from None
        except LinkRefused as exc:
            raise ApiError(ErrorCode.UNAVAILABLE, f"the server {link.server} could not take the call: {exc.message}",
                           {"server": link.server}) from None
        return _json(reply.status, reply.body, verbatim=True)

    # (path, methods, handler): the path's groups are the handler's arguments.
    routes: tuple[tuple[re.Pattern[str], frozenset[str], Handler], ...] = tuple(
        (re.compile(path), frozenset(methods), handler) for path, methods, handler in (
            ("/api/v1/daemon", {"GET"}, get_daemon),
            ("/api/v1/daemon/shutdown", {"POST"}, shutdown),
            ("/api/v1/actors", {"GET"}, get_actors),
            (f"/api/v1/actors/{_SEGMENT}", {"GET"}, get_actor),
            (f"/api/v1/actors/{_SEGMENT}/{_SEGMENT}", {"POST"}, actor_command),
            ("/api/v1/sessions", {"POST"}, forward),
            (f"/api/v1/sessions/{_REST}", {"GET", "POST"}, forward),
            (f"/api/v1/runs/{_SEGMENT}/summary", {"GET"}, forward),
        ))

    def job_of(request: _Request) -> JobPeer | None:
        """The job whose process sent ``request``; None for the host's user (``gpuplaned.launching.peers``)."""
        return identify_once(request.peer, shared.runner) if request.peer is not None else None

    async def answer(request: _Request) -> _Reply:
        gate(request)
        job = job_of(request)
        # As Werkzeug: HEAD is GET (without the body), OPTIONS names the methods.
        method = "GET" if request.method == "HEAD" else request.method
        allowed: set[str] = set()
        for pattern, methods, handler in routes:
            match = pattern.fullmatch(request.path)
            if match is not None:
                if method in methods:
                    if job is not None:  # a job's process acts for its run alone (issue 29 item 6)
                        if job.job_id is None or handler is not forward:
                            # Its body read first, so the refusal is not lost to a reset (app.check_peer).
                            await _read_body(request, body_timeout_s)
                            raise unclaimed(job) if job.job_id is None else beyond_sdk(
                                f"job {job.job_id}'s process {job.pid}", job.job_id, request.method, request.path)
                        request = request._replace(job_id=job.job_id)
                    return await handler(request, *match.groups())
                allowed |= methods | {"OPTIONS", *(("HEAD",) if "GET" in methods else ())}
        if not allowed:
            raise ApiError(ErrorCode.NOT_FOUND, (
                f"no such endpoint on this agent: {request.method} {request.path}; this daemon is a GPUPlane "
                f"agent, and the server at {link.server} serves the API (jobs, runs, nodes, logs)"),
                {"server": link.server})
        allow = ((b"allow", ", ".join(sorted(allowed)).encode()),)
        if request.method == "OPTIONS":
            return _Reply(200, b"", allow)
        error = ApiError(ErrorCode.METHOD_NOT_ALLOWED, f"{request.method} is not allowed on {request.path}")
        return _json(error.code.http_status, error.body(), headers=allow)

    async def respond(request: _Request, send: Send) -> None:
        try:
            reply = await answer(request)
        except _Gone:
            return
        except ApiError as error:
            reply = _json(error.code.http_status, error.body())
        except Exception as error:
            log.exception("unhandled error in %s %s", request.method, request.path)
            reply = _json(500, ApiError(ErrorCode.INTERNAL, f"internal error: {type(error).__name__}").body())
        if reply.status >= 400:
            stats.errors += 1
        await _send(send, reply, head=request.method == "HEAD")

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            stats.requests += 1
            # Werkzeug's request path: leading slashes make one, the rest is as it came.
            request = _Request(scope["method"].upper(), "/" + scope["path"].lstrip("/"), scope["query_string"],
                               scope["headers"], receive, scope.get(PEER))
            await respond(request, send)
        elif scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        else:  # websocket: nothing is served over one
            await receive()  # websocket.connect
            await send({"type": "websocket.close"})

    return app, stats

