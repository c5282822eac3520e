"""The runner's attempt machine: one attempt of a job on this node, from its start (or its
adoption after a restart) to the report of its end, whatever backend runs it. Sans-io:
``Attempt.feed(input)`` returns the effects for the runner (``gpuplaned.actors.runner``) to
carry out through its backend (``gpuplaned.backends``), and the runner feeds back what they
found. No trio, no files, no clock. The backend's handle of an attempt (a launcher request and
shim for the local backend, a Slurm job id for Slurm) is opaque here.

Theory of operation::

    NEW -Start-> STARTING -Started(running)-> RUNNING -ExitSeen(record)-> ENDING -EndRead-> ENDED
                    |  ^        |                |  '--WatchLost / ExitSeen(None)--> WATCH_LOST
                    |  |        |                '--Cancel: Stop(through_starter)       |
                    |  '--Cancel--> CANCEL_PENDING -Started-> ... (and the cancel goes)  |
                    |           '-Started(not running)-> HANDED_OVER -NowRunning-> RUNNING
                    |                   (Waiting: report the backend's reason; Vanished: LOST)
                    '--StartFailed (also from CANCEL_PENDING)--> ENDED                  |
    NEW -Adopt(still running)-> ADOPTED (or RUNNING when the backend watches any job) |
    NEW -Adopt(waiting)-> HANDED_OVER;  -Adopt(ended)-> ENDING;  -Adopt(never started)-> ENDED
    ADOPTED, WATCH_LOST -SupervisorEnded-> UNSUPERVISED -RemainsDone-> ENDING or ENDED <-'

- STARTING: the start is with the backend. A cancel now waits (CANCEL_PENDING) until the
  backend has it, then goes like any other.
- HANDED_OVER: a backend that queues (Slurm) has the attempt and has not started it; each
  change of why it waits is reported (WAITING). Not live: it holds nothing on this node yet.
- RUNNING: started, and the backend will tell of its end (``Watch``), with the record.
- ADOPTED: found still running after a restart, by a backend that can follow it only through
  its supervisor (the local shim); WATCH_LOST: started here, but the backend can no longer
  tell of its end (the local launcher died, or the shim ended without a record). Both wait for
  the supervisor to go (``WatchSupervisor``) and are cancelled through it.
- UNSUPERVISED: the supervisor is gone; what is left of the job is followed until it ends
  (``FollowRemains``, which also stops it on a cancel or at its timeout).
- ENDING: the end is known to have come; its record, stderr tail and OOM count are being
  read (``ReadEnd``), and make the report (``end_status``).

Every report is a ``JobStatus``; what an exit record means is ``failures.judge_exit``'s.
"""

from __future__ import annotations

import enum
from typing import Any, Protocol, Union

import attrs

from gpuplaned.domain.failures import ExitFacts, ExitReason, FailureReason, failure_line, judge_exit
from gpuplaned.protocol.job_states import NodeReport
from gpuplaned.protocol.agent import JobStatus


class Phase(enum.Enum):
    NEW = "new"
    STARTING = "starting"
    CANCEL_PENDING = "cancel pending"
    HANDED_OVER = "handed over"
    RUNNING = "running"
    ADOPTED = "adopted"
    WATCH_LOST = "watch lost"
    UNSUPERVISED = "unsupervised"
    ENDING = "ending"
    ENDED = "ended"


P = Phase
# Phases in which the attempt is live on this node: a cancel reaches it, its GPUs are held.
LIVE = frozenset({P.RUNNING, P.ADOPTED, P.WATCH_LOST, P.UNSUPERVISED})


class ExitRecordFacts(ExitFacts, Protocol):
    """An exit record as the runner has it (``gpuplaned.launching.job_files.ExitRecord``)."""

    @property
    def ended_at(self) -> float: ...
    @property
    def succeeded(self) -> bool: ...

    def belongs_to(self, job_id: str, attempt: int) -> bool: ...


class HandleFacts(Protocol):
    """A backend's handle of one attempt (``gpuplaned.backends``): opaque but for the words
    that name what supervises the job, for a message ("its shim (pid 10)")."""

    @property
    def supervisor(self) -> str: ...


class RunningFacts(Protocol):
    """What the machine reads of a running job (``gpuplaned.backends.Running``)."""

    @property
    def pid(self) -> int | None: ...
    @property
    def started_at(self) -> float | None: ...


