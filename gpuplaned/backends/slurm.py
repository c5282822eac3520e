"""The Slurm runner backend: each attempt is one Slurm batch job that runs our shim one-shot.

A node with ``[node] runner = "slurm"`` runs on a machine that can submit to a cluster (a
login node). Its home, where each attempt's dir lies (``gpuplaned.home.attempt_dir``), is on a
filesystem the cluster's nodes share: the backend writes the attempt's ``spec.json`` there,
``sbatch``es a script that ``exec``s ``gpuplaned/shim --oneshot <dir>``, and the shim inside the
allocation writes the same ``runtime.json``, ``exit.json`` and logs as a local shim. So every
node actor that follows job files (logs, TensorBoard, checkpoints) works unchanged, from here.

The handle of an attempt is its Slurm job id. Where each word of the attempt machine comes from:
- start: ``submission.submit``, named ``gp-<job id>-<attempt>`` and looked up before it is ever
  submitted again; while slurmctld does not answer, the node holds the ``slurm_unreachable``
  condition and the start waits (never a failed job);
- watch: one ``squeue`` a round for all of the node's attempts (``_Poller``, with backoff while
  Slurm is down); a pending job's reason is ``Waiting("Slurm: Resources")``; ``runtime.json``
  appearing is ``NowRunning``; the end is ``exit.json`` first, then Slurm's own word
  (``polling.read_ends``: ``scontrol show job``, then ``sacct`` where it exists); a job that
  none of them accounts for ``lost_after_s`` after it left the queue is ``Vanished`` (LOST);
- cancel: ``scancel``, retried until Slurm answers; Slurm signals every process of the job;
- adopt after a restart: the name's look-up (``squeue --me -t all -n``) and the attempt's files.

A sweep's trials (a dispatch with ``array``) are gathered per sweep and submitted as one array
job (``slurm_arrays``): each trial's handle is its task ``A_i``, watched, cancelled and ended as
a single job is; ``throttle`` applies the sweep's new max_parallel to its arrays
(``scontrol update JobId=A ArrayTaskThrottle=K``).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import trio

from gpuplaned.backends.base import AttemptRequest, Running, Started, StartRefused
from gpuplaned.backends.slurm_arrays import ARRAY_RECORD, ArrayGatherer, members_of, read_array_record
from gpuplaned.config import Config
from gpuplaned.domain import attempts as a
from gpuplaned.domain.failures import ExitReason
from gpuplaned.domain.node_conditions import NodeConditions
from gpuplaned.home import attempt_dir
from gpuplaned.launching.client import SpawnRequest
from gpuplaned.launching.job_files import EXIT_FILE, RUNTIME_FILE, CorruptRecord, ExitRecord, Runtime, read_exit, read_runtime, tail_text
from gpuplaned.slurm.arrays import ArraySpec, set_throttle, submit_array, task_id
from gpuplaned.slurm.batch_job import shim_argv, write_spec
from gpuplaned.slurm.cancelling import cancel as scancel
from gpuplaned.slurm.commands import SlurmCli, SlurmCommandFailed, SlurmError, SlurmPaths, SlurmUnreachable
from gpuplaned.slurm.parsing import JobDetail, QueueRow, SlurmParseError, parse_scontrol_jobs
from gpuplaned.slurm.polling import INVALID_JOB_ID, Backoff, JobEnd, poll, read_ends
from gpuplaned.slurm.submission import SubmitRefused, SubmitSpec, SubmitUncertain, find_by_name, job_name, submit

log = logging.getLogger("gpuplaned.runner")

Blocking = Callable[..., Awaitable[Any]]
UNREACHABLE = "slurm_unreachable"  # the node condition while slurmctld does not answer
# Slurm's end states with no exit status of the job's own: reported LOST with Slurm's words.
_NO_EXIT_STATUS = {"NODE_FAIL": "its node failed", "BOOT_FAIL": "its node failed to boot",
                   "PREEMPTED": "it was preempted", "DEADLINE": "it missed its deadline",
                   "REVOKED": "it was revoked", "OUT_OF_MEMORY": "it ran out of memory"}


@attrs.frozen
class SlurmHandle:
    """An attempt's Slurm job."""

    job_id: str
    attempt: int
    slurm_id: str
    job_dir: Path

    @property
    def supervisor(self) -> str:
        return f"its Slurm job {self.slurm_id}"


