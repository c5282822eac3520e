import pytest

from gpuplaned.domain.job_states import (
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
from gpuplaned.protocol.job_states import ENDED


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


def test_ended_states_only_leave_by_retry():
    for (state, event), _ in TRANSITIONS.items():
        if state in ENDED:
            assert event is E.RETRY


def test_automatic_retry():
    assert next_after_exit(S.RUNNING, E.FAILED, attempt=1, max_attempts=3) is S.QUEUED
    assert next_after_exit(S.RUNNING, E.FAILED, attempt=3, max_attempts=3) is S.FAILED
    assert next_after_exit(S.RUNNING, E.SUCCEEDED, attempt=1, max_attempts=3) is S.SUCCEEDED
    assert next_after_exit(S.RUNNING, E.CANCELLED, attempt=1, max_attempts=3) is S.CANCELLED


# --- a node's report -> the job's next state (the one translation: on_report / on_exit) ---

from gpuplaned.domain.job_states import NodeReport as R  # noqa: E402
from gpuplaned.domain.job_states import on_exit, on_report, run_state  # noqa: E402


@pytest.mark.parametrize("state, report, cancel, attempt, max_attempts, job, run", [
    (S.RUNNING, R.SUCCEEDED, False, 1, 1, S.SUCCEEDED, S.SUCCEEDED),
    (S.RUNNING, R.SUCCEEDED, True, 1, 1, S.SUCCEEDED, S.SUCCEEDED),  # it ended well before the cancel
    (S.RUNNING, R.FAILED, False, 1, 1, S.FAILED, S.FAILED),
    (S.RUNNING, R.FAILED, False, 1, 3, S.QUEUED, S.FAILED),  # an automatic retry
    (S.RUNNING, R.FAILED, False, 3, 3, S.FAILED, S.FAILED),  # the last attempt
    (S.RUNNING, R.FAILED, True, 1, 3, S.CANCELLED, S.CANCELLED),  # died of our cancel: no retry
    (S.RUNNING, R.CANCELLED, False, 1, 3, S.CANCELLED, S.CANCELLED),
    (S.DISPATCHING, R.FAILED, False, 1, 1, S.FAILED, S.FAILED),  # could not start
    (S.DISPATCHING, R.SUCCEEDED, False, 1, 1, S.SUCCEEDED, S.SUCCEEDED),  # ended before "started" came
    (S.DISPATCHING, R.REQUEUE, False, 1, 1, S.QUEUED, S.FAILED),  # never started: back to the queue
    (S.DISPATCHING, R.REQUEUE, True, 1, 1, S.CANCELLED, S.CANCELLED),  # ...unless cancelled meanwhile
    (S.LOST, R.FAILED, False, 1, 2, S.QUEUED, S.FAILED),
    (S.LOST, R.SUCCEEDED, False, 1, 1, S.SUCCEEDED, S.SUCCEEDED),
])
def test_on_exit(state, report, cancel, attempt, max_attempts, job, run):
    assert on_exit(state, report, cancel, attempt, max_attempts) is job
    assert on_report(state, report, cancel, attempt, max_attempts) is job
    assert run_state(report, cancel) is run


@pytest.mark.parametrize("state, report", [
    (S.SUCCEEDED, R.FAILED),  # an end reported twice
    (S.QUEUED, R.SUCCEEDED),
    (S.RUNNING, R.REQUEUE),  # a started attempt is not handed back
    (S.CANCELLED, R.CANCELLED),
])
def test_on_exit_refuses_what_the_table_does_not_have(state, report):
    with pytest.raises(IllegalTransition):
        on_exit(state, report, False, 1, 1)


@pytest.mark.parametrize("state, report, job", [
    (S.DISPATCHING, R.RUNNING, S.RUNNING),
    (S.RUNNING, R.RUNNING, S.RUNNING),  # re-adopted after a restart
    (S.LOST, R.RUNNING, S.RUNNING),
    (S.RUNNING, R.LOST, S.LOST),
])
def test_on_report_of_a_live_attempt(state, report, job):
    assert on_report(state, report, False, 1, 1) is job
    with pytest.raises(IllegalTransition):
        on_exit(state, report, False, 1, 1)  # not an end


def test_reports_have_the_wire_values():
    assert {r.value for r in R} == {"RUNNING", "WAITING", "SUCCEEDED", "FAILED", "CANCELLED", "LOST", "REQUEUE"}
    assert R("FAILED") is R.FAILED and R.FAILED == "FAILED"