class StartedFacts(Protocol):
    """What a backend's start gave (``gpuplaned.backends.Started``): its handle, and how the
    job runs (None: the backend queues it first, as Slurm does)."""

    @property
    def handle(self) -> HandleFacts: ...
    @property
    def running(self) -> RunningFacts | None: ...


# --- inputs: what the runner tells the machine ------------------------------------------


@attrs.frozen
class Start:
    """Start the attempt with ``request`` (the runner's ``SpawnRequest``; opaque here)."""

    request: Any


@attrs.frozen
class Started:
    started: StartedFacts


@attrs.frozen
class StartFailed:
    message: str


@attrs.frozen
class Adopt:
    """After a restart, what the backend found of the attempt: its ``handle`` (None: nothing
    of it was found), ``running`` (None: the job never started), ``problem`` (a corrupt
    record), ``ended`` (its end is recorded), ``alive`` (it still runs), ``waiting`` (the
    backend still queues it, and why), ``watchable`` (the backend can tell of its end
    whoever started it: no need to follow a supervisor), ``cancel_requested`` (a cancel the
    node missed)."""

    running: RunningFacts | None
    handle: HandleFacts | None = None
    problem: str | None = None
    ended: bool = False
    alive: bool = False
    waiting: str | None = None
    watchable: bool = False
    cancel_requested: bool = False


@attrs.frozen
class CancelAsked:
    pass


@attrs.frozen
class Waiting:
    """The backend still queues the attempt, now for ``reason`` ("Slurm: Resources")."""

    reason: str


@attrs.frozen
class NowRunning:
    """The backend started the attempt it queued."""

    running: RunningFacts


@attrs.frozen
class ExitSeen:
    """The backend saw the attempt end: its record, or None when its supervisor ended
    without one."""

    record: ExitRecordFacts | None


@attrs.frozen
class Vanished:
    """No source the backend has accounts for the attempt any more (past its grace)."""

    message: str


@attrs.frozen
class Preempted:
    """The backend's scheduler preempted the attempt and would run it again on its own: it
    ends here (PREEMPTED), and its job's ``on_preempted`` policy decides what comes next.
    ``record``: what its supervisor wrote of the end, if anything."""

    message: str
    record: ExitRecordFacts | None = None


@attrs.frozen
class WatchLost:
    """The backend's watch went away before telling of the attempt's end."""


@attrs.frozen
class SupervisorEnded:
    """The attempt's supervisor is gone (or its pid names another process now)."""


@attrs.frozen
class RemainsDone:
    """``FollowRemains`` is over: whether it found processes of the job to follow, whether it
    stopped them (CANCELLED or TIMEOUT), the backend's record of the main process if any,
    and the time (epoch ms) to report when no record says."""

    followed: bool
    stopped: ExitReason | None = None
    record: ExitRecordFacts | None = None
    now_ms: int = 0


@attrs.frozen
class EndRead:
    """``ReadEnd`` is done: the record (None: none was written), or the problem with it, the
    tail of stderr (for a failure) and whether the kernel's OOM killer killed it."""

    record: ExitRecordFacts | None
    problem: str | None = None
    stderr_tail: str = ""
    oom_killed: bool = False


Input = Union[Start, Started, StartFailed, Adopt, CancelAsked, Waiting, NowRunning, ExitSeen, Vanished, Preempted,
              WatchLost, SupervisorEnded, RemainsDone, EndRead]


# --- effects: what the machine asks of the runner ---------------------------------------


@attrs.frozen
class Launch:
    """Have the backend start ``request``; feed back ``Started`` or ``StartFailed``."""

    request: Any


@attrs.frozen
class Report:
    """Send ``status`` to the server through the node link."""

    status: JobStatus


@attrs.frozen
class FollowLogs:
    """Have the logs actor tail the attempt's logs (``resume``: from where the server's tail ends)."""

    resume: bool


@attrs.frozen
class UnfollowLogs:
    """The attempt's output is complete: the logs actor reads the rest and stops."""


@attrs.frozen
class Watch:
    """Wait for the backend's next word on the attempt: ``ExitSeen`` or ``WatchLost`` (and,
    while it queues the attempt, ``Waiting``, ``NowRunning`` or ``Vanished``)."""

    handle: HandleFacts


@attrs.frozen
class WatchSupervisor:
    """Wait until the attempt's supervisor is gone; feed back ``SupervisorEnded``."""

    handle: HandleFacts


@attrs.frozen
class Stop:
    """Cancel the attempt: through what started it (``through_starter``: it tells which job
    it means), else through its supervisor, unless its end is recorded already (the
    supervisor may be another job's by then)."""

    handle: HandleFacts
    through_starter: bool


