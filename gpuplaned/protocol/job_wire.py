"""Job submissions and job views on the wire, and the validation of a submission.

A bad submission is an ``ApiError`` (400 ``bad_request``) whose message and
``details.field`` name the problem; nothing is created.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

import attrs

from gpuplaned.protocol.bodies import known_object
from gpuplaned.protocol.errors import ApiError, ErrorCode

JOB_TYPES = ("TRAIN", "EVALUATE", "INFERENCE", "EXPORT", "CUSTOM")
DEFAULT_STOP_GRACE_S = 10.0
MAX_PRIORITY = 1_000_000


@attrs.frozen
class JobSpec:
    name: str
    command: tuple[str, ...]
    cwd: str
    env: dict[str, str]
    gpu: int = 1
    labels: tuple[str, ...] = ()
    node: str | None = None
    priority: int = 0
    max_attempts: int = 1
    timeout_s: float | None = None
    stop_grace_s: float = DEFAULT_STOP_GRACE_S
    type: str = "TRAIN"


@attrs.frozen
class Job:
    id: str
    name: str
    type: str
    status: str
    priority: int
    command: list[str]
    cwd: str | None
    env: dict[str, str | None]  # None: a value not shown to this caller (``service.jobs.env_view``)
    gpu: int
    labels: list[str]
    node: str | None  # the selector: run only on this node
    node_id: str | None  # where it was dispatched
    attempt: int
    max_attempts: int
    timeout_s: float | None
    stop_grace_s: float
    run_id: str | None
    gpu_indexes: list[int]
    created_at: int  # ms since the epoch
    started_at: int | None
    finished_at: int | None
    exit_code: int | None
    failure_reason: str | None  # a code: EXIT_CODE, OOM, TIMEOUT, SPAWN_FAILED, SHIM_DIED...
    failure_message: str | None  # what happened, in words
    cancel_requested: bool


_KNOWN = {f.name for f in attrs.fields(JobSpec)} | {"retry", "dir", "gpus"}


def _bad(field: str, message: str) -> ApiError:
    return ApiError(ErrorCode.BAD_REQUEST, f"{field}: {message}", {"field": field})


def _int(body: Mapping[str, Any], field: str, default: int, low: int, high: int) -> int:
    value = body.get(field, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(field, f"must be an integer, got {value!r}")
    if not low <= value <= high:
        raise _bad(field, f"must be between {low} and {high}, got {value}")
    return value


def _seconds(body: Mapping[str, Any], field: str, default: float | None) -> float | None:
    value = body.get(field, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise _bad(field, f"must be a positive number of seconds, got {value!r}")
    return float(value)


def _strings(body: Mapping[str, Any], field: str) -> tuple[str, ...]:
    value = body.get(field, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _bad(field, "must be a list of strings")
    return tuple(value)


def parse_job_spec(body: Any) -> JobSpec:
    """Validate a submission (``POST /api/v1/jobs`` body) into a ``JobSpec``.

    ``command`` is an argv list (no shell unless the user writes ``sh -c``); ``cwd`` (alias
    ``dir``) must be an existing absolute directory; ``retry`` N means ``max_attempts`` N+1.

    Raises:
        ApiError: bad_request naming the field.
    """
    known_object(body, _KNOWN)
    command = body.get("command")
    if isinstance(command, str) or not isinstance(command, list) or not command:
        raise _bad("command", "must be a non-empty list of arguments (argv), e.g. [\"python\", \"train.py\"]")
    if not all(isinstance(a, str) for a in command) or not command[0]:
        raise _bad("command", "every argument must be a string and the program name non-empty")
    if any("\x00" in a for a in command):
        raise _bad("command", "arguments cannot contain NUL bytes")

    cwd = body.get("cwd", body.get("dir"))
    if cwd is None:
        raise _bad("cwd", "the working directory is required (absolute path)")
    if not isinstance(cwd, str) or not os.path.isabs(cwd):
        raise _bad("cwd", f"must be an absolute path, got {cwd!r}")
    if not os.path.isdir(cwd):
        raise _bad("cwd", f"directory {cwd} does not exist")

    env = body.get("env", {})
    if not isinstance(env, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise _bad("env", "must be an object of string values")
    for key, value in env.items():
        if not key or "=" in key or "\x00" in key:
            raise _bad("env", f"bad variable name {key!r}")
        if "\x00" in value:  # exec cannot pass it: the job could never start
            raise _bad("env", f"the value of {key} contains a NUL byte")

    name = body.get("name") or os.path.basename(command[0])
    if not isinstance(name, str) or len(name) > 200:
        raise _bad("name", "must be a string of at most 200 characters")

    node = body.get("node")
    if node is not None and (not isinstance(node, str) or not node):
        raise _bad("node", "must be a node name")
    job_type = body.get("type", "TRAIN")
    if job_type not in JOB_TYPES:
        raise _bad("type", f"must be one of {', '.join(JOB_TYPES)}")
    gpu_field = "gpus" if "gpus" in body else "gpu"
    retry = _int(body, "retry", 0, 0, 100) if "retry" in body else None
    max_attempts = _int(body, "max_attempts", 1, 1, 101)
    if retry is not None:
        max_attempts = retry + 1
    return JobSpec(
        name=name,
        command=tuple(command),
        cwd=cwd,
        env=dict(env),
        gpu=_int(body, gpu_field, 1, 0, 64),
        labels=_strings(body, "labels"),
        node=node,
        priority=_int(body, "priority", 0, -MAX_PRIORITY, MAX_PRIORITY),
        max_attempts=max_attempts,
        timeout_s=_seconds(body, "timeout_s", None),
        stop_grace_s=_seconds(body, "stop_grace_s", DEFAULT_STOP_GRACE_S) or DEFAULT_STOP_GRACE_S,
        type=job_type,
    )
