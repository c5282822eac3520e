"""``create_agent_app``: what a remote agent's control socket serves (role agent; no store, no service layer).

An agent holds no jobs table, runs or metrics of its own: its server has them. Its local
socket (published in the runtime dir's port-file like any daemon's, so the SDK and
``gpuplanectl`` find it unchanged) serves only:

- ``GET /api/v1/daemon``: the daemon (role agent, state, endpoints) and ``uplink``: the
  link's state, the server's URL, the node id, the spool's backlog;
- ``GET /api/v1/actors``, ``GET /api/v1/actors/<name>``, ``POST /api/v1/actors/<name>/<verb>``
  and ``POST /api/v1/daemon/shutdown``, as every daemon does;
- the SDK's calls (``/api/v1/sessions...``, ``GET /api/v1/runs/<id>/summary``), forwarded to
  the server over the uplink as ``session_call`` requests, the server's answer passed back
  as it is. While the link is down they get 503 ``not_ready`` naming it: the SDK then keeps
  its points in its own spool and replays them later (stored once per session and seq).

Anything else is a 404 that says this is an agent and which server serves it. Errors have
the API's shape, ``{"error": {"code", "message", "details"}}``.
"""

from __future__ import annotations

import hmac
import logging
import os
from typing import Any

import attrs
import trio
from quart import Response, jsonify, request
from quart_trio import QuartTrio
from werkzeug.exceptions import HTTPException

import gpuplaned
from gpuplaned.lifecycle import DaemonState
from gpuplaned.protocol import bounded_json
from gpuplaned.protocol.control import ActorInfo, DaemonInfo, Endpoints
from gpuplaned.protocol.converter import FieldInvalid, check, unstructure
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.uplink_frames import SessionCall
from gpuplaned.protocol.version import API_VERSION, API_VERSION_HEADER
from gpuplaned.runtime.supervisor import ActorNotStoppable, ActorSnapshot, UnknownActor
from gpuplaned.uplink.link import LinkDown, LinkRefused, UplinkNodeLink

__all__ = ["AgentRequestStats", "create_agent_app"]

log = logging.getLogger("gpuplaned.agent_app")

ACTOR_VERBS = ("start", "stop", "restart")
MAX_BODY = 1 << 20  # as the server's API takes


@attrs.define
class AgentRequestStats:
    requests: int = 0
    errors: int = 0


def _error(error: ApiError) -> Response:
    response = jsonify(error.body())
    response.status_code = error.code.http_status
    return response


def _ok(value: Any, status: int = 200) -> Response:
    response = jsonify(unstructure(value))
    response.status_code = status
    return response


