"""The shapes of the replies that services build as dicts, as attrs classes for the document.

The wire types the converter writes (``Job``, ``Run``, ``Project``...) document themselves
where they are defined; the wrappers around them (``{"job": Job}``) and the replies a
service assembles by hand (series, summaries, checkpoints, readings) are declared here, with
their fields' words, so that ``gpuplaned.http.openapi`` can generate every schema from a
class. Nothing here is checked at run time: ``tests/http/test_openapi.py`` checks real
replies against them.
"""

from __future__ import annotations

from typing import Any

import attrs

from gpuplaned.domain.diagnosis.failure import CAUSES
from gpuplaned.domain.run_summary import PRIMARY_SOURCES
from gpuplaned.protocol.fields import doc
from gpuplaned.protocol.job_wire import Job
from gpuplaned.protocol.submit_plan import SubmitPlan
from gpuplaned.protocol.vocabulary import SEVERITIES
from gpuplaned.service.checkpoint_details import MAX_METRICS as MAX_CHECKPOINT_METRICS
from gpuplaned.service.jobs import JOB_STATES
from gpuplaned.service.nodes_view import LinkView, NodeInfo
from gpuplaned.service.run_logs import RunLogFile
from gpuplaned.service.runs import SERIES_ENCODINGS
from gpuplaned.service.tokens import TokenInfo
from gpuplaned.service.ui_sessions import UiSession
from gpuplaned.service.webhooks import WebhookInfo, WebhookTestResult
from gpuplaned.store.audit_rows import AuditRow
from gpuplaned.store.event_rows import EventRow
from gpuplaned.store.project_rows import Experiment, MetricDefinition, PrimaryMetric, Project, Ref
from gpuplaned.store.run_rows import Run
from gpuplaned.store.session_rows import Session
from gpuplaned.telemetry.samples import GpuSample, HostSample

MS = "ms since the epoch"
_NEXT = "pass as cursor= for the next page; null: no more"
_AXES = ("step", "ts")
_DIRECTIONS = ("minimize", "maximize", None)


def _next() -> Any:
    return doc(_NEXT)


# --- jobs and runs ---------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class JobReply:
    job: Job


@attrs.frozen(kw_only=True)
class JobList:
    jobs: list[Job]
    next_cursor: str | None = _next()


@attrs.frozen(kw_only=True)
class RunPrimaryMetric:
    """The run's primary metric (experiment -> project -> global) and its values in this run."""

    name: str
    source: str = doc(enum=PRIMARY_SOURCES)
    direction: str | None = doc(enum=_DIRECTIONS)
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
    next_cursor: str | None = _next()


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
    x_axis: str = doc(enum=_AXES)
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
    metric: str | None = doc(default=None, optional=True)
    step: int | None = doc(default=None, optional=True)
    job_id: str | None = doc(default=None, optional=True)


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
    x_axis: str = doc(enum=_AXES)
    encoding: str = doc(enum=SERIES_ENCODINGS)
    count: int = doc("points in this page", minimum=0)
    step: Any = _column("integer", "int64")
    ts: Any = _column("integer", "int64", MS)
    value: Any = _column(["number", "null"], "float64", "json: NaN and infinities are null (see nonfinite)")
    nonfinite: dict[str, list[int]] = doc(
        "indices (in this page) of the values that are NaN or infinite", additionalProperties=False,
        properties={k: _INDICES for k in ("NaN", "Infinity", "-Infinity")}, required=["NaN", "Infinity", "-Infinity"])
    next_cursor: str | None = doc("pass as cursor for the next page; null: this was the last")


@attrs.frozen(kw_only=True)
class RunLogs:
    """An imported run's stdout and stderr files (import-run registers them, never copied), read on the daemon's
    host as they are now."""

    run_id: str
    job_id: str | None = doc("the run's job, if it has one: its output is GET /api/v1/jobs/{job_id}/logs")
    logs: list[RunLogFile] = doc("every log file of the run, by path; empty: it has none")


# --- SDK sessions and checkpoints ------------------------------------------------------------


@attrs.frozen(kw_only=True)
class SessionCreated:
    session_id: str
    run_id: str
    session: Session