@attrs.frozen
class FollowRemains:
    """The supervisor died first: follow what is left of the job (stopping it after
    ``cancels``, which the runner reads as they come), then ask what started it
    (``started_here``: this runner's backend did) how its main process ended; feed back
    ``RemainsDone``."""

    handle: HandleFacts
    started_here: bool


@attrs.frozen
class ReadEnd:
    """Read how the attempt ended (``record``: what the backend said; None: read its end
    record), with its stderr tail and the OOM count when it failed (``needs_reading``); feed
    back ``EndRead``."""

    record: ExitRecordFacts | None


Effect = Union[Launch, Report, FollowLogs, UnfollowLogs, Watch, WatchSupervisor, Stop, FollowRemains, ReadEnd]


class UnexpectedInput(RuntimeError):
    """The runner fed an input that makes no sense in the attempt's phase (a bug)."""


# (phase, input type) -> the phase after it, for every input whose next phase does not
# depend on its content; ``Attempt.feed`` computes the others.
TRANSITIONS: dict[tuple[Phase, type], Phase] = {
    (P.NEW, Start): P.STARTING,
    (P.STARTING, StartFailed): P.ENDED,
    (P.STARTING, CancelAsked): P.CANCEL_PENDING,
    (P.CANCEL_PENDING, StartFailed): P.ENDED,
    (P.CANCEL_PENDING, CancelAsked): P.CANCEL_PENDING,
    (P.HANDED_OVER, CancelAsked): P.HANDED_OVER,
    (P.HANDED_OVER, Waiting): P.HANDED_OVER,
    (P.HANDED_OVER, NowRunning): P.RUNNING,
    (P.HANDED_OVER, Vanished): P.ENDED,
    (P.HANDED_OVER, WatchLost): P.HANDED_OVER,
    (P.RUNNING, CancelAsked): P.RUNNING,
    (P.RUNNING, WatchLost): P.WATCH_LOST,
    (P.RUNNING, Vanished): P.ENDED,
    (P.RUNNING, Preempted): P.ENDED,
    (P.ADOPTED, CancelAsked): P.ADOPTED,
    (P.ADOPTED, SupervisorEnded): P.UNSUPERVISED,
    (P.WATCH_LOST, CancelAsked): P.WATCH_LOST,
    (P.WATCH_LOST, SupervisorEnded): P.UNSUPERVISED,
    (P.UNSUPERVISED, CancelAsked): P.UNSUPERVISED,
    (P.ENDING, CancelAsked): P.ENDING,  # too late: the end is being read
    (P.ENDING, EndRead): P.ENDED,
    (P.ENDED, CancelAsked): P.ENDED,
}
COMPUTED = frozenset({(P.STARTING, Started), (P.CANCEL_PENDING, Started), (P.NEW, Adopt),
                      (P.HANDED_OVER, ExitSeen), (P.RUNNING, ExitSeen), (P.UNSUPERVISED, RemainsDone)})


