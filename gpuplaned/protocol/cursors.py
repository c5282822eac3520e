"""Opaque list cursors: where the next page starts, newest first (keyset pagination).

A cursor names the last item a page returned, not an offset, so items inserted while a
client pages never shift what it sees: no item is repeated or skipped. It is base64url of a
small JSON array tagged with the list it belongs to, so a cursor from one list handed to
another is refused instead of misread.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from gpuplaned.protocol import bounded_json
from gpuplaned.protocol.errors import ApiError, ErrorCode


def encode(kind: str, *key: Any) -> str:
    raw = json.dumps([kind, *key], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


T = TypeVar("T")


def split_page(kind: str, found: Sequence[T], limit: int,
               key: Callable[[T], tuple[Any, ...]] = lambda row: (row.created_at, row.id),
               ) -> tuple[list[T], str | None]:
    """``found`` (read with ``limit + 1``) as the page and the next page's cursor (None: no more)."""
    page = list(found[:limit])
    return page, encode(kind, *key(page[-1])) if len(found) > limit else None


def decode(kind: str, cursor: str | None, shape: tuple[type, ...]) -> tuple[Any, ...] | None:
    """The key inside ``cursor`` (None when no cursor was given).

    Raises:
        ApiError: bad_request when the cursor is not one this list handed out.
    """
    if not cursor:
        return None
    try:
        value = bounded_json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (binascii.Error, ValueError):  # UnicodeDecodeError and bounded_json.TooDeep too
        value = None
    if (not isinstance(value, list) or len(value) != len(shape) + 1 or value[0] != kind
            or not all(isinstance(v, t) and not isinstance(v, bool) for v, t in zip(value[1:], shape))
            or any(isinstance(v, int) and not -(1 << 63) <= v < 1 << 63 for v in value[1:])):
        raise ApiError(ErrorCode.BAD_REQUEST, "cursor: not a cursor from this list (pass next_cursor back as it is)",
                       {"field": "cursor"})
    return tuple(value[1:])
