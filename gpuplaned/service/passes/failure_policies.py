"""Carry out the jobs' failure policies (``on_oom``, ``on_nan``, ``on_lost``, ``on_stalled``,
``on_preempted``), each exactly once per trigger event.

Exactly once: the trigger's row in ``policy_actions`` is queued by a SQL trigger in the very
transaction that records the event (so a daemon killed before the action finds it pending on
restart), and ``settle`` does the action's store part (the requeue, the env change, the
cancel's mark, the ``POLICY_ACTION`` event) and marks the row done in one transaction (so a
daemon killed after it does not act again). What goes to a node after the commit, a
``Cancel``, is on record as ``cancel_requested``: a node that missed it hears of it with its
next hello, as for any cancel.

A restart is two steps: the cancel, then (state ``restarting``) the requeue once the attempt
ended. A stall waits (state ``waiting``, ``due_at``) until it lasted the policy's ``after``.
A job is restarted for stalls at most ``[detector] stall_restarts`` times (``STALL_RESTARTS``,
3, by default): a script that hangs at the same place every time is not restarted for ever;
past that the policy gives up, a ``POLICY_SKIPPED`` event (action ``give_up``) saying why.
The decisions are ``gpuplaned.domain.failure_policies``'.
"""

from __future__ import annotations

import json
import logging
import os
from typing import TYPE_CHECKING, Any

import attrs
import trio

from gpuplaned.domain.failure_policies import (
    POLICY_ACTION,
    POLICY_SKIPPED,
    Decision,
    JobFacts,
    Trigger,
    decide,
    policy_for,
)
from gpuplaned.protocol.agent import Cancel
from gpuplaned.protocol.errors import ApiError
from gpuplaned.protocol.ids import new_id
from gpuplaned.protocol.job_policies import JobPolicies
from gpuplaned.protocol.job_states import ENDED
from gpuplaned.protocol.job_wire import Job
from gpuplaned.service.api import evaluations
from gpuplaned.service.link.registry import NodeUnavailable, now_ms
from gpuplaned.service.passes import detector, resume
from gpuplaned.service.passes.dispatch import wake_scheduler
from gpuplaned.store import job_rows, policy_rows, resume_rows
from gpuplaned.store.connection import Connection, savepoint
from gpuplaned.store.event_rows import EventRow, insert_events
from gpuplaned.store.writer import write

if TYPE_CHECKING:
    from gpuplaned.service.context import ServerContext

log = logging.getLogger("gpuplaned.policies")

STALL_RESTARTS = 3  # [detector] stall_restarts's default


@attrs.frozen
class Settled:
    events: list[EventRow]  # to publish after the commit
    cancels: list[tuple[str, str, int]]  # (node id, job id, attempt) to send after the commit
    requeued: bool  # the scheduler has work


async def run_pass(shared: ServerContext, store: Any) -> tuple[int, int | None]:
    """Settle what is due, then carry out what goes beyond the store: the events published,
    the cancels sent, the scheduler woken. Returns the actions taken and the next due time."""

    limit = shared.config.detector.stall_restarts

    def apply(conn: Connection) -> tuple[Settled, int | None]:
        return settle(conn, now_ms(), stall_restarts=limit), policy_rows.next_due(conn)

    def idle(conn: Connection) -> int | None | bool:
        return False if policy_rows.open_actions(conn, now_ms(), limit=1) else policy_rows.next_due(conn)

    quiet = await shared.readers.run(idle)  # most passes find nothing: no write for them
    if quiet is not False:
        return 0, quiet  # type: ignore[return-value]
    settled, due = await write(store, apply, small=True)
    for row in settled.events:
        shared.event_feed.publish(row)
        log.warning("%s", row.message)
    for node_id, job_id, attempt in settled.cancels:
        try:
            with trio.CancelScope(shield=True):  # on record now: the node must hear of it
                await shared.nodes.send(node_id, Cancel(job_id, attempt))
        except NodeUnavailable:
            pass  # cancel_requested is on record; the node acts on it with its next hello
    if settled.requeued:
        wake_scheduler(shared)
    return len(settled.events), due


def _policies(job: Job) -> JobPolicies:
    return JobPolicies(on_oom=job.on_oom, on_nan=job.on_nan, on_lost=job.on_lost, on_stalled=job.on_stalled,
                       on_preempted=job.on_preempted)


def settle(conn: Connection, now: int, *, stall_restarts: int = STALL_RESTARTS) -> Settled:
    """Settle every open trigger that is due; one write transaction. ``stall_restarts``: the
    most times ``on_stalled = restart`` restarts one job."""
    out = Settled([], [], False)
    for row in policy_rows.open_actions(conn, now):
        # Each row in a savepoint: one that fails undoes only its own writes and is settled as
        # skipped, so it never stops the pass (nor, raised again, every pass after a restart).
        events, cancels = len(out.events), len(out.cancels)
        try:
            with savepoint(conn, "policy_row"):
                requeued = _settle_one(conn, row, now, out, stall_restarts=stall_restarts)
        except Exception as exc:  # noqa: BLE001 - an ApiError is a job that moved on (the state table refused)
            del out.events[events:], out.cancels[cancels:]
            if not isinstance(exc, ApiError):
                log.exception("policy for job %s (event %s) could not be applied", row.job_id, row.event_id)
            reason = exc.message if isinstance(exc, ApiError) else f"the policy could not be applied: {exc!r}"
            policy_rows.settle(conn, row.job_id, row.event_id, "done", now, action="skip", reason=reason)
            requeued = False
        out = attrs.evolve(out, requeued=out.requeued or requeued)
    if out.events:
        insert_events(conn, out.events)
    return out


