"""The scheduler actor: the one owner of dispatch. A scheduling pass on a 2 s tick and
whenever it is woken.

Owns: every scheduling pass (``gpuplaned.service.dispatch.run_pass``, i.e. ``job_rows.schedule``:
queued jobs -> free GPU slots, assigned inside one store transaction) and the delivery of
what it placed. No other code places a job.
Inputs: ``WAKE`` on its inbox (``gpuplaned.service.dispatch.wake_scheduler``: a submit, a job's
end, a node's hello, a snapshot that changes what a node accepts, the cancel of a queued
job, a retry), and the tick. A wake is answered by a pass at once, so a submit to a free
slot starts without waiting for the tick; a burst of wakes is one pass.
Outputs: ``Dispatch`` messages to nodes through the node registry
(``gpuplaned.service.dispatch.deliver``, which requeues a job whose node is not connected).
Restart: permanent. Stopping it pauses dispatching (so does a scheduler gone FATAL; one
backing off after a crash does not, for long): queued jobs wait, running jobs are not
touched, node reports are still recorded (they do not go through this actor), and
``start`` resumes with a pass.
Ready: immediately; ``started()`` passes a ``SchedulerHandle``.
"""
from __future__ import annotations

import logging

import attrs
import trio

from gpuplaned.runtime.context import ActorContext
from gpuplaned.service.context import Dispatching
from gpuplaned.service.dispatch import deliver, run_pass
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


async def run(ctx: ActorContext[Dispatching], *, task_status: trio.TaskStatus[SchedulerHandle] = trio.TASK_STATUS_IGNORED) -> None:
    handle = SchedulerHandle()
    task_status.started(handle)
    while True:
        await _pass(ctx, handle)
        # The next tick counts from this pass: a wake-up's pass must not push it further off
        # (it did, TICK per wake-up, so a burst of them left the queue without a pass for long).
        with trio.move_on_after(TICK):
            await ctx.inbox.receive()  # a wake-up: drain the others, they ask for the same pass
            while True:
                try:
                    ctx.inbox.receive_nowait()
                except trio.WouldBlock:
                    break


async def _pass(ctx: ActorContext[Dispatching], handle: SchedulerHandle) -> None:
    shared = ctx.shared
    nodes = shared.nodes
    # Small: committed on the event loop's thread, so a woken pass costs no thread hand-off.
    dispatched = await write(ctx.ports["store"], lambda conn: run_pass(nodes, conn), small=True)
    handle.passes += 1
    delivered = await deliver(shared, dispatched)
    handle.dispatched += delivered
    handle.undeliverable += len(dispatched) - delivered
