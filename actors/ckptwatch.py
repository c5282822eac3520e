"""The ckptwatch actor: finds the checkpoints running jobs save on their own (``torch.save``,
HF Trainer, Lightning, DeepSpeed) and registers each once it is complete.

Owns: per job attempt, the debounce state (``gpuplaned.checkpoints.stability``) of what it
found in the attempt's folders: ``checkpoints/``, ``outputs/`` and ``runs/`` under its
working directory, and the folders it declared (``GPUPLANE_CKPT_DIR``, ``os.pathsep``
between them; ``gpuplanectl submit --ckpt-dir``; for a job adopted after a restart, read
from its main process's environment).
Inputs: the runner's live jobs (``ctx.shared.runner()``) and the attempts that ended lately
(``recent_ends``: a job shorter than one rescan, one that ended while the daemon was away,
found ended on adoption); file events from watchfiles on
the folders that exist, which start a pass at once; a full pass every
``checkpoints.rescan_interval_s`` besides, so nothing is missed (a folder created later, an
event lost), and when a candidate's ``checkpoints.stable_s`` window is due.
Outputs, through the node link: ``CheckpointsFound`` with each checkpoint once its size and
mtime have stayed the same for ``stable_s`` and no process of the job holds it open for
writing, with its fingerprint and the step and epoch it tells. Only what changed since the
attempt started is taken (an older run's files in the same folder are not this run's). An
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

import logging
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs
import psutil
import trio
import watchfiles

from gpuplaned.checkpoints.complete import incomplete
from gpuplaned.checkpoints.files import fingerprint, observe, writing_paths
from gpuplaned.checkpoints.recognize import Candidate, find_candidates, resolve, watched_roots
from gpuplaned.checkpoints.stability import Observation, Stability
from gpuplaned.home import attempt_dir
from gpuplaned.launching.job_files import CorruptRecord, Runtime, read_runtime
from gpuplaned.node_context import LiveJobView, NodeContext
from gpuplaned.protocol.agent import CheckpointsFound, FoundCheckpoint
from gpuplaned.runtime.context import ActorContext

log = logging.getLogger("gpuplaned.ckptwatch")

DECLARED_DIRS = "GPUPLANE_CKPT_DIR"  # in the job's environment: more folders to watch
MTIME_SLACK_NS = 1_000_000_000  # a file's mtime may trail the attempt's recorded start by a clock tick
WATCH_TIMEOUT_MS = 500  # how soon a stopped watchfiles thread notices
ENDED_GRACE = 2  # windows and rescans an ended attempt's final pass is retried (a find the server refused)
MIN_PASS_GAP = 0.25  # s between the starts of two passes, however often files change


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
    finished: bool = False  # ended, and its final pass registered everything: forgotten


@attrs.frozen
class _Seen:
    """What a pass found of one attempt (read on a worker thread)."""

    candidates: dict[str, Candidate]
    observed: dict[str, Observation]
    started_ns: int | None
    roots: tuple[str, ...]


Blocking = Callable[..., Awaitable[Any]]  # runs a blocking call: trio.to_thread.run_sync


async def run(ctx: ActorContext[NodeContext], *, task_status: trio.TaskStatus[CkptwatchHandle] = trio.TASK_STATUS_IGNORED,
              watch: bool = True, blocking: Blocking = trio.to_thread.run_sync) -> None:
    """The actor. In virtual-time tests ``watch`` is False (no watchfiles thread: the passes
    alone) and ``blocking`` runs the file reads inline (``gpuplaned.testing.launcher.inline``)."""
    handle = CkptwatchHandle()
    async with trio.open_nursery() as nursery:
        watcher = _Watcher(ctx, handle, nursery, watch, blocking)
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
        self.home: Path = ctx.shared.config.home
        self.handle = handle
        self.nursery = nursery
        self.watch = watch
        self.attempts: dict[tuple[str, int], _Attempt] = {}
        self.done: set[tuple[str, int]] = set()  # ended attempts whose final pass is made
        self.node_id: str | None = None
        self.wake = trio.Event()
        self.watched: tuple[str, ...] = ()
        self.stop_watching: trio.Event | None = None

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

    def _track(self) -> None:
        """Take in the runner's new live attempts; note the time the others ended."""
        runner = self.shared.runner()
        if runner is not None:
            self.node_id = runner.node_id
        live = list(runner.live.values()) if runner is not None else []
        now = trio.current_time()
        keys = set()
        for job in live:
            key = (job.job_id, job.attempt)
            keys.add(key)
            if key not in self.attempts and job.run_id is not None and job.cwd is not None:
                self.attempts[key] = self._attempt(job)
        ends = runner.recent_ends if runner is not None else {}
        for key, job in list(ends.items()):
            if key not in self.attempts and key not in self.done and key not in keys and job.run_id is not None \
                    and job.cwd is not None:
                self.attempts[key] = attrs.evolve(self._attempt(job), ended_at=now)
        if runner is not None:
            self.done.intersection_update(ends.keys())  # bounded by the runner's list
        for key, watched in self.attempts.items():
            if key not in keys and watched.ended_at is None and runner is not None:
                watched.ended_at = now
        self.handle.attempts = len(self.attempts)

    def _attempt(self, job: LiveJobView) -> _Attempt:
        assert job.run_id is not None and job.cwd is not None
        return _Attempt(job.job_id, job.attempt, job.run_id, job.pgid, job.shim_pid, job.cwd,
                        watched_roots(job.cwd, _declared(job.env)), adopted=not job.env, rule=Stability(self.stable_s))

    def _forget_ended(self) -> None:
        now = trio.current_time()
        for key, watched in list(self.attempts.items()):
            if watched.ended_at is not None and (
                    watched.finished or now - watched.ended_at > ENDED_GRACE * (self.stable_s + self.rescan_s)):
                del self.attempts[key]
                self.done.add(key)
        self.handle.attempts = len(self.attempts)

    async def _pass(self) -> None:
        self.handle.passes += 1
        pending = 0
        for watched in list(self.attempts.values()):
            final = watched.ended_at is not None
            seen = await self.blocking(self._scan, watched, not final)
            watched.started_ns, watched.roots = seen.started_ns, seen.roots
            ready = watched.rule.feed(trio.current_time(), seen.observed, final=final)
            taken = not ready or await self._register(watched, [seen.candidates[p] for p in ready], seen.observed)
            watched.finished = final and taken
            pending += watched.rule.pending()
        self.handle.pending = pending

    def _scan(self, watched: _Attempt, live: bool) -> _Seen:
        """Runs on a worker thread: walks the attempt's folders and stats what it finds."""
        started_ns, roots = watched.started_ns, watched.roots
        if started_ns is None:
            runtime = _runtime(self.home, watched.job_id, watched.attempt)
            if runtime is not None:
                started_ns = int(runtime.started_at * 1e9)
                if watched.adopted and live:  # an ended one's pid may be another process's now
                    roots = watched_roots(watched.cwd, _declared(_environ(runtime.pid)))
        candidates = {c.path: c for root in roots for c in find_candidates(root)}
        writing: frozenset[str] = frozenset()
        if candidates and live and watched.pgid is not None:
            writing = writing_paths(watched.pgid, watched.shim_pid)
        observed: dict[str, Observation] = {}
        for path in candidates:
            try:
                seen = observe(path, writing)
            except OSError:
                continue  # gone since the walk (a rotation): forgotten
            if started_ns is not None and seen.mtime_ns < started_ns - MTIME_SLACK_NS:
                continue  # an earlier run's
            observed[path] = seen
        return _Seen({p: candidates[p] for p in observed}, observed, started_ns, roots)

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
