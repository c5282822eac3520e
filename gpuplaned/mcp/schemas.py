"""JSON Schema for the tools' inputs and outputs, from the same attrs classes (and the same
generator, ``gpuplaned.protocol.schemas``) as the REST document, so an agent and a REST client
read the same bounds.

The generator writes ``$ref``s into ``#/components/schemas``; an MCP tool's schema must stand
alone, so the components it uses travel with it as ``$defs``.
"""

from __future__ import annotations

from typing import Any

from gpuplaned.protocol.schemas import REF as _COMPONENTS
from gpuplaned.protocol.schemas import SchemaSet


def _relink(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: ("#/$defs/" + v[len(_COMPONENTS):] if k == "$ref" and isinstance(v, str)
                    and v.startswith(_COMPONENTS) else _relink(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_relink(v) for v in value]
    return value


def standalone(build: Any) -> dict[str, Any]:
    """``build(schemas)`` returns a schema that may refer to components; the schema, self-contained."""
    schemas = SchemaSet()
    top = build(schemas)
    out = _relink(top)
    if schemas.components:
        out["$defs"] = _relink(schemas.components)
    return out


def input_schema(cls: type, extra: dict[str, Any] | None = None, required: tuple[str, ...] = ()) -> dict[str, Any]:
    """A tool's arguments: the fields of ``cls`` (a request class: defaults are optional), plus
    ``extra`` properties the tool takes beside them (``dry_run``)."""
    def build(schemas: SchemaSet) -> dict[str, Any]:
        top = dict(schemas.object(cls, True))
        if extra:
            top["properties"] = {**top["properties"], **extra}
            top["required"] = [*top["required"], *required]
        return top
    return standalone(build)


NEXT_ACTION = {
    "type": "object",
    "properties": {"tool": {"type": "string"}, "arguments": {"type": "object"}, "why": {"type": "string"}},
    "required": ["tool", "arguments", "why"],
    "additionalProperties": False,
}


ADVICE = "advice"  # a semantic answer's own next steps, in words (its next_actions in REST)


def output_schema(reply: type) -> dict[str, Any]:
    """Every result: ``summary`` first, the REST reply's fields (``reply``), then ``next_actions``
    (tool calls). A reply that has its own ``next_actions`` (words) keeps them as ``advice``."""
    def build(schemas: SchemaSet) -> dict[str, Any]:
        body = schemas.object(reply, False)
        properties = dict(body["properties"])
        required = [name for name in body["required"] if name not in ("summary", "next_actions")]
        if "next_actions" in properties:
            properties[ADVICE] = properties.pop("next_actions")
            required.append(ADVICE)
        properties.pop("summary", None)
        out = dict(body)
        out["properties"] = {"summary": {"type": "string", "description": "one or two plain sentences"},
                             **properties, "next_actions": {"type": "array", "items": NEXT_ACTION}}
        out["required"] = ["summary", *required, "next_actions"]
        return out
    return standalone(build)


def flatten(summary: str, data: dict[str, Any], next_actions: list[Any]) -> dict[str, Any]:
    """A result as ``output_schema`` describes it."""
    rest = dict(data)
    assert isinstance(rest.pop("summary", ""), str), "a reply's own summary must be its words"
    if "next_actions" in rest:
        rest[ADVICE] = rest.pop("next_actions")
    return {"summary": summary, **rest, "next_actions": next_actions}
