"""Query parameters shared by node and run metrics, and the JSON form of their results.

``names`` takes exact names and shell-style patterns (``gpu0.*``, ``train/*``); ``start`` and
``end`` are ms (or steps); ``window`` is a duration back from ``end``; ``points`` bounds the
buckets per series. The parameters are attrs classes (``NodeMetricsArgs``, ``RunMetricsArgs``)
that the route structures from the query string; every problem is a 400 that names the
parameter.
"""

from __future__ import annotations

import math
import re
from typing import Any

import attrs

from gpuplaned.protocol.converter import FieldInvalid
from gpuplaned.protocol.fields import UNSET, field
from gpuplaned.protocol.patterns import NameFilter, glob_fault, is_glob
from gpuplaned.protocol.run_replies import Buckets
from gpuplaned.tsdb.query import MAX_POINTS

MAX_WINDOW_MS = 400 * 86_400_000
DEFAULT_POINTS = 300
MAX_MS = 1 << 50  # ms since the epoch: about the year 37,600; anything past it is a typo
_UNITS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION = re.compile(r"^([0-9]{1,6})([smhd])$")
_NAME = re.compile(r"^[A-Za-z0-9_.*?\[\]/-]{1,200}$")
MAX_NAMES = 200  # names or patterns in one query: each is matched against every series name


def names_fault(names: list[str]) -> str | None:
    """Too many names, or the first pattern among them that RE2 refuses (too costly), in words;
    None if neither."""
    if len(names) > MAX_NAMES:
        return f"at most {MAX_NAMES} names or patterns, got {len(names)}"
    for name in names:
        if is_glob(name) and (why := glob_fault(name)) is not None:
            return f"{name!r}: {why}"
    return None


def duration_ms(raw: str) -> int:
    """``90s``, ``15m``, ``6h``, ``7d`` (the pattern ``WINDOW`` already matched) in ms."""
    match = _DURATION.match(raw.strip())
    assert match is not None
    return int(match.group(1)) * _UNITS[match.group(2)]


def _window_bound(raw: str) -> str | None:
    return None if 0 < duration_ms(raw) <= MAX_WINDOW_MS else f"must be between 1s and 400d, got {raw!r}"


def _in_order(args: Any) -> None:
    if args.start is not UNSET and args.window is not UNSET:
        raise FieldInvalid("window", "give either start or window, not both")
    if args.start is not UNSET and args.end is not UNSET and args.start > args.end:
        raise FieldInvalid("start", "must not be after end")


def _names(example: str) -> Any:
    return field(default=UNSET, min_items=1, items={"min_length": 1, "pattern": _NAME.pattern},
                 message="not a metric name or pattern: {value!r}", check=names_fault, schema={"maxItems": MAX_NAMES},
                 description=f"comma-separated names or shell patterns ({example}); absent: every series")


def _window(description: str) -> Any:
    return field(default=UNSET, pattern=_DURATION.pattern, check=_window_bound, description=description,
                 message="a duration like 90s, 15m, 6h or 7d, not {value!r}")


def _x(description: str) -> Any:
    return field(default=UNSET, minimum=0, maximum=MAX_MS, description=description)


def _points() -> Any:
    return field(default=DEFAULT_POINTS, minimum=1, maximum=MAX_POINTS, description="at most this many buckets")


@attrs.frozen(kw_only=True)
class NodeMetricsArgs:
    """``GET /nodes/{node}/metrics``: ``start``/``end`` in ms, or ``window`` back from ``end``."""

    names: list[str] = _names("gpu0.*")
    window: str = _window("a duration back from end: 90s, 15m, 6h, 7d (1s to 400d); default 1h; not with start")
    start: int = _x("ms since the epoch; not with window")
    end: int = _x("ms since the epoch; default now; not before start")
    points: int = _points()

    __attrs_post_init__ = _in_order


def _window_needs_ts(args: RunMetricsArgs) -> None:
    if args.x == "step" and args.window is not UNSET:
        raise FieldInvalid("window", "only with x=ts (steps have no duration)")
    _in_order(args)


@attrs.frozen(kw_only=True)
class RunMetricsArgs:
    """``GET /runs/{id}/metrics``: ``start``/``end`` in x units (steps, or ms with ``x=ts``)."""

    names: list[str] = _names("train/*")
    x: str = field(default="step", enum=("step", "ts"), description="the x axis")
    window: str = _window("with x=ts only: a duration back from end; not with start")
    start: int = _x("first x (step, or ms with x=ts); absent: the first point")
    end: int = _x("last x; absent: the last point")
    points: int = _points()

    __attrs_post_init__ = _window_needs_ts


def given(value: Any) -> Any:
    """None for a parameter left out."""
    return None if value is UNSET else value


def expand_names(wanted: tuple[str, ...], known: list[str]) -> list[str]:
    """Exact names as given (even unknown ones: they come back empty), patterns expanded (by
    RE2, as fnmatch reads them; the field's check has already refused what RE2 would)."""
    return NameFilter(wanted, "names").expand(known)


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


NO_SERIES = {"resolution": "raw", "width": 1, "x": [], "series": {}}  # what a query of no names answers


def series_columns(result: dict[str, Any]) -> dict[str, Any]:
    """``tsdb.query_series``'s answer as a reply's fields: its ``resolution``, ``width`` and ``x``, and
    each series' columns as ``Buckets``, NaN and infinities as null (``json_finite``)."""
    series = {name: Buckets(**json_finite(columns)) for name, columns in result["series"].items()}
    return dict(result, series=series)
