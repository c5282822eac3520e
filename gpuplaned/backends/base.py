"""The interface every runner backend offers the runner, and what crosses it.

An attempt's handle is the backend's own (a launcher request and shim for the local backend,
a Slurm job for Slurm): the runner and the attempt machine keep it and hand it back, and read
of it only ``supervisor``, the words that name what watches over the job in a message.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import attrs

from gpuplaned.domain import attempts as a
from gpuplaned.launching.client import SpawnRequest
from gpuplaned.protocol.agent import ArrayTask


class StartRefused(Exception):
    """The backend could not start the attempt; ``message`` says why (the job's failure)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Handle(Protocol):
    @property
    def supervisor(self) -> str: ...


@attrs.frozen
class Running:
    """A job that runs: its main process and group, and what supervises it there (its
    shim's pid and start time), as far as the backend knows them."""

    pid: int | None
    pgid: int | None
    started_at: float | None
    supervisor_pid: int | None = None
    supervisor_start_time: int | None = None
    cwd: str | None = None


@attrs.frozen
class AttemptRequest:
    """One attempt to start: what it runs and where it keeps its files (``spawn``, the local
    launcher's request), and how many GPUs it asked for (a pooled node's backend asks its
    cluster for them; a local node's request names them in the job's environment)."""

    spawn: SpawnRequest
    gpus: int = 0
    array: ArrayTask | None = None  # a sweep's trial a pooled node runs as a task of the sweep's array job


@attrs.frozen
class Started:
    """What a start gave: the attempt's handle, and how it runs (None: queued by the backend)."""

    handle: Any
    running: Running | None


class RunnerBackend(Protocol):
    """One way to run attempts. Every method may be called for many attempts at once."""

    kind: str  # "local" | "slurm"

    def attempt_dir(self, job_id: str, attempt: int) -> Path:
        """Where the attempt keeps its output and its records."""
        ...

    async def start(self, request: AttemptRequest) -> Started:
        """Start one attempt. Raises ``StartRefused`` when it cannot."""
        ...

    async def watch(self, handle: Any) -> a.Input:
        """The backend's next word on a started or adopted attempt it can follow:
        ``ExitSeen``, ``WatchLost``; for one it queues, ``Waiting``, ``NowRunning``, ``Vanished``."""
        ...

    async def watch_supervisor(self, handle: Any) -> a.SupervisorEnded:
        """Wait until the attempt's supervisor is gone."""
        ...

    async def cancel(self, handle: Any, *, through_starter: bool) -> None:
        """Stop the attempt (see ``attempts.Stop``)."""
        ...

    async def follow_remains(self, handle: Any, started_here: bool, cancels: Callable[[], int]) -> a.RemainsDone:
        """Follow what is left of a job whose supervisor died (see ``attempts.FollowRemains``)."""
        ...

    async def throttle(self, sweep_id: str, max_parallel: int) -> None:
        """The sweep's max_parallel changed (0: no limit): a backend that runs the sweep's trials
        as its own array applies it there; one whose trials the server's queue holds does nothing."""
        ...

    async def adopt(self, job_id: str, attempt: int, cancel_requested: bool, *,
                    sweep_limit: int | None = None) -> a.Adopt:
        """After a restart, what the backend finds of an attempt the server says is active.
        ``sweep_limit``: a trial's sweep's max_parallel now (0: none), which a backend running
        trials as arrays applies to each array it finds (a SweepThrottle may have been missed)."""
        ...

    async def read_end(self, job_id: str, attempt: int, record: a.ExitRecordFacts | None,
                       handle: Any | None) -> a.EndRead:
        """How an attempt ended: its record (read when None), the tail of its stderr and
        whether the OOM killer killed it (``handle``: None when nothing of it was found)."""
        ...
