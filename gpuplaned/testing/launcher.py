"""``FakeLauncher``: the launcher's interface (``gpuplaned.launching.client.Launcher``) with
scripted jobs that run in trio time, for the runner in virtual time (``autojump_clock``).

Each spawn request is matched to a ``Script`` (``script(request)`` when given; else by its
request id ``"<job id>/<attempt>"``, then by its job id, else the default): how long the job runs, how it exits, whether it fails to start, how long its start takes. A cancel ends
it (``cancelled``, SIGTERM) after ``Script.stops_after_s``, as a shim's SIGTERM would; its
``timeout_s`` ends it (``timeout``) the same way. ``die()`` is the launcher process dying:
every call raises ``LauncherGone`` from then on, and what it started is left to the runner
to find by its shim's pid (the fake's pids name no process, so it finds nothing: LOST).
No process is started and no file is written.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import attrs
import trio

from gpuplaned.domain.failures import ExitReason
from gpuplaned.launching.client import LauncherGone, SpawnError, Spawned, SpawnRequest
from gpuplaned.launching.job_files import ExitRecord

NO_PID = 1 << 22  # above any pid_max: the fake's pids never name a live process


async def inline(fn: Callable[..., Any], *args: Any) -> Any:
    """The runner's ``blocking`` for tests in virtual time: the call runs on the event loop's
    thread, so the autojump clock cannot jump while it is in flight (it would, with a worker
    thread: every task is blocked then)."""
    await trio.lowlevel.checkpoint()
    return fn(*args)


@attrs.frozen
class Script:
    """What a fake job does."""

    runs_s: float = 1.0  # then it exits by itself...
    exit_code: int | None = 0  # ...with this code, or
    signal: int | None = None  # ...killed by this signal
    spawn_error: str | None = None  # it cannot start: spawn raises SpawnError with this message
    spawn_s: float = 0.0  # how long the spawn takes (a cancel may come meanwhile)
    stops_after_s: float = 0.0  # from a SIGTERM (cancel, timeout) to its end
    record: bool = True  # False: its shim ends without a record (wait_exit gives None)


@attrs.define
class FakeJob:
    request: SpawnRequest
    spawned: Spawned
    started_at: float  # trio time
    ended: trio.Event = attrs.field(factory=trio.Event)
    record: ExitRecord | None = None
    stop: trio.Event = attrs.field(factory=trio.Event)
    stop_reason: ExitReason | None = None


class FakeLauncher:
    """A launcher whose jobs follow their ``Script``; see the module docstring.

    Attributes:
        jobs: every job it started, by request id.
        cancels: the request ids of every cancel asked, in order.
    """

    def __init__(self, scripts: Mapping[str, Script] | None = None, default: Script = Script(),
                 script: Callable[[SpawnRequest], Script] | None = None) -> None:
        self.scripts = dict(scripts or {})
        self.default = default
        self.script = script
        self.jobs: dict[str, FakeJob] = {}
        self.cancels: list[str] = []
        self.spawn_requests: list[SpawnRequest] = []
        self._gone: str | None = None
        self._died = trio.Event()
        self._nursery: trio.Nursery | None = None
        self._next_pid = NO_PID

    # -- what the runner uses (Launcher's interface) ---------------------------------------

    @contextlib.asynccontextmanager
    async def open(self) -> AsyncIterator[FakeLauncher]:
        """What ``open_launcher`` is to the real one: the runner's ``launcher`` argument."""
        if self._gone is not None:
            raise LauncherGone(self._gone)
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            try:
                yield self
            finally:
                self._set_gone("launcher closed")
                nursery.cancel_scope.cancel()

    @property
    def pid(self) -> int:
        return NO_PID

    @property
    def gone(self) -> bool:
        return self._gone is not None

    async def ping(self) -> None:
        self._check()
        await trio.lowlevel.checkpoint()

    async def spawn(self, request: SpawnRequest) -> Spawned:
        self._check()
        self.spawn_requests.append(request)
        script = self.script_of(request)
        if script.spawn_s:
            await self._sleep_or_die(script.spawn_s)
        if script.spawn_error is not None:
            raise SpawnError(script.spawn_error, request.id)
        pid = self._new_pid()
        spawned = Spawned(request.id, shim_pid=self._new_pid(), shim_start_time=1, pid=pid, pgid=pid, start_time=1,
                          started_at=1.7e9 + trio.current_time())
        job = FakeJob(request, spawned, trio.current_time())
        self.jobs[request.id] = job
        assert self._nursery is not None
        self._nursery.start_soon(self._run, job, script)
        return spawned

    async def wait_exit(self, request_id: str) -> ExitRecord | None:
        job = self.jobs[request_id]
        async with trio.open_nursery() as nursery:
            async def died() -> None:
                await self._died.wait()
                nursery.cancel_scope.cancel()

            nursery.start_soon(died)
            await job.ended.wait()
            nursery.cancel_scope.cancel()
        if not job.ended.is_set():
            raise LauncherGone(self._gone)
        return job.record

    async def cancel(self, request_id: str) -> bool:
        self._check()
        self.cancels.append(request_id)
        await trio.lowlevel.checkpoint()
        job = self.jobs.get(request_id)
        if job is None or job.ended.is_set():
            return False
        if job.stop_reason is None:
            job.stop_reason = ExitReason.CANCELLED
            job.stop.set()
        return True

    async def orphan_exit(self, request_id: str) -> ExitRecord | None:
        self._check()
        await trio.lowlevel.checkpoint()
        return None

    async def aclose(self) -> None:
        self._set_gone("launcher closed")

    # -- what tests use --------------------------------------------------------------------

    def script_of(self, request: SpawnRequest) -> Script:
        if self.script is not None:
            return self.script(request)
        return self.scripts.get(request.id) or self.scripts.get(request.job_id or "", self.default)

    def die(self) -> None:
        """The launcher process dies: every call raises ``LauncherGone`` from now on."""
        self._set_gone("the fake launcher died")

    # -- the fake jobs ---------------------------------------------------------------------

    async def _run(self, job: FakeJob, script: Script) -> None:
        timeout = job.request.timeout_s
        with trio.move_on_after(script.runs_s if timeout is None else min(script.runs_s, timeout)) as ran:
            await job.stop.wait()
        reason = job.stop_reason
        if reason is None and ran.cancelled_caught and timeout is not None and timeout < script.runs_s:
            reason = ExitReason.TIMEOUT
        if reason is not None:  # SIGTERM to the group; it ends a while later
            await trio.sleep(script.stops_after_s)
            code, signum = None, signal.SIGTERM
        else:
            code, signum = script.exit_code, script.signal
            if signum is not None:
                code, reason = None, ExitReason.SIGNALED
            else:
                reason = ExitReason.EXITED
        if script.record:
            job.record = ExitRecord(code, signum, None if signum is None else signal.Signals(signum).name, reason,
                                    1.7e9 + trio.current_time(), job.spawned.pid, None, job.request.job_id,
                                    job.request.attempt)
        job.ended.set()

    def _new_pid(self) -> int:
        self._next_pid += 1
        return self._next_pid

    def _check(self) -> None:
        if self._gone is not None:
            raise LauncherGone(self._gone)

    def _set_gone(self, why: str) -> None:
        if self._gone is None:
            self._gone = why
        self._died.set()

    async def _sleep_or_die(self, seconds: float) -> None:
        with trio.move_on_after(seconds):
            await self._died.wait()
        self._check()
