"""The OpenAPI 3.1 document of the control API, served at ``GET /api/v1/openapi.json``.

Bodies are described from the wire types themselves: the attrs classes that the one
converter turns into JSON (``Job``, ``NodeInfo``, ``ActorInfo``...). A field added to one of
them shows up here without an edit; what a type cannot say (enums, bounds, descriptions,
the shape of a free-form dict) is written next to it. Paths and their parameters are
written out by hand, one entry per route, with the bounds the route code enforces;
``tests/http/test_openapi.py`` fails when they and the app's routes differ.
"""

from __future__ import annotations

import copy
import functools
import re
import types
import typing
from typing import Any

import attrs

import gpuplaned
from gpuplaned.config import ROLES
from gpuplaned.domain.event_types import EVENT_TYPES
from gpuplaned.domain.run_summary import PRIMARY_SOURCES
from gpuplaned.http import idempotency
from gpuplaned.http.scopes import is_public, required_scope
from gpuplaned.lifecycle import DaemonState
from gpuplaned.protocol.control import ActorInfo, DaemonInfo, Endpoints
from gpuplaned.protocol.errors import ErrorCode
from gpuplaned.protocol.job_wire import DEFAULT_STOP_GRACE_S, JOB_TYPES, MAX_PRIORITY, Job
from gpuplaned.protocol.version import API_VERSION, API_VERSION_HEADER
from gpuplaned.runtime.states import ActorState
from gpuplaned.service.control import ACTOR_VERBS
from gpuplaned.service.jobs import JOB_STATES, STREAMS
from gpuplaned.service.logs import MAX_PAGE, LogLine, LogPage
from gpuplaned.service.nodes_view import NodeInfo, SlotInfo
from gpuplaned.service.projects import (
    DIRECTIONS,
    MAX_DESCRIPTION,
    MAX_DISPLAY_NAME,
    MAX_UNIT,
    METRIC_PATTERN,
    METRIC_SCOPES,
    NAME_PATTERN,
)
from gpuplaned.service.runs import (
    DEFAULT_SERIES_LIMIT,
    MAX_SERIES_LIMIT,
    RUN_STATES,
    SERIES_COLUMNS,
    SERIES_ENCODINGS,
)
from gpuplaned.service.series_query import DEFAULT_POINTS, MAX_MS
from gpuplaned.service.sessions import FINISH_STATES
from gpuplaned.service.tokens import MAX_EXPIRES_IN_S, SCOPES, TokenInfo
from gpuplaned.service.ui_sessions import COOKIE, CSRF_HEADER, LINK_SCOPES, MAX_NEXT, NEXT_PATTERN, VIAS, UiSession
from gpuplaned.store.event_rows import SEVERITIES, EventRow
from gpuplaned.store.project_rows import Experiment, MetricDefinition, PrimaryMetric, Project, Ref
from gpuplaned.store.run_rows import Run
from gpuplaned.store.session_rows import Session
from gpuplaned.telemetry.samples import DiskSample, EccErrors, GpuSample, HostSample
from gpuplaned.tsdb.query import MAX_POINTS

OPENAPI_VERSION = "3.1.0"
PATH = "/api/v1/openapi.json"

_REF = "#/components/schemas/"
_SCALARS: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    int: {"type": "integer"},
    float: {"type": "number"},
    bool: {"type": "boolean"},
}
_MS = "ms since the epoch"

# A path segment: werkzeug routes on the decoded path, so a "/" would reach another route,
# and "." or ".." are folded away by URL normalisation before the request leaves the client.
_SEGMENT = {"type": "string", "minLength": 1, "pattern": "^[^/]*[^/.][^/]*$"}


# --- schemas from the wire types -----------------------------------------------------------


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    kind = schema.get("type")
    if isinstance(kind, str) and "enum" not in schema and "const" not in schema:
        return {**schema, "type": [kind, "null"]}
    return {"anyOf": [schema, {"type": "null"}]}


def _type_schema(hint: Any) -> dict[str, Any]:
    """JSON Schema for a field's type, as the converter writes it (attrs classes by $ref)."""
    if hint is Any:
        return {}
    if hint in _SCALARS:
        return dict(_SCALARS[hint])
    if attrs.has(hint):
        return {"$ref": _REF + hint.__name__}
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        present = [a for a in args if a is not type(None)]
        if len(present) != 1:
            raise TypeError(f"no schema for the union {hint!r}")
        inner = _type_schema(present[0])
        return _nullable(inner) if len(present) < len(args) else inner
    if origin in (list, tuple):
        return {"type": "array", "items": _type_schema(args[0])}
    if origin is dict:
        return {"type": "object", "additionalProperties": _type_schema(args[1])}
    raise TypeError(f"no schema for {hint!r}")


def _object(cls: type, notes: dict[str, dict[str, Any]] | None = None, *,
            description: str | None = None) -> dict[str, Any]:
    """An attrs class as a closed object: every field is always written, none is added.

    ``notes`` adds to (or, with a ``$ref``/``anyOf``, replaces) a field's schema.
    """
    notes = notes or {}
    hints = typing.get_type_hints(cls)
    properties = {}
    for field in attrs.fields(cls):
        schema = _type_schema(hints[field.name])
        note = notes.get(field.name, {})
        if "$ref" in note or "anyOf" in note:
            schema = dict(note)
        else:
            schema.update(note)
        properties[field.name] = schema
    unknown = set(notes) - set(properties)
    if unknown:
        raise TypeError(f"{cls.__name__} has no field(s) {sorted(unknown)}")
    return _closed(properties, description)


def _closed(properties: dict[str, Any], description: str | None = None) -> dict[str, Any]:
    """An object with exactly these properties, all required."""
    out: dict[str, Any] = {"type": "object"}
    if description:
        out["description"] = description
    out.update(properties=properties, required=list(properties), additionalProperties=False)
    return out


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": _REF + name}


def _series_column(kind: str | list[str], dtype: str, note: str = "") -> dict[str, Any]:
    """A column of GET /runs/{id}/series: numbers, or with encoding=base64 the base64 of its
    little-endian ``dtype`` values."""
    return {"anyOf": [{"type": "array", "items": {"type": kind}},
                      {"type": "string", "contentEncoding": "base64"}],
            "description": f"{note + '; ' if note else ''}base64: little-endian {dtype}"}


def _enum(values: typing.Iterable[str], description: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "string", "enum": list(values)}
    if description:
        out["description"] = description
    return out


def _ms(description: str = _MS, *, nullable: bool = False) -> dict[str, Any]:
    return {"type": ["integer", "null"] if nullable else "integer", "description": description}


_NEXT_CURSOR = {"type": ["string", "null"], "description": "pass as cursor= for the next page; null: no more"}


def _error_schema() -> dict[str, Any]:
    return _closed({"error": _closed({
        "code": _enum([c.value for c in ErrorCode]),
        "message": {"type": "string", "description": "for people; names the field or value at fault"},
        "details": {"type": "object", "description": "machine-readable context, e.g. field, allowed values"},
    })}, "Every error, whatever the route or status.")


def _gpu_reading() -> dict[str, Any]:
    schema = _object(GpuSample, {
        "error": {"description": "set when the GPU could not be read this period (gpu_lost: ...)"},
        "processes": {"type": "array", "items": _closed({
            "pid": {"type": "integer"},
            "gpu_memory_mb": {"type": ["integer", "null"]},
            "job_id": {"type": ["string", "null"]},
            "foreign": {"type": "boolean", "description": "not started by GPUPlane"},
        })},
    }, description="One GPU's latest readings; any reading may be null where the card lacks it.")
    schema["properties"]["owner_job_id"] = {"type": ["string", "null"]}
    schema["required"].append("owner_job_id")
    return schema


