"""Routes for SDK sessions (what ``gpuplane.init()`` opens) and their metric batches."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from quart import Response, g
from quart_trio import QuartTrio

from gpuplaned.http.responses import ok
from gpuplaned.http.routes import Param, Reply, Routes
from gpuplaned.protocol.session_replies import BatchReply, SessionCreated, SessionEnvReply, SessionList, SessionReply
from gpuplaned.service.api import sessions
from gpuplaned.service.api.sessions import BatchCreate, SessionCreate, SessionFinish

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext


api = Routes("runs")
_RUN = Param("run_id", "the run's id")
_SESSION = Param("session_id", "the session's id (a UUIDv7)")
_ENV = "the process: python, argv, git commit and dirty flag, package versions, CUDA_VISIBLE_DEVICES... (at most 64 KB)"

OPEN = api.post("/api/v1/sessions", "openSession", "Open an SDK session on a run (gpuplane.init)",
                Reply(201, SessionCreated, "The session and its run (the existing one for a known session_id)."),
                errors=(400, 403, 409, 413), body=SessionCreate,
                description="Idempotent with a session_id: the SDK re-opens its session when the daemon comes back, "
                            "and a spool replay (the daemon at start, gpuplanectl sync) opens it again.")
RUN_SESSIONS = api.get("/api/v1/runs/<run_id>/sessions", "listRunSessions",
                       "A run's SDK sessions (one per rank or resume), oldest first",
                       Reply(200, SessionList, "The sessions."), errors=(404,), params=(_RUN,))
SESSION = api.get("/api/v1/sessions/<session_id>", "getSession", "One SDK session",
                  Reply(200, SessionReply, "The session."), errors=(404,), params=(_SESSION,))
BATCH = api.post("/api/v1/sessions/<session_id>/batches", "addBatch", "Store a batch of a session's metric points, "
                                                                     "once",
                 Reply(200, BatchReply, "Answered after the batch is committed; a resent seq is a duplicate."),
                 errors=(400, 403, 404, 409, 413), body=BatchCreate, params=(_SESSION,))
ENV = api.post("/api/v1/sessions/<session_id>/env", "addSessionEnv", "Record the training process's environment on "
                                                                    "its run",
               Reply(200, SessionEnvReply, "Whether it was kept."), errors=(400, 403, 404, 409, 413), body=dict,
               params=(_SESSION,), description=f"The body: {_ENV}.")
FINISH = api.post("/api/v1/sessions/<session_id>/finish", "finishSession", "Finish an SDK session (an SDK run ends "
                                                                          "with its last session)",
                  Reply(200, SessionReply, "The finished session."), errors=(400, 403, 404, 409, 413),
                  body=SessionFinish, params=(_SESSION,))


def _caller() -> Any:
    """Who sent the request on the HTTP front; None on the trusted local socket. An SDK token
    writes only to the runs it owns (``gpuplaned.service.access.owns_run``)."""
    return getattr(g, "caller", None)


def register(app: QuartTrio, shared: ServerContext) -> None:
    @OPEN.on(app)
    async def open_session(body: SessionCreate) -> Response:
        return ok(await sessions.open_session(shared, body, _caller()), 201)

    @RUN_SESSIONS.on(app)
    async def list_run_sessions(run_id: str) -> Response:
        return ok(await sessions.list_run_sessions(shared, run_id))

    @SESSION.on(app)
    async def get_session(session_id: str) -> Response:
        return ok(await sessions.get_session(shared, session_id))

    @BATCH.on(app)
    async def add_batch(session_id: str, body: BatchCreate) -> Response:
        return ok(await sessions.add_batch(shared, session_id, body, _caller()))

    @ENV.on(app)
    async def add_env(session_id: str, body: dict[str, Any]) -> Response:
        return ok(await sessions.add_env(shared, session_id, body, _caller()))

    @FINISH.on(app)
    async def finish_session(session_id: str, body: SessionFinish) -> Response:
        return ok(await sessions.finish_session(shared, session_id, body, _caller()))
