"""A job whose shim died first: is it still running, and following it to its end.

Its processes are found by its process group and its shim's session
(``processes.job_processes``); ``follow`` does what the dead shim would have done: stops
them on a cancel or at the job's timeout (SIGTERM, the grace period, SIGKILL; a second
cancel kills at once), and SIGKILLs what is left once the main process has ended.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from gpuplaned.domain.failures import ExitReason
from gpuplaned.launching.job_files import Runtime
from gpuplaned.launching.processes import is_same_process, job_processes, signal_process

POLL_S = 0.25  # how often the processes of a job whose shim died are looked for


def still_runs(runtime: Runtime) -> bool:
    """Whether the job of ``runtime``, whose ``exit.json`` is not written, still runs: under
    its shim, or on its own after its shim died."""
    if runtime.shim_start_time is not None and is_same_process(runtime.shim_pid, runtime.shim_start_time):
        return True
    return bool(job_processes(runtime))


async def follow(runtime: Runtime, left: list[tuple[int, int]], cancels: Callable[[], int],
                 blocking: Callable[..., Awaitable[Any]] = trio.to_thread.run_sync) -> ExitReason | None:
    """Wait until none of ``left`` (the job's processes, ``job_processes(runtime)``) is left,
    stopping them after ``cancels()`` cancels or at the job's timeout. Returns ``CANCELLED``
    or ``TIMEOUT`` when it stopped the job. ``blocking`` runs the ``/proc`` scans."""
    stopping: ExitReason | None = None
    kill_at: float | None = None
    timeout_at = None if runtime.timeout_s is None else runtime.started_at + runtime.timeout_s
    while left:
        now = time.time()  # runtime.json's times are wall-clock ones
        asked = cancels()
        if stopping is None and (asked or (timeout_at is not None and now >= timeout_at)):
            stopping = ExitReason.CANCELLED if asked else ExitReason.TIMEOUT
            kill_at = now + runtime.grace_s
            signal_all(left, signal.SIGTERM)
        main_ended = runtime.start_time is not None and (runtime.pid, runtime.start_time) not in left
        if main_ended or asked > 1 or (kill_at is not None and now >= kill_at):
            signal_all(left, signal.SIGKILL)
        await trio.sleep(POLL_S)
        left = await blocking(job_processes, runtime)
    return stopping


def signal_all(processes: list[tuple[int, int]], signum: int) -> None:
    for pid, start_time in processes:
        signal_process(pid, start_time, signum)
        if signum == signal.SIGTERM:
            signal_process(pid, start_time, signal.SIGCONT)  # a stopped process cannot act on SIGTERM