def create_agent_app(shared: Any, *, secret: str | None = None,
                     body_timeout_s: float | None = None) -> tuple[QuartTrio, AgentRequestStats]:
    """The agent's app over ``shared`` (the daemon's context: config, lifecycle, endpoint,
    supervisor, ``request_shutdown``, and ``uplink``, the ``UplinkNodeLink``).

    Args:
        secret: when set (the loopback-TCP fallback), every request must carry
            ``Authorization: Bearer <secret>``.
        body_timeout_s: the longest a request's body may take to arrive; then 408.
    """
    app = QuartTrio("gpuplaned-agent")
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY
    if body_timeout_s is not None:
        app.config["BODY_TIMEOUT"] = body_timeout_s
    app.url_map.merge_slashes = False
    stats = AgentRequestStats()
    expected = f"Bearer {secret}".encode() if secret else None
    link: UplinkNodeLink = shared.uplink

    @app.before_request
    async def gate() -> None:
        stats.requests += 1
        if expected is not None:
            given = request.headers.get("Authorization", "").encode()
            if not hmac.compare_digest(given, expected):
                raise ApiError(ErrorCode.UNAUTHORIZED, "missing or wrong bearer token for the control endpoint")
        state = shared.lifecycle.state
        if state is DaemonState.NOT_READY and request.path != "/api/v1/daemon":
            raise ApiError(ErrorCode.NOT_READY, f"the agent is starting (its link to {link.server} is "
                                                f"{link.state}); retry shortly", {"state": state.value})
        if state not in (DaemonState.READY, DaemonState.NOT_READY) and not (
                request.method == "GET" and request.path == "/api/v1/daemon"):
            raise ApiError(ErrorCode.STOPPING, "gpuplaned is shutting down", {"state": state.value})

    @app.after_request
    async def count(response: Response) -> Response:
        if response.status_code >= 400:
            stats.errors += 1
        response.headers[API_VERSION_HEADER] = str(API_VERSION)
        return response

    @app.errorhandler(ApiError)
    async def api_error(error: ApiError) -> Response:
        return _error(error)

    @app.errorhandler(HTTPException)
    async def http_error(error: HTTPException) -> Response:
        if error.code == 404:
            return _error(ApiError(ErrorCode.NOT_FOUND, (
                f"no such endpoint on this agent: {request.method} {request.path}; this daemon is a GPUPlane agent, "
                f"and the server at {link.server} serves the API (jobs, runs, nodes, logs)"), {"server": link.server}))
        if error.code == 405:
            return _error(ApiError(ErrorCode.METHOD_NOT_ALLOWED, f"{request.method} is not allowed on {request.path}"))
        if error.code == 413:
            return _error(ApiError(ErrorCode.PAYLOAD_TOO_LARGE, f"the body is over {MAX_BODY} bytes"))
        if error.code == 408:
            return _error(ApiError(ErrorCode.REQUEST_TIMEOUT, "the body did not arrive in time"))
        return _error(ApiError(ErrorCode.BAD_REQUEST, error.description or error.name))

    @app.errorhandler(Exception)
    async def internal_error(error: Exception) -> Response:
        log.exception("unhandled error in %s %s", request.method, request.path)
        return _error(ApiError(ErrorCode.INTERNAL, f"internal error: {type(error).__name__}"))

    @app.get("/api/v1/daemon")
    async def get_daemon() -> Response:
        body = unstructure(_daemon_info(shared))
        body["uplink"] = unstructure(link.status())
        return jsonify(body)

    @app.post("/api/v1/daemon/shutdown")
    async def shutdown() -> Response:
        # The reply leaves first: the request only wakes the daemon's main task.
        shared.request_shutdown("shutdown requested over the control API")
        return _ok({"state": DaemonState.STOPPING.value}, 202)

    @app.get("/api/v1/actors")
    async def get_actors() -> Response:
        return _ok({"actors": [_actor_info(s) for s in shared.supervisor.snapshots()]})

    @app.get("/api/v1/actors/<name>")
    async def get_actor(name: str) -> Response:
        try:
            return _ok({"actor": _actor_info(shared.supervisor.snapshot(name))})
        except UnknownActor:
            raise _unknown_actor(shared, name) from None

    @app.post("/api/v1/actors/<name>/<verb>")
    async def actor_command(name: str, verb: str) -> Response:
        if verb not in ACTOR_VERBS:
            raise ApiError(ErrorCode.NOT_FOUND, f"unknown actor command {verb!r}", {"verbs": list(ACTOR_VERBS)})
        if shared.lifecycle.state is not DaemonState.READY:
            raise ApiError(ErrorCode.STOPPING, "the daemon is not running its actors now")
        try:
            snapshot = await getattr(shared.supervisor, verb)(name)
        except UnknownActor:
            raise _unknown_actor(shared, name) from None
        except ActorNotStoppable as exc:
            raise ApiError(ErrorCode.CONFLICT, str(exc), {"actor": name}) from None
        return _ok({"actor": _actor_info(snapshot)})

    async def forward() -> Response:
        """An SDK call, to the server over the uplink; its answer as the server gave it."""
        raw = await request.get_data()
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
            call = check({"method": request.method, "path": path, "body": body}, SessionCall)
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
        response = jsonify(reply.body)
        response.status_code = reply.status
        return response

    @app.post("/api/v1/sessions")
    async def open_session() -> Response:
        return await forward()

    @app.route("/api/v1/sessions/<path:rest>", methods=["GET", "POST"])
    async def session_call(rest: str) -> Response:
        return await forward()

    @app.get("/api/v1/runs/<run_id>/summary")
    async def run_summary(run_id: str) -> Response:
        return await forward()

    return app, stats


def _daemon_info(shared: Any) -> DaemonInfo:
    endpoint = shared.endpoint
    cfg = shared.config
    return DaemonInfo(
        version=gpuplaned.__version__,
        api_version=API_VERSION,
        pid=os.getpid(),
        role=cfg.role,
        state=shared.lifecycle.state.value,
        uptime_s=round(trio.current_time() - shared.started_at, 3),
        started_at=int(shared.started_wall * 1000),
        endpoints=Endpoints(unix=endpoint.unix_path,
                            tcp=f"127.0.0.1:{endpoint.tcp_port}" if endpoint.tcp_port is not None else None),
        runtime_dir=str(cfg.runtime_dir),
        home=str(cfg.home),
        config_file=str(cfg.config_file) if cfg.config_file else None,
        tasks=_count_tasks(),
    )


def _count_tasks() -> int:
    count, pending = 0, [trio.lowlevel.current_root_task()]
    while pending:
        task = pending.pop()
        count += 1
        for nursery in task.child_nurseries:
            pending.extend(nursery.child_tasks)
    return count


def _actor_info(snapshot: ActorSnapshot) -> ActorInfo:
    return ActorInfo(
        name=snapshot.name,
        state=snapshot.state.value,
        uptime_s=round(snapshot.uptime_s, 3),
        restarts=snapshot.restarts,
        last_error=snapshot.last_error,
        last_error_at=int(snapshot.last_error_at * 1000) if snapshot.last_error_at is not None else None,
        depends_on=list(snapshot.depends_on),
        stats=unstructure(snapshot.stats) if snapshot.stats is not None else None,
    )


def _unknown_actor(shared: Any, name: str) -> ApiError:
    return ApiError(ErrorCode.NOT_FOUND, f"no actor named {name!r}", {"actor": name, "actors": shared.supervisor.names})
