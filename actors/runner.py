"""The runner actor: starts each job through a shim, cancels it, and re-adopts jobs after a restart.

Owns: the launcher process (which forks one shim per job) and a watcher task per live job.
Inputs: ``Dispatch`` and ``Cancel`` on its inbox (from the scheduler, through the node registry).
Outputs: ``JobStatus`` reports to the server through the node link (RUNNING, then how it ended).
Restart: permanent. Jobs never depend on this actor: each runs under its own shim in its own
session, writes its output straight to files and its exit status to ``exit.json``. After a
restart (or a daemon crash) the runner says hello again; the server lists the jobs it
believes are active on this node and the runner re-adopts each one from ``runtime.json``
(pid plus process start time, so a reused pid is never taken for the job), reports those
that ended meanwhile from ``exit.json``, and hands back those that never started.
Ready: the launcher is up and the node is registered; ``started()`` passes a ``RunnerHandle``.
"""

from __future__ import annotations

import logging
import os
import platform
import signal
from pathlib import Path
from typing import Any

import attrs
import psutil
import trio
from gpuplaned.actors.logs import FollowLogs, LogsEnded, notify

import gpuplaned
from gpuplaned.cgroup import oom_kill_count
from gpuplaned.gpus import inventory
from gpuplaned.launcher import (
    CorruptRecord,
    LauncherGone,
    SpawnError,
    SpawnRequest,
    classify_failure,
    is_same_process,
    open_launcher,
    read_exit,
    read_runtime,
    signal_shim,
    tail_text,
    wait_process_exit,
)
from gpuplaned.protocol.agent import ActiveJob, Cancel, Dispatch, Hello, JobSpecWire, JobStatus
from gpuplaned.runtime.context import ActorContext
from gpuplaned.service.jobs import attempt_dir

log = logging.getLogger("gpuplaned.runner")


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


def job_environment(spec: JobSpecWire, shared: Any) -> dict[str, str]:
    """The daemon's environment, the job's own variables, then what GPUPlane sets."""
    env = dict(os.environ)
    for key in [k for k in env if k.startswith("GPUPLANE_")]:
        del env[key]
    env.update(spec.env)
    endpoint = shared.endpoint.portfile()
    env.update(
        PYTHONUNBUFFERED="1",
        # CPU-only jobs see no GPU at all rather than all of them.
        CUDA_VISIBLE_DEVICES=",".join(str(i) for i in spec.gpu_indexes),
        GPUPLANE_JOB_ID=spec.job_id,
        GPUPLANE_RUN_ID=spec.run_id,
        GPUPLANE_ATTEMPT=str(spec.attempt),
        GPUPLANE_RUNTIME_DIR=str(shared.config.runtime_dir),
        GPUPLANE_ENDPOINT=endpoint.endpoint,
        # The SDK's spool goes under the daemon's home, where the daemon replays it at start.
        GPUPLANE_HOME=str(shared.config.home),
    )
    if shared.config.node.gpus.kind == "fake":  # so a test job can pose as a GPU process
        env["GPUPLANE_FAKE_GPU_DIR"] = str(shared.config.fake_gpu_dir)
    return env


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

    async def report(self, status: JobStatus) -> None:
        await self.shared.node_link.report(self.handle.node_id, status)

    async def start_job(self, spec: JobSpecWire) -> None:
        job_dir = attempt_dir(self.home, spec.job_id, spec.attempt)  # the shim creates it
        request = SpawnRequest(
            id=f"{spec.job_id}/{spec.attempt}", job_dir=str(job_dir), argv=list(spec.argv), cwd=spec.cwd,
            env=job_environment(spec, self.shared), timeout_s=spec.timeout_s, grace_s=spec.stop_grace_s,
        )
        oom_kills_before = oom_kill_count()
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
                       spawned.pgid, tuple(spec.gpu_indexes))
        self.handle.live[spec.job_id] = live  # from here on a Cancel finds it
        started_ms = int(spawned.started_at * 1000) if spawned.started_at is not None else None
        await self.report(JobStatus(spec.job_id, spec.attempt, "RUNNING", pid=spawned.pid, at_ms=started_ms))
        if key in self.pending_cancels:  # cancelled while it was starting
            self.pending_cancels.discard(key)
            signal_shim(live.shim_pid, live.shim_start_time, signal.SIGTERM)
        await self.watch(live, job_dir)

    async def watch(self, live: LiveJob, job_dir: Path, *, adopted: bool = False) -> None:
        self.handle.live[live.job_id] = live
        notify(self.ctx, FollowLogs(live.job_id, live.attempt, str(job_dir), resume=adopted))
        try:
            await wait_process_exit(live.shim_pid, live.shim_start_time)
        finally:
            self.handle.live.pop(live.job_id, None)
        notify(self.ctx, LogsEnded(live.job_id, live.attempt))
        self.handle.ended += 1
        await self.report(await trio.to_thread.run_sync(_outcome, live, job_dir))

    async def adopt(self, active: ActiveJob) -> None:
        job_dir = attempt_dir(self.home, active.job_id, active.attempt)
        try:
            runtime = await trio.to_thread.run_sync(read_runtime, job_dir)
        except CorruptRecord as exc:
            log.error("job %s attempt %d: %s", active.job_id, active.attempt, exc)
            await self.report(JobStatus(active.job_id, active.attempt, "FAILED", failure_reason="LOST",
                                        message=str(exc)))
            return
        if runtime is None:
            log.info("job %s attempt %d never started here; back to the queue", active.job_id, active.attempt)
            await self.report(JobStatus(active.job_id, active.attempt, "REQUEUE", message="never started"))
            return
        live = LiveJob(active.job_id, active.attempt, runtime.shim_pid, runtime.shim_start_time, oom_kill_count(),
                       runtime.pgid, tuple(active.gpu_indexes))
        if runtime.shim_start_time is not None and is_same_process(runtime.shim_pid, runtime.shim_start_time):
            self.handle.adopted += 1
            log.info("re-adopted job %s attempt %d (pid %d)", active.job_id, active.attempt, runtime.pid)
            await self.report(JobStatus(active.job_id, active.attempt, "RUNNING", pid=runtime.pid,
                                        at_ms=int(runtime.started_at * 1000)))
            if active.cancel_requested:
                signal_shim(live.shim_pid, live.shim_start_time, signal.SIGTERM)
            await self.watch(live, job_dir, adopted=True)
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
        if not signal_shim(live.shim_pid, live.shim_start_time, signal.SIGTERM):
            log.warning("cancel of %s: its shim (pid %d) is gone", message.job_id, live.shim_pid)


def _outcome(live: LiveJob, job_dir: Path) -> JobStatus:
    """How an attempt ended, from exit.json and the stderr tail (runs on a thread)."""
    job_id, attempt = live.job_id, live.attempt
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
    succeeded = record.exit_code == 0 and record.signal is None and record.reason == "exited"
    stderr_tail = "" if succeeded else tail_text(job_dir / "stderr.log")  # only failures need it
    reason, detail = classify_failure(record, stderr_tail, oom_killed)
    at_ms = int(record.ended_at * 1000) if record.ended_at else None
    signal_name = record.signal_name
    if reason is None:
        return JobStatus(job_id, attempt, "SUCCEEDED", exit_code=record.exit_code, at_ms=at_ms)
    if reason == "CANCELLED":
        return JobStatus(job_id, attempt, "CANCELLED", exit_code=record.exit_code, signal=signal_name, at_ms=at_ms)
    return JobStatus(job_id, attempt, "FAILED", exit_code=record.exit_code, signal=signal_name,
                     failure_reason=reason, message=detail, at_ms=at_ms)
