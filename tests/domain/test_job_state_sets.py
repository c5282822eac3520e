"""The named sets of job states (gpuplaned.protocol.job_states): each pinned, and each what the
state table (gpuplaned.domain.job_states) says it is, so that neither can change alone.

LOST has not ended: it may run on at its silent node, keeps its slots, and goes back to
RUNNING under the same attempt when the node is back (the table's LOST -started-> RUNNING).
"""

from __future__ import annotations

import itertools

import pytest

from gpuplaned.domain import gpu_budget
from gpuplaned.domain.job_states import TRANSITIONS, can, run_state
from gpuplaned.domain.job_states import JobEvent as E
from gpuplaned.protocol import job_states as vocabulary
from gpuplaned.protocol.job_states import (
    ACTIVE,
    CANCELLABLE,
    ENDED,
    FINISH_STATES,
    ON_NODE,
    OPEN,
    RETRYABLE,
    RUN_STATES,
    WAITING,
    WENT_WRONG,
    JobState,
    NodeReport,
    values,
)
from gpuplaned.protocol.token_limits import TokenLimits

S = JobState
PINNED = {
    "ENDED": {"SUCCEEDED", "FAILED", "CANCELLED"},
    "OPEN": {"CREATED", "QUEUED", "DISPATCHING", "RUNNING", "LOST"},
    "WAITING": {"CREATED", "QUEUED"},
    "ACTIVE": {"DISPATCHING", "RUNNING"},
    "ON_NODE": {"DISPATCHING", "RUNNING", "LOST"},
    "CANCELLABLE": {"QUEUED", "DISPATCHING", "RUNNING", "LOST"},
    "RETRYABLE": {"SUCCEEDED", "FAILED", "CANCELLED", "LOST"},
    "WENT_WRONG": {"FAILED", "LOST"},
}


def named_sets() -> dict[str, frozenset[JobState]]:
    """Every frozenset of job states the vocabulary module defines."""
    return {name: value for name, value in vars(vocabulary).items()
            if isinstance(value, frozenset) and value and all(isinstance(s, JobState) for s in value)}


def test_every_named_set_is_pinned():
    assert {name: set(values(states)) for name, states in named_sets().items()} == PINNED


def test_lost_has_not_ended_but_can_be_cancelled_and_retried():
    assert S.LOST not in ENDED and S.LOST in OPEN and S.LOST in ON_NODE
    assert S.LOST in CANCELLABLE and S.LOST in RETRYABLE and S.LOST not in ACTIVE


def _leaving(event: E) -> frozenset[JobState]:
    return frozenset(state for state, on in TRANSITIONS if on is event)


def test_each_set_is_the_state_tables():
    # Ended: only a retry leaves it.
    assert ENDED == frozenset(s for s in JobState if {e for st, e in TRANSITIONS if st is s} == {E.RETRY})
    assert OPEN == frozenset(JobState) - ENDED
    assert RETRYABLE == _leaving(E.RETRY)
    assert CANCELLABLE == _leaving(E.CANCELLED)
    # On a node: its node's report of an end is taken; active: and it can still be lost.
    assert ON_NODE == frozenset(s for s in JobState if can(s, E.SUCCEEDED) and can(s, E.FAILED))
    assert ACTIVE == _leaving(E.LOST)
    assert WAITING == _leaving(E.SUBMIT) | _leaving(E.DISPATCH)
    assert OPEN == WAITING | ON_NODE
    assert WENT_WRONG == {S.FAILED} | {TRANSITIONS[s, E.LOST] for s in _leaving(E.LOST)}


def test_finish_and_run_states_are_the_ended_ones_and_what_a_run_shows():
    assert FINISH_STATES == tuple(s.value for s in JobState if s in ENDED)
    shown = {run_state(report, cancel) for report, cancel in itertools.product(NodeReport, (False, True))}
    assert sorted(RUN_STATES) == list(values(frozenset(shown)))


def test_a_plain_string_is_a_member():
    # The store's rows, the CLI's JSON and the web's replies hold strings: they must find their set.
    assert "LOST" in ON_NODE and "LOST" not in ENDED and "SUCCEEDED" in ENDED
    assert values(ACTIVE) == ("DISPATCHING", "RUNNING")


@pytest.mark.parametrize("status, reserved, open_jobs", [
    ("RUNNING", True, 1), ("LOST", True, 1), ("SUCCEEDED", False, 0), ("FAILED", False, 0),
])
def test_a_lost_job_is_still_charged_and_reserved_as_one_not_ended(status, reserved, open_jobs):
    job = gpu_budget.TokenJob("job_1", status, gpus=2, timeout_s=3600.0,
                              attempts=(gpu_budget.Attempt(started_at=0, finished_at=None),))
    limits = TokenLimits(gpu_hours=100.0)
    usage = gpu_budget.usage([job], limits, now_ms=1_800_000)  # half an hour in
    assert usage.used_gpu_hours == pytest.approx(1.0)
    assert usage.committed_gpu_hours == pytest.approx(2.0 if reserved else 1.0)
    assert usage.open_jobs == open_jobs
