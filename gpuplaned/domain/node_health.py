"""Node rules over the monitor's readings: events, conditions and which GPUs to keep free.

Pure: the monitor feeds one ``Reading`` per sample (wall-clock ms included) and gets back
the events to record and the node's health. Each rule fires on a change, not on every
sample: a full disk is one DISK_LOW event, then one DISK_OK when it clears.

- DISK_LOW (critical): a watched disk (data, job dirs) under ``disk_low_fraction`` free.
  The node takes no new work until every disk is back above the threshold plus a margin
  (so a disk hovering at the line does not flap); then DISK_OK (info).
- GPU_LOST (critical): the backend cannot read a GPU (fell off the bus, driver error).
  That GPU takes no new work until it reads again (GPU_RECOVERED, info).
- GPU_PINNING_VIOLATION (warning): a job's process uses a GPU it was not assigned; once per
  job and GPU.
- GPU_UNDERUTILIZED (warning): a running job's GPUs all under ``idle_util_pct`` utilization
  and ``idle_memory_fraction`` memory for ``idle_after_ms``; once, re-armed when the job
  uses its GPUs again.
- A GPU process that belongs to no job is foreign. A GPU whose foreign processes hold
  ``foreign_min_memory_mb`` or more (a process whose memory cannot be read counts as that
  much) is in use outside GPUPlane: the node shows FOREIGN_GPU_PROCESS and, with
  ``foreign_gpu_busy``, that GPU takes no new work. Less is a desktop's display server or a
  monitoring tool, and blocks nothing (``gpuplaned.domain.gpu_free``: the rules of a free GPU).
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from gpuplaned.domain.diagnosis import evidence
from gpuplaned.domain.gpu_free import ForeignProcess, foreign_blocks

DISK_LOW = "DISK_LOW"
DISK_OK = "DISK_OK"
GPU_LOST = "GPU_LOST"
GPU_RECOVERED = "GPU_RECOVERED"
GPU_PINNING_VIOLATION = "GPU_PINNING_VIOLATION"
GPU_UNDERUTILIZED = "GPU_UNDERUTILIZED"
FOREIGN_GPU_PROCESS = "FOREIGN_GPU_PROCESS"  # a condition, not an event


@attrs.frozen
class HealthPolicy:
    disk_low_fraction: float = 0.05
    disk_clear_margin: float = 0.01
    idle_util_pct: float = 20.0
    idle_memory_fraction: float = 0.30
    idle_after_ms: int = 10 * 60 * 1000
    foreign_gpu_busy: bool = True
    foreign_min_memory_mb: int = 1024


@attrs.frozen
class GpuReading:
    index: int
    utilization_pct: float | None
    memory_used_mb: float | None
    memory_total_mb: float | None
    error: str | None = None


@attrs.frozen
class DiskReading:
    label: str
    path: str
    free_bytes: int | None
    total_bytes: int | None


@attrs.frozen
class RunningJob:
    job_id: str
    gpu_indexes: tuple[int, ...]


@attrs.frozen
class Reading:
    ts_ms: int
    gpus: tuple[GpuReading, ...]
    disks: tuple[DiskReading, ...]
    jobs: tuple[RunningJob, ...]  # RUNNING on this node now
    violations: tuple[tuple[str, int, int], ...] = ()  # (job id, GPU index, pid)
    foreign: tuple[tuple[int, int, int | None], ...] = ()  # (GPU index, pid, MiB of GPU memory or None)


@attrs.frozen
class HealthEvent:
    type: str
    severity: str  # info | warning | critical
    message: str
    job_id: str | None = None
    context: dict[str, object] = attrs.field(factory=dict)


@attrs.frozen
class Health:
    conditions: tuple[str, ...]  # sorted; empty when all is well
    accepting: bool  # False: the scheduler gives this node no new work
    blocked_gpus: tuple[int, ...]  # free slots the scheduler must not hand out


class NodeHealth:
    """Remembers what has been reported, so each rule speaks on changes only."""

    def __init__(self, policy: HealthPolicy | None = None) -> None:
        self.policy = policy or HealthPolicy()
        self._low_disks: set[str] = set()
        self._lost_gpus: set[int] = set()
        self._violations_seen: set[tuple[str, int]] = set()
        self._idle_since: dict[str, int] = {}
        self._idle_reported: set[str] = set()

    def update(self, reading: Reading) -> tuple[list[HealthEvent], Health]:
        events: list[HealthEvent] = []
        events += self._disks(reading.disks)
        events += self._gpus_lost(reading.gpus)
        events += self._pinning(reading.violations)
        events += self._underutilized(reading)
        foreign_gpus = self._foreign_in_use(reading.foreign)
        conditions = set()
        if self._low_disks:
            conditions.add(DISK_LOW)
        if self._lost_gpus:
            conditions.add(GPU_LOST)
        if foreign_gpus:
            conditions.add(FOREIGN_GPU_PROCESS)
        blocked = set(self._lost_gpus)
        if self.policy.foreign_gpu_busy:
            blocked |= foreign_gpus
        health = Health(tuple(sorted(conditions)), accepting=not self._low_disks, blocked_gpus=tuple(sorted(blocked)))
        return events, health

    def _foreign_in_use(self, foreign: Sequence[tuple[int, int, int | None]]) -> set[int]:
        """The GPUs whose foreign processes together hold at least ``foreign_min_memory_mb``
        (``gpuplaned.domain.gpu_free.foreign_blocks``)."""
        on_gpu: dict[int, list[ForeignProcess]] = {}
        for index, pid, memory_mb in foreign:
            on_gpu.setdefault(index, []).append(ForeignProcess(pid, memory_mb))
        return {index for index, processes in on_gpu.items()
                if foreign_blocks(processes, self.policy.foreign_min_memory_mb)}

    def _disks(self, disks: Sequence[DiskReading]) -> list[HealthEvent]:
        events = []
        for disk in disks:
            if not disk.total_bytes or disk.free_bytes is None:
                continue
            free = disk.free_bytes / disk.total_bytes
            context = {"disk": disk.label, "path": disk.path, "free_bytes": disk.free_bytes,
                       "total_bytes": disk.total_bytes, "free_pct": round(free * 100, 2)}
            if disk.label not in self._low_disks and free < self.policy.disk_low_fraction:
                self._low_disks.add(disk.label)
                events.append(HealthEvent(
                    DISK_LOW, "critical",
                    f"{disk.label} disk {disk.path} has {free * 100:.1f}% free (under "
                    f"{self.policy.disk_low_fraction * 100:g}%): no new jobs start on this node", context=context))
            elif disk.label in self._low_disks and free >= self.policy.disk_low_fraction + self.policy.disk_clear_margin:
                self._low_disks.discard(disk.label)
                events.append(HealthEvent(DISK_OK, "info", f"{disk.label} disk {disk.path} has {free * 100:.1f}% free again",
                                          context=context))
        return events

    def _gpus_lost(self, gpus: Sequence[GpuReading]) -> list[HealthEvent]:
        events = []
        for gpu in gpus:
            if gpu.error and gpu.index not in self._lost_gpus:
                self._lost_gpus.add(gpu.index)
                events.append(HealthEvent(GPU_LOST, "critical", f"GPU {gpu.index} cannot be read: {gpu.error}",
                                          context={"gpu_index": gpu.index, "error": gpu.error}))
            elif not gpu.error and gpu.index in self._lost_gpus:
                self._lost_gpus.discard(gpu.index)
                events.append(HealthEvent(GPU_RECOVERED, "info", f"GPU {gpu.index} reads again",
                                          context={"gpu_index": gpu.index}))
        return events

    def _pinning(self, violations: Sequence[tuple[str, int, int]]) -> list[HealthEvent]:
        events = []
        for job_id, index, pid in violations:
            if (job_id, index) in self._violations_seen:
                continue
            self._violations_seen.add((job_id, index))
            events.append(HealthEvent(
                GPU_PINNING_VIOLATION, "warning",
                f"job {job_id} (pid {pid}) uses GPU {index}, which it was not assigned", job_id=job_id,
                context={"gpu_index": index, "pid": pid}))
        return events

    def _underutilized(self, reading: Reading) -> list[HealthEvent]:
        by_index = {g.index: g for g in reading.gpus}
        running = {job.job_id for job in reading.jobs}
        for gone in set(self._idle_since) - running:
            del self._idle_since[gone]
        self._idle_reported &= running
        self._violations_seen = {v for v in self._violations_seen if v[0] in running}
        events = []
        for job in reading.jobs:
            gpus = [by_index.get(i) for i in job.gpu_indexes]
            if not gpus or any(g is None or not self._idle(g) for g in gpus):
                self._idle_since.pop(job.job_id, None)
                self._idle_reported.discard(job.job_id)
                continue
            since = self._idle_since.setdefault(job.job_id, reading.ts_ms)
            if job.job_id in self._idle_reported or reading.ts_ms - since < self.policy.idle_after_ms:
                continue
            self._idle_reported.add(job.job_id)
            minutes = (reading.ts_ms - since) / 60000
            events.append(HealthEvent(
                GPU_UNDERUTILIZED, "warning",
                f"job {job.job_id} has used its GPU(s) {','.join(map(str, job.gpu_indexes))} under "
                f"{self.policy.idle_util_pct:g}% and {self.policy.idle_memory_fraction * 100:g}% memory "
                f"for {minutes:.0f} min", job_id=job.job_id,
                context={"gpu_indexes": list(job.gpu_indexes), "idle_since": since,
                         "evidence": _idle_evidence(gpus, since, reading.ts_ms)}))
        return events

    def _idle(self, gpu: GpuReading) -> bool:
        if gpu.error or gpu.utilization_pct is None:
            return False  # unknown is not idle: never accuse a job on missing data
        if gpu.utilization_pct >= self.policy.idle_util_pct:
            return False
        if gpu.memory_used_mb is None or not gpu.memory_total_mb:
            return False
        return gpu.memory_used_mb / gpu.memory_total_mb < self.policy.idle_memory_fraction


def _idle_evidence(gpus: Sequence[GpuReading | None], since: int, now: int) -> list[dict[str, object]]:
    """Each idle GPU's utilization and memory series over the idle stretch, with the readings
    that closed it. The node does not know its own id: the server fills ``node_id`` in
    (``gpuplaned.service.api.events.record_node_events``)."""
    out: list[dict[str, object]] = []
    for gpu in gpus:
        if gpu is None:
            continue
        out.append(evidence.gpu(None, gpu.index, f"gpu{gpu.index}.utilization", [since, now], [gpu.utilization_pct]))
        out.append(evidence.gpu(None, gpu.index, f"gpu{gpu.index}.memory_used_mb", [since, now], [gpu.memory_used_mb]))
    return out
