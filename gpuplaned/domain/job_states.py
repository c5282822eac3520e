"""The job state machine (seed 000 section 6.1).

Theory of operation::

    CREATED -submit-> QUEUED -dispatch-> DISPATCHING -started-> RUNNING -exited(0)-> SUCCEEDED
                                              |                     |--exited(!0)--> FAILED
                                              |                     |--cancelled---> CANCELLED
                                              |                     '--lost--------> LOST
                                              |--spawn_failed--> FAILED
                                              '--requeue (never started)--> QUEUED
    QUEUED -cancel-> CANCELLED (immediate; DISPATCHING/RUNNING cancel goes through the runner)
    LOST -started (reconciled, still running)-> RUNNING;  LOST -exited-> SUCCEEDED/FAILED
    FAILED/CANCELLED/LOST/SUCCEEDED -retry-> QUEUED (the next dispatch is a new attempt and Run)

A node reports each attempt as a ``NodeReport`` (``JobStatus.status`` on the wire); ``on_report``
turns a report into the job's next state through the table, and ``on_exit`` does so for an
attempt's end: a failure with attempts left goes back to the queue (QUEUED, not FAILED), and an
attempt that failed or never started while a cancel was asked for is CANCELLED. ``run_state``
is what the attempt's run records. Every function here is pure; the store writes the state
these return. The states, the reports and the named sets of states (ENDED, ACTIVE, ON_NODE...)
are the wire's vocabulary, in ``gpuplaned.protocol.job_states``; the table below is what they mean.
"""

from __future__ import annotations

import enum

from gpuplaned.protocol.job_states import JobState, NodeReport


class JobEvent(enum.Enum):
    SUBMIT = "submit"
    DISPATCH = "dispatch"
    STARTED = "started"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    LOST = "lost"
    REQUEUE = "requeue"
    RETRY = "retry"


S, E = JobState, JobEvent

TRANSITIONS: dict[tuple[JobState, JobEvent], JobState] = {
    (S.CREATED, E.SUBMIT): S.QUEUED,
    (S.QUEUED, E.DISPATCH): S.DISPATCHING,
    (S.QUEUED, E.CANCELLED): S.CANCELLED,
    (S.DISPATCHING, E.STARTED): S.RUNNING,
    (S.DISPATCHING, E.FAILED): S.FAILED,  # the command could not be started
    (S.DISPATCHING, E.CANCELLED): S.CANCELLED,
    (S.DISPATCHING, E.REQUEUE): S.QUEUED,
    (S.DISPATCHING, E.SUCCEEDED): S.SUCCEEDED,  # started and ended before we heard "started"
    (S.DISPATCHING, E.LOST): S.LOST,
    (S.RUNNING, E.SUCCEEDED): S.SUCCEEDED,
    (S.RUNNING, E.FAILED): S.FAILED,
    (S.RUNNING, E.CANCELLED): S.CANCELLED,
    (S.RUNNING, E.LOST): S.LOST,
    (S.RUNNING, E.STARTED): S.RUNNING,  # re-adopted after a daemon restart
    (S.LOST, E.STARTED): S.RUNNING,
    (S.LOST, E.SUCCEEDED): S.SUCCEEDED,
    (S.LOST, E.FAILED): S.FAILED,
    (S.LOST, E.CANCELLED): S.CANCELLED,
    (S.SUCCEEDED, E.RETRY): S.QUEUED,
    (S.FAILED, E.RETRY): S.QUEUED,
    (S.CANCELLED, E.RETRY): S.QUEUED,
    (S.LOST, E.RETRY): S.QUEUED,
}


class IllegalTransition(ValueError):
    def __init__(self, state: JobState, event: JobEvent) -> None:
        super().__init__(f"a {state.value} job cannot {event.value}")
        self.state = state
        self.event = event


def next_state(state: JobState, event: JobEvent) -> JobState:
    try:
        return TRANSITIONS[(state, event)]
    except KeyError:
        raise IllegalTransition(state, event) from None


