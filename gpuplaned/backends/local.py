"""The local backend: the launcher forks a shim per job on this machine.

The handle of an attempt is its shim (pid and start time, so a reused pid is never taken for
it) and, for one this backend started, the launcher's request id: the launcher then tells of
its end and takes its cancel, and knows which of its shims' jobs a cancel means. One adopted
after a restart, or whose launcher died, is followed and cancelled through its shim's pid; one
whose shim died first, through what is left of its processes (``launching.orphans``).
Everything here that reads ``/proc``, the cgroup or the job's files runs through ``blocking``
(a worker thread; inline in virtual-time tests).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs

from gpuplaned.backends.base import AttemptRequest, Running, Started, StartRefused
from gpuplaned.cgroup import OomCounter, oom_kill_file
from gpuplaned.domain import attempts as a
from gpuplaned.domain.failures import ExitReason
from gpuplaned.home import attempt_dir
from gpuplaned.launching import orphans
from gpuplaned.launching.client import Launching, LauncherGone, SpawnError, SpawnRequest
from gpuplaned.launching.job_files import EXIT_FILE, CorruptRecord, ExitRecord, Runtime, read_exit, read_runtime, tail_text
from gpuplaned.launching.processes import job_processes, signal_shim, wait_process_exit

log = logging.getLogger("gpuplaned.runner")

Blocking = Callable[..., Awaitable[Any]]  # runs a blocking call: trio.to_thread.run_sync


@attrs.frozen
class LocalHandle:
    """An attempt's shim, and the launcher's request id when this backend started it."""

    job_id: str
    attempt: int
    job_dir: Path
    shim_pid: int
    shim_start_time: int | None
    spawn_id: str | None = None
    oom_kills_at_start: int | None = None  # the cgroup's OOM-kill counter when it started or was adopted

    @property
    def supervisor(self) -> str:
        return f"its shim (pid {self.shim_pid})"


class LocalBackend:
    kind = "local"

    def __init__(self, home: Path, node_name: str, launcher: Launching, blocking: Blocking) -> None:
        self.home = home
        self.node_name = node_name
        self.launcher = launcher
        self.blocking = blocking
        self.oom_counter = OomCounter(oom_kill_file())  # our cgroup's; it does not move

    def attempt_dir(self, job_id: str, attempt: int) -> Path:
        return attempt_dir(self.home, job_id, attempt)

    def _oom_kills(self) -> int | None:
        return self.oom_counter.read()

    def close(self) -> None:
        self.oom_counter.close()

    async def start(self, attempt: AttemptRequest) -> Started:
        request = attempt.spawn
        oom_kills = self._oom_kills()
        try:
            spawned = await self.launcher.spawn(request)
        except SpawnError as exc:
            raise StartRefused(await self._why_not_started(request, exc)) from exc
        # LauncherGone goes up: the runner restarts; on its hello this job comes back as
        # active and, having no runtime.json, is handed back to the queue.
        assert request.job_id is not None and request.attempt is not None
        handle = LocalHandle(request.job_id, request.attempt, Path(request.job_dir), spawned.shim_pid, spawned.shim_start_time, spawned.id, oom_kills)
        return Started(handle, Running(spawned.pid, spawned.pgid, spawned.started_at, spawned.shim_pid,
                                       spawned.shim_start_time, request.cwd))

    async def _why_not_started(self, request: SpawnRequest, exc: SpawnError) -> str:
        """The launcher's reason, or for a working directory missing here, that, with this
        node's name: the server queued the job without looking (the folder is this node's to
        have, not the server's), so its failure is where the user learns it."""
        if not await self.blocking(os.path.isdir, request.cwd):
            return f"the working directory {request.cwd} does not exist on node {self.node_name}"
        return exc.message

    async def watch(self, handle: LocalHandle) -> a.Input:
        assert handle.spawn_id is not None, "only a job this backend started is watched through its launcher"
        try:
            return a.ExitSeen(await self.launcher.wait_exit(handle.spawn_id))
        except LauncherGone:
            return a.WatchLost()

    async def watch_supervisor(self, handle: LocalHandle) -> a.SupervisorEnded:
        await wait_process_exit(handle.shim_pid, handle.shim_start_time)
        return a.SupervisorEnded()

    async def cancel(self, handle: LocalHandle, *, through_starter: bool) -> None:
        if through_starter and handle.spawn_id is not None:
            try:
                await self.launcher.cancel(handle.spawn_id)  # False: it has ended, and its exit is on the way
                return
            except LauncherGone:  # its shim takes no new job now: the pid is the job's until exit.json
                pass
        if (handle.job_dir / EXIT_FILE).exists():
            return  # ended; its shim may be another job's now
        if not signal_shim(handle.shim_pid, handle.shim_start_time, signal.SIGTERM):
            log.warning("cancel through %s: it is gone", handle.supervisor)

    async def follow_remains(self, handle: LocalHandle, started_here: bool,
                             cancels: Callable[[], int]) -> a.RemainsDone:
        """Should the job still run (its shim was killed), follow it until none of its
        processes is left, holding its GPUs meanwhile; then ask the launcher that started it
        how its main process ended."""
        job_dir = handle.job_dir

        def read() -> Runtime | None:
            if (job_dir / EXIT_FILE).exists():
                return None
            return read_runtime(job_dir, (handle.job_id, handle.attempt))

        try:
            runtime = await self.blocking(read)
        except CorruptRecord:
            runtime = None
        if runtime is None:
            return a.RemainsDone(followed=False)
        left = await self.blocking(job_processes, runtime)
        stopped = None
        if left:
            log.warning("%s: %s died while the job ran; following its %d process(es) until they end",
                        job_dir, handle.supervisor, len(left))
            stopped = await orphans.follow(runtime, left, cancels, self.blocking)
        record = None
        if started_here and handle.spawn_id is not None:  # the launcher reaped its main process, if it could
            with contextlib.suppress(LauncherGone):
                record = await self.launcher.orphan_exit(handle.spawn_id)
        return a.RemainsDone(followed=bool(left), stopped=stopped, record=record, now_ms=int(time.time() * 1000))

    async def throttle(self, sweep_id: str, max_parallel: int) -> None:
        """Nothing to do: the server's queue holds a local node's trials to their sweep's max_parallel."""

    async def adopt(self, job_id: str, attempt: int, cancel_requested: bool, *,
                    sweep_limit: int | None = None) -> a.Adopt:
        job_dir = self.attempt_dir(job_id, attempt)
        oom_kills = self._oom_kills()
        return await self.blocking(_inspect, job_dir, (job_id, attempt), cancel_requested, oom_kills)

    async def read_end(self, job_id: str, attempt: int, record: a.ExitRecordFacts | None,
                       handle: LocalHandle | None) -> a.EndRead:
        if not a.needs_reading(record):
            return a.EndRead(record)  # nothing to read: no thread needed
        oom_kills = handle.oom_kills_at_start if handle is not None else None
        return await self.blocking(_read_end, self.attempt_dir(job_id, attempt), (job_id, attempt), record, oom_kills,
                                   self.oom_counter)


