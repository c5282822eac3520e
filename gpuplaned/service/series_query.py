"""Query parameters shared by node and run metrics, and the JSON form of their results.

``names`` takes exact names and shell-style patterns (``gpu0.*``, ``train/*``); ``start`` and
``end`` are ms (or steps); ``window`` is a duration back from ``end``; ``points`` bounds the
buckets per series. Every problem is a 400 that names the parameter.
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Mapping
from typing import Any

from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.tsdb.query import MAX_POINTS

MAX_WINDOW_MS = 400 * 86_400_000
DEFAULT_POINTS = 300
MAX_MS = 1 << 50  # ms since the epoch: about the year 37,600; anything past it is a typo
_UNITS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION = re.compile(r"^(\d{1,6})([smhd])$")
_NAME = re.compile(r"^[A-Za-z0-9_.*?\[\]/-]{1,200}$")


def parse_duration_ms(raw: str) -> int:
    match = _DURATION.match(raw.strip())
    if not match:
        raise ApiError(ErrorCode.BAD_REQUEST, f"window: a duration like 90s, 15m, 6h or 7d, not {raw!r}",
                       {"field": "window"})
    value = int(match.group(1)) * _UNITS[match.group(2)]
    if not 0 < value <= MAX_WINDOW_MS:
        raise ApiError(ErrorCode.BAD_REQUEST, f"window: must be between 1s and 400d, got {raw!r}", {"field": "window"})
    return value


def ms_arg(args: Mapping[str, str], name: str) -> int | None:
    raw = args.get(name)
    if raw in (None, ""):
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ApiError(ErrorCode.BAD_REQUEST, f"{name}: ms since the epoch, not {raw!r}", {"field": name}) from None
    if not 0 <= value <= MAX_MS:
        raise ApiError(ErrorCode.BAD_REQUEST, f"{name}: ms since the epoch from 0 to {MAX_MS}, got {value}",
                       {"field": name})
    return value


def parse_names(args: Mapping[str, str]) -> tuple[str, ...]:
    names = tuple(n.strip() for n in (args.get("names") or "").split(",") if n.strip())
    bad = [n for n in names if not _NAME.match(n)]
    if bad:
        raise ApiError(ErrorCode.BAD_REQUEST, f"names: not a metric name or pattern: {bad[0]!r}", {"field": "names"})
    return names


def parse_points(args: Mapping[str, str]) -> int:
    raw_points = args.get("points") or str(DEFAULT_POINTS)
    try:
        points = int(raw_points)
    except ValueError:
        raise ApiError(ErrorCode.BAD_REQUEST, f"points: must be an integer, got {raw_points!r}",
                       {"field": "points"}) from None
    if not 1 <= points <= MAX_POINTS:
        raise ApiError(ErrorCode.BAD_REQUEST, f"points: must be between 1 and {MAX_POINTS}, got {points}",
                       {"field": "points"})
    return points


def parse_range(args: Mapping[str, str], *, default_window_ms: int | None) -> tuple[int | None, int | None, int | None]:
    """(start, end, window_ms) from ``start``/``end`` (ms, or steps) or ``window`` back from end."""
    start, end = ms_arg(args, "start"), ms_arg(args, "end")
    window = args.get("window")
    window_ms = parse_duration_ms(window) if window else None
    if start is not None and window_ms is not None:
        raise ApiError(ErrorCode.BAD_REQUEST, "give either start or window, not both", {"field": "window"})
    if start is None and window_ms is None:
        window_ms = default_window_ms
    if start is not None and end is not None and start > end:
        raise ApiError(ErrorCode.BAD_REQUEST, "start: must not be after end", {"field": "start"})
    return start, end, window_ms


def expand_names(wanted: tuple[str, ...], known: list[str]) -> list[str]:
    """Exact names as given (even unknown ones: they come back empty), patterns expanded."""
    if not wanted:
        return list(known)
    out: list[str] = []
    for name in wanted:
        found = fnmatch.filter(known, name) if any(c in name for c in "*?[") else [name]
        out += [n for n in found if n not in out]
    return out


def json_finite(value: Any) -> Any:
    """JSON has no NaN or infinity: such values become null (each bucket's ``nan`` count says
    how many NaN points it held)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_finite(v) for v in value]
    return value
