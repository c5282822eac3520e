"""What a training script records besides metrics: its own events and its checkpoints.

They travel in the SDK's metric batches (``"events"`` and ``"checkpoints"`` beside
``"metrics"``), so they inherit the batches' exactly-once delivery: a resent (session, seq)
stores nothing twice. This module only checks their shape (pure, no I/O); the store keeps
them (``gpuplaned.store.checkpoint_rows``, the ``events`` table).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import attrs

from gpuplaned.protocol.errors import ApiError, ErrorCode

MAX_RECORDS = 1000  # of each kind in one batch: a script logs a few, never a stream
MAX_DATA_BYTES = 16 * 1024  # one event's data or one checkpoint's metadata, as JSON
MAX_PATH = 4096
SEVERITIES = ("info", "warning", "critical")
USER_EVENT = "USER_EVENT"  # the events table's type; the script's own name is the message
CHECKPOINT_CREATED = "CHECKPOINT_CREATED"


@attrs.frozen
class ScriptEvent:
    name: str
    severity: str
    step: int | None
    ts: int | None  # ms, the script's clock when it logged
    data: dict[str, Any]


@attrs.frozen
class CheckpointRecord:
    path: str
    step: int | None
    epoch: float | None
    ts: int | None
    size_bytes: int | None
    metadata: dict[str, Any]


def _bad(field: str, message: str) -> ApiError:
    return ApiError(ErrorCode.BAD_REQUEST, f"{field}: {message}", {"field": field})


def _items(body: Mapping[str, Any], field: str) -> list[Mapping[str, Any]]:
    items = body.get(field)
    if items is None:
        return []
    if not isinstance(items, list) or len(items) > MAX_RECORDS:
        raise _bad(field, f"a list of at most {MAX_RECORDS} objects")
    for i, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise _bad(f"{field}[{i}]", "an object")
    return items


def _known(item: Mapping[str, Any], where: str, known: set[str]) -> None:
    unknown = sorted(set(item) - known)
    if unknown:
        raise ApiError(ErrorCode.BAD_REQUEST, f"{where}: unknown field(s): {', '.join(unknown)}",
                       {"field": f"{where}.{unknown[0]}", "known": sorted(known)})


def _int(item: Mapping[str, Any], where: str, key: str, high: int = 1 << 62) -> int | None:
    value = item.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < high:
        raise _bad(f"{where}.{key}", "a non-negative integer")
    return value


def _text(item: Mapping[str, Any], where: str, key: str, limit: int) -> str:
    value = item.get(key)
    if not isinstance(value, str) or not 0 < len(value) <= limit or "\x00" in value:
        raise _bad(f"{where}.{key}", f"a string of 1 to {limit} characters (no NUL)")
    return value


def _data(item: Mapping[str, Any], where: str, key: str) -> dict[str, Any]:
    value = item.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _bad(f"{where}.{key}", "a JSON object")
    if len(json.dumps(value, separators=(",", ":"))) > MAX_DATA_BYTES:
        raise _bad(f"{where}.{key}", f"at most {MAX_DATA_BYTES} bytes as JSON")
    return dict(value)


def parse_events(body: Mapping[str, Any]) -> list[ScriptEvent]:
    """``body["events"]``: ``[{"name", "severity"?, "step"?, "ts"?, "data"?}]``.

    Raises:
        ApiError: bad_request naming the first bad field (``events[2].name``).
    """
    out = []
    for i, item in enumerate(_items(body, "events")):
        where = f"events[{i}]"
        _known(item, where, {"name", "severity", "step", "ts", "data"})
        severity = item.get("severity", "info")
        if severity not in SEVERITIES:
            raise _bad(f"{where}.severity", f"one of {', '.join(SEVERITIES)}")
        out.append(ScriptEvent(_text(item, where, "name", 200), severity, _int(item, where, "step"),
                               _int(item, where, "ts"), _data(item, where, "data")))
    return out


def parse_checkpoints(body: Mapping[str, Any]) -> list[CheckpointRecord]:
    """``body["checkpoints"]``: ``[{"path", "step"?, "epoch"?, "ts"?, "size_bytes"?, "metadata"?}]``.

    The path is the script's own (absolute, as the SDK resolved it); nothing is read or
    copied: a checkpoint is registered, never moved.

    Raises:
        ApiError: bad_request naming the first bad field.
    """
    out = []
    for i, item in enumerate(_items(body, "checkpoints")):
        where = f"checkpoints[{i}]"
        _known(item, where, {"path", "step", "epoch", "ts", "size_bytes", "metadata"})
        epoch = item.get("epoch")
        if epoch is not None and (isinstance(epoch, bool) or not isinstance(epoch, (int, float))
                                  or not math.isfinite(epoch) or epoch < 0):
            raise _bad(f"{where}.epoch", "a finite non-negative number")
        out.append(CheckpointRecord(_text(item, where, "path", MAX_PATH), _int(item, where, "step"),
                                    None if epoch is None else float(epoch), _int(item, where, "ts"),
                                    _int(item, where, "size_bytes"), _data(item, where, "metadata")))
    return out


def best_checkpoint(values: Mapping[str, float | None], direction: str) -> str | None:
    """The id whose metric value is best by ``direction`` ("minimize"/"maximize"); None when
    no value is known or the metric has no direction. Ties go to the first id given (the
    earliest checkpoint), NaN never wins."""
    best_id, best = None, None
    if direction not in ("minimize", "maximize"):
        return None
    for ck_id, value in values.items():
        if value is None or math.isnan(value):
            continue
        if best is None or (value < best if direction == "minimize" else value > best):
            best_id, best = ck_id, value
    return best_id
