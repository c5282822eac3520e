"""The detector's service side: the rules' settings from ``[detector]``, evidence for the
summary fold's events, and the stall and lifecycle passes (``actors/detector.py``).

The metric rules (LOSS_NAN, LOSS_SPIKE, OVERFITTING_SUSPECTED) run inside the ingest's
summary fold, in the batch's own transaction, where every point is already in hand; moving
them to a second pass would read every point again. ``summary_events`` applies the rules'
switches and gives each event its evidence. RUN_STALLED needs a clock, so the detector actor
runs ``stall_pass`` every ``interval_s``: per running job, a fingerprint of what it has
produced (each log stream's last offset, its run's point count), silent for
``stall_after_s`` -> one event per episode. The episode survives a detector's restart: the
job's last RUN_STALLED with the same fingerprint means it is still open.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from gpuplaned.config import DetectorConfig
from gpuplaned.domain.rules import evidence, lifecycle, stall
from gpuplaned.domain.rules.loss_spike import SpikePolicy
from gpuplaned.domain.rules.overfitting import OverfitPolicy
from gpuplaned.domain.rules.stall import StallPolicy
from gpuplaned.domain.run_summary import SummaryEvent
from gpuplaned.protocol.ids import new_id
from gpuplaned.protocol.run_replies import HealthWarning
from gpuplaned.store import detector_reads, event_rows, log_rows, run_rows
from gpuplaned.store.connection import Connection
from gpuplaned.store.event_rows import EventRow

_SWITCHES = {"LOSS_NAN": "loss_nan", "LOSS_SPIKE": "loss_spike", "OVERFITTING_SUSPECTED": "overfitting"}


def overfit_policy(config: DetectorConfig) -> OverfitPolicy:
    return OverfitPolicy(rise=config.overfit_rise_percent / 100, evals=config.overfit_evals,
                         enabled=config.overfitting)


def spike_policy(config: DetectorConfig) -> SpikePolicy:
    return SpikePolicy(window=config.spike_window, mads=config.spike_mads, hold=config.spike_hold,
                       extreme=config.spike_extreme)


def stall_policy(config: DetectorConfig) -> StallPolicy:
    return StallPolicy(after_ms=int(config.stall_after_s * 1000), enabled=config.run_stalled)


def summary_events(raised: Sequence[SummaryEvent], metrics: Mapping[str, Any], run_id: str,
                   config: DetectorConfig) -> list[SummaryEvent]:
    """The fold's events that their rules' switches let through, each with its evidence: the
    metric's points at the step (LOSS_NAN, LOSS_SPIKE), bound to ``run_id``."""
    out = []
    for event in raised:
        if not getattr(config, _SWITCHES.get(event.type, ""), True):
            continue
        context = dict(event.context)
        name = context.get("metric")
        if "evidence" not in context and name in metrics and event.step is not None:
            if "value" in context:  # LOSS_SPIKE names the value that spiked
                value = context["value"]
            else:  # a C scan (the batch may hold a million points), once per metric for LOSS_NAN
                cols = metrics[name]
                value = cols["value"][cols["step"].index(event.step)]
            context["evidence"] = [evidence.metric(name, [event.step], [value])]
        out.append(SummaryEvent(event.type, event.severity, event.message, event.step,
                                evidence.bind_run(context, run_id)))
    return out


def fingerprint(conn: Connection, job_id: str, attempt: int, run_id: str | None) -> list[Any]:
    """What the attempt has produced so far: each log stream's last stored offset and its
    run's point count (an unchanged one means silence; also the failure policies' check that
    a stalled job is still silent)."""
    offsets = log_rows.stored_offsets(conn, [(job_id, attempt)])
    points = detector_reads.run_points(conn, run_id) if run_id is not None else 0
    return [[stream, offset] for _j, _a, stream, offset in offsets] + [["points", points]]


def _last_stall(conn: Connection, job_id: str, attempt: int) -> list[Any] | None:
    context = detector_reads.last_context(conn, stall.RUN_STALLED, job_id)
    return context.get("fingerprint") if context.get("attempt") == attempt else None


def _stall_evidence(conn: Connection, job_id: str, attempt: int, run_id: str | None,
                    fingerprint: Sequence[Any]) -> list[dict[str, Any]]:
    """The last line of each log stream and the run's last point: where the job fell silent."""
    pointers = [evidence.log(job_id, attempt, stream, [offset]) for stream, offset in fingerprint if stream != "points"]
    summary = run_rows.summary(conn, run_id) if run_id else None
    metrics = (summary or {}).get("metrics") or {}
    latest = [(m["latest"]["ts"], name, m["latest"]) for name, m in metrics.items() if m.get("latest")]
    if latest:
        _ts, name, point = max(latest)
        value = point["value"] if not isinstance(point["value"], str) else math.nan
        pointers.append(evidence.metric(name, [point["step"]], [value], run_id=run_id))
    return pointers


