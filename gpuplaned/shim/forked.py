"""What the launcher holds of the processes it forks (shims, and the helpers that record a
failed spawn): their handles and pipes, and the stopping of one that is late to report.

Part of the launcher loop (``serve``); standard library only, like the rest of the package.
"""

from __future__ import annotations

import os
import select
import signal
import time

from .procs import children, kill, read_proc_stat

TYPE_CHECKING = False  # typing costs the launcher, and so every shim, ~2 MB of heap
if TYPE_CHECKING:
    from typing import Any

MAX_REPORT = 1024 * 1024  # a shim's report line, at most


class Shim:
    """A forked shim: it reads requests on ``spec_fd`` and reports on ``report_fd``.

    ``pidfd`` names it for signals even once it is gone (shims are reaped by the kernel,
    so a bare pid could be reused); None where pidfds are not available.
    """

    __slots__ = ("pid", "pidfd", "spec_fd", "report_fd", "jobs")

    def __init__(self, pid: int, pidfd: int | None, spec_fd: int, report_fd: int) -> None:
        self.pid = pid
        self.pidfd = pidfd
        self.spec_fd = spec_fd
        self.report_fd = report_fd
        self.jobs = 0  # requests handed to it

    def signal(self, signum: int) -> None:
        try:
            if self.pidfd is not None:
                signal.pidfd_send_signal(self.pidfd, signum)
            else:
                os.kill(self.pid, signum)
        except OSError:
            pass  # gone

    def close(self) -> None:
        """Let it go: EOF on its request pipe makes an idle shim exit."""
        os.close(self.spec_fd)
        os.close(self.report_fd)
        if self.pidfd is not None:
            os.close(self.pidfd)


class Running:
    """A started job's shim: its report pipe stays open until the shim writes the exit line.

    ``pid`` is the job's main process, as the shim reported it.
    """

    __slots__ = ("shim", "req_id", "data", "pid")

    def __init__(self, shim: Shim, req_id: Any, data: bytes, pid: Any = None) -> None:
        self.shim = shim
        self.req_id = req_id
        self.data = data
        self.pid = pid


class Waiting:
    """A process whose end (a report line, or EOF) a reply waits for.

    ``kind`` is ``"shim"`` (the reply is the shim's report) or ``"recorder"`` (a helper
    writing a spawn failure's ``exit.json``; the reply is ready in ``reply``).
    """

    __slots__ = ("kind", "pid", "fd", "deadline", "data", "req_id", "seq", "job_dir", "reply", "shim")

    def __init__(self, kind: str, pid: int, fd: int, deadline: float, req_id: Any, seq: Any,
                 job_dir: str, reply: dict[str, Any] | None = None, shim: Shim | None = None) -> None:
        self.kind = kind
        self.pid = pid
        self.fd = fd
        self.shim = shim
        self.deadline = deadline
        self.data = b""
        self.req_id = req_id
        self.seq = seq
        self.job_dir = job_dir
        self.reply = reply


def read_line(into: Waiting | Running, fd: int) -> bool:
    """Add what ``fd`` holds to ``into.data``; True once a line is whole (or EOF, or too long)."""
    chunk = read_some(fd)
    if chunk is None:
        return False
    into.data += chunk
    return not chunk or b"\n" in into.data or len(into.data) > MAX_REPORT


def read_some(fd: int) -> bytes | None:
    """A non-blocking read: None when nothing is there yet, b"" at EOF."""
    try:
        return os.read(fd, 65536)
    except (BlockingIOError, InterruptedError):
        return None
    except OSError:
        return b""


def stop_stuck(pid: int, fd: int, *, kill_job: bool) -> str | list[int]:
    """Kill a forked child of ours that is late with its report on ``fd``.

    Returns ``"gone"`` (it had exited), ``"reported"`` (its report came in after all; it
    was left running) or the pids of the job processes it had started, whose process
    groups were SIGKILLed along with it.

    While the child holds the write end of ``fd`` it is alive, so a pidfd opened before
    that check names it and no other process; it is stopped before its children are read,
    so none of them can be reaped (and its pid reused) before they are killed.
    """
    try:
        pidfd: int | None = os.pidfd_open(pid)
    except ProcessLookupError:
        return "gone"
    except (AttributeError, OSError):
        pidfd = None

    def send(signum: int) -> None:
        try:
            if pidfd is not None:
                signal.pidfd_send_signal(pidfd, signum)
            else:
                os.kill(pid, signum)
        except OSError:
            pass

    try:
        check = select.poll()
        check.register(fd, select.POLLIN)
        if check.poll(0):  # data or EOF: no longer stuck
            return "reported"
        send(signal.SIGSTOP)
        _wait_stopped(pid)
        if check.poll(0):
            send(signal.SIGCONT)
            return "reported"
        jobs = children(pid) if kill_job else []
        for child in jobs:
            kill(child, signal.SIGKILL, group=True)
            kill(child, signal.SIGKILL)
        send(signal.SIGKILL)
        return jobs
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _wait_stopped(pid: int, limit_s: float = 0.1) -> None:
    """Wait (briefly) until a process we sent SIGSTOP runs no more user code.

    Uninterruptible sleep counts: it stops on its way out of the kernel.
    """
    give_up = time.monotonic() + limit_s
    while True:
        stat = read_proc_stat(pid)
        if stat is None or stat[0] not in ("R", "S") or time.monotonic() >= give_up:
            return
        time.sleep(0.0005)