def _schemas() -> dict[str, dict[str, Any]]:
    job_id = {"type": "string", "description": "job_<ULID>"}
    series = {"type": "array", "items": {"type": ["number", "null"]}}
    counts = {"type": "array", "items": {"type": ["integer", "null"]}}
    return {
        "Error": _error_schema(),
        "Endpoints": _object(Endpoints, {
            "unix": {"description": "the control socket's path"},
            "tcp": {"description": "127.0.0.1:PORT when the control endpoint fell back to loopback TCP"},
        }),
        "DaemonInfo": _object(DaemonInfo, {
            "state": _enum(s.value for s in DaemonState),
            "role": _enum(ROLES),
            "started_at": _ms(),
        }),
        "ActorInfo": _object(ActorInfo, {
            "state": _enum(s.value for s in ActorState),
            "last_error_at": _ms(nullable=True),
            "stats": {"type": ["object", "null"], "description": "the actor's own counters"},
        }, description="One supervised actor (store, scheduler, runner, logs, monitor, ...)."),
        "ActorList": _closed({"actors": {"type": "array", "items": _ref("ActorInfo")}}),
        "ActorReply": _closed({"actor": _ref("ActorInfo")}),
        "ShutdownReply": _closed({"state": {"const": DaemonState.STOPPING.value}}),
        "JobSubmit": _job_submit(),
        "Job": _object(Job, {
            "id": job_id,
            "type": _enum(JOB_TYPES),
            "status": _enum(JOB_STATES),
            "node": {"description": "the selector: run only on this node"},
            "node_id": {"description": "where the job was dispatched"},
            "attempt": {"minimum": 0, "description": "0 until the first dispatch"},
            "max_attempts": {"minimum": 1},
            "gpu": {"minimum": 0},
            "created_at": _ms(),
            "started_at": _ms(nullable=True),
            "finished_at": _ms(nullable=True),
            "env": {"description": "name -> value; null where the value is not shown: in lists, to read-only "
                                   "callers, and always for names containing TOKEN, KEY, SECRET or PASSWORD"},
            "failure_reason": {"description": "a code: EXIT_CODE, SIGNAL(SIGSEGV), OOM, TIMEOUT, SPAWN_FAILED, "
                                              "SHIM_DIED, LOST"},
            "failure_message": {"description": "why it failed, in words"},
        }),
        "JobReply": _closed({"job": _ref("Job")}),
        "JobList": _closed({"jobs": {"type": "array", "items": _ref("Job")}, "next_cursor": _NEXT_CURSOR}),
        "Run": _object(Run, {
            "id": {"description": "run_<ULID>"},
            "attempt": {"description": "which attempt of its job this run is"},
            "source": _enum(("job", "sdk")),
            "status": _enum(RUN_STATES),
            "created_at": _ms(),
            "started_at": _ms(nullable=True),
            "finished_at": _ms(nullable=True),
            "project": {"description": "the project's name"},
            "experiment": {"description": "the experiment's name"},
            "config": {"description": "what the script passed to gpuplane.init(config=...)"},
        }, description="One attempt of a job, or a run a training script opened with the SDK."),
        "RunReply": _closed({
            "run": _ref("Run"),
            "project": {"anyOf": [_ref("Ref"), {"type": "null"}]},
            "experiment": {"anyOf": [_ref("Ref"), {"type": "null"}]},
            "primary_metric": {"anyOf": [_ref("RunPrimaryMetric"), {"type": "null"}]},
        }),
        "RunMetricsQuery": {
            "type": "object",
            "properties": {
                "run_ids": {"type": "array", "minItems": 1, "maxItems": 50, "items": {"type": "string",
                                                                                      "minLength": 1}},
                "names": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
                          "description": "names or patterns, comma-separated or a list; absent: all"},
                "x": _enum(("step", "ts")),
                "start": {"type": "integer", "minimum": 0, "maximum": MAX_MS},
                "end": {"type": "integer", "minimum": 0, "maximum": MAX_MS},
                "points": {"type": "integer", "minimum": 1, "maximum": MAX_POINTS},
            },
            "required": ["run_ids"],
            "additionalProperties": False,
        },
        "RunMetricsMany": _closed({"runs": {"type": "array", "items": _ref("RunMetrics")}}),
        "RunSummaryReply": _closed({"summary": _closed({
            "run_id": {"type": "string"},
            "metrics": {"type": "object", "description": "name -> {count, direction, latest: {step, ts, value}, "
                                                         "best: {step, value}, trend (losses)}",
                        "additionalProperties": {"type": "object"}},
            "progress": _closed({"step": {"type": ["integer", "null"]}}),
            "warnings": {"type": "array", "items": {"type": "string"}},
            "primary_metric": {"anyOf": [_ref("RunPrimaryMetric"), {"type": "null"}],
                               "description": "null: no primary metric is set for this run's experiment, "
                                              "project or globally"},
        })}),
        "RunMetrics": _closed({
            "run_id": {"type": "string"},
            "x_axis": _enum(("step", "ts")),
            "resolution": _enum(("raw",)),
            "width": {"type": "integer", "minimum": 1, "description": "bucket width in x units (1: every point)"},
            "x": {"type": "array", "items": {"type": "integer"}, "description": "each bucket's start (step or ms)"},
            "series": {"type": "object", "description": "metric name -> columns aligned with x; NaN and "
                                                        "infinite values read null, `nan` counts NaN points",
                       "additionalProperties": _closed({
                           "min": series, "max": series, "avg": series, "last": series,
                           "count": counts, "nan": counts,
                       })},
        }),
        "RunSeries": {
            "type": "object",
            "description": "Every raw point of one series in x order (equal steps by ts, equal ts in ingest "
                           "order); only the columns asked for.",
            "properties": {
                "run_id": {"type": "string"},
                "name": {"type": "string"},
                "x_axis": _enum(("step", "ts")),
                "encoding": _enum(SERIES_ENCODINGS),
                "count": {"type": "integer", "minimum": 0, "description": "points in this page"},
                "step": _series_column("integer", "int64"),
                "ts": _series_column("integer", "int64", _MS),
                "value": _series_column(["number", "null"], "float64",
                                        "json: NaN and infinities are null (see nonfinite)"),
                "nonfinite": _closed({k: {"type": "array", "items": {"type": "integer", "minimum": 0}}
                                      for k in ("NaN", "Infinity", "-Infinity")},
                                     "indices (in this page) of the values that are NaN or infinite"),
                "next_cursor": {"type": ["string", "null"],
                                "description": "pass as cursor for the next page; null: this was the last"},
            },
            "required": ["run_id", "name", "x_axis", "encoding", "count", "nonfinite", "next_cursor"],
            "additionalProperties": False,
        },
        "SessionCreate": {
            "type": "object",
            "properties": {
                "session_id": {"type": ["string", "null"],
                               "pattern": "^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$",
                               "description": "the SDK's own UUIDv7 for the session; opening one that exists "
                                              "returns it (409 if it reports to another run); absent: the "
                                              "daemon makes one"},
                "run_id": {"type": ["string", "null"], "pattern": "^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$",
                           "description": "join this run (created when unknown); absent: a new run"},
                "job_id": {"type": ["string", "null"], "minLength": 1, "maxLength": 100},
                "name": {"type": ["string", "null"], "minLength": 1, "maxLength": 200},
                "project": {"type": ["string", "null"], "minLength": 1, "maxLength": 200},
                "experiment": {"type": ["string", "null"], "minLength": 1, "maxLength": 200},
                "config": {"type": ["object", "null"]},
                "tags": {"type": "array", "maxItems": 100, "items": {"type": "string", "minLength": 1,
                                                                      "maxLength": 100}},
                "rank": {"type": ["integer", "null"], "minimum": 0, "maximum": (1 << 31) - 1},
                "host": {"type": ["string", "null"], "minLength": 1, "maxLength": 200},
                "pid": {"type": ["integer", "null"], "minimum": 0, "maximum": (1 << 31) - 1},
            },
            "additionalProperties": False,
        },
        "Session": _object(Session, {
            "id": {"description": "a UUIDv7"},
            "status": _enum(("OPEN", *FINISH_STATES)),
            "created_at": _ms(),
            "finished_at": _ms(nullable=True),
        }, description="One SDK process (a rank) reporting to a run."),
        "SessionCreated": _closed({"session_id": {"type": "string"}, "run_id": {"type": "string"},
                                   "session": _ref("Session")}),
        "SessionReply": _closed({"session": _ref("Session")}),
        "SessionList": _closed({"sessions": {"type": "array", "items": _ref("Session")}}),
        "SessionEnv": {"type": "object", "description": "the process: python, argv, git commit and dirty flag, "
                                                        "package versions, CUDA_VISIBLE_DEVICES... (at most 64 KB)"},
        "SessionEnvReply": _closed({"stored": {"type": "boolean",
                                               "description": "false: the run already had one (the first wins)"}}),
        "BatchCreate": {
            "type": "object",
            "properties": {
                "seq": {"type": "integer", "minimum": 0, "maximum": (1 << 62) - 1,
                        "description": "one per batch of the session; a seq already stored is answered "
                                       "duplicate, also once the session has finished"},
                "metrics": {"type": "object", "description": "name -> {step: [...], ts: [...], value: [...]}; "
                            "with encoding base64 each column is the base64 of its little-endian int64 (step, ts) "
                            "or float64 (value) values", "additionalProperties": {"type": "object"}},
                "encoding": {**_enum(("json", "base64")), "default": "json",
                             "description": "how the metrics' columns are written (the SDK sends base64)"},
                "events": {"type": "array", "maxItems": 1000, "description": "the script's own events "
                           "(run.log_event), stored as USER_EVENT", "items": {
                               "type": "object", "required": ["name"], "additionalProperties": False,
                               "properties": {
                                   "name": {"type": "string", "minLength": 1, "maxLength": 200},
                                   "severity": _enum(("info", "warning", "critical")),
                                   "step": {"type": ["integer", "null"], "minimum": 0},
                                   "ts": {"type": ["integer", "null"], "minimum": 0},
                                   "data": {"type": ["object", "null"]}}}},
                "checkpoints": {"type": "array", "maxItems": 1000, "description": "checkpoints the script "
                                "saved (run.log_checkpoint): registered, never copied", "items": {
                                    "type": "object", "required": ["path"], "additionalProperties": False,
                                    "properties": {
                                        "path": {"type": "string", "minLength": 1, "maxLength": 4096},
                                        "step": {"type": ["integer", "null"], "minimum": 0},
                                        "epoch": {"type": ["number", "null"], "minimum": 0},
                                        "ts": {"type": ["integer", "null"], "minimum": 0},
                                        "size_bytes": {"type": ["integer", "null"], "minimum": 0},
                                        "metadata": {"type": ["object", "null"]}}}},
            },
            "required": ["seq", "metrics"],
            "additionalProperties": False,
        },
        "BatchReply": _closed({"seq": {"type": "integer"}, "duplicate": {"type": "boolean"},
                               "points": {"type": "integer", "minimum": 0}}),
        "SessionFinish": {
            "type": "object",
            "properties": {"status": _enum(FINISH_STATES)},
            "additionalProperties": False,
        },
        "RunList": _closed({"runs": {"type": "array", "items": _ref("Run")}, "next_cursor": _NEXT_CURSOR}),
        "Checkpoint": _closed({
            "id": {"type": "string", "description": "ck_<ULID>"},
            "run_id": {"type": "string"},
            "step": {"type": ["integer", "null"], "minimum": 0},
            "epoch": {"type": ["number", "null"], "minimum": 0},
            "path": {"type": "string", "description": "where the script saved it (registered, never copied)"},
            "size_bytes": {"type": ["integer", "null"], "minimum": 0},
            "metadata": {"type": "object"},
            "created_at": _ms("when it was registered (a re-registered path moves to its new step)"),
            "metric_value": {"type": ["number", "null"],
                             "description": "with a metric: its last value at or before the step"},
            "best": {"type": "boolean", "description": "with a metric: the best checkpoint by its direction"},
        }, "A checkpoint a training script registered (run.log_checkpoint)."),
        "CheckpointList": _closed({
            "checkpoints": {"type": "array", "items": _ref("Checkpoint")},
            "metric": {"type": ["string", "null"], "description": "the metric the checkpoints are ranked by"},
            "direction": {"type": ["string", "null"], "description": "minimize, maximize or none"},
            "best_id": {"type": ["string", "null"]},
        }),
        "CheckpointReply": _closed({"checkpoint": _ref("Checkpoint")}),
        "LogLine": _object(LogLine, {"offset": {"minimum": 0, "description": "the line's byte offset in the file"}}),
        "LogPage": _object(LogPage, {
            "attempt": {"minimum": 0, "description": "0: the job has not run yet (no lines)"},
            "next_offset": {"description": "pass as offset= to continue; null when the page is empty"},
        }),
        "SlotInfo": _object(SlotInfo),
        "EccErrors": _object(EccErrors),
        "GpuReading": _gpu_reading(),
        "DiskSample": _object(DiskSample),
        "HostSample": _object(HostSample),
        "NodeSnapshot": _closed({
            "ts": _ms(),
            "backend": {"type": "string", "description": "nvml, fake or none"},
            "gpus": {"type": "array", "items": _ref("GpuReading")},
            "host": {"anyOf": [_ref("HostSample"), {"type": "null"}]},
            "jobs": {"type": "array", "items": _closed({
                "job_id": {"type": "string"},
                "gpu_indexes": {"type": "array", "items": {"type": "integer"}},
                "gpu_memory_mb": {"type": "integer"},
            })},
            "blocked_gpus": {"type": "array", "items": {"type": "integer"},
                             "description": "GPUs that take no new job (lost, or used outside GPUPlane)"},
        }, "The node's latest readings (about every 2 s)."),
        "Node": _object(NodeInfo, {
            "status": _enum(("ONLINE", "OFFLINE", "UNHEALTHY")),
            "last_heartbeat_at": _ms(nullable=True),
            "hardware": {"description": "host facts from the node's hello (hostname, cpu_count, memory_mb...)"},
            "accepting": {"description": "false while the node takes no new work (a disk is low)"},
            "snapshot": {"anyOf": [_ref("NodeSnapshot"), {"type": "null"}],
                         "description": "null until the first sample, and while the node is not connected"},
        }),
        "NodeReply": _closed({"node": _ref("Node")}),
        "ForgottenNode": _closed({"forgotten": _closed({"id": {"type": "string"}, "name": {"type": "string"}})}),
        "NodeStreamEvent": {**_sse_event("snapshot", _ref("NodeSnapshot"), "^[0-9]+$"),
                            "description": "One event of GET /api/v1/nodes/{key}/stream: the node's whole "
                                          "current readings; the id is their time (ms)."},
        "NodeList": _closed({"nodes": {"type": "array", "items": _ref("Node")}}),
        "NodeMetrics": _closed({
            "node_id": {"type": "string"},
            "start": _ms(),
            "end": _ms(),
            "resolution": _enum(("raw", "1m", "5m")),
            "width": {"type": "integer", "minimum": 1, "description": "bucket width in ms (1: raw points)"},
            "x": {"type": "array", "items": {"type": "integer"}, "description": "each bucket's start, in ms"},
            "series": {"type": "object", "description": "metric name -> columns aligned with x",
                       "additionalProperties": _closed({
                           "min": series, "max": series, "avg": series, "last": series,
                           "count": counts, "nan": counts,
                       })},
        }),
        "Event": _object(EventRow, {
            "id": {"description": "ev_<ULID>; also the SSE id to resume after"},
            "ts": _ms(),
            "type": {"description": "a word like DISK_LOW or GPU_LOST"},
            "severity": _enum(SEVERITIES),
        }),
        "EventList": _closed({"events": {"type": "array", "items": _ref("Event")}, "next_cursor": _NEXT_CURSOR}),
        "EventStreamEvent": {"oneOf": [
            _sse_event("event", _ref("Event")),
            _sse_event("lagged", _closed({"skipped": {"type": "integer", "minimum": 1}})),
        ], "description": "One event of GET /api/v1/events/stream; an `event` event's id is the Event's id."},
        "LogStreamEvent": {"oneOf": [
            _sse_event(list(STREAMS), None, r"^-?[0-9]+(,-?[0-9]+)?$"),
            _sse_event("end", _closed({
                "status": _enum((*JOB_STATES, "RETRIED"), "RETRIED: a later attempt has begun"),
                "attempt": {"type": "integer", "minimum": 0},
                "exit_code": {"type": ["integer", "null"]},
                "failure_reason": {"type": ["string", "null"]},
            })),
        ], "description": "One event of GET /api/v1/jobs/{job_id}/logs/stream: a line of output (its id is "
                          "the resume position: per stream followed, the offset of the last line sent, -1 for "
                          "none), or the final `end`."},
        "TokenCreate": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"},
                "scopes": {"type": "array", "minItems": 1, "items": _enum(SCOPES),
                           "description": "admin grants everything, write also grants read"},
                "expires_in_s": {"type": ["integer", "null"], "minimum": 1, "maximum": MAX_EXPIRES_IN_S,
                                 "description": "seconds from now; absent or null: never expires"},
            },
            "required": ["name", "scopes"],
            "additionalProperties": False,
        },
        "Token": _object(TokenInfo, {
            "id": {"description": "tok_<ULID>"},
            "scopes": {"items": _enum(SCOPES)},
            "created_at": _ms(),
            "expires_at": _ms(nullable=True),
            "last_used_at": _ms(nullable=True),
            "revoked_at": _ms(nullable=True),
        }, description="An API token as the API shows it: never its secret."),
        "TokenCreated": _closed({
            "token": _ref("Token"),
            "secret": {"type": "string", "pattern": "^gpp_[0-9A-HJKMNP-TV-Z]{26}_[A-Za-z0-9_-]{43}$",
                       "description": "shown only in this reply"},
        }),
        "TokenReply": _closed({"token": _ref("Token")}),
        "TokenList": _closed({"tokens": {"type": "array", "items": _ref("Token")}, "next_cursor": _NEXT_CURSOR}),
        "OpenApiDocument": {"type": "object", "required": ["openapi", "info", "paths"]},
        **_project_schemas(),
        **_auth_schemas(),
    }