@attrs.define
class _Watched:
    """What the backend has said of one attempt so far."""

    running: bool = False  # NowRunning (or a running adoption) said
    waiting: str | None = None  # the last reason said
    left_queue_at: float | None = None  # when squeue first stopped listing it as pending or running
    cancelled: bool = False  # we asked scancel to stop it
    preempted: str | None = None  # what Slurm did ("preempted and requeued it"); its rerun is being cancelled
    # A record of a death by signal that we did not ask for, held until Slurm says whether it
    # preempted (requeued) the job or ended it, and since when.
    killed: ExitRecord | None = None
    killed_at: float | None = None


class _Poller:
    """One ``squeue`` a round for every attempt being watched; ``rows`` is the last answer
    (None while Slurm does not answer)."""

    def __init__(self, cli: SlurmCli, interval_s: float, max_s: float, conditions: NodeConditions) -> None:
        self.cli = cli
        self.backoff = Backoff(period_s=interval_s, max_s=max_s)
        self.conditions = conditions
        self.watched: dict[str, int] = {}  # slurm id -> how many watchers
        self.rows: dict[str, QueueRow] | None = None
        self._round = trio.Event()
        self._wake = trio.Event()

    @contextlib.contextmanager
    def watching(self, slurm_id: str) -> Any:
        self.watched[slurm_id] = self.watched.get(slurm_id, 0) + 1
        self._wake.set()
        try:
            yield
        finally:
            self.watched[slurm_id] -= 1
            if not self.watched[slurm_id]:
                del self.watched[slurm_id]

    async def next_round(self) -> dict[str, QueueRow] | None:
        await self._round.wait()
        return self.rows

    async def run(self) -> None:
        while True:
            if not self.watched:
                self._wake = trio.Event()
                await self._wake.wait()
            try:
                self.rows = await poll(self.cli, list(self.watched))
                answered(self.conditions)
                pause = self.backoff.answered()
            except SlurmUnreachable as error:
                self.rows = None
                unreachable(self.conditions, error)
                pause = self.backoff.failed()
            except (SlurmCommandFailed, SlurmParseError) as error:
                log.warning("squeue: %s", error)
                self.rows = None
                pause = self.backoff.failed()
            self._round.set()
            self._round = trio.Event()
            await trio.sleep(pause)


def unreachable(conditions: NodeConditions, error: SlurmUnreachable) -> None:
    if conditions.raise_(UNREACHABLE, f"slurmctld does not answer: {error}"):
        log.warning("Slurm does not answer (%s); running jobs carry on, new ones wait", error)


def answered(conditions: NodeConditions) -> None:
    if conditions.clear(UNREACHABLE):
        log.info("Slurm answers again")


