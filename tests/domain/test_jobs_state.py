import pytest

from gpuplaned.domain.job_states import (
    TERMINAL,
    TRANSITIONS,
    IllegalTransition,
    can,
    next_after_exit,
    next_state,
)
from gpuplaned.domain.job_states import (
    JobEvent as E,
)
from gpuplaned.domain.job_states import (
    JobState as S,
)


@pytest.mark.parametrize("state, event, expected", [
    (S.CREATED, E.SUBMIT, S.QUEUED),
    (S.QUEUED, E.DISPATCH, S.DISPATCHING),
    (S.QUEUED, E.CANCELLED, S.CANCELLED),
    (S.DISPATCHING, E.STARTED, S.RUNNING),
    (S.DISPATCHING, E.FAILED, S.FAILED),
    (S.DISPATCHING, E.REQUEUE, S.QUEUED),
    (S.RUNNING, E.SUCCEEDED, S.SUCCEEDED),
    (S.RUNNING, E.FAILED, S.FAILED),
    (S.RUNNING, E.CANCELLED, S.CANCELLED),
    (S.RUNNING, E.LOST, S.LOST),
    (S.LOST, E.STARTED, S.RUNNING),
    (S.LOST, E.FAILED, S.FAILED),
    (S.FAILED, E.RETRY, S.QUEUED),
    (S.CANCELLED, E.RETRY, S.QUEUED),
    (S.SUCCEEDED, E.RETRY, S.QUEUED),
])
def test_transitions(state, event, expected):
    assert next_state(state, event) is expected


@pytest.mark.parametrize("state, event", [
    (S.QUEUED, E.STARTED),
    (S.SUCCEEDED, E.FAILED),
    (S.CANCELLED, E.DISPATCH),
    (S.QUEUED, E.RETRY),
    (S.RUNNING, E.DISPATCH),
    (S.CREATED, E.DISPATCH),
])
def test_illegal_transitions(state, event):
    assert not can(state, event)
    with pytest.raises(IllegalTransition, match=f"a {state.value} job cannot {event.value}"):
        next_state(state, event)


def test_terminal_states_only_leave_by_retry():
    for (state, event), _ in TRANSITIONS.items():
        if state in TERMINAL:
            assert event is E.RETRY


def test_automatic_retry():
    assert next_after_exit(S.RUNNING, E.FAILED, attempt=1, max_attempts=3) is S.QUEUED
    assert next_after_exit(S.RUNNING, E.FAILED, attempt=3, max_attempts=3) is S.FAILED
    assert next_after_exit(S.RUNNING, E.SUCCEEDED, attempt=1, max_attempts=3) is S.SUCCEEDED
    assert next_after_exit(S.RUNNING, E.CANCELLED, attempt=1, max_attempts=3) is S.CANCELLED
