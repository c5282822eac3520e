"""The monitor actor: the node's GPUs and host, read every ``monitor.sample_interval_s``.

Owns: the GPU backend (nvml, fake or none; opened once) and the host sampler.
Inputs: none; it reads the runner's live jobs (which GPUs they own, their process groups).
Outputs, through the node link: a ``NodeSnapshot`` every sample (GPU readings with each GPU
process attributed to its job or marked foreign, host readings, per-job GPU memory, and the
node's verdict on new work); a ``SysMetrics`` batch every ``monitor.batch_interval_s``;
``NodeEvent``s from the node rules (``gpuplaned.domain.node_health``), and those of the changes
of the conditions the node's parts raise (``NodeContext.conditions``), which every snapshot
carries: while one holds, the node takes no new work.
Restart: permanent. A GPU that fails to read is a GPU_LOST event and a blocked slot, not a
crash; a batch the server could not take is kept and sent with the next one.
Ready: the backend is open.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import trio

from gpuplaned.config import Config
from gpuplaned.domain.node_health import DiskReading, GpuReading, HealthPolicy, NodeHealth, Reading, RunningJob
from gpuplaned.node_context import NodeContext, RunningJobs
from gpuplaned.protocol.agent import NodeEvent, NodeSnapshot, SysMetrics
from gpuplaned.runtime.context import ActorContext
from gpuplaned.telemetry.attribution import Attribution, JobGroup, attribute_processes
from gpuplaned.telemetry.backend import open_backend
from gpuplaned.telemetry.host import HostSampler
from gpuplaned.telemetry.names import node_points
from gpuplaned.telemetry.samples import GpuSample, NodeSample

log = logging.getLogger("gpuplaned.monitor")

MAX_PENDING_POINTS = 200_000  # kept for the server while it cannot take them, then the oldest go


@attrs.frozen
class MonitorStats:
    backend: str
    gpus: int
    samples: int
    last_sample_ms: float
    points_sent: int
    points_pending: int
    batches_failed: int


@attrs.define
class MonitorHandle:
    backend: str
    gpus: int
    samples: int = 0
    last_sample_ms: float = 0.0
    points_sent: int = 0
    points_pending: int = 0
    batches_failed: int = 0

    def statistics(self) -> MonitorStats:
        return MonitorStats(self.backend, self.gpus, self.samples, round(self.last_sample_ms, 3), self.points_sent,
                            self.points_pending, self.batches_failed)


def health_policy(cfg: Config) -> HealthPolicy:
    m = cfg.monitor
    return HealthPolicy(disk_low_fraction=m.disk_low_percent / 100, idle_util_pct=m.idle_util_percent,
                        idle_memory_fraction=m.idle_memory_percent / 100, idle_after_ms=int(m.idle_minutes * 60_000),
                        foreign_gpu_busy=m.foreign_gpu_busy, foreign_min_memory_mb=m.foreign_min_memory_mb)


async def run(ctx: ActorContext[NodeContext], *, task_status: trio.TaskStatus[MonitorHandle] = trio.TASK_STATUS_IGNORED) -> None:
    cfg = ctx.shared.config
    backend = await trio.to_thread.run_sync(lambda: open_backend(cfg.node.gpus, fake_claims_dir=cfg.fake_gpu_dir))
    try:
        jobs_dir = cfg.home / "jobs"
        await trio.to_thread.run_sync(lambda: jobs_dir.mkdir(parents=True, exist_ok=True))  # watched from the start
        host = HostSampler({"data": cfg.home, "jobs": jobs_dir})
        gpus = backend.inventory()
        handle = MonitorHandle(backend.kind, len(gpus))
        log.info("monitoring %d GPU(s) (%s backend%s) every %gs", len(gpus), backend.kind,
                 f": {backend.note}" if backend.note else "", cfg.monitor.sample_interval_s)
        monitor = _Monitor(ctx, backend, host, handle)
        task_status.started(handle)
        await monitor.loop()
    finally:
        await trio.to_thread.run_sync(backend.close)


class _Monitor:
    def __init__(self, ctx: ActorContext[NodeContext], backend: Any, host: HostSampler, handle: MonitorHandle) -> None:
        self.ctx = ctx
        self.cfg = ctx.shared.config
        self.link = ctx.shared.link
        self.backend = backend
        self.host = host
        self.handle = handle
        self.rules = NodeHealth(health_policy(self.cfg))
        self.gpus = backend.inventory()
        self.pending: list[tuple[str, int, float]] = []
        self.seq: int | None = None  # the pending batch's sequence number: its first sample's time

    async def loop(self) -> None:
        period = self.cfg.monitor.sample_interval_s
        next_flush = trio.current_time() + self.cfg.monitor.batch_interval_s
        next_sample = trio.current_time()
        while True:
            await trio.sleep_until(next_sample)
            next_sample = max(next_sample + period, trio.current_time())  # late samples are skipped, not bunched
            runner = self.ctx.shared.runner()
            if runner is None:
                continue  # no node registered yet (or the runner is restarting)
            await self._sample(runner)
            if trio.current_time() >= next_flush:
                next_flush = trio.current_time() + self.cfg.monitor.batch_interval_s
                await self._flush(runner.node_id)

    async def _sample(self, runner: RunningJobs) -> None:
        jobs = [JobGroup(live.job_id, live.pgid, live.gpu_indexes, sid=live.shim_pid)
                for live in list(runner.live.values()) if live.pgid is not None]
        busy = {index: 1.0 for job in jobs for index in job.gpu_indexes}
        started = time.perf_counter()
        sample, attribution = await trio.to_thread.run_sync(self._read, busy, jobs)
        self.handle.last_sample_ms = (time.perf_counter() - started) * 1000
        self.handle.samples += 1
        events, health = self.rules.update(_reading(sample, attribution, jobs))
        node_id = runner.node_id
        conditions = self.ctx.shared.conditions
        changes = conditions.pending()
        if changes:  # before the snapshot that shows them: the event of a change comes first
            await self.link.events(node_id, changes)
            conditions.sent(changes)
        await self.link.snapshot(node_id, snapshot_of(sample, attribution, jobs, health, conditions.current()))
        if events:
            await self.link.events(node_id, [NodeEvent(e.type, e.severity, e.message, sample.ts_ms, e.job_id,
                                                       dict(e.context)) for e in events])
        if self.seq is None:
            self.seq = sample.ts_ms
        self.pending += [(name, sample.ts_ms, value) for name, value in node_points(sample)]
        if len(self.pending) > MAX_PENDING_POINTS:
            del self.pending[:len(self.pending) - MAX_PENDING_POINTS]
        self.handle.points_pending = len(self.pending)

    def _read(self, busy: dict[int, float], jobs: list[JobGroup]) -> tuple[NodeSample, Attribution]:
        """Runs on a worker thread: NVML, psutil and /proc calls all block."""
        ts = int(time.time() * 1000)
        try:
            gpus = self.backend.sample(busy)
        except Exception as exc:  # noqa: BLE001 - a driver gone bad must not become a crash loop
            gpus = tuple(GpuSample(g.index, g.uuid, g.model, error=f"gpu_lost: the backend failed: {exc}")
                         for g in self.gpus)
        sample = NodeSample(ts, gpus, self.host.sample(), self.backend.kind)
        return sample, attribute_processes(gpus, jobs)

    async def _flush(self, node_id: str) -> None:
        if not self.pending or self.seq is None:
            return
        batch = SysMetrics(self.seq, tuple(self.pending))
        try:
            await self.link.metrics(node_id, batch)
        except Exception as exc:  # noqa: BLE001 - keep the points; the next flush tries again
            self.handle.batches_failed += 1
            log.warning("could not store %d node metric points (kept for the next batch): %s", len(batch.points), exc)
            return
        self.handle.points_sent += len(batch.points)
        self.pending = []
        self.seq = None
        self.handle.points_pending = 0


def _reading(sample: NodeSample, attribution: Attribution, jobs: Sequence[JobGroup]) -> Reading:
    host = sample.host
    return Reading(
        ts_ms=sample.ts_ms,
        gpus=tuple(GpuReading(g.index, g.utilization_pct, g.memory_used_mb, g.memory_total_mb, g.error)
                   for g in sample.gpus),
        disks=tuple(DiskReading(d.label, d.path, d.free_bytes, d.total_bytes) for d in (host.disks if host else ())),
        jobs=tuple(RunningJob(j.job_id, tuple(sorted(j.gpu_indexes))) for j in jobs),
        violations=tuple((v.job_id, v.gpu_index, v.pid) for v in attribution.violations),
        foreign=tuple((p.gpu_index, p.pid, p.gpu_memory_mb) for p in attribution.foreign),
    )


def snapshot_of(sample: NodeSample, attribution: Attribution, jobs: Sequence[JobGroup], health: Any,
                raised: Mapping[str, str] | None = None) -> NodeSnapshot:
    """The API's view of one sample: GPUs with their owners and attributed processes; ``raised``:
    the conditions the node's parts hold (name -> message), which stop it accepting new work."""
    owner_of = {index: job.job_id for job in jobs for index in job.gpu_indexes}
    procs: dict[int, list[dict[str, Any]]] = {}
    for p in attribution.processes:
        if not p.gone:
            procs.setdefault(p.gpu_index, []).append(
                {"pid": p.pid, "gpu_memory_mb": p.gpu_memory_mb, "job_id": p.job_id, "foreign": p.foreign})
    gpus = []
    for g in sample.gpus:
        row = attrs.asdict(g, recurse=True)
        row["throttle_reasons"] = list(g.throttle_reasons)
        row["owner_job_id"] = owner_of.get(g.index)
        row["processes"] = procs.get(g.index, [])
        gpus.append(row)
    host = attrs.asdict(sample.host, recurse=True) if sample.host else None
    job_rows = tuple({"job_id": j.job_id, "gpu_indexes": sorted(j.gpu_indexes),
                      "gpu_memory_mb": attribution.job_gpu_memory_mb.get(j.job_id, 0)} for j in jobs)
    raised = dict(raised or {})
    return NodeSnapshot(sample.ts_ms, sample.backend, tuple(gpus), host, job_rows,
                        (*health.conditions, *sorted(raised)), health.accepting and not raised, health.blocked_gpus,
                        raised)
