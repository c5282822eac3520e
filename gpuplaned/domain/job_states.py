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

An automatic retry is a FAILED outcome with attempts left: ``next_after_exit`` answers
QUEUED instead of FAILED. Every function here is pure; the store applies the result.
"""

from __future__ import annotations

import enum


class JobState(enum.Enum):
    CREATED = "CREATED"
    QUEUED = "QUEUED"
    DISPATCHING = "DISPATCHING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    LOST = "LOST"


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

TERMINAL = frozenset({S.SUCCEEDED, S.FAILED, S.CANCELLED})
# States in which the job holds slots on a node.
ACTIVE = frozenset({S.DISPATCHING, S.RUNNING})

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


# The event a failed attempt raises, by its failure reason: (type, severity). Every other
# failure (an exit code, a signal, a command that could not start, a lost job) is JOB_FAILED.
FAILURE_EVENTS = {"OOM": ("OOM", "critical"), "TIMEOUT": ("JOB_TIMEOUT", "warning")}
JOB_FAILED = ("JOB_FAILED", "warning")


def failure_event(failure_reason: str | None) -> tuple[str, str]:
    """``(event type, severity)`` for an attempt that failed with ``failure_reason``."""
    return FAILURE_EVENTS.get(failure_reason or "", JOB_FAILED)