class SlurmBackend:
    kind = "slurm"

    def __init__(self, config: Config, cli: SlurmCli, conditions: NodeConditions, blocking: Blocking,
                 poller: _Poller, nursery: trio.Nursery) -> None:
        self.home = config.jobs_home  # what holds the attempts' dirs, on the shared filesystem
        self.slurm = config.slurm
        self.cli = cli
        self.conditions = conditions
        self.blocking = blocking
        self.poller = poller
        self.python = str(config.slurm.python or sys.executable)
        self.watched: dict[str, _Watched] = {}  # by slurm id
        self.arrays = ArrayGatherer(self._array_spec, self._submit_array, nursery, blocking)
        self.sweep_arrays: dict[str, set[str]] = {}  # sweep id -> the array ids of its trials here

    def attempt_dir(self, job_id: str, attempt: int) -> Path:
        return attempt_dir(self.home, job_id, attempt)

    # -- start ----------------------------------------------------------------------------

    async def start(self, attempt: AttemptRequest) -> Started:
        request, gpus = attempt.spawn, attempt.gpus
        assert request.job_id is not None and request.attempt is not None
        job_dir = Path(request.job_dir)
        await self.blocking(_clear_records, job_dir)  # a record there now is of no run of this attempt
        try:
            await self.blocking(lambda: write_spec(job_dir, argv=request.argv, cwd=request.cwd, env=request.env,
                                                   job_id=request.job_id, attempt=request.attempt,
                                                   timeout_s=request.timeout_s, grace_s=request.grace_s))
        except ValueError as error:
            raise StartRefused(f"cannot submit to Slurm: {error}") from None
        if attempt.array is not None:
            return await self._start_task(attempt, job_dir)
        try:
            spec = SubmitSpec(request.job_id, request.attempt, shim_argv(self.python, job_dir), job_dir,
                              Path(request.cwd), gpus=gpus, partition=self.slurm.partition,
                              account=self.slurm.account, qos=self.slurm.qos, extra_args=self._extra_args(request))
        except ValueError as error:
            raise StartRefused(f"cannot submit to Slurm: {error}") from None
        look_first = False
        backoff = Backoff(period_s=self.slurm.poll_interval_s, max_s=self.slurm.poll_max_s)
        while True:
            try:
                submitted = await submit(self.cli, spec, look_first=look_first, lookup_pause_s=backoff.period_s)
                break
            except SubmitRefused as error:
                raise StartRefused(f"Slurm refused the job: {error.stderr.strip() or error}") from None
            except (SubmitUncertain, SlurmUnreachable) as error:
                unreachable(self.conditions, error)
                look_first = True  # it may have been made: look before ever submitting again
                await trio.sleep(backoff.failed())
            except SlurmError as error:
                raise StartRefused(f"cannot submit to Slurm: {error}") from None
        answered(self.conditions)
        log.info("job %s attempt %d is Slurm job %s%s", request.job_id, request.attempt, submitted.slurm_id,
                 " (found by its name)" if submitted.found else "")
        handle = SlurmHandle(request.job_id, request.attempt, submitted.slurm_id, job_dir)
        self.watched[handle.slurm_id] = _Watched()
        return Started(handle, None)

    async def _start_task(self, attempt: AttemptRequest, job_dir: Path) -> Started:
        """A sweep's trial: a task of the array its sweep's trials gathered here make."""
        request, task = attempt.spawn, attempt.array
        assert task is not None and request.job_id is not None and request.attempt is not None
        array_id = await self.arrays.join(attempt)
        self.sweep_arrays.setdefault(task.sweep_id, set()).add(array_id)
        handle = SlurmHandle(request.job_id, request.attempt, task_id(array_id, task.index), job_dir)
        log.info("job %s attempt %d is Slurm array task %s", request.job_id, request.attempt, handle.slurm_id)
        self.watched[handle.slurm_id] = _Watched()
        return Started(handle, None)

    def _array_spec(self, sweep_id: str, throttle: int, members: list[AttemptRequest]) -> ArraySpec:
        first = min(members, key=lambda m: m.array.index if m.array is not None else 0)
        assert first.spawn.attempt is not None
        out_dir = self.home / "slurm-arrays" / sweep_id
        out_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        return ArraySpec(sweep_id, first.spawn.attempt,
                         members_of(members, lambda m: shim_argv(self.python, m.spawn.job_dir)), out_dir,
                         Path(first.spawn.cwd), throttle=throttle, gpus=max(m.gpus for m in members),
                         partition=self.slurm.partition, account=self.slurm.account, qos=self.slurm.qos,
                         extra_args=self._extra_args(attrs.evolve(first.spawn, timeout_s=max(
                             (m.spawn.timeout_s for m in members if m.spawn.timeout_s is not None), default=None))))

    async def _submit_array(self, spec: ArraySpec) -> str:
        """Submit the array, waiting out an unreachable Slurm as a single job's start does."""
        look_first = False
        backoff = Backoff(period_s=self.slurm.poll_interval_s, max_s=self.slurm.poll_max_s)
        while True:
            try:
                submitted = await submit_array(self.cli, spec, look_first=look_first,
                                               lookup_pause_s=backoff.period_s)
                break
            except SubmitRefused as error:
                raise StartRefused(f"Slurm refused the sweep's array: {error.stderr.strip() or error}") from None
            except (SubmitUncertain, SlurmUnreachable) as error:
                unreachable(self.conditions, error)
                look_first = True
                await trio.sleep(backoff.failed())
            except SlurmError as error:
                raise StartRefused(f"cannot submit the sweep's array to Slurm: {error}") from None
        answered(self.conditions)
        return submitted.slurm_id

    async def throttle(self, sweep_id: str, max_parallel: int) -> None:
        """The sweep's max_parallel is now ``max_parallel`` (0: none): each of its arrays here
        runs at most that many tasks at once from now on."""
        self.arrays.throttle(sweep_id, max_parallel)
        for array_id in sorted(self.sweep_arrays.get(sweep_id, ()), key=int):
            await self._throttle_array(sweep_id, array_id, max_parallel)

    async def _throttle_array(self, sweep_id: str, array_id: str, max_parallel: int) -> None:
        backoff = Backoff(period_s=self.slurm.poll_interval_s, max_s=self.slurm.poll_max_s)
        while True:
            try:
                if not await set_throttle(self.cli, array_id, max_parallel):
                    self.sweep_arrays[sweep_id].discard(array_id)  # all of it ended: nothing to throttle
                else:
                    log.info("sweep %s: Slurm array %s runs at most %s tasks at once", sweep_id, array_id,
                             max_parallel or "any number of")
                return
            except SlurmUnreachable as error:
                unreachable(self.conditions, error)
                await trio.sleep(backoff.failed())
            except SlurmError as error:
                log.warning("scontrol update JobId=%s ArrayTaskThrottle=%d: %s", array_id, max_parallel, error)
                return

    def _extra_args(self, request: SpawnRequest) -> tuple[str, ...]:
        args = []
        if request.timeout_s is not None:  # our shim stops it first; Slurm's limit is the backstop
            args.append(f"--time={math.ceil((request.timeout_s + request.grace_s) / 60) + 1}")
        elif self.slurm.time_limit:
            args.append(f"--time={self.slurm.time_limit}")
        if self.slurm.signal_before_s:
            args.append(f"--signal=B:USR2@{self.slurm.signal_before_s}")
        if self.slurm.requeue:
            args.append("--requeue")
        return tuple(args)

    # -- watch ----------------------------------------------------------------------------

    async def watch(self, handle: SlurmHandle) -> a.Input:
        state = self.watched.setdefault(handle.slurm_id, _Watched())
        row: QueueRow | None = None
        with self.poller.watching(handle.slurm_id):
            while True:
                # A job Slurm still queues, and that never ran, has no records to read yet: with
                # many queued, a round reads files only for those that may have them.
                if row is None or not row.state.pending or state.running:
                    word = await self._look(handle, state)
                    if word is not None:
                        return word
                rows = await self.poller.next_round()
                if rows is None:
                    # Slurm does not answer: the attempt's files are all there is to go on, and
                    # a job it held may have started since it last answered.
                    row = None
                else:
                    row = rows.get(handle.slurm_id)
                    word = await self._judge(handle, state, row)
                    if word is not None:
                        return word

    async def _look(self, handle: SlurmHandle, state: _Watched) -> a.Input | None:
        """What the attempt's files say that has not been said."""
        try:
            runtime, record = await self.blocking(_records, handle)
        except CorruptRecord as error:
            return a.Vanished(str(error))
        if runtime is not None and not state.running:
            state.running = True
            return a.NowRunning(_running(runtime))
        if record is not None and state.killed is None:
            if state.preempted or (_killed_from_outside(record) and not state.cancelled):
                state.killed, state.killed_at = record, trio.current_time()  # preempted? Slurm tells (_judge)
                return None
            self.watched.pop(handle.slurm_id, None)
            if state.cancelled and record.reason == ExitReason.SIGNALED:
                # scancel signals every process of the job: ours may die of it before our shim's
                # own SIGTERM reaches it. We asked: it is our cancel.
                record = attrs.evolve(record, reason=ExitReason.CANCELLED)
            return a.ExitSeen(record)
        return None

    async def _judge(self, handle: SlurmHandle, state: _Watched, row: QueueRow | None) -> a.Input | None:
        """What squeue's row (None: it no longer lists the job) says that has not been said."""
        if state.killed is not None or state.preempted or (state.running and row is not None and row.state.pending):
            return await self._preempted_or_ended(handle, state)
        if row is not None and row.state.pending:
            state.left_queue_at = None
            reason = _reason(row)
            if reason == state.waiting:
                return None
            state.waiting = reason
            return a.Waiting(reason)
        if row is not None and row.state.active:
            state.left_queue_at = None
            return None
        now = trio.current_time()  # trio's clock: the one its sleeps (and a test's virtual time) follow
        if state.left_queue_at is None:
            state.left_queue_at = now
            return None  # the shim's record may be a moment behind on a shared filesystem
        end = await self._slurm_end(handle)
        if end is not None:
            self.watched.pop(handle.slurm_id, None)
            return end
        if now - state.left_queue_at >= self.slurm.lost_after_s:
            self.watched.pop(handle.slurm_id, None)
            return a.Vanished(f"Slurm job {handle.slurm_id} left the queue with no exit record, and neither "
                              f"scontrol nor sacct knows how it ended")
        return None

    async def _preempted_or_ended(self, handle: SlurmHandle, state: _Watched) -> a.Input | None:
        """The job died of a signal we did not send, or Slurm queues it again after it ran:
        Slurm preempted it (requeued it, or says PREEMPTED), or it ended so. A requeued job is
        cancelled in Slurm (GPUPlane makes the next attempt, as the job's on_preempted policy
        says) and reported once nothing of it runs, so the next attempt never meets it."""
        try:
            detail = await _detail(self.cli, handle.slurm_id)
        except SlurmError as error:
            log.info("Slurm job %s: %s", handle.slurm_id, error)
            return None
        if state.preempted:  # its rerun is cancelled: reported once nothing of it runs
            if detail is not None and not detail.state.ended:
                return None
            self.watched.pop(handle.slurm_id, None)
            return a.Preempted(f"Slurm {state.preempted} (Slurm job {handle.slurm_id}); GPUPlane cancelled "
                               f"Slurm's own rerun: the job's on_preempted policy decides what comes next",
                               state.killed)
        requeued = detail is not None and (detail.restarts > 0 or detail.state.pending)
        if requeued or (detail is not None and detail.state.name == "PREEMPTED"):
            state.preempted = "preempted and requeued it" if requeued else "preempted it"
            await self.cancel(handle, through_starter=True)
            return None
        ended = detail is None or detail.state.ended
        waited = state.killed_at is not None and trio.current_time() - state.killed_at >= self.slurm.lost_after_s
        if state.killed is None or not (ended or waited):
            return None
        self.watched.pop(handle.slurm_id, None)
        if detail is not None and detail.state.name == "TIMEOUT":  # Slurm's time limit, not ours: still a timeout
            return a.ExitSeen(attrs.evolve(state.killed, reason=ExitReason.TIMEOUT))
        return a.ExitSeen(state.killed)

    async def _slurm_end(self, handle: SlurmHandle) -> a.Input | None:
        try:
            ends = await read_ends(self.cli, [handle.slurm_id])
        except SlurmError as error:
            log.info("Slurm job %s: its end is not known yet (%s)", handle.slurm_id, error)
            return None
        end = ends.get(handle.slurm_id)
        if end is None:
            return None
        # Its record may have landed meanwhile: the shim's word beats Slurm's.
        _, record = await self.blocking(_records, handle)
        if record is not None:
            return a.ExitSeen(record)
        return slurm_end(handle, end)

    async def watch_supervisor(self, handle: SlurmHandle) -> a.SupervisorEnded:
        with self.poller.watching(handle.slurm_id):
            while True:
                rows = await self.poller.next_round()
                row = None if rows is None else rows.get(handle.slurm_id)
                if rows is not None and (row is None or row.state.ended):
                    return a.SupervisorEnded()

    async def follow_remains(self, handle: SlurmHandle, started_here: bool,
                             cancels: Callable[[], int]) -> a.RemainsDone:
        return a.RemainsDone(followed=False)  # Slurm reaps what was left of the job with it

    # -- cancel ---------------------------------------------------------------------------

    async def cancel(self, handle: SlurmHandle, *, through_starter: bool) -> None:
        self.watched.setdefault(handle.slurm_id, _Watched()).cancelled = True
        backoff = Backoff(period_s=self.slurm.poll_interval_s, max_s=self.slurm.poll_max_s)
        while True:
            try:
                await scancel(self.cli, handle.slurm_id)
                return
            except SlurmUnreachable as error:
                unreachable(self.conditions, error)
                await trio.sleep(backoff.failed())
            except SlurmError as error:
                log.warning("scancel %s: %s", handle.slurm_id, error)
                return

    # -- adopt ----------------------------------------------------------------------------

    async def adopt(self, job_id: str, attempt: int, cancel_requested: bool, *,
                    sweep_limit: int | None = None) -> a.Adopt:
        job_dir = self.attempt_dir(job_id, attempt)
        try:
            array = await self.blocking(read_array_record, job_dir)  # a sweep's trial: a task of its array
        except ValueError as error:
            return a.Adopt(None, problem=str(error))
        name = job_name(job_id, attempt) if array is None else array.name
        backoff = Backoff(period_s=self.slurm.poll_interval_s, max_s=self.slurm.poll_max_s)
        fresh: list[str] = []  # arrays first found now: each takes the sweep's limit as it is now
        while True:  # whether Slurm has the job decides between adopting it and requeueing it
            try:
                found = await find_by_name(self.cli, name)
                if array is not None:
                    known = self.sweep_arrays.setdefault(array.sweep_id, set())
                    fresh += [array_id for array_id in found if array_id not in known]
                    known.update(found)
                    found = [task_id(array_id, array.index) for array_id in found]
                rows = await poll(self.cli, found) if found else {}
                break
            except SlurmUnreachable as error:
                unreachable(self.conditions, error)
                await trio.sleep(backoff.failed())
        answered(self.conditions)
        if array is not None and sweep_limit is not None:
            # A SweepThrottle sent while this node was away, or lost to a crash, holds from now.
            for array_id in fresh:
                await self._throttle_array(array.sweep_id, array_id, sweep_limit)
        try:
            runtime, record = await self.blocking(_records, SlurmHandle(job_id, attempt, "", job_dir))
        except CorruptRecord as error:
            return a.Adopt(None, problem=str(error))
        if not found:
            if runtime is None:
                return a.Adopt(None, cancel_requested=cancel_requested)  # never submitted: back to the queue
            handle = SlurmHandle(job_id, attempt, "0", job_dir)  # ran, and Slurm has forgotten it
            return a.Adopt(_running(runtime), handle, ended=True)
        handle = SlurmHandle(job_id, attempt, found[-1], job_dir)
        row = rows.get(handle.slurm_id)
        state = self.watched.setdefault(handle.slurm_id, _Watched(running=runtime is not None))
        if record is not None and runtime is not None and _killed_from_outside(record):
            # Killed while we were away: the watch asks Slurm whether it preempted it.
            return a.Adopt(_running(runtime), handle, alive=True, watchable=True)
        if record is not None or (row is not None and row.state.ended):
            return a.Adopt(_running(runtime) if runtime else Running(None, None, None), handle, ended=True)
        if runtime is None:
            reason = _reason(row) if row is not None else "Slurm: pending (no reason yet)"
            state.waiting = reason
            return a.Adopt(None, handle, waiting=reason, cancel_requested=cancel_requested)
        return a.Adopt(_running(runtime), handle, alive=True, watchable=True, cancel_requested=cancel_requested)

    # -- the end --------------------------------------------------------------------------

    async def read_end(self, job_id: str, attempt: int, record: a.ExitRecordFacts | None,
                       handle: SlurmHandle | None) -> a.EndRead:
        job_dir = self.attempt_dir(job_id, attempt)
        if record is None:
            try:
                record = await self.blocking(read_exit, job_dir, (job_id, attempt))
            except CorruptRecord as error:
                return a.EndRead(None, problem=str(error))
        if record is None and handle is not None and handle.slurm_id != "0":
            word = await self._slurm_end(handle)
            if isinstance(word, a.ExitSeen):
                record = word.record
            elif isinstance(word, a.Vanished):
                return a.EndRead(None, problem=word.message)
        if record is None:
            return a.EndRead(None)
        if record.succeeded:
            return a.EndRead(record)
        return a.EndRead(record, stderr_tail=await self.blocking(tail_text, job_dir / "stderr.log"))