def stall_pass(conn: Connection, states: dict[tuple[str, int], dict[str, Any]], clock_ms: int, now_ms: int,
               policy: StallPolicy) -> list[EventRow]:
    """RUN_STALLED for each running job whose episode opens now; ``states`` (per job and
    attempt, the rule's state) is updated in place and forgets jobs no longer running.
    ``clock_ms``: the detector's clock (the silence is measured on it); ``now_ms``: the events' time."""
    running = detector_reads.running_attempts(conn)
    alive = {(job_id, attempt) for job_id, attempt, _n, _r in running}
    for gone in set(states) - alive:
        del states[gone]
    rows = []
    for job_id, attempt, node_id, run_id in running:
        produced = fingerprint(conn, job_id, attempt, run_id)
        states[job_id, attempt], silent = stall.update(states.get((job_id, attempt)), clock_ms, produced, policy)
        if silent is None or _last_stall(conn, job_id, attempt) == produced:
            continue  # not stalled, or this episode was raised before the detector restarted
        context = {"attempt": attempt, "silent_ms": silent, "fingerprint": produced,
                   "evidence": _stall_evidence(conn, job_id, attempt, run_id, produced)}
        rows.append(EventRow(new_id("ev"), now_ms, stall.RUN_STALLED, "warning", node_id, job_id, run_id, None,
                             f"job {job_id} attempt {attempt} has written no metric and no log line for "
                             f"{silent / 60000:.1f} min while its process runs", context))
    event_rows.insert_events(conn, rows)
    return rows


def open_stall(conn: Connection, run_id: str) -> HealthWarning | None:
    """The run's stall episode still open, as a health warning: its job runs, and its last
    RUN_STALLED holds the fingerprint the job still has (nothing produced since)."""
    row = detector_reads.running_attempt_of(conn, run_id)
    if row is None:
        return None
    job_id, attempt = row
    kept = _last_stall(conn, job_id, attempt)
    if kept is None or kept != fingerprint(conn, job_id, attempt, run_id):
        return None
    return HealthWarning(type=stall.RUN_STALLED, severity="warning", job_id=job_id,
                         message=f"job {job_id} has written no metric and no log line since its RUN_STALLED event")


LIFECYCLE_SLACK_MS = 3_600_000  # a start reported late still counts: look back this far past the last one


def lifecycle_pass(conn: Connection, now_ms: int, floor_ms: int, *, started: bool = True,
                   finished: bool = True) -> list[EventRow]:
    """RUN_STARTED and RUN_FINISHED, once per run, for the runs that started or ended since
    the last lifecycle event (less the slack: the events table is the durable watermark, so
    a run that ended while the daemon was down is announced after the restart), never before
    the floor: ``floor_ms`` (the detector's start) on a store without a lifecycle event, else
    the one the first of them kept. History from before the first detector raises nothing.
    ``started``, ``finished``: ``[detector] run_started``, ``run_finished`` (off: that event
    is not raised)."""
    kinds = (lifecycle.RUN_STARTED, lifecycle.RUN_FINISHED)
    first = detector_reads.first_floor(conn, kinds)
    last = detector_reads.last_ts(conn, kinds)
    floor = floor_ms if first is None else first
    since = floor if last is None else max(floor, last - LIFECYCLE_SLACK_MS)
    rows = []
    for run_id, name, job_id, node_id, started_at in (
            detector_reads.started_without(conn, since, lifecycle.RUN_STARTED) if started else []):
        severity, message = lifecycle.started(run_id, name, job_id)
        rows.append(EventRow(new_id("ev"), now_ms, lifecycle.RUN_STARTED, severity, node_id, job_id, run_id, None,
                             message, {"started_at": started_at, "floor": floor}))
    for run_id, name, job_id, node_id, status, started_at, finished_at, reason in (
            detector_reads.finished_without(conn, since, lifecycle.RUN_FINISHED) if finished else []):
        severity, message, context = lifecycle.finished(run_id, name, status, started_at, finished_at, reason)
        context["floor"] = floor
        related = detector_reads.troubles(conn, run_id, 5)  # what went wrong on the way, newest first
        context["evidence"] = [evidence.event(event_id) for event_id in related]
        summary = run_rows.summary(conn, run_id)
        rows.append(EventRow(new_id("ev"), now_ms, lifecycle.RUN_FINISHED, severity, node_id, job_id, run_id,
                             ((summary.get("progress") or {}).get("step") if summary else None), message,
                             context))
    event_rows.insert_events(conn, rows)
    return rows
