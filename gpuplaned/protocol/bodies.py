"""The shape every JSON request body is checked against first: an object with known fields."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from gpuplaned.protocol.errors import ApiError, ErrorCode


def known_object(body: Any, known: Collection[str]) -> Mapping[str, Any]:
    """``body`` itself, once it is a JSON object holding only ``known`` fields.

    Raises:
        ApiError: bad_request naming the first unknown field (and listing the known ones).
    """
    if not isinstance(body, Mapping):
        raise ApiError(ErrorCode.BAD_REQUEST, "the body must be a JSON object")
    unknown = sorted(set(body) - set(known))
    if unknown:
        raise ApiError(ErrorCode.BAD_REQUEST, f"unknown field(s): {', '.join(unknown)}",
                       {"field": unknown[0], "known": sorted(known)})
    return body
