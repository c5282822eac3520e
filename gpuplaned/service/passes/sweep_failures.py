"""A sweep's failure classes (issue 31 item 3): ``retry_on`` and the pause of a flapping sweep.

Run by the policies actor when a failure is recorded (an ``OOM``, ``JOB_FAILED`` or
``JOB_TIMEOUT`` event) and every ``EVERY_S`` besides (an event published by a daemon killed
before it could wake us, say). Both steps read what is on record and act in one transaction
that changes it, so a pass repeated, or a daemon killed halfway, never acts twice:

- ``retry_on``: each FAILED trial of a sweep with ``retry_on`` whose failure is one of its causes
  and whose retries are not spent (``gpuplaned.domain.sweep_policies.decide_retry``) is queued
  again as the daemon's own retries are (a new attempt), with a ``POLICY_ACTION`` event (policy
  ``retry_on``) saying why. Once queued it is no longer FAILED; a failure of another cause, or
  past the count, stays FAILED: final.
- Flapping: a sweep, not paused, whose trials failed within their first minute three times
  since it was last paused for that (``sweep_policy_rows.fast_failures``) is paused
  (``FLAPPING_REASON``), with a ``SWEEP_PAUSED`` event naming the trials, in one transaction.
  The pause comes before the retries of the same pass, so a retried trial waits with the rest.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import attrs
import trio

from gpuplaned.domain.failure_policies import POLICY_ACTION
from gpuplaned.domain.sweep_policies import (
    FLAPPING_REASON,
    RETRY_ON,
    SWEEP_PAUSED,
    RetryDecision,
    covered,
    decide_retry,
    flapping,
)
from gpuplaned.protocol.event_replies import EventRow
from gpuplaned.protocol.ids import new_id
from gpuplaned.runtime.broadcast import Lagged
from gpuplaned.service.api import evaluations
from gpuplaned.service.link.registry import now_ms
from gpuplaned.service.passes.dispatch import wake_scheduler
from gpuplaned.store import job_rows, resume_rows, sweep_policy_rows, sweep_rows
from gpuplaned.store.connection import Connection
from gpuplaned.store.event_rows import insert_events
from gpuplaned.store.writer import write

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext

log = logging.getLogger("gpuplaned.sweeps")

EVERY_S = 10.0
WAKE_ON = frozenset({"OOM", "JOB_FAILED", "JOB_TIMEOUT"})  # a failed attempt's events


@attrs.frozen
class Acted:
    events: list[EventRow]
    requeued: int
    paused: int


def settle(conn: Connection, now: int) -> Acted:
    """Pause the flapping sweeps, then queue again the failed trials ``retry_on`` covers; one
    write transaction."""
    events: list[EventRow] = []
    paused = 0
    for found in sweep_policy_rows.fast_failures(conn):
        if not flapping(len(found.job_ids)):
            continue
        sweep_rows.set_paused(conn, found.sweep_id, True, FLAPPING_REASON)
        events.append(EventRow(
            new_id("ev"), now, SWEEP_PAUSED, "warning", None, None, None, None,
            f"sweep {found.sweep} paused: {FLAPPING_REASON} ({', '.join(found.job_ids)}); "
            f"fix the command, then gpuplanectl sweep resume {found.sweep_id}",
            {"sweep_id": found.sweep_id, "sweep": found.sweep, "reason": FLAPPING_REASON,
             "job_ids": list(found.job_ids)}))
        paused += 1
    requeued = 0
    for trial in sweep_policy_rows.failed_trials(conn):
        decision = _decision(trial)
        if not decision.retry:
            continue
        job_rows.retry_job(conn, trial.job_id)  # the daemon's own requeue: a new attempt
        resume_rows.set_resume_from(conn, trial.job_id, None)
        evaluations.after_retry(conn, trial.job_id)
        events.append(EventRow(
            new_id("ev"), now, POLICY_ACTION, "warning", None, trial.job_id, None, None,
            f"job {trial.job_id}: sweep {trial.sweep} trial {trial.trial} queued again: {decision.reason}",
            {"policy": RETRY_ON, "action": "requeue", "reason": decision.reason, "sweep_id": trial.sweep_id,
             "trial": trial.trial, "failure_reason": trial.failure_reason}))
        requeued += 1
    insert_events(conn, events)
    return Acted(events, requeued, paused)


def _decision(trial: sweep_policy_rows.FailedTrial) -> RetryDecision:
    spent = sum(covered(reason, trial.retry_on) for reason in trial.reasons)
    return decide_retry(trial.failure_reason, trial.retry_on, spent)


async def run_pass(shared: ServerContext, store: Any) -> Acted:
    """Settle, then publish what it recorded and wake the scheduler for what it queued."""
    if shared.readers is None:
        return Acted([], 0, 0)
    quiet = await shared.readers.run(_quiet)  # most passes find nothing: no write for them
    if quiet:
        return Acted([], 0, 0)
    acted = await write(store, lambda conn: settle(conn, now_ms()), small=True)
    for row in acted.events:
        shared.event_feed.publish(row)
        log.warning("%s", row.message)
    if acted.requeued or acted.paused:
        wake_scheduler(shared)
    return acted


def _quiet(conn: Connection) -> bool:
    found = sweep_policy_rows.fast_failures(conn)
    if any(flapping(len(f.job_ids)) for f in found):
        return False
    return not any(_decision(trial).retry for trial in sweep_policy_rows.failed_trials(conn))



async def keep_settling(shared: ServerContext, store: Any) -> None:
    """The policies actor's task: a pass when a failure is recorded, and every ``EVERY_S``."""
    woken = trio.Event()

    async def listen() -> None:
        async with shared.event_feed.subscribe(maxlen=64) as events:
            async for item in events:  # a Lagged marker wakes too: the tables are the record, not the feed
                if isinstance(item, Lagged) or item.type in WAKE_ON:
                    woken.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(listen)
        while True:
            woken = trio.Event()
            try:
                await run_pass(shared, store)
            except Exception:  # noqa: BLE001 - the failure policies share this actor: a fault here must not stop them
                log.exception("the sweep failures pass failed; the next one tries again")
            with trio.move_on_after(EVERY_S):
                await woken.wait()
