"""JSON responses: every body goes through the one converter."""

from __future__ import annotations

from typing import Any

from quart import Response, jsonify

from gpuplaned.protocol.converter import unstructure
from gpuplaned.protocol.errors import ApiError


def ok(value: Any, status: int = 200) -> Response:
    response = jsonify(unstructure(value))
    response.status_code = status
    return response


def error_response(error: ApiError) -> Response:
    response = jsonify(error.body())
    response.status_code = error.code.http_status
    return response
