"""The runner actor: starts each job through its backend, cancels it, and re-adopts jobs after a restart.

Owns: the node's runner backend (``gpuplaned.backends``: the local launcher, which forks one shim
per job, or Slurm, per ``[node] runner``) and a task per attempt on this node.
Inputs: ``Dispatch``, ``Cancel`` and ``SweepThrottle`` on its inbox, which its hello hands to the
server's node registry: a dispatch from any scheduling pass (``gpuplaned.service.passes.dispatch``), a
cancel from a cancel request (``gpuplaned.service.api.jobs.cancel``), a sweep's new max_parallel for
the backend (``gpuplaned.service.api.sweeps.set_max_parallel``); ``Reconcile`` from the node link when a
remote agent's link is back after an outage (``gpuplaned.node_link.Reconcile``).
Outputs: ``JobStatus`` reports to the server through the node link (RUNNING, then how it ended);
on its handle, the live jobs and the attempts that ended lately (``recent_ends``, those found
ended on adoption too), for the node actors that follow the jobs' files.
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

What happens to each attempt is decided by its ``gpuplaned.domain.attempts.Attempt`` (starting,
handed over, running, cancel pending, adopted, watch lost, unsupervised); this module is the
shell that feeds it what the backend says, and carries out its effects through the backend.
It reads no process, cgroup or job file itself.
"""

from __future__ import annotations

import contextlib
import logging
import os
import platform
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import psutil
import trio

import gpuplaned
from gpuplaned.backends.base import AttemptRequest, Running, RunnerBackend, Started, StartRefused
from gpuplaned.backends.local import LocalBackend
from gpuplaned.domain import attempts as a
from gpuplaned.gpus import inventory
from gpuplaned.launching.client import Launching, SpawnRequest, open_launcher
from gpuplaned.launching.environment import JobEnvironment
from gpuplaned.launching.eval_result import read_result, result_path
from gpuplaned.protocol.job_states import NodeReport
from gpuplaned.node_context import ENDS_KEPT, FollowLogs, LogsEnded, NodeContext
from gpuplaned.node_link import Reconcile
from gpuplaned.protocol.agent import (
    ActiveJob,
    Cancel,
    Dispatch,
    Hello,
    JobSpecWire,
    JobStatus,
    PooledCapacity,
    SweepThrottle,
)
from gpuplaned.protocol.evaluation_wire import EVAL_RESULT_VAR
from gpuplaned.runtime.context import ActorContext

if TYPE_CHECKING:
    from gpuplaned.slurm.commands import SlurmCli  # only a Slurm node loads the Slurm package

log = logging.getLogger("gpuplaned.runner")

_ENDS = (NodeReport.SUCCEEDED, NodeReport.FAILED, NodeReport.CANCELLED)


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
    shim_pid: int  # what supervises it (its shim), whose session holds the job's processes; 0: not known here
    shim_start_time: int | None
    pgid: int | None = None  # the job's process group (its main process), for GPU attribution
    gpu_indexes: tuple[int, ...] = ()
    run_id: str | None = None
    cwd: str | None = None  # where the job runs (its checkpoint folders are under it)
    env: Mapping[str, str] = attrs.field(factory=dict)  # the job's own variables (an adopted job's: unknown, {})
    started_here: bool = False  # this runner started it (not adopted after a restart): nothing of it is stored yet
    pid: int | None = None  # its main process, and when it was started (wall clock), where known here
    started_at: float | None = None


