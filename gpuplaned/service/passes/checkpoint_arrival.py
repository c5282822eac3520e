"""New checkpoints were registered: what their job's policies do about them.

``checkpoints_arrived`` is called with the events a registration committed (an SDK batch,
``sessions.add_batch``; a find of the node's watcher, ``LocalNodeLink.checkpoints``), after
the commit; it blocks neither the caller nor the store's writer. For each job run with a new
``CHECKPOINT_CREATED`` it runs a pass as a task of its own, one at a time per run: arrivals
while one runs are gathered for one more pass, not one each. A pass applies the job's
policies in order: ``evaluate`` first (``service/api/evaluations.py`` ``apply_policy`` queues an
EVALUATE job for each new checkpoint, or each one that is its run's best), then
``retention`` (``service/passes/retention.py``), so a checkpoint just picked for an evaluation is
in use, and kept, by the time retention decides. A part that fails is logged and changes
nothing; the next arrival tries again.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

import trio

from gpuplaned.domain.run_records import CHECKPOINT_CREATED
from gpuplaned.service.api import evaluations
from gpuplaned.service.context_state import PerContext
from gpuplaned.service.passes import retention
from gpuplaned.store.event_rows import EventRow

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext

log = logging.getLogger(__name__)

# Per daemon: run id -> the new checkpoints its next pass handles (a run is in here while it has a pass).
_pending_of: PerContext[dict[str, list[str]]] = PerContext(dict)


def checkpoints_arrived(shared: ServerContext, committed: Sequence[EventRow]) -> None:
    """Act on the policies of the jobs whose runs the ``committed`` events registered checkpoints for."""
    by_run: dict[tuple[str, str], list[str]] = {}
    for e in committed:
        if e.type == CHECKPOINT_CREATED and e.job_id and e.run_id:
            checkpoint_id = e.context.get("checkpoint_id")
            by_run.setdefault((e.job_id, e.run_id), []).extend([checkpoint_id] if isinstance(checkpoint_id, str) else [])
    pending = _pending_of.of(shared)
    for (job_id, run_id), new in sorted(by_run.items()):
        if run_id in pending:
            pending[run_id] += new
            continue
        pending[run_id] = new
        # A system task: it outlives the request (or the watcher's pass) that brought the checkpoint,
        # and is cancelled with the daemon.
        trio.lowlevel.spawn_system_task(_passes, shared, job_id, run_id, name=f"checkpoint policies of {run_id}")


async def _passes(shared: ServerContext, job_id: str, run_id: str) -> None:
    pending = _pending_of.of(shared)
    try:
        while run_id in pending:
            new = pending[run_id]
            pending[run_id] = []
            if new:
                try:
                    await evaluations.apply_policy(shared, job_id, new)
                except Exception:  # a system task must not raise; the checkpoints stay registered
                    log.exception("evaluate policy of job %s failed", job_id)
            try:
                await retention.apply_policy(shared, job_id, run_id)
            except Exception:  # a system task must not raise; the next arrival tries again
                log.exception("retention of run %s (job %s) failed", run_id, job_id)
            if not pending[run_id]:
                return
    finally:
        pending.pop(run_id, None)
