"""The ckptwatch actor: finds the checkpoints running jobs save on their own (``torch.save``,
HF Trainer, Lightning, DeepSpeed) and registers each once it is complete.

Owns: per job attempt, the debounce state (``gpuplaned.checkpoints.stability``) of what it
found in the attempt's folders: ``checkpoints/``, ``outputs/`` and ``runs/`` under its
working directory, and the folders it declared (``GPUPLANE_CKPT_DIR``, ``os.pathsep``
between them; ``gpuplanectl job submit --ckpt-dir``; for a job adopted after a restart, read
from its main process's environment).
Inputs: the runner's live jobs (``ctx.shared.runner()``) and the attempts that ended lately
(``recent_ends``: a job shorter than one rescan, one that ended while the daemon was away,
found ended on adoption); file events from watchfiles on
the folders that exist, which start a pass at once; a full pass every
``checkpoints.rescan_interval_s`` besides, so nothing is missed (a folder created later, an
event lost), and when a candidate's ``checkpoints.stable_s`` window is due; and a pass as soon
as the runner has listed half of what it keeps (``ENDS_KEPT``) ended attempts since the last
one, so that a burst of short jobs is taken in whole (one that outran even that is logged, with
how many were missed).
Outputs, through the node link: ``CheckpointsFound`` with each checkpoint once its size and
mtime have stayed the same for ``stable_s`` and no process of the job holds it open for
writing, with its fingerprint and the step and epoch it tells. Only what changed since the
attempt started is looked at (an older run's files in the same folder are not this run's),
and only what is the job's is taken, on evidence: a process of the job (its group, or the rest
of its shim's session: ``gpuplaned.job_processes``) was seen holding it open for writing, or it
lies in the job's own folders and no other job of the node that ran when it was written
watches them (two jobs started from one folder share ``checkpoints/``: there only an open
descriptor tells). Time alone is never evidence. One that is no job's is reported once
(``UNATTRIBUTED_FILE``, info) and not registered; one another job wrote is left to it. An
attempt that has ended gets one final pass (``Stability.feed(final=True)``: its writers have
all exited, so what is there is complete without waiting out the window) and is forgotten
once that pass registered everything; its last save counts. One that ended while the
daemon was away has the job's variables as submitted (``ActiveJob.env``): its process is gone.
Nothing is ever opened for writing, moved or rewritten.
Restart: permanent. A restarted watcher forgets what it sent; the server registers a
(run, path) once per fingerprint, so sending it again adds nothing.
Ready: immediately (nothing to open).
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs
import psutil
import trio
import watchfiles

from gpuplaned.checkpoints.complete import incomplete
from gpuplaned.checkpoints.files import fingerprint, observe
from gpuplaned.checkpoints.recognize import Candidate, find_candidates, resolve, watched_roots
from gpuplaned.checkpoints.stability import Observation, Stability
from gpuplaned.domain.event_types import UNATTRIBUTED_FILE
from gpuplaned.home import attempt_dir
from gpuplaned.job_processes import SLACK_S, JobProcesses
from gpuplaned.launching.job_files import CorruptRecord, Runtime, read_runtime
from gpuplaned.node_context import ENDS_KEPT, JobStart, LiveJobView, NodeContext
from gpuplaned.protocol.agent import CheckpointsFound, FoundCheckpoint, NodeEvent
from gpuplaned.runtime.context import ActorContext

log = logging.getLogger("gpuplaned.ckptwatch")

DECLARED_DIRS = "GPUPLANE_CKPT_DIR"  # in the job's environment: more folders to watch
MTIME_SLACK_NS = 1_000_000_000  # a file's mtime may trail the attempt's recorded start by a clock tick
WATCH_TIMEOUT_MS = 500  # how soon a stopped watchfiles thread notices
ENDED_GRACE = 2  # windows and rescans an ended attempt's final pass is retried (a find the server refused)
MIN_PASS_GAP = 0.25  # s between the starts of two passes, however often files change
ENDS_LOOK_S = 0.05  # s between two looks at how many attempts ended since the last pass
MAX_REPORTED = 10_000  # unattributed checkpoints remembered as reported; past it the memory starts again


@attrs.frozen
class CkptwatchStats:
    attempts: int
    watching: int  # folders with a file watcher on them
    pending: int  # candidates not yet complete
    registered: int
    passes: int


@attrs.define
class CkptwatchHandle:
    attempts: int = 0
    watching: int = 0
    pending: int = 0
    registered: int = 0
    passes: int = 0

    def statistics(self) -> CkptwatchStats:
        return CkptwatchStats(self.attempts, self.watching, self.pending, self.registered, self.passes)


@attrs.define
class _Attempt:
    """One attempt being watched."""

    job_id: str
    attempt: int
    run_id: str
    pgid: int | None
    shim_pid: int
    cwd: str
    roots: tuple[str, ...]
    adopted: bool  # its variables are unknown (a job from before a restart): read from its process
    started_ns: int | None = None  # from runtime.json; None until read
    rule: Stability = attrs.Factory(Stability)
    ended_at: float | None = None  # trio time it left the runner's live jobs
    ended_wall_ns: int | None = None  # the same, wall clock: compared with files' mtimes
    wrote: set[str] = attrs.Factory(set)  # candidates its processes were seen holding open for writing (realpaths)
    finished: bool = False  # ended, and its final pass registered everything: forgotten


@attrs.frozen
class _Seen:
    """What a pass found of one attempt (read on a worker thread)."""

    candidates: dict[str, Candidate]
    observed: dict[str, Observation]
    started_ns: int | None
    roots: tuple[str, ...]
    held: frozenset[str]  # candidates the attempt's processes hold open for writing now (realpaths)


Blocking = Callable[..., Awaitable[Any]]  # runs a blocking call: trio.to_thread.run_sync


async def run(ctx: ActorContext[NodeContext], *, task_status: trio.TaskStatus[CkptwatchHandle] = trio.TASK_STATUS_IGNORED,
              watch: bool = True, blocking: Blocking = trio.to_thread.run_sync) -> None:
    """The actor. In virtual-time tests ``watch`` is False (no watchfiles thread: the passes
    alone) and ``blocking`` runs the file reads inline (``gpuplaned.testing.launcher.inline``)."""
    handle = CkptwatchHandle()
    async with trio.open_nursery() as nursery:
        watcher = _Watcher(ctx, handle, nursery, watch, blocking)
        nursery.start_soon(watcher.follow_ends)
        task_status.started(handle)
        await watcher.loop()


class _Watcher:
    def __init__(self, ctx: ActorContext[NodeContext], handle: CkptwatchHandle, nursery: trio.Nursery,
                 watch: bool, blocking: Blocking) -> None:
        self.shared = ctx.shared
        self.blocking = blocking
        cfg = ctx.shared.config.checkpoints
        self.stable_s = cfg.stable_s
        self.rescan_s = cfg.rescan_interval_s
        self.home: Path = ctx.shared.config.jobs_home  # what holds the attempts' dirs
        self.handle = handle
        self.nursery = nursery
        self.watch = watch
        self.attempts: dict[tuple[str, int], _Attempt] = {}
        self.done: set[tuple[str, int]] = set()  # ended attempts whose final pass is made
        self.node_id: str | None = None
        self.wake = trio.Event()
        self.watched: tuple[str, ...] = ()
        self.stop_watching: trio.Event | None = None
        self.processes = JobProcesses()  # who wrote what: the evidence a checkpoint is an attempt's
        self.ends_taken: int | None = None  # the runner's ends_listed when the last pass took in its list
        self.reported: set[str] = set()  # unattributed checkpoints already reported

    async def loop(self) -> None:
        while True:
            started = trio.current_time()
            self._track()
            await self._pass()
            self._forget_ended()
            self._watch_folders()
            now = trio.current_time()
            deadline = now + self.rescan_s
            # One already due was offered and not taken: it waits for the rescan, not a spin.
            due = [d for a in self.attempts.values() if (d := a.rule.due()) is not None and d > now]
            if due:  # a window ends before the next rescan: pass then
                deadline = min(deadline, min(due))
            with trio.move_on_at(deadline):
                await self.wake.wait()
            self.wake = trio.Event()
            # A job writing TensorBoard events under runs/ wakes the watcher all the time.
            await trio.sleep_until(started + MIN_PASS_GAP)

    async def follow_ends(self) -> None:
        """Wake a pass early once the runner has listed half as many ended attempts since the
        last pass as it keeps (``ENDS_KEPT``): a pass every rescan saw only the last of a burst
        of short jobs (hundreds a second), and the others' checkpoints were never looked for.
        Waits on the runner's changes (looking again each rescan: a restarted runner has a new
        handle), so an idle node costs next to nothing."""
        while True:
            runner = self.shared.runner()
            if runner is None:  # not up yet
                await trio.sleep(self.rescan_s)
                continue
            with trio.move_on_after(self.rescan_s):
                await runner.changed.wait()
            if self.ends_taken is not None and runner.ends_listed - self.ends_taken >= ENDS_KEPT // 2:
                self.wake.set()
            await trio.sleep(ENDS_LOOK_S)

    def _track(self) -> None:
        """Take in the runner's new live attempts; note the time the others ended."""
        runner = self.shared.runner()
        if runner is not None:
            self.node_id = runner.node_id
            missed = runner.ends_listed - self.ends_taken - ENDS_KEPT if self.ends_taken is not None else 0
            if missed > 0:  # faster than passes could follow: say so, not nothing
                log.warning("%d attempts ended and left the runner's list of the last %d before a pass took "
                            "them in; their checkpoints are not looked for", missed, ENDS_KEPT)
            self.ends_taken = runner.ends_listed
        live = list(runner.live.values()) if runner is not None else []
        now = trio.current_time()
        keys = set()
        for job in live:
            key = (job.job_id, job.attempt)
            keys.add(key)
            self.processes.track(key, pgid=job.pgid, session=job.shim_pid or None)
            if key not in self.attempts and job.run_id is not None and job.cwd is not None:
                self.attempts[key] = self._attempt(job)
        ends = runner.recent_ends if runner is not None else {}
        for key, job in list(ends.items()):
            if key not in self.attempts and key not in self.done and key not in keys and job.run_id is not None \
                    and job.cwd is not None:
                self.attempts[key] = attrs.evolve(self._attempt(job), ended_at=now)
        if runner is not None:
            self.done.intersection_update(ends.keys())  # bounded by the runner's list
        if runner is not None:
            self.processes.live_only(keys, time.time())
        for key, watched in self.attempts.items():
            if key not in keys and watched.ended_at is None and runner is not None:
                watched.ended_at = now
                watched.ended_wall_ns = time.time_ns()
        self.handle.attempts = len(self.attempts)

    def _attempt(self, job: LiveJobView) -> _Attempt:
        assert job.run_id is not None and job.cwd is not None
        started_ns = None
        start = JobStart.told(job)  # the runner's word: its runtime.json need not be read
        if start is not None:
            started_ns = int(start.started_at * 1e9)
            self.processes.started((job.job_id, job.attempt), start)
        return _Attempt(job.job_id, job.attempt, job.run_id, job.pgid, job.shim_pid, job.cwd,
                        watched_roots(job.cwd, _declared(job.env)), adopted=not job.env, started_ns=started_ns,
                        rule=Stability(self.stable_s))

    def _forget_ended(self) -> None:
        now = trio.current_time()
        for key, watched in list(self.attempts.items()):
            if watched.ended_at is not None and (
                    watched.finished or now - watched.ended_at > ENDED_GRACE * (self.stable_s + self.rescan_s)):
                del self.attempts[key]
                self.done.add(key)
        self.handle.attempts = len(self.attempts)
        runner = self.shared.runner()
        kept: set[tuple[str, int]] = set(self.attempts)
        if runner is not None:
            kept |= set(runner.recent_ends) | {(j.job_id, j.attempt) for j in list(runner.live.values())}
        self.processes.keep(kept)

    async def _pass(self) -> None:
        self.handle.passes += 1
        pending = 0
        if any(a.ended_at is None for a in self.attempts.values()):
            await self.blocking(self.processes.scan)
        attempts = list(self.attempts.values())
        finals = [watched.ended_at is not None for watched in attempts]
        # Every attempt's folders walked in one worker-thread call, not one each: at hundreds of
        # short jobs a second the hand-offs cost more than the walks.
        seens = await self.blocking(self._scan_all, attempts, finals) if attempts else []
        for watched, seen in zip(attempts, seens, strict=True):
            watched.started_ns, watched.roots = seen.started_ns, seen.roots
            watched.wrote.update(seen.held)
        folders = _Folders(self.attempts.values())
        for watched, final, seen in zip(attempts, finals, seens, strict=True):
            ready = watched.rule.feed(trio.current_time(), seen.observed, final=final)
            ready = await self._its_own(watched, ready, seen.observed, folders)
            taken = not ready or await self._register(watched, [seen.candidates[p] for p in ready], seen.observed)
            watched.finished = final and taken
            pending += watched.rule.pending()
        self.handle.pending = pending

    async def _its_own(self, watched: _Attempt, ready: list[str], observed: dict[str, Observation],
                       folders: _Folders) -> list[str]:
        """The ready candidates that are the attempt's, on evidence; the others are settled
        (not offered again until they change), and those no job wrote reported once."""
        mine, nobodys = [], []
        for path in ready:
            real = os.path.realpath(path)  # two jobs may name one folder two ways
            others = [a for a in folders.writers(real) if a is not watched]
            if real in watched.wrote or (not others and not _sharers(folders, watched, real, observed[path].mtime_ns)):
                mine.append(path)
                continue
            watched.rule.registered(path, observed[path])
            if not others:
                nobodys.append(path)
        await self._report(watched, nobodys)
        return mine

    async def _report(self, watched: _Attempt, paths: list[str]) -> None:
        events = []
        for path in paths:
            if path in self.reported:
                continue
            if len(self.reported) >= MAX_REPORTED:
                self.reported.clear()
            self.reported.add(path)
            events.append(NodeEvent(
                UNATTRIBUTED_FILE, "info", f"checkpoint {path} not registered: other jobs of this node save into its "
                f"folder too, and no process of job {watched.job_id} (nor of another) was seen writing it",
                int(time.time() * 1000), context={"path": path, "pid": None, "kind": "checkpoint"}))
        if not events or self.node_id is None:
            return
        try:
            await self.shared.link.events(self.node_id, events)
        except Exception as exc:  # noqa: BLE001 - an info event: logged here instead
            log.info("unattributed checkpoints not reported (%s): %s", exc, ", ".join(paths))

    def _scan_all(self, attempts: list[_Attempt], finals: list[bool]) -> list[_Seen]:
        """Runs on a worker thread: ``_scan`` of each attempt (``finals``: which have ended). A
        folder is walked once for all the attempts that watch it (a queue's or a sweep's jobs
        mostly share one): at hundreds of short jobs, walking it for each was most of a pass."""
        walked = functools.cache(lambda root, cwd: list(find_candidates(root, cwd)))
        return [self._scan(watched, not final, walked) for watched, final in zip(attempts, finals, strict=True)]

    def _scan(self, watched: _Attempt, live: bool, walked: Callable[[str, str], list[Candidate]]) -> _Seen:
        """Runs on a worker thread: walks the attempt's folders (through ``walked``, the pass's
        ``find_candidates``, which walks each once) and stats what it finds."""
        started_ns, roots = watched.started_ns, watched.roots
        if started_ns is None:
            runtime = _runtime(self.home, watched.job_id, watched.attempt)
            if runtime is not None:
                started_ns = int(runtime.started_at * 1e9)
                key = (watched.job_id, watched.attempt)
                self.processes.started(key, runtime)
                if not live:  # its group's id may be another's by now: never scanned
                    self.processes.ended(key, time.time())
                if watched.adopted and live:  # an ended one's pid may be another process's now
                    roots = watched_roots(watched.cwd, _declared(_environ(runtime.pid)))
        candidates = {c.path: c for root in roots for c in walked(root, watched.cwd)}
        writing: frozenset[str] = frozenset()
        if candidates and live:
            writing = frozenset(p for p, mode in self.processes.open_files((watched.job_id, watched.attempt))
                                if mode != "r")
        observed: dict[str, Observation] = {}
        for path in candidates:
            try:
                seen = observe(path, writing)
            except OSError:
                continue  # gone since the walk (a rotation): forgotten
            if started_ns is not None and seen.mtime_ns < started_ns - MTIME_SLACK_NS:
                continue  # an earlier run's
            observed[path] = seen
        held = frozenset(os.path.realpath(p) for p, seen in observed.items() if seen.writing)
        return _Seen({p: candidates[p] for p in observed}, observed, started_ns, roots, held)

    async def _register(self, watched: _Attempt, ready: list[Candidate], observed: dict[str, Observation]) -> bool:
        """Send the fingerprints of ``ready``; True when every one of them was taken."""
        if self.node_id is None:
            return False
        found = await self.blocking(_fingerprints, ready, observed)
        if not found:
            return False
        message = CheckpointsFound(watched.job_id, watched.attempt, watched.run_id, tuple(f for f, _ in found))
        try:
            await self.shared.link.checkpoints(self.node_id, message)
        except Exception as exc:  # noqa: BLE001 - the server could not take them: offered again next pass
            log.warning("checkpoints of job %s attempt %d not registered yet: %s", watched.job_id, watched.attempt, exc)
            return False
        for item, seen in found:
            watched.rule.registered(item.path, seen)
            log.info("checkpoint %s of job %s (step %s)", item.path, watched.job_id, item.step)
        self.handle.registered += len(found)
        return len(found) == len(ready)

    def _watch_folders(self) -> None:
        """(Re)start the file watcher when the set of existing folders changed."""
        if not self.watch:
            return
        roots = tuple(sorted({r for a in self.attempts.values() if a.ended_at is None for r in a.roots
                              if os.path.isdir(r)}))
        if roots == self.watched:
            return
        if self.stop_watching is not None:
            self.stop_watching.set()
            self.stop_watching = None
        self.watched = roots
        self.handle.watching = len(roots)
        if roots:
            self.stop_watching = trio.Event()
            self.nursery.start_soon(self._watch, roots, self.stop_watching)

    async def _watch(self, roots: tuple[str, ...], stop: trio.Event) -> None:
        try:
            async for _ in watchfiles.awatch(*roots, stop_event=stop, rust_timeout=WATCH_TIMEOUT_MS,
                                             yield_on_timeout=False, debounce=200, step=50):
                self.wake.set()
        except (OSError, RuntimeError) as exc:  # a folder removed under it: the passes go on
            log.info("file watcher on %d folder(s) stopped: %s", len(roots), exc)
            if self.watched == roots:
                self.watched = ()


