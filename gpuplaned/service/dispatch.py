"""Scheduling passes and the delivery of their dispatches.

The scheduler actor runs a pass on its 2 s tick and when woken. Two hot paths also fold a
pass into the transaction they already make, so a free slot is filled without waiting for
another transaction and an actor hop: a submit (the job may start at once) and a job's end
(the next queued job takes its slot). Both skip it unless the scheduler actor is starting,
running or backing off, which is how ``gpuplanectl stop scheduler`` (or a scheduler gone
FATAL) pauses dispatching. All passes run inside store transactions, which the store
serializes, so no slot is ever given twice.
"""

from __future__ import annotations

import logging
import sqlite3
from typing import TYPE_CHECKING

import trio

from gpuplaned.domain.scheduling import NodeCapacity
from gpuplaned.protocol.agent import Dispatch, JobStatus
from gpuplaned.runtime.states import ActorState
from gpuplaned.service.registry import NodeUnavailable, now_ms
from gpuplaned.store import job_rows
from gpuplaned.store.writer import write

if TYPE_CHECKING:
    from gpuplaned.daemon import DaemonContext

log = logging.getLogger("gpuplaned.scheduler")


def dispatching(shared: DaemonContext) -> bool:
    """Whether dispatching is on: the scheduler actor exists and is starting, running or backing off."""
    try:
        state = shared.supervisor.state("scheduler")
    except KeyError:
        return False
    return state in (ActorState.STARTING, ActorState.RUNNING, ActorState.BACKOFF)


def run_pass(shared: DaemonContext, conn: sqlite3.Connection,
             nodes: list[NodeCapacity] | None = None) -> list[job_rows.Dispatched]:
    """A scheduling pass inside the caller's transaction (nothing while dispatching is paused).

    ``nodes`` saves reading the capacities again when the caller already has them
    (computed with ``connected`` from the same transaction).
    """
    if not dispatching(shared):
        return []
    return job_rows.schedule(conn, now_ms(), shared.nodes.connected(), nodes, shared.nodes.snapshots())


async def deliver(shared: DaemonContext, dispatched: list[job_rows.Dispatched]) -> int:
    """Send each dispatch to its node; a node that has gone away gets its job requeued.

    Not cancellable: the dispatches are committed, and one never sent would stay
    DISPATCHING, holding its slots, for as long as its node stays connected (a submit whose
    client hung up must still deliver).

    Returns how many were delivered.
    """
    with trio.CancelScope(shield=True):
        return await _deliver(shared, dispatched)


async def _deliver(shared: DaemonContext, dispatched: list[job_rows.Dispatched]) -> int:
    delivered = 0
    for item in dispatched:
        job = item.job
        try:
            await shared.nodes.send(item.node_id, Dispatch(job))
        except NodeUnavailable:
            log.warning("node %s is not connected; %s goes back to the queue", item.node_id, job.job_id)
            status = JobStatus(job.job_id, job.attempt, "REQUEUE", message="node not connected")
            await write(shared.supervisor.ports["store"],
                        lambda conn, s=status, n=item.node_id: job_rows.apply_status(conn, n, s, now_ms()))
            continue
        delivered += 1
        log.info("dispatched %s attempt %d to %s (gpus %s)", job.job_id, job.attempt, item.node_id,
                 list(job.gpu_indexes) or "none")
    return delivered
