"""``create_app``: the same app serves the control socket and, with ``tokens=True``, the HTTP front.

Every error leaves as ``{"error": {"code", "message", "details"}}`` with a 4xx/5xx status,
never an HTML page or a traceback. Before READY every request gets 503 ``not_ready``.
"""

from __future__ import annotations

import contextlib
import functools
import hmac
import logging
from typing import TYPE_CHECKING, Any

import attrs
from quart import Response, g, request, websocket
from quart_trio import QuartTrio
from werkzeug.exceptions import HTTPException

from gpuplaned.front_scope import vouch_for
from gpuplaned.http import agent_routes, audit_routes, idempotency, openapi_routes, ui_routes
from gpuplaned.http.responses import error_response
from gpuplaned.http.route_modules import DOCUMENTED
from gpuplaned.http.scopes import is_public, required_scope
from gpuplaned.lifecycle import DaemonState
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.version import API_VERSION, API_VERSION_HEADER
from gpuplaned.service.api import confined_callers, ui_sessions

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext

log = logging.getLogger("gpuplaned.http")

_HTTP_CODES = {
    400: ErrorCode.BAD_REQUEST,
    401: ErrorCode.UNAUTHORIZED,
    403: ErrorCode.FORBIDDEN,
    404: ErrorCode.NOT_FOUND,
    405: ErrorCode.METHOD_NOT_ALLOWED,
    408: ErrorCode.REQUEST_TIMEOUT,
    413: ErrorCode.PAYLOAD_TOO_LARGE,
    415: ErrorCode.UNSUPPORTED_MEDIA_TYPE,
}


@attrs.define
class RequestStats:
    requests: int = 0
    errors: int = 0


def refuse_empty_query_values(args: Any) -> None:
    """``?window=`` is a 400 naming the parameter, never read as "no window": every query
    parameter the API documents has a value (the OpenAPI document says so), and an empty one
    is a client's bug better shown than guessed at."""
    for name, value in args.items(multi=True):
        if value == "":
            raise ApiError(ErrorCode.BAD_REQUEST, f"{name}: empty; leave the parameter out instead",
                           {"field": name})


