"""Reading request bodies and query parameters, with errors that name the problem."""

from __future__ import annotations

import json
from typing import Any

from quart import request

from gpuplaned.protocol.errors import ApiError, ErrorCode


async def json_body() -> Any:
    raw = await request.get_data()
    if not raw:
        raise ApiError(ErrorCode.BAD_REQUEST, "the request needs a JSON body")
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(ErrorCode.BAD_REQUEST, f"the body is not valid JSON: {exc}") from None


def int_arg(name: str, default: int, low: int, high: int) -> int:
    raw = request.args.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ApiError(ErrorCode.BAD_REQUEST, f"{name}: must be an integer, got {raw!r}", {"field": name}) from None
    if not low <= value <= high:
        raise ApiError(ErrorCode.BAD_REQUEST, f"{name}: must be between {low} and {high}, got {value}",
                       {"field": name})
    return value
