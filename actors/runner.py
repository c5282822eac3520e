"""The runner actor: starts each job through a shim, cancels it, and re-adopts jobs after a restart.

Owns: the launcher process (which forks one shim per job) and a watcher task per live job.
Inputs: ``Dispatch`` and ``Cancel`` on its inbox, which its hello hands to the server's node
registry: a dispatch from any scheduling pass (``gpuplaned.service.dispatch``), a cancel from
a cancel request (``gpuplaned.service.jobs.cancel``).
Outputs: ``JobStatus`` reports to the server through the node link (RUNNING, then how it ended).
Restart: permanent. Jobs never depend on this actor: each runs under its own shim in its own
session, writes its output straight to files and its exit status to ``exit.json``. After a
restart (or a daemon crash) the runner says hello again; the server lists the jobs it
believes are active on this node and the runner re-adopts each one from ``runtime.json``
(pid plus process start time, so a reused pid is never taken for the job), reports those
that ended meanwhile from ``exit.json``, and hands back those that never started.
A job whose shim died first (killed) is still the job's: it keeps its GPUs while any process
of its group or its shim's session lives, is followed by those processes (and stopped by
them on a cancel or at its timeout), and its end is recorded with its exit code if the
launcher reaped it, or as unknown (SHIM_DIED).
Ready: the launcher is up and the node is registered; ``started()`` passes a ``RunnerHandle``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import platform
import pwd
import signal
import time
from pathlib import Path
from typing import Any

import attrs
import psutil
import trio
from gpuplaned.actors.logs import FollowLogs, LogsEnded, notify

import gpuplaned
from gpuplaned.cgroup import oom_kill_count, oom_kill_file, read_oom_kills
from gpuplaned.domain.failures import classify_failure, failure_line
from gpuplaned.gpus import inventory
from gpuplaned.home import attempt_dir
from gpuplaned.launching.client import LauncherGone, SpawnError, SpawnRequest, open_launcher
from gpuplaned.launching.job_files import (
    EXIT_FILE,
    CorruptRecord,
    ExitRecord,
    Runtime,
    read_exit,
    read_runtime,
    tail_text,
)
from gpuplaned.launching.processes import (
    is_same_process,
    job_processes,
    signal_process,
    signal_shim,
    wait_process_exit,
)
from gpuplaned.protocol.agent import ActiveJob, Cancel, Dispatch, Hello, JobSpecWire, JobStatus
from gpuplaned.runtime.context import ActorContext

log = logging.getLogger("gpuplaned.runner")

ORPHAN_POLL_S = 0.25  # how often the processes of a job whose shim died are looked for


@attrs.frozen
class RunnerStats:
    node_id: str
    gpu_backend: str
    gpus: int
    running: int
    started: int
    ended: int
    adopted: int


@attrs.frozen
class LiveJob:
    job_id: str
    attempt: int
    shim_pid: int
    shim_start_time: int | None
    oom_kills_at_start: int | None = None  # the cgroup's OOM-kill counter when we started watching
    pgid: int | None = None  # the job's process group (its main process), for GPU attribution
    gpu_indexes: tuple[int, ...] = ()
    # The spawn request's id when this runner's launcher started the job (None: adopted).
    # Such a job is cancelled through the launcher: its shim may run another job later.
    spawn_id: str | None = None


@attrs.define
class RunnerHandle:
    node_id: str
    gpu_backend: str
    gpus: int
    live: dict[str, LiveJob] = attrs.field(factory=dict)
    started: int = 0
    ended: int = 0
    adopted: int = 0

    def statistics(self) -> RunnerStats:
        return RunnerStats(self.node_id, self.gpu_backend, self.gpus, len(self.live), self.started,
                           self.ended, self.adopted)


DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"  # for a job submitted without a PATH


@attrs.frozen
class JobEnvironment:
    """What every job's environment starts from and ends with; see ``for_job``.

    Nothing of the daemon's own environment reaches a job: a job runs with what it was
    submitted with (``gpuplanectl submit`` sends the submitting shell's PATH, virtualenv
    and the few other variables its help lists), so it runs the same whichever shell or
    service manager started the daemon, a retry runs as the first attempt did, and the
    daemon's secrets stay its own.
    """

    defaults: dict[str, str]  # for what a submission leaves out: PATH, and who the job runs as
    fixed: dict[str, str]  # what GPUPlane sets the same for every job

    @classmethod
    def of(cls, shared: Any) -> JobEnvironment:
        user = pwd.getpwuid(os.getuid())
        defaults = {"PATH": DEFAULT_PATH, "HOME": user.pw_dir, "USER": user.pw_name}
        fixed = {
            "PYTHONUNBUFFERED": "1",
            "GPUPLANE_RUNTIME_DIR": str(shared.config.runtime_dir),
            "GPUPLANE_ENDPOINT": shared.endpoint.portfile().endpoint,
            # The SDK's spool goes under the daemon's home, where the daemon replays it at start.
            "GPUPLANE_HOME": str(shared.config.home),
        }
        if shared.config.node.gpus.kind == "fake":  # so a test job can pose as a GPU process
            fixed["GPUPLANE_FAKE_GPU_DIR"] = str(shared.config.fake_gpu_dir)
        return cls(defaults, fixed)

    def for_job(self, spec: JobSpecWire) -> dict[str, str]:
        """The defaults, the job's own variables, then what GPUPlane sets."""
        return {
            **self.defaults, **spec.env, **self.fixed,
            # CPU-only jobs see no GPU at all rather than all of them.
            "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in spec.gpu_indexes),
            # The indexes are NVML's, which number GPUs by PCI bus; CUDA's own default order
            # (fastest first) can differ on a mixed machine and put the job on another GPU.
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            "GPUPLANE_JOB_ID": spec.job_id,
            "GPUPLANE_RUN_ID": spec.run_id,
            "GPUPLANE_ATTEMPT": str(spec.attempt),
        }


