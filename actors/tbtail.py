"""The tbtail actor: reads the TensorBoard event files running jobs write, as they write them,
and sends their scalars to the server as the run's points, each exactly once.

Owns: per live job attempt, a ``gpuplaned.tensorboard.JobTail`` over the attempt's log
folders (``runs/``, ``logs/``, ``outputs/``, ``lightning_logs/`` under its working
directory, ``$TB_LOG_DIR``, and the folders it declared: ``GPUPLANE_TB_DIR``, ``os.pathsep``
between them, from ``gpuplanectl job submit --tb-dir``; for a job adopted after a restart, read
from its main process's environment), taking the files named since the attempt started
(``runtime.json`` ``started_at``) that a process of the job wrote (the pid in the file's name,
or an open descriptor for a name with none: ``gpuplaned.job_processes``, which remembers
every process seen in each attempt, looked at once a pass while jobs run), and, per file,
the cursor the server has stored (not asked for an attempt this runner started after the
tailer first looked: it has none yet). A file no attempt of the node wrote is reported once
(``UNATTRIBUTED_FILE``, info) and not read.
Inputs: the runner's live jobs (``ctx.shared.runner()``, looked at every ``TRACK_S``, so
that a short job is seen too; while there are none, on the runner's ``changed`` event) and
the attempts that ended lately (``recent_ends``: those that ended while the daemon was
away, found ended on adoption, are read to their end from the stored cursors once, after
the restart); a pass over every attempt each ``tensorboard.poll_interval_s``.
A pass reads only what each file gained (one ``pread`` at its cursor for a file that did not
grow).
Outputs, through the node link: ``TbPoints``, one per attempt and pass that read something:
per file its new points, the rewind rule's cuts and state, the cursor after them and the
stored cursor they continue from, and the records skipped past their CRC grace.
Exactly once: the server stores a file's part with its cursor in one transaction, only
from the cursor it continues from. When the server could not take a pass, or names a file
stale, the attempt's tail is dropped and made again from the stored cursors on the next
pass (``TbCursors``), so what was read but not stored is read again, and nothing twice.
An attempt that has ended is read until a pass finds nothing new, then forgotten (and not
taken in again from ``recent_ends``). One that ended while the daemon was away has the job's
variables as submitted (the server's ``ActiveJob.env``): its process can no longer be read.
Restart: permanent; a restarted tailer (or daemon) starts each attempt from its stored cursors.
Ready: immediately (nothing to open).
"""

from __future__ import annotations

import base64
import logging
import os
import socket
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import psutil
import trio

from gpuplaned.domain.event_types import UNATTRIBUTED_FILE
from gpuplaned.home import attempt_dir
from gpuplaned.job_processes import JobProcesses, Started
from gpuplaned.launching.job_files import CorruptRecord, read_runtime
from gpuplaned.node_context import JobStart, LiveJobView, NodeContext
from gpuplaned.protocol.agent import NodeEvent
from gpuplaned.protocol.tb_frames import (
    TbCursor,
    TbCursors,
    TbFile,
    TbFileState,
    TbPoints,
    TbProblem,
    TbRewind,
    TbSeries,
)
from gpuplaned.runtime.context import ActorContext

if TYPE_CHECKING:
    import numpy as np

    from gpuplaned.tensorboard import FileBatch, JobTail, Listing

log = logging.getLogger("gpuplaned.tbtail")

DECLARED_DIRS = "GPUPLANE_TB_DIR"  # in the job's environment: more folders to look in
ENDED_QUIET_PASSES = 2  # an ended attempt is forgotten after this many passes that read nothing
TRACK_S = 0.05  # s between two looks at the runner's live jobs while some are read
# With none, the runner's change event wakes the tailer; this is the look it takes anyway.
IDLE_TRACK_S = 5.0
MAX_SERIES = 200  # characters of a series name, as the store takes them (gpuplaned.tsdb.series.MAX_NAME)
MAX_REPORTED = 10_000  # unattributed files remembered as reported; past it the memory starts again


@attrs.frozen
class TbtailStats:
    attempts: int
    files: int
    points: int  # points the server took
    passes: int
    resets: int  # tails made again from the stored cursors (a refused or stale pass)