def _inspect(job_dir: Path, owner: tuple[str, int], cancel_requested: bool, oom_kills: int | None) -> a.Adopt:
    """What the dir of an attempt to adopt says (on a thread: it reads files and /proc)."""
    try:
        runtime = read_runtime(job_dir, owner)
    except CorruptRecord as exc:
        return a.Adopt(None, problem=str(exc))
    if runtime is None:
        return a.Adopt(None, cancel_requested=cancel_requested)
    ended = (job_dir / EXIT_FILE).exists()
    alive = not ended and orphans.still_runs(runtime)
    handle = LocalHandle(owner[0], owner[1], job_dir, runtime.shim_pid, runtime.shim_start_time, None, oom_kills)
    return a.Adopt(running_of(runtime), handle, ended=ended, alive=alive, cancel_requested=cancel_requested)


def running_of(runtime: Runtime) -> Running:
    return Running(runtime.pid, runtime.pgid, runtime.started_at, runtime.shim_pid, runtime.shim_start_time,
                   runtime.cwd)


def _read_end(job_dir: Path, owner: tuple[str, int], record: ExitRecord | None,
              oom_kills_at_start: int | None, oom_counter: OomCounter) -> a.EndRead:
    """How a failed (or unknown) attempt ended: its record (``exit.json`` when not given),
    the tail of its stderr and whether the OOM killer killed it (on a thread)."""
    if record is None:
        try:
            record = read_exit(job_dir, owner)
        except CorruptRecord as exc:
            return a.EndRead(None, problem=str(exc))
        if record is None:
            return a.EndRead(None)
    oom_killed = False
    if record.signal == signal.SIGKILL and record.reason == ExitReason.SIGNALED and oom_kills_at_start is not None:
        now = oom_counter.read()
        oom_killed = now is not None and now > oom_kills_at_start
    stderr_tail = "" if record.succeeded else tail_text(job_dir / "stderr.log")  # only failures need it
    return a.EndRead(record, stderr_tail=stderr_tail, oom_killed=oom_killed)