def _project_schemas() -> dict[str, dict[str, Any]]:
    """Projects, experiments, metric definitions and the primary metric (``gpuplaned.service.projects``)."""
    name = {"type": "string", "pattern": NAME_PATTERN,
            "description": "unique (per project, for an experiment); not shaped like an id"}
    metric = {"type": ["string", "null"], "pattern": METRIC_PATTERN,
              "description": "a metric name; null clears the setting"}
    body = {"name": name, "description": {"type": ["string", "null"], "maxLength": MAX_DESCRIPTION},
            "primary_metric": {**metric, "description": "this level's primary metric (one not logged yet gets "
                                                        "its definition now); null: inherit"}}
    primary_source = {"type": ["string", "null"], "enum": [*PRIMARY_SOURCES, None],
                      "description": "where the primary metric was set; null: nowhere"}
    point = {"type": ["object", "null"]}
    return {
        "Ref": _object(Ref),
        "Project": _object(Project, {
            "id": {"description": "prj_<ULID>"},
            "created_at": _ms(),
            "primary_metric": {"description": "set on this project; null: the global one applies"},
            "experiments": {"minimum": 0},
            "runs": {"minimum": 0},
        }),
        "ProjectReply": _closed({"project": _ref("Project")}),
        "ProjectList": _closed({"projects": {"type": "array", "items": _ref("Project")},
                                "next_cursor": _NEXT_CURSOR}),
        "ProjectCreate": {"type": "object", "properties": body, "required": ["name"], "additionalProperties": False},
        "ProjectPatch": {"type": "object", "properties": body, "additionalProperties": False},
        "ExperimentCreate": {"type": "object", "properties": body, "required": ["name"],
                             "additionalProperties": False},
        "ExperimentPatch": {"type": "object", "properties": body, "additionalProperties": False},
        "Experiment": _object(Experiment, {
            "id": {"description": "exp_<ULID>"},
            "project": {"description": "the project's name"},
            "created_at": _ms(),
            "primary_metric": {"description": "set on this experiment; null: its project's applies"},
            "runs": {"minimum": 0},
        }),
        "ExperimentReply": _closed({"experiment": _ref("Experiment")}),
        "ExperimentList": _closed({"experiments": {"type": "array", "items": _ref("Experiment")},
                                   "next_cursor": _NEXT_CURSOR}),
        "MetricDefinition": _object(MetricDefinition, {
            "direction": {"type": ["string", "null"], "enum": ["minimize", "maximize", None],
                          "description": "which way is better; null: none (no best is kept)"},
            "scope": {"type": ["string", "null"], "enum": [*METRIC_SCOPES, None]},
            "is_primary": {"description": "the global primary metric"},
            "created_at": _ms("when a run first logged it (or it was first named)"),
        }),
        "MetricDefinitionReply": _closed({"metric_definition": _ref("MetricDefinition")}),
        "MetricDefinitionList": _closed({"metric_definitions": {"type": "array", "items": _ref("MetricDefinition")},
                                         "next_cursor": _NEXT_CURSOR}),
        "MetricDefinitionPatch": {"type": "object", "properties": {
            "direction": {"type": ["string", "null"], "enum": [*DIRECTIONS, None],
                          "description": "none or null: no direction; a change recomputes every run's best"},
            "display_name": {"type": ["string", "null"], "maxLength": MAX_DISPLAY_NAME},
            "scope": {"type": ["string", "null"], "enum": [*METRIC_SCOPES, None]},
            "unit": {"type": ["string", "null"], "maxLength": MAX_UNIT},
        }, "additionalProperties": False},
        "MetricDefinitionUpdated": _closed({
            "metric_definition": _ref("MetricDefinition"),
            "runs_updated": {"type": "integer", "minimum": 0,
                             "description": "runs whose summary (best point) was recomputed"},
        }),
        "PrimaryMetric": _object(PrimaryMetric, {
            "metric": {"description": "the primary metric, resolved experiment -> project -> global"},
            "source": primary_source,
            "settings": _closed({level: {"type": ["string", "null"]} for level in PRIMARY_SOURCES},
                                "each level's own setting"),
        }),
        "PrimaryMetricReply": _closed({"primary_metric": _ref("PrimaryMetric")}),
        "PrimaryMetricPut": {"type": "object", "properties": {
            "metric": metric,
            "project": {"type": ["string", "null"], "minLength": 1, "description": "the project's id or name"},
            "experiment": {"type": ["string", "null"], "minLength": 1,
                           "description": "the experiment's id (or its name, with project)"},
        }, "required": ["metric"], "additionalProperties": False,
            "description": "Neither project nor experiment: the global primary metric."},
        "RunPrimaryMetric": _closed({
            "name": {"type": "string"},
            "source": {"type": "string", "enum": list(PRIMARY_SOURCES)},
            "direction": {"type": ["string", "null"], "enum": ["minimize", "maximize", None]},
            "count": {"type": "integer", "minimum": 0, "description": "the run's points of it"},
            "latest": {**point, "description": "{step, ts, value}; null until the run logs it"},
            "best": {**point, "description": "{step, value} by the direction; null without one"},
        }, "The run's primary metric (experiment -> project -> global) and its values in this run."),
    }