@attrs.define
class TbtailHandle:
    attempts: int = 0
    files: int = 0
    points: int = 0
    passes: int = 0
    resets: int = 0

    def statistics(self) -> TbtailStats:
        return TbtailStats(self.attempts, self.files, self.points, self.passes, self.resets)


@attrs.define
class _Attempt:
    job_id: str
    attempt: int
    run_id: str
    cwd: str
    env: Mapping[str, str]
    adopted: bool  # its variables are unknown (a job from before a restart): read from its process
    tail: JobTail | None = None  # None until runtime.json and the stored cursors are known
    stored: dict[str, TbCursor] = attrs.Factory(dict)  # path -> the cursor the server has
    ended_at: float | None = None
    quiet: int = 0  # passes since it ended that read nothing
    # Started after this tailer first looked, by this runner: nothing of it can be stored yet, so
    # its first tail starts from no cursors without asking the server (a worker-thread read a
    # job, the most of this actor's cost at hundreds of short jobs a second). Wrong, it costs
    # one pass: the server names the files stale and the tail is made again from what it has.
    fresh: bool = False
    start: JobStart | None = None  # how it started, as the runner told (None: from its runtime.json)


Blocking = Callable[..., Awaitable[Any]]  # runs a blocking call: trio.to_thread.run_sync


async def run(ctx: ActorContext[NodeContext], *, task_status: trio.TaskStatus[TbtailHandle] = trio.TASK_STATUS_IGNORED,
              blocking: Blocking = trio.to_thread.run_sync) -> None:
    """The actor. In virtual-time tests ``blocking`` runs the file reads inline
    (``gpuplaned.testing.launcher.inline``)."""
    handle = TbtailHandle()
    tailer = _Tailer(ctx, handle, blocking)
    task_status.started(handle)
    try:
        await tailer.loop()
    finally:
        tailer.close()


