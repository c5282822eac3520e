"""What a run's checkpoint listing shows beside each row (``run_records.checkpoint_table``):
the run's metric values nearest its step, and its evaluations.

``metrics``: for each of the run's metrics, the primary one first and at most
``MAX_METRICS`` in all, the point whose step is nearest the checkpoint's (a tie goes to the
one before: the value the model had when it was saved; ``tsdb.nearest``), with that point's
step; a NaN or infinite value is null. ``evaluations``: the evaluations of it, newest first.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuplaned import tsdb
from gpuplaned.protocol.checkpoint_replies import MAX_LISTED_METRICS as MAX_METRICS
from gpuplaned.protocol.checkpoint_replies import CheckpointEvaluation, CheckpointMetric
from gpuplaned.service.api.series_query import json_finite
from gpuplaned.store import retention_rows
from gpuplaned.store.checkpoint_rows import Checkpoint
from gpuplaned.store.connection import Connection
from gpuplaned.tsdb.nearest import nearest_points


def metric_names(conn: Connection, run_id: str, primary: str | None) -> list[str]:
    """The run's metric names, ``primary`` first (when the run has it), at most ``MAX_METRICS``."""
    names = tsdb.list_names(conn, "run", run_id)
    return (([primary] if primary in names else []) + [n for n in names if n != primary])[:MAX_METRICS]


def nearest_metrics(conn: Connection, run_id: str, primary: str | None,
                    checkpoints: Sequence[Checkpoint]) -> dict[str, list[CheckpointMetric]]:
    """``{checkpoint id: [metric, ...]}``; a checkpoint without a step has none."""
    out: dict[str, list[CheckpointMetric]] = {ck.id: [] for ck in checkpoints}
    with_step = [ck for ck in checkpoints if ck.step is not None]
    if not with_step:
        return out
    for name in metric_names(conn, run_id, primary):
        found = nearest_points(conn, run_id, name, [ck.step for ck in with_step])  # type: ignore[misc]
        for ck, point in zip(with_step, found):
            if point is not None:
                out[ck.id].append(CheckpointMetric(name=name, value=json_finite(point[1]), step=point[0]))
    return out


def evaluations(conn: Connection, run_id: str) -> dict[str, list[CheckpointEvaluation]]:
    """``{checkpoint id: [evaluation, newest first]}``."""
    return {ck_id: [CheckpointEvaluation(**(ev | {"metrics": json_finite(ev["metrics"])})) for ev in found]
            for ck_id, found in retention_rows.evaluations_by_checkpoint(conn, run_id).items()}
