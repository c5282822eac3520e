"""Broadcast: one publisher, many subscribers, none of whom can slow it down.

Owns: the fan-out of a stream of items (new log lines, live metrics) to any number of
followers (``logs -f``, SSE to browsers, MCP subscribers), each with its own bounded
queue.

Why not a memory channel per follower: a channel's ``send`` waits when the buffer is
full, so one stalled browser would stall the publisher, and ``send_nowait`` would make the
publisher choose what to do with a full follower. Here ``publish`` is synchronous and
never waits; the policy is fixed and the same for everyone: a subscriber that falls more
than ``maxlen`` items behind *skips ahead*. Its oldest items are dropped and the next
thing it receives is a ``Lagged(skipped=n)`` marker, then the newest items, so it knows
exactly how much it missed (cf. tractor's ``trionics/_broadcast.py`` and tokio's
``broadcast::RecvError::Lagged``).

Theory of operation:

* ``publish(item)`` appends the item to every subscriber's deque, dropping (and counting)
  that subscriber's oldest item when the deque is full, and wakes the subscriber if it is
  parked. It costs O(subscribers), allocates nothing per subscriber, and never checkpoints,
  so it is safe to call from any trio task, including one that must not be interrupted.
* A subscriber's ``__anext__`` parks on its own ``ParkingLot`` when its deque is empty.
  No task is spawned per subscriber: a subscription is just a deque, a counter and a
  parking lot, so a follower that vanishes (its task cancelled) leaves nothing behind
  once it has left the ``subscribe()`` block.
* Receiving is cancel-safe: an item is removed from the deque only when it is returned,
  so cancelling a waiting ``__anext__`` (for example a heartbeat timeout in
  ``gpuplaned.http.sse.sse_stream``) loses nothing.
* ``close()`` ends every subscription: each one receives what is still queued, then
  ``StopAsyncIteration``. Publishing after ``close()`` is the owner's bug and raises
  ``trio.ClosedResourceError``.

Example::

    lines: Broadcast[LogLine] = Broadcast()
    async with lines.subscribe(maxlen=1024) as sub:
        async for item in sub:
            if isinstance(item, Lagged):
                ...  # tell the user that item.skipped lines were skipped
            else:
                ...
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Generic, TypeVar

import attrs
import trio

__all__ = ["Broadcast", "BroadcastStatistics", "Lagged", "Subscription"]

T = TypeVar("T")


@attrs.frozen
class Lagged:
    """Marker received instead of ``skipped`` items dropped because the subscriber fell behind."""

    skipped: int


@attrs.frozen
class BroadcastStatistics:
    """``Broadcast.statistics()``.

    Attributes:
        subscribers: subscriptions currently open.
        published: items published since creation.
        dropped: items dropped from subscribers' queues, summed over subscribers
            (one item dropped for three lagging subscribers counts three).
    """

    subscribers: int
    published: int
    dropped: int


class Subscription(Generic[T]):
    """One subscriber's view of a ``Broadcast``: an async iterator of ``T | Lagged``.

    Created only by ``Broadcast.subscribe()``; valid inside that ``async with`` block.
    Iteration after the block has exited raises ``trio.ClosedResourceError``.
    """

    __slots__ = ("__weakref__", "_detached", "_ended", "_lot", "_maxlen", "_queue", "_skipped")

    def __init__(self, maxlen: int) -> None:
        self._maxlen = maxlen
        self._queue: deque[T] = deque()
        self._skipped = 0
        self._lot = trio.lowlevel.ParkingLot()
        self._ended = False  # the broadcast was closed: drain, then stop
        self._detached = False  # the subscribe() block was left

    @property
    def pending(self) -> int:
        """Items queued for this subscriber and not yet received."""
        return len(self._queue)

    def __aiter__(self) -> Subscription[T]:
        return self

    async def __anext__(self) -> T | Lagged:
        """Receive the next item, or a ``Lagged`` marker after items were dropped.

        Raises:
            StopAsyncIteration: the broadcast was closed and everything queued was received.
            trio.ClosedResourceError: the ``subscribe()`` block has already exited.

        Cancellation: cancel-safe. Nothing is removed from the queue unless it is returned.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        waited = False
        while True:
            if self._detached:
                raise trio.ClosedResourceError("this subscription's subscribe() block has exited")
            if self._skipped:
                item: T | Lagged = Lagged(self._skipped)
                self._skipped = 0
                break
            if self._queue:
                item = self._queue.popleft()
                break
            if self._ended:
                raise StopAsyncIteration
            await self._lot.park()
            waited = True
        if not waited:
            # Every trio async function is a schedule point; this one must not also become
            # a cancel point after the item left the queue.
            await trio.lowlevel.cancel_shielded_checkpoint()
        return item

    def _end(self) -> None:
        self._ended = True
        self._lot.unpark_all()

    def _detach(self) -> None:
        self._detached = True
        self._queue.clear()  # release the items now, not when the last reference goes
        self._lot.unpark_all()


class Broadcast(Generic[T]):
    """Fan items out to subscribers; a slow subscriber skips ahead, the publisher never waits.

    Owned by one actor (the publisher), which calls ``publish`` and eventually ``close``.
    Followers only ``subscribe``.
    """

    def __init__(self) -> None:
        # dict for insertion order: subscribers are served oldest first, deterministically.
        self._subs: dict[Subscription[T], None] = {}
        self._closed = False
        self._published = 0
        self._dropped = 0

    @property
    def closed(self) -> bool:
        return self._closed

    def publish(self, item: T) -> None:
        """Queue ``item`` for every current subscriber. Synchronous; never blocks or checkpoints.

        Raises:
            trio.ClosedResourceError: after ``close()``.
        """
        if self._closed:
            raise trio.ClosedResourceError("publish() after close()")
        self._published += 1
        for sub in self._subs:
            queue = sub._queue
            if len(queue) >= sub._maxlen:
                queue.popleft()
                sub._skipped += 1
                self._dropped += 1
            queue.append(item)
            if sub._lot:  # someone is parked in __anext__
                sub._lot.unpark_all()

    def close(self) -> None:
        """End every subscription after it has received what is queued. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for sub in self._subs:
            sub._end()

    @asynccontextmanager
    async def subscribe(self, maxlen: int = 1024) -> AsyncIterator[Subscription[T]]:
        """Open a subscription that receives items published from now on.

        Args:
            maxlen: the most items queued for this subscriber; beyond that the oldest are
                dropped and reported as one ``Lagged`` marker.

        Resource handling: leaving the block unsubscribes and frees the queue, whether it is
        left normally, by an exception or by cancellation. Subscribing to a closed
        broadcast gives a subscription that ends at once.
        """
        if maxlen < 1:
            raise ValueError(f"maxlen must be at least 1, got {maxlen}")
        sub: Subscription[T] = Subscription(maxlen)
        if self._closed:
            sub._ended = True
        self._subs[sub] = None
        try:
            yield sub
        finally:
            del self._subs[sub]
            sub._detach()

    def statistics(self) -> BroadcastStatistics:
        return BroadcastStatistics(
            subscribers=len(self._subs), published=self._published, dropped=self._dropped
        )
