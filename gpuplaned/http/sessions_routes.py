"""Routes for SDK sessions (what ``gpuplane.init()`` opens) and their metric batches."""

from __future__ import annotations

from typing import TYPE_CHECKING

from quart import Response
from quart_trio import QuartTrio

from gpuplaned.http.bodies import json_body
from gpuplaned.http.responses import ok
from gpuplaned.service import sessions

if TYPE_CHECKING:
    from gpuplaned.daemon import DaemonContext


def register(app: QuartTrio, shared: DaemonContext) -> None:
    @app.post("/api/v1/sessions")
    async def open_session() -> Response:
        session = await sessions.open_session(shared, await json_body())
        return ok({"session_id": session.id, "run_id": session.run_id, "session": session}, 201)

    @app.get("/api/v1/runs/<run_id>/sessions")
    async def list_run_sessions(run_id: str) -> Response:
        return ok({"sessions": await sessions.list_run_sessions(shared, run_id)})

    @app.get("/api/v1/sessions/<session_id>")
    async def get_session(session_id: str) -> Response:
        return ok({"session": await sessions.get_session(shared, session_id)})

    @app.post("/api/v1/sessions/<session_id>/batches")
    async def add_batch(session_id: str) -> Response:
        return ok(await sessions.add_batch(shared, session_id, await json_body()))

    @app.post("/api/v1/sessions/<session_id>/env")
    async def add_env(session_id: str) -> Response:
        return ok(await sessions.add_env(shared, session_id, await json_body()))

    @app.post("/api/v1/sessions/<session_id>/finish")
    async def finish_session(session_id: str) -> Response:
        return ok({"session": await sessions.finish_session(shared, session_id, await json_body())})
