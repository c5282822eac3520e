"""Which job of this node wrote a file: the processes each job attempt had, remembered.

A file belongs to a job on evidence, never on when it appeared (DESIGN, wave 3): a process of
the job wrote it (the pid in a TensorBoard event file's name) or held it open. The node's
readers (``tbtail``, ``ckptwatch``) each keep a ``JobProcesses`` over the attempts they follow.

A job's processes are the members of its process group (the main process's), and the other
processes of its shim's session (a launcher that made groups of its own); a session member
created before the attempt started is a leftover of an earlier job of the same shim, not
this one's. Every process seen in a job is remembered with its create time, so a writer that
exited before its file was looked at still counts. Pids are reused: a pid is evidence only
for the process that had it when the file was named (the latest one created by then).

Cheap by design: ``scan`` is one ``listdir('/proc')`` with two syscalls a process, and reads
nothing of a process that is not a job's; nothing here touches a job's process but to read
``/proc``. Synchronous, no trio: the actors run it on a worker thread.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Hashable, Iterator
from typing import Protocol

import attrs
import psutil

__all__ = ["SLACK_S", "JobProcesses", "Started"]

# Seconds: an event file's name has whole seconds, a create time is read off another clock,
# and runtime.json's start is written just after the main process was made.
SLACK_S = 2.0


@attrs.define
class _Job:
    key: Hashable
    pgid: int | None
    session: int | None
    main_pid: int | None
    started_at: float | None  # wall clock; None until runtime.json is read
    ended_at: float | None = None
    pids: dict[int, float] = attrs.Factory(dict)  # every process seen in it -> its create time


def _create_time(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except (psutil.Error, OSError):
        return None


class Started(Protocol):
    """How an attempt started: its ``runtime.json`` (``launching.job_files.Runtime``), or the
    runner's word for it (``node_context.JobStart``)."""

    @property
    def started_at(self) -> float: ...

    @property
    def pgid(self) -> int: ...

    @property
    def shim_pid(self) -> int: ...

    @property
    def pid(self) -> int: ...


