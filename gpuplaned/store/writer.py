"""How anyone asks the store actor to write: ``await write(store_port, apply)``.

``apply(conn)`` runs inside the store's next write transaction (group commit) on its
thread; ``write`` returns its result once the transaction has committed, or raises what
``apply`` raised (that write alone is rolled back).

Two kinds of port. The actor's own inbox (``ports["store"]``) is for the daemon's internal
writes, such as a node's report that a job ended: they wait, however long the store is
down, and are committed when it runs again, so no state change is lost. A request's writes
go through a ``RequestPort`` (``gpuplaned.service.access.store_port``) and never wait for
a store that is down: one still queued when the store stops running (stopped, crashed,
FATAL) is given up and answered 503 ``store_unavailable``, and the store drops it, so a
refused request never changes anything later. Internal callers own their timeouts.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

import attrs
import trio

from gpuplaned.protocol.errors import ApiError, ErrorCode
from gpuplaned.runtime import eager
from gpuplaned.runtime.call import Answer, Reply, call
from gpuplaned.runtime.states import ActorState
from gpuplaned.store.change_topics import ChangeMarks

T = TypeVar("T")
log = logging.getLogger("gpuplaned.store")

STORE_UP = frozenset({ActorState.STARTING, ActorState.RUNNING})
STATE_POLL_S = 0.05  # how often a queued request's write looks whether the store still runs
# How long lazy writes wait for company. A short job's end follows its start within a few
# milliseconds: its start then rides in the transaction of its end (and the next dispatch)
# instead of one of its own. Long enough for that, far too short for anyone to see.
LAZY_WAIT_S = 0.02


class Ticket:
    """A request's hold on its write: the store takes it, or the caller gives it up; never both."""

    def __init__(self) -> None:
        self.taken = trio.Event()
        self.abandoned = False

    def take(self) -> bool:
        if self.abandoned:
            return False
        self.taken.set()
        return True

    def abandon(self) -> bool:
        """Give up unless the store has taken it already; True when given up."""
        if not self.taken.is_set():
            self.abandoned = True
        return self.abandoned


@attrs.frozen
class Write:
    """Run ``apply(conn)`` in the next write transaction; its return value is the reply."""

    apply: Callable[[sqlite3.Connection], Any]
    reply: Answer[Any]
    # A few rows by key (a job's state, a submit): committed on the event loop's own
    # thread, which costs far less than the hand-off to a worker thread and back. Only
    # when every write of a batch is small; never a write that scans or bulk-inserts.
    small: bool = False
    ticket: Ticket | None = None  # a request's write (``RequestPort``)
    # Nobody waits on it (a job's start, reported by ``NodeLink.report_soon``): a batch of
    # such writes alone waits up to ``LAZY_WAIT_S`` for another write to share its transaction.
    lazy: bool = False

    def take(self) -> bool:
        """What the store calls as it takes the write; False: its caller gave up, drop it."""
        return self.ticket is None or self.ticket.take()


class StoreUnavailable(Exception):
    pass


@attrs.define(eq=False)
class Rider:
    """What a request's first write takes into its own transaction: the request's audit record
    (``gpuplaned.http.audit_routes``), so that a change and the record of it commit together, in
    one transaction instead of two.

    ``apply`` is built before the request's handler runs: taking it must not await, or the
    write it rides with would be queued later than its caller counts on (a submit wakes the
    scheduler just before its insert is queued, so that the pass lands behind it). ``carried``:
    a write took it and committed. A write that fails gives it back to the next; once the
    handler has returned (``riding``), a write made later (by a task it left running) takes
    nothing.
    """

    apply: Callable[[sqlite3.Connection], None]
    carried: bool = False
    busy: bool = False  # a write has it in flight
    closed: bool = False  # the request's handler has returned

    @property
    def free(self) -> bool:
        return not (self.carried or self.busy or self.closed)


_RIDER: ContextVar[Rider | None] = ContextVar("gpuplane_store_rider", default=None)


@contextmanager
def riding(rider: Rider | None) -> Iterator[None]:
    """While the block runs, a write through a ``RequestPort`` in this context takes ``rider``."""
    token = _RIDER.set(rider)
    try:
        yield
    finally:
        _RIDER.reset(token)
        if rider is not None:
            rider.closed = True


def _carrying(apply: Callable[[sqlite3.Connection], T],
              extra: Callable[[sqlite3.Connection], None]) -> Callable[[sqlite3.Connection], tuple[T, bool]]:
    def both(conn: sqlite3.Connection) -> tuple[T, bool]:
        result = apply(conn)  # raises: the savepoint takes both back
        try:
            extra(conn)
        except Exception:  # noqa: BLE001 - the change goes on; its rider is written apart
            log.exception("a request's write could not carry its rider; it is written after the reply")
            return result, False
        return result, True
    return both


