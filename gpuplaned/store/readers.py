"""Read connections used off the trio thread, so queries never wait on the writer's batch."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import trio

from gpuplaned.store.database import open_reader

T = TypeVar("T")


class Readers:
    """A small pool of read-only connections; ``await readers.run(fn)`` runs ``fn(conn)`` in a thread.

    ``fn`` runs in one read transaction: all its statements see the database as of one
    commit. Each statement on its own would see the latest, so a read of the names of a
    node's series, then of their points, could find points of a series it did not list.
    """

    def __init__(self, path: Path, size: int = 4) -> None:
        self._path = path
        self._limiter = trio.CapacityLimiter(size)
        self._idle: list[sqlite3.Connection] = []
        self._closed = False

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        async with self._limiter:
            if self._closed:
                raise RuntimeError("the store's readers are closed")
            conn = self._idle.pop() if self._idle else None

            def work() -> tuple[sqlite3.Connection | None, T | None, BaseException | None]:
                try:
                    c = conn or open_reader(self._path)
                except BaseException as exc:
                    return None, None, exc
                try:
                    c.execute("BEGIN")  # the snapshot is taken at the first read
                    try:
                        return c, fn(c), None
                    finally:
                        if c.in_transaction:
                            c.execute("COMMIT")
                except BaseException as exc:  # a failed query leaves the connection usable
                    return c, None, exc

            conn, result, error = await trio.to_thread.run_sync(work)
            if conn is not None:
                if self._closed:
                    conn.close()
                else:
                    self._idle.append(conn)
            if error is not None:
                raise error
            return result  # type: ignore[return-value]

    def close(self) -> None:
        self._closed = True
        while self._idle:
            self._idle.pop().close()