class _Tailer:
    def __init__(self, ctx: ActorContext[NodeContext], handle: TbtailHandle, blocking: Blocking) -> None:
        self.shared = ctx.shared
        cfg = ctx.shared.config.tensorboard
        self.interval = cfg.poll_interval_s
        self.grace = cfg.crc_grace_s
        self.home: Path = ctx.shared.config.jobs_home  # what holds the attempts' dirs
        self.host = socket.gethostname()
        self.handle = handle
        self.blocking = blocking
        self.attempts: dict[tuple[str, int], _Attempt] = {}
        self.done: set[tuple[str, int]] = set()  # ended attempts read to their end and forgotten
        self.looked = False  # whether _track has seen the runner once (attempts new after it are fresh)
        self.node_id: str | None = None
        self.processes = JobProcesses()  # who wrote what: the evidence a file is an attempt's
        self.reported: set[str] = set()  # unattributed files already reported
        self.unclaimed: list[NodeEvent] = []  # found by a pass's claims (a worker thread), to send

    def close(self) -> None:
        for watched in self.attempts.values():
            if watched.tail is not None:
                watched.tail.close()

    async def loop(self) -> None:
        while True:
            started = trio.current_time()
            self._track()
            if any(a.ended_at is None for a in self.attempts.values()):
                await self.blocking(self.processes.scan)
            await self._pass(list(self.attempts.values()))
            await self._report_unclaimed()
            self._forget_ended()
            self.handle.passes += 1
            self.handle.attempts = len(self.attempts)
            self.handle.files = sum(len(a.tail.files) for a in self.attempts.values() if a.tail is not None)
            if not self.attempts:  # nothing to read: wait for the runner's next job
                await self._wait_for_jobs()
                continue
            # The runner's live jobs are looked at far more often than the files are read: a
            # job that ends between two passes is still seen, and its files read to the end.
            while trio.current_time() + TRACK_S < started + self.interval:
                await trio.sleep(TRACK_S)
                self._track()
            await trio.sleep_until(started + self.interval)

    async def _wait_for_jobs(self) -> None:
        runner = self.shared.runner()
        with trio.move_on_after(IDLE_TRACK_S):
            while not self.attempts:
                if runner is None:
                    await trio.sleep(TRACK_S)
                    runner = self.shared.runner()
                else:
                    await runner.changed.wait()
                self._track()

    def _track(self) -> None:
        """Take in the runner's new live attempts; note the time the others ended."""
        runner = self.shared.runner()
        if runner is None:
            return
        self.node_id = runner.node_id
        keys = set()
        for job in list(runner.live.values()):
            key = (job.job_id, job.attempt)
            keys.add(key)
            # Every live job, read or not: a file of one it does not read is not unattributed.
            self.processes.track(key, pgid=job.pgid, session=job.shim_pid or None)
            if key not in self.attempts and job.run_id is not None and job.cwd is not None:
                self.attempts[key] = self._attempt(job)
        now = trio.current_time()
        ends = runner.recent_ends
        for key, job in list(ends.items()):
            if key not in self.attempts and key not in self.done and key not in keys and job.run_id is not None \
                    and job.cwd is not None:
                self.attempts[key] = attrs.evolve(self._attempt(job), ended_at=now)
        self.done.intersection_update(ends.keys())  # bounded by the runner's list
        self.processes.live_only(keys, time.time())  # wall clock: compared with the files' names
        for key, watched in self.attempts.items():
            if key not in keys and watched.ended_at is None:
                watched.ended_at = now
        self.handle.attempts = len(self.attempts)
        self.looked = True

    def _attempt(self, job: LiveJobView) -> _Attempt:
        assert job.run_id is not None and job.cwd is not None
        return _Attempt(job.job_id, job.attempt, job.run_id, job.cwd, dict(job.env), adopted=not job.env,
                        fresh=self.looked and job.started_here, start=JobStart.told(job))

    def _forget_ended(self) -> None:
        for key, watched in list(self.attempts.items()):
            if watched.ended_at is not None and watched.quiet >= ENDED_QUIET_PASSES:
                if watched.tail is not None:
                    watched.tail.close()
                del self.attempts[key]
                self.done.add(key)
        runner = self.shared.runner()
        kept: set[tuple[str, int]] = set(self.attempts)
        if runner is not None:
            kept |= set(runner.recent_ends) | {(j.job_id, j.attempt) for j in list(runner.live.values())}
        self.processes.keep(kept)  # an ended attempt's pids stay evidence while the runner lists it

    async def _pass(self, attempts: list[_Attempt]) -> None:
        """Read every attempt's files once: those not opened yet are opened first. The file
        work of all of them (runtime.json, making the tails, reading) is done in two worker
        thread calls a pass, not a few an attempt: the hand-offs cost more than most reads
        (at hundreds of short jobs a second, most of this actor's CPU)."""
        if self.node_id is None:
            return
        unopened = [w for w in attempts if w.tail is None]
        made = await self._open(unopened) if unopened else {}
        for watched in unopened:
            if id(watched) not in made:
                watched.quiet += watched.ended_at is not None  # an attempt that never started: forgotten too
        reading = [w for w in attempts if w.tail is not None or id(w) in made]
        if not reading:
            return
        polled = await self.blocking(_poll_all, [(w.tail, made.get(id(w))) for w in reading], trio.current_time())
        for watched, (tail, _) in zip(reading, polled, strict=True):
            watched.tail = tail  # every one first: a stop during the sends below closes them all
        for watched, (_, found) in zip(reading, polled, strict=True):
            await self._take(watched, found)

    async def _take(self, watched: _Attempt, found: list[FileBatch] | OSError) -> None:
        """Send what a pass read of one attempt's files."""
        if isinstance(found, OSError):  # a file it may not read: the others go on, from the stored cursors
            log.warning("TensorBoard files of job %s attempt %d: %s", watched.job_id, watched.attempt, found)
            watched.quiet += watched.ended_at is not None
            self._reset(watched)
            return
        batches = found
        if not batches:
            watched.quiet += watched.ended_at is not None
            return
        watched.quiet = 0
        files = await self.blocking(_frames, batches, dict(watched.stored))
        message = TbPoints(watched.job_id, watched.attempt, watched.run_id, tuple(files))
        try:
            answer = await self.shared.link.tb_points(self.node_id, message)
        except Exception as exc:  # noqa: BLE001 - the server could not take it: read again from what it has
            log.warning("TensorBoard points of job %s attempt %d not stored yet: %s", watched.job_id,
                        watched.attempt, exc)
            self._reset(watched)
            return
        stale = set(answer.stale)
        for part in files:
            if part.path not in stale:
                watched.stored[part.path] = part.cursor
        self.handle.points += sum(len(c) for b in batches if b.path not in stale for c in b.points.values())
        if stale:
            log.info("TensorBoard files of job %s attempt %d read again from the stored cursors: %s",
                     watched.job_id, watched.attempt, ", ".join(sorted(stale)))
            self._reset(watched)

    def _reset(self, watched: _Attempt) -> None:
        self.handle.resets += 1
        if watched.tail is not None:
            watched.tail.close()
        watched.tail = None

    async def _open(self, attempts: list[_Attempt]) -> dict[int, Callable[[Listing], JobTail]]:
        """How to make each attempt's tail, from how it started (the runner's word, else its
        runtime.json) and the server's stored cursors (by ``id()`` of the attempt; one not
        started yet, or whose cursors are not known yet, is left out: next pass). The tails are
        made on the pass's worker thread."""
        unknown = [w for w in attempts if w.start is None]
        read = iter(await self.blocking(_starts_of, self.home, unknown) if unknown else ())
        makers: dict[int, Callable[[Listing], JobTail]] = {}
        for watched in attempts:
            found = (watched.start, watched.env) if watched.start is not None else next(read)
            if found is None:
                continue  # not started yet (or its record is unreadable): next pass
            maker = await self._opened(watched, *found)
            if maker is not None:
                makers[id(watched)] = maker
        return makers

    async def _opened(self, watched: _Attempt, start: Started,
                      env: Mapping[str, str]) -> Callable[[Listing], JobTail] | None:
        since = start.started_at
        try:
            fresh, watched.fresh = watched.fresh, False  # a tail made again asks
            stored = (TbCursors(watched.job_id, watched.attempt) if fresh
                      else await self.shared.link.tb_cursors(TbCursors(watched.job_id, watched.attempt)))
        except Exception as exc:  # noqa: BLE001 - asked again next pass
            log.warning("stored TensorBoard cursors of job %s attempt %d unknown yet: %s", watched.job_id,
                        watched.attempt, exc)
            return None
        watched.env = env
        watched.adopted = watched.adopted and not env  # read once: the process may be gone by the next reset
        key = (watched.job_id, watched.attempt)
        self.processes.started(key, start)
        if watched.ended_at is not None:  # its group's id may be another's by now: never scanned
            self.processes.ended(key, time.time())
        watched.stored = {f.path: f.cursor for f in stored.files}
        # The reader (and numpy under it) is imported once a job is watched, on a worker
        # thread: an agent that runs no job does not carry it (~12 MB).
        if _TENSORBOARD not in sys.modules:
            await self.blocking(_import_tensorboard)
        from gpuplaned.tensorboard import Cursor, JobTail, log_roots

        cwd, host, grace, claim = watched.cwd, self.host, self.grace, self._claim(watched)

        def make(listing: Listing) -> JobTail:  # on the worker thread: log_roots resolves paths
            return JobTail(log_roots(cwd, env, _declared(env), resolve=listing.realpath), since=since, host=host,
                           cursors={f.path: Cursor(f.cursor.inode, f.cursor.offset) for f in stored.files},
                           rewinds=_merged(stored.files), grace=grace, claim=claim)

        return make

    def _claim(self, watched: _Attempt) -> Callable[[Path, int, int | None], bool]:
        """The attempt's test for a file it found (run by ``JobTail.poll``, on a worker thread)."""
        key = (watched.job_id, watched.attempt)

        def claim(path: Path, named_at: int, pid: int | None) -> bool:
            owner = self.processes.wrote(pid, named_at) if pid is not None else self.processes.holding(os.fspath(path))
            if owner is None:
                self._unclaimed(os.fspath(path), pid)
            return owner == key

        return claim

    def _unclaimed(self, path: str, pid: int | None) -> None:
        if path in self.reported:
            return
        if len(self.reported) >= MAX_REPORTED:
            self.reported.clear()
        self.reported.add(path)
        by = f"process {pid}, which was no job's" if pid is not None else "a process of no job (its name has no pid)"
        self.unclaimed.append(NodeEvent(
            UNATTRIBUTED_FILE, "info", f"TensorBoard file {path} not read: written by {by} on this node",
            int(time.time() * 1000), context={"path": path, "pid": pid, "kind": "tensorboard"}))

    async def _report_unclaimed(self) -> None:
        """Send the passes' unattributed files (once each: one the server could not take is dropped)."""
        if not self.unclaimed or self.node_id is None:
            return
        events, self.unclaimed = self.unclaimed, []
        try:
            await self.shared.link.events(self.node_id, events)
        except Exception as exc:  # noqa: BLE001 - an info event: logged here instead
            log.info("unattributed TensorBoard files not reported (%s): %s", exc, ", ".join(e.context["path"]
                                                                                           for e in events))