@attrs.define
class Attempt:
    """One attempt of a job on this node (see the module docstring)."""

    job_id: str
    attempt: int
    phase: Phase = P.NEW
    cancels: int = 0  # cancels asked of it; a follower of its remains stops it after the first, kills after two
    handle: HandleFacts | None = None  # the backend's, once it has the attempt
    started_here: bool = False  # this runner's backend started it (not adopted after a restart)
    end_note: str | None = None  # added to the message of a failure being read (ENDING)
    waiting: str | None = None  # the reason last reported while the backend queues it

    @property
    def live(self) -> bool:
        return self.phase in LIVE

    def feed(self, event: Input) -> list[Effect]:
        """Take one input; returns the effects to carry out, in order.

        Raises:
            UnexpectedInput: ``event`` makes no sense now (a bug in the runner).
        """
        key = (self.phase, type(event))
        if key not in TRANSITIONS and key not in COMPUTED:
            raise UnexpectedInput(f"job {self.job_id} attempt {self.attempt}: {type(event).__name__} "
                                  f"while {self.phase.value}")
        effects = getattr(self, f"_on_{type(event).__name__}")(event)
        if key in TRANSITIONS:
            self.phase = TRANSITIONS[key]
        return effects

    # -- inputs ---------------------------------------------------------------------------

    def _on_Start(self, event: Start) -> list[Effect]:
        return [Launch(event.request)]

    def _on_Started(self, event: Started) -> list[Effect]:
        started = event.started
        self.handle = started.handle
        self.started_here = True
        cancel: list[Effect] = []
        if self.phase is P.CANCEL_PENDING:  # cancelled while it was starting
            self.cancels = 1
            cancel = [Stop(started.handle, through_starter=True)]
        if started.running is None:
            self.phase = P.HANDED_OVER
            return [*cancel, Watch(started.handle)]
        self.phase = P.RUNNING
        return [*self._now_running(started.running, resume=False), *cancel, Watch(started.handle)]

    def _on_StartFailed(self, event: StartFailed) -> list[Effect]:
        return [Report(self._status(NodeReport.FAILED, failure_reason=FailureReason.SPAWN_FAILED,
                                    message=event.message))]

    def _on_Adopt(self, event: Adopt) -> list[Effect]:
        if event.problem is not None:
            self.phase = P.ENDED
            return [Report(self._status(NodeReport.FAILED, failure_reason=FailureReason.LOST,
                                        message=event.problem))]
        self.handle = event.handle
        if event.waiting is not None and event.handle is not None:
            self.phase = P.HANDED_OVER
            effects = self._waiting(event.waiting)
            if event.cancel_requested:
                self.cancels = 1
                effects.append(Stop(event.handle, through_starter=True))
            return [*effects, Watch(event.handle)]
        if event.running is None or event.handle is None:
            self.phase = P.ENDED
            return [Report(self._status(NodeReport.REQUEUE, message="never started"))]
        # A supervisor whose job has ended (its record is written) may have gone on to
        # another job: only one with its job's end still unrecorded is that job's.
        if event.ended or not event.alive:
            self.phase = P.ENDING
            return [ReadEnd(None)]
        self.phase = P.RUNNING if event.watchable else P.ADOPTED
        effects = self._now_running(event.running, resume=True)
        if event.cancel_requested:
            self.cancels = 1
            effects.append(self._cancel_effect())
        return [*effects, Watch(event.handle) if event.watchable else WatchSupervisor(event.handle)]

    def _on_CancelAsked(self, event: CancelAsked) -> list[Effect]:
        if self.phase not in LIVE and self.phase is not P.HANDED_OVER:
            return []  # starting (it goes once the backend has it), or ended already
        self.cancels += 1
        return [] if self.phase is P.UNSUPERVISED else [self._cancel_effect()]

    def _on_Waiting(self, event: Waiting) -> list[Effect]:
        return [*self._waiting(event.reason), Watch(self._handle())]

    def _on_NowRunning(self, event: NowRunning) -> list[Effect]:
        return [*self._now_running(event.running, resume=False), Watch(self._handle())]

    def _on_Vanished(self, event: Vanished) -> list[Effect]:
        logs: list[Effect] = [UnfollowLogs()] if self.phase is P.RUNNING else []
        return [*logs, Report(self._status(NodeReport.FAILED, failure_reason=FailureReason.LOST,
                                           message=event.message))]

    def _on_Preempted(self, event: Preempted) -> list[Effect]:
        record = event.record
        exit_code = record.exit_code if record is not None else None
        at_ms = _ms(record.ended_at) if record is not None and record.ended_at else None
        return [UnfollowLogs(), Report(self._status(NodeReport.FAILED, failure_reason=FailureReason.PREEMPTED,
                                                    exit_code=exit_code, message=event.message, at_ms=at_ms))]

    def _on_ExitSeen(self, event: ExitSeen) -> list[Effect]:
        record = event.record
        if record is not None and not record.belongs_to(self.job_id, self.attempt):
            record = None  # another attempt's exit is not this one's: watch the supervisor instead
        if record is None:
            if self.phase is P.HANDED_OVER:  # it never ran: nothing to follow; its end record tells
                self.phase = P.ENDING
                return [ReadEnd(None)]
            self.phase = P.WATCH_LOST
            return [WatchSupervisor(self._handle())]
        logs: list[Effect] = [UnfollowLogs()] if self.phase is P.RUNNING else []
        self.phase = P.ENDING
        return [*logs, ReadEnd(record)]

    def _on_WatchLost(self, event: WatchLost) -> list[Effect]:
        if self.phase is P.HANDED_OVER:
            return [Watch(self._handle())]  # a queueing backend's watch is its own to restore
        return [WatchSupervisor(self._handle())]

    def _on_SupervisorEnded(self, event: SupervisorEnded) -> list[Effect]:
        return [FollowRemains(self._handle(), self.started_here)]

    def _on_RemainsDone(self, event: RemainsDone) -> list[Effect]:
        died = f"{self._handle().supervisor} died while the job ran"
        record = event.record
        if not event.followed and record is None:
            self.phase = P.ENDING  # nothing of it was left: its end record tells, or it is LOST
            return [UnfollowLogs(), ReadEnd(None)]
        at_ms = _ms(record.ended_at) if record is not None else event.now_ms
        exit_code = record.exit_code if record is not None else None
        status = None
        if event.stopped == ExitReason.CANCELLED:
            status = self._status(NodeReport.CANCELLED, exit_code=exit_code, at_ms=at_ms)
        elif event.stopped == ExitReason.TIMEOUT:
            status = self._status(NodeReport.FAILED, exit_code=exit_code, failure_reason=FailureReason.TIMEOUT,
                                  message=f"timed out; {died}", at_ms=at_ms)
        elif record is None:
            status = self._status(NodeReport.FAILED, failure_reason=FailureReason.SHIM_DIED, at_ms=at_ms,
                                  message=f"{died}; the job ran on to its end, and its own exit code is unknown")
        if status is None:
            self.phase = P.ENDING
            self.end_note = died
            return [UnfollowLogs(), ReadEnd(record)]
        self.phase = P.ENDED
        return [UnfollowLogs(), Report(status)]

    def _on_EndRead(self, event: EndRead) -> list[Effect]:
        return [Report(end_status(self.job_id, self.attempt, event.record, event.problem, event.stderr_tail,
                                  event.oom_killed, self.end_note))]

    # -- helpers --------------------------------------------------------------------------

    def _handle(self) -> HandleFacts:
        assert self.handle is not None, f"{self.phase}: no handle"
        return self.handle

    def _now_running(self, running: RunningFacts, *, resume: bool) -> list[Effect]:
        self.waiting = None
        return [Report(self._status(NodeReport.RUNNING, pid=running.pid, at_ms=_ms(running.started_at))),
                FollowLogs(resume=resume)]

    def _waiting(self, reason: str) -> list[Effect]:
        if reason == self.waiting:
            return []
        self.waiting = reason
        return [Report(self._status(NodeReport.WAITING, message=reason))]

    def _cancel_effect(self) -> Effect:
        # While what started it still follows it, that tells which job it means; after, the supervisor.
        through_starter = self.phase in (P.RUNNING, P.CANCEL_PENDING, P.HANDED_OVER)
        return Stop(self._handle(), through_starter=through_starter)

    def _status(self, report: NodeReport, **fields: Any) -> JobStatus:
        return JobStatus(self.job_id, self.attempt, report, **fields)