@attrs.frozen(kw_only=True)
class SessionReply:
    session: Session


@attrs.frozen(kw_only=True)
class SessionList:
    sessions: list[Session]


@attrs.frozen(kw_only=True)
class SessionEnvReply:
    stored: bool = doc("false: the run already had one (the first wins)")


@attrs.frozen(kw_only=True)
class BatchReply:
    seq: int
    duplicate: bool
    points: int = doc(minimum=0)


@attrs.frozen(kw_only=True)
class CheckpointMetric:
    name: str
    value: float | None = doc("null: NaN or infinite")
    step: int = doc("the step of the point taken: the nearest to the checkpoint's (a tie: the one before)")


@attrs.frozen(kw_only=True)
class CheckpointEvaluation:
    id: str
    job_id: str | None = doc("the EVALUATE job; null: logged by the script (run.log_evaluation)")
    status: str
    suite: str | None
    dataset: str | None
    metrics: dict[str, float | None]
    created_at: int = doc(MS)


@attrs.frozen(kw_only=True)
class Checkpoint:
    """A checkpoint a training script registered (run.log_checkpoint), or the node found in the
    job's folders (metadata.source "watcher")."""

    id: str = doc("ck_<ULID>")
    run_id: str
    step: int | None = doc(minimum=0)
    epoch: float | None = doc(minimum=0)
    path: str = doc("where the script saved it (registered, never copied)")
    size_bytes: int | None = doc(minimum=0)
    metadata: dict[str, Any]
    created_at: int = doc("when it was registered (a re-registered path moves to its new step)")
    fingerprint: str | None = doc("sha1:<hex> of its size, mtime and first and last MiB, when the node found it")
    full_hash: str | None = doc("sha256:<hex> of every byte, kept by the first verify that found it unchanged")
    verified_at: int | None = doc("when that verify was")
    parent_id: str | None = doc("the resume chain: the run's checkpoint before it by step, or for the run's first "
                                "the checkpoint the run resumed from")
    deleted_at: int | None = doc("when retention deleted its file (the row stays for the lineage); null: not deleted")
    metric_value: float | None = doc("in a run's list: the ranking metric's last value at or before the step "
                                     "(null: none, NaN or infinite)", optional=True)
    best: bool = doc("in a run's list: the best checkpoint by the metric's direction (never NaN, never deleted)",
                     optional=True)
    metrics: list[CheckpointMetric] = doc(f"in a run's list: the run's metrics nearest its step, the ranking metric "
                                          f"first, at most {MAX_CHECKPOINT_METRICS}", optional=True)
    evaluations: list[CheckpointEvaluation] = doc("in a run's list: its evaluations, newest first", optional=True)


@attrs.frozen(kw_only=True)
class CheckpointList:
    checkpoints: list[Checkpoint]
    metric: str | None = doc("the metric the checkpoints are ranked by")
    direction: str | None = doc("minimize, maximize or none")
    best_id: str | None


@attrs.frozen(kw_only=True)
class CheckpointReply:
    checkpoint: Checkpoint


@attrs.frozen(kw_only=True)
class SkippedCheckpoint:
    checkpoint_id: str
    reason: str = doc("gone, a size other than the registered one, or changed since it was found")


@attrs.frozen(kw_only=True)
class BestCheckpoint:
    """The best checkpoint over an experiment's runs whose file is still what was registered."""

    checkpoint: Checkpoint
    run_id: str
    experiment_id: str
    metric: str = doc("the metric it is ranked by")
    direction: str = doc(enum=["minimize", "maximize"])
    metric_value: float = doc("the metric's last value at or before its step (never NaN or infinite)")
    skipped: list[SkippedCheckpoint] = doc("better-ranked checkpoints passed over because their file is gone or "
                                           "changed, best first")


