"""JSON Schema from the attrs classes, as the converter writes them: one generator for the REST
document (``gpuplaned.http.openapi``) and the MCP tools' inputs and outputs (``gpuplaned.mcp.schemas``),
so an agent and a REST client read the same shapes and the same bounds.

A field's type hint gives its JSON type, and the words and bounds declared with it
(``gpuplaned.protocol.fields``: ``field`` for what a request's validator checks, ``doc`` for a
reply's) are added. A request's field with a default is optional; a reply's fields are all
written, so all required (``doc(optional=True)`` says otherwise). Every object is closed.
A class is named by ``__schema_name__`` where the API's word differs from the class's
(``EventRow`` is an ``Event``), and ``__schema__`` adds keywords of its own.
"""

from __future__ import annotations

import enum
import inspect
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from gpuplaned.protocol.fields import DOCUMENTED_AS, schema_of

REF = "#/components/schemas/"
_SCALARS = {str: "string", int: "integer", float: "number", bool: "boolean"}


def schema_name(cls: type) -> str:
    return cls.__dict__.get("__schema_name__", cls.__name__)


class SchemaSet:
    """The components, filled as classes are referenced (a request class: its defaults are optional).

    ``enums`` adds the values of a field whose words another layer owns, which the wire type
    cannot import: ``(cls, field name) -> values``, for ``cls`` and its subclasses."""

    def __init__(self, enums: Mapping[tuple[type, str], Iterable[Any]] | None = None) -> None:
        self.components: dict[str, dict[str, Any]] = {}
        self.enums = dict(enums or {})

    def ref(self, cls: type, request: bool = False) -> dict[str, Any]:
        name = schema_name(cls)
        if name not in self.components:
            self.components[name] = {}  # taken before its fields: a class may refer to itself
            self.components[name] = self.object(cls, request)
        return {"$ref": REF + name}

    def of(self, hint: Any, request: bool) -> dict[str, Any]:
        """JSON Schema for a type, as the converter writes it (attrs classes by $ref)."""
        if hint is Any:
            return {}
        if hint in _SCALARS:
            return {"type": _SCALARS[hint]}
        if attrs.has(hint):
            return self.ref(hint, request)
        if hint is dict:
            return {"type": "object"}
        if isinstance(hint, type) and issubclass(hint, enum.Enum):
            return {"type": "string", "enum": [member.value for member in hint]}
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if origin in (typing.Union, types.UnionType):
            present = [a for a in args if a is not type(None)]
            if len(present) != 1:
                raise TypeError(f"no schema for the union {hint!r}")
            inner = self.of(present[0], request)
            return _nullable(inner) if len(present) < len(args) else inner
        if origin in (list, tuple):
            return {"type": "array", "items": self.of(args[0], request)}
        if origin is dict:
            return {"type": "object", "additionalProperties": self.of(args[1], request)}
        raise TypeError(f"no schema for {hint!r}")

    def field(self, cls: type, attribute: attrs.Attribute, hint: Any, request: bool) -> tuple[dict[str, Any], bool]:
        """A field's schema, and whether it is required."""
        keywords = schema_of(attribute)
        optional = keywords.pop("optional", False)
        for owner in cls.__mro__:
            if (owner, attribute.name) in self.enums:
                keywords["enum"] = list(self.enums[owner, attribute.name])
        schema = self.of(attribute.metadata.get(DOCUMENTED_AS, hint), request)
        if "anyOf" in keywords:
            schema = {}
        if isinstance(keywords.get("items"), dict) and "items" in schema:
            keywords["items"] = {**schema["items"], **keywords["items"]}
        schema.update(keywords)
        if "enum" in schema and "null" in schema.get("type", ()) and None not in schema["enum"]:
            schema["enum"] = [*schema["enum"], None]
        required = attribute.default is attrs.NOTHING if request else not optional
        return schema, required

    def object(self, cls: type, request: bool) -> dict[str, Any]:
        hints = typing.get_type_hints(cls)
        properties, required = {}, []
        for attribute in attrs.fields(cls):
            properties[attribute.name], needed = self.field(cls, attribute, hints[attribute.name], request)
            if needed:
                required.append(attribute.name)
        out: dict[str, Any] = {"type": "object"}
        if cls.__doc__:
            out["description"] = " ".join(inspect.cleandoc(cls.__doc__).split("\n\n")[0].split())
        out.update(properties=properties, required=required, additionalProperties=False)
        out.update(getattr(cls, "__schema__", {}))
        return out


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    kind = schema.get("type")
    if isinstance(kind, str):
        return {**schema, "type": [kind, "null"]}
    return {"anyOf": [schema, {"type": "null"}]}
