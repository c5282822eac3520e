"""Processes that are not the daemon's children: a job's shim and what is left of a job.

A pid plus its start time (``/proc/<pid>/stat`` field 22) names one process, so a reused
pid is never mistaken for a job:

- ``process_start_time`` / ``is_same_process``: that identity;
- ``wait_process_exit``: wait for such a process to end (pidfd; polling without one);
- ``signal_shim``: cancel (SIGTERM) a job through its shim, refusing a reused pid (only for
  a job whose launcher is gone, and whose ``exit.json`` is not written: a shim takes no new
  job once its launcher is gone, nor before that file is written);
- ``job_processes`` / ``signal_process``: what is left of a job whose shim died first, to
  follow and to stop (``Launcher.orphan_exit`` tells how its main process ended, when the
  launcher, their subreaper, reaped it).
"""

from __future__ import annotations

import os
import signal
from typing import TYPE_CHECKING

import trio

from gpuplaned.protocol.discovery import pid_alive
from gpuplaned.shim.procs import read_proc_stat

if TYPE_CHECKING:
    from gpuplaned.launching.job_files import Runtime

POLL_INTERVAL_S = 0.2  # wait_process_exit without pidfds


def process_start_time(pid: int) -> int | None:
    """``/proc/<pid>/stat`` field 22 (clock ticks since boot); None if there is no such pid."""
    stat = read_proc_stat(pid)
    return None if stat is None else stat[1]


def is_same_process(pid: int, start_time: int | None) -> bool:
    """True while ``pid`` is the live (not zombie) process that started at ``start_time``.

    A pid that was reused by another process, or one that has exited, gives False.
    """
    if start_time is None:
        return False
    stat = read_proc_stat(pid)
    return stat is not None and stat[0] not in ("Z", "X") and stat[1] == start_time


def _open_pidfd(pid: int) -> int | None:
    """A pidfd for ``pid``; None when pidfds are unavailable.

    Raises:
        ProcessLookupError: there is no such process.
    """
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        raise
    except (AttributeError, OSError):
        return None


async def wait_process_exit(pid: int, start_time: int | None = None) -> None:
    """Return once ``pid`` has exited; it need not be our child.

    With ``start_time``, a pid that already names another process counts as exited. Uses a
    pidfd; polls every ``POLL_INTERVAL_S`` where pidfds are unavailable.

    Cancellation: safe; nothing is left behind.
    """
    try:
        fd = _open_pidfd(pid)
    except ProcessLookupError:
        await trio.lowlevel.checkpoint()
        return
    if fd is None:
        while is_same_process(pid, start_time) if start_time is not None else pid_alive(pid):
            await trio.sleep(POLL_INTERVAL_S)
        await trio.lowlevel.checkpoint()
        return
    try:
        # Checked after opening the pidfd, so the fd surely names the process we mean.
        if start_time is not None and not is_same_process(pid, start_time):
            await trio.lowlevel.checkpoint()
            return
        await trio.lowlevel.wait_readable(fd)
    finally:
        os.close(fd)


def signal_shim(shim_pid: int, shim_start_time: int | None, sig: int = signal.SIGTERM) -> bool:
    """Send ``sig`` to a job's shim (SIGTERM = cancel); False if that shim is gone.

    Refuses (False) when ``shim_pid`` now names another process (see ``signal_process``).
    """
    return signal_process(shim_pid, shim_start_time, sig)


def signal_process(pid: int, start_time: int | None, sig: int) -> bool:
    """Send ``sig`` to the process ``pid`` that started at ``start_time``; False if it is gone.

    Refuses (False) when ``pid`` now names another process. With pidfds the check and the
    signal address the same process, so a pid reused in between cannot be hit.
    """
    try:
        fd = _open_pidfd(pid)
    except ProcessLookupError:
        return False
    try:
        if not is_same_process(pid, start_time):
            return False
        if fd is not None:
            signal.pidfd_send_signal(fd, sig)
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        return False
    finally:
        if fd is not None:
            os.close(fd)
    return True


def job_processes(runtime: Runtime) -> list[tuple[int, int]]:
    """What is left of the job ``runtime`` describes once its shim is gone, as ``(pid, start
    time)``: the live processes of its process group, and the rest of its shim's session
    (those that left the group); [] once none is left. Zombies do not count.

    A group or session id stays taken while any process is in it, so a live process that
    holds the number as its pid, but started at another time than the job's main process
    (its shim), means the group (the session) is empty and the number has gone to another.
    Reads every ``/proc/<pid>/stat``: a few milliseconds.
    """
    table = _process_table()

    def empty(number: int, start_time: int | None) -> bool:
        held = table.get(number)
        return held is not None and held[3] != start_time

    group = None if empty(runtime.pgid, runtime.start_time) else runtime.pgid
    session = None if empty(runtime.shim_pid, runtime.shim_start_time) else runtime.shim_pid
    return [(pid, start) for pid, (state, pgrp, sid, start) in table.items()
            if state not in ("Z", "X") and pid != runtime.shim_pid and (pgrp == group or sid == session)]


def _process_table() -> dict[int, tuple[str, int, int, int]]:
    """Every process: pid -> (state, process group, session, start time), from ``/proc``."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rpartition(b")")[2].split()
            table[int(name)] = (fields[0].decode("ascii"), int(fields[2]), int(fields[3]), int(fields[19]))
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
    return table