def _runtime(home: Path, job_id: str, attempt: int) -> Runtime | None:
    """The attempt's ``runtime.json`` (when it started, its main process); None if unreadable."""
    try:
        return read_runtime(attempt_dir(home, job_id, attempt), (job_id, attempt))
    except (CorruptRecord, OSError):
        return None


def _sharers(folders: _Folders, watched: _Attempt, real: str, mtime_ns: int) -> list[_Attempt]:
    """The other attempts that watch the folder the file ``real`` (resolved) lies in and ran
    when it was written."""
    slack = int(SLACK_S * 1e9)
    return [a for a in folders.watching(real) if a is not watched
            and (a.started_ns is None or a.started_ns - slack <= mtime_ns)
            and (a.ended_wall_ns is None or mtime_ns <= a.ended_wall_ns + slack)]


class _Folders:
    """For one pass: which attempts watch which folder (their roots, resolved once each), and
    which were seen writing which file. A checkpoint's other watchers are found from its own
    folders up, not by resolving every attempt's roots again for each checkpoint: a burst of
    short jobs that each saved one made a pass quadratic (768 such jobs: seconds a pass)."""

    def __init__(self, attempts: Iterable[_Attempt]) -> None:
        real = functools.cache(os.path.realpath)
        self._by_root: dict[str, dict[int, _Attempt]] = {}
        self._by_file: dict[str, dict[int, _Attempt]] = {}
        for a in attempts:
            for root in a.roots:
                self._by_root.setdefault(real(root), {})[id(a)] = a
            for path in a.wrote:
                self._by_file.setdefault(path, {})[id(a)] = a

    def watching(self, real: str) -> list[_Attempt]:
        """The attempts with a root that is ``real`` (a resolved path) or holds it."""
        found: dict[int, _Attempt] = {}
        folder = real
        while True:
            found.update(self._by_root.get(folder, {}))
            parent = os.path.dirname(folder)
            if parent == folder:
                return list(found.values())
            folder = parent

    def writers(self, real: str) -> list[_Attempt]:
        """The attempts seen holding the file ``real`` open for writing."""
        return list(self._by_file.get(real, {}).values())


