"""Script events and checkpoints: stored with the batch that carried them (or, for the
checkpoints the node's watcher found, with its ``CheckpointsFound``), listed per run.

``store_records`` runs inside the batch's write transaction (``sessions.add_batch``), so a
batch's metrics, events and checkpoints commit together and a resent batch adds none of
them twice. A checkpoint's listing carries the run's metric at the checkpoint's step (the
last point at or before it) and marks the best one by that metric's direction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs

from gpuplaned import tsdb
from gpuplaned.domain.run_records import (
    CHECKPOINT_CREATED,
    USER_EVENT,
    CheckpointRecord,
    ScriptEvent,
    best_checkpoint,
)
from gpuplaned.protocol.agent import FoundCheckpoint
from gpuplaned.protocol.checkpoint_replies import CheckpointList, CheckpointReply, checkpoint_of
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.protocol.ids import new_id
from gpuplaned.service import access
from gpuplaned.service.api.checkpoints import details as checkpoint_details
from gpuplaned.service.api.series_query import json_finite
from gpuplaned.store import checkpoint_rows
from gpuplaned.store import event_rows
from gpuplaned.store import project_rows, run_rows
from gpuplaned.store.checkpoint_rows import Checkpoint
from gpuplaned.store.connection import Connection
from gpuplaned.store.event_rows import EventRow
from gpuplaned.tsdb.nearest import points_at_or_before

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext


def store_records(conn: Connection, run_id: str, job_id: str | None, events: Sequence[ScriptEvent],
                  checkpoints: Sequence[CheckpointRecord], now: int) -> list[EventRow]:
    """Store a batch's script events and checkpoints; returns the event rows to publish
    after the commit (the script's own events, then one CHECKPOINT_CREATED per checkpoint)."""
    rows = [EventRow(new_id("ev"), e.ts if e.ts is not None else now, USER_EVENT, e.severity, None, job_id, run_id,
                     e.step, e.name, {"name": e.name, "data": e.data} if e.data else {"name": e.name})
            for e in events]
    rows += [_created(ck, job_id) for ck in checkpoint_rows.register(conn, run_id, checkpoints, now)]
    event_rows.insert_events(conn, rows)
    return rows


def store_found(conn: Connection, job_id: str, run_id: str, found: Sequence[FoundCheckpoint],
                now: int) -> list[EventRow]:
    """Register the checkpoints the node's watcher found for ``job_id``'s run ``run_id``;
    returns a CHECKPOINT_CREATED row, to publish after the commit, for each one that is news.
    A run that is not that job's registers nothing (the frame is the node's word only), and
    neither does a file another run registered as it is now: a job sharing the folder (an
    evaluation run in the training's folder) saw a checkpoint that is not its own.
    """
    origin = run_rows.origin(conn, run_id)
    if origin is None or origin.job_id != job_id:
        raise ApiError(ErrorCode.NOT_FOUND, f"no run {run_id} of job {job_id}", {"run_id": run_id})
    rows = [_created(ck, job_id) for f in found
            if not checkpoint_rows.held_by_another(conn, run_id, f.path, f.fingerprint)
            and (ck := checkpoint_rows.register_found(conn, run_id, f, now))]
    event_rows.insert_events(conn, rows)
    return rows


def store_imported(conn: Connection, run_id: str, found: Sequence[FoundCheckpoint],
                   now: int) -> list[EventRow]:
    """Register the checkpoints ``import-run`` found in an imported run's dir (a run with no
    job) as the watcher's are; returns a CHECKPOINT_CREATED row for each new one."""
    rows = [_created(ck, None) for f in found
            if (ck := checkpoint_rows.register_found(conn, run_id, f, now, source="import"))]
    event_rows.insert_events(conn, rows)
    return rows


def _created(ck: checkpoint_rows.Checkpoint, job_id: str | None) -> EventRow:
    context: dict[str, Any] = {"checkpoint_id": ck.id, "path": ck.path}
    if ck.size_bytes is not None:
        context["size_bytes"] = ck.size_bytes
    if ck.fingerprint is not None:
        context["fingerprint"] = ck.fingerprint
    return EventRow(new_id("ev"), ck.created_at, CHECKPOINT_CREATED, "info", None, job_id, ck.run_id, ck.step,
                    f"checkpoint {ck.path}" + (f" at step {ck.step}" if ck.step is not None else ""), context)


def _readers(shared: ServerContext) -> Any:
    return access.readers(shared, "runs")


def value_at_step(conn: Connection, run_id: str, name: str, step: int | None) -> float | None:
    """The run's last ``name`` point at or before ``step``; None if there is none."""
    return values_at_steps(conn, run_id, name, [step])[0]


def values_at_steps(conn: Connection, run_id: str, name: str,
                    steps: Sequence[int | None]) -> list[float | None]:
    """``value_at_step`` of each step (None: None), decoding each chunk around them once."""
    known = [s for s in steps if s is not None]
    try:
        found = iter(points_at_or_before(conn, run_id, name, known) if known else ())
    except ValueError:  # a name no series can have
        return [None] * len(steps)
    out = []
    for step in steps:
        point = next(found) if step is not None else None
        out.append(point[1] if point is not None else None)
    return out


@attrs.frozen
class RankedCheckpoints:
    """A run's checkpoints ranked by ``metric`` at each one's step."""

    metric: str | None
    direction: str | None
    checkpoints: list[Checkpoint]
    values: dict[str, float | None]  # by checkpoint id; empty without a metric
    best_id: str | None  # never a deleted one, never NaN


def ranked_checkpoints(conn: Connection, run_id: str, metric: str | None) -> RankedCheckpoints:
    """The run's checkpoints, ``metric`` (default: the run's primary metric, resolved
    experiment -> project -> global) at each one's step, and the best."""
    primary, _, _ = project_rows.run_context(conn, run_id)  # not_found for an unknown run
    metric = metric or primary.metric
    found = checkpoint_rows.list_for_run(conn, run_id)
    values = dict(zip((ck.id for ck in found), values_at_steps(conn, run_id, metric, [ck.step for ck in found]))) \
        if metric else {}
    definition = project_rows.get_definition(conn, metric) if metric else None
    direction = definition.direction if definition else None
    best = best_checkpoint({ck.id: values[ck.id] for ck in found if ck.deleted_at is None} if metric else {},
                           direction or "")
    return RankedCheckpoints(metric, direction, found, values, best)


def checkpoint_table(conn: Connection, run_id: str, metric: str | None) -> CheckpointList:
    """The run's checkpoints ranked (``ranked_checkpoints``), each with its parent, the run's
    metrics nearest its step (``metric`` first) and its evaluations
    (``service/api/checkpoints/details.py``)."""
    ranked = ranked_checkpoints(conn, run_id, metric)
    nearest = checkpoint_details.nearest_metrics(conn, run_id, ranked.metric, ranked.checkpoints)
    evaluations = checkpoint_details.evaluations(conn, run_id)
    rows = [checkpoint_of(ck, metric_value=json_finite(ranked.values.get(ck.id)), best=ck.id == ranked.best_id,
                          metrics=nearest[ck.id], evaluations=evaluations.get(ck.id, []))
            for ck in ranked.checkpoints]
    return CheckpointList(checkpoints=rows, metric=ranked.metric, direction=ranked.direction, best_id=ranked.best_id)


async def list_checkpoints(shared: ServerContext, run_id: str, metric: str | None) -> CheckpointList:
    """``metric`` comes checked by the route's ``CheckpointsQuery``."""
    return await _readers(shared).run(lambda conn: checkpoint_table(conn, run_id, metric))


async def get_checkpoint(shared: ServerContext, checkpoint_id: str) -> CheckpointReply:
    found = await _readers(shared).run(lambda conn: checkpoint_rows.get(conn, checkpoint_id))
    if found is None:
        raise ApiError(ErrorCode.NOT_FOUND, f"no checkpoint {checkpoint_id}", {"checkpoint_id": checkpoint_id})
    return CheckpointReply(checkpoint=checkpoint_of(found))
