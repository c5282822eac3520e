"""A metric as the diagnosis reads it: the tsdb's buckets (``query_series`` columns), each
with its min, max, avg, NaN count and count, over step or time.

A short series comes point by point (``width`` 1: min = max = avg = the value); a million
points come as a couple of thousand buckets, each keeping its extremes, so a spike or a NaN
anywhere is still seen; the finding then asks for the exact points of one bucket
(``gpuplaned.service.api.diagnosis`` reads those raw).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from statistics import median
from typing import Any

import attrs

_EVAL_WORDS = ("val", "eval", "test", "valid", "dev")


@attrs.frozen
class Curve:
    """One series over one axis: ``xs[k]`` the start of bucket ``k`` (its own x when width is 1)."""

    xs: list[int]
    avg: list[float | None]
    min: list[float | None]
    max: list[float | None]
    nan: list[int]
    count: list[int]
    width: int = 1

    @classmethod
    def of(cls, found: Mapping[str, Any]) -> Curve:
        """From ``tsdb.query_series``' answer for one series: ``{"x", "width", "series": {name: cols}}``
        already narrowed to ``{"x", "width", "min", ...}``."""
        keep = [k for k, c in enumerate(found["count"]) if c]
        pick = lambda col: [found[col][k] for k in keep]  # noqa: E731
        return cls([found["x"][k] for k in keep], pick("avg"), pick("min"), pick("max"),
                   [n or 0 for n in pick("nan")], pick("count"), found.get("width", 1))

    @classmethod
    def points(cls, xs: Sequence[int], values: Sequence[float]) -> Curve:
        """Point by point (tests, short series)."""
        finite = [v if math.isfinite(v) else None for v in values]
        return cls(list(xs), finite, finite, finite, [0 if math.isfinite(v) else 1 for v in values],
                   [1] * len(xs), 1)

    def span(self, k: int) -> tuple[int, int]:
        """The x range of bucket ``k``, both ends included."""
        return self.xs[k], self.xs[k] + self.width - 1

    def finite(self) -> tuple[list[int], list[float]]:
        """The buckets with a finite average: their x and average."""
        keep = [(x, v) for x, v in zip(self.xs, self.avg) if v is not None and math.isfinite(v)]
        return [x for x, _ in keep], [v for _, v in keep]


def is_loss(name: str) -> bool:
    return "loss" in name.lower()


def is_eval(name: str) -> bool:
    words = name.lower().replace("-", "/").replace("_", "/").replace(".", "/").split("/")
    return any(w in _EVAL_WORDS for w in words)


def train_loss(names: Sequence[str]) -> str | None:
    """The training loss: a loss that is no evaluation's, the shortest name first (``loss``
    before ``train/loss_aux``)."""
    found = sorted((n for n in names if is_loss(n) and not is_eval(n)), key=lambda n: (len(n), n))
    return found[0] if found else None


def eval_loss(names: Sequence[str]) -> str | None:
    found = sorted((n for n in names if is_loss(n) and is_eval(n)), key=lambda n: (len(n), n))
    return found[0] if found else None


def slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of ys over xs (0 for fewer than 2 points or one x)."""
    n = len(xs)
    if n < 2:
        return 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    var = sum((x - mx) ** 2 for x in xs)
    return 0.0 if var == 0 else sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var


def relative_slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """The slope times the window's x span, over the window's mean magnitude: the fraction
    the value moved across the window (-0.2: fell by a fifth)."""
    if len(xs) < 2:
        return 0.0
    scale = sum(abs(y) for y in ys) / len(ys) or 1.0
    return slope(xs, ys) * (xs[-1] - xs[0]) / scale


def mad(values: Sequence[float]) -> tuple[float, float]:
    """Median and median absolute deviation."""
    mid = median(values)
    return mid, median([abs(v - mid) for v in values])