def _start_of(home: Path, watched: _Attempt) -> tuple[Started, Mapping[str, str]] | None:
    """Runs on a worker thread: the attempt's ``runtime.json`` (its start, its processes) and its environment."""
    try:
        runtime = read_runtime(attempt_dir(home, watched.job_id, watched.attempt), (watched.job_id, watched.attempt))
    except (CorruptRecord, OSError):
        return None
    if runtime is None:
        return None
    env = watched.env
    if watched.adopted and watched.ended_at is None:  # an ended one's pid may be another process's now
        try:
            env = psutil.Process(runtime.pid).environ()
        except (psutil.Error, OSError):
            env = {}
    return runtime, env


def _starts_of(home: Path, attempts: list[_Attempt]) -> list[tuple[Started, Mapping[str, str]] | None]:
    """Runs on a worker thread: ``_start_of`` of each attempt."""
    return [_start_of(home, watched) for watched in attempts]


def _poll_all(tails: list[tuple[JobTail | None, Callable[[Listing], JobTail] | None]], now: float
              ) -> list[tuple[JobTail, list[FileBatch] | OSError]]:
    """Runs on a worker thread: each tail (made first by its maker where it has none yet) and
    what its poll read, or the OSError it met (a file it may not read: that attempt alone
    starts again). The tails share one look at the folders (``Listing``)."""
    from gpuplaned.tensorboard import Listing

    listing = Listing()
    out: list[tuple[JobTail, list[FileBatch] | OSError]] = []
    for tail, make in tails:
        if tail is None:
            assert make is not None
            tail = make(listing)
        try:
            out.append((tail, tail.poll(now, listing)))
        except OSError as exc:
            out.append((tail, exc))
    return out


