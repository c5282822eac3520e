"""``field``: one declaration of an edge field's bounds, used twice.

A request body or query class declares each field's bounds (minimum, maximum, lengths,
pattern, enum) once, here; the attrs validator built from them checks what the converter
structured, and ``gpuplaned.http.openapi`` writes the same bounds into the field's JSON
Schema (``schema_of``). A bound the validator checks is a bound the document states, so a
client that follows the document is never refused, and one that does not is.

Patterns are searched, as JSON Schema does (``pattern`` is unanchored): write ``^...$``.
A failure raises ``FieldInvalid`` with the field's name; ``message`` (``{value}`` or
``{value!r}`` in it stands for the value) keeps a message the clients know.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from typing import Any

import attrs

from gpuplaned.protocol.converter import FieldInvalid

SCHEMA = "gpuplane.schema"  # the attrs metadata key: the field's own JSON Schema keywords
DOCUMENTED_AS = "gpuplane.documented_as"  # the type the document shows, where the field keeps raw JSON


@attrs.frozen
class _Unset:
    """Absent from the body: a PATCH changes only the fields it names."""

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()


def field(*, default: Any = attrs.NOTHING, factory: Callable[[], Any] | None = None, description: str | None = None,
          minimum: float | None = None, maximum: float | None = None, exclusive_minimum: float | None = None,
          min_length: int | None = None, max_length: int | None = None, pattern: str | None = None,
          enum: Collection[Any] | None = None, min_items: int | None = None, max_items: int | None = None,
          items: dict[str, Any] | None = None, message: str | None = None,
          check: Callable[[Any], str | None] | None = None, schema: dict[str, Any] | None = None,
          documented_as: Any = None) -> Any:
    """An attrs field whose validator and JSON Schema come from the same bounds.

    ``check(value)`` returns a message for what no schema keyword says (a directory that must
    exist); ``items`` bounds each item of a list (``min_length``, ``pattern``...: the same names);
    ``schema`` adds keywords the validator leaves to the type (``prefixItems``, ``propertyNames``);
    ``documented_as`` is the type to document for a field kept as raw JSON and checked later.
    ``None`` and ``UNSET`` are never checked: the type (``X | None``) says whether null is allowed.
    """
    keywords = {k: v for k, v in (
        ("description", description), ("minimum", minimum), ("maximum", maximum),
        ("exclusiveMinimum", exclusive_minimum), ("minLength", min_length), ("maxLength", max_length),
        ("pattern", pattern), ("enum", list(enum) if enum is not None else None), ("minItems", min_items),
        ("maxItems", max_items)) if v is not None}
    if items is not None:
        keywords["items"] = {_CAMEL.get(k, k): list(v) if k == "enum" else v for k, v in items.items()}
    keywords.update(schema or {})
    if default is not attrs.NOTHING and default is not UNSET and "default" not in keywords and default is not None:
        keywords["default"] = default
    compiled = re.compile(pattern) if pattern is not None else None

    def validate(_: Any, attribute: attrs.Attribute, value: Any) -> None:
        if value is None or value is UNSET:
            return
        why = _fault(value, minimum, maximum, exclusive_minimum, min_length, max_length, compiled, enum,
                     min_items, max_items)
        if why is not None:
            raise FieldInvalid(attribute.name, say(message or why, value))
        for item in value if items is not None else ():
            if (why := _item_fault(item, **items)) is not None:
                raise FieldInvalid(attribute.name, say(message or why, item))
        if check is not None and (why := check(value)) is not None:
            raise FieldInvalid(attribute.name, why)

    metadata: dict[str, Any] = {SCHEMA: keywords}
    if documented_as is not None:
        metadata[DOCUMENTED_AS] = documented_as
    return attrs.field(default=default, factory=factory, validator=validate, metadata=metadata)


def say(template: str, value: Any) -> str:
    """``template`` with ``{value}``/``{value!r}`` filled (and any other brace left alone: a pattern has some)."""
    return template.replace("{value!r}", repr(value)).replace("{value}", str(value))


def _fault(value: Any, minimum: float | None, maximum: float | None, exclusive_minimum: float | None,
           min_length: int | None, max_length: int | None, pattern: re.Pattern[str] | None,
           enum: Collection[Any] | None, min_items: int | None, max_items: int | None) -> str | None:
    """What is wrong with ``value``, in the default words; None when nothing is."""
    if enum is not None and value not in enum:
        return f"must be one of {', '.join(map(str, enum))}, got {{value!r}}"
    if isinstance(value, (int, float)):
        if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
            low, high = "" if minimum is None else minimum, "" if maximum is None else maximum
            return f"must be between {low} and {high}, got {{value}}"
        if exclusive_minimum is not None and not value > exclusive_minimum:
            return f"must be more than {exclusive_minimum}, got {{value}}"
    if isinstance(value, str):
        if (min_length is not None and len(value) < min_length) or (max_length is not None and len(value) > max_length):
            return (f"must be {min_length or 0} to {max_length} characters" if max_length is not None
                    else f"must be at least {min_length} characters")
        if pattern is not None and not pattern.search(value):
            return f"must match {pattern.pattern}, got {{value!r}}"
    if isinstance(value, (list, tuple)):
        if (min_items is not None and len(value) < min_items) or (max_items is not None and len(value) > max_items):
            return (f"must hold {min_items or 0} to {max_items} items" if max_items is not None
                    else f"must hold at least {min_items} items")
    return None


_CAMEL = {"exclusive_minimum": "exclusiveMinimum", "min_length": "minLength", "max_length": "maxLength",
          "min_items": "minItems", "max_items": "maxItems"}


def _item_fault(value: Any, *, minimum: float | None = None, maximum: float | None = None,
                min_length: int | None = None, max_length: int | None = None, pattern: str | None = None,
                enum: Collection[Any] | None = None) -> str | None:
    compiled = re.compile(pattern) if pattern is not None else None
    return _fault(value, minimum, maximum, None, min_length, max_length, compiled, enum, None, None)


def schema_of(attribute: attrs.Attribute) -> dict[str, Any]:
    """The JSON Schema keywords ``field`` declared for ``attribute`` (none for a plain attrs field)."""
    return dict(attribute.metadata.get(SCHEMA, {}))


def doc(description: str | None = None, *, default: Any = attrs.NOTHING, factory: Callable[[], Any] | None = None,
        documented_as: Any = None, **keywords: Any) -> Any:
    """A reply field's documentation (JSON Schema keywords, e.g. ``enum``, ``minimum``), never checked:
    what the daemon writes needs no validator, but its readers need the words. ``documented_as``:
    the type to document for a field that carries JSON made elsewhere (a node's readings)."""
    if description is not None:
        keywords["description"] = description
    if "enum" in keywords:
        keywords["enum"] = list(keywords["enum"])
    metadata: dict[str, Any] = {SCHEMA: keywords}
    if documented_as is not None:
        metadata[DOCUMENTED_AS] = documented_as
    return attrs.field(default=default, factory=factory, metadata=metadata)
