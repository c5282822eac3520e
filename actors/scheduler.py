"""The scheduler actor: the one owner of dispatch. A scheduling pass on a 2 s tick and
whenever it is woken.

Owns: every scheduling pass (``gpuplaned.service.passes.dispatch.run_pass``, i.e. ``dispatch.schedule``:
queued jobs -> free GPU slots, assigned inside one store transaction) and the delivery of
what it placed. No other code places a job.
Inputs: ``WAKE`` on its inbox (``gpuplaned.service.passes.dispatch.wake_scheduler``: a submit, a job's
end, a node's hello, a snapshot that changes what a node accepts, the cancel of a queued
job, a retry), and the tick. A wake is answered by a pass at once, so a submit to a free
slot starts without waiting for the tick; a burst of wakes is one pass.
Outputs: ``Dispatch`` messages to nodes through the node registry
(``gpuplaned.service.passes.dispatch.deliver``, which requeues a job whose node is not connected).
Liveness (DESIGN: the scheduler owns LOST detection): on its own cadence (the tick, or
``[uplink] heartbeat_s`` when shorter) ``gpuplaned.service.link.agent_link.sweep`` judges remote
agents' links: a node silent for 3 heartbeats and not attached goes OFFLINE with its jobs LOST,
and a dispatch an attached agent has not started in ``[uplink] dispatch_ack_s`` is requeued.
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
from gpuplaned.service.link import agent_link
from gpuplaned.service.passes.dispatch import deliver, placement_of, run_pass, util_rule_of
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
    uplink = getattr(ctx.shared, "config", None)
    sweep_every = min(TICK, uplink.uplink.heartbeat_s) if uplink is not None else TICK
    next_sweep = trio.current_time()
    while True:
        await _pass(ctx, handle)
        # The next tick counts from this pass: a wake-up's pass must not push it further off
        # (it did, TICK per wake-up, so a burst of them left the queue without a pass for long).
        tick = trio.current_time() + TICK
        while True:
            if trio.current_time() >= next_sweep:
                await _sweep(ctx)
                next_sweep = trio.current_time() + sweep_every
            with trio.move_on_at(min(tick, next_sweep)) as waiting:
                await ctx.inbox.receive()  # a wake-up: drain the others, they ask for the same pass
                while True:
                    try:
                        ctx.inbox.receive_nowait()
                    except trio.WouldBlock:
                        break
            if not waiting.cancelled_caught or trio.current_time() >= tick:
                break


async def _sweep(ctx: ActorContext[Dispatching]) -> None:
    try:
        await agent_link.sweep(ctx.shared)  # type: ignore[arg-type]  # it reads the config and readers too
    except Exception:
        # A sweep that failed (the store briefly down) is tried again next time; dispatching goes on.
        log.exception("liveness sweep of remote agents failed")


async def _pass(ctx: ActorContext[Dispatching], handle: SchedulerHandle) -> None:
    shared = ctx.shared
    nodes = shared.nodes
    # Small: committed on the event loop's thread, so a woken pass costs no thread hand-off.
    placement, util_rule = placement_of(shared), util_rule_of(shared)
    dispatched = await write(ctx.ports["store"], lambda conn: run_pass(nodes, conn, placement, util_rule), small=True)
    handle.passes += 1
    delivered = await deliver(shared, dispatched)
    handle.dispatched += delivered
    handle.undeliverable += len(dispatched) - delivered
