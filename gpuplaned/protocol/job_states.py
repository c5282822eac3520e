"""The job vocabulary: the closed enums of a job's state, a node's report of one attempt and why an
attempt failed, and the named sets of job states that everyone else imports (REST, MCP, the
store's SQL, the CLI, and through ``web/src/lib/jobStates.ts`` the UI).

The values are the wire's strings; each enum is a ``StrEnum``, so a member equals its string
and the converter refuses any other string. Which state follows which is the state table's
(``gpuplaned.domain.job_states``); tests/domain/test_job_state_sets.py derives each set below
from that table, so a set cannot drift from it.

LOST has not ended. A job goes LOST when its node falls silent: its process may well run on
there, it keeps its GPU slots, its run has no end and it is still charged to its token's
budget; when the node comes back the same attempt is re-adopted (RUNNING) or its end is
recorded. So LOST is ON_NODE and OPEN, not ENDED; but it can be cancelled (the cancel reaches
the node when it is back) and retried (a new attempt, its slots freed), and it went wrong.

Imports nothing but ``enum``: ``gpuplanectl`` imports it.
"""

from __future__ import annotations

import enum


class JobState(enum.StrEnum):
    """A job's state (``Job.status``), as seed 000 section 6.1 names them."""

    CREATED = "CREATED"
    QUEUED = "QUEUED"
    DISPATCHING = "DISPATCHING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    LOST = "LOST"


class NodeReport(enum.StrEnum):
    """What a node reports of one attempt (``JobStatus.status``)."""

    RUNNING = "RUNNING"  # started, or found still running after a restart
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    LOST = "LOST"
    REQUEUE = "REQUEUE"  # never started on the node: back to the queue, no attempt spent
    # Handed to the node's runner backend, which has not started it yet (Slurm queues it): the job
    # stays DISPATCHING, however long; ``JobStatus.message`` says why ("Slurm: Resources"), and the
    # node says it again only when that changes. RUNNING or the end follow as for any attempt.
    WAITING = "WAITING"


class FailureReason(enum.StrEnum):
    """Why an attempt failed (``failure_reason`` on the job, its run and its event). A signal's
    is ``signal_failure(name)``: ``SIGNAL(SIGSEGV)``, so the wire's field stays a string."""

    EXIT_CODE = "EXIT_CODE"  # a non-zero exit code
    OOM = "OOM"  # the kernel's OOM killer, or an out-of-memory message in stderr
    TIMEOUT = "TIMEOUT"
    SPAWN_FAILED = "SPAWN_FAILED"  # the command could not be started
    SHIM_DIED = "SHIM_DIED"  # its shim died first and the job's own exit code is unknown
    LOST = "LOST"  # nothing tells how it ended (no exit record, or a corrupt one), or its node fell silent
    PREEMPTED = "PREEMPTED"  # its cluster's scheduler (Slurm) preempted it and would run it again
    REQUEUED = "REQUEUED"  # on a run only: the dispatch never started and went back to the queue
    DISPATCH_TIMEOUT = "DISPATCH_TIMEOUT"  # a remote node never said it started it, dispatch after dispatch
    DEPENDENCY_FAILED = "DEPENDENCY_FAILED"  # cancelled while queued: its dependencies can never be met
    EARLY_STOPPED = "EARLY_STOPPED"  # cancelled: its sweep's early-stopping rule found it behind the others


class AfterCondition(enum.StrEnum):
    """When a job with dependencies may run (``submit --after``, ``--after-any``, ``--after-failed``;
    ``gpuplaned.domain.dependencies`` decides)."""

    SUCCEEDED = "succeeded"  # once every dependency SUCCEEDED
    ENDED = "ended"  # once every dependency ended, whatever the outcome
    FAILED = "failed"  # once every dependency ended, if one did not succeed


# Why the daemon itself cancelled a running attempt: set with its cancel and kept when the attempt
# ends CANCELLED (the node's report says only that it was stopped).
STOP_REASONS = frozenset({FailureReason.EARLY_STOPPED})


def signal_failure(name: str) -> str:
    """The failure reason of an attempt killed by the signal ``name`` (``SIGSEGV``)."""
    return f"SIGNAL({name})"


S = JobState

# The attempt's end is recorded: its outcome is known, its slots are free, its run is closed, and
# nothing changes it but a retry.
ENDED = frozenset({S.SUCCEEDED, S.FAILED, S.CANCELLED})
# Not ended: the job may still change by itself (it waits, runs, or its node is to say how it is).
OPEN = frozenset(JobState) - ENDED
# It waits for a node: not dispatched yet.
WAITING = frozenset({S.CREATED, S.QUEUED})
# Its node runs it, or is about to, and hears from us.
ACTIVE = frozenset({S.DISPATCHING, S.RUNNING})
# It holds slots on a node, whose hello lists it: ACTIVE, and LOST.
ON_NODE = ACTIVE | {S.LOST}
# A cancel takes it: at once when QUEUED, through its node when ON_NODE.
CANCELLABLE = ON_NODE | {S.QUEUED}
# A retry takes it (a new attempt).
RETRYABLE = ENDED | {S.LOST}
# It went wrong: what ``explain_failure`` explains and the UI's "failed" filter shows.
WENT_WRONG = frozenset({S.FAILED, S.LOST})
# How a session, an SDK run or an evaluation may finish: the ended states, in this order.
FINISH_STATES = (S.SUCCEEDED.value, S.FAILED.value, S.CANCELLED.value)
# What an attempt's run shows: RUNNING, how it ended, or LOST (``domain.job_states.run_state``).
RUN_STATES = (S.RUNNING.value, *FINISH_STATES, S.LOST.value)


def values(states: frozenset[JobState]) -> tuple[str, ...]:
    """``states`` as sorted strings: SQL parameters, a reply's list, a stable order."""
    return tuple(sorted(state.value for state in states))
