"""The semantic answers' replies: a run's diagnosis, runs and checkpoints compared, a failure explained.

Each is a summary in words, findings with evidence the API resolves, and next actions.
"""

from __future__ import annotations

from typing import Any

import attrs

from gpuplaned.protocol.fields import doc
from gpuplaned.protocol.reply_words import DIRECTIONS
from gpuplaned.protocol.vocabulary import SEVERITIES

# What an explanation may name as a failed job's cause (gpuplaned.domain.diagnosis.failure decides).
CAUSES = ("spawn_failure", "timeout", "oom", "disk_full", "nan_divergence", "dataloader_hang", "stalled",
          "killed_or_preempted", "exit_code", "none")


@attrs.frozen(kw_only=True)
class Finding:
    kind: str = doc("convergence, overfitting, instability, stall, throughput, divergence, best, config, cause...")
    severity: str = doc(enum=SEVERITIES)
    claim: str = doc("what was found, in words")
    evidence: list[dict[str, Any]] = doc("pointers the API resolves: {kind: metric, run_id, name, steps: [a, b], "
                                         "values} (GET /runs/{id}/series), {kind: log, job_id, attempt, stream, "
                                         "offsets: [a, b], lines} (GET /jobs/{id}/logs), {kind: gpu, node_id, gpu, "
                                         "name, ts: [a, b], values}, {kind: event, id}, {kind: checkpoint, id}")
    facts: dict[str, Any] = doc("the finding's numbers, by kind")


@attrs.frozen(kw_only=True)
class RunDiagnosis:
    run_id: str
    summary: str
    findings: list[Finding] = doc("worst first")
    next_actions: list[str]


@attrs.frozen(kw_only=True)
class ComparedRun:
    id: str
    best_value: float | None = doc("the metric's best bucket average by its direction")
    best_x: int | None = doc("its step, or ms since the run's first point with align=time")
    steps_per_s: float | None
    gpu_util: float | None = doc("the run's GPUs' mean utilisation, %")


@attrs.frozen(kw_only=True)
class MetricDeparture:
    run_id: str
    at: int = doc("the step (or ms since each run's first point with align=time) from which it departs")


@attrs.frozen(kw_only=True)
class ComparedMetric:
    name: str
    departures: list[MetricDeparture] = doc("the runs where it departs from the baseline's; empty: it tracks")


@attrs.frozen(kw_only=True)
class RunComparison:
    summary: str = doc("leads with the earliest departure, if any")
    findings: list[Finding] = doc("the departures first, the earliest first; then per run the metrics that track, "
                                  "the best, throughput and config")
    next_actions: list[str]
    runs: list[ComparedRun] = doc("in the order asked; the first is the baseline")
    metric: str | None = doc("the metric runs are ranked by: the first run's primary metric, else a common loss")
    metrics: list[ComparedMetric] = doc("every metric the runs share (up to 64), those that depart first")
    align: str = doc(enum=["step", "time"])


@attrs.frozen(kw_only=True)
class ComparedCheckpoint:
    id: str
    run_id: str
    step: int | None
    size_bytes: int | None
    parent_id: str | None
    metric_value: float | None
    deleted_at: int | None


@attrs.frozen(kw_only=True)
class CheckpointComparison:
    summary: str
    findings: list[Finding]
    next_actions: list[str]
    checkpoints: list[ComparedCheckpoint] = doc("in the order asked; the first is the baseline")
    metric: str | None
    direction: str | None = doc(enum=DIRECTIONS)


@attrs.frozen(kw_only=True)
class FailureExplanation:
    job_id: str
    attempt: int = doc("the attempt explained: the latest", minimum=0)
    cause: str = doc(enum=CAUSES)
    summary: str
    findings: list[Finding]
    next_actions: list[str]
