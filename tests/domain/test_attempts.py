"""The runner's attempt machine, table-driven: phase + input -> phase + effects."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from gpuplaned.backends.base import Running, Started
from gpuplaned.backends.local import LocalHandle
from gpuplaned.domain import attempts as a
from gpuplaned.domain.attempts import P
from gpuplaned.domain.failures import ExitReason
from gpuplaned.launching.job_files import ExitRecord
from gpuplaned.protocol.agent import JobStatus

JOB, N = "job_1", 2
HANDLE = LocalHandle(JOB, N, Path("/jobs"), shim_pid=10, shim_start_time=11, spawn_id=f"{JOB}/{N}")
ADOPTED_HANDLE = attrs.evolve(HANDLE, spawn_id=None)
RUNNING = Running(pid=12, pgid=12, started_at=1.5, supervisor_pid=10, supervisor_start_time=11)
STARTED = Started(HANDLE, RUNNING)


@attrs.frozen
class QueuedHandle:
    """A queueing backend's handle (Slurm's job id)."""

    slurm_id: str = "41"
    supervisor: str = "Slurm job 41"


QUEUED = QueuedHandle()
HANDED = Started(QUEUED, None)


def _exit(reason="exited", code=0, sig=None, job_id=JOB, attempt=N):
    return ExitRecord(code, sig, None if sig is None else "SIGKILL", ExitReason(reason), 2.0, 12, None,
                      job_id, attempt)


OK, FAIL = _exit(), _exit(code=3)
RUNNING_REPORT = a.Report(JobStatus(JOB, N, "RUNNING", pid=12, at_ms=1500))
# Inputs that bring a new attempt to each phase.
REACH = {
    P.NEW: [],
    P.STARTING: [a.Start("req")],
    P.CANCEL_PENDING: [a.Start("req"), a.CancelAsked()],
    P.HANDED_OVER: [a.Start("req"), a.Started(HANDED)],
    P.RUNNING: [a.Start("req"), a.Started(STARTED)],
    P.ADOPTED: [a.Adopt(RUNNING, ADOPTED_HANDLE, alive=True)],
    P.WATCH_LOST: [a.Start("req"), a.Started(STARTED), a.WatchLost()],
    P.UNSUPERVISED: [a.Start("req"), a.Started(STARTED), a.ExitSeen(None), a.SupervisorEnded()],
    P.ENDING: [a.Start("req"), a.Started(STARTED), a.ExitSeen(FAIL)],
    P.ENDED: [a.Start("req"), a.StartFailed("nope")],
}


def _at(phase: P) -> a.Attempt:
    machine = a.Attempt(JOB, N)
    for event in REACH[phase]:
        machine.feed(event)
    assert machine.phase is phase
    return machine


def _failed(**fields) -> a.Report:
    return a.Report(JobStatus(JOB, N, "FAILED", **fields))


THROUGH_SHIM = a.Stop(ADOPTED_HANDLE, through_starter=False)
CANCEL = a.Stop(HANDLE, through_starter=True)
DIED = "its shim (pid 10) died while the job ran"
WAITING = a.Report(JobStatus(JOB, N, "WAITING", message="Slurm: Resources"))

TABLE = [
    # phase, input, next phase, effects
    (P.NEW, a.Start("req"), P.STARTING, [a.Launch("req")]),
    (P.STARTING, a.Started(STARTED), P.RUNNING, [RUNNING_REPORT, a.FollowLogs(False), a.Watch(HANDLE)]),
    (P.STARTING, a.Started(HANDED), P.HANDED_OVER, [a.Watch(QUEUED)]),
    (P.STARTING, a.StartFailed("argv[0] 'x' not found"), P.ENDED,
     [_failed(failure_reason="SPAWN_FAILED", message="argv[0] 'x' not found")]),
    (P.STARTING, a.CancelAsked(), P.CANCEL_PENDING, []),
    (P.CANCEL_PENDING, a.CancelAsked(), P.CANCEL_PENDING, []),
    (P.CANCEL_PENDING, a.Started(STARTED), P.RUNNING,
     [RUNNING_REPORT, a.FollowLogs(False), CANCEL, a.Watch(HANDLE)]),
    (P.CANCEL_PENDING, a.Started(HANDED), P.HANDED_OVER, [a.Stop(QUEUED, through_starter=True), a.Watch(QUEUED)]),
    (P.CANCEL_PENDING, a.StartFailed("no"), P.ENDED, [_failed(failure_reason="SPAWN_FAILED", message="no")]),
    # A queueing backend: its reasons are reported once each, then the job runs, or vanishes.
    (P.HANDED_OVER, a.Waiting("Slurm: Resources"), P.HANDED_OVER, [WAITING, a.Watch(QUEUED)]),
    (P.HANDED_OVER, a.NowRunning(RUNNING), P.RUNNING, [RUNNING_REPORT, a.FollowLogs(False), a.Watch(QUEUED)]),
    (P.HANDED_OVER, a.CancelAsked(), P.HANDED_OVER, [a.Stop(QUEUED, through_starter=True)]),
    (P.HANDED_OVER, a.ExitSeen(None), P.ENDING, [a.ReadEnd(None)]),
    (P.HANDED_OVER, a.ExitSeen(_exit("cancelled", code=None, sig=15)), P.ENDING,
     [a.ReadEnd(_exit("cancelled", code=None, sig=15))]),
    (P.HANDED_OVER, a.WatchLost(), P.HANDED_OVER, [a.Watch(QUEUED)]),
    (P.HANDED_OVER, a.Vanished("gone from Slurm"), P.ENDED, [_failed(failure_reason="LOST", message="gone from Slurm")]),
    (P.RUNNING, a.Vanished("gone from Slurm"), P.ENDED,
     [a.UnfollowLogs(), _failed(failure_reason="LOST", message="gone from Slurm")]),
    (P.RUNNING, a.Preempted("Slurm requeued it", FAIL), P.ENDED,
     [a.UnfollowLogs(), _failed(failure_reason="PREEMPTED", exit_code=3, message="Slurm requeued it", at_ms=2000)]),
    (P.RUNNING, a.CancelAsked(), P.RUNNING, [CANCEL]),
    (P.RUNNING, a.ExitSeen(OK), P.ENDING, [a.UnfollowLogs(), a.ReadEnd(OK)]),
    (P.RUNNING, a.ExitSeen(None), P.WATCH_LOST, [a.WatchSupervisor(HANDLE)]),
    # An exit record of another attempt is not this attempt's exit.
    (P.RUNNING, a.ExitSeen(_exit(attempt=1)), P.WATCH_LOST, [a.WatchSupervisor(HANDLE)]),
    (P.RUNNING, a.WatchLost(), P.WATCH_LOST, [a.WatchSupervisor(HANDLE)]),
    (P.WATCH_LOST, a.CancelAsked(), P.WATCH_LOST, [a.Stop(HANDLE, through_starter=False)]),
    (P.WATCH_LOST, a.SupervisorEnded(), P.UNSUPERVISED, [a.FollowRemains(HANDLE, True)]),
    (P.NEW, a.Adopt(RUNNING, ADOPTED_HANDLE, alive=True), P.ADOPTED,
     [RUNNING_REPORT, a.FollowLogs(True), a.WatchSupervisor(ADOPTED_HANDLE)]),
    (P.NEW, a.Adopt(RUNNING, ADOPTED_HANDLE, alive=True, cancel_requested=True), P.ADOPTED,
     [RUNNING_REPORT, a.FollowLogs(True), THROUGH_SHIM, a.WatchSupervisor(ADOPTED_HANDLE)]),
    # A backend that can follow any job it runs (Slurm) watches an adopted one directly.
    (P.NEW, a.Adopt(RUNNING, QUEUED, alive=True, watchable=True), P.RUNNING,
     [RUNNING_REPORT, a.FollowLogs(True), a.Watch(QUEUED)]),
    (P.NEW, a.Adopt(None, QUEUED, waiting="Slurm: Resources", cancel_requested=True), P.HANDED_OVER,
     [WAITING, a.Stop(QUEUED, through_starter=True), a.Watch(QUEUED)]),
    (P.NEW, a.Adopt(RUNNING, ADOPTED_HANDLE, ended=True), P.ENDING, [a.ReadEnd(None)]),
    (P.NEW, a.Adopt(RUNNING, ADOPTED_HANDLE, alive=False), P.ENDING, [a.ReadEnd(None)]),
    (P.NEW, a.Adopt(None), P.ENDED, [a.Report(JobStatus(JOB, N, "REQUEUE", message="never started"))]),
    (P.NEW, a.Adopt(None, problem="runtime.json: not JSON"), P.ENDED,
     [_failed(failure_reason="LOST", message="runtime.json: not JSON")]),
    (P.ADOPTED, a.CancelAsked(), P.ADOPTED, [THROUGH_SHIM]),
    (P.ADOPTED, a.SupervisorEnded(), P.UNSUPERVISED, [a.FollowRemains(ADOPTED_HANDLE, False)]),
    (P.UNSUPERVISED, a.CancelAsked(), P.UNSUPERVISED, []),  # the follower stops it
    (P.UNSUPERVISED, a.RemainsDone(followed=False), P.ENDING, [a.UnfollowLogs(), a.ReadEnd(None)]),
    (P.UNSUPERVISED, a.RemainsDone(followed=True, now_ms=9000), P.ENDED,
     [a.UnfollowLogs(), _failed(failure_reason="SHIM_DIED", at_ms=9000,
                                message=f"{DIED}; the job ran on to its end, and its own exit code is unknown")]),
    (P.UNSUPERVISED, a.RemainsDone(followed=True, stopped=ExitReason.CANCELLED, now_ms=9000), P.ENDED,
     [a.UnfollowLogs(), a.Report(JobStatus(JOB, N, "CANCELLED", at_ms=9000))]),
    (P.UNSUPERVISED, a.RemainsDone(followed=True, stopped=ExitReason.TIMEOUT, record=FAIL), P.ENDED,
     [a.UnfollowLogs(), _failed(exit_code=3, failure_reason="TIMEOUT", message=f"timed out; {DIED}", at_ms=2000)]),
    (P.UNSUPERVISED, a.RemainsDone(followed=True, record=FAIL), P.ENDING, [a.UnfollowLogs(), a.ReadEnd(FAIL)]),
    (P.ENDING, a.CancelAsked(), P.ENDING, []),
    (P.ENDING, a.EndRead(FAIL, stderr_tail="boom\n"), P.ENDED,
     [_failed(exit_code=3, failure_reason="EXIT_CODE", message="exit code 3", at_ms=2000, log_line="boom")]),
    (P.ENDED, a.CancelAsked(), P.ENDED, []),
]


@pytest.mark.parametrize("phase, event, after, effects", TABLE,
                         ids=[f"{p.value}-{type(e).__name__}" for p, e, _, _ in TABLE])
def test_transition(phase, event, after, effects):
    machine = _at(phase)
    assert machine.feed(event) == effects
    assert machine.phase is after


def test_every_phase_and_input_of_the_table_is_covered():
    covered = {(phase, type(event)) for phase, event, _, _ in TABLE}
    assert covered == set(a.TRANSITIONS) | a.COMPUTED


@pytest.mark.parametrize("phase, event", [
    (P.NEW, a.Started(STARTED)),
    (P.STARTING, a.ExitSeen(OK)),
    (P.RUNNING, a.Started(STARTED)),
    (P.RUNNING, a.Waiting("Slurm: Priority")),  # a running job waits for nothing
    (P.ENDED, a.EndRead(OK)),
    (P.ADOPTED, a.ExitSeen(OK)),  # nothing asked the backend about a job it follows only through its supervisor
])
def test_an_input_out_of_place_is_a_bug(phase, event):
    with pytest.raises(a.UnexpectedInput):
        _at(phase).feed(event)


def test_cancels_are_counted_for_the_follower_of_the_remains():
    machine = _at(P.UNSUPERVISED)
    machine.feed(a.CancelAsked())
    machine.feed(a.CancelAsked())
    assert machine.cancels == 2  # a second cancel kills at once
    pending = _at(P.CANCEL_PENDING)
    pending.feed(a.Started(STARTED))
    assert pending.cancels == 1


@pytest.mark.parametrize("record, fields", [
    (_exit(), {"status": "SUCCEEDED", "exit_code": 0}),
    (_exit("cancelled", code=None, sig=15), {"status": "CANCELLED", "signal": "SIGKILL"}),
    (_exit("signaled", code=None, sig=9), {"status": "FAILED", "failure_reason": "SIGNAL(SIGKILL)"}),
    (_exit("timeout", code=None, sig=9), {"status": "FAILED", "failure_reason": "TIMEOUT"}),
    (None, {"status": "FAILED", "failure_reason": "LOST"}),
])
def test_end_status(record, fields):
    status = a.end_status(JOB, N, record)
    assert {k: getattr(status, k) for k in fields} == fields


def test_end_status_of_an_oom_kill_and_a_note():
    status = a.end_status(JOB, N, _exit("signaled", code=None, sig=9), stderr_tail="", oom_killed=True, note="x")
    assert (status.failure_reason, status.message) == ("OOM", "killed by the kernel's OOM killer; x")


def test_a_reason_is_reported_once_until_it_changes():
    machine = _at(P.HANDED_OVER)
    assert machine.feed(a.Waiting("Slurm: Resources")) == [WAITING, a.Watch(QUEUED)]
    assert machine.feed(a.Waiting("Slurm: Resources")) == [a.Watch(QUEUED)]
    changed = machine.feed(a.Waiting("Slurm: Priority"))
    assert changed == [a.Report(JobStatus(JOB, N, "WAITING", message="Slurm: Priority")), a.Watch(QUEUED)]


def test_only_a_failure_needs_its_files_read():
    assert not a.needs_reading(OK)
    assert a.needs_reading(FAIL) and a.needs_reading(None)
