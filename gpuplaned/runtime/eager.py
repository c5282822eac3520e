"""Trio operations that take no turn of the scheduler when they need not wait.

trio's own ``send``, ``acquire`` and ``send_all`` always yield once, even when the channel has
room, the lock is free or the socket takes every byte. On the job path and a request's path
each such yield is a task step (a job took ~17, a POST's request task 13.6 before these), so
where the caller waits for an answer anyway these do the operation at once and yield only when
they must wait. A caller cancelled before sending sends nothing, as with trio's.
"""

from __future__ import annotations

import os
from typing import Any

import trio


async def send(port: trio.MemorySendChannel[Any], message: Any) -> None:
    """``port.send(message)``: put on the channel at once when it has room."""
    await trio.lowlevel.checkpoint_if_cancelled()
    try:
        port.send_nowait(message)
    except trio.WouldBlock:
        await port.send(message)


async def acquire(lock: trio.Lock) -> None:
    """``lock.acquire()``: taken at once when it is free."""
    if lock.locked():
        await lock.acquire()
    else:
        lock.acquire_nowait()


async def write(fd: int, stream: trio.abc.SendStream, data: bytes) -> None:
    """All of ``data`` to ``stream``, whose descriptor is ``fd``: written straight into ``fd``
    while it has room (a request or a reply is far smaller than a pipe's or a socket's buffer),
    the rest through ``stream``. Not for a stream that transforms its bytes (TLS).

    Raises:
        trio.BrokenResourceError: the far end is gone (EPIPE, ECONNRESET), or ``fd`` was
            closed here (EBADF).
    """
    if not data:
        return
    try:
        sent = os.write(fd, data)
    except BlockingIOError:
        sent = 0
    except OSError as exc:
        raise trio.BrokenResourceError(exc) from exc
    if sent < len(data):
        await stream.send_all(memoryview(data)[sent:])
