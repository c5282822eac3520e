"""The best checkpoint of an experiment, over all its runs, with its file verified present
(``GET /api/v1/experiments/{id}/best-checkpoint?metric=``).

Each checkpoint is ranked by the metric at its step (``run_records.values_at_steps``: the run's
last point at or before it) in the metric definition's direction; the default metric is the
experiment's primary metric (experiment -> project -> global). A NaN or infinite value never
ranks. The candidates are then tried best first on a worker thread, and the first whose file
is still what was registered wins: it exists, its size is the registered ``size_bytes`` when
that is known, and its fingerprint (size, mtime, first and last MiB) is the one the node's
watcher took when there is one. A deleted or rewritten best is skipped for the next one.

Refusals: no metric named or resolved is a 400 naming ``metric``; a metric without a
direction (none defined, or ``none``) is a 409 that says a direction is needed; an unknown
experiment, or no checkpoint with a value and a present file, is a 404.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import attrs
import trio

from gpuplaned.checkpoints.files import fingerprint, observe
from gpuplaned.domain.run_records import rank_checkpoints
from gpuplaned.protocol.checkpoint_replies import BestCheckpoint, SkippedCheckpoint, checkpoint_of
from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.service import access
from gpuplaned.service.api.run_records import values_at_steps
from gpuplaned.store import checkpoint_rows, project_rows, run_rows
from gpuplaned.store.checkpoint_rows import Checkpoint
from gpuplaned.store.connection import Connection

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext

DIRECTIONS = ("minimize", "maximize")


@attrs.frozen
class Ranked:
    """The experiment's checkpoints with a finite value, best first."""

    experiment_id: str
    metric: str
    direction: str
    candidates: list[tuple[Checkpoint, float]]


def ranked(conn: Connection, experiment_key: str, project_key: str | None, metric: str | None) -> Ranked:
    """Every checkpoint of the experiment's runs with a finite ``metric`` value, best first
    (ties: the older run, then the earlier step).

    Raises:
        ApiError: not_found (experiment, project), bad_request (no metric), conflict (no direction).
    """
    project = project_rows.require_project(conn, project_key, "project") if project_key is not None else None
    experiment = project_rows.require_experiment(conn, experiment_key, project)
    metric = metric or project_rows.resolve(conn, project, experiment).metric
    if not metric:
        raise ApiError(ErrorCode.BAD_REQUEST, f"metric: experiment {experiment.name!r} has no primary metric; "
                       "name the metric to rank by", {"field": "metric"})
    definition = project_rows.get_definition(conn, metric)
    direction = definition.direction if definition else None
    if direction not in DIRECTIONS:
        raise ApiError(ErrorCode.CONFLICT, f"metric {metric!r} has no direction (minimize or maximize); a direction "
                       "is needed to rank checkpoints: give the metric one", {"field": "metric", "metric": metric})
    found = []
    for run_id in run_rows.experiment_runs(conn, experiment.id):
        listed = checkpoint_rows.list_for_run(conn, run_id)
        for ck, value in zip(listed, values_at_steps(conn, run_id, metric, [ck.step for ck in listed])):
            if value is not None and math.isfinite(value):
                found.append((ck, value))
    by_id = {ck.id: (ck, value) for ck, value in found}
    best_first = rank_checkpoints({ck.id: value for ck, value in found}, direction)  # ties keep their order
    return Ranked(experiment.id, metric, direction, [by_id[ck_id] for ck_id in best_first])


def why_not_present(ck: Checkpoint) -> str | None:
    """Runs on a worker thread: None when the file is what was registered, else why not."""
    try:
        size = observe(ck.path).size
        if ck.size_bytes is not None and size != ck.size_bytes:
            return f"size {size} is not the registered {ck.size_bytes}"
        if ck.fingerprint is not None and fingerprint(ck.path) != ck.fingerprint:
            return "changed since it was found (fingerprint)"
    except FileNotFoundError:
        return "gone"
    except OSError as exc:
        return f"unreadable: {type(exc).__name__}"
    return None


def first_present(candidates: list[tuple[Checkpoint, float]]) -> tuple[tuple[Checkpoint, float] | None,
                                                                      list[SkippedCheckpoint]]:
    """Runs on a worker thread: the best candidate whose file checks out, and those skipped before it."""
    skipped = []
    for candidate in candidates:
        reason = why_not_present(candidate[0])
        if reason is None:
            return candidate, skipped
        skipped.append(SkippedCheckpoint(checkpoint_id=candidate[0].id, reason=reason))
    return None, skipped


async def best_for_experiment(shared: ServerContext, experiment_key: str, project_key: str | None,
                              metric: str | None) -> BestCheckpoint:
    found = await access.readers(shared, "runs").run(lambda conn: ranked(conn, experiment_key, project_key, metric))
    best, skipped = await trio.to_thread.run_sync(first_present, found.candidates)
    if best is None:
        raise ApiError(ErrorCode.NOT_FOUND, f"no checkpoint of experiment {experiment_key!r} has a {found.metric} "
                       f"value and its file present ({len(skipped)} skipped: gone or changed)",
                       {"experiment": experiment_key, "metric": found.metric, "skipped": len(skipped)})
    ck, value = best
    return BestCheckpoint(checkpoint=checkpoint_of(ck, metric_value=value, best=True), run_id=ck.run_id,
                          experiment_id=found.experiment_id, metric=found.metric, direction=found.direction,
                          metric_value=value, skipped=skipped)
