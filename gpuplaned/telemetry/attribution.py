"""Which job owns each process seen on a GPU.

A job's processes share its process group (the shim starts the job's main process as a
group leader, and children inherit the group). A process that moved to a group of its own
(``setpgid``: some launchers and shells do) is still in the session the job was started in,
so the session id is the fall-back. A process in neither is **foreign**: someone is using a
GPU outside GPUPlane. A job's process on a GPU the job was not given is a **pinning
violation** (it ignored ``CUDA_VISIBLE_DEVICES``, or set its own).

Pure but for the two lookups, which are injectable for tests. The driver reports host pids:
a daemon inside a container with its own pid namespace would see every GPU process as gone.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import attrs

from gpuplaned.telemetry.samples import GpuSample


@attrs.frozen
class JobGroup:
    job_id: str
    pgid: int  # the job's process group: its main process's pid
    gpu_indexes: frozenset[int] = attrs.field(converter=frozenset, default=frozenset())
    # The session the job's processes live in. None: the same as pgid (a job started with
    # setsid). A job under the shim lives in the shim's session: pass the shim's pid.
    sid: int | None = None


@attrs.frozen
class GpuProcessOwner:
    gpu_index: int
    pid: int
    gpu_memory_mb: int | None
    job_id: str | None  # None: foreign, or gone
    gone: bool = False  # ended between the GPU sample and the lookup

    @property
    def foreign(self) -> bool:
        return self.job_id is None and not self.gone


@attrs.frozen
class PinningViolation:
    job_id: str
    pid: int
    gpu_index: int  # a GPU not among the job's gpu_indexes


@attrs.frozen
class Attribution:
    processes: tuple[GpuProcessOwner, ...]  # every GPU process, in sample order
    violations: tuple[PinningViolation, ...]
    # job_id -> MiB of GPU memory its processes use, summed over GPUs (unknown sizes count 0).
    # Every job passed in has an entry, so "0" and "not running on a GPU" read the same.
    job_gpu_memory_mb: dict[str, int] = attrs.field(hash=False)

    @property
    def foreign(self) -> tuple[GpuProcessOwner, ...]:
        return tuple(p for p in self.processes if p.foreign)


def attribute_processes(
    gpus: Sequence[GpuSample],
    jobs: Sequence[JobGroup],
    pgid_of: Callable[[int], int] = os.getpgid,
    sid_of: Callable[[int], int] = os.getsid,
) -> Attribution:
    by_pgid = {job.pgid: job for job in jobs}
    by_sid = {job.pgid if job.sid is None else job.sid: job for job in jobs}
    memory = dict.fromkeys((job.job_id for job in jobs), 0)
    owners: list[GpuProcessOwner] = []
    violations: list[PinningViolation] = []
    for gpu in gpus:
        for proc in gpu.processes:
            try:
                job = by_pgid.get(pgid_of(proc.pid)) or by_sid.get(sid_of(proc.pid))
            except ProcessLookupError:
                owners.append(GpuProcessOwner(gpu.index, proc.pid, proc.gpu_memory_mb, None, gone=True))
                continue
            except OSError:  # not ours to look at (another session on some systems): not a job's
                job = None
            owners.append(GpuProcessOwner(gpu.index, proc.pid, proc.gpu_memory_mb, job.job_id if job else None))
            if job is None:
                continue
            memory[job.job_id] += proc.gpu_memory_mb or 0
            if gpu.index not in job.gpu_indexes:
                violations.append(PinningViolation(job.job_id, proc.pid, gpu.index))
    return Attribution(tuple(owners), tuple(violations), memory)
