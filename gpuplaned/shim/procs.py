"""Process and file-descriptor primitives of the launcher and the shim: ``/proc``, signals
that tolerate a process already gone, pipes, and libc's ``prctl``.

Standard library only, like the rest of the package. The daemon uses ``read_proc_stat``
(through ``gpuplaned.launching.processes``) to tell a process by its start time.
"""

from __future__ import annotations

import ctypes
import os

TYPE_CHECKING = False  # typing costs the launcher, and so every shim, ~2 MB of heap
if TYPE_CHECKING:
    from typing import Any

PR_SET_CHILD_SUBREAPER = 36  # prctl(2)


def read_proc_stat(pid: int) -> tuple[str, int] | None:
    """``(state, starttime)`` from ``/proc/<pid>/stat``; None when there is no such process.

    The command name is in parentheses and may itself contain ``)`` or spaces, so the
    fields are counted after the last ``)``: state is field 3, starttime (clock ticks
    since boot) field 22.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat.rpartition(b")")[2].split()
    try:
        return fields[0].decode("ascii"), int(fields[19])
    except (IndexError, ValueError):
        return None


def kill(pid: int, signum: int, *, group: bool = False) -> None:
    """``os.kill`` (``os.killpg`` with ``group``) that ignores a process already gone."""
    try:
        if group:
            os.killpg(pid, signum)
        else:
            os.kill(pid, signum)
    except OSError:
        pass  # gone already, or no longer ours to signal


def children(parent: int | None = None) -> list[int]:
    """The direct children (zombies included) of ``parent`` (default: us)."""
    me = os.getpid() if parent is None else parent
    try:
        with open(f"/proc/{me}/task/{me}/children", "rb") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        pass
    found = []  # no CONFIG_PROC_CHILDREN: scan every process's parent
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    fields = f.read().rpartition(b")")[2].split()
                if int(fields[1]) == me:
                    found.append(int(name))
            except (OSError, IndexError, ValueError):
                continue
    return found


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def detach_fds(keep: list[int]) -> int:
    """Point fds 0-2 at /dev/null and close every other fd but ``keep``; returns /dev/null's.

    Holding the daemon's pipes would keep the daemon from seeing the launcher's EOF.
    """
    devnull = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    close_fds_except(sorted({devnull, *keep}))
    return devnull


def close_fds_except(keep: list[int]) -> None:
    """Close every fd from 3 up but those in ``keep`` (sorted)."""
    low = 3
    for fd in keep:
        if fd >= low:
            os.closerange(low, fd)
            low = fd + 1
    os.closerange(low, _max_fd())


def _max_fd() -> int:
    try:
        return max(os.sysconf("SC_OPEN_MAX"), 256)
    except (OSError, ValueError):
        return 65536


def load_libc() -> Any:
    """libc through ctypes (for ``prctl``); None where it cannot be loaded."""
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
