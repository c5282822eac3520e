"""``GET /api/v1/openapi.json``: the API's own OpenAPI 3.1 document."""

from __future__ import annotations

from typing import TYPE_CHECKING

from quart import Response, jsonify
from quart_trio import QuartTrio

from gpuplaned.http import openapi

if TYPE_CHECKING:
    from gpuplaned.daemon import DaemonContext


def register(app: QuartTrio, shared: DaemonContext) -> None:
    @app.get(openapi.PATH)
    async def openapi_document() -> Response:
        return jsonify(openapi.document())