def _settle_one(conn: Connection, row: policy_rows.OpenAction, now: int, out: Settled, *,
                stall_restarts: int = STALL_RESTARTS) -> bool:
    job = job_rows.get_job(conn, row.job_id)
    event = policy_rows.event(conn, row.event_id)
    if job is None or event is None:
        policy_rows.settle(conn, row.job_id, row.event_id, "done", now, action="skip", reason="gone")
        return False
    if row.state == "restarting":
        if job.status not in ENDED:
            return False  # its attempt is still stopping (or its node is away: LOST)
        _requeue(conn, job, None)
        policy_rows.settle(conn, row.job_id, row.event_id, "done", now)
        out.events.append(_event(job, event, "restarted", "the stopped attempt ended: queued again", now))
        return True
    trigger = Trigger(event.type, event.ts, event.run_id, event.context)
    policies = _policies(job)
    policy = policy_for(trigger, policies)
    if policy is None:  # a JOB_FAILED of another kind, say: nothing answers it
        policy_rows.settle(conn, row.job_id, row.event_id, "done", now, action="skip", reason="no policy")
        return False
    done_before = policy_rows.taken(conn, job.id, event.type)
    facts = JobFacts(job.status, job.run_id, dict(job.env), _still_stalled(conn, job, event))
    decision = decide(trigger, policies, facts, done_before, now)
    if decision.action == "wait":
        if row.state != "waiting":
            policy_rows.settle(conn, row.job_id, row.event_id, "waiting", now, action="wait",
                               reason=decision.reason, due_at=decision.due_at)
        return False
    if decision.action == "restart" and policy == "on_stalled":
        done = policy_rows.stall_restarts(conn, job.id)
        if done >= stall_restarts:
            reason = (f"{decision.reason}, but it was restarted for a stall {done} time{'s' * (done != 1)} already "
                      f"(at most {stall_restarts}): gave up, the job keeps running")
            policy_rows.settle(conn, job.id, event.id, "done", now, action="give_up", reason=reason)
            out.events.append(_event(job, event, "give_up", reason, now, policy=policy, kind=POLICY_SKIPPED,
                                     restarts=done, limit=stall_restarts))
            return False
    return _act(conn, job, event, policy, decision, now, out)


def _act(conn: Connection, job: Job, event: EventRow, policy: str, decision: Decision, now: int,
         out: Settled) -> bool:
    fields: dict[str, Any] = {"action": decision.action, "reason": decision.reason}
    state, requeued, context = "done", False, {}
    if decision.action == "skip":
        out.events.append(_event(job, event, "skip", decision.reason, now, policy=policy, kind=POLICY_SKIPPED))
        policy_rows.settle(conn, job.id, event.id, state, now, **fields)
        return False
    if decision.action == "requeue":
        if decision.env:
            policy_rows.set_env(conn, job.id, {**job.env, **decision.env})
            context["env"] = decision.env
        point = _resume_point(conn, job.id, decision.resume_from) if decision.resume_from else None
        if decision.resume_from:
            context["resume_from"] = point
        if job.status != "QUEUED":  # the daemon's own retry (max_attempts) queued it already
            _requeue(conn, job, point)
        elif point is not None:
            resume_rows.set_resume_from(conn, job.id, point)
        requeued = True
    elif decision.action in ("stop", "restart"):
        outcome = job_rows.cancel_job(conn, job.id, now)
        if outcome.node_id is not None:
            out.cancels.append((outcome.node_id, job.id, outcome.job.attempt))
        if decision.action == "restart":
            state = "restarting"
        if policy == "on_nan" and event.run_id is not None:
            kept = policy_rows.last_good_checkpoint(conn, event.run_id, event.step)
            fields["checkpoint_id"] = kept
            context["kept_checkpoint"] = kept
    policy_rows.settle(conn, job.id, event.id, state, now, **fields)
    out.events.append(_event(job, event, decision.action, decision.reason, now, policy=policy, **context))
    return requeued


def _still_stalled(conn: Connection, job: Job, event: EventRow) -> bool:
    """No metric point and no log line since the RUN_STALLED: the detector's fingerprint of the
    attempt is still the one the event keeps."""
    if event.type != "RUN_STALLED" or "fingerprint" not in event.context:
        return True
    attempt = int(event.context.get("attempt") or job.attempt)
    now = detector.fingerprint(conn, job.id, attempt, event.run_id)
    return json.loads(json.dumps(now)) == event.context["fingerprint"]


def _requeue(conn: Connection, job: Job, checkpoint_id: str | None) -> None:
    job_rows.retry_job(conn, job.id)
    resume_rows.set_resume_from(conn, job.id, checkpoint_id)
    evaluations.after_retry(conn, job.id)


def _resume_point(conn: Connection, job_id: str, which: str) -> str | None:
    """The checkpoint to resume from whose file is there; None (start afresh) when none is."""
    try:
        candidates = resume.candidates_for(conn, job_id, which)
    except ApiError:
        return None
    return next((c.checkpoint_id for c in candidates if os.path.exists(c.path)), None)


def _event(job: Job, trigger: EventRow, action: str, reason: str, now: int, *, kind: str = POLICY_ACTION,
           policy: str | None = None, **context: Any) -> EventRow:
    severity = "info" if action in ("skip", "notify") and kind == POLICY_SKIPPED else "warning"
    return EventRow(new_id("ev"), now, kind, severity, trigger.node_id, job.id, trigger.run_id, trigger.step,
                    f"job {job.id}: {policy or 'policy'} {action}: {reason}",
                    {"policy": policy, "action": action, "reason": reason, "trigger": trigger.type,
                     "trigger_event_id": trigger.id, **context})