_TENSORBOARD = "gpuplaned.tensorboard"


def _import_tensorboard() -> None:
    import gpuplaned.tensorboard  # noqa: F401


def _declared(env: Mapping[str, str]) -> tuple[str, ...]:
    return tuple(d for d in env.get(DECLARED_DIRS, "").split(os.pathsep) if d)


def _merged(files: tuple[TbFileState, ...]) -> dict[str, tuple[tuple[str, str], int]]:
    """The rewind state over all files: per series, the one of the newest file seen."""
    from gpuplaned.tensorboard.rewind import order_key

    state: dict[str, tuple[tuple[str, str], int]] = {}
    for f in files:
        for r in f.rewinds:
            order = (r.file, r.folder)
            if r.series not in state or order_key(order) > order_key(state[r.series][0]):
                state[r.series] = (order, r.first_step)
    return state


def _frames(batches: list[FileBatch], stored: dict[str, TbCursor]) -> list[TbFile]:
    """Runs on a worker thread: the batches as wire frames (base64 columns)."""
    import numpy as np

    out = []
    for b in batches:
        series = tuple(
            TbSeries(name, _b64(c.steps, np.int64), _b64(np.rint(c.walls * 1000), np.int64), _b64(c.values, np.float64))
            for name, c in b.points.items() if _fits(name, b.path))
        rewinds = tuple(TbRewind(s, order[0], order[1], first) for s, (order, first) in sorted(b.rewinds.items())
                        if len(s) <= MAX_SERIES)
        problems = tuple(TbProblem(p.offset, p.what) for p in b.problems)
        out.append(TbFile(b.path, stored.get(b.path), TbCursor(b.cursor.inode, b.cursor.offset), series,
                          tuple(sorted(c for c in b.cuts.items() if len(c[0]) <= MAX_SERIES)), rewinds, problems))
    return out


def _fits(name: str, path: str) -> bool:
    if len(name) <= MAX_SERIES:
        return True
    log.warning("TensorBoard series %.80s... of %s left out: its name is over %d characters", name, path, MAX_SERIES)
    return False


def _b64(values: np.ndarray, dtype: type) -> str:
    """A column as ``gpuplaned.protocol.columns`` reads it: base64 of little-endian 8-byte items."""
    import numpy as np

    return base64.b64encode(np.ascontiguousarray(values, dtype=np.dtype(dtype).newbyteorder("<")).tobytes()).decode()