def store_unavailable(message: str, **details: Any) -> ApiError:
    return ApiError(ErrorCode.STORE_UNAVAILABLE, message, {"actor": "store", **details})


class RequestPort:
    """The store as a request reaches it: see the module docstring."""

    def __init__(self, port: trio.MemorySendChannel[Any], state: Callable[[], ActorState]) -> None:
        """``state``: the store actor's state now."""
        self.port = port
        self._state = state

    def send_nowait(self, message: Write) -> None:
        """Queue a write nobody waits for (a token's last use)."""
        self.port.send_nowait(message)

    async def write(self, apply: Callable[[sqlite3.Connection], T], small: bool) -> T:
        """Raises:
            ApiError: ``store_unavailable`` when the store stopped running before it took
                the write, or before it committed it; nothing was written then.
        """
        rider = _RIDER.get()
        if rider is None or not rider.free:
            return await self._write(apply, small)
        rider.busy = True  # this write takes it; given back unless it commits
        try:
            result, rider.carried = await self._write(_carrying(apply, rider.apply), small)
            return result
        finally:
            rider.busy = False

    async def _write(self, apply: Callable[[sqlite3.Connection], T], small: bool) -> T:
        ticket, reply = Ticket(), Reply[Any]()
        try:
            await self._send(Write(apply, reply, small, ticket))
            await self._settled(ticket, reply)
        except trio.Cancelled:
            if ticket.abandon():
                raise
            # Taken just as the request was cancelled: it commits, so see it through and let
            # the caller act on it (a submit delivers its dispatch); trio cancels it again
            # at its next checkpoint.
        if ticket.abandon():
            state = self._state()
            raise store_unavailable(f"the store actor went {state.value} before it took this write; nothing was "
                                    "changed: retry once it runs again", state=state.value)
        with trio.CancelScope(shield=True):  # taken: the commit is under way
            try:
                return await reply.wait()
            except StoreUnavailable as exc:
                raise store_unavailable(f"{exc}; nothing was changed: retry once it runs again") from None

    async def _send(self, message: Write) -> None:
        """Queue ``message``, waiting for room (backpressure) while the store runs."""
        while self._state() in STORE_UP:
            with trio.move_on_after(STATE_POLL_S):  # a cancelled send sends nothing
                await eager.send(self.port, message)
                return

    async def _settled(self, ticket: Ticket, reply: Reply[Any]) -> None:
        """Return once the write is answered, or the store stopped running before it took it.
        One wait for both (the store taking the write wakes nobody)."""
        while not reply.done and (ticket.taken.is_set() or self._state() in STORE_UP):
            with trio.move_on_after(STATE_POLL_S):
                await reply.settled()


async def write(port: trio.MemorySendChannel[Any] | RequestPort, apply: Callable[[sqlite3.Connection], T], *,
                small: bool = False) -> T:
    """Run ``apply`` in the store's next transaction; see ``Write.small`` and the module docstring."""
    if isinstance(port, RequestPort):
        return await port.write(apply, small)
    return await call(port, lambda reply: Write(apply, reply, small))


def commit_batch(conn: sqlite3.Connection, batch: list[Write],
                 marks: ChangeMarks | None = None) -> list[tuple[bool, Any]]:
    """The store actor's group commit, on its worker thread: the batch in one transaction, each
    write in a savepoint of its own (a batch of one: the transaction alone), so a write that
    raises is undone alone and its caller gets the error. Returns ``(ok, result or error)`` per
    write. ``marks``: the change triggers' (``change_topics.track``), told which writes were
    kept and which undone; the caller takes them after the commit."""
    if len(batch) == 1:
        return [_commit_one(conn, batch[0], marks)]
    outcomes: list[tuple[bool, Any]] = []
    conn.execute("BEGIN IMMEDIATE")
    try:
        for item in batch:
            conn.execute("SAVEPOINT write")
            try:
                result = item.apply(conn)
            except Exception as exc:  # noqa: BLE001 - reported to that write's caller
                conn.execute("ROLLBACK TO write")
                conn.execute("RELEASE write")
                if marks is not None:
                    marks.undo()
                outcomes.append((False, exc))
            else:
                conn.execute("RELEASE write")
                if marks is not None:
                    marks.keep()
                outcomes.append((True, result))
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return outcomes


def _commit_one(conn: sqlite3.Connection, item: Write, marks: ChangeMarks | None) -> tuple[bool, Any]:
    """A batch of one write: its transaction serves as its savepoint, two statements fewer (in a
    drain most batches are one job's report or one scheduling pass)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        try:
            result = item.apply(conn)
        except Exception as exc:  # noqa: BLE001 - reported to that write's caller
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            if marks is not None:
                marks.undo()
            return False, exc
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return True, result
