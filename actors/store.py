"""The store actor: the only SQLite writer.

Owns: the write connection to ``$GPUPLANE_HOME/gpuplane.db`` and its migrations.
Inputs: ``Write`` messages on its inbox, each a function to run inside the write transaction.
Outputs: each ``Write``'s reply, resolved only after its transaction has committed.
Restart: permanent; a crash fails the replies of the batch in flight and nothing else.
Ready: the database is open, checked and migrated; ``started()`` passes a ``StoreHandle``.
Changes: the topics each committed batch changed (``gpuplaned.store.change_topics``, triggers
on this connection) are published on ``shared.changes`` after its commit; a batch rolled back
publishes nothing.

Group commit: the actor takes one message, then everything else already queued (up to
``store.max_batch``), and runs the lot in one transaction on a worker thread. Each write
runs inside its own SAVEPOINT, so one failing write is rolled back and reported alone.
A batch of small writes only (``Write.small``: a job's state, a submit) is committed on
the event loop's thread instead: a few rows take far less time than the two thread
hand-offs. So that no commit there ever copies the write-ahead log into the database,
SQLite's automatic checkpoints are off and the actor checkpoints on a worker thread at
most every ``CHECKPOINT_INTERVAL_S`` after commits.
On a stop request it drains the inbox into a last batch before closing.
A request's write that its caller gave up on (``Write.take``: the store was down or slow
to reach it) is dropped as it is taken, never applied.
"""

from __future__ import annotations

import logging
import math
import sqlite3
from typing import Any

import attrs
import trio

from gpuplaned.runtime.context import IDLE, ActorContext
from gpuplaned.service.context import Storing
from gpuplaned.store import change_topics
from gpuplaned.store.change_topics import ChangeMarks
from gpuplaned.store.database import checkpoint, open_writer, schema_version
from gpuplaned.store.writer import LAZY_WAIT_S, StoreUnavailable, Write, commit_batch

log = logging.getLogger("gpuplaned.store")

CHECKPOINT_INTERVAL_S = 1.0


@attrs.frozen
class StoreStats:
    schema_version: int
    batches: int
    writes: int
    failed_writes: int
    largest_batch: int
    last_commit_ms: float
    queued: int
    db_bytes: int
    checkpoints: int


class StoreHandle:
    def __init__(self, conn: sqlite3.Connection, ctx: ActorContext[Storing], db_path: Any, marks: ChangeMarks) -> None:
        self._conn = conn
        self._ctx = ctx
        self._db_path = db_path
        self.marks = marks
        self.changes = ctx.shared.changes
        self.schema_version = schema_version(conn)
        self.batches = 0
        self.writes = 0
        self.failed_writes = 0
        self.largest_batch = 0
        self.last_commit_ms = 0.0
        self.checkpointed_at = trio.current_time()
        self.unchecked = False  # commits since the last checkpoint
        self.checkpoints = 0

    def statistics(self) -> StoreStats:
        size = 0
        for suffix in ("", "-wal"):
            try:
                size += (self._db_path.parent / (self._db_path.name + suffix)).stat().st_size
            except OSError:
                pass
        return StoreStats(
            schema_version=self.schema_version,
            batches=self.batches,
            writes=self.writes,
            failed_writes=self.failed_writes,
            largest_batch=self.largest_batch,
            last_commit_ms=round(self.last_commit_ms, 3),
            queued=self._ctx.inbox.statistics().current_buffer_used,
            db_bytes=size,
            checkpoints=self.checkpoints,
        )


async def run(ctx: ActorContext[Storing], *, task_status: trio.TaskStatus[StoreHandle] = trio.TASK_STATUS_IGNORED) -> None:
    cfg = ctx.shared.config
    db_path = cfg.db_path
    conn = await trio.to_thread.run_sync(open_writer, db_path)
    marks = change_topics.track(conn)
    handle = StoreHandle(conn, ctx, db_path, marks)
    batch: list[Write] = []
    try:
        log.info("store ready: %s (schema version %d)", db_path, handle.schema_version)
        task_status.started(handle)
        while True:
            # After commits, an idle store checkpoints once the interval is up.
            due = handle.checkpointed_at + CHECKPOINT_INTERVAL_S if handle.unchecked else math.inf
            first = await ctx.receive_or_stop(due)
            if first is None:
                break
            if first is IDLE:
                await _checkpoint(conn, handle)
                continue
            # Let the tasks woken with this write queue theirs first: a job's end wakes the
            # scheduler just before its report is sent, and trio runs the two in either order,
            # so half the time the pass took a transaction of its own.
            await trio.lowlevel.cancel_shielded_checkpoint()
            batch = [first] if first.take() else []
            _take_queued(ctx, batch, cfg.store.max_batch)
            if batch and all(item.lazy for item in batch):
                # Nobody waits on these: give the next write a moment to share their transaction.
                more = await ctx.receive_or_stop(trio.current_time() + LAZY_WAIT_S)
                if isinstance(more, Write):
                    await trio.lowlevel.cancel_shielded_checkpoint()  # as above: a job's end wakes the scheduler
                    if more.take():
                        batch.append(more)
                    _take_queued(ctx, batch, cfg.store.max_batch)
            if batch:
                await _commit(conn, handle, batch)
            batch = []
            if handle.unchecked and trio.current_time() - handle.checkpointed_at >= CHECKPOINT_INTERVAL_S:
                await _checkpoint(conn, handle)
        # Stop requested: what is already queued still gets committed.
        _take_queued(ctx, batch, math.inf)
        if batch:
            await _commit(conn, handle, batch)
            batch = []
    finally:
        for item in batch:
            item.reply.fail(StoreUnavailable("the store stopped before this write committed"))
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(conn.close)


def _take_queued(ctx: ActorContext[Storing], batch: list[Write], most: float) -> None:
    """Add the writes already queued to ``batch``, up to ``most`` in all (those whose callers
    gave up are dropped)."""
    while len(batch) < most:
        try:
            item = ctx.inbox.receive_nowait()
        except (trio.WouldBlock, trio.EndOfChannel):
            return
        if item.take():
            batch.append(item)


async def _commit(conn: sqlite3.Connection, handle: StoreHandle, batch: list[Write]) -> None:
    start = trio.current_time()
    # Not cancellable: a batch half-handed to SQLite finishes (it is one transaction either way).
    try:
        if all(w.small for w in batch):
            outcomes = commit_batch(conn, batch, handle.marks)
        else:
            outcomes = await trio.to_thread.run_sync(commit_batch, conn, batch, handle.marks)
    except BaseException:
        handle.marks.discard()  # rolled back: nothing of it happened
        raise
    changed = handle.marks.take()
    if changed and not handle.changes.closed:  # before the replies: whoever one wakes finds it published
        handle.changes.publish(changed)
    handle.last_commit_ms = (trio.current_time() - start) * 1000
    handle.unchecked = True
    handle.batches += 1
    handle.writes += len(batch)
    handle.largest_batch = max(handle.largest_batch, len(batch))
    for item, (ok, value) in zip(batch, outcomes, strict=True):
        if ok:
            item.reply.resolve(value)
        else:
            handle.failed_writes += 1
            item.reply.fail(value)
    batch.clear()


async def _checkpoint(conn: sqlite3.Connection, handle: StoreHandle) -> None:
    try:
        await trio.to_thread.run_sync(checkpoint, conn)
    except sqlite3.Error as exc:  # the log stays; readers still see everything
        log.warning("checkpoint of the write-ahead log failed: %s", exc)
    handle.checkpointed_at = trio.current_time()
    handle.unchecked = False
    handle.checkpoints += 1