def _job_submit() -> dict[str, Any]:
    """``POST /api/v1/jobs``: what ``gpuplaned.protocol.job_wire.parse_job_spec`` accepts."""
    strings = {"type": "array", "items": {"type": "string"}}
    seconds = {"type": ["number", "null"], "exclusiveMinimum": 0}
    directory = {"type": "string", "pattern": "^/", "description": "an existing absolute directory"}
    return {
        "type": "object",
        "description": "A job to queue. Unknown fields are refused; cwd (or its alias dir) is required.",
        "properties": {
            "command": {"type": "array", "minItems": 1, "description": "argv; no shell unless you write sh -c",
                        "prefixItems": [{"type": "string", "minLength": 1, "pattern": "^[^\\x00]*$"}],
                        "items": {"type": "string", "pattern": "^[^\\x00]*$"}},
            "cwd": directory,
            "dir": {**directory, "description": "alias of cwd"},
            "env": {"type": "object", "additionalProperties": {"type": "string"},
                    "propertyNames": {"minLength": 1, "pattern": "^[^=\\x00]*$"}},
            "name": {"type": ["string", "null"], "maxLength": 200,
                     "description": "default: the program's base name"},
            "type": {**_enum(JOB_TYPES), "default": "TRAIN"},
            "gpu": {"type": "integer", "minimum": 0, "maximum": 64, "default": 1,
                    "description": "GPUs to reserve; 0 runs on a CPU slot"},
            "gpus": {"type": "integer", "minimum": 0, "maximum": 64, "description": "alias of gpu"},
            "labels": strings,
            "node": {"type": ["string", "null"], "minLength": 1, "description": "run only on this node"},
            "priority": {"type": "integer", "minimum": -MAX_PRIORITY, "maximum": MAX_PRIORITY, "default": 0},
            "max_attempts": {"type": "integer", "minimum": 1, "maximum": 101, "default": 1},
            "retry": {"type": "integer", "minimum": 0, "maximum": 100,
                      "description": "retries after a failure: max_attempts = retry + 1 (wins over max_attempts)"},
            "timeout_s": {**seconds, "description": "kill the attempt after this long; null: never"},
            "stop_grace_s": {**seconds, "default": DEFAULT_STOP_GRACE_S,
                             "description": "SIGTERM to SIGKILL on cancel or timeout"},
        },
        "required": ["command"],
        "anyOf": [{"required": ["cwd"]}, {"required": ["dir"]}],
        "additionalProperties": False,
    }


