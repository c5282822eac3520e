"""Routes for checkpoints (seed 000 section 11.1, Checkpoints)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from quart import Response, request
from quart_trio import QuartTrio

from gpuplaned.http.responses import ok
from gpuplaned.service import run_records

if TYPE_CHECKING:
    from gpuplaned.daemon import DaemonContext


def register(app: QuartTrio, shared: DaemonContext) -> None:
    @app.get("/api/v1/runs/<run_id>/checkpoints")
    async def list_run_checkpoints(run_id: str) -> Response:
        return ok(await run_records.list_checkpoints(shared, run_id, request.args.get("metric") or None))

    @app.get("/api/v1/checkpoints/<checkpoint_id>")
    async def get_checkpoint(checkpoint_id: str) -> Response:
        return ok({"checkpoint": await run_records.get_checkpoint(shared, checkpoint_id)})
