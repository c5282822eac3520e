"""The OpenAPI 3.1 document of the control API, served at ``GET /api/v1/openapi.json``: generated.

Paths come from the route declarations (``gpuplaned.http.routes``: each route's rule, body,
query, reply and error statuses, the same declaration that mounts and checks it) of the
modules ``route_modules.DOCUMENTED`` lists, the list the app registers too. Schemas
come from the attrs classes those name, through ``gpuplaned.protocol.schemas`` (the generator
MCP's tools use too). ``tests/http/test_openapi.py``
fails when the document and the app's routes differ, and checks real replies against it.
"""

from __future__ import annotations

import copy
import functools
import re
import typing
from typing import Any

import attrs

import gpuplaned
from gpuplaned.config import ROLES
from gpuplaned.http import idempotency
from gpuplaned.http import route_modules  # noqa: F401  (importing them declares the routes described)
from gpuplaned.http.routes import ALL, Reply, Route, Routes, Stream
from gpuplaned.http.scopes import is_public, required_scope
from gpuplaned.lifecycle import DaemonState
from gpuplaned.protocol.control import ActorInfo, DaemonInfo, ShutdownReply
from gpuplaned.protocol.errors import ErrorCode
from gpuplaned.protocol.job_wire import Job
from gpuplaned.protocol.schemas import REF, SchemaSet
from gpuplaned.protocol.version import API_VERSION
from gpuplaned.runtime.states import ActorState
from gpuplaned.service.api.ui_sessions import COOKIE, CSRF_HEADER

OPENAPI_VERSION = "3.1.0"
PATH = "/api/v1/openapi.json"

# Enums whose values another layer owns (the wire type cannot import them).
_ENUMS: dict[tuple[type, str], typing.Iterable[Any]] = {
    (DaemonInfo, "state"): [s.value for s in DaemonState], (DaemonInfo, "role"): ROLES,
    (ActorInfo, "state"): [s.value for s in ActorState], (ShutdownReply, "state"): [DaemonState.STOPPING.value],
}
# A path segment: werkzeug routes on the decoded path, so a "/" would reach another route,
# and "." or ".." are folded away by URL normalisation before the request leaves the client.
_SEGMENT = {"type": "string", "minLength": 1, "pattern": "^[^/]*[^/.][^/]*$"}
_RULE_PARAM = re.compile(r"<(?:[^:<>]+:)?([^<>]+)>")


@attrs.frozen(kw_only=True)
class OpenApiDocument:  # the reply of the route below
    openapi: str
    info: dict[str, Any]
    paths: dict[str, Any]

    __schema__ = {"additionalProperties": True}


DOCUMENT = Routes("daemon").get(PATH, "getOpenApi", "This document", Reply(200, OpenApiDocument, "OpenAPI 3.1."))


# --- schemas from the attrs classes ---------------------------------------------------------


def _stream(schemas: SchemaSet, stream: Stream) -> dict[str, Any]:
    """One Server-Sent Event of ``stream``: its schema describes the event (``event``, ``data``, ``id``),
    as OpenAPI 3.2's ``itemSchema`` does and as tools such as schemathesis read it in 3.1."""
    kinds = []
    for kind in stream.kinds:
        payload: dict[str, Any] = {"type": "string"}
        if kind.data is not None:
            payload.update(contentMediaType="application/json", contentSchema=schemas.ref(kind.data))
        one: dict[str, Any] = {"type": "object", "properties": {"event": {"enum": list(kind.names)},
                                                                "data": payload}, "required": ["event", "data"]}
        if kind.id_pattern is not None:
            one["properties"]["id"] = {"type": "string", "pattern": kind.id_pattern}
            one["required"].append("id")
        kinds.append(one)
    out = kinds[0] if len(kinds) == 1 else {"oneOf": kinds}
    schemas.components[stream.name] = {**out, "description": stream.description}
    return {"$ref": REF + stream.name}


def _error_schema() -> dict[str, Any]:
    def closed(properties: dict[str, Any]) -> dict[str, Any]:
        return {"type": "object", "properties": properties, "required": list(properties),
                "additionalProperties": False}

    return {**closed({"error": closed({
        "code": {"type": "string", "enum": [c.value for c in ErrorCode]},
        "message": {"type": "string", "description": "for people; names the field or value at fault"},
        "details": {"type": "object", "description": "machine-readable context, e.g. field, allowed values"},
    })}), "description": "Every error, whatever the route or status."}


