"""The policies actor: carries out the jobs' failure policies (``on_oom``, ``on_nan``,
``on_lost``, ``on_stalled``, ``on_preempted``), each once per trigger event.

Owns: nothing but its wake-ups; the record is ``policy_actions`` (0013_events_policies.sql),
queued by a trigger in each event's own transaction.
Inputs: newly recorded events on ``shared.event_feed`` (a wake-up: their triggers are queued
already), and a tick for stalls that come due, restarts whose attempt ended, and events
written without a publish (a daemon killed between the two).
Also, every ``[tokens] budget_interval_s``, the budget pass (``gpuplaned.service.passes.budget``:
the jobs of a token whose GPU-hour budget is spent are cancelled, each with a ``BUDGET_EXHAUSTED``
event) and, hourly, the audit log's retention (``gpuplaned.service.api.audit.prune``).
And the sweeps' policies: early stopping every 2 s (``gpuplaned.service.passes.early_stop``), and
``retry_on`` and the pause of a flapping sweep on each failure and every 10 s
(``gpuplaned.service.passes.sweep_failures``).
Outputs: per pass one store write (``gpuplaned.service.passes.failure_policies.settle``: requeues,
env changes, cancels' marks, ``POLICY_ACTION`` events), then the cancels sent to the nodes and
the scheduler woken.
Restart: permanent. A pass is one transaction that marks what it did, so a crash repeats
nothing and loses nothing.
Ready: immediately; ``started()`` passes a ``PoliciesHandle``.
"""

from __future__ import annotations

import logging

import attrs
import trio

from gpuplaned.domain.failure_policies import TRIGGERS
from gpuplaned.protocol.errors import ApiError
from gpuplaned.runtime.broadcast import Lagged
from gpuplaned.runtime.context import ActorContext
from gpuplaned.service.api import audit
from gpuplaned.service.context import ServerContext
from gpuplaned.service.link.registry import now_ms
from gpuplaned.service.passes import budget as budget_pass
from gpuplaned.service.passes import early_stop, sweep_failures
from gpuplaned.service.passes.failure_policies import run_pass

log = logging.getLogger("gpuplaned.policies")

TICK = 2.0
AUDIT_PRUNE_EVERY_S = 3600.0


@attrs.frozen
class PoliciesStats:
    passes: int
    actions: int


@attrs.define
class PoliciesHandle:
    passes: int = 0
    actions: int = 0
    wake: trio.Event = attrs.field(factory=trio.Event)

    def statistics(self) -> PoliciesStats:
        return PoliciesStats(self.passes, self.actions)


async def run(ctx: ActorContext[ServerContext], *,
              task_status: trio.TaskStatus[PoliciesHandle] = trio.TASK_STATUS_IGNORED) -> None:
    handle = PoliciesHandle()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_wake_on_events, ctx.shared, handle)
        nursery.start_soon(_budgets, ctx.shared)
        nursery.start_soon(early_stop.keep_judging, ctx.shared, ctx.ports["store"])
        nursery.start_soon(sweep_failures.keep_settling, ctx.shared, ctx.ports["store"])
        task_status.started(handle)
        while True:
            handle.wake = trio.Event()
            actions, due = await run_pass(ctx.shared, ctx.ports["store"])
            handle.passes += 1
            handle.actions += actions
            wait = TICK if due is None else min(TICK, max(0.0, (due - now_ms()) / 1000))
            with trio.move_on_after(wait):
                await handle.wake.wait()


async def _budgets(shared: ServerContext) -> None:
    """Every ``[tokens] budget_interval_s``: stop the jobs of tokens whose GPU-hour budget is
    spent, and (once an hour) drop audit rows past ``[tokens] audit_keep_days``."""
    next_prune = trio.current_time()
    while True:
        await trio.sleep(shared.config.tokens.budget_interval_s)
        try:
            await budget_pass.enforce(shared)
            if trio.current_time() >= next_prune:
                dropped = await audit.prune(shared)
                if dropped:
                    log.info("dropped %d audit rows past their keep time", dropped)
                next_prune = trio.current_time() + AUDIT_PRUNE_EVERY_S
        except ApiError as error:  # the store restarting: the next tick tries again
            log.warning("budget pass: %s", error)


async def _wake_on_events(shared: ServerContext, handle: PoliciesHandle) -> None:
    async with shared.event_feed.subscribe(maxlen=64) as events:
        async for item in events:  # a Lagged marker wakes too: the table is the record, not the feed
            if isinstance(item, Lagged) or item.type in TRIGGERS:
                handle.wake.set()
