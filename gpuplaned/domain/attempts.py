"""The runner's attempt machine: one attempt of a job on this node, from its spawn (or its
adoption after a restart) to the report of its end. Sans-io: ``Attempt.feed(input)``
returns the effects for the runner (``gpuplaned.actors.runner``) to carry out, and the
runner feeds back what they found. No trio, no files, no clock.

Theory of operation::

    NEW -Start-> STARTING -Spawned-> RUNNING -ExitSeen(record)-> ENDING -EndRead-> ENDED
                    |  ^                |  '--LauncherLost / ExitSeen(None)--> LAUNCHER_GONE
                    |  '--Cancel--.     '--Cancel: CancelThroughLauncher            |
                    |             v                                                 |
                    |       CANCEL_PENDING -Spawned-> RUNNING (and the cancel goes)   |
                    '--SpawnFailed (also from CANCEL_PENDING)--> ENDED               |
    NEW -Adopt(still running)-> ADOPTED --Cancel: SignalShim                          |
    NEW -Adopt(ended)-> ENDING;  -Adopt(never started / unreadable)-> ENDED           |
    ADOPTED, LAUNCHER_GONE -ShimEnded-> ORPHANED -OrphanDone-> ENDING or ENDED  <-----'

- STARTING: the spawn request is with the launcher. A cancel now waits (CANCEL_PENDING)
  until the job is up, then goes to the launcher like any other.
- RUNNING: this runner's launcher started it and will tell of its end, with the record.
- ADOPTED: found still running after a restart; LAUNCHER_GONE: started by this runner, but
  its launcher can no longer tell of its end (it died, or the shim ended without a record).
  Both are watched through the shim's pid (``WaitShim``) and cancelled through it.
- ORPHANED: the shim is gone; what is left of the job is followed until it ends
  (``FollowOrphan``, which also stops it on a cancel or at its timeout).
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
    RUNNING = "running"
    ADOPTED = "adopted"
    LAUNCHER_GONE = "launcher gone"
    ORPHANED = "orphaned"
    ENDING = "ending"
    ENDED = "ended"


P = Phase
# Phases in which the attempt is live on this node: a cancel reaches it, its GPUs are held.
LIVE = frozenset({P.RUNNING, P.ADOPTED, P.LAUNCHER_GONE, P.ORPHANED})


class ExitRecordFacts(ExitFacts, Protocol):
    """An exit record as the runner has it (``gpuplaned.launching.job_files.ExitRecord``)."""

    @property
    def ended_at(self) -> float: ...
    @property
    def succeeded(self) -> bool: ...

    def belongs_to(self, job_id: str, attempt: int) -> bool: ...


class ProcessFacts(Protocol):
    """Which processes an attempt is: its main process and group, and its shim."""

    @property
    def pid(self) -> int: ...
    @property
    def pgid(self) -> int: ...
    @property
    def shim_pid(self) -> int: ...
    @property
    def shim_start_time(self) -> int | None: ...


class RuntimeFacts(ProcessFacts, Protocol):
    """What the machine reads of ``runtime.json`` (``gpuplaned.launching.job_files.Runtime``)."""

    @property
    def started_at(self) -> float: ...


class SpawnedFacts(ProcessFacts, Protocol):
    """What the machine reads of a started job (``gpuplaned.launching.client.Spawned``)."""

    @property
    def id(self) -> str: ...
    @property
    def started_at(self) -> float | None: ...


# --- inputs: what the runner tells the machine ------------------------------------------


@attrs.frozen
class Start:
    """Spawn the attempt with ``request`` (the runner's ``SpawnRequest``; opaque here)."""

    request: Any


@attrs.frozen
class Spawned:
    spawned: SpawnedFacts


@attrs.frozen
class SpawnFailed:
    message: str


@attrs.frozen
class Adopt:
    """After a restart, what the attempt's dir says: ``runtime`` (None: the job never
    started), ``problem`` (a corrupt record), ``ended`` (``exit.json`` exists), ``alive``
    (its shim or its processes still run), ``cancel_requested`` (a cancel the node missed)."""

    runtime: RuntimeFacts | None
    problem: str | None = None
    ended: bool = False
    alive: bool = False
    cancel_requested: bool = False


@attrs.frozen
class CancelAsked:
    pass


@attrs.frozen
class ExitSeen:
    """The launcher's exit event: the record, or None when the shim ended without one."""

    record: ExitRecordFacts | None


@attrs.frozen
class LauncherLost:
    """The launcher went away before telling of the attempt's end."""


@attrs.frozen
class ShimEnded:
    """The shim's pid is gone (or names another process now)."""


@attrs.frozen
class OrphanDone:
    """``FollowOrphan`` is over: whether it found processes of the job to follow, whether it
    stopped them (CANCELLED or TIMEOUT), the launcher's record of the main process if any,
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


Input = Union[Start, Spawned, SpawnFailed, Adopt, CancelAsked, ExitSeen, LauncherLost, ShimEnded, OrphanDone,
              EndRead]


# --- effects: what the machine asks of the runner ---------------------------------------


@attrs.frozen
class Spawn:
    """Ask the launcher to spawn ``request``; feed back ``Spawned`` or ``SpawnFailed``."""

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
class WaitExit:
    """Wait for the launcher's exit event of ``spawn_id``; feed back ``ExitSeen`` or ``LauncherLost``."""

    spawn_id: str


@attrs.frozen
class WaitShim:
    """Wait until the shim's process is gone; feed back ``ShimEnded``."""

    pid: int
    start_time: int | None


@attrs.frozen
class CancelThroughLauncher:
    """Cancel through the launcher that started it (the shim's pid if that launcher is gone)."""

    spawn_id: str


@attrs.frozen
class SignalShim:
    """Cancel by SIGTERM to the shim's pid, unless ``exit.json`` is written (the shim may
    be another job's by then)."""

    pid: int
    start_time: int | None


@attrs.frozen
class FollowOrphan:
    """The shim died first: follow what is left of the job (stopping it after ``cancels``,
    which the runner reads as they come), then ask the launcher that started it
    (``spawn_id``; None: adopted) how its main process ended; feed back ``OrphanDone``."""

    spawn_id: str | None


@attrs.frozen
class ReadEnd:
    """Read how the attempt ended (``record``: what the launcher said; None: ``exit.json``),
    with its stderr tail and the OOM count when it failed (``needs_reading``); feed back
    ``EndRead``."""

    record: ExitRecordFacts | None


Effect = Union[Spawn, Report, FollowLogs, UnfollowLogs, WaitExit, WaitShim, CancelThroughLauncher, SignalShim,
               FollowOrphan, ReadEnd]


class UnexpectedInput(RuntimeError):
    """The runner fed an input that makes no sense in the attempt's phase (a bug)."""


# (phase, input type) -> the phase after it, for every input whose next phase does not
# depend on its content; ``Attempt.feed`` computes the others (Adopt, ExitSeen, OrphanDone).
TRANSITIONS: dict[tuple[Phase, type], Phase] = {
    (P.NEW, Start): P.STARTING,
    (P.STARTING, Spawned): P.RUNNING,
    (P.STARTING, SpawnFailed): P.ENDED,
    (P.STARTING, CancelAsked): P.CANCEL_PENDING,
    (P.CANCEL_PENDING, Spawned): P.RUNNING,
    (P.CANCEL_PENDING, SpawnFailed): P.ENDED,
    (P.CANCEL_PENDING, CancelAsked): P.CANCEL_PENDING,
    (P.RUNNING, CancelAsked): P.RUNNING,
    (P.RUNNING, LauncherLost): P.LAUNCHER_GONE,
    (P.ADOPTED, CancelAsked): P.ADOPTED,
    (P.ADOPTED, ShimEnded): P.ORPHANED,
    (P.LAUNCHER_GONE, CancelAsked): P.LAUNCHER_GONE,
    (P.LAUNCHER_GONE, ShimEnded): P.ORPHANED,
    (P.ORPHANED, CancelAsked): P.ORPHANED,
    (P.ENDING, CancelAsked): P.ENDING,  # too late: the end is being read
    (P.ENDING, EndRead): P.ENDED,
    (P.ENDED, CancelAsked): P.ENDED,
}
COMPUTED = frozenset({(P.NEW, Adopt), (P.RUNNING, ExitSeen), (P.ORPHANED, OrphanDone)})


@attrs.define
class Attempt:
    """One attempt of a job on this node (see the module docstring)."""

    job_id: str
    attempt: int
    phase: Phase = P.NEW
    cancels: int = 0  # cancels asked of it; an orphan's follower stops it after the first, kills after two
    spawn_id: str | None = None  # the launcher's request id, when this runner's launcher started it
    shim: tuple[int, int | None] | None = None  # its shim's (pid, start time)
    end_note: str | None = None  # added to the message of a failure being read (ENDING)

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
        return [Spawn(event.request)]

    def _on_Spawned(self, event: Spawned) -> list[Effect]:
        spawned = event.spawned
        self.spawn_id = spawned.id
        self.shim = (spawned.shim_pid, spawned.shim_start_time)
        effects: list[Effect] = [Report(self._status(NodeReport.RUNNING, pid=spawned.pid,
                                                     at_ms=_ms(spawned.started_at))),
                                 FollowLogs(resume=False)]
        if self.phase is P.CANCEL_PENDING:  # cancelled while it was starting
            self.cancels = 1
            effects.append(CancelThroughLauncher(spawned.id))
        return [*effects, WaitExit(spawned.id)]

    def _on_SpawnFailed(self, event: SpawnFailed) -> list[Effect]:
        return [Report(self._status(NodeReport.FAILED, failure_reason=FailureReason.SPAWN_FAILED,
                                    message=event.message))]

    def _on_Adopt(self, event: Adopt) -> list[Effect]:
        runtime = event.runtime
        if event.problem is not None:
            self.phase = P.ENDED
            return [Report(self._status(NodeReport.FAILED, failure_reason=FailureReason.LOST,
                                        message=event.problem))]
        if runtime is None:
            self.phase = P.ENDED
            return [Report(self._status(NodeReport.REQUEUE, message="never started"))]
        self.shim = (runtime.shim_pid, runtime.shim_start_time)
        # A shim whose job has ended (exit.json) may have gone on to another job: only a
        # shim with its job's exit still unwritten is that job's.
        if event.ended or not event.alive:
            self.phase = P.ENDING
            return [ReadEnd(None)]
        self.phase = P.ADOPTED
        effects: list[Effect] = [Report(self._status(NodeReport.RUNNING, pid=runtime.pid,
                                                     at_ms=_ms(runtime.started_at))),
                                 FollowLogs(resume=True)]
        if event.cancel_requested:
            self.cancels = 1
            effects.append(self._cancel_effect())
        return [*effects, WaitShim(*self.shim)]

    def _on_CancelAsked(self, event: CancelAsked) -> list[Effect]:
        if self.phase not in LIVE:
            return []  # starting (it goes once the job is up), or ended already
        self.cancels += 1
        return [] if self.phase is P.ORPHANED else [self._cancel_effect()]

    def _on_ExitSeen(self, event: ExitSeen) -> list[Effect]:
        record = event.record
        if record is not None and not record.belongs_to(self.job_id, self.attempt):
            record = None  # another attempt's exit is not this one's: watch the shim instead
        if record is None:
            self.phase = P.LAUNCHER_GONE
            assert self.shim is not None
            return [WaitShim(*self.shim)]
        self.phase = P.ENDING
        return [UnfollowLogs(), ReadEnd(record)]

    def _on_LauncherLost(self, event: LauncherLost) -> list[Effect]:
        assert self.shim is not None
        return [WaitShim(*self.shim)]

    def _on_ShimEnded(self, event: ShimEnded) -> list[Effect]:
        return [FollowOrphan(self.spawn_id)]

    def _on_OrphanDone(self, event: OrphanDone) -> list[Effect]:
        assert self.shim is not None
        died = f"its shim (pid {self.shim[0]}) died while the job ran"
        record = event.record
        if not event.followed and record is None:
            self.phase = P.ENDING  # nothing of it was left: exit.json tells, or it is LOST
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

    def _cancel_effect(self) -> Effect:
        if self.phase in (P.RUNNING, P.CANCEL_PENDING):  # its launcher tells its shim which job it means
            assert self.spawn_id is not None
            return CancelThroughLauncher(self.spawn_id)
        assert self.shim is not None
        return SignalShim(*self.shim)

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