def end_status(job_id: str, attempt: int, record: ExitRecordFacts | None, problem: str | None = None,
               stderr_tail: str = "", oom_killed: bool = False, note: str | None = None) -> JobStatus:
    """The report of an ended attempt, from its exit record (``problem``: why it could not
    be read) and, for a failure, its stderr tail and whether the OOM killer killed it.
    ``note`` is added to a failure's message."""
    if problem is not None:
        return JobStatus(job_id, attempt, NodeReport.FAILED, failure_reason=FailureReason.LOST, message=problem)
    if record is None:
        # The shim itself died without writing exit.json (killed -9): the job's fate is unknown.
        return JobStatus(job_id, attempt, NodeReport.FAILED, failure_reason=FailureReason.LOST,
                         message="the job's shim ended without recording an exit status")
    verdict = judge_exit(record, stderr_tail, oom_killed)
    at_ms = _ms(record.ended_at) if record.ended_at else None
    if verdict.report is NodeReport.SUCCEEDED:
        return JobStatus(job_id, attempt, verdict.report, exit_code=record.exit_code, at_ms=at_ms)
    if verdict.report is NodeReport.CANCELLED:
        return JobStatus(job_id, attempt, verdict.report, exit_code=record.exit_code, signal=record.signal_name,
                         at_ms=at_ms)
    message = verdict.detail if note is None else f"{verdict.detail}; {note}"
    return JobStatus(job_id, attempt, verdict.report, exit_code=record.exit_code, signal=record.signal_name,
                     failure_reason=verdict.failure, message=message, at_ms=at_ms,
                     log_line=failure_line(stderr_tail, verdict.failure))


def needs_reading(record: ExitRecordFacts | None) -> bool:
    """Whether ``ReadEnd(record)`` has files to read: not for a record that says it succeeded."""
    return record is None or not record.succeeded


def _ms(seconds: float | None) -> int | None:
    return int(seconds * 1000) if seconds is not None else None