def _killed_from_outside(record: ExitRecord) -> bool:
    """A death by a signal (its shim's SIGTERM counts as ``cancelled``), which a preemption
    looks like until Slurm says otherwise."""
    return record.reason in (ExitReason.CANCELLED, ExitReason.SIGNALED)


async def _detail(cli: SlurmCli, slurm_id: str) -> JobDetail | None:
    """What ``scontrol show job`` says of one job; None once Slurm has forgotten it."""
    try:
        out = await cli.run("scontrol", "-o", "show", "job", slurm_id)
    except SlurmCommandFailed as error:
        if INVALID_JOB_ID in error.stderr:
            return None
        raise
    return next((job for job in parse_scontrol_jobs(out.stdout)
                 if slurm_id in (job.job_id, f"{job.array_job_id}_{job.array_task}")), None)


def _reason(row: QueueRow) -> str:
    """Why Slurm holds a pending job, as the job's wait reason."""
    return f"Slurm: {row.reason}" if row.reason else f"Slurm: {row.state.name.lower()} (no reason yet)"


def _clear_records(job_dir: Path) -> None:
    for name in (RUNTIME_FILE, EXIT_FILE, ARRAY_RECORD):
        with contextlib.suppress(FileNotFoundError):
            (job_dir / name).unlink()


