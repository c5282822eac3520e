"""Summaries of values that stay meaningful with NaN and infinities.

A summary is ``[count, nan, min, max, sum, last, last_ts]``: ``count`` counts every point,
``nan`` the NaN ones; ``min``, ``max`` and ``sum`` skip NaN (a NaN loss must not hide the
range of the rest) and are NaN when every value is NaN. ``last`` is the value at the
latest timestamp, NaN included. Infinities take part as numbers: ``max`` can be +inf and
``sum`` of +inf and -inf is NaN, which then reads as "no average".
"""

from __future__ import annotations

import math
from collections.abc import Sequence

NAN = math.nan
INF = math.inf


def summarize(values: Sequence[float]) -> tuple[int, float, float, float]:
    """``(nan, min, max, sum)`` of a non-empty sequence."""
    total = sum(values)
    if total - total == 0.0:  # finite: no NaN and no infinity, so the C builtins are right
        return 0, min(values), max(values), total
    clean = [v for v in values if v == v]
    if not clean:
        return len(values), NAN, NAN, NAN
    return len(values) - len(clean), min(clean), max(clean), sum(clean)


def merge_into(acc: list, count: int, nan: int, lo: float, hi: float, total: float,
               last: float, last_ts: int) -> None:
    """Fold one summary into ``acc``; NaN ``lo``/``hi`` (an all-NaN part) never wins."""
    acc[0] += count
    acc[1] += nan
    if lo < acc[2]:
        acc[2] = lo
    if hi > acc[3]:
        acc[3] = hi
    if count > nan:
        acc[4] += total
    if last_ts >= acc[6]:
        acc[5] = last
        acc[6] = last_ts


def empty() -> list:
    return [0, 0, INF, -INF, 0.0, NAN, -(2**63)]