class JobProcesses:
    """The processes of the attempts a reader follows, keyed by whatever the reader uses."""

    def __init__(self) -> None:
        self._jobs: dict[Hashable, _Job] = {}

    def __contains__(self, key: Hashable) -> bool:
        return key in self._jobs

    def track(self, key: Hashable, *, pgid: int | None = None, session: int | None = None,
              main_pid: int | None = None, started_at: float | None = None) -> None:
        """Follow ``key``'s processes, or complete what is known of it (runtime.json read later)."""
        job = self._jobs.setdefault(key, _Job(key, pgid, session, main_pid, started_at))
        job.pgid = pgid if pgid is not None else job.pgid
        job.session = session if session is not None else job.session
        job.main_pid = main_pid if main_pid is not None else job.main_pid
        job.started_at = started_at if started_at is not None else job.started_at

    def started(self, key: Hashable, start: Started) -> None:
        """``track`` all that ``start`` tells of ``key``: its group, its shim's session, its main
        process and when it started."""
        self.track(key, pgid=start.pgid, session=start.shim_pid, main_pid=start.pid, started_at=start.started_at)

    def ended(self, key: Hashable, at: float) -> None:
        """``key`` ended at wall time ``at``: its pids are evidence only for files named before."""
        job = self._jobs.get(key)
        if job is not None and job.ended_at is None:
            job.ended_at = at

    def live_only(self, keys: Collection[Hashable], at: float) -> None:
        """The jobs not in ``keys`` have ended, at ``at`` at the latest."""
        for key in self._jobs.keys() - set(keys):
            self.ended(key, at)

    def keep(self, keys: Collection[Hashable]) -> None:
        """Forget every job but ``keys``: what the reader follows, and what the runner still lists."""
        for key in self._jobs.keys() - set(keys):
            del self._jobs[key]

    def scan(self) -> None:
        """Remember every process the live jobs have now: one pass over ``/proc``."""
        groups, sessions = self._live()
        if not groups and not sessions:
            return
        for pid in _pids():
            job = self._member(pid, groups, sessions)
            if job is not None and pid not in job.pids:
                created = _create_time(pid)
                if created is not None and self._fits(job, pid, created):
                    job.pids[pid] = created

    def wrote(self, pid: int, at: float) -> Hashable | None:
        """The job whose process had ``pid`` at wall time ``at`` (a file's name time), or None."""
        created = _create_time(pid)
        if created is not None and created <= at + SLACK_S:  # that process was there: it, or nothing
            return self._job_of(pid, created)
        best: tuple[float, Hashable] | None = None  # the writer is gone: the latest that had the pid
        for key, job in self._jobs.items():
            had = job.pids.get(pid)
            if had is None and pid == job.main_pid and job.started_at is not None:
                had = job.started_at
            if had is None or had > at + SLACK_S:
                continue
            if job.ended_at is not None and at > job.ended_at + SLACK_S:
                continue
            if best is None or had > best[0]:
                best = (had, key)
        return None if best is None else best[1]

    def holding(self, path: str) -> Hashable | None:
        """The live job one of whose processes has ``path`` open now, or None."""
        target = os.path.realpath(path)
        for key in list(self._jobs):
            if any(target == p for p, _ in self.open_files(key)):
                return key
        return None

    def open_files(self, key: Hashable) -> Iterator[tuple[str, str]]:
        """(path, mode) of the files the live job's processes hold open now."""
        job = self._jobs.get(key)
        if job is None or job.ended_at is not None:
            return
        for pid, created in list(job.pids.items()):
            try:
                proc = psutil.Process(pid)
                if abs(proc.create_time() - created) > SLACK_S:
                    continue  # the pid is another process's now
                files = proc.open_files()
            except (psutil.Error, OSError):
                continue
            for f in files:
                yield f.path, f.mode

    def _job_of(self, pid: int, created: float) -> Hashable | None:
        """The job of the process ``pid`` created at ``created`` (alive now), remembered or found now."""
        found: tuple[float, Hashable] | None = None
        for key, job in self._jobs.items():
            had = job.pids.get(pid)
            mine = had is not None and abs(had - created) <= SLACK_S
            # The main process is the job's by record (runtime.json), whenever it was made.
            mine = mine or (pid == job.main_pid and job.started_at is not None and created <= job.started_at + SLACK_S)
            if mine and (found is None or (job.started_at or 0.0) > found[0]):
                found = (job.started_at or 0.0, key)
        if found is not None:
            return found[1]
        job = self._member(pid, *self._live())
        if job is None or not self._fits(job, pid, created):
            return None
        job.pids[pid] = created
        return job.key

    def _live(self) -> tuple[dict[int, _Job], dict[int, _Job]]:
        """The live jobs by process group, and by shim session (once their start is known:
        a session outlives its jobs)."""
        live = [j for j in self._jobs.values() if j.ended_at is None]
        return ({j.pgid: j for j in live if j.pgid is not None},
                {j.session: j for j in live if j.session is not None and j.started_at is not None})

    @staticmethod
    def _member(pid: int, groups: dict[int, _Job], sessions: dict[int, _Job]) -> _Job | None:
        try:
            job = groups.get(os.getpgid(pid))
            if job is None and sessions:
                sid = os.getsid(pid)
                job = sessions.get(sid) if sid != pid else None  # the shim itself is no job's
        except OSError:  # gone
            return None
        return job

    @staticmethod
    def _fits(job: _Job, pid: int, created: float) -> bool:
        """A member made before the attempt started is a leftover of the shim's earlier job."""
        if job.started_at is None:  # only a group member gets here then: the group is the job's own
            return True
        return pid == job.main_pid or created >= job.started_at - SLACK_S


def _pids() -> Iterator[int]:
    try:
        names = os.listdir("/proc")
    except OSError:
        return
    for name in names:
        if name.isdigit():
            yield int(name)