def _records(handle: SlurmHandle) -> tuple[Runtime | None, ExitRecord | None]:
    owner = (handle.job_id, handle.attempt)
    return read_runtime(handle.job_dir, owner), read_exit(handle.job_dir, owner)


def _running(runtime: Runtime) -> Running:
    """A job running under a one-shot shim: its pids mean something only on its own host."""
    here = runtime.host is None or runtime.host == os.uname().nodename
    return Running(runtime.pid if here else None, runtime.pgid if here else None, runtime.started_at,
                   runtime.shim_pid if here else None, runtime.shim_start_time if here else None, runtime.cwd)


def slurm_end(handle: SlurmHandle, end: JobEnd) -> a.Input:
    """Slurm's word on how a job without an exit record ended."""
    state = end.state.name
    if state in _NO_EXIT_STATUS:
        return a.Vanished(f"Slurm job {handle.slurm_id} ended {state}: {_NO_EXIT_STATUS[state]}")
    code, signum = end.exit_code.status, end.exit_code.signal
    if state == "CANCELLED":
        reason = ExitReason.CANCELLED
    elif state == "TIMEOUT":
        reason = ExitReason.TIMEOUT
    else:
        reason = ExitReason.SIGNALED if signum else ExitReason.EXITED
    name = signal.Signals(signum).name if signum and signum in signal.Signals._value2member_map_ else None
    return a.ExitSeen(ExitRecord(None if signum else code, signum or None, name, reason, time.time(), None,
                                 f"no exit record; Slurm says {state} ({end.source})", handle.job_id,
                                 handle.attempt))


@contextlib.asynccontextmanager
async def open_slurm_backend(config: Config, conditions: NodeConditions,
                             blocking: Blocking = trio.to_thread.run_sync,
                             cli: SlurmCli | None = None) -> AsyncIterator[SlurmBackend]:
    """The backend with its poller running, for as long as the runner runs. ``cli`` runs the
    Slurm commands (default: the configured clients; in tests, ``gpuplaned.testing.slurm.FakeSlurm``)."""
    bin_dir = config.slurm.bin_dir
    paths = SlurmPaths() if bin_dir is None else SlurmPaths(
        **{tool: str(bin_dir / tool) for tool in ("sbatch", "squeue", "scontrol", "scancel", "sacct", "sinfo")})
    cli = cli or SlurmCli(paths=paths, timeout_s=config.slurm.command_timeout_s)
    poller = _Poller(cli, config.slurm.poll_interval_s, config.slurm.poll_max_s, conditions)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(poller.run)
        yield SlurmBackend(config, cli, conditions, blocking, poller, nursery)
        nursery.cancel_scope.cancel()
