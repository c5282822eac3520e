"""Owner-death monitoring for ``--owner-pid``: shut down when the process that owns us dies.

Three layers, fastest first (seed 003): PR_SET_PDEATHSIG when the owner is our parent (the
kernel sends SIGTERM, which takes the ordinary signal path); a pidfd that becomes readable
when the owner exits; and, where pidfds are unavailable, polling twice a second. The watcher
only reports; the daemon's one shutdown path does the rest.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
from collections.abc import Callable

import trio

from gpuplaned.protocol.discovery import pid_alive

log = logging.getLogger("gpuplaned.owner")

_PR_SET_PDEATHSIG = 1
POLL_INTERVAL = 0.5


def set_parent_death_signal(owner_pid: int) -> bool:
    """Ask the kernel for SIGTERM when our parent dies, if the owner is our parent."""
    if os.getppid() != owner_pid:
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    return True


async def watch_owner(owner_pid: int, on_death: Callable[[str], None]) -> None:
    """Call ``on_death(reason)`` once ``owner_pid`` has exited; returns after that."""
    if set_parent_death_signal(owner_pid) and os.getppid() != owner_pid:
        on_death(f"owner process {owner_pid} exited")  # it died before prctl took effect
        return
    try:
        fd = os.pidfd_open(owner_pid)
    except (AttributeError, OSError) as exc:
        if isinstance(exc, ProcessLookupError):
            on_death(f"owner process {owner_pid} exited")
            return
        log.info("no pidfd for owner %d (%s); polling", owner_pid, exc)
        while pid_alive(owner_pid):
            await trio.sleep(POLL_INTERVAL)
    else:
        try:
            await trio.lowlevel.wait_readable(fd)
        finally:
            os.close(fd)
    on_death(f"owner process {owner_pid} exited")
