"""How anyone asks the store actor to write: ``await write(store_port, apply)``.

``apply(conn)`` runs inside the store's next write transaction (group commit) on its
thread; ``write`` returns its result once the transaction has committed, or raises what
``apply`` raised (that write alone is rolled back). Callers own their timeouts.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any, TypeVar

import attrs
import trio

from gpuplaned.runtime.call import Reply, call

T = TypeVar("T")


@attrs.frozen
class Write:
    """Run ``apply(conn)`` in the next write transaction; its return value is the reply."""

    apply: Callable[[sqlite3.Connection], Any]
    reply: Reply[Any]
    # A few rows by key (a job's state, a submit): committed on the event loop's own
    # thread, which costs far less than the hand-off to a worker thread and back. Only
    # when every write of a batch is small; never a write that scans or bulk-inserts.
    small: bool = False


class StoreUnavailable(Exception):
    pass


async def write(port: trio.MemorySendChannel[Any], apply: Callable[[sqlite3.Connection], T], *,
                small: bool = False) -> T:
    """Run ``apply`` in the store's next transaction; see ``Write.small``."""
    return await call(port, lambda reply: Write(apply, reply, small))
