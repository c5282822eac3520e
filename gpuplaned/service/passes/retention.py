"""Retention: delete a run's checkpoints but the best K and the last K, safely
(``POST /api/v1/runs/{id}/checkpoints/prune``, ``gpuplanectl ckpt prune``, and a job's
``retention`` policy as its checkpoints arrive: ``service/passes/checkpoint_arrival.py``).

In three steps, so that no file is deleted inside a transaction and no row says deleted
while its file is still there (Determined lost checkpoints deleting rows first, PR #7967):

1. **Decide**, in one read transaction: the run's checkpoints not yet deleted, each with the
   ranking metric at its step (the run's primary metric unless the request names another,
   ``run_records.values_at_steps``) and
   what still uses it (``store/retention_rows.py``: an unfinished evaluation, a resume, a row
   of the same file), go to the pure rule ``domain/retention.choose``.
2. **Delete** off every transaction, where the file lies (``checkpoint_files``: on this host
   on a worker thread, or through the run's remote agent): only a path GPUPlane registered,
   only while it really lies in its run's folders (``checkpoint_files.run_roots``: the
   job's working and declared folders, or the cwd a local SDK session declared; none for a
   run a network token created) and only while it is what was registered. It is refused,
   and says so, outside those folders, when its fingerprint (the watcher's, or the one the
   daemon took as the script registered it) or its registered size differs, when it has no
   fingerprint (a size alone never suffices), or when it is a symbolic link. A directory (HF ``checkpoint-N/``,
   DeepSpeed shards) goes whole. A dry run checks the same and deletes nothing.
3. **Mark**, in one write: each row whose file is gone gets ``deleted_at`` and a
   ``CHECKPOINT_DELETED`` event (published after the commit), unless it was registered
   anew meanwhile. A file already gone (a prune cut short after its deletions) is marked
   then too, its event saying so.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs

from gpuplaned.domain.event_types import CHECKPOINT_DELETED
from gpuplaned.domain.retention import Candidate, Choice, choose
from gpuplaned.protocol.checkpoint_replies import (
    DeletedCheckpoint,
    KeptCheckpoint,
    PruneResult,
    RefusedCheckpoint,
    pruned,
)
from gpuplaned.protocol.fields import field
from gpuplaned.protocol.ids import new_id
from gpuplaned.protocol.job_policies import RetentionPolicy
from gpuplaned.service import access
from gpuplaned.service.api import budgets
from gpuplaned.service.api.projects import METRIC_PATTERN
from gpuplaned.service.api.run_records import values_at_steps
from gpuplaned.service.link import checkpoint_files
from gpuplaned.service.link.registry import now_ms
from gpuplaned.store import checkpoint_rows, event_rows, job_rows, project_rows, retention_rows, run_rows
from gpuplaned.store.checkpoint_rows import Checkpoint
from gpuplaned.store.connection import Connection
from gpuplaned.store.event_rows import EventRow
from gpuplaned.store.writer import write

if TYPE_CHECKING:
    from gpuplaned.service.api.ui_sessions import Caller
    from gpuplaned.service.context import ServerContext

log = logging.getLogger(__name__)

IMPORTED = "imported: GPUPlane only reads an imported run's files"


@attrs.frozen(kw_only=True)
class PruneRequest(RetentionPolicy):
    """``POST /api/v1/runs/{id}/checkpoints/prune``: keep the best K and the last K."""

    dry_run: bool = field(default=True, description="true (the default): say what would be deleted, delete nothing")
    metric: str | None = field(default=None, pattern=METRIC_PATTERN, message="a metric name, or null",
                               description="rank by this metric; null (the default): the run's primary metric")


@attrs.frozen
class Plan:
    """What step 1 decided."""

    run_id: str
    job_id: str | None
    metric: str | None
    direction: str | None
    rows: dict[str, Checkpoint]  # the run's checkpoints not deleted, oldest step first
    choice: Choice


@attrs.frozen
class Outcome:
    """What step 2 did with one checkpoint the rule would delete."""

    checkpoint: Checkpoint
    gone: bool = False  # its file is gone: deleted now, or it already was
    already_gone: bool = False
    refused: str | None = None


def not_ours(ck: Checkpoint) -> str | None:
    """Why ``ck``'s file is not GPUPlane's to delete at all; None when it is."""
    if ck.metadata.get("source") == "import":
        return IMPORTED
    if not os.path.isabs(ck.path):
        return "not an absolute path"
    return None


def decide(conn: Connection, run_id: str, keep_best: int, keep_last: int, metric: str | None = None) -> Plan:
    """Step 1, on a reader (whose one transaction reads every row as of one moment); ranked by
    ``metric``, else the run's primary metric.

    Raises:
        ApiError: not_found for an unknown run.
    """
    primary, direction, _ = project_rows.run_context(conn, run_id)
    if metric is None or metric == primary.metric:
        metric = primary.metric
    else:
        definition = project_rows.get_definition(conn, metric)
        direction = definition.direction if definition else None
    origin = run_rows.origin(conn, run_id)
    job_id = origin.job_id if origin else None
    live = [ck for ck in checkpoint_rows.list_for_run(conn, run_id) if ck.deleted_at is None]
    used = retention_rows.in_use(conn, run_id, live)
    values = values_at_steps(conn, run_id, metric, [ck.step for ck in live]) if metric else [None] * len(live)
    candidates = [Candidate(ck.id, ck.step, value, tuple(used.get(ck.id, ())), not_ours(ck))
                  for ck, value in zip(live, values)]
    return Plan(run_id, job_id, metric, direction, {ck.id: ck for ck in live},
                choose(candidates, direction, keep_best, keep_last))


async def remove_all(shared: ServerContext, doomed: Sequence[Checkpoint], dry_run: bool) -> list[Outcome]:
    """Step 2, where the files lie (``checkpoint_files``: here, or through the run's agent)."""
    outcomes = []
    nodes: dict[str, checkpoint_files.RemoteNode | None] = {}
    roots: dict[str, tuple[str, ...]] = {}
    for ck in doomed:
        if ck.run_id not in nodes:
            nodes[ck.run_id] = await checkpoint_files.remote_node_of_run(shared, ck.run_id)
            roots[ck.run_id] = await checkpoint_files.run_roots(shared, ck.run_id)
        removal = await checkpoint_files.remove(shared, ck, nodes[ck.run_id], dry_run, roots[ck.run_id])
        outcomes.append(Outcome(ck, removal.gone, removal.already_gone, removal.refused))
    return outcomes


def mark(conn: Connection, plan: Plan, gone: Sequence[Outcome], keep: str, now: int) -> list[EventRow]:
    """Step 3, in the store's transaction: mark each row whose file is gone; returns the events."""
    rows = []
    for outcome in gone:
        ck = outcome.checkpoint
        if not checkpoint_rows.mark_deleted(conn, ck, now):
            continue  # already marked, or registered anew since the decision
        context: dict[str, Any] = {"checkpoint_id": ck.id, "path": ck.path, "retention": keep}
        if ck.size_bytes is not None:
            context["size_bytes"] = ck.size_bytes
        if outcome.already_gone:
            context["already_gone"] = True
        rows.append(EventRow(new_id("ev"), now, CHECKPOINT_DELETED, "info", None, plan.job_id, plan.run_id, ck.step,
                             f"checkpoint {ck.path} deleted" + (" (it was already gone)" if outcome.already_gone
                                                                else f" by retention ({keep})"), context))
    event_rows.insert_events(conn, rows)
    return rows


async def prune(shared: ServerContext, run_id: str, keep_best: int, keep_last: int, dry_run: bool,
                metric: str | None = None, *, caller: Caller | None = None) -> PruneResult:
    """Decide (ranked by ``metric``, else the run's primary metric), delete (unless ``dry_run``),
    mark; the reply says what was kept and why, what was (or would be) deleted and what was
    refused and why.

    Raises:
        ApiError: not_found for an unknown run; forbidden for a limited ``caller``'s prune of
            a run of a job it did not submit; store_unavailable (nothing marked: a later
            prune marks the files already gone).
    """
    def look(conn: Connection) -> Plan:
        budgets.check_run_owner(conn, caller, run_id, "prune")  # a limited token: only its own runs
        return decide(conn, run_id, keep_best, keep_last, metric)

    plan = await access.readers(shared, "runs").run(look)
    outcomes = await remove_all(shared, [plan.rows[i] for i in plan.choice.deleted], dry_run)
    gone = [o for o in outcomes if o.gone]
    keep = f"keep_best={keep_best}, keep_last={keep_last}"
    if gone and not dry_run:
        at = now_ms()
        events = await write(access.store_port(shared, "runs"), lambda conn: mark(conn, plan, gone, keep, at),
                             small=True)
        for event in events:  # after the commit
            shared.event_feed.publish(event)
    return reply(plan, outcomes, keep_best, keep_last, dry_run)


def reply(plan: Plan, outcomes: Sequence[Outcome], keep_best: int, keep_last: int, dry_run: bool) -> PruneResult:
    return PruneResult(
        run_id=plan.run_id, dry_run=dry_run, keep_best=keep_best, keep_last=keep_last, metric=plan.metric,
        direction=plan.direction,
        kept=[KeptCheckpoint(**pruned(plan.rows[ck_id]), reasons=list(why)) for ck_id, why in plan.choice.kept.items()],
        deleted=[DeletedCheckpoint(**pruned(o.checkpoint), already_gone=o.already_gone)
                 for o in outcomes if o.refused is None],
        refused=[RefusedCheckpoint(**pruned(o.checkpoint), reason=o.refused)
                 for o in outcomes if o.refused is not None])


async def apply_policy(shared: ServerContext, job_id: str, run_id: str) -> PruneResult | None:
    """The job's ``retention`` policy over its run ``run_id``, if it has one; the prune's reply."""
    stored = await access.readers(shared, "jobs").run(lambda conn: job_rows.job_policies(conn, job_id))
    policy = stored.retention if stored else None
    if policy is None:
        return None
    done = await prune(shared, run_id, policy.keep_best, policy.keep_last, dry_run=False)
    if done.deleted or done.refused:
        log.info("retention of run %s (job %s): %d deleted, %d refused", run_id, job_id, len(done.deleted),
                 len(done.refused))
    return done
