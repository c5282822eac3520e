"""``GET /api/v1/openapi.json``: the API's own OpenAPI 3.1 document."""

from __future__ import annotations

from typing import TYPE_CHECKING

from quart import Response, jsonify
from quart_trio import QuartTrio

from gpuplaned.http import openapi

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext


def register(app: QuartTrio, shared: ServerContext) -> None:
    @openapi.DOCUMENT.on(app)
    async def openapi_document() -> Response:
        return jsonify(openapi.document())