# --- paths from the route declarations ------------------------------------------------------

_STATUS_TEXT = {
    400: "The request is malformed: a bad parameter or body (details.field names it).",
    401: "HTTP front only: missing or unknown bearer token.",
    403: "HTTP front only: the token lacks the scope this route needs.",
    404: "No such object (or no such route).",
    408: "The body did not arrive within [http] body_timeout_s; the connection is closed.",
    409: "The object is not in a state that allows this, or the Idempotency-Key was used for another body.",
    413: "The body is larger than 1 MiB.",
    415: "The body's Content-Type is not application/json (a browser's form cannot send one without asking).",
    500: "A bug: the daemon logged the traceback.",
    503: "The daemon is starting or stopping, or its role has no such service; store_unavailable: the store "
         "actor is not running, so nothing was written (retry once it runs again); unavailable on the TCP "
         "front: it has [http] max_connections connections open.",
}
_ON_EVERY_ROUTE = (401, 403, 500, 503)
_HEADERS = {"X-GPUPlane-API": {"$ref": "#/components/headers/ApiVersion"}}


def _error_responses() -> dict[str, Any]:
    out = {}
    for status, text in _STATUS_TEXT.items():
        codes = [c.value for c in ErrorCode if c.http_status == status]
        schema = {"allOf": [{"$ref": REF + "Error"},
                            {"properties": {"error": {"properties": {"code": {"enum": codes}}}}}]}
        out[f"E{status}"] = {"description": text, "headers": _HEADERS,
                             "content": {"application/json": {"schema": schema}}}
    return out


def _query_parameters(cls: type, schemas: SchemaSet) -> list[dict[str, Any]]:
    hints = typing.get_type_hints(cls)
    out = []
    for attribute in attrs.fields(cls):
        schema, required = schemas.field(cls, attribute, hints[attribute.name], request=True)
        param: dict[str, Any] = {"name": attribute.name, "in": "query", "required": required}
        if "description" in schema:
            param["description"] = schema.pop("description")
        if schema.get("type") == "string" and not {"minLength", "pattern", "enum", "const"} & schema.keys():
            schema["minLength"] = 1  # gpuplaned.http.app.refuse_empty_query_values
        param["schema"] = schema
        if "array" in schema.get("type", ()):
            param.update(style="form", explode=False)  # comma-separated: gpuplaned.http.bodies.query_args
        out.append(param)
    return out


def _operation(route: Route, schemas: SchemaSet) -> dict[str, Any]:
    parameters = []
    for name in _RULE_PARAM.findall(route.rule):
        declared = next((p for p in route.params if p.name == name), None)
        if declared is None:
            raise TypeError(f"{route.method} {route.rule}: the path parameter {name} has no description")
        parameters.append({"name": name, "in": "path", "required": True, "description": declared.description,
                           "schema": declared.schema or _SEGMENT})
    if route.query is not None:
        parameters += _query_parameters(route.query, schemas)
    parameters += [{"name": p.name, "in": p.where, "required": False, "schema": p.schema or {"type": "string"},
                    "description": p.description} for p in route.params if p.where != "path"]
    reply = route.reply
    if isinstance(reply.type, Stream):
        content = {"text/event-stream": {"schema": _stream(schemas, reply.type)}}
    else:
        content = {"application/json": {"schema": schemas.ref(reply.type)}}
    responses: dict[str, Any] = {str(reply.status): {"description": reply.description,
                                                     "headers": {**_HEADERS, **reply.headers}, "content": content}}
    for other in route.also:
        responses[str(other.status)] = {"description": other.description, "headers": {**_HEADERS, **other.headers},
                                        "content": {"application/json": {"schema": schemas.ref(other.type)}}}
    errors = {*route.errors, *_ON_EVERY_ROUTE, *((408,) if route.body else ()),
              *((400,) if any(p["in"] == "query" for p in parameters) else ())}
    if route.method == "POST":  # every POST takes an Idempotency-Key (gpuplaned.http.idempotency)
        errors |= {400, 409}
        parameters.append({"$ref": "#/components/parameters/IdempotencyKey"})
    for status in sorted(errors):
        responses[str(status)] = {"$ref": f"#/components/responses/E{status}"}
    op: dict[str, Any] = {"operationId": route.operation_id, "summary": route.summary, "tags": [route.tag]}
    op["description"] = _security_note(route, op)
    if not op["description"]:
        del op["description"]
    if parameters:
        op["parameters"] = parameters
    if route.body is not None:
        schema = schemas.ref(route.body, request=True) if attrs.has(route.body) else {"type": "object"}
        op["requestBody"] = {"required": route.body_required, "content": {"application/json": {"schema": schema}}}
    op["responses"] = dict(sorted(responses.items()))
    return op


