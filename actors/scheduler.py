"""The scheduler actor: a scheduling pass on a 2 s tick and whenever it is woken.

Owns: its timer, and nothing of dispatch but its own passes. A pass (``job_rows.schedule``:
queued jobs -> free GPU slots, assigned inside one store transaction) also runs inside the
transaction of every submit and of every job's end (``gpuplaned.service.dispatch.run_pass``);
those two read this actor's state from the supervisor to tell whether dispatching is paused.
Inputs: ``WAKE`` on its inbox (``gpuplaned.service.nodes.wake_scheduler``: a node's hello, a
snapshot that changes what a node accepts, the cancel of a queued job, a retry), and the tick.
Outputs: ``Dispatch`` messages to nodes through the node registry
(``gpuplaned.service.dispatch.deliver``, which requeues a job whose node is not connected).
Restart: permanent. Stopping it pauses dispatching: its own passes stop and submits and job
ends skip theirs (so does a scheduler gone FATAL; one backing off after a crash does not).
Running jobs are not touched, node reports are still recorded (they do not go through this
actor), and ``start`` resumes.
Ready: immediately; ``started()`` passes a ``SchedulerHandle``.
"""

from __future__ import annotations

import logging

import attrs
import trio

from gpuplaned.runtime.context import ActorContext
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


async def run(ctx: ActorContext, *, task_status: trio.TaskStatus[SchedulerHandle] = trio.TASK_STATUS_IGNORED) -> None:
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


async def _pass(ctx: ActorContext, handle: SchedulerHandle) -> None:
    shared = ctx.shared
    # The same pass as a submit's: it withholds what node health says (a low disk, a lost GPU,
    # one that processes outside GPUPlane use), which this pass once left out.
    dispatched = await write(ctx.ports["store"], lambda conn: run_pass(shared, conn))
    handle.passes += 1
    delivered = await deliver(shared, dispatched)
    handle.dispatched += delivered
    handle.undeliverable += len(dispatched) - delivered