def host_facts(note: str) -> dict[str, Any]:
    """What the node's hello says about the machine besides its GPUs."""
    return {"hostname": platform.node(), "platform": platform.platform(terse=True), "cpu_count": os.cpu_count(),
            "memory_mb": psutil.virtual_memory().total // (1024 * 1024), "gpu_backend_note": note}


async def run(ctx: ActorContext, *, task_status: trio.TaskStatus[RunnerHandle] = trio.TASK_STATUS_IGNORED) -> None:
    shared = ctx.shared
    cfg = shared.config
    inv = await trio.to_thread.run_sync(inventory, cfg.node.gpus)
    if inv.note:
        log.info("GPUs: %s; running as a CPU-only node", inv.note)
    log.info("GPUs: %d from the %s backend", len(inv.gpus), inv.backend)
    link = shared.node_link
    hello = Hello(cfg.node.name, gpuplaned.__version__, inv.gpus, cfg.node.labels, cfg.node.max_cpu_jobs, inv.backend,
                  host_facts(inv.note))
    # Messages left in the inbox were meant for an earlier incarnation; the hello below
    # lists every job this node should know about, so they are dropped, not replayed
    # (a replayed Dispatch could start a job the server has since handed back to the queue).
    while True:
        try:
            stale = ctx.inbox.receive_nowait()
        except trio.WouldBlock:
            break
        log.info("runner drops %r from before its restart; the hello reconciles it", stale)
    async with open_launcher() as launcher:
        ok = await link.hello(hello, ctx.ports[ctx.name])
        handle = RunnerHandle(ok.node_id, inv.backend, len(inv.gpus))
        runner = _Runner(ctx, launcher, handle)
        try:
            async with trio.open_nursery() as nursery:
                runner.nursery = nursery
                for active in ok.active:
                    nursery.start_soon(runner.adopt, active)
                task_status.started(handle)
                async for message in ctx.inbox:
                    if isinstance(message, Dispatch):
                        nursery.start_soon(runner.start_job, message.job)
                    elif isinstance(message, Cancel):
                        runner.cancel(message)
                    else:
                        log.warning("runner ignores unexpected message %r", message)
        finally:
            link.goodbye(ok.node_id)


class _Runner:
    def __init__(self, ctx: ActorContext, launcher: Any, handle: RunnerHandle) -> None:
        self.ctx = ctx
        self.shared = ctx.shared
        self.launcher = launcher
        self.handle = handle
        self.nursery: trio.Nursery | None = None
        self.home: Path = ctx.shared.config.home
        self.starting: set[tuple[str, int]] = set()  # being spawned right now
        self.pending_cancels: set[tuple[str, int]] = set()  # cancelled while being spawned
        self.environment = JobEnvironment.of(ctx.shared)
        self.oom_counter = oom_kill_file()  # our cgroup's; it does not move
        self.cancels: dict[str, int] = {}  # cancels asked of each live job, by job id
        self.orphaned: set[str] = set()  # live jobs whose shims died: followed by their processes

    def oom_kills(self) -> int | None:
        return None if self.oom_counter is None else read_oom_kills(self.oom_counter)

    async def report(self, status: JobStatus) -> None:
        await self.shared.node_link.report(self.handle.node_id, status)

    async def start_job(self, spec: JobSpecWire) -> None:
        job_dir = attempt_dir(self.home, spec.job_id, spec.attempt)  # the shim creates it
        request = SpawnRequest(
            id=f"{spec.job_id}/{spec.attempt}", job_dir=str(job_dir), argv=list(spec.argv), cwd=spec.cwd,
            env=self.environment.for_job(spec), timeout_s=spec.timeout_s, grace_s=spec.stop_grace_s,
        )
        oom_kills_before = self.oom_kills()
        key = (spec.job_id, spec.attempt)
        self.starting.add(key)
        try:
            spawned = await self.launcher.spawn(request)
        except SpawnError as exc:
            self.pending_cancels.discard(key)
            log.warning("job %s attempt %d did not start: %s", spec.job_id, spec.attempt, exc)
            await self.report(JobStatus(spec.job_id, spec.attempt, "FAILED", exit_code=None,
                                        failure_reason="SPAWN_FAILED", message=str(exc)))
            return
        except LauncherGone:
            # The runner restarts; on its hello this job comes back as active and, having no
            # runtime.json, is handed back to the queue.
            raise
        finally:
            self.starting.discard(key)
        self.handle.started += 1
        live = LiveJob(spec.job_id, spec.attempt, spawned.shim_pid, spawned.shim_start_time, oom_kills_before,
                       spawned.pgid, tuple(spec.gpu_indexes), spawned.id)
        self.handle.live[spec.job_id] = live  # from here on a Cancel finds it
        started_ms = int(spawned.started_at * 1000) if spawned.started_at is not None else None
        await self.report(JobStatus(spec.job_id, spec.attempt, "RUNNING", pid=spawned.pid, at_ms=started_ms))
        if key in self.pending_cancels:  # cancelled while it was starting
            self.pending_cancels.discard(key)
            self.stop(live)
        await self.watch(live, job_dir)

    async def watch(self, live: LiveJob, job_dir: Path) -> None:
        """Wait for the job's end and report it.

        A job this runner's launcher started ends with the launcher's exit event, which
        carries the exit record. An adopted job, or one whose launcher has gone, ends when
        its shim does (a shim takes no new job once its launcher is gone), and its record
        is read from ``exit.json``.
        """
        self.handle.live[live.job_id] = live
        notify(self.ctx, FollowLogs(live.job_id, live.attempt, str(job_dir), resume=live.spawn_id is None))
        record: ExitRecord | None = None
        orphan_end: JobStatus | None = None
        try:
            if live.spawn_id is not None:
                with contextlib.suppress(LauncherGone):
                    record = await self.launcher.wait_exit(live.spawn_id)
            if record is None:
                await wait_process_exit(live.shim_pid, live.shim_start_time)
                orphan_end = await self.follow_orphan(live, job_dir)
        finally:
            self.handle.live.pop(live.job_id, None)
            self.cancels.pop(live.job_id, None)
        notify(self.ctx, LogsEnded(live.job_id, live.attempt))
        self.handle.ended += 1
        if orphan_end is not None:
            o = orphan_end
        elif record is not None and record.succeeded:
            o = _outcome(live, job_dir, record)  # nothing to read: no thread needed
        else:
            o = await trio.to_thread.run_sync(_outcome, live, job_dir, record)
        await self.report(o)

    async def follow_orphan(self, live: LiveJob, job_dir: Path) -> JobStatus | None:
        """The shim of ``live`` is gone without saying how its job ended. Should the job still
        run (its shim was killed), follow it until none of its processes is left, holding
        its GPUs meanwhile, and say how it ended; None when there was nothing of it left to
        follow and nothing is known (``exit.json`` tells, or the job is LOST)."""
        def read() -> Runtime | None:
            return None if (job_dir / EXIT_FILE).exists() else read_runtime(job_dir)

        try:
            runtime = await trio.to_thread.run_sync(read)
        except CorruptRecord:
            return None
        if runtime is None:
            return None
        left = await trio.to_thread.run_sync(job_processes, runtime)
        stopped = None
        if left:
            log.warning("job %s attempt %d: its shim (pid %d) died while the job ran; following its %d "
                        "process(es) until they end", live.job_id, live.attempt, live.shim_pid, len(left))
            self.orphaned.add(live.job_id)
            try:
                stopped = await self._follow(live, runtime, left)
            finally:
                self.orphaned.discard(live.job_id)
        record = None
        if live.spawn_id is not None:  # the launcher reaped its main process, if it could
            with contextlib.suppress(LauncherGone):
                record = await self.launcher.orphan_exit(live.spawn_id)
        if not left and record is None:
            return None
        return await trio.to_thread.run_sync(_orphan_outcome, live, job_dir, record, stopped)

    async def _follow(self, live: LiveJob, runtime: Runtime, left: list[tuple[int, int]]) -> str | None:
        """Wait until none of an orphaned job's processes is left, doing what its shim would
        have done: stop them on a cancel or at the job's timeout (SIGTERM, the grace period,
        SIGKILL; a second cancel kills at once), and SIGKILL what is left once the main
        process has ended. Returns ``"cancelled"`` or ``"timeout"`` when it stopped the job."""
        stopping: str | None = None
        kill_at: float | None = None
        timeout_at = None if runtime.timeout_s is None else runtime.started_at + runtime.timeout_s
        while left:
            now = time.time()  # runtime.json's times are wall-clock ones
            cancels = self.cancels.get(live.job_id, 0)
            if stopping is None and (cancels or (timeout_at is not None and now >= timeout_at)):
                stopping = "cancelled" if cancels else "timeout"
                kill_at = now + runtime.grace_s
                _signal_all(left, signal.SIGTERM)
            main_ended = runtime.start_time is not None and (runtime.pid, runtime.start_time) not in left
            if main_ended or cancels > 1 or (kill_at is not None and now >= kill_at):
                _signal_all(left, signal.SIGKILL)
            await trio.sleep(ORPHAN_POLL_S)
            left = await trio.to_thread.run_sync(job_processes, runtime)
        return stopping

    async def adopt(self, active: ActiveJob) -> None:
        job_dir = attempt_dir(self.home, active.job_id, active.attempt)
        try:
            runtime, ended = await trio.to_thread.run_sync(
                lambda: (read_runtime(job_dir), (job_dir / EXIT_FILE).exists()))
        except CorruptRecord as exc:
            log.error("job %s attempt %d: %s", active.job_id, active.attempt, exc)
            await self.report(JobStatus(active.job_id, active.attempt, "FAILED", failure_reason="LOST",
                                        message=str(exc)))
            return
        if runtime is None:
            log.info("job %s attempt %d never started here; back to the queue", active.job_id, active.attempt)
            await self.report(JobStatus(active.job_id, active.attempt, "REQUEUE", message="never started"))
            return
        live = LiveJob(active.job_id, active.attempt, runtime.shim_pid, runtime.shim_start_time, self.oom_kills(),
                       runtime.pgid, tuple(active.gpu_indexes))
        # A shim whose job has ended (exit.json) may have gone on to another job: only a
        # shim with its job's exit still unwritten is that job's.
        if not ended and await trio.to_thread.run_sync(_runs_on, runtime):
            self.handle.adopted += 1
            log.info("re-adopted job %s attempt %d (pid %d)", active.job_id, active.attempt, runtime.pid)
            await self.report(JobStatus(active.job_id, active.attempt, "RUNNING", pid=runtime.pid,
                                        at_ms=int(runtime.started_at * 1000)))
            if active.cancel_requested:
                self.stop(live)
            await self.watch(live, job_dir)
            return
        await self.report(await trio.to_thread.run_sync(_outcome, live, job_dir))

    def cancel(self, message: Cancel) -> None:
        live = self.handle.live.get(message.job_id)
        if live is None or live.attempt != message.attempt:
            key = (message.job_id, message.attempt)
            if key in self.starting:  # start_job acts on it once the shim is up
                self.pending_cancels.add(key)
            else:
                log.info("cancel of %s attempt %d: not running here", message.job_id, message.attempt)
            return
        self.stop(live)

    def stop(self, live: LiveJob) -> None:
        """Cancel a live job: through the launcher that started it, else by its shim's pid
        (or, once its shim has died, by its processes: see ``_follow``)."""
        assert self.nursery is not None
        self.cancels[live.job_id] = self.cancels.get(live.job_id, 0) + 1
        self.nursery.start_soon(self._stop, live)

    async def _stop(self, live: LiveJob) -> None:
        if live.job_id in self.orphaned:
            return  # its follower stops it
        if live.spawn_id is not None:
            try:
                await self.launcher.cancel(live.spawn_id)
                return  # False: it has ended, and its exit is on the way
            except LauncherGone:
                pass  # its shim takes no new job now: the pid is the job's until exit.json
        job_dir = attempt_dir(self.home, live.job_id, live.attempt)
        if (job_dir / EXIT_FILE).exists():
            return  # ended; its shim may be another job's now
        if not signal_shim(live.shim_pid, live.shim_start_time, signal.SIGTERM):
            log.warning("cancel of %s: its shim (pid %d) is gone", live.job_id, live.shim_pid)


def _runs_on(runtime: Runtime) -> bool:
    """Whether the job of ``runtime``, whose ``exit.json`` is not written, still runs: under
    its shim, or on its own after its shim died."""
    if runtime.shim_start_time is not None and is_same_process(runtime.shim_pid, runtime.shim_start_time):
        return True
    return bool(job_processes(runtime))


def _signal_all(processes: list[tuple[int, int]], signum: int) -> None:
    for pid, start_time in processes:
        signal_process(pid, start_time, signum)
        if signum == signal.SIGTERM:
            signal_process(pid, start_time, signal.SIGCONT)  # a stopped process cannot act on SIGTERM


def _orphan_outcome(live: LiveJob, job_dir: Path, record: ExitRecord | None, stopped: str | None) -> JobStatus:
    """How a job whose shim died first ended: from the launcher's record of its main process
    when there is one, else with its exit code unknown (SHIM_DIED)."""
    job_id, attempt = live.job_id, live.attempt
    died = f"its shim (pid {live.shim_pid}) died while the job ran"
    at_ms = int((record.ended_at if record is not None else time.time()) * 1000)
    exit_code = record.exit_code if record is not None else None
    if stopped == "cancelled":
        return JobStatus(job_id, attempt, "CANCELLED", exit_code=exit_code, at_ms=at_ms)
    if stopped == "timeout":
        return JobStatus(job_id, attempt, "FAILED", exit_code=exit_code, failure_reason="TIMEOUT",
                         message=f"timed out; {died}", at_ms=at_ms)
    if record is None:
        return JobStatus(job_id, attempt, "FAILED", failure_reason="SHIM_DIED", at_ms=at_ms,
                         message=f"{died}; the job ran on to its end, and its own exit code is unknown")
    status = _outcome(live, job_dir, record)
    return attrs.evolve(status, message=f"{status.message}; {died}") if status.status == "FAILED" else status


def _outcome(live: LiveJob, job_dir: Path, record: ExitRecord | None = None) -> JobStatus:
    """How an attempt ended, from its exit record (``exit.json`` when not given) and, for a
    failure, the stderr tail and the OOM-kill counter. Reads files (on a thread) unless
    ``record`` is given and says the job succeeded."""
    job_id, attempt = live.job_id, live.attempt
    if record is None:
        try:
            record = read_exit(job_dir)
        except CorruptRecord as exc:
            return JobStatus(job_id, attempt, "FAILED", failure_reason="LOST", message=str(exc))
    if record is None:
        # The shim itself died without writing exit.json (killed -9): the job's fate is unknown.
        return JobStatus(job_id, attempt, "FAILED", failure_reason="LOST",
                         message="the job's shim ended without recording an exit status")
    oom_killed = False
    if record.signal == signal.SIGKILL and record.reason == "signaled" and live.oom_kills_at_start is not None:
        now = oom_kill_count()
        oom_killed = now is not None and now > live.oom_kills_at_start
    stderr_tail = "" if record.succeeded else tail_text(job_dir / "stderr.log")  # only failures need it
    reason, detail = classify_failure(record, stderr_tail, oom_killed)
    at_ms = int(record.ended_at * 1000) if record.ended_at else None
    signal_name = record.signal_name
    if reason is None:
        return JobStatus(job_id, attempt, "SUCCEEDED", exit_code=record.exit_code, at_ms=at_ms)
    if reason == "CANCELLED":
        return JobStatus(job_id, attempt, "CANCELLED", exit_code=record.exit_code, signal=signal_name, at_ms=at_ms)
    return JobStatus(job_id, attempt, "FAILED", exit_code=record.exit_code, signal=signal_name,
                     failure_reason=reason, message=detail, at_ms=at_ms,
                     log_line=failure_line(stderr_tail, reason))
