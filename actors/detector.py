"""The detector actor: the time-based event rules, every ``detector.interval_s`` (seed 000
section 10.1): stalls of running jobs, and the runs' lifecycle.

Owns: the stall rule's state per running job and attempt (``gpuplaned.domain.rules.stall``).
Inputs: none but its timer; each pass reads the running jobs and what they have produced so
far (log offsets, point counts), and the runs started or ended lately, from the store.
Outputs: RUN_STALLED, RUN_STARTED and RUN_FINISHED events through the one event path: stored
in the pass's transaction, then published on the event feed after the commit. The metric rules (LOSS_NAN, LOSS_SPIKE,
OVERFITTING_SUSPECTED) are not here: they run in the ingest's summary fold, in the batch's
transaction (``gpuplaned.service.passes.detector``).
Restart: permanent. A restarted detector measures silence afresh, and a stall episode raised
before the restart is not raised again (its event keeps the job's fingerprint); a run's start
and end are raised once each (the events table is their watermark).
Ready: immediately; the first pass runs one interval after start.
"""

from __future__ import annotations

import logging

import attrs
import trio

from gpuplaned.runtime.context import ActorContext
from gpuplaned.service.context import ServerContext
from gpuplaned.service.link.registry import now_ms
from gpuplaned.service.passes.detector import lifecycle_pass, stall_pass, stall_policy
from gpuplaned.store.writer import write

log = logging.getLogger("gpuplaned.detector")


@attrs.frozen
class DetectorStats:
    passes: int
    raised: int
    watched: int


@attrs.define
class DetectorHandle:
    passes: int = 0
    raised: int = 0
    watched: int = 0

    def statistics(self) -> DetectorStats:
        return DetectorStats(self.passes, self.raised, self.watched)


async def run(ctx: ActorContext[ServerContext], *,
              task_status: trio.TaskStatus[DetectorHandle] = trio.TASK_STATUS_IGNORED) -> None:
    handle = DetectorHandle()
    config = ctx.shared.config.detector
    policy = stall_policy(config)
    states: dict = {}
    floor = now_ms()  # lifecycle events for runs from here on, on a store that never had one
    task_status.started(handle)

    def one_pass(conn, clock_ms: int, now: int) -> list:  # type: ignore[no-untyped-def]
        rows = lifecycle_pass(conn, now, floor, started=config.run_started, finished=config.run_finished)
        return rows + (stall_pass(conn, states, clock_ms, now, policy) if policy.enabled else [])

    while True:
        await trio.sleep(config.interval_s)
        clock_ms = int(trio.current_time() * 1000)  # silence is measured on trio's clock (virtual in tests)
        # Not small: besides a few indexed reads per running job, the lifecycle rule looks up
        # every run that started or ended in its look-back hour (~5 us each: 20,000 sweep trials
        # in an hour are ~0.1 s), so it is committed on the store's worker thread, where SQLite's
        # work leaves the event loop free.
        rows = await write(ctx.ports["store"], lambda conn: one_pass(conn, clock_ms, now_ms()))
        handle.passes += 1
        handle.raised += len(rows)
        handle.watched = len(states)
        for row in rows:  # after the commit
            log.info("%s: %s", row.type, row.message)
            ctx.shared.event_feed.publish(row)