# --- responses and parameters --------------------------------------------------------------

_STATUS_TEXT = {
    400: "The request is malformed: a bad parameter or body (details.field names it).",
    401: "HTTP front only: missing or unknown bearer token.",
    403: "HTTP front only: the token lacks the scope this route needs.",
    404: "No such object (or no such route).",
    408: "The body did not arrive within [http] body_timeout_s; the connection is closed.",
    409: "The object is not in a state that allows this, or the Idempotency-Key was used for another body.",
    413: "The body is larger than 1 MiB.",
    500: "A bug: the daemon logged the traceback.",
    503: "The daemon is starting or stopping, or its role has no such service; store_unavailable: the store "
         "actor is not running, so nothing was written (retry once it runs again); unavailable on the TCP "
         "front: it has [http] max_connections connections open.",
}
_ON_EVERY_ROUTE = (401, 403, 500, 503)
_HEADERS = {API_VERSION_HEADER: {"$ref": "#/components/headers/ApiVersion"}}


def _error_responses() -> dict[str, Any]:
    out = {}
    for status, text in _STATUS_TEXT.items():
        codes = [c.value for c in ErrorCode if c.http_status == status]
        schema = {"allOf": [_ref("Error"), {"properties": {"error": {"properties": {"code": {"enum": codes}}}}}]}
        out[str(status)] = {"description": text, "headers": _HEADERS,
                            "content": {"application/json": {"schema": schema}}}
    return out


def _json(status: int, schema: str, description: str) -> dict[str, Any]:
    return {str(status): {"description": description, "headers": _HEADERS,
                          "content": {"application/json": {"schema": _ref(schema)}}}}


def _sse(description: str, event: str) -> dict[str, Any]:
    """A stream of Server-Sent Events. Its ``schema`` describes one event (``event``, ``data``, ``id``),
    as OpenAPI 3.2's ``itemSchema`` does and as tools such as schemathesis read it in 3.1."""
    return {"200": {"description": description, "headers": _HEADERS,
                    "content": {"text/event-stream": {"schema": _ref(event)}}}}


def _sse_event(name: str | list[str], data: dict[str, Any] | None, id_pattern: str | None = None) -> dict[str, Any]:
    """One kind of SSE event; ``data`` is the schema of its JSON payload (None: plain text)."""
    payload: dict[str, Any] = {"type": "string"}
    if data is not None:
        payload.update(contentMediaType="application/json", contentSchema=data)
    out: dict[str, Any] = {
        "type": "object",
        "properties": {"event": {"enum": [name] if isinstance(name, str) else name}, "data": payload},
        "required": ["event", "data"],
    }
    if id_pattern is not None:
        out["properties"]["id"] = {"type": "string", "pattern": id_pattern}
        out["required"].append("id")
    return out


def _operation(op_id: str, summary: str, tag: str, ok: dict[str, Any], errors: tuple[int, ...] = (), *,
               parameters: list[dict[str, Any]] | None = None, body: str | None = None,
               description: str | None = None) -> dict[str, Any]:
    responses = dict(ok)
    queried = any(param.get("in") == "query" for param in parameters or ())  # an empty value is a 400
    for status in sorted({*errors, *_ON_EVERY_ROUTE, *((408,) if body else ()), *((400,) if queried else ())}):
        responses[str(status)] = _error_ref(status)
    out: dict[str, Any] = {"operationId": op_id, "summary": summary, "tags": [tag]}
    if description:
        out["description"] = description
    if parameters:
        out["parameters"] = parameters
    if body:
        out["requestBody"] = {"required": True, "content": {"application/json": {"schema": _ref(body)}}}
    out["responses"] = responses
    return out


def _path(name: str, description: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "description": description, "schema": schema or _SEGMENT}


def _query(name: str, schema: dict[str, Any], description: str, **extra: Any) -> dict[str, Any]:
    if schema.get("type") == "string" and not {"minLength", "pattern", "enum", "const"} & schema.keys():
        schema = {**schema, "minLength": 1}  # gpuplaned.http.app.refuse_empty_query_values
    return {"name": name, "in": "query", "required": False, "description": description, "schema": schema, **extra}


def _int(low: int, high: int | None = None, default: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "integer", "minimum": low}
    if high is not None:
        out["maximum"] = high
    if default is not None:
        out["default"] = default
    return out


def _csv(values: typing.Iterable[str]) -> dict[str, Any]:
    return {"type": "array", "items": _enum(values), "minItems": 1}


_LAST_EVENT_ID = {"name": "Last-Event-ID", "in": "header", "required": False, "schema": {"type": "string"},
                  "description": "sent by a reconnecting EventSource: resume after this event (wins over the query)"}


def _event_filters() -> list[dict[str, Any]]:
    return [
        _query("severity", _csv(SEVERITIES), "comma-separated severities (any case)", style="form", explode=False),
        _query("type", _csv(EVENT_TYPES), "comma-separated event types (any case); another is a 400 that lists them",
               style="form", explode=False),
        _query("node_id", {"type": "string"}, "only this node's events"),
        _query("job_id", {"type": "string"}, "only this job's events"),
        _query("run_id", {"type": "string"}, "only this run's events"),
    ]


