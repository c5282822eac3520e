"""The runner's handle as the node's readers see it (``node_context.RunningJobs``), held in
memory: what a test of the monitor, ckptwatch or tbtail sets as the live jobs and the
attempts that ended lately."""

from __future__ import annotations

import attrs
import trio


@attrs.frozen
class LiveJob:
    """One live job (``node_context.LiveJobView``)."""

    job_id: str
    attempt: int
    run_id: str | None
    cwd: str | None
    env: dict[str, str] = attrs.Factory(dict)
    pgid: int | None = None
    gpu_indexes: tuple[int, ...] = ()
    shim_pid: int = 0
    started_here: bool = False
    pid: int | None = None
    started_at: float | None = None


@attrs.define
class MemoryRunner:
    """The runner's handle (``node_context.RunningJobs``): edit ``live`` and ``recent_ends``,
    then call ``touch()`` as the runner does (a reader that missed it looks again within
    its fallback interval)."""

    node_id: str = "nd_test"
    live: dict[str, LiveJob] = attrs.Factory(dict)
    recent_ends: dict[tuple[str, int], LiveJob] = attrs.Factory(dict)
    changed: trio.Event = attrs.Factory(trio.Event)
    ends_listed: int = 0
    kept: int | None = None  # how many ends ``end`` keeps listed (the runner's ENDS_KEPT); None: all

    def touch(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    def end(self, job: LiveJob) -> None:
        """``job`` ended, as the runner lists it: out of ``live``, last of ``recent_ends``, which
        keeps the last ``kept``; then ``touch()``."""
        self.live.pop(job.job_id, None)
        self.recent_ends.pop((job.job_id, job.attempt), None)
        self.recent_ends[(job.job_id, job.attempt)] = job
        while self.kept is not None and len(self.recent_ends) > self.kept:
            del self.recent_ends[next(iter(self.recent_ends))]
        self.ends_listed += 1
        self.touch()
