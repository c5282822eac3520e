"""The replies about runs: their metrics as columns, their summary and progress, one series' raw points."""

from __future__ import annotations

from typing import Any

import attrs

from gpuplaned.protocol.fields import doc
from gpuplaned.protocol.reply_words import AXES, DIRECTIONS, MS, Ref, listed, next_cursor_field
from gpuplaned.protocol.run_wire import Run

PRIMARY_SOURCES = ("experiment", "project", "global")  # where a run's primary metric is set, nearest first
SERIES_ENCODINGS = ("json", "base64")


@attrs.frozen(kw_only=True)
class RunPrimaryMetric:
    """The run's primary metric (experiment -> project -> global) and its values in this run."""

    name: str
    source: str = doc(enum=PRIMARY_SOURCES)
    direction: str | None = doc(enum=DIRECTIONS)
    count: int = doc("the run's points of it", minimum=0)
    latest: dict[str, Any] | None = doc("{step, ts, value}; null until the run logs it")
    best: dict[str, Any] | None = doc("{step, value} by the direction; null without one")


@attrs.frozen(kw_only=True)
class RunReply:
    run: Run
    project: Ref | None
    experiment: Ref | None
    primary_metric: RunPrimaryMetric | None


@attrs.frozen(kw_only=True)
class RunList:
    runs: list[Run]
    next_cursor: str | None = next_cursor_field()


@attrs.frozen(kw_only=True)
class Buckets:
    """One series' columns, aligned with x; NaN and infinite values read null, `nan` counts NaN points."""

    min: list[float | None]
    max: list[float | None]
    avg: list[float | None]
    last: list[float | None]
    count: list[int | None]
    nan: list[int | None]


@attrs.frozen(kw_only=True)
class RunMetrics:
    run_id: str
    x_axis: str = doc(enum=AXES)
    resolution: str = doc(enum=("raw",))
    width: int = doc("bucket width in x units (1: every point)", minimum=1)
    x: list[int] = doc("each bucket's start (step or ms)")
    series: dict[str, Buckets] = doc("metric name -> columns aligned with x")


@attrs.frozen(kw_only=True)
class RunMetricsMany:
    runs: list[RunMetrics]


@attrs.frozen(kw_only=True)
class Progress:
    step: int | None = doc("the highest step logged")
    max_steps: int | None = doc("from SDK init(max_steps=) or the run's config (max_steps, total_steps, num_steps)")
    percent: float | None
    epoch: float | None = doc("the latest value of a metric named epoch")
    steps_per_s: float | None = doc("over the run's recent batches")
    eta_s: float | None = doc("seconds left at that rate (needs max_steps)")
    eta_ts: int | None = doc("ms since the epoch")


@attrs.frozen(kw_only=True)
class HealthWarning:
    type: str = doc("the rule: LOSS_NAN, LOSS_SPIKE, OVERFITTING_SUSPECTED, RUN_STALLED")
    severity: str
    message: str
    metric: str | None = listed()  # the loss rules' warnings name the metric, a stall its job
    step: int | None = listed()
    job_id: str | None = listed()


@attrs.frozen(kw_only=True)
class RunSummary:
    run_id: str
    metrics: dict[str, dict[str, Any]] = doc("name -> {count, direction, latest: {step, ts, value}, best: "
                                             "{step, value}, trend (losses)}")
    progress: Progress
    warnings: list[str]
    health: list[HealthWarning] = doc("the rules' open episodes, worst first")
    primary_metric: RunPrimaryMetric | None = doc("null: no primary metric is set for this run's experiment, "
                                                  "project or globally")


@attrs.frozen(kw_only=True)
class RunSummaryReply:
    summary: RunSummary


def _column(kind: str | list[str], dtype: str, note: str = "") -> Any:
    """A column of GET /runs/{id}/series: numbers, or with encoding=base64 the base64 of its
    little-endian ``dtype`` values; present only when asked for."""
    return doc(f"{note + '; ' if note else ''}base64: little-endian {dtype}", default=None, optional=True,
               anyOf=[{"type": "array", "items": {"type": kind}}, {"type": "string", "contentEncoding": "base64"}])


_INDICES = {"type": "array", "items": {"type": "integer", "minimum": 0}}


@attrs.frozen(kw_only=True)
class RunSeries:
    """Every raw point of one series in x order (equal steps by ts, equal ts in ingest order); only the columns
    asked for."""

    run_id: str
    name: str
    x_axis: str = doc(enum=AXES)
    encoding: str = doc(enum=SERIES_ENCODINGS)
    count: int = doc("points in this page", minimum=0)
    step: Any = _column("integer", "int64")
    ts: Any = _column("integer", "int64", MS)
    value: Any = _column(["number", "null"], "float64", "json: NaN and infinities are null (see nonfinite)")
    nonfinite: dict[str, list[int]] = doc(
        "indices (in this page) of the values that are NaN or infinite", additionalProperties=False,
        properties={k: _INDICES for k in ("NaN", "Infinity", "-Infinity")}, required=["NaN", "Infinity", "-Infinity"])
    next_cursor: str | None = doc("pass as cursor for the next page; null: this was the last")
