"""The scheduler actor: queued jobs -> GPU slots -> dispatch to the node's runner.

Owns: the dispatch decision (slot assignment happens inside one store transaction).
Inputs: ``WAKE`` on its inbox (a submit, a job end, a node hello), and a 2 s tick.
Outputs: ``Dispatch`` messages to nodes through the node registry.
Restart: permanent. Stopping it pauses dispatching; running jobs are not touched, node
reports are still recorded (they do not go through this actor), and ``start`` resumes.
Ready: immediately; ``started()`` passes a ``SchedulerHandle``.
"""

from __future__ import annotations

import logging

import attrs
import trio

from gpuplaned.store.writer import write
from gpuplaned.protocol.agent import Dispatch, JobStatus
from gpuplaned.runtime.context import ActorContext
from gpuplaned.service.nodes import NodeUnavailable, now_ms
from gpuplaned.store import jobs as job_rows

log = logging.getLogger("gpuplaned.scheduler")

TICK = 2.0


@attrs.frozen
class SchedulerStats:
    passes: int
    dispatched: int
    undeliverable: int


@attrs.define
class SchedulerHandle:
    passes: int = 0
    dispatched: int = 0
    undeliverable: int = 0

    def statistics(self) -> SchedulerStats:
        return SchedulerStats(self.passes, self.dispatched, self.undeliverable)


async def run(ctx: ActorContext, *, task_status: trio.TaskStatus[SchedulerHandle] = trio.TASK_STATUS_IGNORED) -> None:
    handle = SchedulerHandle()
    task_status.started(handle)
    next_tick = trio.current_time()
    while True:
        await _pass(ctx, handle)
        next_tick = max(next_tick + TICK, trio.current_time())
        with trio.move_on_at(next_tick):
            await ctx.inbox.receive()  # a wake-up: drain the others, they ask for the same pass
            while True:
                try:
                    ctx.inbox.receive_nowait()
                except trio.WouldBlock:
                    break


async def _pass(ctx: ActorContext, handle: SchedulerHandle) -> None:
    shared = ctx.shared
    connected = shared.nodes.connected()
    dispatched = await write(ctx.ports["store"], lambda conn: job_rows.schedule(conn, now_ms(), connected))
    handle.passes += 1
    for item in dispatched:
        job = item.job
        try:
            await shared.nodes.send(item.node_id, Dispatch(job))
            handle.dispatched += 1
            log.info("dispatched %s attempt %d to %s (gpus %s)", job.job_id, job.attempt, item.node_id,
                     list(job.gpu_indexes) or "none")
        except NodeUnavailable:
            handle.undeliverable += 1
            log.warning("node %s is not connected; %s goes back to the queue", item.node_id, job.job_id)
            status = JobStatus(job.job_id, job.attempt, "REQUEUE", message="node not connected")
            await write(ctx.ports["store"], lambda conn, s=status, n=item.node_id: job_rows.apply_status(conn, n, s, now_ms()))