@attrs.frozen(kw_only=True)
class CheckpointVerify:
    """A checkpoint's file as it is now, against what was registered."""

    checkpoint: Checkpoint
    present: bool = doc("whether the file (or directory) is still there and readable")
    changed: bool | None = doc("true: gone, or its fingerprint or full hash differs from the one kept; "
                               "null: nothing to compare with (registered by the script, never verified)")
    size_bytes: int | None = doc("its size now", minimum=0)
    fingerprint: str | None = doc("its fingerprint now")
    full_hash: str | None = doc("sha256:<hex> of every byte now")
    error: str | None = doc("why it could not be read, when it is there but unreadable")


@attrs.frozen(kw_only=True)
class PrunedCheckpoint:
    checkpoint_id: str
    path: str
    step: int | None
    size_bytes: int | None


@attrs.frozen(kw_only=True)
class KeptCheckpoint(PrunedCheckpoint):
    reasons: list[str] = doc("every reason it stays: best, best K, last K, in use: ..., not GPUPlane's to delete: "
                             "..., no step...")


@attrs.frozen(kw_only=True)
class DeletedCheckpoint(PrunedCheckpoint):
    already_gone: bool = doc("its file was gone before this prune (marked deleted all the same)")


@attrs.frozen(kw_only=True)
class RefusedCheckpoint(PrunedCheckpoint):
    reason: str = doc("why its file was left: changed since it was registered, a symbolic link, nothing to check it "
                      "against, unreadable")


@attrs.frozen(kw_only=True)
class PruneResult:
    """What a prune kept and why, what it deleted (a dry run: would delete), and what it refused."""

    run_id: str
    dry_run: bool
    keep_best: int
    keep_last: int
    metric: str | None = doc("the ranking metric: the run's primary metric")
    direction: str | None = doc("minimize, maximize or none")
    kept: list[KeptCheckpoint]
    deleted: list[DeletedCheckpoint] = doc("its file is gone and its row marked deleted, with a CHECKPOINT_DELETED "
                                           "event; a dry run: what would be deleted")
    refused: list[RefusedCheckpoint] = doc("the rule would delete it, but its file is not what was registered")


# --- nodes and events --------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class ProcessReading:
    pid: int
    gpu_memory_mb: int | None
    job_id: str | None
    foreign: bool = doc("not started by GPUPlane")


@attrs.frozen(kw_only=True)
class GpuReading(GpuSample):
    """One GPU's latest readings; any reading may be null where the card lacks it."""

    error: str | None = doc("set when the GPU could not be read this period (gpu_lost: ...)", default=None)
    processes: tuple[ProcessReading, ...] = ()
    owner_job_id: str | None = None


@attrs.frozen(kw_only=True)
class SnapshotJob:
    job_id: str
    gpu_indexes: list[int]
    gpu_memory_mb: int


@attrs.frozen(kw_only=True)
class NodeSnapshot:
    """The node's latest readings (about every 2 s)."""

    ts: int = doc(MS)
    backend: str = doc("nvml, fake or none")
    gpus: list[GpuReading]
    host: HostSample | None
    jobs: list[SnapshotJob]
    blocked_gpus: list[int] = doc("GPUs that take no new job (lost, or used outside GPUPlane)")


@attrs.frozen(kw_only=True)
class Node(NodeInfo):
    status: str = doc(enum=("ONLINE", "OFFLINE", "UNHEALTHY"))
    last_heartbeat_at: int | None = doc(MS)
    hardware: dict[str, Any] = doc("host facts from the node's hello (hostname, cpu_count, memory_mb...)",
                                   factory=dict)
    accepting: bool = doc("false while the node takes no new work (a disk is low)", default=True)
    snapshot: NodeSnapshot | None = doc("null until the first sample, and while the node is not connected",
                                        default=None)
    remote: bool = doc("a remote agent's node (`--role agent`), whose link the server judges by its heartbeats; "
                       "false: the server's own node", default=False)
    link: LinkView | None = doc("the remote node's link as this server saw it; null for the server's own node, and "
                                "for a remote node this server has not heard from since it started", default=None)


@attrs.frozen(kw_only=True)
class NodeReply:
    node: Node


@attrs.frozen(kw_only=True)
class NodeList:
    nodes: list[Node]


@attrs.frozen(kw_only=True)
class ForgottenNode:
    forgotten: Ref