def _security_note(route: Route, op: dict[str, Any]) -> str:
    """Each operation names the token scope it needs on the HTTP front (``gpuplaned.http.scopes``);
    an OpenAPI 3.1 bearer requirement may list such roles."""
    if is_public(route.rule):
        op["security"] = []
        return f"{route.description or ''} HTTP front: no credentials needed.".strip()
    scope = required_scope(route.rule, route.method)
    op["security"] = [{"bearer": [scope]}, {"session": [scope]}]
    return f"{route.description or ''} HTTP front: a token with the `{scope}` scope.".strip()


def _paths(schemas: SchemaSet) -> dict[str, dict[str, Any]]:
    paths: dict[str, dict[str, Any]] = {}
    for route in ALL:
        path = _RULE_PARAM.sub(r"{\1}", route.rule)
        paths.setdefault(path, {})[route.method.lower()] = _operation(route, schemas)
    return paths


_DESCRIPTION = """\
The control API of gpuplaned: jobs and their logs, nodes and their metrics, events, and the
daemon's own actors.

The same API is served on the local control socket (a Unix socket, or loopback TCP where
none can be made) and on the HTTP front. **The Unix socket needs no authentication**: its
file permissions are the access control. The loopback-TCP fallback needs the bearer secret
from the runtime dir, and the HTTP front an API token (`gpuplanectl token create`) whose
scope covers the route, or the session cookie of a browser signed in to the web UI
(`/api/v1/auth/login`, or a link from `gpuplanectl ui`).

Every error is a JSON body `{"error": {"code", "message", "details"}}`; every response
carries the `X-GPUPlane-API` header. Timestamps are integers, ms since the epoch. Every POST
takes an optional `Idempotency-Key`, so a client can retry it safely.

Not described here: the agents' WebSocket, `/api/v1/agent/ws`.
"""


@functools.cache
def _build() -> dict[str, Any]:
    schemas = SchemaSet(_ENUMS)
    schemas.components["Error"] = _error_schema()
    paths = _paths(schemas)
    return {
        "openapi": OPENAPI_VERSION,
        "info": {"title": "GPUPlane control API", "version": gpuplaned.__version__, "description": _DESCRIPTION,
                 "license": {"name": "MIT", "identifier": "MIT"}},
        "tags": [{"name": name} for name in ("jobs", "runs", "projects", "logs", "nodes", "events", "daemon",
                                             "tokens", "auth", "webhooks")],
        "security": [{"bearer": []}],
        "paths": paths,
        "components": {
            "securitySchemes": {"bearer": {
                "type": "http", "scheme": "bearer",
                "description": "An API token on the HTTP front, the runtime dir's secret on the loopback-TCP "
                               "fallback; none on the Unix socket."},
                "session": {
                    "type": "apiKey", "in": "cookie", "name": COOKIE,
                    "description": f"A browser signed in to the web UI (HTTP front only); with it, a request "
                                   f"other than GET/HEAD must also send {CSRF_HEADER}: 1."}},
            "headers": {"ApiVersion": {"required": True, "description": "the API version the daemon speaks",
                                       "schema": {"type": "string", "const": str(API_VERSION)}}},
            "schemas": schemas.components,
            "parameters": {"IdempotencyKey": {
                "name": idempotency.HEADER, "in": "header", "required": False,
                "schema": {"type": "string", "minLength": 1, "maxLength": idempotency.MAX_KEY,
                           "pattern": "^[\\x20-\\x7e]+$"},
                "description": "Retry-safe POST: a repeat with the same key and body gets the first answer again "
                               "(marked Idempotent-Replayed: true) for 24 h; the same key with another body, or "
                               "while the first is still being answered, is 409. Keys are per caller and path. "
                               "A reply that carries a secret (a new token, a login link) is never kept: its "
                               "repeat is 409 naming what the first request made. Public routes keep no key."}},
            "responses": _error_responses(),
        },
    }


def document() -> dict[str, Any]:
    """The OpenAPI 3.1 document (a fresh copy: callers may change it)."""
    return copy.deepcopy(_build())
