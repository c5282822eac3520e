"""The runner's attempt machine, table-driven: phase + input -> phase + effects."""

from __future__ import annotations

import pytest

from gpuplaned.domain import attempts as a
from gpuplaned.domain.attempts import P
from gpuplaned.domain.failures import ExitReason
from gpuplaned.launching.client import Spawned
from gpuplaned.launching.job_files import ExitRecord, Runtime
from gpuplaned.protocol.agent import JobStatus

JOB, N = "job_1", 2
SPAWNED = Spawned(f"{JOB}/{N}", shim_pid=10, shim_start_time=11, pid=12, pgid=12, start_time=13, started_at=1.5)
RUNTIME = Runtime(f"{JOB}/{N}", 10, 11, 12, 12, 13, ("x",), "/", (), 1.5, None, 1.0, JOB, N)


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
    P.RUNNING: [a.Start("req"), a.Spawned(SPAWNED)],
    P.ADOPTED: [a.Adopt(RUNTIME, alive=True)],
    P.LAUNCHER_GONE: [a.Start("req"), a.Spawned(SPAWNED), a.LauncherLost()],
    P.ORPHANED: [a.Start("req"), a.Spawned(SPAWNED), a.ExitSeen(None), a.ShimEnded()],
    P.ENDING: [a.Start("req"), a.Spawned(SPAWNED), a.ExitSeen(FAIL)],
    P.ENDED: [a.Start("req"), a.SpawnFailed("nope")],
}


def _at(phase: P) -> a.Attempt:
    machine = a.Attempt(JOB, N)
    for event in REACH[phase]:
        machine.feed(event)
    assert machine.phase is phase
    return machine


def _failed(**fields) -> a.Report:
    return a.Report(JobStatus(JOB, N, "FAILED", **fields))


SHIM = a.SignalShim(10, 11)
CANCEL = a.CancelThroughLauncher(f"{JOB}/{N}")
DIED = "its shim (pid 10) died while the job ran"

TABLE = [
    # phase, input, next phase, effects
    (P.NEW, a.Start("req"), P.STARTING, [a.Spawn("req")]),
    (P.STARTING, a.Spawned(SPAWNED), P.RUNNING, [RUNNING_REPORT, a.FollowLogs(False), a.WaitExit(f"{JOB}/{N}")]),
    (P.STARTING, a.SpawnFailed("argv[0] 'x' not found"), P.ENDED,
     [_failed(failure_reason="SPAWN_FAILED", message="argv[0] 'x' not found")]),
    (P.STARTING, a.CancelAsked(), P.CANCEL_PENDING, []),
    (P.CANCEL_PENDING, a.CancelAsked(), P.CANCEL_PENDING, []),
    (P.CANCEL_PENDING, a.Spawned(SPAWNED), P.RUNNING,
     [RUNNING_REPORT, a.FollowLogs(False), CANCEL, a.WaitExit(f"{JOB}/{N}")]),
    (P.CANCEL_PENDING, a.SpawnFailed("no"), P.ENDED, [_failed(failure_reason="SPAWN_FAILED", message="no")]),
    (P.RUNNING, a.CancelAsked(), P.RUNNING, [CANCEL]),
    (P.RUNNING, a.ExitSeen(OK), P.ENDING, [a.UnfollowLogs(), a.ReadEnd(OK)]),
    (P.RUNNING, a.ExitSeen(None), P.LAUNCHER_GONE, [a.WaitShim(10, 11)]),
    # An exit record of another attempt is not this attempt's exit.
    (P.RUNNING, a.ExitSeen(_exit(attempt=1)), P.LAUNCHER_GONE, [a.WaitShim(10, 11)]),
    (P.RUNNING, a.LauncherLost(), P.LAUNCHER_GONE, [a.WaitShim(10, 11)]),
    (P.LAUNCHER_GONE, a.CancelAsked(), P.LAUNCHER_GONE, [SHIM]),
    (P.LAUNCHER_GONE, a.ShimEnded(), P.ORPHANED, [a.FollowOrphan(f"{JOB}/{N}")]),
    (P.NEW, a.Adopt(RUNTIME, alive=True), P.ADOPTED, [RUNNING_REPORT, a.FollowLogs(True), a.WaitShim(10, 11)]),
    (P.NEW, a.Adopt(RUNTIME, alive=True, cancel_requested=True), P.ADOPTED,
     [RUNNING_REPORT, a.FollowLogs(True), SHIM, a.WaitShim(10, 11)]),
    (P.NEW, a.Adopt(RUNTIME, ended=True), P.ENDING, [a.ReadEnd(None)]),
    (P.NEW, a.Adopt(RUNTIME, alive=False), P.ENDING, [a.ReadEnd(None)]),
    (P.NEW, a.Adopt(None), P.ENDED, [a.Report(JobStatus(JOB, N, "REQUEUE", message="never started"))]),
    (P.NEW, a.Adopt(None, problem="runtime.json: not JSON"), P.ENDED,
     [_failed(failure_reason="LOST", message="runtime.json: not JSON")]),
    (P.ADOPTED, a.CancelAsked(), P.ADOPTED, [SHIM]),
    (P.ADOPTED, a.ShimEnded(), P.ORPHANED, [a.FollowOrphan(None)]),
    (P.ORPHANED, a.CancelAsked(), P.ORPHANED, []),  # the follower stops it
    (P.ORPHANED, a.OrphanDone(followed=False), P.ENDING, [a.UnfollowLogs(), a.ReadEnd(None)]),
    (P.ORPHANED, a.OrphanDone(followed=True, now_ms=9000), P.ENDED,
     [a.UnfollowLogs(), _failed(failure_reason="SHIM_DIED", at_ms=9000,
                                message=f"{DIED}; the job ran on to its end, and its own exit code is unknown")]),
    (P.ORPHANED, a.OrphanDone(followed=True, stopped=ExitReason.CANCELLED, now_ms=9000), P.ENDED,
     [a.UnfollowLogs(), a.Report(JobStatus(JOB, N, "CANCELLED", at_ms=9000))]),
    (P.ORPHANED, a.OrphanDone(followed=True, stopped=ExitReason.TIMEOUT, record=FAIL), P.ENDED,
     [a.UnfollowLogs(), _failed(exit_code=3, failure_reason="TIMEOUT", message=f"timed out; {DIED}", at_ms=2000)]),
    (P.ORPHANED, a.OrphanDone(followed=True, record=FAIL), P.ENDING, [a.UnfollowLogs(), a.ReadEnd(FAIL)]),
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
    (P.NEW, a.Spawned(SPAWNED)),
    (P.STARTING, a.ExitSeen(OK)),
    (P.RUNNING, a.Spawned(SPAWNED)),
    (P.ENDED, a.EndRead(OK)),
    (P.ADOPTED, a.ExitSeen(OK)),  # nothing asked the launcher about an adopted job
])
def test_an_input_out_of_place_is_a_bug(phase, event):
    with pytest.raises(a.UnexpectedInput):
        _at(phase).feed(event)


def test_cancels_are_counted_for_the_orphan_follower():
    machine = _at(P.ORPHANED)
    machine.feed(a.CancelAsked())
    machine.feed(a.CancelAsked())
    assert machine.cancels == 2  # a second cancel kills at once
    pending = _at(P.CANCEL_PENDING)
    pending.feed(a.Spawned(SPAWNED))
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


def test_only_a_failure_needs_its_files_read():
    assert not a.needs_reading(OK)
    assert a.needs_reading(FAIL) and a.needs_reading(None)