@attrs.frozen(kw_only=True)
class NodeMetrics:
    node_id: str
    start: int = doc(MS)
    end: int = doc(MS)
    resolution: str = doc(enum=("raw", "1m", "5m"))
    width: int = doc("bucket width in ms (1: raw points)", minimum=1)
    x: list[int] = doc("each bucket's start, in ms")
    series: dict[str, Buckets] = doc("metric name -> columns aligned with x")


@attrs.frozen(kw_only=True)
class EventList:
    events: list[EventRow]
    next_cursor: str | None = _next()


@attrs.frozen(kw_only=True)
class Lagged:
    skipped: int = doc(minimum=1)


@attrs.frozen(kw_only=True)
class LogEnd:
    status: str = doc("RETRIED: a later attempt has begun", enum=(*JOB_STATES, "RETRIED"))
    attempt: int = doc(minimum=0)
    exit_code: int | None
    failure_reason: str | None


# --- tokens, projects, the web UI's sign-in --------------------------------------------------


@attrs.frozen(kw_only=True)
class TokenCreated:
    token: TokenInfo
    secret: str = doc("shown only in this reply", pattern="^gpp_[0-9A-HJKMNP-TV-Z]{26}_[A-Za-z0-9_-]{43}$")


@attrs.frozen(kw_only=True)
class TokenReply:
    token: TokenInfo


@attrs.frozen(kw_only=True)
class TokenList:
    tokens: list[TokenInfo]
    next_cursor: str | None = _next()


@attrs.frozen(kw_only=True)
class ProjectReply:
    project: Project


@attrs.frozen(kw_only=True)
class ProjectList:
    projects: list[Project]
    next_cursor: str | None = _next()


@attrs.frozen(kw_only=True)
class ExperimentReply:
    experiment: Experiment


@attrs.frozen(kw_only=True)
class ExperimentList:
    experiments: list[Experiment]
    next_cursor: str | None = _next()


@attrs.frozen(kw_only=True)
class MetricDefinitionReply:
    metric_definition: MetricDefinition


@attrs.frozen(kw_only=True)
class MetricDefinitionList:
    metric_definitions: list[MetricDefinition]
    next_cursor: str | None = _next()


@attrs.frozen(kw_only=True)
class MetricDefinitionUpdated:
    metric_definition: MetricDefinition
    runs_updated: int = doc("runs whose summary (best point) was recomputed", minimum=0)


@attrs.frozen(kw_only=True)
class PrimaryMetricReply:
    primary_metric: PrimaryMetric


@attrs.frozen(kw_only=True)
class UiSessionReply:
    session: UiSession


@attrs.frozen(kw_only=True)
class LogoutReply:
    logged_out: bool = doc("whether a session was ended")


@attrs.frozen(kw_only=True)
class OpenApiDocument:
    openapi: str
    info: dict[str, Any]
    paths: dict[str, Any]

    __schema__ = {"additionalProperties": True}



# --- diagnosis (gpuplaned.service.diagnosis) -------------------------------------------------


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
    direction: str | None = doc(enum=_DIRECTIONS)


@attrs.frozen(kw_only=True)
class FailureExplanation:
    job_id: str
    attempt: int = doc("the attempt explained: the latest", minimum=0)
    cause: str = doc(enum=CAUSES)
    summary: str
    findings: list[Finding]
    next_actions: list[str]


# --- webhooks (issue 16) -------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class WebhookReply:
    webhook: WebhookInfo


@attrs.frozen(kw_only=True)
class WebhookList:
    webhooks: list[WebhookInfo]


@attrs.frozen(kw_only=True)
class WebhookDeleted:
    deleted: Ref


@attrs.frozen(kw_only=True)
class WebhookTested:
    result: WebhookTestResult


# --- capability tokens: the dry run and the audit log (issue 17) ---------------------------


@attrs.frozen(kw_only=True)
class SubmitPlanReply:
    plan: SubmitPlan


@attrs.frozen(kw_only=True)
class AuditList:
    entries: list[AuditRow] = doc("newest first")
    next_cursor: str | None = doc("pass as cursor for the next page; null: no more")
