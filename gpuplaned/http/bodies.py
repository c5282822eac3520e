"""Reading request bodies and query parameters, with errors that name the problem."""

from __future__ import annotations

import functools
import json
import re
import typing
from typing import Any, TypeVar

import attrs
from quart import g, request

from gpuplaned.protocol import bounded_json
from gpuplaned.protocol.converter import structure
from gpuplaned.protocol.errors import ApiError, ErrorCode

T = TypeVar("T")


async def json_body() -> Any:
    raw = await request.get_data()
    if not raw:
        raise ApiError(ErrorCode.BAD_REQUEST, "the request needs a JSON body")
    try:
        body = bounded_json.loads(raw)
    except ValueError as exc:  # UnicodeDecodeError and bounded_json.TooDeep too
        raise ApiError(ErrorCode.BAD_REQUEST, f"the body is not valid JSON: {exc}") from None
    if _may_hold_surrogates(raw):
        _check_text(body)
    g.json_body = DecodedBody(len(raw), body)  # the audit record's (audit_routes): not read and decoded twice
    return body


@attrs.frozen
class DecodedBody:
    """A request's body as its route read it: its size, and what it decoded to."""

    size: int
    value: Any


# Where a lone surrogate can come from in a UTF-8 body: an escape (\uD800-\uDFFF, either
# case) or its three raw bytes (ED A0-BF xx), which ``json.loads`` decodes with
# "surrogatepass" instead of refusing. ED is only ever a lead byte, so neither pattern
# can match inside another character.
_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")


def _may_hold_surrogates(raw: bytes) -> bool:
    """Whether the decoded body could hold a lone surrogate. Walking every value of a metric
    batch cost more than decoding it, so only a body with a surrogate in it is walked (an
    escaped pair, as ``json.dumps`` writes an emoji, is walked and passes). A UTF-16 or
    UTF-32 body (``json.loads`` reads those too) is always walked."""
    if json.detect_encoding(raw) not in ("utf-8", "utf-8-sig"):
        return True
    if b"\\" not in raw and b"\xed" not in raw:  # one memchr each: a metric batch has neither
        return False
    return _SURROGATE.search(raw) is not None


def _check_text(value: Any) -> None:
    """JSON may escape a lone surrogate ("\\ud800"), which is no text: nothing could store,
    print or pass it to a process, so it is refused here for every route at once."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ApiError(ErrorCode.BAD_REQUEST, "the body holds a string that is not valid Unicode "
                           "(a lone surrogate escape)") from None
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_text(key)
            _check_text(item)
    elif isinstance(value, list):
        for item in value:
            _check_text(item)


def query_args(cls: type[T]) -> T:
    """The request's query parameters as a ``cls`` (an attrs class with ``field`` bounds).

    A query holds only text: an int field's value is read as a base-10 integer and a list
    field's as comma-separated items, then the converter checks them as it checks a body.
    Parameters the class does not name are left alone (``token=`` is refused by the app).
    """
    data = {}
    for name, hint in _query_fields(cls):
        raw = request.args.get(name)
        if raw is not None:
            data[name] = _from_text(name, raw, hint)
    return structure(data, cls, what="the query")


@functools.cache
def _query_fields(cls: type) -> tuple[tuple[str, Any], ...]:
    """``cls``'s fields and their types, resolved once: ``get_type_hints`` evaluates every
    annotation's text, ~8 us a field on every request."""
    hints = typing.get_type_hints(cls)
    return tuple((attribute.name, hints[attribute.name]) for attribute in attrs.fields(cls))


def _from_text(name: str, raw: str, hint: Any) -> Any:
    kinds = set(typing.get_args(hint)) | {hint}
    if int in kinds:
        try:
            return int(raw)
        except ValueError:
            raise ApiError(ErrorCode.BAD_REQUEST, f"{name}: must be an integer, got {raw!r}", {"field": name}) from None
    if any(typing.get_origin(kind) in (list, tuple) for kind in kinds):
        return [item.strip() for item in raw.split(",") if item.strip()]
    return raw