def _idempotent(paths: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every POST takes an ``Idempotency-Key`` (``gpuplaned.http.idempotency``): 400 when malformed, 409 on reuse."""
    for item in paths.values():
        op = item.get("post")
        if op is not None:
            op["parameters"] = [*op.get("parameters", ()), {"$ref": "#/components/parameters/IdempotencyKey"}]
            errors = {code: _error_ref(int(code)) for code in ("400", "409")}
            op["responses"] = dict(sorted({**errors, **op["responses"]}.items()))
    return paths


def _scoped(paths: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each operation names the token scope it needs on the HTTP front (``gpuplaned.http.scopes``);
    an OpenAPI 3.1 bearer requirement may list such roles."""
    for path, item in paths.items():
        rule = re.sub(r"{([^}]+)}", r"<\1>", path)
        for method, op in item.items():
            if is_public(rule):
                op["security"] = []
                op["description"] = f"{op.get('description', '')} HTTP front: no credentials needed.".strip()
                continue
            scope = required_scope(rule, method)
            op["security"] = [{"bearer": [scope]}, {"session": [scope]}]
            op["description"] = f"{op.get('description', '')} HTTP front: a token with the `{scope}` scope.".strip()
    return paths


def _error_ref(status: int) -> dict[str, str]:
    return {"$ref": f"#/components/responses/E{status}"}


def _paths() -> dict[str, dict[str, Any]]:
    job = _path("job_id", "the job's id (job_<ULID>)")
    node = _path("key", "the node's id or name")
    actor = _path("name", "the actor's name (see GET /api/v1/actors)")
    limit = _query("limit", _int(1, 10_000, 100), "at most this many, newest first")
    cursor = _query("cursor", {"type": "string"}, "next_cursor of the previous page (opaque)")
    attempt = _query("attempt", _int(0, 1_000_000, 0), "which attempt (1-based); 0 or absent: the latest")
    return {
        "/api/v1/daemon": {"get": _operation(
            "getDaemon", "The daemon: version, state, endpoints, directories", "daemon",
            _json(200, "DaemonInfo", "The daemon."),
            description="The one route that still answers (with state STOPPING) while the daemon shuts down.")},
        "/api/v1/daemon/shutdown": {"post": _operation(
            "shutdownDaemon", "Stop the daemon (the reply leaves first)", "daemon",
            _json(202, "ShutdownReply", "Shutdown has begun."))},
        "/api/v1/actors": {"get": _operation(
            "listActors", "Every supervised actor and its state", "daemon",
            _json(200, "ActorList", "The actors, in start order."))},
        "/api/v1/actors/{name}": {"get": _operation(
            "getActor", "One actor", "daemon", _json(200, "ActorReply", "The actor."), (404,),
            parameters=[actor])},
        "/api/v1/actors/{name}/{verb}": {"post": _operation(
            "commandActor", "Start, stop or restart one actor", "daemon",
            _json(200, "ActorReply", "The actor after the command."), (404, 409),
            parameters=[actor, _path("verb", "the command; any other is 404", _enum(ACTOR_VERBS))])},
        "/api/v1/jobs": {
            "post": _operation(
                "submitJob", "Queue a job", "jobs", _json(201, "JobReply", "The job, queued or already dispatched."),
                (400, 413), body="JobSubmit"),
            "get": _operation(
                "listJobs", "Jobs, newest first", "jobs", _json(200, "JobList", "The jobs."), (400,),
                parameters=[_query("status", _csv(JOB_STATES), "comma-separated states (any case)",
                                   style="form", explode=False), limit, cursor]),
        },
        "/api/v1/runs": {"get": _operation(
            "listRuns", "Runs (each attempt of a job), newest first", "jobs", _json(200, "RunList", "The runs."),
            (400,), parameters=[_query("job_id", {"type": "string"}, "only this job's runs"),
                                _query("status", _csv(RUN_STATES), "comma-separated states (any case)",
                                       style="form", explode=False), limit, cursor])},
        "/api/v1/runs/metrics:query": {"post": _operation(
            "queryRunsMetrics", "Several runs' series in one call (overlaid charts)", "runs",
            _json(200, "RunMetricsMany", "One RunMetrics per run, in the order asked."), (400, 404, 409, 413),
            body="RunMetricsQuery")},
        "/api/v1/runs/{run_id}/checkpoints": {"get": _operation(
            "listRunCheckpoints", "A run's checkpoints, oldest step first, the best marked", "runs",
            _json(200, "CheckpointList", "The checkpoints."), (400, 404),
            parameters=[_path("run_id", "the run's id"),
                        _query("metric", {"type": "string", "pattern": METRIC_PATTERN},
                               "rank by this metric; absent: the run's primary metric")])},
        "/api/v1/runs/{run_id}/sessions": {"get": _operation(
            "listRunSessions", "A run's SDK sessions (one per rank or resume), oldest first", "runs",
            _json(200, "SessionList", "The sessions."), (404,), parameters=[_path("run_id", "the run's id")])},
        "/api/v1/checkpoints/{checkpoint_id}": {"get": _operation(
            "getCheckpoint", "One checkpoint", "runs", _json(200, "CheckpointReply", "The checkpoint."), (404,),
            parameters=[_path("checkpoint_id", "the checkpoint's id (ck_<ULID>)")])},
        "/api/v1/runs/{run_id}/summary": {"get": _operation(
            "getRunSummary", "A run's summary: latest and best per metric, progress, trend, warnings", "runs",
            _json(200, "RunSummaryReply", "The summary (kept up to date as batches arrive)."), (404,),
            parameters=[_path("run_id", "the run's id")])},
        "/api/v1/runs/{run_id}/metrics": {"get": _operation(
            "getRunMetrics", "A run's metric series for charts", "runs",
            _json(200, "RunMetrics", "Columns downsampled to at most `points` buckets (min, max, avg, last)."),
            (400, 404),
            parameters=[_path("run_id", "the run's id"),
                        _query("names", {"type": "array", "minItems": 1,
                                         "items": {"type": "string", "pattern": "^[A-Za-z0-9_.*?\\[\\]/-]{1,200}$"}},
                               "comma-separated names or shell patterns (train/*); absent: every series",
                               style="form", explode=False),
                        _query("x", {**_enum(("step", "ts")), "default": "step"}, "the x axis"),
                        _query("window", {"type": "string", "pattern": "^[0-9]{1,6}[smhd]$"},
                               "with x=ts only: a duration back from end; not with start"),
                        _query("start", _int(0, MAX_MS), "first x (step, or ms with x=ts); absent: the first point"),
                        _query("end", _int(0, MAX_MS), "last x; absent: the last point"),
                        _query("points", _int(1, MAX_POINTS, DEFAULT_POINTS), "at most this many buckets")])},
        "/api/v1/runs/{run_id}/series": {"get": _operation(
            "getRunSeries", "One series of a run, every raw point (export)", "runs",
            _json(200, "RunSeries", "The points, in x order; next_cursor when more are left."), (400, 404),
            description="For a full read (the metrics route downsamples). encoding=base64 is the fast "
                        "way for a program: each column the base64 of its little-endian values.",
            parameters=[_path("run_id", "the run's id"),
                        {**_query("name", {"type": "string", "minLength": 1, "maxLength": 200},
                                  "the series' exact name"), "required": True},
                        _query("x", {**_enum(("step", "ts")), "default": "step"},
                               "the axis of start and end, and the order"),
                        _query("start", _int(0, MAX_MS), "first x (step, or ms with x=ts); absent: the first point"),
                        _query("end", _int(0, MAX_MS), "last x, included; absent: the last point"),
                        _query("limit", _int(1, MAX_SERIES_LIMIT, DEFAULT_SERIES_LIMIT), "at most this many points"),
                        _query("columns", _csv(SERIES_COLUMNS), "comma-separated columns; absent: all three",
                               style="form", explode=False),
                        _query("encoding", {**_enum(SERIES_ENCODINGS), "default": "json"},
                               "json: numbers; base64: little-endian int64 (step, ts) and float64 (value)"),
                        cursor])},
        "/api/v1/sessions": {"post": _operation(
            "openSession", "Open an SDK session on a run (gpuplane.init)", "runs",
            _json(201, "SessionCreated", "The session and its run (the existing one for a known session_id)."),
            (400, 409, 413), body="SessionCreate",
            description="Idempotent with a session_id: the SDK re-opens its session when the daemon comes "
                        "back, and a spool replay (the daemon at start, gpuplanectl sync) opens it again.")},
        "/api/v1/sessions/{session_id}": {"get": _operation(
            "getSession", "One SDK session", "runs", _json(200, "SessionReply", "The session."), (404,),
            parameters=[_path("session_id", "the session's id (a UUIDv7)")])},
        "/api/v1/sessions/{session_id}/batches": {"post": _operation(
            "addBatch", "Store a batch of a session's metric points, once", "runs",
            _json(200, "BatchReply", "Answered after the batch is committed; a resent seq is a duplicate."),
            (400, 404, 409, 413), body="BatchCreate",
            parameters=[_path("session_id", "the session's id (a UUIDv7)")])},
        "/api/v1/sessions/{session_id}/env": {"post": _operation(
            "addSessionEnv", "Record the training process's environment on its run", "runs",
            _json(200, "SessionEnvReply", "Whether it was kept."), (400, 404, 409, 413), body="SessionEnv",
            parameters=[_path("session_id", "the session's id (a UUIDv7)")])},
        "/api/v1/sessions/{session_id}/finish": {"post": _operation(
            "finishSession", "Finish an SDK session (an SDK run ends with its last session)", "runs",
            _json(200, "SessionReply", "The finished session."), (400, 404, 409, 413), body="SessionFinish",
            parameters=[_path("session_id", "the session's id (a UUIDv7)")])},
        "/api/v1/runs/{run_id}": {"get": _operation(
            "getRun", "One run", "jobs", _json(200, "RunReply", "The run."), (404,),
            parameters=[_path("run_id", "the run's id (run_<ULID>)")])},
        "/api/v1/jobs/{job_id}": {"get": _operation(
            "getJob", "One job", "jobs", _json(200, "JobReply", "The job."), (404,), parameters=[job])},
        "/api/v1/jobs/{job_id}/cancel": {"post": _operation(
            "cancelJob", "Cancel a queued or running job", "jobs",
            _json(200, "JobReply", "The job; a running one ends once its process has stopped."), (404, 409),
            parameters=[job])},
        "/api/v1/jobs/{job_id}/retry": {"post": _operation(
            "retryJob", "Queue an ended job again", "jobs", _json(200, "JobReply", "The job, queued again."),
            (404, 409), parameters=[job])},
        "/api/v1/jobs/{job_id}/logs": {"get": _operation(
            "getJobLogs", "A page of a job's output", "logs", _json(200, "LogPage", "The lines."), (400, 404),
            description="Without tail or offset: the last 100 lines. With offset: the lines from that byte "
                        "offset on (after it, when it is > 0), up to limit.",
            parameters=[job,
                        _query("stream", {**_enum(STREAMS), "default": "stdout"}, "which file"),
                        attempt,
                        _query("tail", _int(0, MAX_PAGE), "the last N lines"),
                        _query("offset", _int(0, 1 << 62), "continue from next_offset of a previous page"),
                        _query("limit", _int(1, MAX_PAGE, 10_000), "at most this many lines")])},
        "/api/v1/jobs/{job_id}/logs/stream": {"get": _operation(
            "streamJobLogs", "Follow a job's output (Server-Sent Events)", "logs",
            _sse("Events `stdout` and `stderr` (one line each; the id is the resume position), then one `end` "
                 "event with status, attempt, exit_code and failure_reason. A comment every 15 s keeps it open.",
                 "LogStreamEvent"),
            (400, 404),
            parameters=[job,
                        _query("stream", {**_enum((*STREAMS, "all")), "default": "all"}, "which files"),
                        attempt,
                        _query("position", {"type": "string", "pattern": "^-?[0-9]+(,-?[0-9]+)?$"},
                               "resume position: an event id from an earlier stream"),
                        _LAST_EVENT_ID])},
        "/api/v1/nodes": {"get": _operation(
            "listNodes", "Every node with its GPUs and latest readings", "nodes",
            _json(200, "NodeList", "The nodes, by name."))},
        "/api/v1/nodes/{key}": {
            "get": _operation("getNode", "One node", "nodes", _json(200, "NodeReply", "The node."), (404,),
                              parameters=[node]),
            "delete": _operation(
                "forgetNode", "Forget an offline node that is gone for good", "nodes",
                _json(200, "ForgottenNode", "It is forgotten: its record, GPU slots and metrics."), (404, 409),
                parameters=[node],
                description="For a node renamed or retired, which would otherwise stay OFFLINE in the list "
                            "forever. Its jobs and runs keep their history; if it says hello again, it is a new "
                            "node. 409 while it is online or a job is dispatched to or running on it.")},
        "/api/v1/nodes/{key}/stream": {"get": _operation(
            "streamNode", "Follow a node's readings (Server-Sent Events)", "nodes",
            _sse("`snapshot` events: the latest readings at once (when there are any), then each new sample "
                 "(about every 2 s). A follower that falls behind gets the next one. A comment every 15 s keeps "
                 "it open.", "NodeStreamEvent"),
            (404,), parameters=[node])},
        "/api/v1/nodes/{key}/metrics": {"get": _operation(
            "getNodeMetrics", "A node's metric series for charts", "nodes",
            _json(200, "NodeMetrics", "Columns downsampled to at most `points` buckets (min, max, avg, last)."),
            (400, 404),
            parameters=[node,
                        _query("names", {"type": "array", "minItems": 1,
                                         "items": {"type": "string", "pattern": "^[A-Za-z0-9_.*?\\[\\]/-]{1,200}$"}},
                               "comma-separated names or shell patterns (gpu0.*); absent: every series",
                               style="form", explode=False),
                        _query("window", {"type": "string", "pattern": "^[0-9]{1,6}[smhd]$"},
                               "a duration back from end: 90s, 15m, 6h, 7d (1s to 400d); default 1h; "
                               "not with start"),
                        _query("start", _int(0, MAX_MS), f"{_MS}; not with window"),
                        _query("end", _int(0, MAX_MS), f"{_MS}; default now; not before start"),
                        _query("points", _int(1, MAX_POINTS, DEFAULT_POINTS), "at most this many buckets")])},
        "/api/v1/events": {"get": _operation(
            "listEvents", "Events, newest first", "events", _json(200, "EventList", "The events."), (400,),
            parameters=[*_event_filters(), limit, cursor])},
        "/api/v1/events/stream": {"get": _operation(
            "streamEvents", "Follow events (Server-Sent Events)", "events",
            _sse("`event` events (data: an Event as JSON, id: its id) and `lagged` events ({\"skipped\": N}) "
                 "when this follower fell behind. A comment every 15 s keeps it open.", "EventStreamEvent"),
            (400,),
            parameters=[*_event_filters(),
                        _query("after", {"type": "string"},
                               "resume after this event id (0: from the first event); absent: new events only"),
                        _LAST_EVENT_ID])},
        "/api/v1/tokens": {
            "post": _operation(
                "createToken", "Create an API token for the HTTP front", "tokens",
                _json(201, "TokenCreated", "The token and its secret (shown only here)."), (400, 409, 413),
                body="TokenCreate"),
            "get": _operation(
                "listTokens", "The tokens, newest first, revoked ones included", "tokens",
                _json(200, "TokenList", "A page of tokens."), (400,), parameters=[limit, cursor]),
        },
        "/api/v1/tokens/{id_or_name}/revoke": {"post": _operation(
            "revokeToken", "Revoke a token (a revoked one is answered unchanged)", "tokens",
            _json(200, "TokenReply", "The revoked token."), (404,),
            parameters=[_path("id_or_name", "the token's id or name")])},
        **_project_paths(limit, cursor),
        **_auth_paths(),
        PATH: {"get": _operation(
            "getOpenApi", "This document", "daemon", _json(200, "OpenApiDocument", "OpenAPI 3.1."))},
    }


def _project_paths(limit: dict[str, Any], cursor: dict[str, Any]) -> dict[str, dict[str, Any]]:
    project = _path("project", "the project's id (prj_<ULID>) or name")
    experiment = _path("experiment_id", "the experiment's id (exp_<ULID>)")
    metric = _path("metric", "the metric's name; it may hold '/' (eval/loss)",
                   {"type": "string", "minLength": 1, "maxLength": 200,
                    "pattern": "^[^/]*[^/.][^/]*(/[^/]*[^/.][^/]*)*$"})
    scope = [_query("project", {"type": "string", "minLength": 1}, "a project's id or name"),
             _query("experiment", {"type": "string", "minLength": 1},
                    "an experiment's id (or its name, with project)")]
    return {
        "/api/v1/projects": {
            "get": _operation("listProjects", "Projects, newest first", "projects",
                              _json(200, "ProjectList", "The projects."), (400,), parameters=[limit, cursor]),
            "post": _operation("createProject", "Create a project", "projects",
                               _json(201, "ProjectReply", "The project."), (400, 409, 413), body="ProjectCreate"),
        },
        "/api/v1/projects/{project}": {
            "get": _operation("getProject", "One project", "projects", _json(200, "ProjectReply", "The project."),
                              (404,), parameters=[project]),
            "patch": _operation("updateProject", "Rename a project, or set its description or primary metric",
                                "projects", _json(200, "ProjectReply", "The project."), (400, 404, 409, 413),
                                parameters=[project], body="ProjectPatch"),
            "delete": _operation(
                "deleteProject", "Delete a project that holds no runs or jobs (with its empty experiments)",
                "projects", _json(200, "ProjectReply", "The deleted project."), (404, 409), parameters=[project],
                description="409 while runs or jobs belong to it: runs are never orphaned or deleted with it."),
        },
        "/api/v1/projects/{project}/experiments": {
            "get": _operation("listExperiments", "A project's experiments, newest first", "projects",
                              _json(200, "ExperimentList", "The experiments."), (400, 404),
                              parameters=[project, limit, cursor]),
            "post": _operation("createExperiment", "Create an experiment in a project", "projects",
                               _json(201, "ExperimentReply", "The experiment."), (400, 404, 409, 413),
                               parameters=[project], body="ExperimentCreate"),
        },
        "/api/v1/experiments/{experiment_id}": {
            "get": _operation("getExperiment", "One experiment", "projects",
                              _json(200, "ExperimentReply", "The experiment."), (404,), parameters=[experiment]),
            "patch": _operation("updateExperiment", "Rename an experiment, or set its description or primary metric",
                                "projects", _json(200, "ExperimentReply", "The experiment."), (400, 404, 409, 413),
                                parameters=[experiment], body="ExperimentPatch"),
            "delete": _operation(
                "deleteExperiment", "Delete an experiment that holds no runs or jobs", "projects",
                _json(200, "ExperimentReply", "The deleted experiment."), (404, 409), parameters=[experiment],
                description="409 while runs or jobs belong to it."),
        },
        "/api/v1/metric-definitions": {"get": _operation(
            "listMetricDefinitions", "Metric definitions (direction, unit...), newest first", "projects",
            _json(200, "MetricDefinitionList", "The definitions; with a project or experiment, those its runs "
                                               "logged."), (400, 404), parameters=[*scope, limit, cursor])},
        "/api/v1/metric-definitions/{metric}": {
            "get": _operation("getMetricDefinition", "One metric definition", "projects",
                              _json(200, "MetricDefinitionReply", "The definition."), (404,), parameters=[metric]),
            "patch": _operation(
                "updateMetricDefinition", "Edit a metric's direction, display name, unit or scope", "projects",
                _json(200, "MetricDefinitionUpdated", "The definition, and how many runs' best points were "
                                                      "recomputed."), (400, 404, 413),
                parameters=[metric], body="MetricDefinitionPatch",
                description="A new direction recomputes the metric's best point in every run's summary from "
                            "its stored points."),
        },
        "/api/v1/primary-metric": {
            "get": _operation("getPrimaryMetric", "The primary metric, resolved experiment -> project -> global",
                              "projects", _json(200, "PrimaryMetricReply", "The resolution and each level's "
                                                                           "setting."), (404,), parameters=scope),
            "put": _operation("putPrimaryMetric", "Set or clear the primary metric of an experiment, a project, "
                                                  "or globally", "projects",
                              _json(200, "PrimaryMetricReply", "The resolution after the change."), (400, 404, 413),
                              body="PrimaryMetricPut"),
        },
    }


# --- the web UI's sign-in (gpuplaned.http.auth_routes) --------------------------------------


def _auth_schemas() -> dict[str, dict[str, Any]]:
    next_path = {"type": "string", "maxLength": MAX_NEXT, "pattern": f"^{NEXT_PATTERN}$",
                 "description": "a path on this server to land on, such as /jobs/job_123; default /"}
    return {
        "UiSession": _object(UiSession, {
            "expires_at": _ms("when the session (or the token) stops working, ms since the epoch; null: never",
                              nullable=True),
            "scopes": {"items": _enum(SCOPES)},
            "via": _enum(VIAS, "how this request was authenticated: the session cookie, an API token, or "
                               "nothing needed (local: the control socket)"),
        }, description="Who is calling: what the web UI asks to know whether it is signed in."),
        "UiSessionReply": _closed({"session": _ref("UiSession")}),
        "LoginRequest": {
            "type": "object",
            "properties": {"token": {"type": "string", "minLength": 1, "pattern": "[^ \\t\\n\\r]",
                                     "description": "an API token (gpp_...) holding at least read"}},
            "required": ["token"],
            "additionalProperties": False,
        },
        "LogoutReply": _closed({"logged_out": {"type": "boolean", "description": "whether a session was ended"}}),
        "LoginLinkCreate": {"type": "object", "properties": {"next": next_path}, "additionalProperties": False},
        "LoginLink": _closed({
            "code": {"type": "string", "pattern": "^[A-Za-z0-9_-]{43}$", "description": "works once"},
            "url": {"type": "string", "pattern": "^https?://[^/]+/login[?]code=[A-Za-z0-9_-]{43}$",
                    "description": "the HTTP front's /login with the code: open it in a browser"},
            "expires_at": _ms("when the link stops working"),
        }),
    }


def _auth_paths() -> dict[str, dict[str, Any]]:
    cookie = (f"`{COOKIE}` (HttpOnly, SameSite=Strict, Path=/, Max-Age: the session's life; Secure over TLS). "
              f"A request it authenticates that is not GET/HEAD must carry `{CSRF_HEADER}: 1` (else 403).")
    login = _operation(
        "authLogin", "Sign a browser in with an API token: sets the session cookie", "auth",
        _json(200, "UiSessionReply", "Signed in; the cookie is set."), (400, 413), body="LoginRequest",
        description=f"The token is checked as the Authorization header would be (401 when it fails) and must "
                    f"hold read (403); the session gets its scopes and never outlives it. The cookie: {cookie}")
    login["responses"]["200"]["headers"] = {**_HEADERS, "Set-Cookie": {
        "required": True, "schema": {"type": "string"}, "description": f"the session cookie: {COOKIE}=..."}}
    link = _operation(
        "createLoginLink", "A one-time link that signs a browser in (gpuplanectl ui)", "auth",
        _json(201, "LoginLink", "The link."), (400, 413), body="LoginLinkCreate",
        description=f"Valid once, for [ui] login_link_ttl_s (120 s): GET /login?code=... sets the session cookie "
                    f"and redirects (303) to `next`. Such a session holds {' and '.join(LINK_SCOPES)}, never "
                    "admin. 503 when the daemon has no HTTP front.")
    link["requestBody"]["required"] = False
    return {
        "/api/v1/auth/login": {"post": login},
        "/api/v1/auth/session": {"get": _operation(
            "getAuthSession", "Who is calling: the web UI's 'am I signed in?'", "auth",
            _json(200, "UiSessionReply", "The caller's session or token."),
            description="401 when neither a token nor a live session cookie comes with the request.")},
        "/api/v1/auth/logout": {"post": _operation(
            "authLogout", "Sign out: end the cookie's session and clear the cookie", "auth",
            _json(200, "LogoutReply", "Signed out (a request without a session changes nothing)."), (413,))},
        "/api/v1/auth/login-links": {"post": link},
    }


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
    return {
        "openapi": OPENAPI_VERSION,
        "info": {"title": "GPUPlane control API", "version": gpuplaned.__version__, "description": _DESCRIPTION,
                 "license": {"name": "MIT", "identifier": "MIT"}},
        "tags": [{"name": name} for name in ("jobs", "runs", "projects", "logs", "nodes", "events", "daemon",
                                             "tokens", "auth")],
        "security": [{"bearer": []}],
        "paths": _scoped(_idempotent(_paths())),
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
            "schemas": _schemas(),
            "parameters": {"IdempotencyKey": {
                "name": idempotency.HEADER, "in": "header", "required": False,
                "schema": {"type": "string", "minLength": 1, "maxLength": idempotency.MAX_KEY,
                           "pattern": "^[\\x20-\\x7e]+$"},
                "description": "Retry-safe POST: a repeat with the same key and body gets the first answer again "
                               "(marked Idempotent-Replayed: true) for 24 h; the same key with another body, or "
                               "while the first is still being answered, is 409. Keys are per caller and path. "
                               "A reply that carries a secret (a new token, a login link) is never kept: its "
                               "repeat is 409 naming what the first request made. Public routes keep no key."}},
            "responses": {f"E{status}": response for status, response in _error_responses().items()},
        },
    }


def document() -> dict[str, Any]:
    """The OpenAPI 3.1 document (a fresh copy: callers may change it)."""
    return copy.deepcopy(_build())
