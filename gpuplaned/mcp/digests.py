"""What an agent reads instead of raw data: a metric series as its statistics and a few
min/max buckets, a log as the lines that match within a line budget. Pure functions over
what the service layer returned, no I/O, so the token cost of a reply is bounded here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from gpuplaned.protocol.fields import doc
from gpuplaned.protocol.patterns import Pattern, compile_regex
from gpuplaned.protocol.run_replies import RunMetrics

FLAT = 0.02  # a relative change under 2% between the first and last tenth reads as flat


@attrs.frozen(kw_only=True)
class SeriesStats:
    count: int = doc("points in the range")
    first_step: int | None = doc("x of the first bucket with a point")
    last_step: int | None = doc("x of the last bucket with a point")
    min: float | None
    min_step: int | None = doc("x of the bucket holding the minimum (its start when width > 1)")
    max: float | None
    max_step: int | None
    last: float | None = doc("the latest value")
    trend: str = doc("the last tenth's mean against the first tenth's", enum=("rising", "falling", "flat", "unknown"))


@attrs.frozen(kw_only=True)
class SeriesDigest:
    stats: SeriesStats
    x: list[int] = doc("each bucket's start, only buckets with a point")
    min: list[float | None]
    max: list[float | None]


@attrs.frozen(kw_only=True)
class MetricsDigest:
    run_id: str
    x_axis: str = doc(enum=("step", "ts"))
    width: int = doc("bucket width in x units (1: every point)", minimum=1)
    buckets: int = doc("the most buckets any series has here (at most max_points)", minimum=0)
    series: dict[str, SeriesDigest] = doc("metric name -> its statistics first, then min/max per bucket")


def _trend(values: Sequence[float]) -> str:
    if len(values) < 2:
        return "unknown"
    tenth = max(1, len(values) // 10)
    head, tail = sum(values[:tenth]) / tenth, sum(values[-tenth:]) / tenth
    scale = max(abs(head), abs(tail), 1e-12)
    if abs(tail - head) / scale < FLAT:
        return "flat"
    return "rising" if tail > head else "falling"


def digest_series(x: Sequence[int], columns: dict[str, list[Any]]) -> SeriesDigest:
    """One series of ``tsdb.query_series``'s answer (columns aligned with ``x``)."""
    keep = [i for i, n in enumerate(columns["count"]) if n]
    lows = [columns["min"][i] for i in keep]
    highs = [columns["max"][i] for i in keep]
    xs = [x[i] for i in keep]
    finite_lows = [(v, xs[j]) for j, v in enumerate(lows) if v is not None]
    finite_highs = [(v, xs[j]) for j, v in enumerate(highs) if v is not None]
    low = min(finite_lows, default=(None, None), key=lambda p: p[0])
    high = max(finite_highs, default=(None, None), key=lambda p: p[0])
    lasts = [columns["last"][i] for i in keep if columns["last"][i] is not None]
    avgs = [columns["avg"][i] for i in keep if columns["avg"][i] is not None]
    stats = SeriesStats(count=sum(columns["count"][i] for i in keep),
                        first_step=xs[0] if xs else None, last_step=xs[-1] if xs else None,
                        min=low[0], min_step=low[1], max=high[0], max_step=high[1],
                        last=lasts[-1] if lasts else None, trend=_trend(avgs))
    return SeriesDigest(stats=stats, x=xs, min=lows, max=highs)


def digest_metrics(answer: RunMetrics) -> MetricsDigest:
    """``runs.query_metrics``'s answer, digested."""
    series = {name: digest_series(answer.x, attrs.asdict(columns)) for name, columns in answer.series.items()}
    return MetricsDigest(run_id=answer.run_id, x_axis=answer.x_axis, width=answer.width,
                         buckets=max((len(s.x) for s in series.values()), default=0), series=series)


def describe_series(name: str, stats: SeriesStats) -> str:
    if not stats.count:
        return f"{name}: no points"
    return (f"{name}: {stats.count} points, steps {stats.first_step}-{stats.last_step}, last {stats.last:.4g}, "
            f"min {stats.min:.4g} at {stats.min_step}, {stats.trend}")


def compile_grep(pattern: str | None) -> Pattern | None:
    """The grep filter (RE2: linear in the text, never Python's backtracking ``re``), or a 400
    naming the fault."""
    return None if pattern is None else compile_regex(pattern, "grep")


@attrs.frozen(kw_only=True)
class LogLineOut:
    offset: int = doc("the line's byte offset in the file", minimum=0)
    line: str


@attrs.frozen(kw_only=True)
class LogTail:
    job_id: str
    attempt: int = doc("0: the job has not run yet", minimum=0)
    stream: str
    lines: list[LogLineOut] = doc("oldest first")
    scanned: int = doc("lines read from the end of the log", minimum=0)
    matched: int = doc("of those, the lines the grep filter matched (all without one)", minimum=0)
    left_out: int = doc("matching lines not returned: over the line budget", minimum=0)
    stopped: str | None = doc("null: grep searched every line scanned; else the budget (bytes, seconds) that "
                              "stopped it before the older lines", enum=("bytes", "seconds", None))