def _declared(env: Mapping[str, str]) -> tuple[str, ...]:
    return tuple(d for d in env.get(DECLARED_DIRS, "").split(os.pathsep) if d)


def _environ(pid: int) -> dict[str, str]:
    """A job process's environment as it started (``/proc/<pid>/environ``); {} if it is gone."""
    try:
        return psutil.Process(pid).environ()
    except (psutil.Error, OSError):
        return {}


def _fingerprints(ready: Iterable[Candidate], observed: dict[str, Observation]) -> list[
        tuple[FoundCheckpoint, Observation]]:
    """Runs on a worker thread: the fingerprint of each, kept only if it did not change meanwhile."""
    out = []
    for candidate in ready:
        seen = observed[candidate.path]
        try:
            not_whole = incomplete(candidate.path)
            if not_whole is not None:  # a pause in a save, or a job killed mid-save: never registered
                log.info("checkpoint %s not registered: %s", candidate.path, not_whole)
                continue
            print_ = fingerprint(candidate.path)
            if observe(candidate.path).signature != seen.signature:
                continue  # written again while it was read: the next window decides
        except OSError:
            continue
        told = resolve(candidate)
        out.append((FoundCheckpoint(candidate.path, candidate.kind, seen.size, seen.mtime_ns // 1_000_000, print_,
                                    told.step, told.epoch), seen))
    return out