@attrs.define
class RunnerHandle:
    node_id: str
    gpu_backend: str
    gpus: int
    live: dict[str, LiveJob] = attrs.field(factory=dict)
    # The last ENDS_KEPT attempts that ended, oldest first: those that ended while live here,
    # and those found ended (exit.json) on adoption, which were never live for this runner.
    # The TensorBoard tailer and the checkpoint watcher read each one's files a last time.
    recent_ends: dict[tuple[str, int], LiveJob] = attrs.field(factory=dict)
    # Set (and replaced) on each change of the two above: tbtail and ckptwatch wait on it
    # while no job runs, instead of looking every few milliseconds (the agent's idle CPU).
    changed: trio.Event = attrs.field(factory=trio.Event)
    started: int = 0
    ended: int = 0
    adopted: int = 0
    ends_listed: int = 0  # attempts taken into recent_ends so far

    def ended_here(self, job: LiveJob) -> None:
        self.recent_ends.pop((job.job_id, job.attempt), None)
        self.recent_ends[(job.job_id, job.attempt)] = job
        while len(self.recent_ends) > ENDS_KEPT:
            del self.recent_ends[next(iter(self.recent_ends))]
        self.ends_listed += 1
        self.touch()

    def list_live(self, job: LiveJob) -> None:
        self.live[job.job_id] = job
        self.touch()

    def unlist_live(self, job_id: str, attempt: int) -> None:
        live = self.live.get(job_id)
        if live is not None and live.attempt == attempt:
            del self.live[job_id]
            self.touch()

    def touch(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    def statistics(self) -> RunnerStats:
        return RunnerStats(self.node_id, self.gpu_backend, self.gpus, len(self.live), self.started,
                           self.ended, self.adopted)


def host_facts(note: str) -> dict[str, Any]:
    """What the node's hello says about the machine besides its GPUs."""
    return {"hostname": platform.node(), "platform": platform.platform(terse=True), "cpu_count": os.cpu_count(),
            "memory_mb": psutil.virtual_memory().total // (1024 * 1024), "gpu_backend_note": note}


LauncherFactory = Callable[[], contextlib.AbstractAsyncContextManager[Launching]]  # open_launcher, or a FakeLauncher's
Blocking = Callable[..., Awaitable[Any]]  # runs a blocking call: trio.to_thread.run_sync


async def run(ctx: ActorContext[NodeContext], *, task_status: trio.TaskStatus[RunnerHandle] = trio.TASK_STATUS_IGNORED,
              launcher: LauncherFactory = open_launcher, blocking: Blocking = trio.to_thread.run_sync,
              slurm_cli: SlurmCli | None = None) -> None:
    """The actor. ``launcher`` opens the local backend's launcher, ``blocking`` runs the file
    and ``/proc`` reads, ``slurm_cli`` runs the Slurm backend's commands (in tests:
    ``gpuplaned.testing.launcher``'s ``FakeLauncher.open`` and ``inline``,
    ``gpuplaned.testing.slurm.FakeSlurm``)."""
    shared = ctx.shared
    cfg = shared.config
    link = shared.link
    if cfg.node.runner == "slurm":  # Slurm places the GPUs: the node offers pooled capacity
        pooled = PooledCapacity(cfg.slurm.gpus_per_job, cfg.slurm.max_jobs)
        log.info("runner: Slurm (up to %d GPUs a job, %d jobs at once)", pooled.gpus_per_job, pooled.max_jobs)
        hello = Hello(cfg.node.name, gpuplaned.__version__, (), cfg.node.labels, cfg.node.max_cpu_jobs, "slurm",
                      host_facts("GPUs are placed by Slurm"), runner="slurm", pooled=pooled,
                      sdk_server=cfg.slurm.server_url)
        # Imported here: a node that runs its jobs itself never loads it (~40 ms of every start).
        from gpuplaned.backends.slurm import open_slurm_backend

        backend_cm = open_slurm_backend(cfg, shared.conditions, blocking, slurm_cli)
    else:
        inv = await blocking(inventory, cfg.node.gpus)
        if inv.note:
            log.info("GPUs: %s; running as a CPU-only node", inv.note)
        log.info("GPUs: %d from the %s backend", len(inv.gpus), inv.backend)
        hello = Hello(cfg.node.name, gpuplaned.__version__, inv.gpus, cfg.node.labels, cfg.node.max_cpu_jobs,
                      inv.backend, host_facts(inv.note))
        backend_cm = _local_backend(cfg.home, cfg.node.name, launcher, blocking)
    # Messages left in the inbox were meant for an earlier incarnation; the hello below
    # lists every job this node should know about, so they are dropped, not replayed
    # (a replayed Dispatch could start a job the server has since handed back to the queue).
    while True:
        try:
            stale = ctx.inbox.receive_nowait()
        except trio.WouldBlock:
            break
        log.info("runner drops %r from before its restart; the hello reconciles it", stale)
    async with backend_cm as backend:
        ok = await link.hello(hello, ctx.ports[ctx.name])
        handle = RunnerHandle(ok.node_id, hello.gpu_backend, len(hello.gpus))
        try:
            async with trio.open_nursery() as nursery:
                runner = _Runner(ctx, backend, handle, nursery, blocking)
                for active in ok.active:
                    nursery.start_soon(runner.adopt, active)
                task_status.started(handle)
                async for message in ctx.inbox:
                    if isinstance(message, Dispatch):
                        nursery.start_soon(runner.start_job, message.job)
                    elif isinstance(message, Cancel):
                        runner.cancel(message)
                    elif isinstance(message, Reconcile):
                        runner.reconcile(message)
                    elif isinstance(message, SweepThrottle):
                        nursery.start_soon(backend.throttle, message.sweep_id, message.max_parallel)
                    else:
                        log.warning("runner ignores unexpected message %r", message)
        finally:
            link.goodbye(ok.node_id)


@contextlib.asynccontextmanager
async def _local_backend(home: Path, node_name: str, launcher: LauncherFactory,
                         blocking: Blocking) -> AsyncIterator[RunnerBackend]:
    async with launcher() as opened:
        backend = LocalBackend(home, node_name, opened, blocking)
        try:
            yield backend
        finally:
            backend.close()


@attrs.define
class _Run:
    """One attempt on this node: its machine and what the shell keeps for it."""

    machine: a.Attempt
    job_dir: Path
    gpu_indexes: tuple[int, ...]
    pgid: int | None = None
    pid: int | None = None  # the job's main process, once it is live (a reconcile reports it again)
    run_id: str | None = None
    cwd: str | None = None
    env: Mapping[str, str] = attrs.field(factory=dict)
    # An EVALUATE job's: its result file is read at its end (None: adopted, so not known;
    # read if it is there).
    evaluation: bool | None = False


def _live_job(job_id: str, attempt: int, running: Running, gpu_indexes: tuple[int, ...], run_id: str | None,
              env: Mapping[str, str]) -> LiveJob:
    return LiveJob(job_id, attempt, running.supervisor_pid or 0, running.supervisor_start_time, running.pgid,
                   gpu_indexes, run_id, running.cwd, env, pid=running.pid, started_at=running.started_at)


class _Runner:
    """Carries out the attempts' effects (see ``_perform``) and feeds back what they found."""

    def __init__(self, ctx: ActorContext[NodeContext], backend: RunnerBackend, handle: RunnerHandle,
                 nursery: trio.Nursery, blocking: Blocking) -> None:
        self.shared = ctx.shared
        self.backend = backend
        self.blocking = blocking
        self.handle = handle
        self.nursery = nursery
        cfg = ctx.shared.config
        self.environment = JobEnvironment.of(cfg.runtime_dir, cfg.home, ctx.shared.endpoint.portfile().endpoint,
                                             cfg.fake_gpu_dir if cfg.node.gpus.kind == "fake" else None)
        self.runs: dict[tuple[str, int], _Run] = {}  # by (job id, attempt), until reported ended

    async def start_job(self, spec: JobSpecWire) -> None:
        job_dir = self.backend.attempt_dir(spec.job_id, spec.attempt)  # its supervisor creates it
        env = self.environment.for_job(spec)
        if spec.evaluation:
            env[EVAL_RESULT_VAR] = str(result_path(job_dir))
        request = SpawnRequest(
            id=f"{spec.job_id}/{spec.attempt}", job_dir=str(job_dir), argv=list(spec.argv), cwd=spec.cwd,
            env=env, timeout_s=spec.timeout_s, grace_s=spec.stop_grace_s,
            job_id=spec.job_id, attempt=spec.attempt,
        )
        run = _Run(a.Attempt(spec.job_id, spec.attempt), job_dir, tuple(spec.gpu_indexes),
                   run_id=spec.run_id, cwd=spec.cwd, env=spec.env, evaluation=spec.evaluation)
        await self._drive(run, a.Start(AttemptRequest(request, spec.gpus, spec.array)))

    async def adopt(self, active: ActiveJob) -> None:
        job_dir = self.backend.attempt_dir(active.job_id, active.attempt)
        run = _Run(a.Attempt(active.job_id, active.attempt), job_dir, tuple(active.gpu_indexes),
                   run_id=active.run_id, evaluation=None)
        found = await self.backend.adopt(active.job_id, active.attempt, active.cancel_requested,
                                         sweep_limit=active.sweep_max_parallel if active.sweep_id else None)
        if found.problem is not None:
            log.error("job %s attempt %d: %s", active.job_id, active.attempt, found.problem)
        elif found.waiting is not None:
            log.info("re-adopted job %s attempt %d, still queued: %s", active.job_id, active.attempt, found.waiting)
        elif found.running is None:
            log.info("job %s attempt %d never started here; back to the queue", active.job_id, active.attempt)
        elif found.alive and not found.ended:
            log.info("re-adopted job %s attempt %d (pid %s)", active.job_id, active.attempt, found.running.pid)
        await self._drive(run, found)
        key = (active.job_id, active.attempt)
        if isinstance(found.running, Running) and key not in self.handle.recent_ends:  # it ended while we were away
            # Its process is gone: its variables are the job's as submitted.
            self.handle.ended_here(_live_job(active.job_id, active.attempt, found.running, run.gpu_indexes,
                                             active.run_id, dict(active.env)))

    def cancel(self, message: Cancel) -> None:
        run = self.runs.get((message.job_id, message.attempt))
        if run is None:
            log.info("cancel of %s attempt %d: not running here", message.job_id, message.attempt)
            return
        for effect in self._feed(run, a.CancelAsked()):
            self.nursery.start_soon(self._perform, run, effect)  # cancel effects only: nothing to feed back

    def reconcile(self, message: Reconcile) -> None:
        """The link is back after an outage (role agent): the server's view of this node's jobs
        meets ours. A job still running here is reported RUNNING again (the server marked it
        LOST meanwhile); one this runner does not track is adopted as at start (which reports
        how it ended, or hands it back); a cancel the server holds for a job is carried out."""
        for active in message.active:
            run = self.runs.get((active.job_id, active.attempt))
            if run is None:
                self.nursery.start_soon(self.adopt, active)
                continue
            if run.machine.live:
                status = JobStatus(active.job_id, active.attempt, NodeReport.RUNNING, pid=run.pid)
                self.nursery.start_soon(self.shared.link.report, self.handle.node_id, status)
            if active.cancel_requested and run.machine.cancels == 0:  # a second cancel would escalate
                self.cancel(Cancel(active.job_id, active.attempt))

    # -- the machine ----------------------------------------------------------------------

    async def _drive(self, run: _Run, first: a.Input) -> None:
        """Feed ``first``, then carry out the effects in order, feeding back what each found,
        until the attempt has nothing left to do."""
        key = (run.machine.job_id, run.machine.attempt)
        self.runs[key] = run
        try:
            effects = deque(self._feed(run, first))
            while effects:
                found = await self._perform(run, effects.popleft())
                if found is not None:
                    effects.extend(self._feed(run, found))
        finally:
            self.runs.pop(key, None)
            self._unlist(run)

    def _feed(self, run: _Run, event: a.Input) -> list[a.Effect]:
        machine = run.machine
        was_live = machine.live
        effects = machine.feed(event)
        if machine.live and not was_live:
            self._list(run, event)
        elif was_live and not machine.live:
            ended = self.handle.live.get(machine.job_id)
            if ended is not None and ended.attempt == machine.attempt:
                self.handle.ended_here(ended)
            self._unlist(run)
            self.handle.ended += 1
        return effects

    def _list(self, run: _Run, event: a.Input) -> None:
        """The attempt is live: the monitor sees it (its GPUs, its processes)."""
        machine = run.machine
        running: Running | None = None
        if isinstance(event, a.Started) and isinstance(event.started.running, Running):
            self.handle.started += 1
            running = event.started.running
        elif isinstance(event, a.NowRunning) and isinstance(event.running, Running):
            self.handle.started += 1
            running = event.running
        elif isinstance(event, a.Adopt) and isinstance(event.running, Running):
            self.handle.adopted += 1
            running = event.running
            run.cwd = running.cwd
        if running is None:
            running = Running(None, None, None)
        run.pgid = running.pgid
        run.pid = running.pid
        self.handle.list_live(LiveJob(machine.job_id, machine.attempt, running.supervisor_pid or 0,
                                      running.supervisor_start_time, run.pgid, run.gpu_indexes, run.run_id, run.cwd,
                                      run.env, started_here=not isinstance(event, a.Adopt), pid=running.pid,
                                      started_at=running.started_at))

    def _unlist(self, run: _Run) -> None:
        self.handle.unlist_live(run.machine.job_id, run.machine.attempt)

    async def _perform(self, run: _Run, effect: a.Effect) -> a.Input | None:
        """Carry out one effect; returns what it found, for the machine, if anything."""
        machine = run.machine
        job_id, attempt = machine.job_id, machine.attempt
        backend = self.backend
        match effect:
            case a.Launch(request):
                try:
                    started: Started = await backend.start(request)
                except StartRefused as exc:
                    log.warning("job %s attempt %d did not start: %s", job_id, attempt, exc.message)
                    return a.StartFailed(exc.message)
                return a.Started(started)
            case a.Report(status):
                if status.status in _ENDS and run.evaluation is not False:
                    status = await self._with_eval_result(run, status)
                # A start is not waited on: the job's end, reported later, is applied after it
                # all the same, and a short job's two share one transaction.
                if status.status is NodeReport.RUNNING and self.shared.link.report_soon(self.handle.node_id, status):
                    return None
                await self.shared.link.report(self.handle.node_id, status)
            case a.FollowLogs(resume):
                self.shared.logs.follow(FollowLogs(job_id, attempt, str(run.job_dir), resume=resume))
            case a.UnfollowLogs():
                self.shared.logs.follow(LogsEnded(job_id, attempt))
            case a.Watch(handle):
                return await backend.watch(handle)
            case a.WatchSupervisor(handle):
                return await backend.watch_supervisor(handle)
            case a.Stop(handle, through_starter):
                await backend.cancel(handle, through_starter=through_starter)
            case a.FollowRemains(handle, started_here):
                return await backend.follow_remains(handle, started_here, lambda: machine.cancels)
            case a.ReadEnd(record):
                return await backend.read_end(job_id, attempt, record, machine.handle)
            case _:
                raise AssertionError(f"unknown effect {effect!r}")
        return None

    async def _with_eval_result(self, run: _Run, status: JobStatus) -> JobStatus:
        """An evaluation's end carries what its result file holds (none: the server decides)."""
        found = await self.blocking(read_result, run.job_dir)
        return status if found is None else attrs.evolve(status, eval_result=found)