def can(state: JobState, event: JobEvent) -> bool:
    return (state, event) in TRANSITIONS


def next_after_exit(state: JobState, event: JobEvent, attempt: int, max_attempts: int) -> JobState:
    """The state after a run ended; a failure with attempts left goes back to the queue."""
    new = next_state(state, event)
    if new is S.FAILED and attempt < max_attempts:
        return S.QUEUED
    return new


REPORT_EVENTS: dict[NodeReport, JobEvent] = {
    NodeReport.RUNNING: E.STARTED,
    NodeReport.SUCCEEDED: E.SUCCEEDED,
    NodeReport.FAILED: E.FAILED,
    NodeReport.CANCELLED: E.CANCELLED,
    NodeReport.LOST: E.LOST,
    NodeReport.REQUEUE: E.REQUEUE,
}
ENDS = frozenset({NodeReport.SUCCEEDED, NodeReport.FAILED, NodeReport.CANCELLED, NodeReport.REQUEUE})
# What an ended attempt's run records, by the event that ended it (a run is never QUEUED).
RUN_ENDS = {E.SUCCEEDED: S.SUCCEEDED, E.FAILED: S.FAILED, E.CANCELLED: S.CANCELLED, E.REQUEUE: S.FAILED}


def end_event(report: NodeReport, cancel_requested: bool) -> JobEvent:
    """The event of an attempt's end. One that failed (it died of our cancel) or never started
    (a dispatch the node never got) while a cancel was asked for is CANCELLED: the cancel
    stands, with no automatic retry and no second run."""
    event = REPORT_EVENTS[report]
    if cancel_requested and event in (E.FAILED, E.REQUEUE):
        return E.CANCELLED
    return event


def on_exit(state: JobState, report: NodeReport, cancel_requested: bool, attempt: int,
            max_attempts: int) -> JobState:
    """The job's state after attempt ``attempt`` of a ``state`` job ended as ``report``
    (SUCCEEDED, FAILED, CANCELLED or REQUEUE): SUCCEEDED, FAILED, CANCELLED, or QUEUED for
    an automatic retry (a failure with attempts left) or a dispatch that never started.

    Raises:
        IllegalTransition: a ``state`` job cannot end so (an end reported twice, say).
    """
    if report not in ENDS:
        raise IllegalTransition(state, REPORT_EVENTS[report])
    return next_after_exit(state, end_event(report, cancel_requested), attempt, max_attempts)


def on_report(state: JobState, report: NodeReport, cancel_requested: bool, attempt: int,
              max_attempts: int) -> JobState:
    """The job's state after any report of its current attempt (``on_exit`` for its end).

    Raises:
        IllegalTransition: the table has no such move (a stale or impossible report).
    """
    if report in ENDS:
        return on_exit(state, report, cancel_requested, attempt, max_attempts)
    return next_state(state, REPORT_EVENTS[report])


def run_state(report: NodeReport, cancel_requested: bool) -> JobState:
    """What the attempt's run records for ``report``: RUNNING, LOST, or how it ended (a
    dispatch that never started is a FAILED run)."""
    if report in ENDS:
        return RUN_ENDS[end_event(report, cancel_requested)]
    return S.RUNNING if report is NodeReport.RUNNING else S.LOST


# The event a failed attempt raises, by its failure reason: (type, severity). Every other
# failure (an exit code, a signal, a command that could not start, a lost job) is JOB_FAILED.
FAILURE_EVENTS = {"OOM": ("OOM", "critical"), "TIMEOUT": ("JOB_TIMEOUT", "warning")}
JOB_FAILED = ("JOB_FAILED", "warning")


def failure_event(failure_reason: str | None) -> tuple[str, str]:
    """``(event type, severity)`` for an attempt that failed with ``failure_reason``."""
    return FAILURE_EVENTS.get(failure_reason or "", JOB_FAILED)
