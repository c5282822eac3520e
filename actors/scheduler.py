"""The scheduler actor: queued jobs -> GPU slots -> dispatch to the node's runner.

Owns: the dispatch decision (slot assignment happens inside one store transaction).
Inputs: ``WAKE`` on its inbox (a node hello, a cancel, a retry), and a 2 s tick. Submits and
job ends fold a pass into their own transaction while this actor runs (see
``gpuplaned.service.dispatch``).
Outputs: ``Dispatch`` messages to nodes through the node registry.
Restart: permanent. Stopping it pauses dispatching; running jobs are not touched, node
reports are still recorded (they do not go through this actor), and ``start`` resumes.
Ready: immediately; ``started()`` passes a ``SchedulerHandle``.
"""

from __future__ import annotations

import logging

import attrs
import trio

from gpuplaned.runtime.context import ActorContext
from gpuplaned.service.dispatch import deliver
from gpuplaned.service.registry import now_ms
from gpuplaned.store import jobs as job_rows
from gpuplaned.store.writer import write

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
    delivered = await deliver(shared, dispatched)
    handle.dispatched += delivered
    handle.undeliverable += len(dispatched) - delivered