def create_app(shared: ServerContext, *, secret: str | None = None, tokens: bool = False,
               body_timeout_s: float | None = None) -> tuple[QuartTrio, RequestStats]:
    """Build the app.

    Args:
        shared: the daemon context the handlers act on.
        secret: when set (the loopback-TCP fallback), every request must carry
            ``Authorization: Bearer <secret>``.
        tokens: the HTTP front: every request needs an API token (``gpuplanectl token
            create``), or a signed-in browser's session cookie, holding the scope its route
            needs (``gpuplaned.http.scopes``); the web UI is served there too.
        body_timeout_s: the longest a request's body may take to arrive (``[http]``); then 408.
    """
    app = QuartTrio("gpuplaned")
    app.config["MAX_CONTENT_LENGTH"] = 1 << 20
    if body_timeout_s is not None:
        app.config["BODY_TIMEOUT"] = body_timeout_s
    app.url_map.merge_slashes = False  # "//" is a 404 in the error shape, not an HTML redirect
    stats = RequestStats()
    expected = f"Bearer {secret}".encode() if secret else None

    async def check_token(incoming: Any, *, is_websocket: bool = False) -> None:
        """``incoming``: the request or the WebSocket handshake (``gpuplaned.service.api.ui_sessions``)."""
        rule = incoming.url_rule.rule if incoming.url_rule is not None else None
        # On the audit route ``token`` is a name filter (its query class refuses a token's text);
        # by path, so that a method it does not take still gets its 405.
        url_token = ("access_token",) if incoming.path == audit_routes.AUDIT_RULE else ("token", "access_token")
        if any(name in incoming.args for name in url_token):
            # URLs end up in proxy logs and shell history; say so rather than ignore it.
            raise ApiError(ErrorCode.BAD_REQUEST, "API tokens go in the Authorization header, never in the URL")
        if is_public(rule):
            g.token_id = "public"
            return
        # A refusal leaves the body unread: a 401 closes its connection (gpuplaned.http.front_guard),
        # and any reply sent before the body was all read does too (gpuplaned.http.connections).
        caller = await ui_sessions.authenticate(
            shared, authorization=incoming.headers.get("Authorization"),
            cookie=incoming.cookies.get(ui_sessions.COOKIE), method=incoming.method,
            csrf=incoming.headers.get(ui_sessions.CSRF_HEADER), websocket=is_websocket,
            origin=incoming.headers.get("Origin"), host=incoming.headers.get("Host"))
        needed = required_scope(rule, incoming.method)
        if caller.job_id is not None:  # a job's SDK token: the SDK's routes alone, as its process on the socket
            confined_callers.require_sdk_route(caller, rule, incoming.scope)
        else:
            ui_sessions.require_scope(caller, needed)
        vouch_for(incoming.scope, caller.key, agent=needed == "agent")  # its slot is held now
        g.caller = caller
        g.token_id = caller.key

    async def check_peer(incoming: Any) -> None:
        """The control socket: the user is trusted; a job's own process may use the SDK's
        routes alone, on its own runs (``gpuplaned.service.api.confined_callers``)."""
        try:
            caller = confined_callers.of_peer(shared, incoming.scope)
            if caller is not None:
                g.caller = caller  # first: a refusal below is audited as the job's
                g.token_id = caller.key
                rule = incoming.url_rule.rule if incoming.url_rule is not None else None
                confined_callers.require_sdk_route(caller, rule, incoming.scope)
        except ApiError:
            # Read the body first (it is local, and at most MAX_CONTENT_LENGTH): a connection
            # closed with a body unread is reset, and a client that sends its body after the
            # head (http.client does) would meet a broken pipe instead of the reason.
            if incoming is request:
                with contextlib.suppress(Exception):
                    await request.get_data(cache=False)
            raise

    @app.before_request
    async def gate() -> Response | None:
        stats.requests += 1
        if request.path.startswith("/api/") and request.routing_exception is None:  # a 404 or 405 says so first
            refuse_empty_query_values(request.args)
        if expected is not None:
            given = request.headers.get("Authorization", "").encode()
            if not hmac.compare_digest(given, expected):
                raise ApiError(ErrorCode.UNAUTHORIZED, "missing or wrong bearer token for the control endpoint")
        if tokens:
            await check_token(request)
        else:
            await check_peer(request)
        g.make_store_rider = functools.partial(audit_routes.rider, http_front=tokens)  # made by the route's view
        state = shared.lifecycle.state
        if state is DaemonState.NOT_READY:
            raise ApiError(ErrorCode.NOT_READY, "gpuplaned is starting; retry shortly", {"state": state.value})
        if state is not DaemonState.READY and not (request.method == "GET" and request.path == "/api/v1/daemon"):
            raise ApiError(ErrorCode.STOPPING, "gpuplaned is shutting down", {"state": state.value})
        return None

    idempotency.register(app, shared)  # after the gate: keys are scoped to the caller it found

    @app.before_websocket
    async def gate_websocket() -> None:
        stats.requests += 1
        if tokens:
            await check_token(websocket, is_websocket=True)
        else:
            await check_peer(websocket)
        if shared.lifecycle.state is not DaemonState.READY:
            raise ApiError(ErrorCode.NOT_READY, "gpuplaned is not ready", {"state": shared.lifecycle.state.value})

    @app.after_request
    async def count(response: Response) -> Response:
        if response.status_code >= 400:
            stats.errors += 1
        response.headers[API_VERSION_HEADER] = str(API_VERSION)  # clients warn on a mismatch
        await audit_routes.record_write(shared, response, http_front=tokens)  # REST writes; never delays it long
        return response

    @app.errorhandler(ApiError)
    async def api_error(error: ApiError) -> Response:
        return error_response(error)

    @app.errorhandler(HTTPException)
    async def http_error(error: HTTPException) -> Response:
        code = _HTTP_CODES.get(error.code or 500, ErrorCode.INTERNAL)
        message = error.description or error.name
        details: dict[str, Any] = {}
        allowed = sorted(getattr(error, "valid_methods", None) or ())
        if error.code == 404:
            message = f"no such endpoint: {request.method} {request.path}"
        elif error.code == 405:
            message = f"{request.method} is not allowed on {request.path}"
            if allowed:
                details["allowed"] = allowed
        response = error_response(ApiError(code, message, details))
        if error.code == 405 and allowed:
            response.headers["Allow"] = ", ".join(allowed)  # RFC 9110 requires it on a 405
        # A reply sent before the body was all read (a 413 among them) ends its connection:
        # gpuplaned.http.connections.
        return response

    @app.errorhandler(Exception)
    async def internal_error(error: Exception) -> Response:
        log.exception("unhandled error in %s %s", request.method, request.path)
        return error_response(ApiError(ErrorCode.INTERNAL, f"internal error: {type(error).__name__}"))

    for module in (*DOCUMENTED, openapi_routes, agent_routes):
        module.register(app, shared)
    if tokens:
        ui_routes.register(app, shared)  # the web UI: on the HTTP front only
    return app, stats
