"""What a training script records besides metrics: its own events and its checkpoints.

They travel in the SDK's metric batches (``"events"`` and ``"checkpoints"`` beside
``"metrics"``), so they inherit the batches' exactly-once delivery: a resent (session, seq)
stores nothing twice. This module only checks their shape (pure, no I/O: attrs classes whose
validators the converter runs); the store keeps
them (``gpuplaned.store.checkpoint_rows``, the ``events`` table).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, TypeVar

import attrs

from gpuplaned.protocol.converter import FieldInvalid, check
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.fields import field
from gpuplaned.protocol.vocabulary import SEVERITIES

MAX_RECORDS = 1000  # of each kind in one batch: a script logs a few, never a stream
MAX_DATA_BYTES = 16 * 1024  # one event's data or one checkpoint's metadata, as JSON
MAX_PATH = 4096
USER_EVENT = "USER_EVENT"  # the events table's type; the script's own name is the message
CHECKPOINT_CREATED = "CHECKPOINT_CREATED"
R = TypeVar("R")


_STAMP = 1 << 62  # a step, a ts or a size: a non-negative integer under this


def _no_nul(value: str) -> str | None:
    return "must hold no NUL character" if "\x00" in value else None


def _data(value: dict[str, Any]) -> str | None:
    if len(json.dumps(value, separators=(",", ":"))) > MAX_DATA_BYTES:
        return f"at most {MAX_DATA_BYTES} bytes as JSON"
    return None


def _stamp() -> Any:
    return field(default=None, minimum=0, maximum=_STAMP - 1, message="a non-negative integer")


def _epoch(value: float) -> str | None:
    return None if math.isfinite(value) and value >= 0 else "a finite non-negative number"


@attrs.frozen
class ScriptEvent:
    """``{"name", "severity"?, "step"?, "ts"?, "data"?}`` in a batch's ``events``."""

    name: str = field(min_length=1, max_length=200, check=_no_nul)
    severity: str = field(default="info", enum=SEVERITIES)
    step: int | None = _stamp()
    ts: int | None = _stamp()  # ms, the script's clock when it logged
    data: dict[str, Any] = field(factory=dict, check=_data)


@attrs.frozen
class CheckpointRecord:
    """``{"path", "step"?, "epoch"?, "ts"?, "size_bytes"?, "metadata"?}`` in a batch's ``checkpoints``."""

    path: str = field(min_length=1, max_length=MAX_PATH, check=_no_nul)
    step: int | None = _stamp()
    epoch: float | None = field(default=None, check=_epoch)
    ts: int | None = _stamp()
    size_bytes: int | None = _stamp()
    metadata: dict[str, Any] = field(factory=dict, check=_data)


def _records(body: Mapping[str, Any], key: str, cls: type[R]) -> list[R]:
    """``body[key]`` as a list of ``cls``; ApiError names the first bad field (``events[2].name``)."""
    items = body.get(key)
    if items is None:
        return []
    if type(items) is not list or len(items) > MAX_RECORDS:
        raise _bad(key, f"a list of at most {MAX_RECORDS} objects")
    out = []
    for i, item in enumerate(items):
        if type(item) is not dict:
            raise _bad(f"{key}[{i}]", "an object")
        try:
            out.append(check(item, cls))
        except FieldInvalid as fault:
            raise _bad(f"{key}[{i}].{fault.field}", fault.message) from None
    return out


def _bad(field: str, message: str) -> ApiError:
    return ApiError(ErrorCode.BAD_REQUEST, f"{field}: {message}", {"field": field})


def parse_events(body: Mapping[str, Any]) -> list[ScriptEvent]:
    """``body["events"]`` (absent: none).

    Raises:
        ApiError: bad_request naming the first bad field (``events[2].name``).
    """
    return _records(body, "events", ScriptEvent)


def parse_checkpoints(body: Mapping[str, Any]) -> list[CheckpointRecord]:
    """``body["checkpoints"]`` (absent: none).

    The path is the script's own (absolute, as the SDK resolved it); nothing is read or
    copied: a checkpoint is registered, never moved.

    Raises:
        ApiError: bad_request naming the first bad field.
    """
    return _records(body, "checkpoints", CheckpointRecord)


def rank_checkpoints(values: Mapping[str, float | None], direction: str) -> list[str]:
    """The ids with a finite value, best first by ``direction`` ("minimize"/"maximize"); empty
    when the metric has no direction. Ties keep the order given (the earliest checkpoint
    first); a NaN or infinite value never ranks. The one ranking of checkpoints: the best
    mark, the experiment's best and retention's best K all take it."""
    if direction not in ("minimize", "maximize"):
        return []
    finite = [(ck_id, value) for ck_id, value in values.items() if value is not None and math.isfinite(value)]
    finite.sort(key=lambda pair: pair[1] if direction == "minimize" else -pair[1])  # stable
    return [ck_id for ck_id, _ in finite]


def best_checkpoint(values: Mapping[str, float | None], direction: str) -> str | None:
    """The id whose metric value is best by ``direction`` ("minimize"/"maximize"); None when
    no value is known or the metric has no direction. Ties go to the first id given (the
    earliest checkpoint); a NaN or infinite value never wins."""
    ranked = rank_checkpoints(values, direction)
    return ranked[0] if ranked else None
